"""An independent high-precision minimiser of the population pair losses (mpmath).

Recipe: the win weights W_ij = (mu_ij + mu_ji) P_ij are formed in ``DPS``-digit arithmetic
from the exact float inputs (mu = ref x ref, ref normalised there); the stationarity
conditions of sum_ij W_ij phi(x_i - x_j),

    F_i(x) = sum_j W_ij phi'(x_i - x_j) - W_ji phi'(x_j - x_i) = 0,

each divided by its outcome's total weight sum_j (W_ij + W_ji) (the weights span many
decades), are solved by damped Newton (exact Jacobian from phi'', backtracking on |F|^2)
started from x = 0, with x pinned to 0 at the outcome of largest total weight, until
max |F_i| < 10^-(DPS - 10). The policy is ref e^{x / beta} / Z (ipo: x is g itself,
beta = 1). Nothing here reads the float answer under test.
"""

from __future__ import annotations

import mpmath as mp
import numpy as np

DPS = 60


def _sig(x):
    return 1 / (1 + mp.exp(-x))


def derivatives(name, o):
    """phi' and phi'' of a margin loss in x = beta h, written from its definition."""
    if name in ("sigmoid", "robust"):
        e = mp.mpf(float(o.get("label_smoothing", 0.0)))
        if name == "sigmoid":
            # (1 - e) sp(-x) + e sp(x)
            return (lambda x: e * _sig(x) - (1 - e) * _sig(-x), lambda x: _sig(x) * _sig(-x))
        # ((1 - e) sp(-x) - e sp(x)) / (1 - 2e)
        return (
            lambda x: (-(1 - e) * _sig(-x) - e * _sig(x)) / (1 - 2 * e),
            lambda x: _sig(x) * _sig(-x),
        )
    if name == "ipo":
        c = mp.mpf(float(o["c"]))  # (h - c)^2 with c = 1 / (2 tau)
        return (lambda h: 2 * (h - c), lambda h: mp.mpf(2))
    raise AssertionError(name)


def weights(ref, p, joint=None):
    n = len(ref)
    q = [mp.mpf(float(v)) for v in ref]
    s = mp.fsum(q)
    q = [v / s for v in q]
    if joint is None:
        mu = [[q[i] * q[j] for j in range(n)] for i in range(n)]
    else:
        mu = [[mp.mpf(float(joint[i][j])) for j in range(n)] for i in range(n)]
    w = [[(mu[i][j] + mu[j][i]) * mp.mpf(float(p[i][j])) for j in range(n)] for i in range(n)]
    for i in range(n):
        w[i][i] = mp.mpf(0)
    return q, w


def minimise(d1, d2, w):
    """Scores x minimising sum_ij w_ij phi(x_i - x_j) (support: every outcome)."""
    n = len(w)
    tot = [mp.fsum(w[i][j] + w[j][i] for j in range(n)) for i in range(n)]
    anchor = max(range(n), key=lambda i: tot[i])
    free = [i for i in range(n) if i != anchor]
    tol = mp.mpf(10) ** -(mp.mp.dps - 10)

    def resid(x):
        out = []
        for i in free:
            s = mp.fsum(
                w[i][j] * d1(x[i] - x[j]) - w[j][i] * d1(x[j] - x[i]) for j in range(n) if j != i
            )
            out.append(s / tot[i])
        return out

    def jac(x):
        m = mp.matrix(len(free), len(free))
        for a, i in enumerate(free):
            for b, k in enumerate(free):
                if i == k:
                    v = mp.fsum(
                        w[i][j] * d2(x[i] - x[j]) + w[j][i] * d2(x[j] - x[i])
                        for j in range(n)
                        if j != i
                    )
                else:
                    v = -(w[i][k] * d2(x[i] - x[k]) + w[k][i] * d2(x[k] - x[i]))
                m[a, b] = v / tot[i]
        return m

    x = [mp.mpf(0)] * n
    f = resid(x)
    for _ in range(500):
        norm = max(abs(v) for v in f) if f else mp.mpf(0)
        if norm < tol:
            return x
        step = mp.lu_solve(jac(x), mp.matrix([-v for v in f]))
        t = mp.mpf(1)
        merit = mp.fsum(v * v for v in f)
        while True:
            cand = list(x)
            for a, i in enumerate(free):
                cand[i] = x[i] + t * step[a]
            fc = resid(cand)
            if mp.fsum(v * v for v in fc) <= (1 - t / 4) * merit or t < mp.mpf(2) ** -60:
                break
            t /= 2
        x, f = cand, fc
    raise AssertionError("the mpmath reference did not converge")


def policy(name, o, ref, p, beta):
    """The reference population optimum as floats (mpmath inside ``workdps(DPS)``)."""
    with mp.workdps(DPS):
        q, w = weights(ref, p)
        d1, d2 = derivatives(name, o)
        x = minimise(d1, d2, w)
        b = mp.mpf(1) if name == "ipo" else mp.mpf(float(beta))
        logits = [mp.log(q[i]) + x[i] / b for i in range(len(q))]
        m = max(logits)
        z = mp.fsum(mp.exp(v - m) for v in logits)
        return np.array([float(mp.exp(v - m) / z) for v in logits])
