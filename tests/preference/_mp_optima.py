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
reference is :func:`minimise_local`: Newton's step by Cholesky where the Hessian scaled by
each outcome's total weight is positive definite, the saddle-free Newton step (|H| d =
-grad, eigenpairs by Jacobi's method, :func:`_eigsy`) elsewhere, with an Armijo search on
the loss itself (40 extra digits), started from x = 0, an independent start (the float
solver starts from a least-squares fit), to max |F_i| < 10^-(DPS - 10); the point is then
certified a strict local minimum (:func:`certify_minimum`): the Cholesky factorisation
of the scaled gauge-fixed Hessian exists, in mpmath. Where a
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
    """phi itself (exo_pair, discopop, robust, sigmoid), written from the definitions."""
    if name == "exo_pair":
        e = mp.mpf(float(o.get("epsilon", 1e-3)))
        return lambda x: (
            _sig(x) * (mp.log(_sig(x)) - mp.log(1 - e)) + _sig(-x) * (mp.log(_sig(-x)) - mp.log(e))
        )
    if name == "discopop":
        tau = mp.mpf(float(o.get("tau", 0.05)))
        return lambda x: (1 - _sig(x / tau)) * mp.log1p(mp.exp(-x)) + _sig(x / tau) * mp.exp(-x)
    if name == "robust":
        e = mp.mpf(float(o["label_smoothing"]))
        return lambda x: ((1 - e) * mp.log1p(mp.exp(-x)) - e * mp.log1p(mp.exp(x))) / (1 - 2 * e)
    if name == "sigmoid":
        return lambda x: mp.log1p(mp.exp(-x))
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


def _gauge(w):
    """n, each outcome's total weight sum_j (w_ij + w_ji), the outcome pinned to 0 (the
    heaviest) and the free ones."""
    n = len(w)
    tot = [mp.fsum(w[i][j] + w[j][i] for j in range(n)) for i in range(n)]
    anchor = max(range(n), key=lambda i: tot[i])
    return n, tot, anchor, [i for i in range(n) if i != anchor]


def _tolerance():
    """The convergence bar on the scaled residual max |F_i|: 10^-(DPS - 10)."""
    return mp.mpf(10) ** -(mp.mp.dps - 10)


def minimise(d1, d2, w):
    """Scores x minimising sum_ij w_ij phi(x_i - x_j) (support: every outcome)."""
    n, tot, _, free = _gauge(w)
    tol = _tolerance()

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
    _, tot, _, free = _gauge(w)
    if not free:
        return mp.inf
    return min(_eigsy(_scaled_hessian(d2, w, x, free, tot))[0])


def certify_minimum(d2, w, x):
    """Assert that ``x`` (stationary) is a strict local minimum: the Cholesky factorisation
    of the scaled gauge-fixed Hessian exists (a proof that it is positive definite, with
    no eigen-solver involved), and its smallest eigenvalue (:func:`smallest_curvature`,
    for the message) is positive."""
    _, tot, _, free = _gauge(w)
    if not free:
        return
    lam = smallest_curvature(d2, w, x)
    try:
        mp.cholesky(_scaled_hessian(d2, w, x, free, tot))
    except ValueError:
        raise AssertionError(
            f"the point is not a strict local minimum (smallest curvature {mp.nstr(lam, 5)})"
        ) from None
    assert lam > 0, f"the point is not a strict local minimum ({mp.nstr(lam, 5)})"


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
    n, tot, anchor, free = _gauge(w)
    tol = _tolerance()

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
        gs = mp.matrix([v / mp.sqrt(tot[i]) for v, i in zip(g, free)])
        try:  # positive definite: Newton's step by Cholesky (no eigen-solver)
            ds = -mp.cholesky_solve(hs, gs)
            convex = True
        except ValueError:  # indefinite: saddle-free Newton by Jacobi's eigenpairs
            convex = False
            lam, q = _eigsy(hs)
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


