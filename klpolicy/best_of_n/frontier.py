r"""Best-of-n along ``n``: its KL-reward curve, the ``n`` a KL budget allows, and the optimum.

Best-of-n spends KL as ``n`` grows. :func:`best_of_n_curve` gives the exact KL,
expected reward and win rate along a grid of ``n`` (one sort of the reference
for the whole grid); :func:`best_of_n_for_kl` inverts the KL, the largest
``n`` within a budget; :func:`best_of_n_vs_optimal` sets each best-of-n point
against the KL-regularised optimum :math:`\pi^*_\beta` at the same KL, which
it can never beat. The law itself is in :mod:`klpolicy.best_of_n`, which
re-exports everything here.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core import beta_for_kl, max_kl, optimal_policy
from ..core.internal import validation as V
from ._law import (
    _expected_reward,
    _kl,
    _kl_bound,
    _law,
    _levels,
    _log_q,
    _per_level,
    _setup,
    _support_best,
    _win_rate,
)

__all__ = [
    "BestOfNComparison",
    "BestOfNCurve",
    "best_of_n_curve",
    "best_of_n_for_kl",
    "best_of_n_vs_optimal",
]

_MAX_N = 2.0**53


class BestOfNCurve(NamedTuple):
    """Best-of-n statistics along a grid of ``n``; each field has shape ``ns.shape + batch``."""

    n: NDArray
    kl: NDArray
    expected_reward: NDArray
    win_rate: NDArray
    kl_bound: NDArray


def best_of_n_curve(
    ref: ArrayLike, reward: ArrayLike, ns: ArrayLike, *, axis: int = -1
) -> BestOfNCurve:
    r"""KL, expected reward and win rate of best-of-n along a grid of ``n``, with one sort.

    .. math::

        n \mapsto \big(\mathrm{KL}(\pi_n\|\pi_{ref}),\; \mathbb{E}_{\pi_n}[r],\;
        \text{win rate},\; \log n - (n-1)/n\big)

    Parameters
    ----------
    ref, reward, axis
        As in :func:`klpolicy.best_of_n.best_of_n_policy`.
    ns : int or array_like of int
        Grid of sample counts, integers ``>= 1``, any shape.

    Returns
    -------
    BestOfNCurve
        Named tuple ``(n, kl, expected_reward, win_rate, kl_bound)``, each of
        shape ``ns.shape + batch_shape``.

    Raises
    ------
    ValueError
        For bad ``ns`` (first bad entry and index shown), and as in
        :func:`klpolicy.best_of_n.best_of_n_policy`.

    Notes
    -----
    The rows are sorted once; each grid point then costs :math:`O(V)`.

    References
    ----------
    .. [1] Beirami et al., 2024, arXiv:2401.01879.

    Examples
    --------
    >>> from klpolicy.best_of_n.frontier import best_of_n_curve
    >>> c = best_of_n_curve([0.5, 0.5], [1.0, 0.0], [1, 2, 4])
    >>> c.expected_reward
    array([0.5   , 0.75  , 0.9375])
    >>> c.kl.round(4)
    array([0.    , 0.1308, 0.4594])
    """
    ref_a, rew_a, _ = _setup(ref, reward, axis)
    grid = V.as_positive_int_array("ns", ns)
    lv = _levels(ref_a, rew_a)
    kl, er, wr = [], [], []
    for nn in grid.ravel():
        law = _law(lv, float(nn))
        kl.append(_kl(lv, law))
        er.append(_expected_reward(lv, law))
        wr.append(_win_rate(lv, law))
    shape = grid.shape + lv.shape

    def pack(xs):
        return np.asarray(xs, dtype=ref_a.dtype).reshape(shape)

    n_full = np.broadcast_to(grid.reshape(grid.shape + (1,) * len(lv.shape)), shape)
    bound = _kl_bound(n_full)
    return BestOfNCurve(n_full.astype(np.int64), pack(kl), pack(er), pack(wr), bound)


def best_of_n_for_kl(
    ref: ArrayLike, reward: ArrayLike, kl: ArrayLike, *, axis: int = -1
) -> NDArray[np.int64] | np.int64:
    r"""The largest ``n`` whose best-of-n policy stays within a KL budget.

    .. math::

        n(\mathrm{kl}) = \max\{\, n \ge 1 : \mathrm{KL}(\pi_n\|\pi_{ref}) \le \mathrm{kl} \,\}

    Parameters
    ----------
    ref, reward, axis
        As in :func:`klpolicy.best_of_n.best_of_n_policy`.
    kl : float or array_like
        KL budget in nats, ``>= 0``, broadcasting over the batch shape.

    Returns
    -------
    int or ndarray of int
        One ``n`` per batch row (int64). ``kl = 0`` gives 1 unless the reward is
        constant on the support.

    Raises
    ------
    ValueError
        For a negative, NaN or infinite ``kl``; and for a budget at or above
        the supremum of the best-of-n KL, :math:`-\log \pi_{ref}(\arg\max r)`
        (:func:`klpolicy.max_kl`), which every ``n`` stays below (checked by
        the property tests), so that no largest ``n`` exists; also when the
        answer would exceed 2**53.

    Notes
    -----
    The search assumes that :math:`\mathrm{KL}(\pi_n\|\pi_{ref})` does not decrease
    with ``n``; it tends to the greedy KL from below. That monotonicity is
    checked by property tests on random references with ties, not proven here.
    The search doubles ``n`` until the budget is exceeded, then bisects on
    integers: :math:`O(\log n)` evaluations of :math:`O(V)` after one sort,
    all rows together.

    References
    ----------
    .. [1] Beirami et al., 2024, arXiv:2401.01879.

    Examples
    --------
    >>> from klpolicy.best_of_n import best_of_n_kl
    >>> from klpolicy.best_of_n.frontier import best_of_n_for_kl
    >>> ref, r = [0.25, 0.25, 0.25, 0.25], [0.0, 1.0, 2.0, 3.0]
    >>> n = best_of_n_for_kl(ref, r, 0.5)
    >>> int(n), bool(best_of_n_kl(ref, r, n) <= 0.5 < best_of_n_kl(ref, r, n + 1))
    (3, True)
    """
    ref_a, rew_a, _ = _setup(ref, reward, axis)
    target = V.as_kl_budget("kl", kl)
    batch = ref_a.shape[:-1]
    try:
        batch = np.broadcast_shapes(batch, target.shape)
    except ValueError:
        raise ValueError(
            f"`kl` of shape {target.shape} does not broadcast against the batch shape {batch}"
        ) from None
    ref_b = np.broadcast_to(ref_a, batch + ref_a.shape[-1:])
    rew_b = np.broadcast_to(rew_a, batch + rew_a.shape[-1:])
    tgt = np.broadcast_to(target, batch).ravel()
    lv = _levels(ref_b, rew_b)
    # supremum: -log of the reference mass on the best reward of the support
    c = _support_best(lv)
    # (log1p of the mass elsewhere where that mass is small: -log(q_top) rounded 1 - 7e-82 to 0)
    top = lv.reward == _per_level(lv, c)
    sup = -np.add.reduceat(np.where(top, _log_q(lv), 0.0), lv.row_first) + 0.0  # no '-0'

    over = tgt >= sup
    if over.any():
        i = int(np.flatnonzero(over)[0])
        where = f" for row {tuple(int(j) for j in np.unravel_index(i, batch))}" if batch else ""
        raise ValueError(
            f"`kl` = {tgt[i]:g} is at or above the supremum of the best-of-n KL{where}, "
            f"{sup[i]:.6g} nats (-log of the reference mass on the best reward): every n stays "
            "within it"
        )

    def kl_at(n_rows):
        return _kl(lv, _law(lv, n_rows)).ravel()

    # an integer search, not core.roots' Newton: n is an integer and KL_n has no derivative
    lo = np.ones_like(tgt)  # KL(lo) <= tgt always (KL(1) = 0)
    hi = np.full_like(tgt, 2.0)
    pending = kl_at(hi) <= tgt
    while pending.any():
        lo = np.where(pending, hi, lo)
        hi = np.where(pending, 2.0 * hi, hi)
        if (hi > _MAX_N).any():
            raise ValueError(
                f"`kl` = {tgt[np.argmax(hi > _MAX_N)]:g} needs more than 2**53 draws; "
                "best_of_n_for_kl cannot represent that n exactly"
            )
        pending = pending & (kl_at(hi) <= tgt)
    # invariant: KL(lo) <= tgt < KL(hi)
    while (hi - lo > 1).any():
        mid = np.floor(0.5 * (lo + hi))
        ok = kl_at(mid) <= tgt
        active = hi - lo > 1
        lo = np.where(active & ok, mid, lo)
        hi = np.where(active & ~ok, mid, hi)
    return lo.astype(np.int64).reshape(batch)[()]


class BestOfNComparison(NamedTuple):
    """Best-of-n and the KL-regularised optimum at equal KL; fields shaped ``ns.shape + batch``."""

    n: NDArray
    kl: NDArray
    best_of_n_reward: NDArray
    beta: NDArray
    optimal_reward: NDArray


def best_of_n_vs_optimal(
    ref: ArrayLike, reward: ArrayLike, ns: ArrayLike, *, axis: int = -1
) -> BestOfNComparison:
    r"""Best-of-n points and the :math:`\pi^*_\beta` frontier at the same KL.

    For each ``n``: :math:`k_n = \mathrm{KL}(\pi_n\|\pi_{ref})`, the best-of-n
    reward :math:`\mathbb{E}_{\pi_n}[r]`, the coefficient
    :math:`\beta_n` with :math:`\mathrm{KL}(\pi^*_{\beta_n}\|\pi_{ref}) = k_n`
    (:func:`klpolicy.beta_for_kl`) and the frontier's reward there:

    .. math::

        \mathbb{E}_{\pi_n}[r] \;\le\; \mathbb{E}_{\pi^*_{\beta_n}}[r]
        = \max\{\mathbb{E}_\pi[r] : \mathrm{KL}(\pi\|\pi_{ref}) \le k_n\}

    Parameters
    ----------
    ref, reward, axis
        As in :func:`klpolicy.best_of_n.best_of_n_policy`.
    ns : int or array_like of int
        Grid of sample counts, integers ``>= 1``.

    Returns
    -------
    BestOfNComparison
        Named tuple ``(n, kl, best_of_n_reward, beta, optimal_reward)``, each of
        shape ``ns.shape + batch_shape``. ``beta`` is ``inf`` at ``n = 1``.

    Raises
    ------
    ValueError
        As in :func:`best_of_n_curve`.

    Notes
    -----
    The inequality holds because :math:`\pi^*_\beta` maximises
    :math:`\mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_{ref})`: any
    policy with the same KL has no more reward. Equality holds at ``n = 1``;
    Beirami et al. and Gui et al. study how close best-of-n comes.

    References
    ----------
    .. [1] Beirami et al., 2024, arXiv:2401.01879.
    .. [2] Gui, Garbacea and Veitch, "BoNBoN Alignment for Large Language
       Models and the Sweetness of Best-of-n Sampling", 2024, arXiv:2406.00832.

    Examples
    --------
    >>> from klpolicy.best_of_n.frontier import best_of_n_vs_optimal
    >>> c = best_of_n_vs_optimal([0.25, 0.25, 0.25, 0.25], [0.0, 1.0, 2.0, 3.0], [1, 4])
    >>> c.best_of_n_reward.round(4), c.optimal_reward.round(4)
    (array([1.5   , 2.6172]), array([1.5   , 2.6279]))
    """
    curve = best_of_n_curve(ref, reward, ns, axis=axis)
    ref_a, rew_a, _ = _setup(ref, reward, axis)
    # KL_n < max_kl mathematically; clip rounding at huge n so beta_for_kl accepts it
    kl = np.minimum(curve.kl.astype(np.float64), max_kl(ref_a, rew_a))
    beta = np.asarray(beta_for_kl(ref_a, rew_a, kl))
    pi = optimal_policy(ref_a, rew_a, beta[..., None])
    opt = np.sum(pi * rew_a, axis=-1).reshape(curve.kl.shape)
    return BestOfNComparison(
        curve.n,
        curve.kl,
        curve.expected_reward,
        beta.reshape(curve.kl.shape),
        opt.astype(curve.kl.dtype),
    )
