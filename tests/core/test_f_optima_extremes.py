"""f-divergence optima at the extremes, against an independent mpmath solution.

mpmath recipe (``_mp_solve``): the inputs converted exactly, the reference normalised,
at ``dps = 50 + 1.2 * (the decimal exponent span of ref, reward and beta)`` digits (so that
``1 - 1e-300`` and ``r / beta`` with ``beta = 1e-8`` are exact there). The density ratio
of the best outcome on the support, ``t* = pi*(best) / ref(best)``, lies in
``[1, 1 / ref(best outcomes)]`` (at 1 every ratio is <= 1, at ``1/ref(best)`` the best
outcomes alone sum to one); with ``s* = f'(t*)`` every outcome has
``t_y = (f')^{-1}(s* - (r_best - r_y)/beta)``, clipped at 0 (``_mp_ratio``, typed from the
issue's table), and ``sum_y ref_y t_y`` increases with ``t*``. ``log t*`` is found by
400 bisections (``t*`` to ~1e-118 relative); then ``pi = ref t / sum``.
This is the normalisation ``sum ref (f')^{-1}((r - lambda)/beta)_+ = 1`` solved for
``lambda = r_best - beta s*`` in a coordinate that is exact at the extremes.
``V = E_pi r - beta D_f(pi||ref)`` with ``D_f`` from the definition
(tests/core/test_fdivergences.py). The tolerance per entry is ``1e-12`` relative plus the
conditioning of the entry on the inputs: ``eps * ref_y |dt/ds| (|s_y| + |s*| + 1)``
(a relative rounding of ``r / beta`` moves ``s_y`` by ``eps |s_y|``).
"""

from __future__ import annotations

import math
import time

import mpmath as mp
import numpy as np
import pytest

import klpolicy as kp
from klpolicy.core.fdivergences import DIVERGENCES

from .test_f_optima import _mp_ratio
from .test_fdivergences import _mp_divergence

ROWS = [(n, None) for n in DIVERGENCES if n not in ("alpha", "tv")]
ROWS += [
    ("alpha", a)
    for a in (-2.0, -0.5, 0.0, 1e-9, 0.3, 0.5, 0.999999, 1.0, 1.000001, 1.5, 2.0, 3.0, 7.0)
]
IDS = [f"{n}" if a is None else f"alpha={a}" for n, a in ROWS]
EPS = np.finfo(np.float64).eps


def _mp_fprime(name, t, a):
    if name == "reverse_kl":
        return mp.log(t) + 1
    if name == "forward_kl":
        return -1 / t
    if name == "chi2":
        return 2 * (t - 1)
    if name == "hellinger":
        return 1 - 1 / mp.sqrt(t)
    if name == "js":
        return (mp.log(t) - mp.log((1 + t) / 2)) / 2
    if name == "alpha":
        a = mp.mpf(a)
        return mp.log(t) if a == 1 else (t ** (a - 1) - 1) / (a - 1)
    if name == "chi2_kl":
        return (t - 1) + mp.log(t) + 1
    if name == "reverse_chi2":
        return 1 - 1 / t**2
    raise AssertionError(name)


def _span(*arrays):
    e = [abs(math.log10(abs(float(x)))) for arr in arrays for x in np.ravel(arr) if x != 0]
    return max(e, default=0.0)


def _dps(ref, reward, beta):
    return int(50 + 1.2 * _span(ref, reward, beta))


