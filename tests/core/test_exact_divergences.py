"""Divergences beyond the KL against mpmath (tests/_mpref/closed_form.py: 400 digits, rows normalised)."""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest

import klpolicy as kp
from klpolicy.core.internal import normalised_log_ratio

from .. import _mpref as R


def test_cross_entropy_normalises_like_kl_divergence():
    # formerly 0: q sums to 1 in float64, yet normalised its second entry is 1 - 7.9e-146
    got = float(kp.cross_entropy([0.0, 1.0], [7.9e-146, 1.0]))
    assert got == float(R.cross_entropy([0.0, 1.0], [7.9e-146, 1.0]))
    assert abs(got / 7.9e-146 - 1) < 1e-15


@pytest.mark.slow
def test_cross_entropy_at_the_extremes_against_mpmath():
    rng = np.random.default_rng(160)
    for _ in range(300):
        n = int(rng.integers(2, 6))
        p = 10.0 ** rng.uniform(-300, 0, n)
        p[rng.random(n) < 0.2] = 0.0
        p[rng.integers(n)] = 1.0
        q = 10.0 ** rng.uniform(-300, 0, n)
        q[rng.integers(n)] = 1.0
        p, q = p / p.sum(), q / q.sum()
        ref = float(R.cross_entropy(p, q))
        got = float(kp.cross_entropy(p, q))
        assert abs(got - ref) <= 1e-13 * ref + 1e-300, (p.tolist(), q.tolist(), got, ref)


@pytest.mark.slow
def test_normalised_log_ratio_against_mpmath():
    # the top entries differ by one ulp (1.1e-16) while the normalised log-ratio there is
    # -4e-24: log1p(d / q) - log1p(D / S_q) lost it (error 1.6e-32, relative 4e-9)
    p = np.array([9.91450316624066e-15, 2.912090758155408e-45, 2.024956390893245e-96, 1 - 9.9e-15])
    q = np.array([9.91450316224336e-15, 2.9120907492657034e-45, 2.0249563902933423e-96, 1 - 1e-14])
    rng = np.random.default_rng(1670)
    cases = [(p, q)]
    for _ in range(200):
        n = int(rng.integers(2, 6))
        b = 10.0 ** rng.uniform(-300, 0, n)
        b[rng.integers(n)] = 1.0
        b = b / b.sum()
        a = b * np.exp(rng.normal(size=n) * 10.0 ** rng.uniform(-12, 0))
        cases.append((a / a.sum(), b))
    for a, b in cases:
        ell = normalised_log_ratio(a, b)
        with mp.workdps(R.DPS):
            an, bn = R.normalise(a), R.normalise(b)
            for i in range(a.size):
                want = mp.log(an[i] / bn[i])
                # relative 1e-13, or eps of the entries' own log-ratio scale for
                # rows whose every ratio is the same up to rounding (then want ~ 0)
                assert abs(ell[i] - want) <= 1e-13 * abs(want) + 1e-16 * float(
                    max(abs(mp.log(x / y)) for x, y in zip(a, b))
                )
