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
path (see :func:`_fast_ok`): every ``ref * exp(z)`` on the support is a normal
float (no underflow, no subnormal reference entry), ``beta`` is finite and
positive, and, when statistics are requested, ``beta`` is small enough
(``spread / beta >= 2``) that the careful path would not use its large-beta
refinements either. Every other row is handed to the careful path.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import NamedTuple

import numpy as np
from numpy.typing import NDArray

from ._careful import _mode_log_ratio as _careful_mode
from ._careful import _tilt as _careful_tilt
from ._numerics import kl_unit_series

# Bytes per array in one row block: the block's reference, reward, output and a
# few scratch arrays stay within a 2 MiB L2 cache.
_BLOCK_BYTES = 1 << 18
# Statistics take the fast path only when spread / beta >= this (see _fast_ok).
_STATS_MIN_SPREAD = 2.0

ALL = frozenset({"pi", "u", "value", "kl", "mean"})


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


# By item size: (low, high) exponent bounds that keep exp(z) weights normal and their
# sum finite, and the |r| / beta below which the shift by max(r) is skipped (it then
# costs a pass and changes nothing: exp(r / beta) is exact to |r / beta| * 1.5 ulp).
_RANGE = {4: (-86.0, 80.0), 8: (-700.0, 700.0)}
_NO_SHIFT = {4: 8.0, 8: 50.0}


