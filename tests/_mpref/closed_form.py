"""mpmath reference implementations for the exact tests.

Recipe: every float input is converted exactly (``mp.mpf(float(x))``), the
reference is normalised in 400-digit arithmetic (``ref / sum(ref)``, which is
how klpolicy treats rows that sum to one only up to rounding), and the
formulas are evaluated directly from their definitions:

    pi*(y)  = ref(y) exp(r(y)/beta) / sum_y' ref(y') exp(r(y')/beta)
    V       = beta log sum_y ref(y) exp(r(y)/beta)
    KL(p||q)= sum_{p>0} p log(p/q)

At 400 digits nothing cancels at the precision we compare (1e-12), even
when a probability differs from 1 by 1e-148 (reference entries of 1e-300).
"""

from __future__ import annotations

import functools

import mpmath as mp
import numpy as np

DPS = 400  # every reference below runs inside mp.workdps(DPS): other tests may lower mp.mp.dps


def _precise(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with mp.workdps(DPS):
            return fn(*args, **kwargs)

    return wrapper


def _norm(x):
    xs = [mp.mpf(float(v)) for v in x]
    s = mp.fsum(xs)
    return [v / s for v in xs]


@_precise
def optimal_policy(ref, reward, beta):
    ref_n = _norm(ref)
    r = [mp.mpf(float(v)) for v in reward]
    b = beta if isinstance(beta, mp.mpf) else mp.mpf(float(beta))  # an mpf: for mp.diff
    logits = [mp.log(q) + ri / b for q, ri in zip(ref_n, r) if q > 0]
    m = max(logits)
    z = mp.fsum(mp.exp(v - m) for v in logits)
    out, it = [], iter(logits)
    for q in ref_n:
        out.append(mp.exp(next(it) - m) / z if q > 0 else mp.mpf(0))
    return out


@_precise
def soft_value(ref, reward, beta):
    ref_n = _norm(ref)
    r = [mp.mpf(float(v)) for v in reward]
    b = mp.mpf(float(beta))
    c = max(ri for q, ri in zip(ref_n, r) if q > 0)
    s = mp.fsum(q * mp.exp((ri - c) / b) for q, ri in zip(ref_n, r) if q > 0)
    return c + b * mp.log(s)


@_precise
def kl(p, q):
    pn, qn = _norm(p), _norm(q)
    total = mp.mpf(0)
    for a, b in zip(pn, qn):
        if a > 0:
            if b == 0:
                return mp.inf
            total += a * mp.log(a / b)
    return total


@_precise
def optimal_kl(ref, reward, beta):
    pi = optimal_policy(ref, reward, beta)
    ref_n = _norm(ref)
    return mp.fsum(p * mp.log(p / q) for p, q in zip(pi, ref_n) if p > 0)


@_precise
def soft_value_scale(ref, reward, beta):
    """``|r_k| + |V - r_k| + E_pi|r - r_k|`` with ``k`` the mode of pi*_beta.

    The soft value's conditioning at finite beta: V = r_k + beta log1p(S), S the
    expm1-sum around the mode, rounds to a few ulp of this (a rounding of eps in
    each reward moves V by eps E_pi|r|; shifting the rewards by -r_k is exact
    arithmetic on the answer). Where V is small but this is smaller still (rare
    better alternatives on tiny reference entries), V must keep its relative digits.
    """
    pi = optimal_policy(ref, reward, beta)
    r = [mp.mpf(float(v)) for v in reward]
    k = max(range(len(pi)), key=lambda i: pi[i])
    v = soft_value(ref, reward, beta)
    return abs(r[k]) + abs(v - r[k]) + mp.fsum(p * abs(ri - r[k]) for p, ri in zip(pi, r))


def to_float(xs):
    return np.array([float(v) for v in xs])


# --------------------------------------------------------------------------- beyond the core
# Recipes for the satellites' exact figures, from their definitions in the same 400 digits.


@_precise
def cross_entropy(p, q):
    """H(p_n, q_n) = -sum p_n log q_n (normalised rows); inf where p > 0 = q."""
    pn, qn = _norm(p), _norm(q)
    total = mp.mpf(0)
    for a, b in zip(pn, qn):
        if a > 0:
            if b == 0:
                return mp.inf
            total -= a * mp.log(b)
    return total


@_precise
def best_of_n_policy(ref, reward, n):
    """pi_n(y) = ref(y) / q_g * (F_g^n - F_{g-}^n) for y in reward level g (ties share)."""
    ref_n = _norm(ref)
    r = [mp.mpf(float(v)) for v in reward]
    n = mp.mpf(int(n))
    out = []
    for q, ri in zip(ref_n, r):
        if q == 0:
            out.append(mp.mpf(0))
            continue
        below = mp.fsum(qq for qq, rr in zip(ref_n, r) if rr < ri)
        level = mp.fsum(qq for qq, rr in zip(ref_n, r) if rr == ri)
        out.append(q / level * ((below + level) ** n - below**n))
    return out


@_precise
def best_of_n_kl(ref, reward, n):
    pi = best_of_n_policy(ref, reward, n)
    ref_n = _norm(ref)
    return mp.fsum(p * mp.log(p / q) for p, q in zip(pi, ref_n) if p > 0)


@_precise
def best_of_n_expected_reward(ref, reward, n):
    pi = best_of_n_policy(ref, reward, n)
    return mp.fsum(p * mp.mpf(float(ri)) for p, ri in zip(pi, reward))


@_precise
def best_of_n_win_rate(ref, reward, n):
    """P(best-of-n beats a reference draw) + half the ties."""
    pi = best_of_n_policy(ref, reward, n)
    ref_n = _norm(ref)
    r = [mp.mpf(float(v)) for v in reward]
    total = mp.mpf(0)
    for p, ri in zip(pi, r):
        below = mp.fsum(q for q, rr in zip(ref_n, r) if rr < ri)
        tie = mp.fsum(q for q, rr in zip(ref_n, r) if rr == ri)
        total += p * (below + tie / 2)
    return total


@_precise
def tilt_moments(ref, reward, beta):
    """(E_pi[r], Var_pi[r], H(pi)) at pi = pi*_beta."""
    pi = optimal_policy(ref, reward, beta)
    r = [mp.mpf(float(v)) for v in reward]
    mean = mp.fsum(p * ri for p, ri in zip(pi, r))
    var = mp.fsum(p * (ri - mean) ** 2 for p, ri in zip(pi, r))
    ent = -mp.fsum(p * mp.log(p) for p in pi if p > 0)
    return mean, var, ent
