"""``suboptimality``: J(pi*) - J(pi) = beta KL(pi || pi*), against mpmath and at the limits."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

from klpolicy import objective, soft_value, suboptimality

pytestmark = pytest.mark.mp_dps(50)  # mpmath's working precision (tests/conftest.py)


def _mp_gap(pi, ref, r, beta):
    # mpmath recipe (50 digits), independent of the library: J(pi) = sum pi r - beta sum pi log(pi/ref);
    # J(pi*) = beta log sum ref exp(r/beta); the gap is J(pi*) - J(pi) computed at 50 digits.
    pi = [mp.mpf(x) for x in pi]
    ref = [mp.mpf(x) for x in ref]
    r = [mp.mpf(x) for x in r]
    beta = mp.mpf(beta)
    t, s = sum(pi), sum(ref)
    pi = [x / t for x in pi]
    ref = [x / s for x in ref]
    top = max(ri for qi, ri in zip(ref, r) if qi > 0)
    v = top + beta * mp.log(sum(q * mp.exp((ri - top) / beta) for q, ri in zip(ref, r) if q > 0))
    j = sum(p * ri for p, ri in zip(pi, r)) - beta * sum(
        p * mp.log(p / q) for p, q in zip(pi, ref) if p > 0
    )
    return v - j


CASES = [
    ([0.3, 0.7], [0.5, 0.5], [1.0, 0.0], 0.5),
    ([0.2, 0.3, 0.5], [0.5, 0.3, 0.2], [1.0, 0.0, -1.0], 1e-3),
    ([0.2, 0.3, 0.5], [0.5, 0.3, 0.2], [1.0, 0.0, -1.0], 1e3),
    ([0.1, 0.0, 0.9], [1e-300, 0.5, 0.5], [50.0, 2.0, -3.0], 2.0),
    ([0.25, 0.25, 0.5], [0.6, 0.3, 0.1], [700.0, 690.0, 0.0], 7.0),
]


@pytest.mark.parametrize(("pi", "ref", "r", "beta"), CASES)
def test_gap_matches_mpmath(pi, ref, r, beta):
    got = suboptimality(pi, ref, r, beta)
    want = _mp_gap(pi, ref, r, beta)
    assert float(got) == pytest.approx(float(want), rel=1e-12, abs=1e-300)


def test_gap_is_soft_value_minus_objective():
    rng = np.random.default_rng(0)
    ref = rng.dirichlet(np.ones(6), size=4)
    pi = rng.dirichlet(np.ones(6), size=4)
    r = rng.normal(size=(4, 6))
    gap = suboptimality(pi, ref, r, 0.7)
    assert gap.shape == (4,)
    np.testing.assert_allclose(
        gap, soft_value(ref, r, 0.7) - objective(pi, ref, r, 0.7), rtol=1e-12
    )


def test_zero_at_the_optimum_and_positive_elsewhere():
    from klpolicy import optimal_policy

    ref, r = [0.5, 0.3, 0.2], [1.0, 0.0, -1.0]
    assert suboptimality(optimal_policy(ref, r, 0.4), ref, r, 0.4) == pytest.approx(0.0, abs=1e-15)
    assert suboptimality([0.4, 0.3, 0.3], ref, r, 0.4) > 0


def test_off_support_is_inf():
    assert suboptimality([0.5, 0.5], [1.0, 0.0], [0.0, 5.0], 1.0) == np.inf
    assert suboptimality([0.5, 0.5], [1.0, 0.0], [0.0, 5.0], 0.0) == np.inf


def test_beta_zero_is_the_greedy_gap():
    # lim_{beta -> 0} beta KL(pi || pi*_beta) = max_{supp ref} r - E_pi r
    ref, r, pi = [0.5, 0.3, 0.2], [1.0, 0.0, -1.0], [0.2, 0.3, 0.5]
    assert suboptimality(pi, ref, r, 0.0) == pytest.approx(1.0 - (0.2 - 0.5), rel=1e-15)
    assert float(suboptimality(pi, ref, r, 1e-8)) == pytest.approx(1.3, rel=1e-6)


def test_beta_inf_is_zero_only_at_the_reference():
    ref, r = [0.5, 0.3, 0.2], [1.0, 0.0, -1.0]
    assert suboptimality(ref, ref, r, np.inf) == 0.0
    assert suboptimality([0.4, 0.4, 0.2], ref, r, np.inf) == np.inf


def test_float32_in_float32_out():
    out = suboptimality(np.float32([0.3, 0.7]), np.float32([0.5, 0.5]), np.float32([1, 0]), 0.5)
    assert out.dtype == np.float32


def test_bad_policy_is_refused_by_name():
    with pytest.raises(ValueError, match="`policy`"):
        suboptimality([0.5, -0.5], [0.5, 0.5], [1.0, 0.0], 1.0)
