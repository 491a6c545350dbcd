"""One safeguarded, vectorised root finder for the package's monotone inverses.

Internal to klpolicy: other subpackages reach it through :mod:`klpolicy.core.internal`.

:func:`monotone_root` solves ``f(x) = 0`` for many independent rows at once,
where each row's ``f`` is monotone on a given bracket ``[lo, hi]``. It is the
classic safeguarded Newton method ("rtsafe"): a Newton step from whichever
bracket end has the smaller ``|f|`` when that step stays inside the bracket,
a bisection otherwise, and the bracket shrinks around every evaluated point.
Newton's iterates approach the root of a convex (or concave) ``f`` from one side
and never move the other end, so once a step is shorter than the stopping width
the next point is a probe half that width past the root: its sign change closes
the bracket in one evaluation instead of some fifty bisections of the far end.

Guarantees
----------
* Termination: a bisection is forced whenever neither the bracket nor the
  best ``|f|`` has halved over the last ``_WINDOW`` iterations, so one of the
  two halves at least every ``_WINDOW + 1`` iterations. A float64 width or
  ``|f|`` can halve only about 2,100 times before no float lies strictly
  inside the bracket or ``f`` reaches 0 (both stop the row), so the
  iteration count is bounded (by about ``(_WINDOW + 1) * 4200``) whatever
  ``f`` does.
* No silent failure: every row comes back with a ``converged`` flag, true when
  ``|f(x)| <= ftol`` or when ``x`` is pinned between two evaluated points of
  opposite sign that are at most ``xtol`` apart (the root is then resolved to
  float precision in ``x``). A root outside the bracket leaves the row
  unconverged at the bracket end, with ``outside`` saying which side (-1 below
  ``lo``, +1 above ``hi``); a NaN ``f`` stops its row unconverged with
  ``outside = 0``. Callers raise on unconverged rows.
* Only rows still iterating are evaluated; there is no Python loop over rows.

The bracket ends need not be evaluated first: the direction of monotonicity
says which side a point's sign puts the root on, so the whole float range
(e.g. ``log(5e-324) .. log(1.8e308)`` for a coefficient) can be passed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = ["Roots", "monotone_root"]

_WINDOW = 4  # iterations a bracket may go without halving before a bisection is forced
_MAX_ITER = 20_000  # a backstop only: the halving rule ends every row long before


class Roots(NamedTuple):
    """Result of :func:`monotone_root`, one entry per row."""

    x: NDArray[np.float64]  # the evaluated point with the smallest |f| (a bracket end)
    f: NDArray[np.float64]  # f at x
    converged: NDArray[np.bool_]  # |f| <= ftol, or x resolved to xtol between a sign change
    outside: NDArray[np.int8]  # -1 / +1: no sign change seen, root below lo / above hi; else 0
    iterations: int


def monotone_root(
    fun: Callable[[NDArray, NDArray], tuple[NDArray, NDArray]],
    lo: ArrayLike,
    hi: ArrayLike,
    x0: ArrayLike | None = None,
    *,
    increasing: bool,
    ftol: ArrayLike = 0.0,
    xtol: float = 4 * np.finfo(np.float64).eps,
    xatol: float = 0.0,
    max_iter: int | None = None,
) -> Roots:
    """Solve ``fun(x) = 0`` row by row on the brackets ``[lo, hi]``.

    Parameters
    ----------
    fun : callable
        ``fun(x, rows) -> (f, df)``: the values and derivatives at the points
        ``x`` (1-D) of the rows ``rows`` (integer indices into the flattened
        problem). ``df`` may be NaN or 0 where unknown: the step is then a
        bisection.
    lo, hi : array_like
        Finite bracket ends. ``lo``, ``hi``, ``x0`` and ``ftol`` broadcast
        together to the rows' shape.
    x0 : array_like, optional
        Starting points, clipped into the bracket (default: the midpoints).
    increasing : bool
        Whether each row's ``f`` increases with ``x`` (else it decreases).
    ftol : float or array_like
        Absolute tolerance on ``|f|``; 0 asks for the best float ``x``.
    xtol, xatol : float
        A row whose bracket is narrower than ``xtol * max(|lo|, |hi|) + xatol``
        stops.
    max_iter : int, optional
        A cap on the iterations; rows still iterating then come back
        unconverged with ``outside = 0``. ``None`` (default): no cap beyond the
        halving rule's own bound.

    Returns
    -------
    Roots
        ``(x, f, converged, outside, iterations)`` with the rows' shape.
    """
    lo_, hi_, x_, tol = np.broadcast_arrays(
        np.asarray(lo, dtype=np.float64),
        np.asarray(hi, dtype=np.float64),
        np.asarray(0.5 * (np.asarray(lo) + np.asarray(hi)) if x0 is None else x0, np.float64),
        np.asarray(ftol, dtype=np.float64),
    )
    shape = x_.shape
    tol = tol.reshape(-1)
    lo_, hi_ = lo_.reshape(-1).copy(), hi_.reshape(-1).copy()
    if not (np.isfinite(lo_).all() and np.isfinite(hi_).all() and (lo_ <= hi_).all()):
        raise ValueError("monotone_root needs finite brackets with lo <= hi")
    x = np.clip(x_.reshape(-1), lo_, hi_)
    x = np.where(np.isnan(x), 0.5 * (lo_ + hi_), x)
    m = x.size
    sign = 1.0 if increasing else -1.0
    # f and f' at the bracket ends; NaN until that end has been evaluated
    f_lo, d_lo = np.full(m, np.nan), np.full(m, np.nan)
    f_hi, d_hi = np.full(m, np.nan), np.full(m, np.nan)
    best_x, best_f = x.copy(), np.full(m, np.inf)
    # bracket widths after each of the last _WINDOW iterations (inf: Newton's grace period)
    widths = [np.full(m, np.inf)] * _WINDOW
    fbest = [np.full(m, np.inf)] * _WINDOW  # the best |f| after each of those iterations
    stuck = np.zeros(m, dtype=bool)
    live = np.arange(m)
    xl = x
    it = 0
    cap = _MAX_ITER if max_iter is None else int(max_iter)
    for it in range(1, cap + 1):  # noqa: B007 - the count is returned
        with np.errstate(all="ignore"):
            fx, dx = (np.asarray(v, dtype=np.float64).reshape(-1) for v in fun(xl, live))
        # keep the best point seen; a NaN f never becomes the best
        better = np.abs(fx) < np.abs(best_f[live])
        best_x[live] = np.where(better, xl, best_x[live])
        best_f[live] = np.where(better, fx, best_f[live])
        # the sign of f says which side of x the root lies on
        up = sign * fx <= 0  # root above x (or at x: then lo = x with f_lo = 0)
        down = sign * fx > 0  # root below x
        lo_[live] = np.where(up, xl, lo_[live])
        f_lo[live] = np.where(up, fx, f_lo[live])
        d_lo[live] = np.where(up, dx, d_lo[live])
        hi_[live] = np.where(down, xl, hi_[live])
        f_hi[live] = np.where(down, fx, f_hi[live])
        d_hi[live] = np.where(down, dx, d_hi[live])
        stuck[live[np.isnan(fx)]] = True
        width = hi_ - lo_
        lo_l, hi_l = lo_[live], hi_[live]
        with np.errstate(all="ignore"):
            mid = lo_l + 0.5 * (hi_l - lo_l)
        stop = (
            (np.abs(best_f[live]) <= tol[live])
            | (fx == 0)
            | np.isnan(fx)  # f stuck here: the row stops unconverged (callers raise)
            | (width[live] <= xtol * np.maximum(np.abs(lo_l), np.abs(hi_l)) + xatol)
            | (mid <= lo_l)
            | (mid >= hi_l)
        )
        keep = ~stop
        live = live[keep]
        if live.size == 0:
            break
        lo_l, hi_l, mid = lo_l[keep], hi_l[keep], mid[keep]
        ends = (f_lo[live], d_lo[live], f_hi[live], d_hi[live])
        step = _newton_or_probe(lo_l, hi_l, mid, ends, xtol, xatol)
        # the halving rule: unless the bracket or the best |f| has halved over the last
        # _WINDOW iterations, bisect; one of the two then halves every _WINDOW + 1 iterations
        # (Newton converging from one side moves one end only, but halves |f|)
        forced = (width[live] > 0.5 * widths[0][live]) & (
            np.abs(best_f[live]) > 0.5 * np.abs(fbest[0][live])
        )
        xl = np.where(forced, mid, step)
        widths = widths[1:] + [width]
        fbest = fbest[1:] + [best_f.copy()]
    stuck[live] = True  # rows left at the max_iter cap
    brackets = (lo_, f_lo, hi_, f_hi)
    return _roots(brackets, best_x, best_f, stuck, tol, xtol, xatol, shape, it)


def _newton_or_probe(lo_l, hi_l, mid, ends, xtol, xatol):
    """The next point of each live row: Newton's step from the bracket end with the smaller
    ``|f|`` (then from the other) where it lands inside the bracket, else the midpoint; and
    in the endgame a probe just past a root found to rounding."""
    f_lo, d_lo, f_hi, d_hi = ends
    # Newton from the bracket end with the smaller |f|, then from the other
    with np.errstate(all="ignore"):
        n_lo = lo_l - f_lo / d_lo
        n_hi = hi_l - f_hi / d_hi
    ok_lo = np.isfinite(n_lo) & (n_lo > lo_l) & (n_lo < hi_l)
    ok_hi = np.isfinite(n_hi) & (n_hi > lo_l) & (n_hi < hi_l)
    prefer_lo = ~(np.abs(f_hi) < np.abs(f_lo))  # NaN |f| never preferred
    first = np.where(prefer_lo, n_lo, n_hi)
    first_ok = np.where(prefer_lo, ok_lo, ok_hi)
    second = np.where(prefer_lo, n_hi, n_lo)
    second_ok = np.where(prefer_lo, ok_hi, ok_lo)
    step = np.where(first_ok, first, np.where(second_ok, second, mid))
    # the endgame: a Newton step from the preferred end shorter than a quarter of the
    # stopping width (0 included) means that end is the root to rounding, while a
    # one-sided Newton sequence (a convex f approached from its convex side) never moves
    # the other end; probe just past the root, half the stopping width away, so that
    # the sign change closes the bracket (instead of ~50 bisections of the far end)
    scale = np.maximum(np.abs(lo_l), np.abs(hi_l))
    reach = 0.5 * (xtol * scale + xatol)
    end = np.where(prefer_lo, lo_l, hi_l)
    with np.errstate(all="ignore"):
        probe = np.where(prefer_lo, lo_l + reach, hi_l - reach)
        near = np.isfinite(first) & (np.abs(first - end) <= 0.5 * reach)
    near &= (reach > 0) & (probe > lo_l) & (probe < hi_l)
    return np.where(near, probe, step)


def _roots(brackets, best_x, best_f, stuck, tol, xtol, xatol, shape, it) -> Roots:
    """The result: each row's bracket end nearest the root (``f`` is monotone), whether it
    converged (a small ``f``, or a sign change seen on both sides within ``xtol``) and on
    which side of the bracket a root outside it lies."""
    lo_, f_lo, hi_, f_hi = brackets
    # f is monotone: the evaluated point nearest the root is a bracket end
    use_hi = np.abs(f_hi) < np.abs(f_lo)  # False where f_hi is NaN
    x_out = np.where(use_hi, hi_, np.where(np.isnan(f_lo), best_x, lo_))
    f_out = np.where(use_hi, f_hi, np.where(np.isnan(f_lo), best_f, f_lo))
    # converged: small f, or a sign change seen on both sides within xtol
    both = ~np.isnan(f_lo) & ~np.isnan(f_hi)
    tight = (hi_ - lo_) <= xtol * np.maximum(np.abs(lo_), np.abs(hi_)) + xatol
    adjacent = (lo_ + 0.5 * (hi_ - lo_) <= lo_) | (lo_ + 0.5 * (hi_ - lo_) >= hi_)
    converged = ((np.abs(f_out) <= tol) | (f_out == 0) | (both & (tight | adjacent))) & ~stuck
    outside = np.zeros(x_out.size, dtype=np.int8)
    outside[~converged & ~stuck & np.isnan(f_hi)] = 1
    outside[~converged & ~stuck & np.isnan(f_lo)] = -1
    return Roots(
        x_out.reshape(shape),
        f_out.reshape(shape),
        converged.reshape(shape),
        outside.reshape(shape),
        it,
    )
