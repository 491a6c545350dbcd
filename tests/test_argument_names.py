"""Every message names the argument the user passed wrongly.

A 2-D ``reward`` broadcast against a 1-D ``ref`` used to be reported as "`ref` must be
one distribution (1-D); got shape (2, 3)"; an advantage of 1e308 in a trust-region step
as `kl` and `reward` (the inner ``beta_for_kl`` call's names).
"""

import re
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from klpolicy.calibration import calibration_threshold

from klpolicy import beta_for_kl, control, diversity
from klpolicy.best_of_n import overoptimization as O
from klpolicy.estimators import grpo_expected_update, grpo_fixed_point
from klpolicy.preference import (
    LOSSES,
    fit_dpo_online,
    ipo_loss,
    ipo_loss_grad,
    population_optimum,
    sample_preference_counts,
)
from klpolicy.testing.strategies import distributions
from klpolicy.trust_region import trust_region_beta, trust_region_step

REF = [0.5, 0.3, 0.2]
R1 = [1.0, 0.0, -1.0]
R2 = [[1.0, 0.0, -1.0], [0.0, 1.0, 2.0]]
ONE = "must be one problem's 1-D array (shape (V,)); got shape (2, 3)"

CASES = [
    (lambda: control.simulate(control.FixedKLController(0.5), REF, R2, steps=2), "reward"),
    (lambda: control.simulate(control.FixedKLController(0.5), R2, R1, steps=2), "ref"),
    (
        lambda: control.compare_controllers(
            {"f": control.FixedKLController(0.5)}, REF, R2, steps=2
        ),
        "reward",
    ),
    (lambda: control.kl_elasticity(REF, R2, 0.5), "reward"),
    (
        lambda: control.stability_region(
            REF, R2, 0.1, lags=[0.0], horizons=[10.0], init_kl_coef=0.1, steps=2
        ),
        "reward",
    ),
    (lambda: O.closed_form_sweep(REF, R2, R1, [1.0]), "proxy"),
    (lambda: O.closed_form_sweep(REF, R1, R2, [1.0]), "gold"),
    (lambda: O.best_of_n_sweep(REF, R1, R2, [1, 2]), "gold"),
    (lambda: grpo_fixed_point(REF, R2, 1.0), "reward"),
    (lambda: grpo_expected_update(REF, REF, R2, 1.0), "reward"),
    (lambda: grpo_expected_update(R2, REF, R1, 1.0), "pi"),
    (lambda: diversity.diversity_curve(REF, R2, beta=[1.0]), "reward"),
    (lambda: diversity.best_of_n_diversity(REF, R2, [1, 2]), "reward"),
]


@pytest.mark.parametrize(("call", "name"), CASES)
def test_a_batch_is_reported_under_the_name_the_user_gave(call, name):
    with pytest.raises(ValueError, match="^" + re.escape(f"`{name}` {ONE}") + "$"):
        call()


@pytest.mark.parametrize("constraint", ["mirror", "trpo"])
def test_trust_region_step_with_a_huge_advantage(constraint):
    # both steps are invariant under A -> A / c: an advantage of 1e308 is (1, -1)
    got = trust_region_step([0.5, 0.5], [1e308, -1e308], 0.1, constraint=constraint)
    want = trust_region_step([0.5, 0.5], [1.0, -1.0], 0.1, constraint=constraint)
    assert got == pytest.approx(want, rel=1e-14)
    # its multiplier, beta = 1e308 x that of (1, -1), is no float: named as delta/advantage
    msg = r"^`delta` = 0\.1 is spent only at a beta above the largest float64 for row 0; "
    with pytest.raises(ValueError, match=msg + r"scale `advantage` down$"):
        trust_region_beta([0.5, 0.5], [1e308, -1e308], 0.1, constraint=constraint)


def test_calibration_threshold_does_not_advise_the_metric_in_use():
    msg = r"^the reference's brier is 0 \(it is calibrated\), so no multiple of it is reached; "
    with pytest.raises(ValueError, match=msg + r"no `factor` of it is a threshold$"):
        calibration_threshold([1, 0], [0.0, 1.0])


# internal errors that escaped (IndexError, OverflowError, AttributeError,
# a message naming the internal `policy`) are ValueErrors naming the argument
P3 = [[0.5, 0.7, 0.8], [0.3, 0.5, 0.6], [0.2, 0.4, 0.5]]

