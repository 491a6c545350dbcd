"""Divergences beyond the KL against mpmath (tests/_mpref.py: 400 digits, rows normalised)."""

from __future__ import annotations

import numpy as np

import klpolicy as kp

from .. import _mpref as R


def test_cross_entropy_normalises_like_kl_divergence():
    # formerly 0: q sums to 1 in float64, yet normalised its second entry is 1 - 7.9e-146
    got = float(kp.cross_entropy([0.0, 1.0], [7.9e-146, 1.0]))
    assert got == float(R.cross_entropy([0.0, 1.0], [7.9e-146, 1.0]))
    assert abs(got / 7.9e-146 - 1) < 1e-15


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