def _eigsy(h):
    """Eigenvalues (ascending) and orthonormal eigenvectors (columns) of the symmetric
    ``h``, by the cyclic Jacobi method (rotations that zero each off-diagonal entry in
    turn, until the off-diagonal part is below the working precision). Written here
    because ``mp.eigsy`` (QL) and ``mp.eig`` (QR) both stall on the exactly repeated
    eigenvalues of symmetric problems (uniform ref, dyadic P: "no convergence"); Jacobi
    converges on any symmetric matrix, repeated eigenvalues included."""
    n = h.rows
    a = h.copy()
    v = mp.eye(n)
    if not all(mp.isfinite(a[i, j]) for i in range(n) for j in range(n)):
        raise AssertionError(f"a Hessian entry is not finite: {a}")
    tol = mp.mpf(2) ** (-2 * (mp.mp.prec - 8))  # squared: off-diagonal norm below 2^-(prec-8)
    for _ in range(100):
        off = mp.fsum(a[i, j] ** 2 for i in range(n) for j in range(n) if i != j)
        if not off > tol * mp.fsum(a[i, j] ** 2 for i in range(n) for j in range(n)):
            break
        for p in range(n - 1):
            for q in range(p + 1, n):
                if a[p, q] == 0:
                    continue
                theta = (a[q, q] - a[p, p]) / (2 * a[p, q])
                t = (1 if theta >= 0 else -1) / (abs(theta) + mp.sqrt(theta * theta + 1))
                c = 1 / mp.sqrt(t * t + 1)
                s = t * c
                for k in range(n):  # columns p, q of A J and of V J
                    a[k, p], a[k, q] = c * a[k, p] - s * a[k, q], s * a[k, p] + c * a[k, q]
                    v[k, p], v[k, q] = c * v[k, p] - s * v[k, q], s * v[k, p] + c * v[k, q]
                for k in range(n):  # rows p, q of J^T (A J)
                    a[p, k], a[q, k] = c * a[p, k] - s * a[q, k], s * a[p, k] + c * a[q, k]
    else:
        raise AssertionError("Jacobi's eigenvalue iteration did not converge")
    order = sorted(range(n), key=lambda k: a[k, k])
    q = mp.matrix(n, n)
    for col, k in enumerate(order):
        for i in range(n):
            q[i, col] = v[i, k]
    return [a[k, k] for k in order], q


def _scores(q, pi, beta):
    """x = beta log(pi / q) from a float answer; an entry 0 (underflowed) starts just
    below the smallest float, 2^-1075, and the minimiser moves it from there."""
    b = mp.mpf(float(beta))
    floor = mp.mpf(2) ** -1075
    return [b * (mp.log(max(mp.mpf(float(pi[i])), floor)) - mp.log(q[i])) for i in range(len(q))]


def polish(name, o, ref, p, beta, pi):
    """The local minimiser next to a float answer ``pi`` (exo_pair, discopop), as floats.

    :func:`minimise_local` started from ``x = beta log(pi / ref)`` (an entry 0 of ``pi``
    from just below the smallest float, :func:`_scores`) and converged to 60 digits; it
    must be a strict local minimum (:func:`certify_minimum`).
    For losses with many local minima (discopop at its default tau = 0.05: every pair's
    loss has one on each side of a tie) this certifies that ``pi`` is, to its digits, a
    local minimiser; it does not say which of them.
    """
    with mp.workdps(DPS):
        q, w = weights(ref, p)
        d1, d2 = derivatives(name, o)
        x = minimise_local(loss_function(name, o), d1, d2, w, _scores(q, pi, beta))
        certify_minimum(d2, w, x)
        return _tilt(q, x, beta)


def residual_and_curvature(name, o, ref, p, beta, pi):
    """The largest scaled residual max |F_i| and :func:`smallest_curvature` at a float
    answer ``pi`` (its scores x = beta log(pi / ref)), in mpmath."""
    with mp.workdps(DPS):
        q, w = weights(ref, p)
        d1, d2 = derivatives(name, o)
        x = _scores(q, pi, beta)
        n, tot, _, _ = _gauge(w)
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
            certify_minimum(d2, w, x)
        else:
            x = minimise(d1, d2, w)
        b = mp.mpf(1) if name == "ipo" else mp.mpf(float(beta))
        logits = [mp.log(q[i]) + x[i] / b for i in range(len(q))]
        m = max(logits)
        z = mp.fsum(mp.exp(v - m) for v in logits)
        pi = np.array([float(mp.exp(v - m) / z) for v in logits])
        return (pi, x) if return_scores else pi