ESCAPES = [
    (
        lambda: sample_preference_counts([[0.5, 0.7], [0.3, 0.5]], 0.5, 10, rng=0),
        "`mu` must be a distribution over the outcomes (1-D) or a joint law of pairs (2-D); "
        "got shape ()",
    ),
    (
        lambda: population_optimum(REF, P3, 1.0, loss="bco_pair", delta=1e308),
        "`delta` must be a number in [-9.0072e+15, 9.0072e+15]; got 1e+308",
    ),
    (
        lambda: fit_dpo_online(REF, P3, 1e308, rounds=1, pairs_per_round=10, rng=0),
        "`beta` = 1e+308 with `lr` = 1.0: gradient descent leaves the floats at step 1 "
        "(each step moves the logits by up to lr x beta); lower `lr` or `beta`",
    ),
    (
        lambda: O.gold_peak(None),
        "`curve` must be an OptimizationCurve (from closed_form_sweep or best_of_n_sweep); "
        "got None",
    ),
]


@pytest.mark.parametrize(("call", "msg"), ESCAPES)
def test_escaped_errors_are_value_errors_naming_the_argument(call, msg):
    with pytest.raises(ValueError, match="^" + re.escape(msg) + "$"):
        call()


def test_discopop_at_a_huge_tau_is_its_limit():
    # tau**2 overflowed a Python float (OverflowError); the loss tends to a limit in 1/tau
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        far = population_optimum(REF, P3, 1.0, loss="discopop", tau=1e308)
    near = population_optimum(REF, P3, 1.0, loss="discopop", tau=1e12)
    np.testing.assert_allclose(far, near, rtol=1e-10)


def test_distributions_with_a_subnormal_min_entry():
    # 0.9 / (min_entry * max_size) was inf (OverflowError converting it to an int)
    seen = []

    @settings(max_examples=60, database=None, derandomize=True)
    @given(distributions(min_entry=1e-320, max_size=4))
    def draw(p):
        assert p.sum() == pytest.approx(1.0, abs=1e-12) and (p >= 0).all()
        seen.append(p[p > 0].min())

    draw()
    assert len(seen) == 60 and min(seen) >= 1e-320


# complex input refused by name; no RuntimeWarning beside a right answer
def test_solve_table_refuses_complex_input_by_name():
    from klpolicy.app.tables import solve_table

    msg = "must be an array of real numbers; got dtype complex128 (complex numbers)"
    with pytest.raises(ValueError, match=re.escape(f"`reward` {msg}")):
        solve_table([0.5, 0.5], [1 + 1j, 0], [1.0])
    with pytest.raises(ValueError, match=re.escape(f"`ref` {msg}")):
        solve_table(np.array([0.5, 0.5], dtype=complex), [1.0, 0.0], [1.0])


QUIET = [
    (lambda: ipo_loss(-1e308, 0.0, 0.0, 0.0, 0.1), np.inf),
    (lambda: ipo_loss(0.0, -1e308, 0.0, 0.0, 0.1), np.inf),
    (lambda: ipo_loss_grad(-1e308, 0.0, 0.0, 0.0, 0.1).policy_chosen, -np.inf),
    (lambda: ipo_loss_grad(0.0, -1e308, 0.0, 0.0, 0.1).policy_chosen, np.inf),
    # beta = sd / sqrt(2 kl) for small kl; 1e-320 is the subnormal 9.99988671826831e-321
    (lambda: beta_for_kl([0.5, 0.5], [1.0, 0.0], 1e-320), 0.5 / np.sqrt(2 * 1e-320)),
    (lambda: trust_region_step([0.5, 0.5], [1.0, 0.0], 1e-320)[0], 0.5),
    (lambda: trust_region_step([0.5, 0.5], [1.0, 0.0], 1e-320, constraint="trpo")[0], 0.5),
    (lambda: LOSSES["discopop"].value(1e308, 0.0, 0.0, 0.0, 1.0), 0.0),
    (lambda: LOSSES["discopop"].value(-1e308, 0.0, 0.0, 0.0, 1.0), 1e308),
    (lambda: LOSSES["discopop"].value(-1e308, 0.0, 0.0, 0.0, 1e3), np.inf),
    (lambda: LOSSES["sigmoid"].value(1e308, 0.0, 0.0, 0.0, 1e3), 0.0),
    (lambda: LOSSES["robust"].value(1e308, 0.0, 0.0, 0.0, 1e3), 0.0),
    (lambda: LOSSES["exo_pair"].value(1e308, 0.0, 0.0, 0.0, 1e3), -np.log1p(-1e-3)),
]


@pytest.mark.parametrize(("call", "want"), QUIET)
def test_extremes_give_the_limit_without_warnings(call, want):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = float(call())
    assert got == pytest.approx(want, rel=1e-12)
