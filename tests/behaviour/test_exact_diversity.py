"""Diversity figures of pi*_beta against mpmath.

Recipes (tests/_mpref/closed_form.py, 400 digits): pi = pi*_beta from its definition; H(pi) =
-sum pi log pi; dH/dbeta = Cov_pi(log pi, r) / beta^2 (d E_pi[f] / d(1/beta) = Cov_pi(f, r)
and dH/d(1/beta) = -Cov_pi(log pi, r)).
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given, settings
from klpolicy.diversity import (
    best_of_n_diversity,
    diversity_curve,
    entropy_slope,
    expected_distinct,
    optimal_entropy,
)

import klpolicy as kp
from klpolicy.testing.strategies import problems

from .. import _mpref as R


def _mp_slope(ref, rew, beta):
    with mp.workdps(R.DPS):
        pi = R.optimal_policy(ref, rew, beta)
        r = [mp.mpf(float(v)) for v in rew]
        lp = [mp.log(p) if p > 0 else mp.mpf(0) for p in pi]
        er = mp.fsum(p * ri for p, ri in zip(pi, r))
        el = mp.fsum(p * li for p, li in zip(pi, lp))
        cov = mp.fsum(p * (li - el) * (ri - er) for p, li, ri in zip(pi, lp, r))
        return float(cov / mp.mpf(float(beta)) ** 2)


def _mp_slope_scale(ref, rew, beta):
    """The slope's condition scale, ``E_pi[|x| (|d| + |x|)] / beta`` with ``x = (r - E r) /
    beta`` and ``d = log ref - E_pi log ref``: the size of the terms whose difference the
    slope is (rounding each ``pi`` entry by eps moves the slope by a few eps of it)."""
    with mp.workdps(R.DPS):
        pi = R.optimal_policy(ref, rew, beta)
        b = mp.mpf(float(beta))
        x = [mp.mpf(float(v)) / b for v in rew]
        lq = [mp.log(mp.mpf(float(q))) if q > 0 else mp.mpf(0) for q in ref]
        ex = mp.fsum(p * xi for p, xi in zip(pi, x))
        el = mp.fsum(p * li for p, li in zip(pi, lq))
        terms = (p * abs(xi - ex) * (abs(li - el) + abs(xi - ex)) for p, xi, li in zip(pi, x, lq))
        return float(mp.fsum(terms) / b)


def _case(rng):
    n = int(rng.integers(2, 6))
    ref = 10.0 ** rng.uniform(-300, 0, n)
    ref[rng.random(n) < 0.15] = 0.0
    ref[rng.integers(n)] = 1.0
    ref = ref / ref.sum()
    scale = 10.0 ** rng.uniform(-250, 250)
    rew = rng.normal(size=n) * scale
    beta = scale * 10.0 ** rng.uniform(-2, 3)
    return ref, rew, beta


def test_entropy_slope_at_a_tiny_beta():
    # was NaN: beta^3 = 1e-330 underflowed to 0 (the greedy policy's slope is 0)
    assert entropy_slope([0.5, 0.3, 0.2], [1.0, 0.0, -1.0], 1e-110) == 0.0
    ref, rew = [0.5, 0.3, 0.2], [1e-110, 0.0, -1e-110]
    want = _mp_slope(ref, rew, 1e-110)
    assert entropy_slope(ref, rew, 1e-110) == pytest.approx(want, rel=1e-12)


@pytest.mark.slow
def test_entropy_and_its_slope_at_the_extremes():
    rng = np.random.default_rng(1607)
    for _ in range(150):
        ref, rew, beta = _case(rng)
        _, _, ent = R.tilt_moments(ref, rew, beta)
        assert float(optimal_entropy(ref, rew, beta)) == pytest.approx(float(ent), rel=1e-12)
        want = _mp_slope(ref, rew, beta)
        # the slope is a covariance: its float error is eps |x| |log pi| relative to E|x| terms
        got = float(entropy_slope(ref, rew, beta))
        assert got == pytest.approx(want, rel=1e-10, abs=1e-300), (ref.tolist(), rew.tolist(), beta)


def test_expected_distinct_against_mpmath():
    # E[D_k] = sum_y 1 - (1 - p(y))^k, in 400 digits from the normalised row
    rng = np.random.default_rng(1608)
    for _ in range(100):
        ref, _, _ = _case(rng)
        k = int(rng.choice([1, 2, 7, 1000, 10**12]))
        with mp.workdps(R.DPS):
            want = mp.fsum(1 - (1 - p) ** k for p in R.normalise(ref))
        assert float(expected_distinct(ref, k)) == pytest.approx(float(want), rel=1e-13)


@pytest.mark.slow
def test_diversity_curve_on_a_kl_grid_against_mpmath():
    # through beta_for_kl: the entropy and reward at the beta spending each budget
    rng = np.random.default_rng(1609)
    for _ in range(40):
        ref, rew, _ = _case(rng)
        kmax = float(kp.max_kl(ref, rew))
        if kmax == 0:
            continue
        kls = np.sort(kmax * 10.0 ** rng.uniform(-20, -0.01, 3))
        c = diversity_curve(ref, rew, kl=kls)
        for b, h, er in zip(c.beta, c.entropy, c.expected_reward):
            mean, _, ent = R.tilt_moments(ref, rew, float(b))
            assert float(h) == pytest.approx(float(ent), rel=1e-12, abs=1e-300)
            assert abs(float(er) - float(mean)) <= 1e-13 * float(np.max(np.abs(rew)))


@pytest.mark.slow
def test_best_of_n_diversity_against_mpmath():
    rng = np.random.default_rng(1611)
    for _ in range(30):
        ref, rew, _ = _case(rng)
        if float(kp.max_kl(ref, rew)) == 0:
            continue
        n = int(rng.choice([2, 5, 100]))
        d = best_of_n_diversity(ref, rew, [n])
        with mp.workdps(R.DPS):
            pol = R.best_of_n_policy(ref, rew, n)
            ent = -mp.fsum(p * mp.log(p) for p in pol if p > 0)
            kl = R.best_of_n_kl(ref, rew, n)
        assert float(d.best_of_n_entropy[0]) == pytest.approx(float(ent), rel=1e-12, abs=1e-300)
        assert float(d.kl[0]) == pytest.approx(float(kl), rel=1e-11, abs=1e-300)
        if float(d.beta[0]) > 0:
            _, _, opt_ent = R.tilt_moments(ref, rew, float(d.beta[0]))
            assert float(d.optimal_entropy[0]) == pytest.approx(float(opt_ent), rel=1e-12)


@pytest.mark.slow
@given(problems(min_size=2, max_size=6))
@settings(max_examples=40)
def test_entropy_and_slope_on_the_strategies_extremes(pb):
    _, _, ent = R.tilt_moments(pb.ref, pb.reward, pb.beta)
    got = float(optimal_entropy(pb.ref, pb.reward, pb.beta))
    assert got == pytest.approx(float(ent), rel=1e-12, abs=1e-300)
    want = _mp_slope(pb.ref, pb.reward, pb.beta)
    # the slope is a covariance: where it is a small difference of its terms (at a large
    # beta on a reference whose log is uncorrelated with r under ref, e.g. (1/4, 1/4, 1/2)
    # with r (-1, -3, -2) at beta 1e6: a slope of 3.3e-19 from terms of 1.7e-13), the
    # rounding of pi alone moves it by a few eps of the terms' scale (1.9e-9 relative there)
    scale = _mp_slope_scale(pb.ref, pb.reward, pb.beta)
    assert float(entropy_slope(pb.ref, pb.reward, pb.beta)) == pytest.approx(
        want, rel=1e-10, abs=max(64 * 2**-52 * scale, 1e-300)
    )


def test_slope_where_the_reference_covariance_vanishes():
    # Cov_ref(log ref, r) = 0 exactly on this problem, so at beta 1e6 the slope (3.27e-19,
    # 40-digit mpmath) is a difference of terms 5e5 times larger: within 64 eps of them
    ref, rew, beta = np.array([0.25, 0.25, 0.5]), np.array([-1.0, -3.0, -2.0]), 1e6
    want, scale = _mp_slope(ref, rew, beta), _mp_slope_scale(ref, rew, beta)
    assert want == pytest.approx(3.2671320485994644e-19, rel=1e-15)
    assert scale > 5e5 * want
    assert abs(float(entropy_slope(ref, rew, beta)) - want) <= 64 * 2**-52 * scale
