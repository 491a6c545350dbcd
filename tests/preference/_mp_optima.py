"""An independent high-precision minimiser of the population pair losses (mpmath).

Recipe: the win weights W_ij = (mu_ij + mu_ji) P_ij are formed in ``DPS``-digit arithmetic
from the exact float inputs (mu = ref x ref, ref normalised there); the stationarity
conditions of sum_ij W_ij phi(x_i - x_j),

    F_i(x) = sum_j W_ij phi'(x_i - x_j) - W_ji phi'(x_j - x_i) = 0,

each divided by its outcome's total weight sum_j (W_ij + W_ji) (the weights span many
decades), are solved by damped Newton (exact Jacobian from phi'', backtracking on |F|^2)
started from x = 0, with x pinned to 0 at the outcome of largest total weight, until
max |F_i| < 10^-(DPS - 10). The policy is ref e^{x / beta} / Z (ipo: x is g itself,
beta = 1). Nothing here reads the float answer under test, except :func:`polish`.

The non-convex losses ``exo_pair`` (EXO: Ji et al. 2024, arXiv:2402.00856) and
``discopop`` (DiscoPOP: Chris Lu et al. 2024, arXiv:2406.08414) have phi, phi' and phi''
written here from the papers' definitions (:func:`derivatives`, :func:`loss_function`).
Damped Newton on |F|^2 can converge to a saddle or a maximum of such a loss, so their
reference is :func:`minimise_local`: saddle-free Newton (the step solves |H| d = -grad on
the Hessian scaled by each outcome's total weight, eigenvalues by ``mp.eigsy``) with an
Armijo search on the loss itself (40 extra digits), started from x = 0, an independent
start (the float solver starts from a least-squares fit), to max |F_i| < 10^-(DPS - 10);
the point is then checked to be a strict local minimum: the smallest eigenvalue of the
scaled gauge-fixed Hessian (:func:`smallest_curvature`) is positive, in mpmath. Where a
loss has several local minima (discopop at tau = 0.05), two correct methods from two
starts can land in different ones: :func:`polish` then runs the same iteration from the
float answer and certifies the local minimum it belongs to (stationarity and curvature
instead of an independent start; the tests say where they use it).
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
    if name == "exo_pair":
        # EXO (Ji et al. 2024, arXiv:2402.00856, eq. 16): phi = KL(Bern(s) || Bern(1 - e)),
        # s = sigma(x): s (log s - log(1 - e)) + (1 - s)(log(1 - s) - log e). With
        # ds/dx = s (1 - s) and dphi/ds = log(s / (1 - s)) - log((1 - e) / e) = x - k:
        # phi' = s (1 - s)(x - k), phi'' = s (1 - s)[(1 - 2 s)(x - k) + 1]
        e = mp.mpf(float(o.get("epsilon", 1e-3)))
        k = mp.log(1 - e) - mp.log(e)
        return (
            lambda x: _sig(x) * _sig(-x) * (x - k),
            lambda x: _sig(x) * _sig(-x) * ((1 - 2 * _sig(x)) * (x - k) + 1),
        )
    if name == "discopop":
        # DiscoPOP (Chris Lu et al. 2024, arXiv:2406.08414, eq. 5), the log-ratio modulated
        # loss: phi = (1 - m) A + m E with m = sigma(x / tau), A = -log sigma(x), E = e^{-x};
        # phi = A + m (E - A), so phi' = A' + m'(E - A) + m (E' - A') and
        # phi'' = A'' + m''(E - A) + 2 m'(E' - A') + m (E'' - A''), with A' = -sigma(-x),
        # A'' = sigma(x) sigma(-x), E' = -E, E'' = E, m' = m (1 - m) / tau,
        # m'' = m (1 - m)(1 - 2 m) / tau^2
        tau = mp.mpf(float(o.get("tau", 0.05)))

        def parts(x):
            m = _sig(x / tau)
            return m, m * (1 - m) / tau, m * (1 - m) * (1 - 2 * m) / tau**2, mp.log1p(mp.exp(-x))

        def d1(x):
            m, m1, _, a = parts(x)
            e, a1 = mp.exp(-x), -_sig(-x)
            return a1 + m1 * (e - a) + m * (-e - a1)

        def d2(x):
            m, m1, m2, a = parts(x)
            e, a1, a2 = mp.exp(-x), -_sig(-x), _sig(x) * _sig(-x)
            return a2 + m2 * (e - a) + 2 * m1 * (-e - a1) + m * (e - a2)

        return d1, d2
    raise AssertionError(name)


def loss_function(name, o):
    """phi itself (exo_pair, discopop), written from the papers' definitions."""
    if name == "exo_pair":
        e = mp.mpf(float(o.get("epsilon", 1e-3)))
        return lambda x: (
            _sig(x) * (mp.log(_sig(x)) - mp.log(1 - e)) + _sig(-x) * (mp.log(_sig(-x)) - mp.log(e))
        )
    if name == "discopop":
        tau = mp.mpf(float(o.get("tau", 0.05)))
        return lambda x: (1 - _sig(x / tau)) * mp.log1p(mp.exp(-x)) + _sig(x / tau) * mp.exp(-x)
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


