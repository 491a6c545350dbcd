r"""Soft best-of-n: draw ``n`` from the reference, keep draw ``i`` with probability softmax(r/lam).

The exact law on a discrete support is one integral in ``t`` per outcome over a
shared moment generating function,

.. math::

    \pi_{n,\lambda}(y) = n\,\pi_{ref}(y)\, w(y) \int_0^\infty e^{-t\,w(y)}\,
        M(t)^{n-1}\,dt, \qquad w = e^{r/\lambda},\;
        M(t) = \mathbb{E}_{\pi_{ref}}\big[e^{-t\,w(Y)}\big],

from :math:`\mathbb{P}(\text{keep } y) = n\,\mathbb{E}\big[\mathbb 1\{Y_1 = y\}\,
w(y) / (w(y) + S_{n-1})\big]` with :math:`S_{n-1} = \sum_{j=2}^n w(Y_j)` and
:math:`1/x = \int_0^\infty e^{-tx}\,dt`. See ``docs/derivations/horizon.md``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import setup as _setup
from ..core.internal import validation as V
from ._law import _one_problem
from .law import best_of_n_policy

__all__ = [
    "SoftBestOfNFrontier",
    "SoftBestOfNGap",
    "soft_best_of_n_frontier",
    "soft_best_of_n_gap",
    "soft_best_of_n_kl",
    "soft_best_of_n_policy",
]

# trapezoid in s = log t: the integrand is analytic in the strip |Im s| < pi/2, so the
# error is about exp(-2 pi (pi/2) / h); h = 0.2 gives ~1e-21 (aliasing), well below the
# float64 rounding of the sum.
_H = 0.2
_BLOCK = 1 << 21  # elements of one (outcomes x nodes) block
#: Each outcome's own work is a window of nodes in u = s + log w = log(t w): below
#: u = -_LOW, exp(-t w) is 1 to within e^-50 (2e-22 relative) and the outcome enters in
#: closed form (M: its q; its own integral: a shared prefix sum); above u = _HIGH,
#: exp(-t w) < e^-1500 and it leaves M (0 to any q a float64 holds, against M >=
#: q_min e^-25 on the nodes); above u = log(60) its own integrand is below e^-55 of its peak.
_LOW = 50.0
_HIGH = float(np.log(1500.0))
_TOP = float(np.log(60.0))
_FLOOR = 1e-200  # below it, M summed in linear space may lose terms to underflow


def _row(q: NDArray, r: NDArray, n: int, lam: float) -> NDArray:
    """The law of one row (probability axis last), ``0 < lam < inf``, ``n >= 2``."""
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        return _row_body(q, r, n, lam)


def _cumsum(x: NDArray) -> NDArray:
    """``[0, x0, x0 + x1, ...]`` to about one rounding: the sequential sum plus the running
    sum of its exact rounding errors (TwoSum, Knuth TAOCP vol. 2, 4.2.2)."""
    c = np.cumsum(x)
    prev = np.concatenate([[0.0], c[:-1]])
    bb = c - prev
    err = (prev - (c - bb)) + (x - bb)
    return np.concatenate([[0.0], c + np.cumsum(err)])


def _log_mgf(q: NDArray, lq: NDArray, lw: NDArray, s: NDArray) -> NDArray:
    """log M(t) = log sum q exp(-t w) at t = e^s; outcomes sorted by ``lw`` descending.

    Per block of nodes only the outcomes with ``-_LOW <= s + lw <= _HIGH`` at some node of
    the block are summed; the heavier ones contribute 0 to M (-q to M - 1), the lighter
    ones q (0 to M - 1): prefix and suffix sums of q.
    """
    g_all, neg = s.size, -lw  # neg ascending
    upper = np.searchsorted(neg, s - _HIGH, "left")  # p < upper: s + lw > _HIGH
    lower = np.searchsorted(neg, s + _LOW, "right")  # p >= lower: s + lw < -_LOW
    q_pre = _cumsum(q)  # q_pre[i] = sum_{p < i} q
    q_suf = _cumsum(q[::-1])[::-1]  # q_suf[i] = sum_{p >= i} q
    log_m = np.empty(g_all)
    # a block of nodes sums the union of their windows: at most a quarter more outcomes
    # than the widest single window, and _BLOCK elements
    widest = int((lower - upper).max(initial=1))
    span = widest + max(64, widest // 4)
    g0 = 0
    while g0 < g_all:
        ends = np.arange(g0 + 1, min(g_all, g0 + 256) + 1)
        union = lower[ends - 1] - upper[g0]
        fits = ((ends - g0) * union <= _BLOCK) & (union <= span)
        g1 = int(ends[fits][-1]) if fits.any() else g0 + 1
        a, b = int(upper[g0]), int(lower[g1 - 1])
        # -t w, (nodes, outcomes): rows contiguous, so that numpy's pairwise summation
        # (error ~ log2(k) roundings, not a dot product's ~sqrt(k)) sums each node's terms
        x = -np.exp(np.add.outer(s[g0:g1], lw[a:b]))
        acc = (np.expm1(x) * q[a:b]).sum(axis=1) - q_pre[a]  # M - 1: terms <= 0
        lm = np.log1p(np.maximum(acc, -1.0 + 1e-300))
        far = acc < -0.5  # M < 1/2: M itself, summed in linear space
        if far.any():
            m = (np.exp(x[far]) * q[a:b]).sum(axis=1) + q_suf[b]
            lm[far] = np.log(m)
            tiny = np.flatnonzero(far)[m < _FLOOR]
            for j in tiny:  # a log-sum-exp over every outcome (M below 1e-200: rare)
                y = lq - np.exp(lw + s[g0 + j])
                c = y.max()
                lm[j] = c + np.log(np.exp(y - c).sum())
        log_m[g0:g1] = lm
        g0 = g1
    return log_m


def _row_body(q: NDArray, r: NDArray, n: int, lam: float) -> NDArray:
    support = q > 0
    qs = q[support] / q[support].sum()
    lw_all = (r[support] - r[support].max()) / lam  # log w, max 0
    order = np.argsort(-lw_all, kind="stable")
    lw, qo = lw_all[order], qs[order]
    lq = np.log(qo)
    # nodes: t from 1e-18 (the integrand is ~t below it) to 40 / (n w_min) (e^{-t(w+S)},
    # w + S >= n w_min, is below e^-40 there)
    s_lo = np.log(1e-18)
    s_hi = np.log(40.0 / n) - lw[-1]
    g_all = int(np.ceil((s_hi + _H - s_lo) / _H))
    # s_lo + g h node by node (np.arange would step by a rounded h, drifting 1e-11 over
    # 10^3 nodes from the e^{-(c-g) h} of the closed form below)
    s = s_lo + np.arange(g_all) * _H
    log_m = _log_mgf(qo, lq, lw, s)
    a = np.exp((n - 1) * log_m)  # M^{n-1}; the integrand is t w e^{-t w} M^{n-1} (dt = t ds)
    base = s + (n - 1) * log_m
    # outcome y: nodes [c, d) in closed form below (e^{-t w} = 1 there), exactly inside;
    # below, w sum_{g<c} e^{s_g} a_g = w e^{s_c} R(c), R(c) = sum_{g<c} a_g e^{-(c-g) h}.
    # c and d grow along the sorted outcomes: a block of them shares the nodes [c0, d1)
    # of its first c and last d (more nodes summed exactly, none twice)
    c_own = np.searchsorted(s, -_LOW - lw, "left")
    d = np.minimum(g_all, np.searchsorted(s, _TOP - lw, "right") + 1)
    rr = _discounted(a)  # rr[c] = R(c), c = 0 .. g_all
    total = np.empty(qo.size)
    widest = int((d - c_own).max(initial=1))
    span = widest + max(16, widest // 4)  # a block's nodes: at most a quarter more
    i, k = 0, qo.size
    while i < k:
        ends = np.arange(i + 1, min(k, i + 8192) + 1)
        union = d[ends - 1] - c_own[i]
        fits = ((ends - i) * union <= _BLOCK) & (union <= span)
        j = int(ends[fits][-1]) if fits.any() else i + 1
        c0, d1 = int(c_own[i]), int(d[j - 1])
        lwb, lqb = lw[i:j], lq[i:j]
        e = base[None, c0:d1] - np.exp(np.add.outer(lwb, s[c0:d1])) + (lqb + lwb)[:, None]
        below = np.exp(lqb + lwb + (s_lo + c0 * _H)) * rr[c0]  # s_lo + c0 h = s[c0]
        total[i:j] = np.exp(e).sum(axis=1) + below
        i = j
    out = np.empty(qo.size)
    out[order] = total * (_H * n)
    pi = np.zeros_like(q, dtype=np.float64)
    pi[support] = out
    return pi


def _discounted(a: NDArray, span: int = 1024) -> NDArray:
    """``R[c] = sum_{g < c} a_g e^{-(c - g) h}`` for ``c = 0 .. len(a)``: the recursion
    ``R[c+1] = (R[c] + a_c) e^{-h}``, by blocks of ``span`` nodes (a compensated running sum
    of ``a_g e^{(g - g0) h}`` inside each, whose factors stay below e^{205})."""
    out = np.empty(a.size + 1)
    out[0] = 0.0
    for g0 in range(0, a.size, span):
        blk = a[g0 : g0 + span]
        j = np.arange(1, blk.size + 1)
        run = _cumsum(blk * np.exp((j - 1) * _H))[1:]  # sum_{g0 <= g < g0 + j} a_g e^{(g-g0)h}
        out[g0 + 1 : g0 + 1 + blk.size] = (out[g0] + run) * np.exp(-j * _H)
    return out


def soft_best_of_n_policy(
    ref: ArrayLike, reward: ArrayLike, n: int, lam: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating]:
    r"""The exact law of soft best-of-n: ``n`` reference draws, one kept by softmax(r/lam).

    .. math::

        \pi_{n,\lambda}(y) = n\,\pi_{ref}(y)\, e^{r(y)/\lambda}
        \int_0^\infty e^{-t e^{r(y)/\lambda}}\,
        \Big(\textstyle\sum_{y'} \pi_{ref}(y')\, e^{-t e^{r(y')/\lambda}}\Big)^{n-1} dt

    Parameters
    ----------
    ref : array_like
        Reference probabilities along ``axis``.
    reward : array_like
        Finite rewards, broadcast against ``ref``.
    n : int
        Number of draws, an integer ``>= 1``.
    lam : float or array_like
        The selection temperature ``>= 0`` (one per batch row, or a scalar);
        ``0`` is hard best-of-n (:func:`~klpolicy.best_of_n.best_of_n_policy`),
        ``inf`` the reference.

    Returns
    -------
    ndarray
        :math:`\pi_{n,\lambda}`, the broadcast shape of ``ref`` and ``reward``; float64
        (float32 for float32 inputs). Zero off the reference's support.

    Raises
    ------
    ValueError
        For ``n`` that is not an integer ``>= 1``, ``lam`` negative or NaN, and
        invalid ``ref`` / ``reward`` as in :func:`klpolicy.optimal_policy`.

    Notes
    -----
    Kept draw ``y`` with weight :math:`w = e^{r/\lambda}`: by exchangeability
    :math:`\pi(y) = n\,\pi_{ref}(y)\,w(y)\,\mathbb{E}[1/(w(y) + S_{n-1})]`, and
    :math:`\mathbb{E}[1/(w+S)] = \int_0^\infty e^{-tw} M(t)^{n-1} dt`. The integral is
    a trapezoid rule in :math:`s = \log t` (exponentially convergent; ~1e-13 relative
    against an exact enumeration, ``tests/best_of_n/test_soft.py``), ``M`` in log space,
    the weights scaled by the largest. Ties need no rule: equal rewards get equal
    weights. As ``n -> inf`` the law tends to :math:`\pi^*_{\beta=\lambda}` (the tilt):
    Verdun et al. prove :math:`O(1/n)` in KL and in expected reward; exactly, the KL gap
    is :math:`O(1/n^2)` and the total-variation and reward gaps :math:`O(1/n)`, with the
    constants of :func:`soft_best_of_n_gap`. As ``lam -> 0`` it tends to hard best-of-n.
    Cost :math:`O(V\,W + G)`: the ``G`` nodes (about ``5 log(1/(n w_min))``, so
    ``G ~ 1/lam``) are shared, and each outcome is evaluated term by term only on a window
    of ``W`` (about 290) nodes where :math:`e^{-t w}` is neither 1 nor 0 to within
    :math:`e^{-50}`; outside it, it enters :math:`M` as its mass or not at all, and its own
    integral as a prefix sum shared by all outcomes (10^5 outcomes at n = 64: about the
    same time at ``lam`` = 1 and 0.001, ``benchmarks/horizon_bench.py``).

    References
    ----------
    .. [1] Verdun, Oesterling, Lakkaraju, Calmon, 2025, "Soft best-of-n sampling for
       model alignment", arXiv:2505.03156.

    Examples
    --------
    >>> from klpolicy.best_of_n import soft_best_of_n_policy
    >>> soft_best_of_n_policy([0.5, 0.5], [1.0, 0.0], 2, 1.0).round(6)
    array([0.615529, 0.384471])
    """
    ref_a, rew_a, lam_a, ax = _setup(ref, reward, lam, axis, names=("ref", "reward", "lam"))
    nn = V.as_positive_int("n", n)
    shape = ref_a.shape
    q2 = ref_a.reshape(-1, shape[-1]).astype(np.float64)
    r2 = rew_a.reshape(-1, shape[-1]).astype(np.float64)
    l2 = np.broadcast_to(lam_a, shape[:-1] + (1,)).reshape(-1).astype(np.float64)
    out = np.empty_like(q2)
    hard = None
    for i in range(q2.shape[0]):
        lam_i = l2[i]
        if nn == 1 or lam_i == np.inf:
            out[i] = q2[i] / q2[i].sum()
        elif lam_i == 0:
            if hard is None:
                hard = best_of_n_policy(q2, r2, nn).reshape(q2.shape)
            out[i] = hard[i]
        else:
            out[i] = _row(q2[i], r2[i], nn, lam_i)
    out = out.reshape(shape).astype(ref_a.dtype, copy=False)
    return np.moveaxis(out, -1, ax)


def soft_best_of_n_kl(
    ref: ArrayLike, reward: ArrayLike, n: int, lam: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The exact :math:`\mathrm{KL}(\pi_{n,\lambda}\|\pi_{ref})` of soft best-of-n.

    Parameters
    ----------
    ref, reward, n, lam, axis
        As in :func:`soft_best_of_n_policy`.

    Returns
    -------
    ndarray or float
        The KL per batch row; at most :math:`\log n` (the hard best-of-n bound
        :math:`\log n - (n-1)/n` at ``lam = 0``).

    Raises
    ------
    ValueError
        As in :func:`soft_best_of_n_policy`.

    Notes
    -----
    :func:`klpolicy.kl_divergence` of the exact law.

    References
    ----------
    .. [1] Verdun et al., 2025, arXiv:2505.03156.

    Examples
    --------
    >>> from klpolicy.best_of_n import soft_best_of_n_kl
    >>> round(float(soft_best_of_n_kl([0.5, 0.5], [1.0, 0.0], 2, 1.0)), 6)
    0.026937
    """
    from ..core import kl_divergence

    law = soft_best_of_n_policy(ref, reward, n, lam, axis=axis)
    ref_a = np.broadcast_to(np.asarray(ref, dtype=law.dtype), law.shape)
    return kl_divergence(law, ref_a, axis=axis)


class SoftBestOfNGap(NamedTuple):
    """Soft best-of-n against the tilt :math:`\\pi^*_{\\beta=\\lambda}` it tends to; per batch row.

    ``kl``, ``tv`` and ``reward_gap`` are exact at this ``n``; the ``*_coefficient``
    fields are the leading terms of their expansions in ``1/n``:
    ``kl ~ kl_coefficient / n**2``, ``tv ~ tv_coefficient / n``,
    ``reward_gap ~ reward_coefficient / n``.
    """

    kl: NDArray | np.floating
    tv: NDArray | np.floating
    reward_gap: NDArray | np.floating
    kl_coefficient: NDArray | np.floating
    tv_coefficient: NDArray | np.floating
    reward_coefficient: NDArray | np.floating


def soft_best_of_n_gap(
    ref: ArrayLike, reward: ArrayLike, n: int, lam: ArrayLike, *, axis: int = -1
) -> SoftBestOfNGap:
    r"""How far soft best-of-n is from the tilt :math:`\pi^*_{\beta=\lambda}`, exactly and to first order in 1/n.

    .. math::

        \frac{\pi_{n,\lambda}(y)}{\pi^*(y)} = 1 + \frac{\delta(y)}{n} + O(n^{-2}),
        \qquad \delta = \mathbb{E}_{\pi^*}[\rho] - \rho, \quad
        \rho = \frac{\pi^*}{\pi_{ref}} = \frac{e^{r/\lambda}}{\mathbb{E}_{\pi_{ref}} e^{r/\lambda}},

        \mathrm{KL}(\pi_{n,\lambda}\|\pi^*) \sim \frac{\mathrm{Var}_{\pi^*}(\rho)}{2n^2},
        \quad \mathrm{TV} \sim \frac{\mathbb{E}_{\pi^*}|\delta|}{2n},
        \quad \mathbb{E}_{\pi^*}[r] - \mathbb{E}_{\pi_{n,\lambda}}[r] \sim
        \frac{\mathrm{Cov}_{\pi^*}(r, \rho)}{n}

    Parameters
    ----------
    ref, reward, n, axis
        As in :func:`soft_best_of_n_policy`.
    lam : float or array_like
        The temperature, ``0 < lam < inf`` (the tilt's ``beta``).

    Returns
    -------
    SoftBestOfNGap
        The exact ``kl`` (:math:`\mathrm{KL}(\pi_{n,\lambda}\|\pi^*)`), ``tv`` and
        ``reward_gap`` (the tilt's expected reward minus soft best-of-n's, >= 0 at
        large ``n``), and the three leading coefficients.

    Raises
    ------
    ValueError
        For ``n`` not an integer ``>= 1``, ``lam`` not in ``(0, inf)``, invalid
        ``ref`` / ``reward``.

    Notes
    -----
    With :math:`w = e^{r/\lambda}`, :math:`\mu = \mathbb{E}_{ref} w` and
    :math:`S = \sum_{j=2}^n w(Y_j)`: :math:`\pi_{n,\lambda}(y) = n\,\pi_{ref}(y)\,w(y)\,
    \mathbb{E}[1/(w(y) + S)]`; expanding :math:`1/(n\mu + \varepsilon)` to second order
    in :math:`\varepsilon = (w(y) - \mu) + (S - (n-1)\mu)` gives the ratio above. The
    first-order term has mean zero under :math:`\pi^*`, so the KL starts at second order:
    :math:`1/n^2`, one order faster than the :math:`O(1/n)` bound of Verdun et al.; the
    total variation and the reward gap are first order. The reverse KL has the same
    leading term. ``tests/best_of_n/test_soft.py`` checks the three against the exact
    law up to ``n = 10**4``.

    References
    ----------
    .. [1] Verdun, Oesterling, Lakkaraju, Calmon, 2025, "Soft best-of-n sampling for
       model alignment", arXiv:2505.03156 (convergence at rate :math:`O(1/n)` in KL and
       in expected relative reward).

    Examples
    --------
    >>> from klpolicy.best_of_n import soft_best_of_n_gap
    >>> g = soft_best_of_n_gap([0.2, 0.5, 0.3], [1.0, 0.3, -2.0], 1000, 0.5)
    >>> round(float(g.kl * 1000**2 / g.kl_coefficient), 3)  # -> 1 as n grows
    1.003
    """
    from ..core import kl_divergence, optimal_policy

    law = soft_best_of_n_policy(ref, reward, n, lam, axis=axis)
    ref_a, rew_a, lam_a, _ = _setup(ref, reward, lam, axis, names=("ref", "reward", "lam"))
    if not (np.all(lam_a > 0) and np.all(lam_a < np.inf)):
        bad = lam_a[~((lam_a > 0) & (lam_a < np.inf))].reshape(-1)[0]
        raise ValueError(
            f"`lam` must be in (0, inf) for the gap to the tilt pi*_{{beta=lam}}; got {bad!r}"
        )
    pistar = np.moveaxis(optimal_policy(ref, reward, lam, axis=axis), axis, -1).astype(np.float64)
    pn = np.moveaxis(law, axis, -1).astype(np.float64)
    q = ref_a.astype(np.float64)
    q = q / q.sum(axis=-1, keepdims=True)
    r = np.broadcast_to(rew_a, q.shape).astype(np.float64)
    kl = kl_divergence(pn, pistar)
    tv = 0.5 * np.abs(pn - pistar).sum(axis=-1)
    gap = (pistar * r).sum(axis=-1) - (pn * r).sum(axis=-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(q > 0, pistar / q, 0.0)
    m = (pistar * rho).sum(axis=-1, keepdims=True)
    c_kl = 0.5 * (pistar * (rho - m) ** 2).sum(axis=-1)
    c_tv = 0.5 * (pistar * np.abs(rho - m)).sum(axis=-1)
    mr = (pistar * r).sum(axis=-1, keepdims=True)
    c_r = (pistar * (rho - m) * (r - mr)).sum(axis=-1)
    dt = law.dtype
    return SoftBestOfNGap(*(np.asarray(x, dtype=dt)[()] for x in (kl, tv, gap, c_kl, c_tv, c_r)))


class SoftBestOfNFrontier(NamedTuple):
    """Soft best-of-n's reward-KL curve along ``lam``, beside the tilt's and best-of-n's.

    ``lam``, ``kl``, ``expected_reward`` and ``optimal_expected_reward`` (the tilt's
    reward at the same KL) have shape ``(L,)``; ``best_of_n`` is the hard best-of-n
    curve (:class:`~klpolicy.best_of_n.BestOfNCurve`) at ``n = 1, 2, 4, ..., n``.
    """

    n: int
    lam: NDArray
    kl: NDArray
    expected_reward: NDArray
    optimal_expected_reward: NDArray
    best_of_n: object


def soft_best_of_n_frontier(
    ref: ArrayLike, reward: ArrayLike, n: int, lams: ArrayLike | None = None
) -> SoftBestOfNFrontier:
    r"""Soft best-of-n's reward-KL frontier along the temperature, with the tilt and best-of-n.

    .. math::

        \lambda \mapsto \big(\mathrm{KL}(\pi_{n,\lambda}\|\pi_{ref}),\;
        \mathbb{E}_{\pi_{n,\lambda}}[r]\big),
        \quad \text{beside } \mathbb{E}_{\pi^*_\beta}[r] \text{ at }
        \mathrm{KL}(\pi^*_\beta\|\pi_{ref}) = \mathrm{KL}(\pi_{n,\lambda}\|\pi_{ref})

    Parameters
    ----------
    ref, reward : array_like, shape (V,)
        One problem.
    n : int
        Number of draws, an integer ``>= 1``.
    lams : array_like, optional
        Temperatures ``>= 0`` (``0``: hard best-of-n; ``inf``: the reference). Default:
        ``0``, 40 values log-spaced from 1e-2 to 1e2 times the reward's standard
        deviation under the reference, and ``inf``.

    Returns
    -------
    SoftBestOfNFrontier
        The curve along ``lams`` (as given, sorted if defaulted), the tilt's reward at
        each KL and the hard best-of-n curve up to ``n``.

    Raises
    ------
    ValueError
        For ``ref`` / ``reward`` not one 1-D problem, ``n < 1``, ``lams`` negative or NaN.

    Notes
    -----
    The curve runs from the reference (``lam = inf``, KL 0) to hard best-of-n at the
    same ``n`` (``lam = 0``, KL at most :math:`\log n - (n-1)/n`). It lies below the
    tilt's frontier (nothing beats :math:`\pi^*` at its KL) and above best-of-n's
    points at smaller ``n``: at the same KL, softening the choice among ``n`` draws
    does better than choosing hard among fewer. The tilt's reward at each KL comes from
    :func:`klpolicy.beta_for_kl`.

    References
    ----------
    .. [1] Verdun et al., 2025, arXiv:2505.03156.
    .. [2] Gao, Schulman and Hilton, 2022, arXiv:2210.10760 (reward-KL frontiers).

    Examples
    --------
    >>> from klpolicy.best_of_n import soft_best_of_n_frontier
    >>> f = soft_best_of_n_frontier([0.2, 0.5, 0.3], [1.0, 0.3, -2.0], 4, [0.0, 1.0, float("inf")])
    >>> bool((f.expected_reward <= f.optimal_expected_reward + 1e-12).all())
    True
    """
    from ..core import beta_for_kl, max_kl, optimal_policy
    from .frontier import best_of_n_curve

    _one_problem(ref=ref, reward=reward)
    ref_a, rew_a, _, _ = _setup(ref, reward, 1.0, -1, names=("ref", "reward", "lam"))
    nn = V.as_positive_int("n", n)
    q = ref_a.astype(np.float64)
    r = rew_a.astype(np.float64)
    if lams is None:
        sd = float(np.sqrt(max(np.dot(q, (r - np.dot(q, r)) ** 2), 0.0)))
        sd = sd if sd > 0 else 1.0
        grid = np.concatenate([[0.0], sd * np.geomspace(1e-2, 1e2, 40), [np.inf]])
    else:
        grid = V.check_beta_values("lams", lams).reshape(-1).astype(np.float64)
    kls, ers = np.empty(grid.size), np.empty(grid.size)
    for i, lam in enumerate(grid):
        law = soft_best_of_n_policy(q, r, nn, lam)
        kls[i] = float(soft_best_of_n_kl(q, r, nn, lam)) if lam != np.inf else 0.0
        ers[i] = float(np.dot(law, r))
    # the tilt reaches at most max_kl (0 for a constant reward): a KL rounded past it is
    # clipped there (beta_for_kl refused it, naming a `kl` the caller never passed)
    reach = float(max_kl(q, r))
    kl_t = np.clip(kls, 0.0, reach)
    betas = np.asarray(beta_for_kl(q, r, kl_t), dtype=np.float64).reshape(-1)
    opt = np.array([float(np.dot(optimal_policy(q, r, b), r)) for b in betas])
    ns = sorted({2**k for k in range(int(np.log2(nn)) + 1)} | {nn})
    return SoftBestOfNFrontier(nn, grid, kls, ers, opt, best_of_n_curve(q, r, ns))