# ---------------------------------------------------------------------------
# the per-outcome losses (nca_pair, bco_pair, sppo_hard): a separable problem
# ---------------------------------------------------------------------------


def _per_outcome_derivatives(name, o, beta):
    """A', A'' (chosen) and B', B'' (rejected) of the pair loss A(a) + B(b), from its
    definition in LOSSES (a, b the chosen and rejected log-ratios)."""
    b = mp.mpf(float(beta))
    if name == "nca_pair":  # sp(-b a) + sp(b a) / 2 + sp(b v) / 2
        return (
            lambda a: b * (_sig(b * a) / 2 - _sig(-b * a)),
            lambda a: b * b * _sig(b * a) * _sig(-b * a) * mp.mpf(3) / 2,
            lambda v: b * _sig(b * v) / 2,
            lambda v: b * b * _sig(b * v) * _sig(-b * v) / 2,
        )
    if name == "bco_pair":  # sp(d - b a) + sp(b v - d)
        d = mp.mpf(float(o["delta"]))
        return (
            lambda a: -b * _sig(d - b * a),
            lambda a: b * b * _sig(d - b * a) * _sig(b * a - d),
            lambda v: b * _sig(b * v - d),
            lambda v: b * b * _sig(b * v - d) * _sig(d - b * v),
        )
    if name == "sppo_hard":  # (a - k)^2 + (v + k)^2, k = 1 / (2 beta)
        k = 1 / (2 * b)
        return (
            lambda a: 2 * (a - k),
            lambda a: mp.mpf(2),
            lambda v: 2 * (v + k),
            lambda v: mp.mpf(2),
        )
    raise AssertionError(name)


def _per_outcome_value(name, o, beta):
    b = mp.mpf(float(beta))

    def sp(t):
        return mp.log1p(mp.exp(t)) if t < 0 else t + mp.log1p(mp.exp(-t))

    if name == "nca_pair":
        return lambda a: sp(-b * a) + sp(b * a) / 2, lambda v: sp(b * v) / 2
    if name == "bco_pair":
        d = mp.mpf(float(o["delta"]))
        return lambda a: sp(d - b * a), lambda v: sp(b * v - d)
    k = 1 / (2 * b)
    return lambda a: (a - k) ** 2, lambda v: (v + k) ** 2


def _mono_root(fn, dfn, lo, hi, increasing=True, x0=None):
    """The root of a monotone fn on [lo, hi] (signs checked): Newton steps kept inside the
    bracket (from ``x0``, default the midpoint), bisection otherwise, until a step is
    below the working precision."""
    s = 1 if increasing else -1
    if s * fn(lo) >= 0:
        return lo
    if s * fn(hi) <= 0:
        return hi
    x = (lo + hi) / 2 if x0 is None or not lo < x0 < hi else x0
    eps = mp.mpf(2) ** (-mp.mp.prec + 8)
    for _ in range(4 * mp.mp.prec):
        fx = s * fn(x)
        if fx == 0:
            return x
        if fx < 0:
            lo = x
        else:
            hi = x
        if hi - lo <= eps * (abs(lo) + abs(hi)):
            return (lo + hi) / 2
        d = s * dfn(x)
        nx = x - fx / d if d > 0 else None
        if nx is not None and lo < nx < hi:
            if abs(nx - x) <= eps * abs(x):
                return nx
            x = nx
        else:
            x = (lo + hi) / 2
    return x


def _expand(fn, start, step, want_positive):
    """Move from ``start`` by doubling steps until fn has the wanted sign."""
    x = start
    for _ in range(3000):
        if (fn(x) > 0) == want_positive:
            return x
        x += step
        step *= 2
    raise AssertionError("no bracket")


