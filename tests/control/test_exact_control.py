"""Control's analytic figures against mpmath.

Recipe (tests/_mpref/closed_form.py): pi*_beta in 400 digits; kl_elasticity = -d log KL / d log beta
= Var_pi(r) / (beta^2 KL(pi || ref)), from R.tilt_moments and R.optimal_kl.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from hypothesis import assume, given, settings

import klpolicy as kp
from klpolicy.control import kl_elasticity, stability_region
from klpolicy.testing.strategies import problems

from .. import _mpref as R


def _mp_elasticity(ref, rew, beta):
    with mp.workdps(R.DPS):
        _, var, _ = R.tilt_moments(ref, rew, beta)
        return float(var / (R.optimal_kl(ref, rew, beta) * mp.mpf(float(beta)) ** 2))


def test_kl_elasticity_at_tiny_beta_and_huge_rewards():
    # was ZeroDivisionError (beta * beta underflows) and NaN ((1e308)^2 * 0)
    assert kl_elasticity([0.5, 0.5], [1.0, 0.0], 1e-200) == 0.0
    assert kl_elasticity([0.5, 0.5], [1e308, 0.0], 1.0) == 0.0
    # nonzero at a subnormal-scale problem: the gap over beta is what matters
    got = kl_elasticity([0.5, 0.5], [3e-200, 0.0], 1e-200)
    assert got == pytest.approx(_mp_elasticity([0.5, 0.5], [3e-200, 0.0], 1e-200), rel=1e-12)


@pytest.mark.slow
def test_kl_elasticity_at_the_extremes():
    rng = np.random.default_rng(1606)
    for _ in range(150):
        n = int(rng.integers(2, 6))
        ref = 10.0 ** rng.uniform(-300, 0, n)
        ref[rng.integers(n)] = 1.0
        ref = ref / ref.sum()
        scale = 10.0 ** rng.uniform(-250, 250)
        rew = rng.normal(size=n) * scale
        beta = scale * 10.0 ** rng.uniform(-2, 3)
        want = _mp_elasticity(ref, rew, beta)
        assert kl_elasticity(ref, rew, beta) == pytest.approx(want, rel=1e-11, abs=1e-300)


@pytest.mark.slow
def test_stability_region_gain_at_the_extremes():
    # the loop gain n_steps / H * eta, eta the elasticity at the beta spending the target
    rng = np.random.default_rng(1607)
    for _ in range(15):
        n = int(rng.integers(2, 5))
        ref = 10.0 ** rng.uniform(-200, 0, n)
        ref[rng.integers(n)] = 1.0
        ref = ref / ref.sum()
        rew = rng.normal(size=n) * 10.0 ** rng.uniform(-50, 50)
        kmax = float(kp.max_kl(ref, rew))
        if kmax == 0:
            continue
        target = kmax * 10.0 ** rng.uniform(-10, -0.5)
        reg = stability_region(
            ref, rew, target, lags=[0.0], horizons=[10.0], init_kl_coef=1.0, steps=3
        )
        beta = float(kp.beta_for_kl(ref, rew, target))
        want = _mp_elasticity(ref, rew, beta)
        assert float(reg.elasticity) == pytest.approx(want, rel=1e-10)
        assert float(reg.gain[0]) == pytest.approx(want / 10.0, rel=1e-10)


@pytest.mark.slow
@given(problems(min_size=2, max_size=6))
@settings(max_examples=40)
def test_kl_elasticity_on_the_strategies_extremes(pb):
    assume(float(kp.optimal_kl(pb.ref, pb.reward, pb.beta)) > 0)
    want = _mp_elasticity(pb.ref, pb.reward, pb.beta)
    assert kl_elasticity(pb.ref, pb.reward, pb.beta) == pytest.approx(want, rel=1e-10, abs=1e-300)
