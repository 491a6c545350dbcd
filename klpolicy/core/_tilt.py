r"""The exponential tilt :math:`\pi^*_\beta \propto \pi_{ref} e^{r/\beta}`: the core's kernel.

Two paths compute the same quantities for validated rows (probability axis last):

* the **fast path**, row block by row block: ``w = ref * exp((r - c) / beta)``,
  ``pi = w / sum(w)``; one exponential per entry and a few multiply/add passes
  over a block that stays in the CPU cache;
* the **careful path** (:func:`_tilt_careful`): the log-space method, which is the
  array-API kernel of :mod:`klpolicy.core._careful` run with the numpy namespace, the
  same code torch, JAX and CuPy input runs (log1p of an expm1 sum at large beta,
  log-ratios centred on the optimum's mode, mean-centred soft value, greedy and
  reference limits). The fast path is numpy's own specialisation (in place, threaded
  over row blocks), which the array API cannot express.

A row takes the fast path only when that is provably as accurate as the careful
path, as the router of :mod:`klpolicy.core._route` decides from the row's statistics
(here through :func:`_fast_ok` and :func:`_route_rows`; the array-API fast paths ask
the same router): every ``ref * exp(z)`` on the support is a normal float (no
underflow, no subnormal reference entry; for float32 ``pi`` possibly after scaling
``exp(z)`` by an exact power of two, :func:`_pow2`), ``beta`` is finite and positive,
and, when statistics are requested, ``beta`` is small enough (``spread / beta >= 2``)
that the careful path would not use its large-beta refinements either. Every other
row is handed to the careful path.
"""

from __future__ import annotations

import math
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from ._careful import _mode_log_ratio as _careful_mode
from ._careful import _tilt as _careful_tilt
from ._numerics import _SERIES_RADIUS, kl_unit_series
from ._route import _NO_SHIFT, _RANGE, SCALED, fast_rows, fits, shifts, weights_clear
from ._route import pow2 as _pow2
from ._route import route as _routes

# Bytes per array in one row block: the block's reference, reward, output and a
# few scratch arrays stay within a 2 MiB L2 cache.
_BLOCK_BYTES = 1 << 18

ALL = frozenset({"pi", "u", "value", "kl", "mean"})
_PI = frozenset({"pi"})


class _Tilt(NamedTuple):
    """Everything about pi*_beta, with the probability axis last (keepdims).

    Fields that were not requested are ``None``.
    """

    pi: NDArray  # pi*_beta
    u: NDArray  # log(pi*/ref_n) on the support, -inf where pi* = 0 on the support
    value: NDArray  # beta log Z (soft value), keepdims
    kl: NDArray  # KL(pi* || ref), keepdims
    mean: NDArray  # E_pi*[r], keepdims
    var: NDArray | None = None  # E_pi*[((r - mean) / beta)^2] = Var_pi*(r) / beta^2, keepdims


def _numpy_namespace():
    """The array-API namespace of numpy: numpy itself from numpy 2 (its main namespace
    follows the standard, and the kernel's calls then cost no wrapper), else
    array-api-compat's, imported on first use (``import klpolicy`` does not)."""
    if _NUMPY_2:
        return np
    import array_api_compat.numpy as xnp

    return xnp


_NUMPY_2 = int(np.__version__.split(".")[0]) >= 2


def _tilt_careful(ref: NDArray, reward: NDArray, beta: NDArray, want=ALL) -> _Tilt:
    """pi*_beta and its statistics by the careful method (probability axis last).

    The array-API kernel of :mod:`klpolicy.core._careful` with the numpy namespace: the
    one careful method of every array library. ``beta`` has shape (..., 1) broadcasting
    against ``ref``; it may contain 0 (greedy limit) and inf (reference) alongside finite
    positive values. Fields not in ``want`` are ``None``.
    """
    want = frozenset(want)
    shape = np.broadcast_shapes(ref.shape, reward.shape, beta.shape[:-1] + (1,))
    b = np.broadcast_to(beta.astype(ref.dtype, copy=False), shape[:-1] + (1,))
    out = _careful_tilt(
        _numpy_namespace(), np.broadcast_to(ref, shape), np.broadcast_to(reward, shape), b, want
    )
    return _Tilt(**{k: (out[k] if k in want else None) for k in _Tilt._fields})


def _mode_log_ratio(q: NDArray, r: NDArray, beta: NDArray, total: NDArray, pi: NDArray):
    """``u = log(pi*/ref_n)`` centred on each row's mode, 0 off the support: the careful
    kernel's :func:`klpolicy.core._careful._mode_log_ratio` with the numpy namespace.
    ``q``, ``r``, ``pi``: (rows, n); ``beta`` and ``total``: (rows, 1)."""
    with np.errstate(all="ignore"):
        return _careful_mode(_numpy_namespace(), q, r, beta, total, pi, q > 0)[0]


# --------------------------------------------------------------------------- fast path


