"""Calibration measures against mpmath.

Recipes (400 digits, rows normalised as in tests/_mpref/closed_form.py): the Brier score of a question
is E_{a* ~ t} sum_a (pi(a) - 1[a = a*])^2 = sum_a (pi - t)^2 + 1 - sum_a t^2; along the
tilt, pi = pi*_beta per question (R.optimal_policy) and the KL is weighted by the
question weights.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from klpolicy.calibration import brier_score, calibration_curve, expected_calibration_error

from .. import _mpref as R


def _mp_brier_row(p, t):
    pn, tn = R.normalise(p), R.normalise(t)
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
            wn = R.normalise(w)
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


def _mp_ece(p, t, w, bins):
    """sum_b |sum_{(j, a): pi(a|j) in ((b-1)/M, b/M]} w_j pi (t - pi)| at 400 digits."""
    wn = R.normalise(w)
    acc = [mp.mpf(0)] * bins
    for wj, pr, tr in zip(wn, p, t):
        pn, tn = R.normalise(pr), R.normalise(tr)
        for a, b in zip(pn, tn):
            if a == 0:
                continue
            k = int(mp.ceil(a * bins)) - 1
            acc[k] += wj * a * (b - a)
    scale = mp.fsum(
        abs(wj * a * (b - a))
        for wj, pr, tr in zip(wn, p, t)
        for a, b in zip(R.normalise(pr), R.normalise(tr))
    )
    return mp.fsum(abs(x) for x in acc), scale


def _near_an_edge(p, bins):
    with mp.workdps(R.DPS):
        return any(  # only the interior edges b/M, 0 < b < M, split bins
            abs(a * bins - mp.nint(a * bins)) < mp.mpf(10) ** -9 and 0 < mp.nint(a * bins) < bins
            for row in p
            for a in R.normalise(row)
            if a > 0
        )


def test_expected_calibration_error_at_the_extremes():
    # recipe: the population ECE of the docstring, bins assigned from the 400-digit
    # normalised confidences (draws within 1e-9 of a bin edge are skipped: there the
    # assignment is decided by the last bit of the input, not by the formula). Measured:
    # within 1e-9 relative (worst 1.2e-10, an ECE of 4e-66 from rows spanning 1e-300)
    rng = np.random.default_rng(1642)
    checked = 0
    for _ in range(300):
        m, n = int(rng.integers(1, 4)), int(rng.integers(2, 6))
        t = np.array([_row(rng, n) for _ in range(m)])
        if rng.random() < 0.5:  # a policy close to the truth: ECE near 0
            p = t * np.exp(rng.normal(size=t.shape) * 1e-6)
            p = p / p.sum(-1, keepdims=True)
        else:
            p = np.array([_row(rng, n) for _ in range(m)])
        w = _row(rng, m) if m > 1 else np.ones(1)
        bins = int(rng.choice([1, 2, 10, 15, 100]))
        if _near_an_edge(p, bins):
            continue
        with mp.workdps(R.DPS):
            want, scale = (float(x) for x in _mp_ece(p, t, w, bins))
        got = expected_calibration_error(p, t, weights=w, bins=bins)
        # a bin's terms have both signs: its sum is conditioned by the sum of |terms|; and
        # a row's normalisation is known to a rounding of its non-top mass
        rest = np.sum(w / w.sum() * (p.sum(-1) - p.max(-1) + t.sum(-1) - t.max(-1)))
        tol = 1e-9 * want + 8 * np.finfo(float).eps * (scale + rest)
        assert abs(got - want) <= tol, (p.tolist(), t.tolist(), bins, got, want)
        checked += 1
    assert checked > 200