def separable_policy(name, o, ref, p, beta, joint=None, *, details=False):
    """The population optimum of a per-outcome loss, as floats, from 60-digit mpmath.

    Recipe: W as in :func:`weights`, its diagonal (pairs of identical responses) kept; c_i = sum_j W_ij (chosen), r_i = sum_j W_ji
    (rejected); the loss is sum_i f_i(g_i), f_i = c_i A + r_i B with A, B written from the
    definitions in LOSSES, over g = log(pi / ref) with sum_i ref_i e^{g_i} = 1.
    The free minimisers g0_i (f_i' = 0, by bisection/Newton) carry mass S0.
    - S0 >= 1 (convex): f_i'(g_i) + lam ref_i e^{g_i} = 0 with lam >= 0 the root of the
      mass (decreasing in lam; outcomes never chosen get mass 0).
    - S0 < 1 with outcomes of the support never compared: g0, the rest of the mass to
      those in proportion to ref.
    - S0 < 1, all compared (non-convex in the masses m_i): every minimiser is a KKT point
      F_i'(m_i) = nu with F_i(m) = f_i(log(m / ref_i)); each marginal cost
      h_i(g) = f_i'(g) e^{-g} / ref_i is unimodal on [g0_i, -log ref_i] (its peak, where
      f_i'' = f_i', found by bisection), so each outcome sits on its rising or its falling
      branch. Enumerated: all rising (mass increasing in nu: one root) and each single
      outcome k falling, parametrised by g_k itself on a 400-point grid of its falling
      branch (uniform, and geometric towards both ends), every sign change of the mass
      refined by bisection in g_k. The candidate of least loss (60 digits) wins. (Two
      outcomes falling is never a minimiser: e_j - e_k is a descent direction.)
    Nothing here reads the float answer under test. ``details=True`` also returns the
    candidates' losses (mpf, sorted) to show how close the runner-up is.
    """
    with mp.workdps(DPS):
        q, w = weights(ref, p, joint)
        n = len(q)
        for i in range(n):  # pairs of identical responses count here (a = b = g_i)
            mu_ii = q[i] * q[i] if joint is None else mp.mpf(float(joint[i][i]))
            w[i][i] = 2 * mu_ii * mp.mpf(float(p[i][i]))
        c = [mp.fsum(w[i]) for i in range(n)]
        r = [mp.fsum(w[j][i] for j in range(n)) for i in range(n)]
        da, dda, db, ddb = _per_outcome_derivatives(name, o, beta)
        va, vb = _per_outcome_value(name, o, beta)

        def d1(i, g):
            return c[i] * da(g) + r[i] * db(g)

        def d2(i, g):
            return c[i] * dda(g) + r[i] * ddb(g)

        def loss(g):
            return mp.fsum(
                c[i] * va(g[i]) + r[i] * vb(g[i])
                for i in range(n)
                if c[i] + r[i] > 0 and g[i] != -mp.inf
            )

        compared = [c[i] + r[i] > 0 for i in range(n)]
        lq = [mp.log(v) if v > 0 else None for v in q]
        g0 = []
        for i in range(n):
            if not compared[i] or c[i] == 0:
                g0.append(-mp.inf)
                continue
            lo = _expand(lambda g, i=i: d1(i, g), mp.mpf(0), mp.mpf(-1), False)
            hi = _expand(lambda g, i=i: d1(i, g), mp.mpf(0), mp.mpf(1), True)
            g0.append(_mono_root(lambda g, i=i: d1(i, g), lambda g, i=i: d2(i, g), lo, hi))
        s0 = mp.fsum(q[i] * mp.exp(g0[i]) for i in range(n) if compared[i] and g0[i] != -mp.inf)
        unseen = [i for i in range(n) if q[i] > 0 and not compared[i]]
        g = [-mp.inf] * n
        cands = []
        if s0 >= 1:

            def g_of(t, i):  # f_i'(g) + e^t ref_i e^g = 0, increasing in g
                lam = mp.exp(t)

                def u(x):
                    return d1(i, x) + lam * q[i] * mp.exp(x)

                def du(x):
                    return d2(i, x) + lam * q[i] * mp.exp(x)

                hi = g0[i]
                lo = _expand(u, hi, mp.mpf(-1), False)
                return _mono_root(u, du, lo, hi)

            live = [i for i in range(n) if compared[i] and g0[i] != -mp.inf]

            def excess(t):
                return mp.fsum(q[i] * mp.exp(g_of(t, i)) for i in live) - 1

            if s0 == 1:
                t = None
            else:
                hi = _expand(excess, mp.mpf(0), mp.mpf(1), False)
                lo = _expand(excess, mp.mpf(0), mp.mpf(-1), True)
                for _ in range(mp.mp.prec + 20):  # bisection in t (mass decreasing)
                    mid = (lo + hi) / 2
                    if excess(mid) > 0:
                        lo = mid
                    else:
                        hi = mid
                t = (lo + hi) / 2
            for i in live:
                g[i] = g0[i] if t is None else g_of(t, i)
            cands.append(g)
        elif unseen:
            rest = (1 - s0) / mp.fsum(q[i] for i in unseen)
            for i in range(n):
                g[i] = g0[i] if compared[i] else mp.log(rest)
            cands.append(g)
        else:
            if any(v == -mp.inf for v in g0):
                raise ValueError("non-convex case with an outcome never chosen")
            gmax = [-v for v in lq]

            def hpeak(i):  # h_i' ~ f_i'' - f_i': positive at g0, negative at the peak's right
                def u(x):
                    return d1(i, x) - d2(i, x)

                def du(x):
                    return mp.diff(u, x)

                hi = _expand(u, g0[i] + 1, mp.mpf(1), True)
                return _mono_root(u, du, g0[i], hi)

            peak = [hpeak(i) for i in range(n)]
            top_g = [min(peak[i], gmax[i]) for i in range(n)]

            def logh(i, x):
                return mp.log(d1(i, x)) - x - lq[i]

            logtop = [logh(i, top_g[i]) for i in range(n)]

            def rising(i, lognu, x0=None):  # g on [g0, top], log h_i(g) = lognu (increasing)
                if lognu >= logtop[i]:
                    return None
                return _mono_root(
                    lambda x: logh(i, x) - lognu if x > g0[i] else -mp.inf,
                    lambda x: (d2(i, x) - d1(i, x)) / d1(i, x),
                    g0[i],
                    top_g[i],
                    x0=x0,
                )

            def mass(gs):
                return mp.fsum(q[i] * mp.exp(gs[i]) for i in range(n))

            # all rising: mass increasing in nu from S0 < 1
            lt = min(logtop)
            full = [rising(i, lt - mp.mpf(10) ** (-40)) for i in range(n)]
            if mass(full) >= 1:
                lo = lt - 1
                while mass([rising(i, lo) for i in range(n)]) > 1:
                    lo -= 1
                hi = lt - mp.mpf(10) ** (-40)
                for _ in range(mp.mp.prec + 20):
                    mid = (lo + hi) / 2
                    if mass([rising(i, mid) for i in range(n)]) < 1:
                        lo = mid
                    else:
                        hi = mid
                cands.append([rising(i, (lo + hi) / 2) for i in range(n)])
            # outcome k falling, parametrised by g_k in [peak_k, gmax_k]
            for k in range(n):
                if peak[k] >= gmax[k]:
                    continue

                last = [None] * n

                def excess_k(x, k=k, last=last):
                    ln = logh(k, x)
                    gs = [x if i == k else rising(i, ln, last[i]) for i in range(n)]
                    last[:] = gs
                    if any(v is None for v in gs):
                        return None, None
                    return mass(gs) - 1, gs

                a, b_ = peak[k], gmax[k]
                span = b_ - a
                u = [mp.mpf(j) / 120 for j in range(121)]
                geo = [mp.mpf(10) ** (-mp.mpf(j) / 4) for j in range(1, 60)]
                pts = sorted(
                    set([a + span * v for v in u] + [a + span * v for v in geo])
                    | set(b_ - span * v for v in geo)
                )
                prev = None
                for x in pts:
                    e, gs = excess_k(x)
                    if e is None:
                        prev = None
                        continue
                    if e == 0:
                        cands.append(gs)
                    elif prev is not None and (prev[0] < 0) != (e < 0):
                        lo, hi = prev[1], x
                        elo = prev[0]
                        for _ in range(mp.mp.prec + 20):
                            mid = (lo + hi) / 2
                            em, _gs = excess_k(mid)
                            if (em < 0) == (elo < 0):
                                lo = mid
                            else:
                                hi = mid
                        cands.append(excess_k((lo + hi) / 2)[1])
                    prev = (e, x)
        scored = sorted(((loss(gs), gs) for gs in cands), key=lambda t: t[0])
        best = scored[0][1]
        pi = [q[i] * mp.exp(best[i]) if best[i] != -mp.inf else mp.mpf(0) for i in range(n)]
        s = mp.fsum(pi)
        out = np.array([float(v / s) for v in pi])
        if details:
            return out, [t[0] for t in scored]
        return out