def hessian(d2, w, x, free):
    """The Hessian of sum_ij w_ij phi(x_i - x_j) on the coordinates ``free``."""
    n = len(w)
    m = mp.matrix(len(free), len(free))
    for a, i in enumerate(free):
        for b, k in enumerate(free):
            if i == k:
                m[a, b] = mp.fsum(
                    w[i][j] * d2(x[i] - x[j]) + w[j][i] * d2(x[j] - x[i])
                    for j in range(n)
                    if j != i
                )
            else:
                m[a, b] = -(w[i][k] * d2(x[i] - x[k]) + w[k][i] * d2(x[k] - x[i]))
    return m


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
        m = hessian(d2, w, x, free)
        for a, i in enumerate(free):
            for b in range(len(free)):
                m[a, b] /= tot[i]
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


def _scaled_hessian(d2, w, x, free, tot):
    """The gauge-fixed Hessian scaled to D^-1 H D^-1 with D_i = sqrt(tot_i): each outcome
    at its own weight's scale."""
    m = hessian(d2, w, x, free)
    for a, i in enumerate(free):
        for b, k in enumerate(free):
            m[a, b] /= mp.sqrt(tot[i] * tot[k])
    return m


def smallest_curvature(d2, w, x):
    """The smallest eigenvalue of the scaled gauge-fixed Hessian at ``x`` (> 0: a strict
    local minimum when ``x`` is stationary)."""
    n = len(w)
    tot = [mp.fsum(w[i][j] + w[j][i] for j in range(n)) for i in range(n)]
    anchor = max(range(n), key=lambda i: tot[i])
    free = [i for i in range(n) if i != anchor]
    if not free:
        return mp.inf
    return min(mp.eigsy(_scaled_hessian(d2, w, x, free, tot), eigvals_only=True))


def minimise_local(phi, d1, d2, w, x0=None):
    """A local minimiser of sum_ij w_ij phi(x_i - x_j) for a non-convex phi, from ``x0``.

    Saddle-free Newton (Dauphin et al. 2014): the step solves |H| d = -grad on the scaled
    gauge-fixed Hessian (eigenvalues replaced by their absolute values, at least 1e-6),
    so it descends and leaves saddles; an Armijo search on the loss, evaluated with 40
    extra digits so that the pairs of the smallest weights (1e-60 of the total) still
    show, and near the answer (Hessian positive definite) a full step that shrinks the
    scaled residual. Converged when max |F_i| < 10^-(DPS - 10); the caller checks
    :func:`smallest_curvature` > 0 there.
    """
    n = len(w)
    tot = [mp.fsum(w[i][j] + w[j][i] for j in range(n)) for i in range(n)]
    anchor = max(range(n), key=lambda i: tot[i])
    free = [i for i in range(n) if i != anchor]
    tol = mp.mpf(10) ** -(mp.mp.dps - 10)

    def value(x):
        with mp.extradps(40):
            return mp.fsum(w[i][j] * phi(x[i] - x[j]) for i in range(n) for j in range(n) if i != j)

    def grad(x):
        return [
            mp.fsum(
                w[i][j] * d1(x[i] - x[j]) - w[j][i] * d1(x[j] - x[i]) for j in range(n) if j != i
            )
            for i in free
        ]

    x = [mp.mpf(0)] * n if x0 is None else [mp.mpf(v) - mp.mpf(x0[anchor]) for v in x0]
    g = grad(x)
    f = value(x)
    for _ in range(500):
        res = [v / tot[i] for v, i in zip(g, free)]
        if not res or max(abs(v) for v in res) < tol:
            return x
        hs = _scaled_hessian(d2, w, x, free, tot)
        lam, q = mp.eigsy(hs)
        convex = min(lam) > 0
        gs = mp.matrix([v / mp.sqrt(tot[i]) for v, i in zip(g, free)])
        c = q.T * gs
        ds = q * mp.matrix([-c[a] / max(abs(lam[a]), mp.mpf("1e-6")) for a in range(len(free))])
        step = [ds[a] / mp.sqrt(tot[i]) for a, i in enumerate(free)]
        big = max(abs(v) for v in step)
        if big > 8:  # at most 8 log-odds units at once
            step = [v * 8 / big for v in step]
        slope = mp.fsum(gv * sv for gv, sv in zip(g, step))
        merit = mp.fsum(v * v for v in res)
        t = mp.mpf(1)
        while True:
            cand = list(x)
            for a, i in enumerate(free):
                cand[i] = x[i] + t * step[a]
            fc, gc = value(cand), grad(cand)
            if fc <= f + t * slope / 10**4:
                break
            if (
                convex
                and t == 1
                and mp.fsum((v / tot[i]) ** 2 for v, i in zip(gc, free)) < merit / 4
            ):
                break
            if t < mp.mpf(2) ** -80:
                raise AssertionError("the mpmath reference found no descent")
            t /= 2
        x, f, g = cand, fc, gc
    raise AssertionError("the mpmath reference did not converge")


