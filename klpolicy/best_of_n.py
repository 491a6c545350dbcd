r"""Best-of-n sampling: its exact law, KL, expected reward and win rate.

Draw :math:`Y_1, \dots, Y_n` i.i.d. from :math:`\pi_{ref}` and keep the one
with the highest reward, choosing uniformly at random among the draws that tie
for the highest reward. Group the outcomes by reward value: for a reward level
:math:`g` with reference mass :math:`q_g`, mass strictly below :math:`F^-_g`
and mass at or below :math:`F_g = F^-_g + q_g`, the kept draw has reward
:math:`g` with probability :math:`F_g^n - (F^-_g)^n`, and given that, it is
distributed as :math:`\pi_{ref}` restricted to the level:

.. math::

    \pi_n(y) = \pi_{ref}(y)\, \frac{F_g^n - (F^-_g)^n}{q_g}, \qquad g = r(y).

Numerical method
----------------
One sort of each row by reward, then linear passes: tied rewards become
adjacent, level masses are segment sums (``np.add.reduceat``), :math:`F^-_g`
comes from a cumulative sum from the bottom and the mass strictly above a
level, :math:`A_g = 1 - F_g`, from a cumulative sum from the top. Then

.. math::

    \log\big(F_g^n - (F^-_g)^n\big) = n \log F_g
        + \log\!\big(-\mathrm{expm1}(n\, \mathrm{log1p}(-q_g/F_g))\big),

with :math:`\log F_g` taken as ``log(F_minus + q)`` below 1/2 and as
``log1p(-A)`` above, so that neither the top level (where :math:`F_g^n` is
close to 1) nor the bottom ones (where it underflows) loses digits at large
:math:`n`. The KL is summed from the non-negative terms
``q (u e^u - e^u + 1)``, ``u = log(pi_n / ref)`` per level.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _validation as V
from ._numerics import kl_terms
from .closed_form import _prepare, beta_for_kl, max_kl, optimal_policy

__all__ = [
    "BestOfNComparison",
    "BestOfNCurve",
    "best_of_n_curve",
    "best_of_n_expected_reward",
    "best_of_n_for_kl",
    "best_of_n_kl",
    "best_of_n_kl_bound",
    "best_of_n_policy",
    "best_of_n_vs_optimal",
    "best_of_n_win_rate",
]

_MAX_N = 2.0**53


class _Levels(NamedTuple):
    """The reward levels of every row, flattened (rows in order, rewards ascending)."""

    flat: NDArray  # flat index (into the (B*V,) arrays) of each sorted entry
    gid: NDArray | None  # level of each sorted entry, (B*V,); None when no ties
    starts: NDArray | None  # first sorted entry of each level, (G,); None when no ties
    q: NDArray  # reference mass of each level, (G,)
    below: NDArray  # mass strictly below, (G,)
    above: NDArray  # mass strictly above, (G,)
    reward: NDArray  # reward of each level, (G,)
    row_first: NDArray  # index of the first level of each row, (B,)
    ref_n: NDArray  # normalised reference, (B*V,), float64
    n_out: int  # outcomes per row V
    shape: tuple  # batch shape


def _levels(ref: NDArray, reward: NDArray) -> _Levels:
    """Sort each row by reward and group equal rewards (inputs validated, axis last)."""
    batch = ref.shape[:-1]
    n_out = ref.shape[-1]
    p = ref.reshape(-1, n_out).astype(np.float64, copy=False)
    r = reward.reshape(-1, n_out).astype(np.float64, copy=False)
    rows = p.shape[0]
    p = (p / p.sum(axis=-1, keepdims=True)).ravel()
    order = np.argsort(r, axis=-1)
    flat = order.ravel() if rows == 1 else (order + (np.arange(rows) * n_out)[:, None]).ravel()
    rs = r.ravel()[flat]
    ps = p[flat]
    size = rs.size
    start = np.empty(size, dtype=bool)
    np.not_equal(rs[1:], rs[:-1], out=start[1:])
    start[::n_out] = True
    ps2 = ps.reshape(rows, n_out)
    # exclusive cumulative sums by shifting (subtracting p_j from an inclusive sum cancels)
    below_e = np.zeros_like(ps2)
    np.cumsum(ps2[:, :-1], axis=-1, out=below_e[:, 1:])
    above_e = np.zeros_like(ps2)
    np.cumsum(ps2[:, :0:-1], axis=-1, out=above_e[:, -2::-1])
    below_e, above_e = below_e.ravel(), above_e.ravel()
    if start.all():  # no ties: every entry is its own level
        return _Levels(
            flat, None, None, ps, below_e, above_e, rs, np.arange(rows) * n_out, p, n_out, batch
        )
    starts = np.flatnonzero(start)
    gid = np.cumsum(start) - 1
    ends = np.empty_like(starts)
    ends[:-1] = starts[1:] - 1
    ends[-1] = size - 1
    return _Levels(
        flat,
        gid,
        starts,
        np.add.reduceat(ps, starts),
        below_e[starts],
        above_e[ends],
        rs[starts],
        gid[np.arange(rows) * n_out],
        p,
        n_out,
        batch,
    )


def _per_level(lv: _Levels, x_rows: NDArray) -> NDArray:
    """Spread one value per row, shape (B,), to the levels; a scalar for a single row."""
    if x_rows.shape[0] == 1:
        return x_rows[0]
    first = np.arange(lv.q.size) if lv.starts is None else lv.starts
    return x_rows[first // lv.n_out]


class _Law(NamedTuple):
    mass: NDArray  # P(best of n has this level's reward), (G,)
    n_log_f: NDArray  # n log F, (G,)
    tail: NDArray  # 1 - (F_minus / F)^n, (G,); mass = exp(n_log_f) * tail


def _law(lv: _Levels, n: NDArray | float) -> _Law:
    """Probability of each level under best-of-n; ``n`` a float or one float per row (B,)."""
    ng = n if np.ndim(n) == 0 else _per_level(lv, np.asarray(n))
    q, below, above = lv.q, lv.below, lv.above
    with np.errstate(divide="ignore", invalid="ignore", under="ignore", over="ignore"):
        if np.all(ng == 1):  # the reference itself; log_ratio is then exactly 0
            return _Law(q, np.log(q), np.ones_like(q))
        f = below + q
        small = f < 0.5
        # log F: from the bottom when F < 1/2, as log1p(-mass above) otherwise
        log_f = np.log(f, where=small, out=np.empty_like(f))
        np.log1p(-above, where=~small, out=log_f)
        np.subtract(1.0, above, where=~small, out=f)
        frac = np.divide(q, f, out=f)
        np.minimum(frac, 1.0, out=frac)
        tail = np.log1p(-frac)
        tail *= ng
        np.expm1(tail, out=tail)
        np.negative(tail, out=tail)  # 1 - (F_minus / F)^n
        n_log_f = np.multiply(ng, log_f, out=log_f)
        mass = np.exp(n_log_f)
        mass *= tail
        empty = q <= 0
        if empty.any():
            mass[empty] = 0.0
        one = ng == 1
        if np.any(one):  # rows with n = 1 in a batch
            mass = np.where(one, q, mass)
            n_log_f = np.where(one, np.log(q), n_log_f)
            tail = np.where(one, 1.0, tail)
    return _Law(mass, n_log_f, tail)


def _log_ratio(lv: _Levels, law: _Law) -> NDArray:
    """u = log(mass / q) per level (0 on empty levels), from logs, so it never underflows."""
    with np.errstate(divide="ignore", invalid="ignore"):
        u = law.n_log_f + np.log(law.tail) - np.log(lv.q)
    return np.where(lv.q > 0, u, 0.0)


def _row_sum(lv: _Levels, x: NDArray) -> NDArray:
    return np.add.reduceat(x, lv.row_first).reshape(lv.shape)


def _kl(lv: _Levels, law: _Law) -> NDArray:
    with np.errstate(invalid="ignore", under="ignore"):
        terms = kl_terms(law.mass, lv.q, _log_ratio(lv, law))
    return _row_sum(lv, np.where(lv.q > 0, terms, 0.0))


def _expected_reward(lv: _Levels, law: _Law) -> NDArray:
    # best reward on the support, minus the expected shortfall: no cancellation at large n
    best = np.where(lv.q > 0, lv.reward, -np.inf)
    c = np.maximum.reduceat(best, lv.row_first)
    short = _row_sum(lv, law.mass * (_per_level(lv, c) - lv.reward))
    return c.reshape(lv.shape) - short


def _win_rate(lv: _Levels, law: _Law) -> NDArray:
    return _row_sum(lv, law.mass * (lv.below + 0.5 * lv.q))


def _setup(ref: ArrayLike, reward: ArrayLike, axis: int):
    ref_a, rew_a = _prepare(ref, reward, axis)
    ax = V.normalise_axis(axis, ref_a.ndim)
    return ref_a, rew_a, ax - ref_a.ndim


def _out(x: NDArray, dtype) -> NDArray:
    return np.asarray(x, dtype=dtype)[()]


def best_of_n_policy(
    ref: ArrayLike, reward: ArrayLike, n: int, *, axis: int = -1
) -> NDArray[np.floating]:
    r"""The exact law of the highest-reward draw among ``n`` i.i.d. draws from ``ref``.

    .. math::

        \pi_n(y) = \pi_{ref}(y)\, \frac{F(r(y))^n - F^-(r(y))^n}{\pi_{ref}(r = r(y))},
        \quad F(t) = \pi_{ref}(r \le t), \; F^-(t) = \pi_{ref}(r < t)

    Parameters
    ----------
    ref : array_like
        Reference probabilities along ``axis`` (non-negative, rows summing to 1).
    reward : array_like
        Finite rewards, same size as ``ref`` along ``axis``; batch axes broadcast.
    n : int
        Number of draws, an integer ``>= 1`` (``4.0`` is accepted, ``2.5`` is not).
    axis : int, optional
        The probability axis (default -1).

    Returns
    -------
    ndarray
        :math:`\pi_n`, with the broadcast shape of ``ref`` and ``reward``;
        float32 when the inputs are float32, float64 otherwise.

    Raises
    ------
    ValueError
        For ``n`` that is not an integer ``>= 1`` (or is above 2**53), and for
        invalid ``ref`` or ``reward`` as in :func:`klpolicy.optimal_policy`.

    Notes
    -----
    Ties: among the draws sharing the highest reward, one is chosen uniformly
    at random. The kept draw is then distributed as the reference restricted to
    that reward level, whatever the tie-breaking rule, as long as it does not
    look at which outcome a draw is; so outcomes of equal reward keep their
    reference odds. Outcomes with zero reference probability get zero.
    ``n = 1`` returns the reference. Cost: one ``argsort`` per row and a few
    linear passes, :math:`O(V \log V)`; a million outcomes take a fraction of a
    second (``benchmarks/best_of_n_bench.py``). Accurate to about 1e-13
    relative for ``n`` up to 2**53 (see the module notes for the log/expm1 form).

    References
    ----------
    .. [1] Beirami et al., "Theoretical guarantees on the best-of-n alignment
       policy", 2024, arXiv:2401.01879.
    .. [2] Nakano et al., "WebGPT: Browser-assisted question-answering with
       human feedback", 2021, arXiv:2112.09332 (best-of-n as a baseline).

    Examples
    --------
    >>> from klpolicy.best_of_n import best_of_n_policy
    >>> best_of_n_policy([0.5, 0.5], [1.0, 0.0], 2)  # 1 - 0.5**2 and 0.5**2
    array([0.75, 0.25])
    >>> best_of_n_policy([0.25, 0.25, 0.5], [1.0, 1.0, 0.0], 3).round(4)  # a tie
    array([0.4375, 0.4375, 0.125 ])
    """
    ref_a, rew_a, ax = _setup(ref, reward, axis)
    nn = _scalar_n(n)
    shape = ref_a.shape
    lv = _levels(ref_a, rew_a)
    law = _law(lv, nn)
    with np.errstate(under="ignore", invalid="ignore", divide="ignore"):
        # mass / q, from the logs where the mass is subnormal
        ratio = law.mass / lv.q
        tiny = law.mass < 1e-290
        if tiny.any():
            ratio = np.where(tiny, np.exp(_log_ratio(lv, law)), ratio)
    pi = np.empty_like(lv.ref_n)
    pi[lv.flat] = ratio if lv.gid is None else ratio[lv.gid]
    pi *= lv.ref_n
    pi = pi.reshape(shape).astype(ref_a.dtype, copy=False)
    return np.moveaxis(pi, -1, ax)


def _scalar_n(n) -> float:
    nn = V.as_positive_int_array("n", n)
    if nn.ndim != 0:
        raise ValueError(
            f"`n` must be a single integer >= 1; got shape {nn.shape} "
            "(use best_of_n_curve for a grid)"
        )
    return float(nn)


def _stat(ref, reward, n, axis, fn):
    ref_a, rew_a, _ = _setup(ref, reward, axis)
    nn = _scalar_n(n)
    lv = _levels(ref_a, rew_a)
    return _out(fn(lv, _law(lv, nn)), ref_a.dtype)


def best_of_n_kl(
    ref: ArrayLike, reward: ArrayLike, n: int, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The exact KL divergence of the best-of-n policy from the reference.

    .. math::

        \mathrm{KL}(\pi_n\|\pi_{ref}) = \sum_g P_n(g) \log\frac{P_n(g)}{q_g},
        \qquad P_n(g) = F_g^n - (F_g^-)^n

    summed over the reward levels :math:`g` (within a level :math:`\pi_n`
    is proportional to :math:`\pi_{ref}`, so those terms cancel).

    Parameters
    ----------
    ref, reward, n, axis
        As in :func:`best_of_n_policy`.

    Returns
    -------
    ndarray or float
        KL in nats for each batch row (the probability axis removed). At most
        :func:`best_of_n_kl_bound` ``(n)`` and below :func:`klpolicy.max_kl`.

    Raises
    ------
    ValueError
        As in :func:`best_of_n_policy`.

    Notes
    -----
    The widely quoted :math:`\log n - (n-1)/n` is the value for a reference
    whose reward has no atoms (a continuum of distinct rewards); on a discrete
    reference it is an upper bound, reached only in that limit. The summands
    ``q (u e^u - e^u + 1)`` are non-negative, so the sum keeps full relative
    precision (about 1e-13 against mpmath for ``n = 10**9``).

    References
    ----------
    .. [1] Beirami et al., "Theoretical guarantees on the best-of-n alignment
       policy", 2024, arXiv:2401.01879.

    Examples
    --------
    >>> from klpolicy.best_of_n import best_of_n_kl, best_of_n_kl_bound
    >>> round(float(best_of_n_kl([0.5, 0.5], [1.0, 0.0], 2)), 6)  # 0.75 log 1.5 + 0.25 log 0.5
    0.130812
    >>> round(float(best_of_n_kl_bound(2)), 6)
    0.193147
    """
    return _stat(ref, reward, n, axis, _kl)


