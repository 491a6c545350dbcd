r"""The numerical core of best-of-n: reward levels and their exact best-of-n probabilities.

Private: :mod:`klpolicy.best_of_n` and :mod:`klpolicy.best_of_n.frontier`
build on it. For a reward level :math:`g` with reference mass :math:`q_g`,
mass strictly below :math:`F^-_g` and :math:`F_g = F^-_g + q_g`, the best of
``n`` draws has reward :math:`g` with probability :math:`F_g^n - (F^-_g)^n`.

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

from ..core.internal import kl_terms
from ..core.internal import prepare as _prepare
from ..core.internal import validation as V


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


def _log_q(lv: _Levels) -> NDArray:
    """log q per level; for a level holding most of the mass, ``log1p(-(below + above))``.

    The level masses are sums of rounded normalised entries, so a dominant level's ``q``
    can be 1 - 1.1e-16 where ``below + above`` (the exact complement, 1e-30 say) says
    1 - 1e-30: ``log(q)`` would then carry an error of 1e-16 into ``u = log(pi_n / q)``,
    and ``q u^2 / 2`` into a KL that may be 1e-31 (or exactly 0 for tied rewards).
    """
    q = lv.q
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(q >= 0.5, np.log1p(-(lv.below + lv.above)), np.log(q))


def _law(lv: _Levels, n: NDArray | float) -> _Law:
    """Probability of each level under best-of-n; ``n`` a float or one float per row (B,)."""
    ng = n if np.ndim(n) == 0 else _per_level(lv, np.asarray(n))
    q, below, above = lv.q, lv.below, lv.above
    with np.errstate(divide="ignore", invalid="ignore", under="ignore", over="ignore"):
        if np.all(ng == 1):  # the reference itself; log_ratio is then exactly 0
            return _Law(q, _log_q(lv), np.ones_like(q))
        f = below + q
        small = f < 0.5
        # log F: from the bottom when F < 1/2, as log1p(-mass above) otherwise
        log_f = np.log(f, where=small, out=np.empty_like(f))
        np.log1p(-above, where=~small, out=log_f)
        np.subtract(1.0, above, where=~small, out=f)
        frac = np.divide(q, f, out=f)
        np.minimum(frac, 1.0, out=frac)
        # log(F_minus / F): log1p(-q/F) unless q dominates F, where 1 - q/F cancels and
        # log(below) - log F is exact; -inf on the lowest level (F_minus = 0: tail exactly 1)
        tail = np.where(frac > 0.5, np.log(below) - log_f, np.log1p(-frac))
        tail = np.where(below > 0, tail, -np.inf)
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
            n_log_f = np.where(one, _log_q(lv), n_log_f)
            tail = np.where(one, 1.0, tail)
    return _Law(mass, n_log_f, tail)


def _log_ratio(lv: _Levels, law: _Law) -> NDArray:
    """u = log(mass / q) per level (0 on empty levels), from logs, so it never underflows."""
    with np.errstate(divide="ignore", invalid="ignore"):
        u = law.n_log_f + np.log(law.tail) - _log_q(lv)
    return np.where(lv.q > 0, u, 0.0)


def _row_sum(lv: _Levels, x: NDArray) -> NDArray:
    return np.add.reduceat(x, lv.row_first).reshape(lv.shape)


def _kl(lv: _Levels, law: _Law) -> NDArray:
    with np.errstate(invalid="ignore", under="ignore"):
        terms = kl_terms(law.mass, lv.q, _log_ratio(lv, law))
    return _row_sum(lv, np.where(lv.q > 0, terms, 0.0))


def _support_best(lv: _Levels) -> NDArray:
    """The best reward on each row's support (levels of positive reference mass), (B,)."""
    return np.maximum.reduceat(np.where(lv.q > 0, lv.reward, -np.inf), lv.row_first)


def _expected_reward(lv: _Levels, law: _Law) -> NDArray:
    # best reward on the support, minus the expected shortfall: no cancellation at large n
    c = _support_best(lv)
    short = _row_sum(lv, law.mass * (_per_level(lv, c) - lv.reward))
    return c.reshape(lv.shape) - short


def _win_rate(lv: _Levels, law: _Law) -> NDArray:
    return _row_sum(lv, law.mass * (lv.below + 0.5 * lv.q))


def _setup(ref: ArrayLike, reward: ArrayLike, axis: int):
    ref_a, rew_a = _prepare(ref, reward, axis)
    ax = V.normalise_axis(axis, ref_a.ndim)
    return ref_a, rew_a, ax - ref_a.ndim


def _one_problem(**named: ArrayLike) -> None:
    """Refuse anything but one 1-D array per name (``ref``, ``reward``: one problem).

    Ragged or non-numeric input is left to the array validators that follow, which name
    the argument (``np.ndim`` itself raises numpy's "inhomogeneous shape" on it).
    """
    for name, x in named.items():
        try:
            shape = np.shape(x)
        except (TypeError, ValueError):
            continue
        if len(shape) != 1:
            raise ValueError(
                f"`{name}` must be one problem's 1-D array (shape (V,)); got shape {shape}"
            )


def _out(x: NDArray, dtype) -> NDArray:
    return np.asarray(x, dtype=dtype)[()]


def _kl_bound(n: NDArray) -> NDArray:
    """log n - (n - 1)/n, the continuous-reference best-of-n KL (validated integers n >= 1)."""
    return np.log(n) - 1.0 + 1.0 / n