def _tilt(q, x, beta):
    b = mp.mpf(float(beta))
    logits = [mp.log(q[i]) + x[i] / b for i in range(len(q))]
    m = max(logits)
    z = mp.fsum(mp.exp(v - m) for v in logits)
    return np.array([float(mp.exp(v - m) / z) for v in logits])


def polish(name, o, ref, p, beta, pi):
    """The local minimiser next to a float answer ``pi`` (exo_pair, discopop), as floats.

    :func:`minimise_local` started from ``x = beta log(pi / ref)`` and converged to
    60 digits; its scaled Hessian must be positive definite (a strict local minimum).
    For losses with many local minima (discopop at its default tau = 0.05: every pair's
    loss has one on each side of a tie) this certifies that ``pi`` is, to its digits, a
    local minimiser; it does not say which of them.
    """
    with mp.workdps(DPS):
        q, w = weights(ref, p)
        d1, d2 = derivatives(name, o)
        b = mp.mpf(float(beta))
        x0 = [b * (mp.log(mp.mpf(float(pi[i]))) - mp.log(q[i])) for i in range(len(q))]
        x = minimise_local(loss_function(name, o), d1, d2, w, x0)
        lam = smallest_curvature(d2, w, x)
        assert lam > 0, f"the polished point is not a local minimum ({mp.nstr(lam, 5)})"
        return _tilt(q, x, beta)


def residual_and_curvature(name, o, ref, p, beta, pi):
    """The largest scaled residual max |F_i| and :func:`smallest_curvature` at a float
    answer ``pi`` (its scores x = beta log(pi / ref)), in mpmath."""
    with mp.workdps(DPS):
        q, w = weights(ref, p)
        d1, d2 = derivatives(name, o)
        n = len(q)
        x = [mp.mpf(beta) * (mp.log(mp.mpf(float(pi[i]))) - mp.log(q[i])) for i in range(n)]
        tot = [mp.fsum(w[i][j] + w[j][i] for j in range(n)) for i in range(n)]
        res = max(
            abs(mp.fsum(w[i][j] * d1(x[i] - x[j]) - w[j][i] * d1(x[j] - x[i]) for j in range(n)))
            / tot[i]
            for i in range(n)
        )
        return float(res), float(smallest_curvature(d2, w, x))


def policy(name, o, ref, p, beta, *, return_scores=False):
    """The reference population optimum as floats (mpmath inside ``workdps(DPS)``).

    ``exo_pair`` and ``discopop`` are not convex: their reference is the local minimiser
    :func:`minimise_local` reaches from x = 0, checked to have a positive definite scaled
    Hessian (a strict local minimum) in mpmath.
    """
    with mp.workdps(DPS):
        q, w = weights(ref, p)
        d1, d2 = derivatives(name, o)
        if name in ("exo_pair", "discopop"):
            x = minimise_local(loss_function(name, o), d1, d2, w)
            lam = smallest_curvature(d2, w, x)
            assert lam > 0, f"the mpmath reference is not a local minimum ({mp.nstr(lam, 5)})"
        else:
            x = minimise(d1, d2, w)
        b = mp.mpf(1) if name == "ipo" else mp.mpf(float(beta))
        logits = [mp.log(q[i]) + x[i] / b for i in range(len(q))]
        m = max(logits)
        z = mp.fsum(mp.exp(v - m) for v in logits)
        pi = np.array([float(mp.exp(v - m) / z) for v in logits])
        return (pi, x) if return_scores else pi