def best_of_n_expected_reward(
    ref: ArrayLike, reward: ArrayLike, n: int, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The exact expected reward of the best of ``n`` draws.

    .. math::

        \mathbb{E}_{\pi_n}[r] = \sum_g \big(F_g^n - (F_g^-)^n\big)\, g

    Parameters
    ----------
    ref, reward, n, axis
        As in :func:`best_of_n_policy`.

    Returns
    -------
    ndarray or float
        For each batch row; rises from :math:`\mathbb{E}_{ref}[r]` at ``n = 1``
        to the best reward on the support as ``n -> inf``.

    Raises
    ------
    ValueError
        As in :func:`best_of_n_policy`.

    Notes
    -----
    Evaluated as the best reward on the support minus the expected shortfall
    :math:`\sum_g P_n(g)(c - g)`, which keeps its precision at large ``n``.

    References
    ----------
    .. [1] Gao, Schulman and Hilton, "Scaling Laws for Reward Model
       Overoptimization", 2022, arXiv:2210.10760.

    Examples
    --------
    >>> from klpolicy.best_of_n import best_of_n_expected_reward
    >>> float(best_of_n_expected_reward([0.5, 0.5], [1.0, 0.0], 3))  # 1 - 0.5**3
    0.875
    """
    return _stat(ref, reward, n, axis, _expected_reward)


def best_of_n_win_rate(
    ref: ArrayLike, reward: ArrayLike, n: int, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The exact win rate of the best of ``n`` draws against one draw from the reference.

    .. math::

        P\big(r(Y_n) > r(Y)\big) + \tfrac12 P\big(r(Y_n) = r(Y)\big)
          = \sum_g P_n(g)\,\big(F_g^- + \tfrac12 q_g\big),
        \quad Y_n \sim \pi_n,\; Y \sim \pi_{ref}

    Parameters
    ----------
    ref, reward, n, axis
        As in :func:`best_of_n_policy`.

    Returns
    -------
    ndarray or float
        For each batch row: exactly 1/2 at ``n = 1``; it tends to ``n / (n + 1)``
        as the reference becomes continuous (many small outcomes with distinct
        rewards), and is below that on a discrete reference, where the two draws
        can tie.

    Raises
    ------
    ValueError
        As in :func:`best_of_n_policy`.

    Notes
    -----
    Ties count half a win, the usual convention for win rates. The sum equals
    :math:`\sum_g (F_g^n - (F^-_g)^n)(F_g + F^-_g)/2`, a trapezoid rule for
    :math:`\int_0^1 u\, d(u^n) = n/(n+1)`, the continuous value.

    References
    ----------
    .. [1] Beirami et al., 2024, arXiv:2401.01879.

    Examples
    --------
    >>> from klpolicy.best_of_n import best_of_n_win_rate
    >>> float(best_of_n_win_rate([0.5, 0.5], [1.0, 0.0], 1))
    0.5
    >>> float(best_of_n_win_rate([0.5, 0.5], [1.0, 0.0], 3))  # 0.875 * 0.75 + 0.125 * 0.25
    0.6875
    """
    return _stat(ref, reward, n, axis, _win_rate)


def best_of_n_kl_bound(n: ArrayLike) -> NDArray[np.float64] | np.float64:
    r"""The widely quoted best-of-n KL, :math:`\log n - (n-1)/n`: an upper bound.

    .. math::

        \mathrm{KL}(\pi_n\|\pi_{ref}) \le \log n - \frac{n-1}{n}

    Parameters
    ----------
    n : int or array_like of int
        Number of draws, integers ``>= 1``.

    Returns
    -------
    float or ndarray
        Same shape as ``n``, in nats. 0 at ``n = 1``.

    Raises
    ------
    ValueError
        For entries of ``n`` that are not integers ``>= 1``; the message shows
        the first bad entry and its index.

    Notes
    -----
    It is the exact KL when the reference's reward has a continuous law: the
    best-of-n quantile :math:`U = F(r(Y_n))` then has density :math:`n u^{n-1}`
    on :math:`[0, 1]` against the uniform law of :math:`F(r(Y))`, and
    :math:`\int_0^1 n u^{n-1}\log(n u^{n-1})\,du = \log n - (n-1)/n`. A
    discrete reference groups the quantiles into intervals, which replaces the
    density by its interval averages; by Jensen's inequality this can only
    lower the KL (see ``docs/derivations/best_of_n.md``). The bound is tight
    in the limit of many equiprobable outcomes with distinct rewards.

    References
    ----------
    .. [1] Beirami et al., "Theoretical guarantees on the best-of-n alignment
       policy", 2024, arXiv:2401.01879.
    .. [2] Stiennon et al., "Learning to summarize from human feedback", 2020,
       arXiv:2009.01325 (the formula as stated there).

    Examples
    --------
    >>> from klpolicy.best_of_n import best_of_n_kl_bound
    >>> best_of_n_kl_bound([1, 2, 16]).round(4)
    array([0.    , 0.1931, 1.8351])
    """
    nn = V.as_positive_int_array("n", n)
    return (np.log(nn) - 1.0 + 1.0 / nn)[()]


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
        As in :func:`best_of_n_policy`.
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
        :func:`best_of_n_policy`.

    Notes
    -----
    The rows are sorted once; each grid point then costs :math:`O(V)`.

    References
    ----------
    .. [1] Beirami et al., 2024, arXiv:2401.01879.

    Examples
    --------
    >>> from klpolicy.best_of_n import best_of_n_curve
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
    bound = np.log(n_full) - 1.0 + 1.0 / n_full
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
        As in :func:`best_of_n_policy`.
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
    >>> from klpolicy.best_of_n import best_of_n_for_kl, best_of_n_kl
    >>> ref, r = [0.25, 0.25, 0.25, 0.25], [0.0, 1.0, 2.0, 3.0]
    >>> n = best_of_n_for_kl(ref, r, 0.5)
    >>> int(n), bool(best_of_n_kl(ref, r, n) <= 0.5 < best_of_n_kl(ref, r, n + 1))
    (3, True)
    """
    ref_a, rew_a, _ = _setup(ref, reward, axis)
    target = np.asarray(kl, dtype=np.float64) if not isinstance(kl, str) else None
    if target is None or target.size == 0:
        raise ValueError(f"`kl` must be a finite non-negative number of nats; got {kl!r}")
    bad = np.isnan(target) | (target < 0) | np.isinf(target)
    if bad.any():
        raise ValueError(
            "`kl` must be a finite non-negative number of nats; "
            f"got {V._fmt_value(target[bad].flat[0])}"
        )
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
    top = np.where(lv.q > 0, lv.reward, -np.inf)
    c = np.maximum.reduceat(top, lv.row_first)
    q_top = np.add.reduceat(np.where(lv.reward == _per_level(lv, c), lv.q, 0.0), lv.row_first)
    sup = -np.log(q_top) + 0.0  # + 0.0: no '-0' in messages
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
        As in :func:`best_of_n_policy`.
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
    >>> from klpolicy.best_of_n import best_of_n_vs_optimal
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