def _rows_per_block(n: int, itemsize: int) -> int:
    return max(1, _BLOCK_BYTES // max(1, n * itemsize))


class _Sweep:
    """Per-row reductions and fast-path results of one sweep over the row blocks."""

    def __init__(self, rows: int, dtype):
        self.qmin, self.total, self.rmax, self.rmin, self.c, self.w_sum = (
            np.empty(rows, dtype) for _ in range(6)
        )


def _sweep(ref, reward, ib, want, pi_out, res):
    """One pass over row blocks: the validators' reductions and the optimistic fast path.

    For every row, whatever its values: ``w = ref * exp((r - c) * ib)`` with
    ``c = max(r)`` when ``|r| / beta`` exceeds a few tens (else ``c = 0``, an
    exact no-op), ``pi = w / sum(w)`` and the requested statistics. Rows where
    that is not provably accurate are detected afterwards (:func:`_fast_ok`) and
    recomputed by the careful path; rows with invalid values make the caller
    raise. Each block is read from memory once and stays in cache.
    """
    rows, n = ref.shape
    dtype = ref.dtype
    sw = _Sweep(rows, dtype)
    step = _rows_per_block(n, dtype.itemsize)
    nb = min(step, rows)
    scratch = {}

    def buf(name, k):
        if name not in scratch:
            scratch[name] = np.empty((nb, n), dtype)
        return scratch[name][:k]

    shift_above = _NO_SHIFT[dtype.itemsize]
    need_z = "kl" in want or "u" in want
    for start in range(0, rows, step):
        s = slice(start, min(start + step, rows))
        q, r, ibs = ref[s], reward[s], ib[s]
        k = q.shape[0]
        q.min(axis=-1, out=sw.qmin[s])
        q.sum(axis=-1, out=sw.total[s])
        r.max(axis=-1, out=sw.rmax[s])
        r.min(axis=-1, out=sw.rmin[s])
        mag = np.maximum(np.abs(sw.rmax[s]), np.abs(sw.rmin[s])) * ibs
        shift = ~(mag <= shift_above)  # also NaN: such rows are redone or refused
        c = sw.c[s]
        c[...] = 0
        c[shift] = sw.rmax[s][shift]
        w = pi_out[s] if pi_out is not None else buf("w", k)
        ibc = ibs[:, None]
        z = buf("z", k) if need_z else w
        if shift.any():
            np.subtract(r, c[:, None], out=z)
            np.multiply(z, ibc, out=z)
        else:
            np.multiply(r, ibc, out=z)
        np.exp(z, out=w)
        np.multiply(w, q, out=w)
        w_sum = w.sum(axis=-1, out=sw.w_sum[s])
        np.multiply(w, (1 / w_sum)[:, None], out=w)  # w is now pi
        if len(res):
            _block_stats(
                q, r, c, ibs, sw.total[s], w_sum, w, z, s, res, buf, sw.rmin[s], sw.rmax[s]
            )
    return sw


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
    small = np.less(scratch, 0.2).reshape(-1)
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


def _parallel_sweep(ref, reward, ib, want, pi_out, res, workers: int) -> _Sweep:
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
        return _sweep(ref, reward, ib, want, pi_out, res)
    per = -(-blocks // (workers * _TASKS_PER_WORKER)) * step
    bounds = [(a, min(a + per, rows)) for a in range(0, rows, per)]

    state = np.geterr()  # numpy's error state is per thread: carry the caller's over

    def run(bound):
        a, b = bound
        sub = {k: v[a:b] for k, v in res.items()}
        out = None if pi_out is None else pi_out[a:b]
        with np.errstate(**state):
            return _sweep(ref[a:b], reward[a:b], ib[a:b], want, out, sub)

    parts = list(_pool(workers).map(run, bounds))
    sw = _Sweep(0, ref.dtype)
    for name in ("qmin", "total", "rmax", "rmin", "c", "w_sum"):
        setattr(sw, name, np.concatenate([getattr(p, name) for p in parts]))
    return sw


def _fast_ok(ref, reward, ib, sw: _Sweep, stats: bool) -> NDArray[np.bool_]:
    """Rows where the sweep's one-exp result is provably as accurate as the careful path.

    * ``0 < 1/beta < inf``: finite positive beta (the limits are the careful path's);
    * no overflow: ``(max r - c) / beta + log n`` stays below the largest exponent, so
      every ``exp(z)`` (also off the support) and their sum are finite;
    * no underflow: ``log(min ref) + (min r - c) / beta > low`` on the support
      (``low = -700`` in float64), so every weight ``ref * exp(z)`` on the support
      is a normal float and ``pi = w / sum(w)`` is exact to a few ulp (the careful
      path loses digits only where the true ``pi`` is subnormal; here nothing
      underflows, and no subnormal reference entry is used);
    * ``(min r - c) / beta`` finite, off the support too (else a summand is ``-inf * 0``);
    * with statistics, ``(max r - min r) / beta >= 2`` on the support: there the
      careful path uses neither its mean-centred soft value (it does when
      ``max |r - E_ref r| < beta``) nor ``log1p`` for a log-partition near 0.
    """
    low, high = _RANGE[ref.dtype.itemsize]
    qpos, r_lo, r_hi = sw.qmin.copy(), sw.rmin.copy(), sw.rmax.copy()
    zero = np.nonzero(sw.qmin == 0)[0]
    if zero.size:  # rows with zeros: smallest entry, smallest and best reward on the support
        qz, rz = ref[zero], reward[zero]
        sup = qz > 0
        qpos[zero] = np.min(np.where(sup, qz, np.inf), axis=-1)
        r_lo[zero] = np.min(np.where(sup, rz, np.inf), axis=-1)
        r_hi[zero] = np.max(np.where(sup, rz, -np.inf), axis=-1)
    n = ref.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ok = (ib > 0) & np.isfinite(ib)
        ok &= (sw.rmax - sw.c) * ib + np.log(n) < high
        ok &= np.log(qpos) + (r_lo - sw.c) * ib > low
        # off the support too: a reward of -1e300 at a zero reference entry makes z = -inf
        # there, and the KL's and variance's summands -inf * 0 = NaN
        ok &= np.isfinite((sw.rmin - sw.c) * ib)
        if stats:
            ok &= (r_hi - r_lo) * ib >= _STATS_MIN_SPREAD
    return ok


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
    tol, in64, ref = check
    if not (np.all(sw.qmin >= 0) and np.all(np.isfinite(sw.rmax)) and np.all(np.isfinite(sw.rmin))):
        return False
    dev = np.abs(sw.total - 1.0)
    if in64 and np.any(dev > 0.5 * tol):  # borderline in float32: sum in float64 as they do
        dev = np.abs(ref.sum(axis=-1, dtype=np.float64) - 1.0)
    return bool(np.all(dev <= tol))


def _tilt_rows(ref: NDArray, reward: NDArray, beta: NDArray, want, check=None, workers=1):
    """The kernel on 2-D rows: ``ref``, ``reward`` (rows, n), ``beta`` (rows, 1), one dtype.

    Returns a dict of the requested fields (statistics of shape (rows, 1)), or
    ``None`` when ``check`` (``(tol, in64)``, the row-sum tolerance of the
    validators) finds an invalid value.
    """
    rows, n = ref.shape
    dtype = ref.dtype
    res = {k: np.empty((rows, n if k == "u" else 1), dtype) for k in want if k != "pi"}
    pi_out = np.empty((rows, n), dtype) if "pi" in want else None
    with np.errstate(all="ignore"):
        ib = (1 / beta[:, 0]).astype(dtype, copy=False)
        sw = _parallel_sweep(ref, reward, ib, want, pi_out, res, workers)
    if check is not None and not _valid(sw, (*check, ref)):
        return None
    ok = _fast_ok(ref, reward, ib, sw, stats=bool(res))
    if "value" in res:
        ok &= _value_resolved(res["value"][:, 0], sw.c, ib)
    slow = np.nonzero(~ok)[0]
    if slow.size and dtype == np.float32:
        # float32 rows beyond float32's exp range (a spread r/beta past ~80) are rows
        # float64's one-exp sweep still takes: computed there and rounded once, they are
        # at least as exact as float32's careful kernel and an order of magnitude faster
        wide = _tilt_rows(
            ref[slow].astype(np.float64),
            reward[slow].astype(np.float64),
            beta[slow].astype(np.float64),
            want,
            workers=workers,
        )
        if pi_out is not None:
            pi_out[slow] = wide["pi"]
        for k in res:
            res[k][slow] = wide[k]
        slow = slow[:0]
    if slow.size:
        t = _tilt_careful(ref[slow], reward[slow], beta[slow], want)
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
    ref2 = np.broadcast_to(ref, shape).reshape(-1, n)
    rew2 = np.broadcast_to(reward, shape).reshape(-1, n)
    b2 = np.broadcast_to(beta, shape[:-1] + (1,)).reshape(-1, 1).astype(ref.dtype, copy=False)
    out = _tilt_rows(ref2, rew2, b2, want, check=check, workers=workers)
    if out is None:
        return None
    keep = shape[:-1] + (1,)
    fields = {k: (out[k].reshape(shape) if k in out else None) for k in ("pi", "u")}
    for k in ("value", "kl", "mean", "var"):
        fields[k] = out[k].reshape(keep) if k in out else None
    return _Tilt(**fields)
