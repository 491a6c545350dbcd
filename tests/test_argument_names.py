"""Every message names the argument the user passed wrongly (issue 26, item 10).

A 2-D ``reward`` broadcast against a 1-D ``ref`` used to be reported as "`ref` must be
one distribution (1-D); got shape (2, 3)"; an advantage of 1e308 in a trust-region step
as `kl` and `reward` (the inner ``beta_for_kl`` call's names).
"""

import re

import pytest
from klpolicy.calibration import calibration_threshold

from klpolicy import control, diversity
from klpolicy.best_of_n import overoptimization as O
from klpolicy.estimators import grpo_expected_update, grpo_fixed_point
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
