"""f_soft_value and f_frontier at large and infinite beta, against mpmath (issue 40, item 17).

The penalty ``beta * D_f(pi*||ref)`` at large ``beta`` is ``O(1/beta)``; taken from the
rounded optimum (``pi* = ref`` to rounding) it was ``beta`` times a rounding (``-inf`` at
``beta = inf`` for a reference whose sum is off by one rounding, ``-5.6e266`` at
``beta = 1e300``; the ``tv`` row 1.4e-7 off at ``beta = 1e10``).

mpmath recipe (``_mp_large_beta``), written from the KKT conditions and not from the
library's expansion: the inputs converted exactly, the reference normalised
(``q = ref / sum ref``), ``c = r - E_q[r]``; the optimum's ratio is
``t_y = (f')^{-1}(f'(1) + (c_y - m) / beta)`` with the shift ``m`` solved by 400
bisections on ``[min c, max c]`` (``sum q t`` decreases in ``m`` and is 1 at the root;
``R.f_ratio`` is ``(f')^{-1}``), at ``dps = 60 + 2 log10(beta)`` digits, so that
``t - 1 ~ 1/beta`` and ``f(t) ~ 1/beta^2`` keep 40 digits; then ``pi = q t / sum q t``,
``V = E_pi[r] - beta sum q f(pi/q)`` (``R.f``, the generators from DESIGN.md's table) and
``D = sum q f(pi/q)``. At ``beta = inf`` the reference value is the limit ``E_q[r]``,
divergence 0. The ``tv`` reference is its linear program solved by enumerating the
vertices of the pieces of ``E_pi r - beta TV`` (every entry but one at 0 or at ``q_y``,
the remaining one taking what is left), the best vertex in mpmath.
"""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest

import klpolicy as kp
from klpolicy.core.fdivergences import DIVERGENCES

from .. import _mpref as R
from .._mpref import assert_mp_close

SMOOTH = [(n, None) for n in DIVERGENCES if n not in ("alpha", "tv")]
SMOOTH += [("alpha", a) for a in (-2.0, 0.0, 0.5, 1.0, 3.0)]
IDS = [n if a is None else f"alpha={a}" for n, a in SMOOTH]

# sums to 1 - 1.1e-16 in float64: one rounding off
REF = np.array([0.7, 0.2, 0.1])
REWARD = np.array([1.0, -0.5, 2.0])
BETAS = [1e4, 1e6, 1e7, 1e10, 1e300, math.inf]


def _mp_large_beta(ref, reward, beta, name, a):
    if math.isinf(beta):
        with mp.workdps(60):
            q = R.divergences.normalise(ref)
            return mp.fsum(x * mp.mpf(float(y)) for x, y in zip(q, reward)), mp.mpf(0), None
    dps = int(60 + 2 * math.log10(beta))
    with mp.workdps(dps):
        q = R.divergences.normalise(ref)
        r = [mp.mpf(float(x)) for x in reward]
        b = mp.mpf(float(beta))
        mean = mp.fsum(x * y for x, y in zip(q, r))
        c = [y - mean for y in r]
        s1 = R.divergences.fprime(name, mp.mpf(1), a)

        def total(m):
            return mp.fsum(
                x * R.divergences.f_ratio(name, s1 + (cy - m) / b, a) for x, cy in zip(q, c)
            )

        lo, hi = min(c), max(c)
        for _ in range(400):
            mid = (lo + hi) / 2
            if total(mid) > 1:
                lo = mid
            else:
                hi = mid
        m = (lo + hi) / 2
        t = [R.divergences.f_ratio(name, s1 + (cy - m) / b, a) for cy in c]
        pi = [x * ty for x, ty in zip(q, t)]
        tot = mp.fsum(pi)
        pi = [x / tot for x in pi]
        div = mp.fsum(x * R.divergences.f(name, p / x, a) for x, p in zip(q, pi))
        er = mp.fsum(p * y for p, y in zip(pi, r))
        return er - b * div, div, er


