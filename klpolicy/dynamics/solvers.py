r"""Where an expected update vanishes: along a one-parameter family, or anywhere on the simplex.

Three solvers, each exact to the rounding of the update it is given:

* :func:`family_roots` finds every root of :math:`t = \beta\,(\mathrm{sd}_{\pi_t}(r) + \epsilon)`
  along a family :math:`\pi_t` (pi* or the forward-KL optimum at coefficient ``t``): the
  fixed points of an infinite group with the standard-deviation scale.
* :func:`fixed_points` solves ``update(theta) = 0`` in the free logits from starts along the
  pi* family (Powell's hybrid method on the update divided by the policy, so that small
  probabilities are solved as finely as large ones), and classifies each zero by the
  Jacobian's eigenvalues.
* :func:`beta_fit` gives the beta whose pi* is nearest a policy: the one with its expected
  reward (the minimiser of :math:`\mathrm{KL}(\pi\,\|\,\pi^*_\beta)` over beta, since that
  KL is convex in :math:`1/\beta` with derivative :math:`\mathbb{E}_{\pi^*}r - \mathbb{E}_\pi r`).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from ..core import expected_reward, optimal_policy
from ..core.internal import ascent_growth_rate
from ..core.internal import validation as V
from .results import FixedPoint

__all__ = ["beta_fit", "family_roots", "fixed_points"]


def _sd(pi: NDArray, r: NDArray) -> float:
    m = pi @ r
    return float(np.sqrt(pi @ (r - m) ** 2))


def family_roots(
    family: Callable[[float], NDArray], r: NDArray, beta: float, eps: float
) -> list[float]:
    r"""Every root ``t > 0`` of :math:`h(t) = t - \beta(\mathrm{sd}_{\pi_t}(r) + \epsilon)`.

    All roots lie in :math:`[\beta\epsilon, \beta(\Delta/2 + \epsilon)]` with
    :math:`\Delta` the range of ``r`` (a standard deviation is at most half the range):
    bracketed on 600 points in :math:`\log t` there, then refined by Brent's method.
    Decreasing order (the one nearest the reference first).
    """
    from scipy.optimize import brentq

    span = float(np.max(r) - np.min(r))
    lo, hi = beta * eps, beta * (span / 2 + eps)
    lo = max(lo, hi * 1e-12, np.finfo(float).tiny)

    def h(log_t):
        t = math.exp(log_t)
        return t - beta * (_sd(family(t), r) + eps)

    grid = np.linspace(math.log(lo) - 1e-9, math.log(hi) + 1e-9, 600)
    vals = np.array([h(x) for x in grid])
    roots = []
    for i in range(len(grid) - 1):
        if vals[i] == 0:
            roots.append(math.exp(grid[i]))
        elif vals[i] * vals[i + 1] < 0:
            x = brentq(h, grid[i], grid[i + 1], xtol=1e-15, rtol=4 * np.finfo(float).eps)
            roots.append(math.exp(x))
    return sorted(set(roots), reverse=True)


def _residual(update, support, pi_of):
    def fun(z):
        if not np.all(np.isfinite(z)):
            return np.full(z.shape, 1e300)
        th = np.append(z, 0.0)
        pi = pi_of(th)
        g = update(th)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # g / pi is huge where pi underflows near a vertex and the KL term pushes back
            # (k3's pi k3' tends to -ref there): kept finite so the solver steps away
            u = np.clip(np.where(pi > 0, g / pi, 0.0), -1e300, 1e300)
        return u[:-1] - u[-1]

    return fun


def fixed_points(
    update: Callable[[NDArray], NDArray],
    ref: NDArray,
    reward: NDArray,
    scale: float,
) -> list[FixedPoint]:
    """The zeros of ``update`` (an ascent field on the logits of ``ref``'s support).

    ``update(theta_support) -> g`` with ``g`` summing to zero; ``scale`` is the size of its
    terms per unit of probability (the residual is accepted below ``1e-11 * scale``).
    Started at the reference, then at pi* of the reference for betas spread over ten
    decades around the rewards' range, then near each outcome's vertex; the zeros are
    returned in the order found (the reference's first), duplicates removed.
    """
    from scipy.optimize import root

    def pi_of(th):
        e = np.exp(th - th.max())
        return e / e.sum()

    fun = _residual(update, None, pi_of)
    span = float(np.ptp(reward)) or 1.0
    starts = [np.log(ref)]
    for b in span * np.logspace(-3, 3, 13)[::-1]:
        starts.append(np.log(np.maximum(optimal_policy(ref, reward, b), 1e-300)))
    for j in np.argsort(-reward):
        th = np.log(ref).copy()
        th[j] += 8.0
        starts.append(th)
    found: list[FixedPoint] = []
    for th0 in starts:
        z0 = th0[:-1] - th0[-1]
        sol = root(fun, z0, method="hybr", options={"xtol": 1e-15, "maxfev": 4000})
        z = sol.x
        for _ in range(3):  # a few Newton polishes on the same residual (the solver stops early)
            res = fun(z)
            if np.max(np.abs(res), initial=0.0) <= 1e-13 * scale:
                break
            sol = root(fun, z, method="hybr", options={"xtol": 1e-15})
            z = sol.x
        if not np.all(np.isfinite(z)) or np.max(np.abs(fun(z)), initial=0.0) > 1e-11 * scale:
            continue
        th = np.append(z, 0.0)
        pi = pi_of(th)
        if any(np.max(np.abs(pi - f.policy)) <= 1e-9 for f in found):
            continue
        growth, tol = ascent_growth_rate(update, th)
        found.append(FixedPoint(policy=pi, stable=bool(growth < -tol), growth=growth))
    return found


def beta_fit(policy, ref, reward) -> float:
    r"""The beta of the pi* nearest ``policy``: :math:`\mathbb{E}_{\pi^*_\beta} r = \mathbb{E}_\pi r`.

    .. math::

        \beta_{fit} = \arg\min_\beta \frac{1}{B}\sum_{b=1}^{B}
        \mathrm{KL}(\pi_b\,\|\,\pi^*_{\beta,b}),\qquad
        \pi^*_{\beta,b} = \pi_{\text{ref},b}\, e^{r_b/\beta} / Z_b

    since each :math:`\mathrm{KL}(\pi_b\|\pi^*_{\beta,b})` is convex in :math:`1/\beta` with
    derivative :math:`\mathbb{E}_{\pi^*_{\beta,b}} r_b - \mathbb{E}_{\pi_b} r_b`, the fit is
    the root of the mean of those derivatives (Brent's method in :math:`\log\beta`). One
    row (``B = 1``) is one policy; several rows are the contexts (prompts) of one policy,
    weighted equally, that share one beta.

    Parameters
    ----------
    policy, ref : array_like, shape (n,) or (B, n)
        The policy and the reference of the pi* family; a row per context.
    reward : array_like, shape (n,) or (B, n)
        The rewards (a 1-D reward is every row's).

    Returns
    -------
    float
        One beta for all rows. ``inf`` when the policy's mean expected reward is at most the
        reference's; ``0.0`` when it is the mean best reward on the reference's support (or
        more).

    Raises
    ------
    ValueError
        For invalid ``policy``, ``ref`` or ``reward``, rows of different sizes, or more than
        two dimensions.

    Notes
    -----
    The rows are weighted uniformly: for contexts :math:`x` drawn from a law :math:`w`,
    repeat the rows in proportion to :math:`w` (or fit each row alone). Each row of
    ``ref`` must sum to 1.

    Examples
    --------
    >>> from klpolicy import optimal_policy
    >>> from klpolicy.dynamics import beta_fit
    >>> ref, r = [0.5, 0.3, 0.2], [1.0, 0.0, 2.0]
    >>> round(beta_fit(optimal_policy(ref, r, 0.7), ref, r), 12)
    0.7
    >>> refs, rs = [ref, [0.2, 0.2, 0.6]], [r, [0.0, 1.0, 0.5]]
    >>> round(beta_fit(optimal_policy(refs, rs, 0.7), refs, rs), 12)
    0.7
    """
    p = V.as_probabilities("policy", policy).astype(np.float64)
    q = V.as_probabilities("ref", ref).astype(np.float64)
    r = V.as_rewards("reward", reward).astype(np.float64)
    for name, a in (("policy", p), ("ref", q), ("reward", r)):
        if a.ndim > 2:
            raise ValueError(
                f"`{name}` must be one row (n,) or a row per context (B, n); got shape {a.shape}"
            )
    p, q = V.broadcast_pair("policy", p, "ref", q)
    q, r = V.broadcast_pair("ref", q, "reward", r)
    p, q = np.broadcast_arrays(p, q)
    if p.ndim == 1:
        return _beta_fit(p, q, r)
    return _beta_fit_rows(p, q, r)


def _beta_fit(policy: NDArray, ref: NDArray, reward: NDArray) -> float:
    """:func:`beta_fit` on validated 1-D float64 rows."""
    return _beta_fit_rows(policy[None, :], ref[None, :], reward[None, :])


def _beta_fit_rows(policy: NDArray, ref: NDArray, reward: NDArray) -> float:
    """:func:`beta_fit` on validated ``(B, n)`` float64 rows (each row of ``ref`` a law)."""
    from scipy.optimize import brentq

    sup = ref > 0
    target = float(np.mean(np.sum(policy * reward, axis=-1)))
    top = float(np.mean(np.max(np.where(sup, reward, -np.inf), axis=-1)))
    base = float(np.mean(expected_reward(ref, reward)))
    if target <= base:
        return math.inf
    if target >= top:
        return 0.0
    span = float(
        np.max(
            np.max(np.where(sup, reward, -np.inf), -1) - np.min(np.where(sup, reward, np.inf), -1)
        )
    )

    def gap(log_b):
        pi = optimal_policy(ref, reward, math.exp(log_b))
        return float(np.mean(expected_reward(pi, reward))) - target

    lo, hi = math.log(span) - 50.0, math.log(span) + 50.0
    while gap(lo) < 0 and lo > -700:
        lo -= 50.0
    while gap(hi) > 0 and hi < 700:
        hi += 50.0
    if gap(lo) < 0 or gap(hi) > 0:
        return 0.0 if gap(lo) < 0 else math.inf
    return math.exp(brentq(gap, lo, hi, xtol=1e-14, rtol=4 * np.finfo(float).eps))
