r"""Exact solvers for the population preference losses of :mod:`klpolicy.preference`.

Both losses depend on a tabular policy only through the log-ratios
:math:`g = \log(\pi/\pi_{ref})` on the reference's support, and only through
differences :math:`g_i - g_j`. With win weights :math:`W_{ij}` (probability of
observing ``i`` chosen over ``j``):

* IPO, :math:`\sum W_{ij}(g_i - g_j - c)^2`, is quadratic: its stationarity
  condition is a weighted graph-Laplacian system (:func:`laplacian_solve`);
* DPO, :math:`\sum W_{ij}\,\mathrm{softplus}(-\beta(g_i - g_j))`, is convex
  with a weighted-Laplacian Hessian: Newton's method with a line search
  (:func:`minimise_pair_loss`).

The gauge (a constant added to ``g``) is fixed by pinning one coordinate to 0:
the outcome with the largest total pair weight (:func:`_anchor`), a choice that does
not depend on the labelling of the outcomes. Pinning an outcome of tiny weight instead
(say the last one, of reference mass 1e-18) leaves every other coordinate determined
relative to it only through tiny weights: the solves lose the digits that the weights
span, and the answer depends on the order of the outcomes. The callers normalise.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from ..core.internal import special
from ..core.internal import validation as V

__all__ = ["consistent_potentials", "laplacian_solve", "minimise_pair_loss"]

_LOGIT_CLIP = 700.0
_MAX_STEP = 8.0  # the largest Newton step of the margin solver, in log-odds units


def _check_inputs(name: str, w, support) -> tuple[NDArray, NDArray]:
    """A square finite non-negative weight matrix and a boolean support of its size."""
    a = V.as_finite_array(name, w).astype(np.float64, copy=False)
    if a.ndim != 2 or a.shape[0] != a.shape[1]:
        raise ValueError(f"`{name}` must be a square matrix; got shape {a.shape}")
    if (a < 0).any():
        idx = tuple(int(i) for i in np.argwhere(a < 0)[0])
        raise ValueError(f"`{name}` must be non-negative; found {a[idx]:g} at index {idx}")
    if isinstance(support, (str, bytes)) or support is None:
        raise ValueError(f"`support` must be a boolean array; got {V.describe(support)}")
    try:
        s = np.asarray(support)
    except ValueError:
        raise ValueError(f"`support` must be a boolean array; got {V.describe(support)}") from None
    if s.dtype != np.bool_ or s.shape != (a.shape[0],):
        raise ValueError(
            f"`support` must be a boolean array of shape ({a.shape[0]},); "
            f"got dtype {s.dtype} and shape {s.shape}"
        )
    return a, s


def _groups(labels: NDArray, idx: NDArray) -> list[list[int]]:
    return [sorted(int(i) for i in idx[labels == c]) for c in np.unique(labels)]


def _check_connected(sym: NDArray, idx: NDArray) -> None:
    """Raise unless the pairs with positive mass connect every outcome in ``idx``."""
    if idx.size <= 1:
        return
    adj = sym[np.ix_(idx, idx)] > 0
    np.fill_diagonal(adj, False)
    from scipy.sparse import csr_matrix  # lazy: keeps `import klpolicy` light
    from scipy.sparse.csgraph import connected_components

    n_comp, labels = connected_components(csr_matrix(adj), directed=False)
    if n_comp > 1:
        groups = _groups(labels, idx)
        rest = sorted(i for grp in groups[1:] for i in grp)
        raise ValueError(
            "the pairs drawn from `mu` do not connect the support of `ref`: outcomes "
            f"{groups[0]} are never compared with outcomes {rest}; "
            "the population loss does not determine their relative probabilities"
        )


def _anchor(sym: NDArray) -> int:
    """The coordinate pinned to 0: the outcome of largest total pair weight in ``sym``.

    Independent of the labelling (up to exact ties, which are equally well determined):
    every other coordinate is then tied to the anchor through its own, largest weights.
    """
    return int(np.argmax(np.sum(sym, axis=1)))


def _others(k: int, anchor: int) -> NDArray:
    return np.flatnonzero(np.arange(k) != anchor)


def laplacian_solve(sym: NDArray, rhs: NDArray, support: NDArray) -> NDArray[np.float64]:
    """Solve ``sum_j sym[i, j] (g_i - g_j) = rhs[i]`` on ``support`` (``g`` = 0 elsewhere).

    ``sym`` is symmetric and non-negative, ``rhs`` sums to 0 over the support.
    The solution is unique up to a constant when the pairs connect the support; the one
    returned is 0 at the outcome of largest total weight. Each entry is accurate relative
    to its own row's weights, whatever the weights' span and the outcomes' order: the
    Jacobi-scaled system is solved with the heaviest outcome pinned, then refined twice
    on the residual written as ``rhs_i - sum_j sym_ij (g_i - g_j)``.

    Returns
    -------
    ndarray
        The solution ``g``, 0 off the support.
    """
    sym, support = _check_inputs("sym", sym, support)
    rhs = V.as_finite_array("rhs", rhs).astype(np.float64, copy=False)
    if rhs.shape != support.shape:
        raise ValueError(f"`rhs` must have shape {support.shape}; got {rhs.shape}")
    idx = np.flatnonzero(support)
    g = np.zeros(sym.shape[0])
    if idx.size <= 1:
        return g
    _check_connected(sym, idx)
    a = sym[np.ix_(idx, idx)].copy()
    np.fill_diagonal(a, 0.0)
    free = _others(idx.size, _anchor(a))
    lap = np.diag(a.sum(axis=1)) - a
    b = rhs[idx]
    sub = np.zeros(idx.size)
    for _ in range(3):  # solve, then refine twice on the exactly-formed residual
        resid = b - np.sum(a * (sub[:, None] - sub[None, :]), axis=1)
        sub[free] += _scaled_solve(lap[np.ix_(free, free)], resid[free])
    g[idx] = sub
    return g


def consistent_potentials(logit: NDArray, compared: NDArray, support: NDArray) -> NDArray | None:
    """Potentials ``a`` with ``logit[i, j] = a_i - a_j`` on every compared pair, or ``None``.

    When the preferences' log-odds are additive on the pairs (Bradley-Terry, and anything
    equivalent), every pair's loss is minimised at once by ``beta g = a``, whatever the
    pair weights: the population optimum is then the closed form with reward ``a``,
    independent of weights that may span hundreds of decades (pair masses of 1e-300) or
    underflow. ``a`` is the unweighted least-squares fit (a well-conditioned graph
    Laplacian); it is accepted when it reproduces every compared pair's log-odds to
    rounding. ``None`` when a compared pair is deterministic (infinite log-odds), when the
    compared pairs do not connect the support, or when the log-odds are not additive.

    Returns
    -------
    ndarray or None
        The potentials, or None where no potentials fit every compared pair.
    """
    idx = np.flatnonzero(support)
    if idx.size <= 1:
        return np.zeros(logit.shape[0])
    sub = compared[np.ix_(idx, idx)].copy()
    np.fill_diagonal(sub, False)
    lg = logit[np.ix_(idx, idx)]
    if not np.all(np.isfinite(lg[sub])):
        return None
    from scipy.sparse import csr_matrix  # lazy: keeps `import klpolicy` light
    from scipy.sparse.csgraph import connected_components

    n_comp, _ = connected_components(csr_matrix(sub), directed=False)
    if n_comp > 1:
        return None
    adj = sub.astype(np.float64)
    lg = np.where(sub, lg, 0.0)
    a = laplacian_solve(adj, np.sum(lg, axis=1), np.ones(idx.size, bool))
    resid = np.abs(lg - (a[:, None] - a[None, :]))[sub]
    tol = 64 * np.finfo(np.float64).eps * (1.0 + float(np.max(np.abs(lg))))
    if resid.size and not float(np.max(resid)) <= tol:
        return None
    out = np.zeros(logit.shape[0])
    out[idx] = a
    return out


def _softplus(x: NDArray) -> NDArray:
    with np.errstate(under="ignore"):
        return np.logaddexp(0.0, x)


def _value(g: NDArray, w: NDArray, beta: float) -> float:
    return float(np.sum(w * _softplus(-beta * (g[:, None] - g[None, :]))))


def _grad_hess(g: NDArray, w: NDArray, beta: float) -> tuple[NDArray, NDArray]:
    h = beta * (g[:, None] - g[None, :])
    s = special.expit(-h)
    c = -beta * w * s
    grad = c.sum(axis=1) - c.sum(axis=0)
    # components below the rounding level of their own terms are noise: zero them, so
    # that Newton does not amplify them along weakly determined directions
    # (a term's relative error grows with |beta h| and with beta |g|, the rounding of g)
    ag = np.abs(g)
    rel = 64 * np.finfo(float).eps * (1 + np.abs(h) + beta * g.size * (ag[:, None] + ag[None, :]))
    err = np.abs(c) * rel
    noise = err.sum(axis=1) + err.sum(axis=0)
    grad = np.where(np.abs(grad) <= noise, 0.0, grad)
    e = beta * beta * w * s * special.expit(h)
    e = e + e.T
    hess = np.diag(e.sum(axis=1)) - e
    return grad, hess


def _dpo_phi(d: NDArray) -> NDArray:
    return _softplus(-d)


def _dpo_d1(d: NDArray) -> NDArray:
    return -special.expit(-d)


def _dpo_d2(d: NDArray) -> NDArray:
    return special.expit(d) * special.expit(-d)


def _newton(w: NDArray, beta: float) -> NDArray[np.float64]:
    """Minimise sum w_ij softplus(-beta (g_i - g_j)) over g, 0 at the heaviest outcome.

    The directed graph of ``w > 0`` must be strongly connected (a finite minimiser). The
    loss depends on ``g`` only through ``x = beta g``: :func:`_margin_newton` minimises
    ``sum w_ij softplus(-(x_i - x_j))`` (its steps clipped to ``_MAX_STEP`` log-odds units
    relative to the weighted mean step, its line search on the loss's change pair by pair),
    started from the weighted least-squares fit of ``x_i - x_j`` to
    ``log W_ij - log W_ji`` (clipped at 700 for one-sided pairs), and ``g = x / beta``.
    An unclipped Newton iteration in ``g`` from that start stopped at a non-minimiser
    when one-sided pairs put it where the softplus is linear (loss 34.38 for a minimum
    of 0.680, gradient 0.085), at a point that depended on the outcomes' order.
    """
    k = w.shape[0]
    if k == 1:
        return np.zeros(1)
    sym = w + w.T
    with np.errstate(divide="ignore", invalid="ignore"):
        # logit(W_ij / (W_ij + W_ji)) = log W_ij - log W_ji, exact in both tails
        logit = np.log(w) - np.log(w.T)
    # a pair drawn one way only (W_ji = 0, as in finite data) has infinite log-odds, yet the
    # minimiser is finite (the graph is strongly connected): such a pair starts at a margin
    # of _MAX_STEP; clipped at 700 instead, the start sat on the loss's flat tails, where the
    # line search stalled far from the minimiser (a 7-outcome dataset of 256 counts came
    # back with losses 15.8 against the minimum's 0.636)
    logit = np.where(
        np.isinf(logit), np.sign(logit) * _MAX_STEP, np.clip(logit, -_LOGIT_CLIP, _LOGIT_CLIP)
    )
    logit = np.where(sym > 0, logit, 0.0)
    x0 = laplacian_solve(sym, np.sum(sym * logit, axis=1), np.ones(k, bool))
    if not np.all(np.abs(x0) <= _LOGIT_CLIP * k):
        # the fit's differences are averages of clipped logits along paths: larger is the
        # rounding of a singular solve (weights spanning 1e-116 to 1 gave 1e48)
        x0 = np.zeros(k)
    anchor = _anchor(sym)
    x = _margin_newton(w, _dpo_phi, _dpo_d1, _dpo_d2, x0 - x0[anchor])
    if np.max(_relative_gradient(x, w)) > _COORD_TOL:
        x = _coordinate_polish(x, w, anchor)
    return x / beta


_COORD_TOL = 1e-10  # an outcome's gradient over the sum of its terms' magnitudes


def _relative_gradient(x: NDArray, w: NDArray) -> NDArray:
    """|dL/dx_i| / (the sum of the magnitudes of its terms), per outcome, for
    L = sum_ij w_ij softplus(-(x_i - x_j)): 0 at the minimiser, whatever the weights' span."""
    d = x[:, None] - x[None, :]
    lose = w * special.expit(-d)  # w_ij sigma(-(x_i - x_j)): pushes x_i up
    win = w.T * special.expit(d)  # w_ji sigma(x_i - x_j): pushes x_i down
    a, b = win.sum(axis=1), lose.sum(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(a + b > 0, np.abs(a - b) / (a + b), 0.0)


def _coordinate_polish(x: NDArray, w: NDArray, anchor: int, sweeps: int = 50) -> NDArray:
    """Exact one-outcome minimisations of the (convex) loss where an outcome's relative
    gradient is above ``_COORD_TOL``, then the anchor re-pinned at 0.

    Where an outcome's pairs weigh 1e-15 of the anchor's and its margins are saturated,
    its gradient is below the float64 rounding of the full gradient, which the Newton
    iteration sees, and it stops with that outcome off its minimiser (relative gradient
    0.3-0.7, a different point in each order). The minimiser of the loss in ``x_i`` alone
    solves ``log sum_j w_ji sigmoid(x_i - x_j) = log sum_j w_ij sigmoid(x_j - x_i)``, an
    increasing function of ``x_i`` formed with logsumexp, exact whatever the weights (one
    bracketed root per outcome, scipy's brentq). Block coordinate descent on a smooth convex
    function decreases it at every step; the sweeps stop when every outcome is within the
    tolerance (the anchor included: the gauge is restored at the end).
    """
    from scipy import optimize

    x = x.copy()
    logw = np.where(w > 0, np.log(np.where(w > 0, w, 1.0)), -np.inf)
    for _ in range(sweeps):
        bad = np.flatnonzero(_relative_gradient(x, w) > _COORD_TOL)
        if bad.size == 0:
            break
        for i in bad:
            others = np.arange(x.size) != i

            def h(xi, i=i, others=others):
                d = xi - x[others]
                la = special.logsumexp(logw[others, i] - _softplus(-d))
                lb = special.logsumexp(logw[i, others] - _softplus(d))
                return la - lb

            lo, hi, step = x[i] - 1.0, x[i] + 1.0, 1.0
            while h(lo) > 0 and step < 1e6:
                step *= 2.0
                lo = x[i] - step
            step = 1.0
            while h(hi) < 0 and step < 1e6:
                step *= 2.0
                hi = x[i] + step
            if not h(lo) <= 0 <= h(hi):
                continue
            x[i] = optimize.brentq(h, lo, hi, xtol=1e-15 * max(1.0, abs(x[i])), rtol=1e-15)
    return x - x[anchor]


def _scaled_solve(h: NDArray, b: NDArray) -> NDArray:
    """Solve ``h x = b`` after symmetric Jacobi scaling (the weights span many decades)."""
    d = np.sqrt(np.maximum(np.diag(h), np.finfo(float).tiny))
    hs = h / d[:, None] / d[None, :]
    try:
        x = np.linalg.solve(hs, b / d)
    except np.linalg.LinAlgError:
        x = np.linalg.lstsq(hs, b / d, rcond=None)[0]
    x = x / d
    if not np.all(np.isfinite(x)):
        x = b / d**2
    return x


def minimise_pair_loss(w: NDArray, support: NDArray, beta: float, *, kind: str = "dpo") -> NDArray:
    """Log-ratios ``g`` minimising the population DPO loss with win weights ``w``.

    Returns ``g`` on the support (``-inf`` for outcomes whose mass tends to 0 in
    the deterministic limit) and 0 off it. On a strongly connected block the minimiser
    is found by :func:`_newton` (clipped Newton steps on ``x = beta g``, then exact
    one-outcome solves where an outcome's gradient is above 1e-10 of its own terms), the
    same in every order of the outcomes.

    Returns
    -------
    ndarray
        The log-ratios ``g``.
    """
    V.as_choice("kind", kind, ("dpo",))
    w, support = _check_inputs("w", w, support)
    beta = V.as_positive_scalar("beta", beta)
    n = w.shape[0]
    idx = np.flatnonzero(support)
    g = np.zeros(n)
    if idx.size <= 1:
        return g
    sub = w[np.ix_(idx, idx)].copy()
    np.fill_diagonal(sub, 0.0)
    _check_connected(w + w.T, idx)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    n_scc, labels = connected_components(csr_matrix(sub > 0), directed=True, connection="strong")
    if n_scc == 1:
        g[idx] = _newton(sub, beta)
        return g
    # a component is on top when nobody outside it beats it with positive probability
    beaten = np.zeros(n_scc, bool)
    rows, cols = np.nonzero(sub > 0)
    for a, b in zip(rows, cols, strict=True):
        if labels[a] != labels[b]:
            beaten[labels[b]] = True
    tops = np.flatnonzero(~beaten)
    if tops.size > 1:
        groups = [sorted(int(i) for i in idx[labels == c]) for c in tops]
        raise ValueError(
            "the population DPO loss has no unique limit: the groups of outcomes "
            f"{groups} each win all their drawn comparisons with the others with probability 1, "
            "and the pairs do not fix their relative mass"
        )
    top = labels == tops[0]
    g[idx] = -np.inf
    inner = sub[np.ix_(top, top)]
    g[idx[top]] = _newton(inner, beta)
    return g


def _minimise_margin_loss(
    w: NDArray,
    support: NDArray,
    solve: Callable[[NDArray], NDArray],
    *,
    what: str,
    runaway: bool = True,
) -> NDArray:
    """Log-ratio scores minimising ``sum w_ij phi(x_i - x_j)`` for a margin loss ``phi``.

    The same connectivity and deterministic-limit logic as :func:`minimise_pair_loss`
    (for losses with ``phi(+inf) = inf phi``, so that a group that wins all its
    comparisons with probability one runs away), with ``solve(sub)`` the minimiser on a
    strongly connected block (the heaviest coordinate pinned to 0). ``runaway=False`` for losses
    whose per-pair minimiser is finite also for deterministic pairs (solved directly).
    """
    n = w.shape[0]
    idx = np.flatnonzero(support)
    g = np.zeros(n)
    if idx.size <= 1:
        return g
    from scipy.sparse import csr_matrix  # lazy: keeps `import klpolicy` light
    from scipy.sparse.csgraph import connected_components

    sub = w[np.ix_(idx, idx)].copy()
    np.fill_diagonal(sub, 0.0)
    _check_connected(w + w.T, idx)
    n_scc, labels = connected_components(csr_matrix(sub > 0), directed=True, connection="strong")
    if n_scc == 1 or not runaway:
        g[idx] = solve(sub)
        return g
    beaten = np.zeros(n_scc, bool)
    rows, cols = np.nonzero(sub > 0)
    for a, b in zip(rows, cols, strict=True):
        if labels[a] != labels[b]:
            beaten[labels[b]] = True
    tops = np.flatnonzero(~beaten)
    if tops.size > 1:
        groups = [sorted(int(i) for i in idx[labels == c]) for c in tops]
        raise ValueError(
            f"the population {what} loss has no unique limit: the groups of outcomes "
            f"{groups} each win all their drawn comparisons with the others with probability 1, "
            "and the pairs do not fix their relative mass"
        )
    top = labels == tops[0]
    g[idx] = -np.inf
    g[idx[top]] = solve(sub[np.ix_(top, top)])
    return g


_NEG_CURVATURE = 1e-9  # a scaled Hessian eigenvalue below -this is negative curvature


def _gauge_free_eigh(hs: NDArray, u: NDArray) -> tuple[NDArray, NDArray]:
    """Eigenpairs of a scaled Hessian ``hs`` of all the outcomes on the complement of its
    gauge direction ``u`` (the unit null vector, ``D 1`` normalised), that one left out.

    Computed on every outcome, none pinned, so that the eigenvectors, and the saddle-free
    and negative-curvature steps built from them, do not depend on which outcome rounding
    picks to pin among outcomes of tied weight (``|H|`` of a pinned block is not the
    pinned block of ``|H|``).
    """
    proj = np.eye(u.size) - np.outer(u, u)
    m = proj @ (0.5 * (hs + hs.T)) @ proj
    lam, q = np.linalg.eigh(m)
    keep = np.abs(q.T @ u) < 0.5
    return lam[keep], q[:, keep]


def _descent_direction(
    hf: NDArray, gf: NDArray, hs: NDArray, gs: NDArray, u: NDArray
) -> tuple[NDArray | None, NDArray | None]:
    """A descent direction: Newton's ``-hf^-1 gf`` on the pinned block ``hf`` where it is
    positive definite (Cholesky succeeds; returned first, on the free coordinates);
    otherwise the saddle-free Newton step ``-|hs|^-1 gs`` on all the outcomes (returned
    second), with the eigenvalues of :func:`_gauge_free_eigh` replaced by their absolute
    values, at least 1e-8 of the largest: it descends and moves away from saddles along
    the directions of negative curvature (Dauphin et al. 2014, arXiv:1406.2572).
    """
    try:
        c = np.linalg.cholesky(hf)
    except np.linalg.LinAlgError:
        lam, q = _gauge_free_eigh(hs, u)
        floor = 1e-8 * max(float(np.max(np.abs(lam), initial=0.0)), np.finfo(float).tiny)
        return None, -q @ ((q.T @ gs) / np.maximum(np.abs(lam), floor))
    return -np.linalg.solve(c.T, np.linalg.solve(c, gf)), None


def _margin_newton(
    w: NDArray, phi: Callable, d1: Callable, d2: Callable, x0: NDArray, max_iter: int = 500
) -> NDArray[np.float64]:
    """A local minimiser of ``sum_ij w_ij phi(x_i - x_j)`` over ``x`` (``w`` zero-diagonal).

    Second-order descent on the gauge-fixed space (the heaviest outcome pinned for the
    linear algebra). Each outcome is scaled by its own curvature (``D_i^2``: the sum of
    the magnitudes of its Hessian terms, floored at 1e-20 of its pair weight), because
    the weights span many decades. Step: Newton's where the scaled Hessian is positive
    definite, the saddle-free Newton step otherwise (:func:`_descent_direction`); it is
    clipped coordinate by coordinate to ``_MAX_STEP`` log-odds units relative to the
    weight-averaged step (so that it does not depend on which outcome is pinned), and
    searched by Armijo on the *change* of the loss, summed pair by pair from
    ``phi(d') - phi(d)`` (by Simpson's rule on ``phi'`` for a pair that moves by less
    than 1e-4), so that it resolves the moves of outcomes whose pairs weigh 1e-30 of the
    total, which the loss itself cannot see; where even that change is below its
    rounding, a Newton step that shrinks the scaled gradient is taken. At a point where
    no step can be taken (stationary to rounding), the smallest eigenvalue of the scaled
    gauge-fixed Hessian is checked: below ``-_NEG_CURVATURE`` (a saddle or a maximum) the
    iteration steps along its eigenvector, in the sign that lowers the loss, and
    continues; so the point returned has a zero gradient (to rounding) and a positive
    semi-definite Hessian. That point is then polished by one Newton step whose gradient
    is evaluated in extended precision (:func:`_polish`), which removes the float64
    gradient's rounding from the scores.
    """
    k = w.shape[0]
    if k == 1:
        return np.zeros(1)
    run = _MarginDescent(w, phi, d1, d2)
    x = np.asarray(x0, float) - x0[run.anchor]
    grad, hess, size = run.grad_hess(x)
    for _ in range(max_iter):
        dall = np.sqrt(np.maximum(size, 1e-20 * run.tot))
        u = dall / np.linalg.norm(dall)  # the gauge direction of the scaled Hessian
        hs = hess / dall[:, None] / dall[None, :]
        moved = run.descent_step(x, grad, hs, u, dall) if grad[run.free].any() else None
        if moved is None:
            # stationary to rounding: a minimiser unless the Hessian has negative curvature
            moved = run.curvature_step(x, grad, hess, hs, u, dall)
            if moved is None:
                break
        x, grad, hess, size = moved
    dsc = np.sqrt(np.maximum(size, 1e-20 * run.tot))[run.free]
    return _polish(w, run.mask, d1, x, hess, dsc, run.free)


class _MarginDescent:
    """The pieces of :func:`_margin_newton`'s descent on ``sum_ij w_ij phi(x_i - x_j)``:
    the loss change along a ray, the gradient and Hessian, the clipped step, the line
    search, the descent step and the negative-curvature step."""

    def __init__(self, w: NDArray, phi: Callable, d1: Callable, d2: Callable) -> None:
        self.w, self.phi, self.d1, self.d2 = w, phi, d1, d2
        self.mask = w > 0
        self.tot = np.sum(w + w.T, axis=1)
        self.anchor = _anchor(w + w.T)
        self.free = _others(w.shape[0], self.anchor)

    def change(self, x, step):
        """The loss at ``x + step`` minus the loss at ``x`` along the exact ray (the
        pair margins ``d + (step_i - step_j)``, not the rounded iterate's), and a bound
        on its rounding."""
        w, mask, phi, d1 = self.w, self.mask, self.phi, self.d1
        eps = np.finfo(float).eps
        d = x[:, None] - x[None, :]
        dd = step[:, None] - step[None, :]
        dn = d + dd
        small = np.abs(dd) < 1e-4
        pa, pb = phi(d), phi(dn)
        simpson = dd * (d1(d) + 4 * d1(d + 0.5 * dd) + d1(dn)) / 6
        terms = np.where(mask, w * np.where(small, simpson, pb - pa), 0.0)
        err = np.where(mask, w * np.where(small, np.abs(simpson), np.abs(pa) + np.abs(pb)), 0.0)
        return float(np.sum(terms)), 64 * eps * float(np.sum(err))

    def grad_hess(self, x):
        """The gradient (its components below their rounding zeroed), the Hessian, and
        each outcome's sum of Hessian-term magnitudes (its curvature scale)."""
        w, mask = self.w, self.mask
        eps = np.finfo(float).eps
        d = x[:, None] - x[None, :]
        c = np.where(mask, w * self.d1(d), 0.0)
        grad = c.sum(axis=1) - c.sum(axis=0)
        e = np.where(mask, w * self.d2(d), 0.0)
        size = np.abs(e).sum(axis=1) + np.abs(e).sum(axis=0)
        # components below the rounding level of their own terms (each term's, and that of
        # the margin x_i - x_j it is evaluated at) are noise: zero them, or the iteration
        # keeps taking steps of rounding size that the loss cannot tell apart
        ax = np.abs(x)
        err = np.abs(c) + np.abs(e) * (ax[:, None] + ax[None, :])
        noise = 4 * eps * (err.sum(axis=1) + err.sum(axis=0))
        grad = np.where(np.abs(grad) <= noise, 0.0, grad)
        e = e + e.T
        return grad, np.diag(e.sum(axis=1)) - e, size

    def full_step(self, step):
        """A step of every outcome, clipped relative to its weighted mean (not to the pinned
        outcome, which rounding picks among near-ties), then shifted back to 0 at the
        pinned outcome (a constant: the same policy)."""
        tot = self.tot
        step = np.clip(step - float(tot @ step) / float(tot.sum()), -_MAX_STEP, _MAX_STEP)
        return step - step[self.anchor]

    def search(self, x, grad, step, model, dsc, newton):
        """Backtracking from the full step; ``model(t)`` the predicted change (< 0);
        ``newton``: the step is Newton's on a positive definite Hessian."""
        free = self.free
        scale = max(1.0, float(np.max(np.abs(x))))
        gnorm = float(np.linalg.norm(grad[free] / dsc))
        t = 1.0
        while t * np.max(np.abs(step)) > 1e-16 * scale:
            x_new = x + t * step
            if np.array_equal(x_new, x):  # below the rounding of x
                return None
            df, err = self.change(x, t * step)
            if abs(df) > err:
                if df <= 1e-4 * model(t):  # Armijo on a change the sum resolves
                    return x_new, *self.grad_hess(x_new)
            elif newton:
                # the change is below its rounding (the last digits): a Newton step that
                # shrinks the scaled gradient
                new = self.grad_hess(x_new)
                if np.linalg.norm(new[0][free] / dsc) < gnorm:
                    return x_new, *new
            t *= 0.5
        return None

    def descent_step(self, x, grad, hs, u, dall):
        """Newton's step (positive definite scaled Hessian) or the saddle-free one
        (:func:`_descent_direction`), clipped, then searched; None where none is taken."""
        free, k = self.free, x.size
        dsc = dall[free]
        df_, dfull = _descent_direction(
            hs[np.ix_(free, free)], grad[free] / dsc, hs, grad / dall, u
        )
        pd = df_ is not None
        if pd:  # Newton's step on the free coordinates (the pinned one stays)
            dfull = np.zeros(k)
            dfull[free] = df_ / dsc
            step = self.full_step(dfull)
        else:
            step = self.full_step(dfull / dall)
        slope = float(grad[free] @ step[free])
        if not slope < 0:  # clipping broke descent: the clipped scaled gradient
            step, pd = self.full_step(-grad / dall**2), False
            slope = float(grad[free] @ step[free])
        scale = max(1.0, float(np.max(np.abs(x))))
        if slope < 0 and np.max(np.abs(step)) > 1e-15 * scale:
            return self.search(x, grad, step, lambda t, s=slope: t * s, dsc, pd)
        return None

    def curvature_step(self, x, grad, hess, hs, u, dall):
        """At a point stationary to rounding: a step along the eigenvector of the scaled
        Hessian's smallest eigenvalue where it is below ``-_NEG_CURVATURE`` (a saddle or a
        maximum), in the sign that lowers the loss; None at a minimiser."""
        free = self.free
        dsc = dall[free]
        lams, vs = _gauge_free_eigh(hs, u)
        if lams.size == 0 or lams[0] >= -_NEG_CURVATURE:
            return None
        p = self.full_step(vs[:, 0] / dall)
        p /= np.max(np.abs(p))
        gp = float(grad[free] @ p[free])
        curv = float(p[free] @ hess[np.ix_(free, free)] @ p[free])
        signs = (-1.0,) if gp > 0 else (1.0,) if gp < 0 else (1.0, -1.0)
        tries = []
        for sg in signs:
            r = self.search(
                x,
                grad,
                sg * p,
                lambda t, a=sg * gp, c=curv: t * min(a, 0.0) + 0.5 * t * t * c,
                dsc,
                False,
            )
            if r is not None:
                tries.append(r)
        if not tries:
            return None
        # the lower loss (a tie, in a problem symmetric under exchanging outcomes: +)
        return min(tries, key=lambda r: self.change(x, r[0] - x)[0])


def _polish(
    w: NDArray,
    mask: NDArray,
    d1: Callable,
    x: NDArray,
    hess: NDArray,
    dsc: NDArray,
    free: NDArray,
) -> NDArray[np.float64]:
    """One Newton step at a local minimiser ``x`` with the gradient evaluated in extended
    precision (``np.longdouble``: the margins ``x_i - x_j``, ``phi'`` and the sums).

    The float64 gradient's rounding, about ``eps sum_j |w_ij phi'_ij|``, is far above its
    value where the pair terms cancel: the iteration stops with ``x`` off by that rounding
    over the curvature, ``dx``, and an entry of the policy, ``ref e^{x / beta} / Z``, off
    by about ``|dx| / beta`` relative (the figures: ``docs/derivations/pair_solvers.md``,
    section 4). Newton's step from the extended gradient, on the float64 Hessian at ``x``
    (``hess``, scaled by ``dsc`` on the free coordinates: ample for a step that small),
    removes it, down to the rounding of ``x`` itself. The step is taken only where that
    Hessian is positive definite and the step is below 1e-6; one above 1e-9 (outside the
    float solver's accuracy) only where it shrinks the scaled extended gradient; so it
    never moves the point away from the minimiser. Where ``np.longdouble`` is float64
    (some platforms), this does nothing.
    """
    ld = np.longdouble
    if np.finfo(ld).eps >= np.finfo(np.float64).eps or free.size == 0:
        return x
    wl = w.astype(ld)

    def grad_ext(x):
        xl = x.astype(ld)
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            c = np.where(mask, wl * d1(xl[:, None] - xl[None, :]), ld(0))
        return (c.sum(axis=1) - c.sum(axis=0))[free].astype(np.float64) / dsc

    g = grad_ext(x)
    if not np.all(np.isfinite(g)) or not g.any():
        return x
    try:
        c = np.linalg.cholesky(hess[np.ix_(free, free)] / dsc[:, None] / dsc[None, :])
    except np.linalg.LinAlgError:
        return x
    step = np.zeros(x.size)
    step[free] = -np.linalg.solve(c.T, np.linalg.solve(c, g)) / dsc
    big = float(np.max(np.abs(step)))
    if not big <= 1e-6:
        return x
    if big > 1e-9 and not np.linalg.norm(grad_ext(x + step)) < np.linalg.norm(g):
        return x
    return x + step
