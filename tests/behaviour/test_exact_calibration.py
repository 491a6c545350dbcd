"""Calibration measures against mpmath.

Recipes (400 digits, rows normalised as in tests/_mpref.py): the Brier score of a question
is E_{a* ~ t} sum_a (pi(a) - 1[a = a*])^2 = sum_a (pi - t)^2 + 1 - sum_a t^2; along the
tilt, pi = pi*_beta per question (R.optimal_policy) and the KL is weighted by the
question weights.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from klpolicy.calibration import brier_score, calibration_curve

from .. import _mpref as R


def _mp_brier_row(p, t):
    pn, tn = R._norm(p), R._norm(t)
    return mp.fsum((a - b) ** 2 for a, b in zip(pn, tn)) + 1 - mp.fsum(b * b for b in tn)


def _row(rng, n):
    x = 10.0 ** rng.uniform(-300, 0, n)
    x[rng.random(n) < 0.2] = 0.0
    x[rng.integers(n)] = 1.0
    return x / x.sum()


def test_brier_score_of_near_certain_answers():
    # the expanded form sum p^2 - 2 sum p t + 1 returned rounding noise (1e-16) here
    p = t = [1 - 1e-10, 1e-10]
    with mp.workdps(R.DPS):
        want = float(_mp_brier_row(p, t))
    assert brier_score(p, t) == pytest.approx(want, rel=1e-14)


def test_brier_score_at_the_extremes():
    rng = np.random.default_rng(1640)
    for _ in range(200):
        m, n = int(rng.integers(1, 4)), int(rng.integers(2, 6))
        t = np.array([_row(rng, n) for _ in range(m)])
        if rng.random() < 0.5:  # a policy close to the truth
            p = t * np.exp(rng.normal(size=t.shape) * 1e-6)
            p = p / p.sum(-1, keepdims=True)
        else:
            p = np.array([_row(rng, n) for _ in range(m)])
        w = _row(rng, m) if m > 1 else np.ones(1)
        with mp.workdps(R.DPS):
            wn = R._norm(w)
            want = float(mp.fsum(a * _mp_brier_row(pr, tr) for a, pr, tr in zip(wn, p, t)))
        got = brier_score(p, t, weights=w)
        assert got == pytest.approx(want, rel=1e-12, abs=1e-300), (p.tolist(), t.tolist())


@pytest.mark.slow
def test_calibration_curve_against_mpmath():
    rng = np.random.default_rng(1641)
    for _ in range(40):
        m, n = int(rng.integers(1, 4)), int(rng.integers(2, 5))
        ref = np.array([_row(rng, n) for _ in range(m)])
        reward = rng.normal(size=(m, n)) * 10.0 ** rng.uniform(-3, 3)
        beta = float(np.ptp(reward) or 1.0) * 10.0 ** rng.uniform(-2, 2)
        c = calibration_curve(ref, reward, [beta])
        with mp.workdps(R.DPS):
            pis = [R.optimal_policy(r, rw, beta) for r, rw in zip(ref, reward)]
            brier = mp.fsum(_mp_brier_row([float(x) for x in pi], r) for pi, r in zip(pis, ref))
            kl = mp.fsum(R.optimal_kl(r, rw, beta) for r, rw in zip(ref, reward))
        assert float(c.brier[0]) == pytest.approx(float(brier / m), rel=1e-12, abs=1e-300)
        assert float(c.kl[0]) == pytest.approx(float(kl / m), rel=1e-12, abs=1e-300)