def _mp_solve(ref, reward, beta, name, a):
    """(pi, t, dt/ds, s) per outcome at the working precision (see the module docstring)."""
    dps = _dps(ref, reward, beta)
    with mp.workdps(dps):
        q = [mp.mpf(float(x)) for x in ref]
        tot = mp.fsum(q)
        q = [x / tot for x in q]
        r = [mp.mpf(float(x)) for x in reward]
        b = mp.mpf(float(beta))
        top = max(ri for qi, ri in zip(q, r) if qi > 0)
        d = [(top - ri) / b for ri in r]
        q_best = mp.fsum(qi for qi, ri in zip(q, r) if qi > 0 and ri == top)

        def ratios(log_t):
            s = _mp_fprime(name, mp.exp(log_t), a)
            return s, [_mp_ratio(name, s - di, a) if qi > 0 else mp.mpf(0) for qi, di in zip(q, d)]

        lo, hi = mp.mpf(0), -mp.log(q_best)
        for _ in range(400):
            mid = (lo + hi) / 2
            if mid in (lo, hi):
                break
            _, t = ratios(mid)
            if mp.fsum(qi * ti for qi, ti in zip(q, t)) > 1:
                hi = mid
            else:
                lo = mid
        s_best, t = ratios((lo + hi) / 2)
        pi = [qi * ti for qi, ti in zip(q, t)]
        tot = mp.fsum(pi)
        pi = [x / tot for x in pi]
        h = mp.mpf(10) ** (-dps // 3)
        dt = []
        for qi, di in zip(q, d):
            if qi == 0:
                dt.append(mp.mpf(0))
                continue
            s = s_best - di
            up, dn = _mp_ratio(name, s + h * (abs(s) + 1), a), _mp_ratio(name, s - h * (abs(s) + 1), a)
            dt.append(abs(up - dn) / (2 * h * (abs(s) + 1)) if mp.isfinite(up) else mp.inf)
        s_y = [s_best - di for di in d]
        return pi, t, dt, s_y, s_best


def _draw(rng):
    n = int(rng.integers(2, 9))
    ref = 10.0 ** rng.uniform(-300, 0, n) if rng.random() < 0.5 else 10.0 ** rng.uniform(-12, 0, n)
    if rng.random() < 0.3:
        ref[rng.integers(n)] = 0.0
    ref[rng.integers(n)] = 1.0
    ref = ref / ref.sum()
    if rng.random() < 0.3:  # 1 - tiny: the user's example
        k = rng.integers(n)
        ref[:] = 10.0 ** rng.uniform(-300, -200, n)
        ref[rng.integers(n)] = 0.0 if rng.random() < 0.3 else ref[0]
        ref[k] = 1.0 - ref[np.arange(n) != k].sum()
    kind = rng.integers(4)
    if kind == 0:
        reward = rng.normal(size=n) * 10.0 ** rng.uniform(-3, 6)
    elif kind == 1:  # nearly tied
        reward = 1.0 + rng.normal(size=n) * 10.0 ** rng.uniform(-15, -9)
    elif kind == 2:
        reward = rng.choice([-1e6, 1e6, 0.0, 1.0], size=n) + rng.normal(size=n)
    else:
        reward = rng.integers(0, 2, size=n).astype(float)
    beta = 10.0 ** rng.uniform(-8, 8)
    perm = rng.permutation(n)
    return ref[perm], reward[perm], float(beta)


def _check_one(name, a, ref, reward, beta, dtype=np.float64):
    ctx = (name, a, ref.tolist(), reward.tolist(), beta)
    pi_mp, t_mp, dt_mp, s_y, s_best = _mp_solve(ref, reward, beta, name, a)
    got = kp.f_optimal_policy(ref.astype(dtype), reward.astype(dtype), beta, divergence=name, alpha=a)
    assert got.dtype == dtype, ctx
    eps = np.finfo(dtype).eps
    q = ref / ref.sum()
    for i, (g, w) in enumerate(zip(got, pi_mp)):
        w = float(w)
        if ref[i] == 0:
            assert g == 0, ctx
            continue
        if dtype == np.float64:
            cond = float(dt_mp[i]) * float(q[i]) * (abs(float(s_y[i])) + abs(float(s_best)) + 1)
            tol = 1e-12 * w + 16 * EPS * cond + 1e-300
        else:
            cond = float(dt_mp[i]) * float(q[i]) * (abs(float(s_y[i])) + abs(float(s_best)) + 1)
            tol = 16 * eps * (w + cond) + 1e-37
        assert abs(float(g) - w) <= tol, (*ctx, i, float(g), w, tol)
    # permutation equivariance
    perm = np.random.default_rng(len(ref)).permutation(len(ref))
    back = kp.f_optimal_policy(
        ref[perm].astype(dtype), reward[perm].astype(dtype), beta, divergence=name, alpha=a
    )
    np.testing.assert_array_equal(back, got[perm])
    if dtype != np.float64:
        return
    # the divergence of the exact optimum, as float64, against the definition
    pf = np.array([float(x) for x in pi_mp])
    d_mp = float(_mp_divergence(pf, ref, name, a))
    d = float(kp.f_divergence(pf, ref, name, alpha=a))
    assert d == d_mp or abs(d - d_mp) <= 1e-12 * abs(d_mp) + 1e-300, (*ctx, d, d_mp)
    # the optimal value: E_pi r - beta D at the exact optimum
    with mp.workdps(_dps(ref, reward, beta)):
        d_ex = _mp_divergence(pi_mp, ref, name, a)
        er = mp.fsum(w * mp.mpf(float(x)) for w, x in zip(pi_mp, reward))
        v_mp = er - mp.mpf(beta) * d_ex
    v = float(kp.f_soft_value(ref, reward, beta, divergence=name, alpha=a))
    scale = abs(float(v_mp)) + 1e-4 * abs(float(er)) + 1e-300
    assert abs(v - float(v_mp)) <= 1e-12 * scale, (*ctx, v, float(v_mp))
    # beta_for_divergence reproduces the divergence budget
    target = float(d_ex)
    if 1e-250 < target < 1e250:
        try:
            b = float(kp.beta_for_divergence(ref, reward, target, divergence=name, alpha=a))
        except ValueError as err:  # budgets beyond float64's range of beta are refused
            assert "outside float64's range" in str(err) or "above the largest" in str(err), ctx
            return
        back = float(kp.f_divergence(kp.f_optimal_policy(ref, reward, b, divergence=name, alpha=a), ref, name, alpha=a))
        assert abs(back - target) <= 1e-9 * target, (*ctx, b, back, target)


def _fuzz(name, a, seed, budget_s, max_cases):
    rng = np.random.default_rng(seed)
    start = time.monotonic()
    for k in range(max_cases):
        if time.monotonic() - start > budget_s:
            break
        ref, reward, beta = _draw(rng)
        dtype = np.float64 if k % 4 else np.float32
        ref, reward = (x.astype(dtype).astype(np.float64) for x in (ref, reward))
        if ref.sum() == 0:
            continue
        _check_one(name, a, ref, reward, beta, dtype)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "a"), ROWS, ids=IDS)
def test_fuzz_extremes_against_mpmath(name, a):
    _fuzz(name, a, 2800 + ROWS.index((name, a)), budget_s=20.0, max_cases=60)