def _rows_per_block(n: int, itemsize: int) -> int:
    return max(1, _BLOCK_BYTES // max(1, n * itemsize))


# Scratch buffers (flat, by name and dtype) are kept per thread between calls up to this
# size: a fresh block-sized buffer costs page faults on every call (the allocator hands
# freed megabytes back to the system), which dominated calls on small batches.
_KEEP_BYTES = 4 << 20
_LOCAL = threading.local()


def _scratch() -> dict:
    """This thread's scratch buffers."""
    try:
        return _LOCAL.scratch
    except AttributeError:
        _LOCAL.scratch = {}
        return _LOCAL.scratch


def _buffer(scratch: dict, name: str, dtype, k: int, n: int) -> NDArray:
    """A (k, n) scratch array of ``dtype`` named ``name``, reused from ``scratch``."""
    key = (name, np.dtype(dtype).char)
    b = scratch.get(key)
    if b is None or b.size < k * n:
        b = scratch[key] = np.empty(k * n, dtype)
    return b[: k * n].reshape(k, n)


def _row_sums(q: NDArray, out: NDArray) -> NDArray:
    """Row sums of a 2-D array into ``out`` for the input check only: einsum's
    vectorised sequential sum, faster than numpy's pairwise ``sum`` (1.6x in float64,
    2.6x in float32) and single-threaded (a BLAS product with ones may start threads)."""
    return np.einsum("ij->i", q, out=out)


def _trim(scratch: dict) -> None:
    """Let go of the scratch buffers larger than ``_KEEP_BYTES`` (very long rows)."""
    for key in [key for key, b in scratch.items() if b.nbytes > _KEEP_BYTES]:
        del scratch[key]


class _Sweep:
    """Per-row reductions and fast-path results of one sweep over the row blocks.

    ``ok``: rows whose sweep result is final (provably as accurate as the careful path);
    the others are the careful path's.
    """

    def __init__(self, rows: int, dtype):
        self.qmin, self.total, self.rmax, self.rmin, self.c, self.w_sum = np.empty((6, rows), dtype)
        self.ok = np.empty(rows, bool)
        # rows the float64 pi-only sweep accepted from their weights alone (_quick_rows):
        # their qmin, rmax, rmin are not computed (NaN) and c is 0 (no shift)
        self.quick = np.zeros(rows, bool)


def _set_shift(rmax, rmin, ib, c, itemsize: int) -> bool:
    """``c = max(r)`` on rows where ``max |r| / beta`` exceeds ``_NO_SHIFT``, else 0 (an
    exact no-op, which saves a pass); NaN rows shift too (they are redone or refused).
    Returns whether any row shifts."""
    if rmax.shape[0] == 1 and itemsize == 8:  # one long row per block: Python floats, same IEEE
        hi, lo = float(rmax[0]), float(rmin[0])  # arithmetic, a tenth of the numpy calls' time
        shift = not max(abs(hi), abs(lo)) * float(ib[0]) <= _NO_SHIFT[8] or lo != lo  # shifts
        c[0] = hi if shift else 0.0
        return shift
    shift = shifts(np, rmax, rmin, ib, itemsize)
    c[...] = 0
    np.copyto(c, rmax, where=shift)
    return bool(shift.any())


def _sweep(ref, reward, ib, want, pi_out, res, ib64=None, scratch=None, pre=None, route=True):
    """One pass over row blocks: the validators' reductions and the fast path.

    For every row, whatever its values: ``w = ref * exp((r - c) * ib)`` with
    ``c = max(r)`` when ``|r| / beta`` exceeds a few tens (else ``c = 0``, an
    exact no-op), ``pi = w / sum(w)`` and the requested statistics. Each block is
    read from memory once and stays in cache; rows with invalid values make the
    caller raise (from the reductions, :func:`_valid`), and ``ok`` marks the rows
    whose result is final (:func:`_fast_ok`, and for the soft value
    :func:`_value_resolved`); the caller recomputes the others by the careful path.

    float64 blocks are computed optimistically, ``r / beta`` first: the reads of
    ``r`` and ``ref`` from memory then overlap the first write of the output and the
    multiplication by ``ref``, instead of costing reductions of their own; the
    reductions follow on the cached block, and a row whose ``max |r| / beta`` asks
    for a shift is rescaled from the cached ``r``. float32 blocks (``ib64``, the
    float64 ``1 / beta``, given) are routed per block: a row whose range ``r / beta``
    lies beyond float32's exponent range (:func:`_fast_ok` with float32's bounds) is
    computed in float64 on the cached block and rounded once (:func:`_wide_rows`),
    and a row whose float32 soft value is not resolved likewise; without statistics,
    a row whose weights only fall below float32's normal range stays in float32, its
    block's exponentials scaled by an exact power of two (:func:`_pow2`). After a
    block with such rows, the next is routed from its reductions before any float32
    exponential (a batch of wide rows computes no float32 result to throw away);
    after a block without, optimistically as float64's (rows of such a block that
    needed the scaling are redone in float32 at the end). The order changes no bit
    of the results. ``pre``: the rows' minima of ``ref`` and extrema of ``reward``, already
    known (such float64 rows are not re-reduced); ``route=False`` leaves ``ok`` to the
    caller (the wide rows of a float32 sweep are routed together at its end).
    """
    rows = ref.shape[0]
    outer = scratch is None
    plan = _SweepPlan(
        ref, reward, ib, want, pi_out, res, ib64, _scratch() if outer else scratch, pre
    )
    sw = _Sweep(rows, plan.dtype)
    step = _rows_per_block(plan.n, plan.dtype.itemsize)
    if pre is not None:
        sw.qmin[...], sw.rmax[...], sw.rmin[...] = pre
    beta_ok = (ib > 0) & (ib < np.inf) if plan.quick else None
    if plan.quick:  # only the rows _quick_rows does not accept get these reductions
        sw.qmin[...] = sw.rmax[...] = sw.rmin[...] = np.nan
    ahead = False  # float32: route this block before its exponentials (the last needed float64)
    for start in range(0, rows, step):
        s = slice(start, min(start + step, rows))
        ahead = _sweep_block(plan, sw, s, ahead, beta_ok)
    later = ~plan.done if plan.routed else slice(None)
    if plan.quick and route:  # the rows their weights did not clear, by the router
        sw.ok[...] = sw.quick
        rest = np.nonzero(~sw.quick)[0]
        if rest.size:
            sw.ok[rest] = _fast_ok(ref, reward, ib[rest], sw, False, s=rest, at=rest)
    elif route and (not plan.routed or later.any()):
        ok = _fast_ok(ref, reward, ib, sw, plan.stats)
        if "value" in res:
            ok &= _value_resolved(res["value"][:, 0], sw.c, ib)
        sw.ok[later] = ok[later]
    if plan.routed:
        _route_wide_rows(plan, sw, later)
    if outer:
        _trim(plan.scratch)
    return sw


class _SweepPlan:
    """What one :func:`_sweep` computes and how, the same for every block: its inputs and
    outputs, whether it computes statistics, routes float32 rows (``routed``) or takes the
    float64 pi-only quick path (``quick``), and the float32 rows already routed."""

    def __init__(self, ref, reward, ib, want, pi_out, res, ib64, scratch, pre) -> None:
        self.ref, self.reward, self.ib, self.ib64 = ref, reward, ib, ib64
        self.want, self.pi_out, self.res, self.scratch, self.pre = want, pi_out, res, scratch, pre
        rows, self.n = ref.shape
        self.dtype = ref.dtype
        self.stats = bool(len(res))
        self.routed = self.dtype.itemsize == 4 and ib64 is not None
        self.need_z = "kl" in want or "u" in want
        self.done = np.zeros(rows, bool) if self.routed else None  # float32 rows routed
        self.wide64 = _Wide(rows, "value" in res) if self.routed else None
        self.quick = not self.stats and pre is None and not self.routed and self.dtype.itemsize == 8

    def buf(self, name, k):
        """A scratch block of ``k`` rows of the sweep's width and dtype."""
        return _buffer(self.scratch, name, self.dtype, k, self.n)


def _sweep_block(plan: _SweepPlan, sw: _Sweep, s: slice, ahead: bool, beta_ok) -> bool:
    """One block of rows ``s``: its exponents, weights, pi and statistics (and for float32,
    its wide rows). Returns whether the next block is routed ahead of its exponentials."""
    q, r, ibs = plan.ref[s], plan.reward[s], plan.ib[s]
    k = q.shape[0]
    w = plan.pi_out[s] if plan.pi_out is not None else plan.buf("w", k)
    z = plan.buf("z", k) if plan.need_z else w
    # one beta for the block (the usual case): a scalar factor takes numpy's vector loop,
    # a (k, 1) column a strided one about three times slower
    ibc = ibs[0] if k == 1 or (ibs == ibs[0]).all() else ibs[:, None]
    if plan.quick:
        _quick_rows(q, r, ibs, ibc, w, sw, s, beta_ok[s])
        return ahead
    qmin, total, rmax, rmin, c = sw.qmin[s], sw.total[s], sw.rmax[s], sw.rmin[s], sw.c[s]
    reduced = ahead or plan.pre is not None
    ok, two = _block_exponents(plan, sw, s, q, r, ibs, ibc, z, reduced, (qmin, rmax, rmin, c))
    if ok is None or ok.any():
        _block_weights(plan, sw, s, q, r, ibs, w, z, two, reduced, (qmin, total, rmax, rmin, c))
    else:
        q.sum(axis=-1, out=total)
    if ok is not None:  # routed ahead: the block's wide rows now, from the cache
        if "value" in plan.res:
            ok &= _value_resolved(plan.res["value"][s, 0], c, ibs)
        wide = np.nonzero(~ok)[0]
        if wide.size:
            _wide_rows(
                q, r, plan.ib64[s], wide, plan.want, w, plan.res, s, plan.scratch, sw, s,
                plan.wide64,
            )  # fmt: skip
        sw.ok[s] = ok
        plan.done[s] = True
        return bool(wide.size) or two is not None  # the next block likely alike
    if plan.routed:  # a hint, no route: the underflow half of the router's fits decides
        # how to take the next block (the order changes no bit)
        return not bool((np.log(qmin) + (rmin - c) * ibs > _RANGE[4][0]).all())
    return ahead


def _block_exponents(plan: _SweepPlan, sw, s, q, r, ibs, ibc, z, reduced, views):
    """``z = (r - c) * ib`` for one block, with its shift ``c`` (:func:`_set_shift`).

    float64 (and a float32 block not routed ahead) optimistically, ``r / beta`` first,
    the reductions after; a block routed ahead (``reduced``) from its reductions first,
    and for float32 the rows' route (``ok``: the rows float32 holds, :func:`_fast_ok`,
    their exponentials scaled by ``two`` where only that makes them fit, :func:`_pow2`).
    Returns ``(ok, two)``: ``(None, None)`` where the block is not routed here.
    """
    qmin, rmax, rmin, c = views
    itemsize = plan.dtype.itemsize
    if not reduced:
        np.multiply(r, ibc, out=z)  # reads r while the output is first written
        r.max(axis=-1, out=rmax)
        r.min(axis=-1, out=rmin)
        if _set_shift(rmax, rmin, ibs, c, itemsize):
            _by_rows(np.subtract, r, c, z)
            np.multiply(z, ibc, out=z)
        return None, None
    ok = two = None
    if plan.pre is None:
        q.min(axis=-1, out=qmin)
        r.max(axis=-1, out=rmax)
        r.min(axis=-1, out=rmin)
    shifted = _set_shift(rmax, rmin, ibs, c, itemsize)
    if plan.routed:
        ok = _fast_ok(q, r, ibs, sw, plan.stats, s)
        if not plan.stats and not ok.all():  # pi only: float32 scales weights it cannot hold
            scaled = _fast_ok(q, r, ibs, sw, plan.stats, s, scale=_pow2(plan.n)[0])
            if (scaled & ~ok).any():
                ok, two = scaled, _pow2(plan.n)[1]
    if ok is not None and not ok.any():
        pass
    elif shifted:
        _by_rows(np.subtract, r, c, z)
        np.multiply(z, ibc, out=z)
    else:
        np.multiply(r, ibc, out=z)
    return ok, two


def _block_weights(plan: _SweepPlan, sw, s, q, r, ibs, w, z, two, reduced, views) -> None:
    """``w = ref * exp(z)`` (times ``two``, exact), normalised to ``pi`` in place, with the
    row sums the validators check and the requested statistics (:func:`_block_stats`)."""
    qmin, total, rmax, rmin, c = views
    np.exp(z, out=w)
    if two is not None:  # exact (see _pow2)
        np.multiply(w, two, out=w)
    np.multiply(w, q, out=w)  # reads ref
    if not reduced:
        q.min(axis=-1, out=qmin)
    if plan.stats:  # the statistics divide by the sums: pairwise, as the careful path
        q.sum(axis=-1, out=total)
    elif plan.pre is None:  # only checked (with ``pre``, by the caller): see _valid
        _row_sums(q, total)
    w_sum = w.sum(axis=-1, out=sw.w_sum[s])
    _normalise_block(w, w_sum)  # w is now pi
    if plan.stats:
        _block_stats(q, r, c, ibs, total, w_sum, w, z, s, plan.res, plan.buf, rmin, rmax)


def _route_wide_rows(plan: _SweepPlan, sw: _Sweep, later) -> None:
    """The float32 rows of blocks computed optimistically that float32 does not hold:
    pi-only rows whose weights fit once scaled by a power of two stay float32
    (:func:`_lean_pi`), the others are computed in float64 (:func:`_wide_rows`); then
    every row computed in float64 is routed by float64's conditions, all at once."""
    ref, reward, ib, ib64, res = plan.ref, plan.reward, plan.ib, plan.ib64, plan.res
    pi_out, n = plan.pi_out, plan.n
    wide = np.nonzero(~sw.ok & later)[0]
    if wide.size and not plan.stats and pi_out is not None:  # pi only: these, weights scaled
        two = _pow2(n)[1]
        fit = wide[_route_rows(ref, reward, ib[wide], sw, False, wide, wide) == SCALED]
        if fit.size:
            out = _buffer(plan.scratch, "fit", plan.dtype, fit.size, n)
            pi_out[fit] = _lean_pi(ref[fit], reward[fit], ib[fit, None], sw.c[fit], out, two)
            sw.ok[fit] = True
            wide = np.setdiff1d(wide, fit, assume_unique=True)
    if wide.size:
        every = slice(None)
        _wide_rows(
            ref, reward, ib64, wide, plan.want, pi_out, res, every, plan.scratch, sw, every,
            plan.wide64,
        )  # fmt: skip
    # the rows computed in float64, routed by float64's conditions, all at once
    wide64 = plan.wide64
    at = np.nonzero(wide64.went)[0]
    if at.size:
        red = _Wide.reductions(sw, at, wide64.c[at])
        ok = _fast_ok(ref, reward, ib64[at], red, plan.stats, at=at, itemsize=8)
        if "value" in res:
            ok &= _value_resolved(wide64.value[at], wide64.c[at], ib64[at])
        sw.ok[at] = ok


def _quick_rows(q, r, ib, ibc, w, sw: _Sweep, s, beta_ok) -> None:
    """One block of a float64 pi-only sweep: ``pi = w / sum(w)``, ``w = q exp(r / beta)``
    unshifted, each row accepted from its own weights (``sw.quick``).

    A row is accepted when every weight is a normal float (``min w >= tiny``) and their
    sum is finite, with ``0 < 1/beta < inf``. That one test stands for the general
    conditions (:func:`_fast_ok`, :func:`_valid`): it fails on a NaN or an infinity
    anywhere in the row (a NaN or an infinite weight, or a zero from ``r = -inf``), on a
    negative or zero reference entry (a negative or zero weight) and on an overflow
    (an infinite sum). It also bounds the exponent: ``min w >= tiny`` with ``ref <= 1``
    gives ``r / beta >= log(tiny) = -708.4`` and a finite ``exp`` gives ``r / beta <
    709.8``; the rounding of ``r / beta`` then moves each weight by at most
    ``|r / beta| u`` relative (``u = 2^-53``) and ``pi`` by twice that, 1.6e-13, the same
    bound as the shifted path admits on its far entries (``|r - max r| / beta`` up to
    708 where the weights are normal), so no shift by ``max r`` is needed and no pass
    over ``r`` or ``ref`` beyond the arithmetic and the row sum of ``ref`` (the input
    check, :func:`_valid`) is made. Rows not accepted get the general sweep's
    reductions on the cached block, its shift rule (:func:`_set_shift`) and, at the
    sweep's end, its routing (:func:`_fast_ok`); a row that needs no shift keeps the
    weights already computed (the same bits).
    """
    k = q.shape[0]
    np.multiply(r, ibc, out=w)  # reads r while the output is first written
    np.exp(w, out=w)
    np.multiply(w, q, out=w)  # reads ref
    _row_sums(q, sw.total[s])  # only checked (see _valid)
    w_min = w.min(axis=-1)
    w_sum = w.sum(axis=-1, out=sw.w_sum[s])
    if k == 1:  # Python floats: the same IEEE comparisons, a tenth of the numpy calls' time
        good = bool(weights_clear(float(w_min[0]), float(w_sum[0]))) and bool(beta_ok[0])
        sw.quick[s.start] = good
        sw.c[s.start] = 0.0
        bad = () if good else (0,)
    else:
        good = weights_clear(w_min, w_sum) & beta_ok
        sw.quick[s] = good
        sw.c[s] = 0.0
        bad = np.nonzero(~good)[0]
    for i in bad:
        at = slice(s.start + i, s.start + i + 1)
        qi, ri, wi = q[i], r[i], w[i]
        sw.qmin[at], sw.rmax[at], sw.rmin[at] = qi.min(), ri.max(), ri.min()
        if _set_shift(sw.rmax[at], sw.rmin[at], ib[i : i + 1], sw.c[at], 8):
            np.subtract(ri, sw.c[at], out=wi)
            np.multiply(wi, ib[i], out=wi)
            np.exp(wi, out=wi)
            np.multiply(wi, qi, out=wi)
            sw.w_sum[at] = wi.sum()
    _normalise_block(w, w_sum)  # w is now pi


def _normalise_block(w: NDArray, w_sum: NDArray) -> None:
    """``w = w * (1 / w_sum)`` row by row, in place: by a scalar for a one-row block
    (numpy's vector loop), else by :func:`_by_rows`; the same bits either way."""
    if w.shape[0] == 1:
        np.multiply(w, 1 / w_sum[0], out=w)
    else:
        _by_rows(np.multiply, w, 1 / w_sum, w)


class _Wide:
    """The float32 rows a sweep computed in float64: their float64 shift and soft value,
    for routing them together at the sweep's end."""

    def __init__(self, rows: int, value: bool):
        self.went = np.zeros(rows, bool)
        self.c = np.empty(rows)
        self.value = np.empty(rows) if value else None

    @staticmethod
    def reductions(sw, at, c):
        """The rows ``at`` of the float32 sweep's reductions, in float64 (exactly)."""
        red = _Sweep(0, np.float64)
        red.qmin, red.rmin, red.rmax = (
            getattr(sw, f)[at].astype(np.float64) for f in ("qmin", "rmin", "rmax")
        )
        red.c = c
        return red


def _wide_rows(q, r, ib64, wide, want, w, res, s, scratch, sw, sb, into: _Wide) -> None:
    """The float32 block's rows ``wide`` by float64's sweep on the cached block, rounded
    once into the float32 outputs; their float64 shift and value go to ``into`` (routed
    at the sweep's end). ``sw``, ``sb``: the float32 sweep and the block's slice of it
    (its reductions are exact in float64)."""
    k, n = wide.size, q.shape[1]
    every = k == q.shape[0]
    q64, r64 = _buffer(scratch, "q", np.float64, k, n), _buffer(scratch, "r", np.float64, k, n)
    np.copyto(q64, q if every else q[wide])
    np.copyto(r64, r if every else r[wide])
    pi64 = _buffer(scratch, "pi", np.float64, k, n) if "pi" in want else None
    sub = {name: _buffer(scratch, name, np.float64, k, n if name == "u" else 1) for name in res}
    pick = slice(None) if every else wide
    pre = tuple(getattr(sw, f)[sb][pick] for f in ("qmin", "rmax", "rmin"))
    sw64 = _sweep(q64, r64, ib64[pick], want, pi64, sub, scratch=scratch, pre=pre, route=False)
    if pi64 is not None:
        if every:
            np.copyto(w, pi64, casting="same_kind")
        else:
            w[wide] = pi64
    for name, out in sub.items():
        res[name][s][pick] = out
    at = np.arange(sb.start or 0, (sb.start or 0) + q.shape[0])[pick]  # rows of the sweep
    into.went[at] = True
    into.c[at] = sw64.c
    if into.value is not None:
        into.value[at] = sub["value"][:, 0]


def _block_stats(q, r, c, ib, total, w_sum, pi, z, s, res, buf, rmin, rmax):
    """Soft value, mean, KL and variance of the fast rows of one block."""
    k = q.shape[0]
    log_z = np.log(w_sum / total)  # log of sum(ref_n exp(z))
    if "value" in res:
        res["value"][s, 0] = c + log_z / ib
    mean = None
    t = buf("t", k)
    if "mean" in res or "var" in res:
        np.multiply(pi, r, out=t)
        mean = t.sum(axis=-1)
        if "mean" in res:
            res["mean"][s, 0] = mean
    if "kl" in res or "u" in res:
        np.subtract(z, log_z[:, None], out=z)  # u = log(pi / ref_n)
    if "kl" in res:
        qn = buf("qn", k)
        np.multiply(q, (1 / total)[:, None], out=qn)
        # the careful path's non-negative summands: pi (u - 1) + ref_n, series for |u| < 0.2
        np.subtract(z, 1, out=t)
        np.multiply(t, pi, out=t)
        np.add(t, qn, out=t)
        kl = t.sum(axis=-1)
        # Each summand carries an absolute error of about eps * ref_n * (3 + |z| + |log Z|)
        # (the rounding of u = z - log Z), whichever form evaluates it; the series for
        # |u| < 0.2 only removes the cancellation in pi (u - 1) + ref_n, worth at most
        # eps * ref_n * 3 per summand. Rows whose KL dwarfs that (relative 64 eps) skip it.
        zmax = np.maximum(np.abs((rmin - c) * ib), np.abs((rmax - c) * ib))
        scale = 4 + zmax + np.abs(log_z)
        need = np.nonzero(kl * 64 < scale)[0]
        # The rounding of u itself, eps * scale per entry, moves the KL by about
        # eps * scale * sqrt(2 KL) (first order) and (eps * scale)^2 (second order): where
        # that is not below 1e-14 KL, u is recomputed relative to the row's mode, whose own
        # log-ratio is then exact (a reference of 1 - 1e-33 gives KLs of 1e-34).
        recentre = need[kl[need] < 1e-4 * scale[need] ** 2]
        if recentre.size:  # one call of the careful kernel for the block's rows concerned
            z[recentre] = _mode_log_ratio(
                q[recentre],
                r[recentre],
                1 / ib[recentre, None],
                total[recentre, None],
                pi[recentre],
            )
            t[recentre] = (z[recentre] - 1) * pi[recentre] + qn[recentre]
        for i in need:
            _series_where_small(t[i], qn[i], z[i], buf("m", 1)[0])
            kl[i] = t[i].sum()
        res["kl"][s, 0] = kl
    if "u" in res:
        res["u"][s] = np.where(q > 0, z, -np.inf)
    if "var" in res:
        np.subtract(r, mean[:, None], out=t)
        np.multiply(t, ib[:, None], out=t)
        np.multiply(t, t, out=t)
        np.multiply(t, pi, out=t)
        res["var"][s, 0] = t.sum(axis=-1)


def _series_where_small(terms: NDArray, qn: NDArray, u: NDArray, scratch: NDArray) -> None:
    """``terms = qn * kl_unit(u)`` by the series where ``|u| < 0.2``, in place.

    Only the (usually few) entries concerned are gathered, as flat boolean
    selections of the block.
    """
    np.abs(u, out=scratch)
    small = np.less(scratch, _SERIES_RADIUS).reshape(-1)
    if small.any():
        u_s = u.reshape(-1)[small]
        terms.reshape(-1)[small] = qn.reshape(-1)[small] * kl_unit_series(u_s)


def normalise_workers(workers) -> int:
    """scipy.fft's convention: ``None`` or 1 is one thread, ``-1`` every core, ``-k`` all but k-1."""
    if workers is None:
        return 1
    if isinstance(workers, bool) or not isinstance(workers, (int, np.integer)) or workers == 0:
        raise ValueError(f"`workers` must be a non-zero integer (-1: every core); got {workers!r}")
    workers = int(workers)
    if workers < 0:
        workers += (os.cpu_count() or 1) + 1
        if workers < 1:
            raise ValueError(
                f"`workers` = {workers - (os.cpu_count() or 1) - 1} asks for fewer than one "
                f"thread on this machine of {os.cpu_count()} cores"
            )
    return workers


_POOLS: dict = {}


def _pool(workers: int) -> ThreadPoolExecutor:
    """One lazily created thread pool per worker count, reused across calls."""
    if workers not in _POOLS:
        _POOLS[workers] = ThreadPoolExecutor(workers, thread_name_prefix="klpolicy")
    return _POOLS[workers]


# Tasks per thread in a parallel sweep: the pool hands out small row chunks as threads
# free up, so a core slowed by another process (a shared VM) does not hold up the rest.
_TASKS_PER_WORKER = 8
# Row blocks (of _BLOCK_BYTES per array) each thread must have before a sweep uses it:
# below that, handing out chunks and joining them costs more than the thread saves.
# Measured with benchmarks/core_bench.py's crossover table on 2 shared cores: threads
# pay off from about 32 blocks (a (256, 4096) float64 or (512, 4096) float32 batch,
# 8 MiB per array), and cost up to several times workers=1 below; 16 per thread keeps
# every smaller batch on one thread.
_MIN_BLOCKS_PER_THREAD = 16


def _threads(workers: int, blocks: int) -> int:
    """Threads for a sweep of ``blocks`` row blocks: at most ``workers``, one per
    ``_MIN_BLOCKS_PER_THREAD`` blocks, at least one."""
    return max(1, min(workers, blocks // _MIN_BLOCKS_PER_THREAD))


def _parallel_sweep(ref, reward, ib, want, pi_out, res, workers: int, ib64=None) -> _Sweep:
    """:func:`_sweep` over row chunks on a thread pool (numpy's ufuncs release the GIL).

    Each chunk is a whole number of cache blocks, so every thread runs exactly the
    single-threaded sweep on its rows, and the results are the same to the bit.
    ``workers`` is an upper bound: a batch gets one thread per ``_MIN_BLOCKS_PER_THREAD``
    row blocks, so a small batch runs on the calling thread as with ``workers=1``.
    The rows are cut into about ``_TASKS_PER_WORKER`` chunks per thread, taken by
    whichever thread is free (a static split in halves waits for the slower core).
    """
    rows, n = ref.shape
    step = _rows_per_block(n, ref.dtype.itemsize)
    blocks = -(-rows // step)
    workers = _threads(workers, blocks)
    if workers <= 1:
        return _sweep(ref, reward, ib, want, pi_out, res, ib64)
    per = -(-blocks // (workers * _TASKS_PER_WORKER)) * step
    bounds = [(a, min(a + per, rows)) for a in range(0, rows, per)]

    state = np.geterr()  # numpy's error state is per thread: carry the caller's over

    def run(bound):
        a, b = bound
        sub = {k: v[a:b] for k, v in res.items()}
        out = None if pi_out is None else pi_out[a:b]
        with np.errstate(**state):
            return _sweep(
                ref[a:b], reward[a:b], ib[a:b], want, out, sub, None if ib64 is None else ib64[a:b]
            )

    parts = list(_pool(workers).map(run, bounds))
    sw = _Sweep(0, ref.dtype)
    for name in ("qmin", "total", "rmax", "rmin", "c", "w_sum", "ok", "quick"):
        setattr(sw, name, np.concatenate([getattr(p, name) for p in parts]))
    return sw


def _support(ref, reward, sw: _Sweep, s=slice(None), at=None):
    """The router's row statistics from the sweep's reductions: ``(qpos, r_lo, r_hi, rmin,
    rmax)``, the smallest reference entry and the extreme rewards on the support, then
    over every entry (the same arrays for rows without a zero in the reference).

    ``ref``, ``reward``: the rows (a block of the sweep, or all of them); ``s``: their
    slice of the sweep's reductions ``sw``; or ``at``, the indices of the rows of ``ref``
    and ``reward`` that ``sw`` holds.
    """
    qmin, rmin, rmax = sw.qmin[s], sw.rmin[s], sw.rmax[s]
    qpos, r_lo, r_hi = qmin, rmin, rmax
    zero = np.nonzero(qmin == 0)[0]
    if zero.size:  # rows with zeros: smallest entry, smallest and best reward on the support
        qpos, r_lo, r_hi = qmin.copy(), rmin.copy(), rmax.copy()
        rows = zero if at is None else at[zero]
        qz, rz = ref[rows], reward[rows]
        sup = qz > 0
        qpos[zero] = np.min(np.where(sup, qz, np.inf), axis=-1)
        r_lo[zero] = np.min(np.where(sup, rz, np.inf), axis=-1)
        r_hi[zero] = np.max(np.where(sup, rz, -np.inf), axis=-1)
    return qpos, r_lo, r_hi, rmin, rmax


def _fast_ok(
    ref, reward, ib, sw: _Sweep, stats: bool, s=slice(None), at=None, itemsize=None, scale=0.0
) -> NDArray[np.bool_]:
    """Rows where the sweep's one-exp result, shifted by ``sw.c``, is provably as accurate
    as the careful path: the router's :func:`klpolicy.core._route.fast_rows` (its
    conditions there) on the sweep's reductions.

    ``ref``, ``reward``, ``s``, ``at``: as :func:`_support`; ``ib``: the rows' ``1 / beta``;
    ``itemsize``: the bounds' dtype (default ``ref``'s); ``scale``: ``k ln 2`` of a factor
    ``2**k`` the weights are scaled by, as ``(exp(z) * 2**k) * ref`` (:func:`_pow2`;
    float32, ``pi`` only). Run under ``np.errstate(all="ignore")`` (the sweep is): invalid
    rows give NaN, and fail.
    """
    size = itemsize or ref.dtype.itemsize
    rows = _support(ref, reward, sw, s, at)
    return fast_rows(np, *rows, sw.c[s], ib, ref.shape[-1], size, stats, scale)


def _route_rows(ref, reward, ib, sw: _Sweep, stats: bool, s=slice(None), at=None, itemsize=None):
    """Each row's route (:func:`klpolicy.core._route.route`) from the sweep's reductions;
    the arguments are :func:`_fast_ok`'s. The router's shift of each row is the sweep's
    own (``sw.c``, set by :func:`_set_shift` from the same test)."""
    size = itemsize or ref.dtype.itemsize
    return _routes(np, *_support(ref, reward, sw, s, at), ib, ref.shape[-1], size, stats)


# A fast row's soft value is kept when its estimated rounding is below this many ulp of it
# (1.4e-14 relative in float64).
_VALUE_ULPS = 64.0


def _value_resolved(value: NDArray, c: NDArray, ib: NDArray) -> NDArray[np.bool_]:
    """Rows whose fast soft value ``c + log(sum w / total) / ib`` is exact to ``_VALUE_ULPS``.

    Its rounding is a few ulp of ``|c|``, of ``|V - c| = beta |log Z|`` and of ``beta``
    (the sum of the weights is exact to a few ulp, so ``log Z`` to a few units of
    ``eps`` absolute). Where that is not small against ``|V|`` (V near 0: a reference
    nearly all on one reward and rare better alternatives, ``V = 2.7e-59`` for
    ``ref = (1e-100, 1)``, ``r = (1, 0)``, ``beta = 0.01``), the row is left to the
    careful path, which anchors V on the mode of pi*. The test is in units of the
    dtype's own ulp, so float32 rows are held to float32's precision.

    Written with operators only, so that the array-API fast path
    (:func:`klpolicy.core._xp._fast_stats`) applies the same test to tensors.
    """
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scale = abs(c) + abs(value - c) + 4 / ib
        return scale <= _VALUE_ULPS * abs(value)


def _valid(sw: _Sweep, check) -> bool:
    """What the validators check, from the sweep's reductions (NaN fails every comparison)."""
    tol, _, ref = check
    rest = ~sw.quick  # accepted rows: their weights show positive ref and finite rewards
    if not (
        (sw.qmin[rest] >= 0).all()
        and np.isfinite(sw.rmax[rest]).all()
        and np.isfinite(sw.rmin[rest]).all()
    ):
        return False
    dev = np.abs(sw.total - 1.0)
    # the sweep's row sums (in the input's dtype, in any order: a pi-only sweep sums by
    # einsum, sequentially) are within n eps of the validators', a quarter of the
    # tolerance at most; a row beyond half of it is summed in float64 as they do
    if (dev > 0.5 * tol).any():
        with np.errstate(over="ignore"):  # huge entries sum to inf: refused just below
            dev = np.abs(ref.sum(axis=-1, dtype=np.float64) - 1.0)
    return bool((dev <= tol).all())


# A batch of at most this many bytes per array, with one ``beta`` and only ``pi`` asked
# for, is tried by :func:`_lean` first: below that size the general sweep's per-block
# bookkeeping costs more than its passes (a (16, 4096) float64 batch took 8-9x np.exp).
_LEAN_BYTES = 1 << 20


def lean_policy(ref: NDArray, reward: NDArray, beta, check) -> NDArray | None:
    """``pi`` by :func:`_lean` for 1-D or 2-D ``ref`` and ``reward`` of one shape and dtype
    (probability axis last) and one ``beta`` (a scalar of their dtype), or ``None`` where
    the batch is too large for it, not contiguous, or not all for the fast path."""
    if ref.nbytes > _LEAN_BYTES or not (ref.flags.c_contiguous and reward.flags.c_contiguous):
        return None
    n = ref.shape[-1]
    pi = _lean(ref.reshape(-1, n), reward.reshape(-1, n), beta, check)
    return None if pi is None else pi.reshape(ref.shape)


def _lean(ref: NDArray, reward: NDArray, b0, check) -> NDArray | None:
    """``pi`` for a small batch whose rows all take the fast path, else ``None``.

    The sweep's arithmetic for one block holding every row (the same operations in the
    same order, so the same bits as :func:`_sweep`), with its reductions made once on the
    whole batch and its checks decided for all rows before any exponential: first from
    the batch's extrema (:func:`_lean_bounds`, a sufficient condition), else row by row
    (:func:`_valid`, :func:`_set_shift`, :func:`_fast_ok`). float32 rows beyond float32's
    exponent range are computed in float64 and rounded once, as the sweep does. ``None``
    (an invalid value, zero or infinite ``beta`` (one scalar of the dtype), a row for the
    careful path): the caller runs the general sweep, which words the error or routes
    row by row.
    """
    rows, n = ref.shape
    dtype = ref.dtype
    if not 0 < b0 < np.inf:
        return None
    with np.errstate(all="ignore"):
        if dtype == np.float64:
            pi, good = _lean_quick(ref, reward, dtype.type(1 / b0), check)
            if pi is not None or good is None or good.any():
                return pi  # None where some rows pass: the sweep decides row by row
        sw = _Sweep(rows, dtype)
        reward.max(axis=-1, out=sw.rmax)
        reward.min(axis=-1, out=sw.rmin)
        ref.min(axis=-1, out=sw.qmin)
        _row_sums(ref, sw.total)  # only checked (see _valid)
        ib = dtype.type(1 / b0)
        pi = np.empty((rows, n), dtype)
        if dtype.itemsize == 4:  # first: it returns at once where _lean_bounds may hold
            two = _lean_scaled(sw, ib, n, check)
            if two is not None:
                return _lean_pi(ref, reward, ib, sw.c, pi, two or None)
        if _lean_bounds(sw, ib, n, check):
            return _lean_pi(ref, reward, ib, None, pi)
        if check is not None and not _valid(sw, (*check, ref)):
            return None
        ibs = np.full(rows, ib, dtype)
        shifted = _set_shift(sw.rmax, sw.rmin, ibs, sw.c, dtype.itemsize)
        ok = _fast_ok(ref, reward, ibs, sw, False)
        if ok.all():
            return _lean_pi(ref, reward, ib, sw.c if shifted else None, pi)
        if dtype == np.float64:
            return None
        # float32 rows whose weights fall below float32's normal range: scaled by 2**k
        scale, two = _pow2(n)
        ok = _fast_ok(ref, reward, ibs, sw, False, scale=scale)
        if ok.all():
            return _lean_pi(ref, reward, ib, sw.c if shifted else None, pi, two)
        # float32 rows that float32 does not hold: float64's arithmetic, rounded once
        wide = np.nonzero(~ok)[0]
        red = _Wide.reductions(sw, wide, np.empty(wide.size))
        ib64 = np.full(wide.size, 1 / np.float64(b0))
        shifted64 = _set_shift(red.rmax, red.rmin, ib64, red.c, 8)
        if not _fast_ok(ref[wide], reward[wide], ib64, red, False, itemsize=8).all():
            return None
        if wide.size == rows:
            return _lean_pi(ref, reward, ib64[0], red.c if shifted64 else None, pi)
        fit = np.nonzero(ok)[0]
        c = sw.c[fit] if shifted else None
        pi[fit] = _lean_pi(ref[fit], reward[fit], ib, c, np.empty((fit.size, n), dtype), two)
        c = red.c if shifted64 else None
        pi[wide] = _lean_pi(ref[wide], reward[wide], ib64[0], c, np.empty((wide.size, n), dtype))
        return pi


def _lean_quick(ref: NDArray, reward: NDArray, ib, check):
    """The float64 sweep's first try (:func:`_quick_rows`) on a whole small batch.

    Returns ``(pi, good)``: ``pi`` when every row's weights clear the test (the same
    bits as the sweep), else ``None`` with ``good``, the rows that do (``good`` is
    ``None`` where the row sums are off: the sweep words the error). Where no row
    clears it, the sweep would take every row by its general reductions, as
    :func:`_lean` does next.
    """
    rows, n = ref.shape
    if check is not None:
        total = _row_sums(ref, np.empty(rows))
        if not np.abs(total - 1.0).max() <= 0.5 * check[0]:
            return None, None
    w = np.empty((rows, n))
    np.multiply(reward, ib, out=w)
    np.exp(w, out=w)
    np.multiply(w, ref, out=w)
    w_sum = w.sum(axis=-1)
    good = weights_clear(w.min(axis=-1), w_sum)
    if not good.all():
        return None, good
    return _normalise_rows(w, w_sum, w), good


def _lean_bounds(sw: _Sweep, ib, n: int, check) -> bool:
    """Whether the batch's extrema alone show every row valid and fast without a shift.

    A sufficient condition for what :func:`_valid`, :func:`_set_shift` (no row shifts)
    and :func:`_fast_ok` decide row by row, from the smallest reference entry and the
    extreme rewards of the whole batch, in the dtype's arithmetic (whose rounding is
    monotone, so each row's own test passes whenever the batch's does), and row sums
    within half the tolerance.
    """
    size = sw.rmax.dtype.itemsize
    qlo, rlo, rhi = sw.qmin.min(), sw.rmin.min(), sw.rmax.max()
    if not (qlo > 0 and np.isfinite(rlo) and np.isfinite(rhi)):
        return False
    if check is not None and not np.abs(sw.total - 1.0).max() <= 0.5 * check[0]:
        return False
    # the router's tests on one row holding the batch's extremes (beta is finite and
    # positive, the rewards finite: fits is what is left of fast_rows)
    if shifts(np, rhi, rlo, ib, size):
        return False
    return bool(fits(np, qlo, rlo * ib, rhi * ib, math.log(n), size))


def _lean_scaled(sw: _Sweep, ib, n: int, check):
    """float32: whether the batch's extrema alone show every row valid and fast once
    shifted by its own ``max r`` and its weights scaled by :func:`_pow2`'s ``2**k``.

    :func:`_lean_bounds`' sufficient condition for the batches it leaves (``|r| / beta``
    past ``_NO_SHIFT`` on every row: ``beta = 0.1`` and standard-normal rewards), in the
    same float32 arithmetic as :func:`_set_shift` and :func:`_fast_ok`'s (monotone,
    so each row's own test passes whenever the batch's does). Returns ``None`` (not
    shown), else the factor ``2**k``, or ``False`` where every weight is normal
    unscaled (the scaling pass is skipped: it changes no bit); ``sw.c`` is then set.
    Every row shifts (:func:`_set_shift`: ``max(|max r|, |min r|) / beta`` past
    ``_NO_SHIFT``) where the smallest row maximum, or the largest row minimum, is that
    far from 0; the first row is looked at before anything else, so that a batch
    :func:`_lean_bounds` may take costs next to nothing here.
    """
    far = _NO_SHIFT[4]
    if not (abs(sw.rmax[0]) * ib > far or abs(sw.rmin[0]) * ib > far):
        return None
    if not (sw.rmax.min() * ib > far or -(sw.rmin.max() * ib) > far):
        return None
    qlo = sw.qmin.min()
    if not qlo > math.exp(_RANGE[4][0]):  # no zero and no subnormal reference entry (fits)
        return None
    if check is not None and not np.abs(sw.total - 1.0).max() <= 0.5 * check[0]:
        return None
    scale, two = _pow2(n)
    lo = np.subtract(sw.rmin, sw.rmax, out=sw.c)
    lo *= ib
    lo_min = lo.min()  # NaN and inf rewards: NaN or -inf, refused
    # the router's tests on one row holding the batch's extremes, shifted: z in [lo_min, 0]
    if not fits(np, qlo, lo_min, 0.0, math.log(n), 4, scale):
        return None
    np.copyto(sw.c, sw.rmax)
    return False if fits(np, qlo, lo_min, 0.0, math.log(n), 4) else two


def _lean_pi(q: NDArray, r: NDArray, ib, c: NDArray | None, out: NDArray, two=None) -> NDArray:
    """``pi = w / sum(w)``, ``w = q exp((r - c) ib)`` (``c`` None: no shift; ``two``: a power
    of two ``exp`` is scaled by, see :func:`_pow2`) into ``out``, as the sweep computes it,
    in the dtype of ``ib`` (a scalar, or a column of per-row factors; float64 for float32 rows that
    float32 does not hold: the ufuncs then widen ``q`` and ``r`` as they read them, and
    the last one rounds ``pi`` once into ``out``). The per-row shift and normalisation
    go through :func:`_by_rows`."""
    dtype = np.result_type(ib)
    w = out if dtype == out.dtype else _buffer(_scratch(), "w", dtype, *out.shape)
    if c is None:
        np.multiply(r, ib, out=w)
    else:
        _by_rows(np.subtract, r, c, w)
        np.multiply(w, ib, out=w)
    np.exp(w, out=w)
    if two is not None:
        np.multiply(w, two, out=w)
    np.multiply(w, q, out=w)
    return _normalise_rows(w, w.sum(axis=-1), out)


def _normalise_rows(w: NDArray, w_sum: NDArray, out: NDArray) -> NDArray:
    """``out = w / w_sum`` row by row (as ``w * (1 / w_sum)``, the sweep's arithmetic),
    rounded once into ``out``'s dtype, by :func:`_by_rows`."""
    return _by_rows(np.multiply, w, 1 / w_sum, out)


# numpy's default ufunc buffer (elements), and the size from which _by_rows resizes it.
_NUMPY_BUFSIZE = 8192
_BY_ROWS_MIN = 1 << 14


def _by_rows(ufunc, a: NDArray, col: NDArray, out: NDArray) -> NDArray:
    """``ufunc(a, col[:, None], out=out)`` for a (rows, n) array ``a`` and one value per row.

    numpy iterates such a broadcast in chunks of its ufunc buffer (8192 elements) and,
    for rows shorter than that, takes about twice the time of the same operation with
    a scalar, or more (a loop of one call per row pays a few microseconds of overhead per row;
    the times: ``docs/performance.md``, "Small costs behind two design choices"). A
    buffer of at most one row (a
    multiple of 16, as numpy asks) lets it run row by row at a scalar's speed. An
    elementwise operation gives the same bits whatever the buffer (no reduction runs
    under the changed size); the buffer is restored at once, as it is thread-local.
    """
    n = a.shape[-1]
    if a.size < _BY_ROWS_MIN or not 16 <= n < _NUMPY_BUFSIZE:
        return ufunc(a, col[:, None], out=out, casting="same_kind")
    old = np.setbufsize(n - n % 16)
    try:
        return ufunc(a, col[:, None], out=out, casting="same_kind")
    finally:
        np.setbufsize(old)


def _tilt_rows(ref: NDArray, reward: NDArray, beta: NDArray, want, check=None, workers=1):
    """The kernel on 2-D rows: ``ref``, ``reward`` (rows, n), ``beta`` (rows, 1), one dtype.

    Returns a dict of the requested fields (statistics of shape (rows, 1)), or
    ``None`` when ``check`` (``(tol, in64)``, the row-sum tolerance of the
    validators) finds an invalid value.
    """
    rows, n = ref.shape
    dtype = ref.dtype
    if want == _PI and rows and (rows == 1 or not beta.strides[0] or (beta == beta[0]).all()):
        pi = lean_policy(ref, reward, beta[0, 0], check)
        if pi is not None:
            return {"pi": pi}
    res = {k: np.empty((rows, n if k == "u" else 1), dtype) for k in want if k != "pi"}
    pi_out = np.empty((rows, n), dtype) if "pi" in want else None
    with np.errstate(all="ignore"):
        ib = (1 / beta[:, 0]).astype(dtype, copy=False)
        ib64 = None if dtype == np.float64 else 1 / beta[:, 0].astype(np.float64)
        sw = _parallel_sweep(ref, reward, ib, want, pi_out, res, workers, ib64)
    if check is not None and not _valid(sw, (*check, ref)):
        return None
    slow = np.nonzero(~sw.ok)[0]
    if slow.size:
        # float32 rows come here only where float64's fast path did not hold either: the
        # careful kernel in float64, rounded once
        wide = dtype != np.float64
        t = _tilt_careful(
            ref[slow].astype(np.float64) if wide else ref[slow],
            reward[slow].astype(np.float64) if wide else reward[slow],
            beta[slow].astype(np.float64) if wide else beta[slow],
            want,
        )
        if pi_out is not None:
            pi_out[slow] = t.pi
        for k in res:
            res[k][slow] = getattr(t, k)
    if pi_out is not None:
        res["pi"] = pi_out
    return res


def tilt(ref: NDArray, reward: NDArray, beta: NDArray, want=ALL, check=None, workers=1):
    """pi*_beta and the statistics in ``want`` for inputs with the probability axis last.

    ``ref`` and ``reward`` have one dtype and broadcast to (..., n); ``beta``
    broadcasts with shape (..., 1). Returns a :class:`_Tilt` whose unrequested
    fields are ``None``, or ``None`` when ``check`` finds an invalid value.
    """
    want = frozenset(want)
    beta = np.asarray(beta)
    if beta.ndim == 0:
        beta = beta.reshape((1,) * ref.ndim)
    shape = np.broadcast_shapes(ref.shape, reward.shape, beta.shape[:-1] + (1,))
    n = shape[-1]
    ref2 = (ref if ref.shape == shape else np.broadcast_to(ref, shape)).reshape(-1, n)
    rew2 = (reward if reward.shape == shape else np.broadcast_to(reward, shape)).reshape(-1, n)
    keep = shape[:-1] + (1,)
    b2 = (beta if beta.shape == keep else np.broadcast_to(beta, keep)).reshape(-1, 1)
    b2 = b2.astype(ref.dtype, copy=False)
    out = _tilt_rows(ref2, rew2, b2, want, check=check, workers=workers)
    if out is None:
        return None
    fields = {k: (out[k].reshape(shape) if k in out else None) for k in ("pi", "u")}
    for k in ("value", "kl", "mean", "var"):
        fields[k] = out[k].reshape(keep) if k in out else None
    return _Tilt(**fields)