@pytest.mark.mp_dps(60)
@pytest.mark.parametrize(("name", "a"), SMOOTH, ids=IDS)
def test_value_at_large_beta_against_mpmath(name, a):
    assert REF.sum() != 1.0  # the reference is off by one rounding
    f = kp.f_frontier(REF, REWARD, BETAS, divergence=name, alpha=a)
    for i, beta in enumerate(BETAS):
        want_v, want_d, want_er = _mp_large_beta(REF, REWARD, beta, name, a)
        got = float(kp.f_soft_value(REF, REWARD, beta, divergence=name, alpha=a))
        what = f"{name} alpha={a} beta={beta:g}: "
        assert_mp_close(got, want_v, rtol=4e-16, what=what + "f_soft_value ")
        assert_mp_close(f.value[i], want_v, rtol=4e-16, what=what + "f_frontier.value ")
        # the divergence is O(1/beta^2): relative accuracy (0 at beta = inf)
        assert_mp_close(f.divergence[i], want_d, rtol=1e-9, what=what + "divergence ")
        if want_er is not None:
            assert_mp_close(f.expected_reward[i], want_er, rtol=4e-16, what=what + "E_pi r ")
    # the penalty's first-order term: V - E_ref[r] ~ Var_ref(r) / (2 f''(1) beta), not a rounding
    mean = float(_mp_large_beta(REF, REWARD, math.inf, name, a)[0])
    v10 = float(kp.f_soft_value(REF, REWARD, 1e10, divergence=name, alpha=a))
    want = _mp_large_beta(REF, REWARD, 1e10, name, a)[0] - mp.mpf(mean)
    # (V and E_ref r are each rounded once: 2 ulps of the mean)
    assert_mp_close(v10 - mean, want, rtol=0, atol=2.5e-16, what=f"{name}: V - E_ref r at 1e10 ")


def _mp_tv(ref, reward, beta):
    """The TV-regularised optimum's value, divergence and E_pi r by vertex enumeration."""
    with mp.workdps(60):
        q = R.divergences.normalise(ref)
        r = [mp.mpf(float(x)) for x in reward]
        if math.isinf(beta):
            return (
                mp.fsum(x * y for x, y in zip(q, r)),
                mp.mpf(0),
                mp.fsum(x * y for x, y in zip(q, r)),
            )
        b = mp.mpf(float(beta))
        best = None
        n = len(q)
        for free in range(n):
            others = [i for i in range(n) if i != free]
            for levels in itertools.product((0, 1), repeat=n - 1):
                pi = [mp.mpf(0)] * n
                for i, keep in zip(others, levels):
                    pi[i] = q[i] if keep else mp.mpf(0)
                pi[free] = 1 - mp.fsum(pi)
                if pi[free] < 0:
                    continue
                tv = mp.fsum(abs(p - x) for p, x in zip(pi, q)) / 2
                er = mp.fsum(p * y for p, y in zip(pi, r))
                cand = (er - b * tv, tv, er)
                if best is None or cand[0] > best[0]:
                    best = cand
        return best


@pytest.mark.parametrize("beta", [0.2, 0.9, 1.6, 1e4, 1e10, 1e300, math.inf])
def test_tv_value_is_exact_at_every_beta(beta):
    # beta = 1e10 once gave E_ref[r] - 1.4e-7 (beta times the reference's rounding)
    f = kp.f_frontier(REF, REWARD, [beta], divergence="tv")
    want_v, want_d, want_er = _mp_tv(REF, REWARD, beta)
    got = float(kp.f_soft_value(REF, REWARD, beta, divergence="tv"))
    assert_mp_close(got, want_v, rtol=4e-16, what=f"tv beta={beta}: value ")
    assert_mp_close(f.value[0], want_v, rtol=4e-16, what=f"tv beta={beta}: frontier value ")
    assert_mp_close(f.divergence[0], want_d, rtol=4e-16, what=f"tv beta={beta}: divergence ")
    assert_mp_close(f.expected_reward[0], want_er, rtol=4e-16, what=f"tv beta={beta}: E_pi r ")


def test_large_beta_value_is_continuous_and_batched():
    # a batch with one row below the expansion's threshold and one above, and a reward
    # spread of 1e5 (threshold 1e11): the two ways agree where they meet
    ref = np.array([REF, [0.25, 0.25, 0.5]])
    reward = np.array([REWARD, [1e5, -2e5, 3e4]])
    for name, a in SMOOTH:
        v = kp.f_soft_value(ref, reward, 1e10, divergence=name, alpha=a)
        below = kp.f_soft_value(ref[1], reward[1], 1e10, divergence=name, alpha=a)
        assert v[1] == below
        lo = float(kp.f_soft_value(ref[1], reward[1], 0.99e11, divergence=name, alpha=a))
        hi = float(kp.f_soft_value(ref[1], reward[1], 1.01e11, divergence=name, alpha=a))
        assert lo > hi  # the value decreases in beta (dV/dbeta = -D < 0)
        assert lo - hi == pytest.approx(
            float(kp.f_frontier(ref[1], reward[1], [1e11], divergence=name, alpha=a).divergence[0])
            * 0.02e11,
            rel=0.05,
        )
