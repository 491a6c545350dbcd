"""Retention figures against mpmath.

Recipes (tests/_mpref/closed_form.py, 400 digits): the worst case within a KL budget is the tilt of
ref towards -score at the lambda spending the budget, so
drop = E_ref[s] - E_{pi_lambda}[s] with pi_lambda = R.optimal_policy(ref, -s, lambda),
evaluated at the float lambda the package uses (klpolicy.beta_for_kl, itself checked
against mpmath in tests/core/test_exact_inverses.py); the slope is
sqrt(2) Cov_ref(r, s) / sqrt(Var_ref(r)).
"""

from __future__ import annotations

import mpmath as mp
import numpy as np
import pytest
from klpolicy.retention import retention_slope, worst_case_drop

import klpolicy as kp

from .. import _mpref as R


def _mp_drop(ref, s, lam):
    with mp.workdps(R.DPS):
        q = R.normalise(ref)
        sv = [mp.mpf(float(v)) for v in s]
        base = mp.fsum(a * b for a, b in zip(q, sv))
        if lam == 0:
            return float(base - min(b for a, b in zip(q, sv) if a > 0))
        pi = R.optimal_policy(ref, [-float(v) for v in s], lam)
        return float(base - mp.fsum(a * b for a, b in zip(pi, sv)))


def _case(rng):
    n = int(rng.integers(2, 6))
    ref = 10.0 ** rng.uniform(-300, 0, n)
    ref[rng.random(n) < 0.15] = 0.0
    ref[rng.integers(n)] = 1.0
    ref = ref / ref.sum()
    s = rng.normal(size=n) * 10.0 ** rng.uniform(-100, 100)
    return ref, s


def test_worst_case_drop_at_tiny_budgets():
    # drop ~ sqrt(2 Var kl): 1.4e-15 at kl = 1e-30, far below the rounding of E[s] itself;
    # it is summed from the policy's log-ratios, not as a difference of two expectations
    ref, s = [0.5, 0.5], [0.0, 1.0]
    for kl in (1e-30, 1e-20, 1e-8):
        lam = float(kp.beta_for_kl(ref, -np.array(s), kl))
        got = float(worst_case_drop(ref, s, kl))
        assert got == pytest.approx(_mp_drop(ref, s, lam), rel=1e-12)
        assert got == pytest.approx(np.sqrt(2 * 0.25 * kl), rel=1e-6)


@pytest.mark.slow
def test_worst_case_drop_at_the_extremes():
    rng = np.random.default_rng(1630)
    for _ in range(80):
        ref, s = _case(rng)
        kmax = float(kp.max_kl(ref, -s))
        if kmax == 0:
            continue
        kl = kmax * 10.0 ** rng.uniform(-30, 0.3)
        lam = float(kp.beta_for_kl(ref, -s, min(kl, kmax)))
        got = float(worst_case_drop(ref, s, kl))
        want = _mp_drop(ref, s, lam)
        assert got == pytest.approx(want, rel=1e-11, abs=1e-300), (ref.tolist(), s.tolist(), kl)


def test_retention_slope_at_the_extremes():
    rng = np.random.default_rng(1631)
    for _ in range(80):
        ref, s = _case(rng)
        r = rng.normal(size=ref.size) * 10.0 ** rng.uniform(-100, 100)
        with mp.workdps(R.DPS):
            q = R.normalise(ref)
            rv = [mp.mpf(float(v)) for v in r]
            sv = [mp.mpf(float(v)) for v in s]
            mr = mp.fsum(a * b for a, b in zip(q, rv))
            ms = mp.fsum(a * b for a, b in zip(q, sv))
            var = mp.fsum(a * (b - mr) ** 2 for a, b in zip(q, rv))
            cov = mp.fsum(a * (b - mr) * (c - ms) for a, b, c in zip(q, rv, sv))
            want = float(mp.sqrt(2) * cov / mp.sqrt(var)) if var > 0 else 0.0
        got = retention_slope(ref, r, s)
        scale = float(np.max(np.abs(s)))
        assert got == pytest.approx(want, rel=1e-11, abs=1e-13 * scale), (ref.tolist(), r, s)
