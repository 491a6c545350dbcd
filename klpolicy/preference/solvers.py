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

The gauge (a constant added to ``g``) is fixed by pinning the last
coordinate to 0; the callers normalise.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray
from scipy.special import expit

__all__ = ["laplacian_solve", "minimise_pair_loss"]

_LOGIT_CLIP = 700.0


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


def laplacian_solve(sym: NDArray, rhs: NDArray, support: NDArray) -> NDArray[np.float64]:
    """Solve ``sum_j sym[i, j] (g_i - g_j) = rhs[i]`` on ``support`` (``g`` = 0 elsewhere).

    ``sym`` is symmetric and non-negative, ``rhs`` sums to 0 over the support.
    The solution is unique up to a constant when the pairs connect the support.
    """
    idx = np.flatnonzero(support)
    g = np.zeros(sym.shape[0])
    if idx.size <= 1:
        return g
    _check_connected(sym, idx)
    a = sym[np.ix_(idx, idx)].copy()
    np.fill_diagonal(a, 0.0)
    lap = np.diag(a.sum(axis=1)) - a
    sub = np.linalg.solve(lap[:-1, :-1], rhs[idx][:-1])
    g[idx[:-1]] = sub
    return g


def _softplus(x: NDArray) -> NDArray:
    with np.errstate(under="ignore"):
        return np.logaddexp(0.0, x)


def _value(g: NDArray, w: NDArray, beta: float) -> float:
    return float(np.sum(w * _softplus(-beta * (g[:, None] - g[None, :]))))


def _grad_hess(g: NDArray, w: NDArray, beta: float) -> tuple[NDArray, NDArray]:
    h = beta * (g[:, None] - g[None, :])
    s = expit(-h)
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
    e = beta * beta * w * s * expit(h)
    e = e + e.T
    hess = np.diag(e.sum(axis=1)) - e
    return grad, hess


def _newton(w: NDArray, beta: float, max_iter: int = 200) -> NDArray[np.float64]:
    """Minimise sum w_ij softplus(-beta (g_i - g_j)) over g with g[-1] = 0.

    The directed graph of ``w > 0`` must be strongly connected (a finite minimiser).
    """
    k = w.shape[0]
    if k == 1:
        return np.zeros(1)
    # start: weighted least squares of beta (g_i - g_j) onto logit(W_ij / (W_ij + W_ji))
    sym = w + w.T
    with np.errstate(divide="ignore", invalid="ignore"):
        # logit(W_ij / (W_ij + W_ji)) = log W_ij - log W_ji, exact in both tails
        logit = np.clip(np.log(w) - np.log(w.T), -_LOGIT_CLIP, _LOGIT_CLIP)
    logit = np.where(sym > 0, logit, 0.0)
    g = laplacian_solve(sym, np.sum(sym * logit, axis=1) / beta, np.ones(k, bool))
    f = _value(g, w, beta)
    grad, hess = _grad_hess(g, w, beta)
    for _ in range(max_iter):
        if not grad.any():  # stationary to rounding
            break
        d = _scaled_solve(hess[:-1, :-1], -grad[:-1])
        step = np.append(d, 0.0)
        scale = max(1.0, float(np.max(np.abs(g))))
        if np.max(np.abs(step)) <= 1e-13 * scale:
            g = g + step
            break
        # Armijo on f; where f cannot resolve the change (directions carried only by
        # pairs of tiny probability), accept a step that shrinks the scaled gradient
        t, slope = 1.0, float(grad[:-1] @ d)
        dscale = np.sqrt(np.maximum(np.diag(hess), np.finfo(float).tiny))
        gnorm = float(np.linalg.norm(grad / dscale))
        accepted = False
        while t * np.max(np.abs(step)) > 1e-13 * scale:
            g_new = g + t * step
            f_new = _value(g_new, w, beta)
            grad_new, hess_new = _grad_hess(g_new, w, beta)
            if f_new <= f + 1e-4 * t * slope:
                accepted = True
            elif abs(f_new - f) <= 1e-14 * abs(f) and np.linalg.norm(grad_new / dscale) < gnorm:
                accepted = True
            if accepted:
                break
            t *= 0.5
        if not accepted:
            break
        g, f, grad, hess = g_new, f_new, grad_new, hess_new
    return g


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
    the deterministic limit) and 0 off it.
    """
    if kind != "dpo":  # pragma: no cover - only DPO goes through Newton
        raise NotImplementedError(kind)
    n = w.shape[0]
    idx = np.flatnonzero(support)
    g = np.zeros(n)
    if idx.size <= 1:
        return g
    sub = w[np.ix_(idx, idx)].copy()
    np.fill_diagonal(sub, 0.0)
    _check_connected(sub + sub.T, np.arange(idx.size))
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
