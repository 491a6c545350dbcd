r"""The closed form written once against the Python array API: torch, JAX, CuPy (and numpy).

:func:`klpolicy.optimal_policy` and its siblings hand numpy input to the
blocked fast path of :mod:`klpolicy.core._tilt`. Any other array library that
`array-api-compat <https://data-apis.org/array-api-compat/>`_ recognises
(torch tensors on any device, JAX arrays, CuPy arrays) comes here. Where a
one-exponential fast path (:func:`_fast_policy`, :func:`_fast_stats`) is not provably
as accurate, it runs the careful kernel of :mod:`klpolicy.core._careful`, the same
code the numpy core falls back to (log-space tilt relative to the best reward on the
reference's support, log-ratios and soft value centred on the optimum's mode, the
mean-centred soft value at large ``beta``, non-negative KL summands, the greedy and
reference limits; its module docstring says how every branch stays gradient-safe).

Results come back in the caller's array type, device and dtype; float16 and
bfloat16 are computed in float32 and returned in their own dtype.

Validation
----------
The same checks and the same ``ValueError`` messages as numpy input: each
check is one reduction on the device and one boolean brought to the host;
only when a check fails is the offending array copied to the host to word
the message. Under ``jax.jit`` values are tracers and cannot be checked:
pass ``validate=False`` there (the caller guarantees valid input).
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np

from . import _estimates
from . import _validation as V
from ._careful import _const, _device, _div, _kl_terms, _stop, _tilt
from ._route import fits, shifts, spread_ok
from ._tilt import _value_resolved

__all__ = [
    "cross_entropy",
    "entropy",
    "is_foreign",
    "k1",
    "k2",
    "k3",
    "kl_divergence",
    "max_kl",
    "optimal_kl",
    "optimal_policy",
    "soft_value",
    "total_variation",
]


# --------------------------------------------------------------------------- namespaces


def is_foreign(*xs: Any) -> bool:
    """True when one argument is a non-numpy array that array-api-compat recognises.

    Looks only at libraries already imported (``import klpolicy`` imports none).
    """
    if not any(m in sys.modules for m in ("torch", "jax", "cupy", "dask", "sparse", "ndonnx")):
        return False
    import array_api_compat as aac

    return any(aac.is_array_api_obj(x) and not isinstance(x, (np.ndarray, np.generic)) for x in xs)


def _namespace(*xs: Any):
    """(xp, template): the namespace of the first non-numpy array and that array."""
    import array_api_compat as aac

    for x in xs:
        if aac.is_array_api_obj(x) and not isinstance(x, (np.ndarray, np.generic)):
            return aac.array_namespace(x), x
    return aac.array_namespace(np.asarray(xs[0])), None


def _to_numpy(x) -> np.ndarray:
    """A host copy, for wording an error (never on the success path)."""
    import array_api_compat as aac

    if aac.is_torch_array(x):
        x = x.detach()
        if x.dtype.is_floating_point and x.element_size() < 4:
            x = x.float()
        return x.cpu().numpy()
    if aac.is_cupy_array(x):
        return x.get()
    arr = np.asarray(x)
    if (arr.dtype.kind == "f" and arr.dtype.itemsize < 4) or arr.dtype.kind == "V":
        arr = np.asarray(x, dtype=np.float32)
    return arr


def _has_float64(xp, template) -> bool:
    import array_api_compat as aac

    if template is not None and aac.is_jax_array(template):
        import jax

        return bool(jax.config.jax_enable_x64)
    if template is not None and aac.is_torch_array(template):
        return template.device.type != "mps"
    return True


def _dtypes(xp, arrays, template):
    """(out dtype, compute dtype): float32 in -> float32, float16/bfloat16 computed in float32."""
    floats = [a.dtype for a in arrays if xp.isdtype(a.dtype, "real floating")]
    if floats:
        out = floats[0]
        for d in floats[1:]:
            out = xp.result_type(out, d)
    else:
        out = xp.float64 if _has_float64(xp, template) else xp.float32
    if out not in (xp.float32, xp.float64):
        if xp.finfo(out).bits < 32:
            return out, xp.float32
        out = xp.float64 if _has_float64(xp, template) else xp.float32
    return out, out


def _as_array(xp, name: str, x, template, device):
    """``x`` as an array of ``xp`` on ``device`` (lists and numpy arrays are converted)."""
    import array_api_compat as aac

    if aac.is_array_api_obj(x) and not isinstance(x, (np.ndarray, np.generic)):
        arr = x
    else:
        host = V.as_float_array(name, x)  # words the error for ragged or non-numeric input
        dt = xp.float64 if host.dtype == np.float64 and _has_float64(xp, template) else None
        if host.dtype == np.float32:
            dt = xp.float32
        arr = xp.asarray(host, dtype=dt if dt is not None else xp.float32, device=device)
    if xp.isdtype(arr.dtype, "bool") or not xp.isdtype(arr.dtype, ("real floating", "integral")):
        raise ValueError(f"`{name}` must be an array of real numbers; got dtype {arr.dtype}")
    if math.prod(arr.shape) == 0:
        raise ValueError(f"`{name}` must not be empty; got shape {tuple(arr.shape)}")
    if not xp.isdtype(arr.dtype, "real floating"):
        arr = xp.astype(arr, xp.float64 if _has_float64(xp, template) else xp.float32)
    return arr


def _dummy(shape) -> np.ndarray:
    """A zero-cost numpy array of ``shape``, for the validators' shape logic and messages."""
    return np.broadcast_to(np.zeros((), np.float64), tuple(shape))


def _scalar_error(name: str, x) -> None:
    if x.ndim == 0:
        raise ValueError(
            f"`{name}` must have at least one dimension; got a scalar {_to_numpy(x).item()!r}"
        )


# --------------------------------------------------------------------------- validation


def _sum_wide(xp, x, axis, template):
    """Row sums in float64 where the library has it (the numpy validators sum in float64)."""
    if _has_float64(xp, template):
        return xp.sum(x, axis=axis, dtype=xp.float64)
    return xp.sum(x, axis=axis)


def _check_probabilities(
    xp, name: str, x, axis: int, template, user_axis: int = -1, check_sum: bool = True
) -> None:
    """The checks of :func:`klpolicy.core._validation.as_probabilities`, one reduction each.

    ``axis`` is the normalised probability axis; ``user_axis`` the caller's spelling of it,
    which the messages quote.
    """
    if not bool(xp.all((x >= 0) & (x < math.inf))):  # NaN fails both comparisons
        V._raise_not_finite_non_negative(name, _to_numpy(x))
    if not check_sum:
        return
    tol = _row_sum_tolerance(xp, x, axis)  # float16 / bfloat16: their own rounding
    sums = _sum_wide(xp, x, axis, template)
    if bool(xp.all(xp.abs(sums - 1.0) <= tol)):
        return
    host = _to_numpy(x)
    if xp.finfo(x.dtype).bits >= 32:
        V.as_probabilities(name, host, user_axis)  # raises with the numpy message
    sums_h = host.sum(axis=axis, dtype=np.float64)
    bad = np.abs(sums_h - 1.0) > tol
    if np.ndim(bad) == 0:
        raise ValueError(
            f"`{name}` must sum to 1 along axis {user_axis}; it sums to {V.format_value(sums_h)}"
            f" (tolerance {tol:.2g}); klpolicy never renormalises silently"
        )
    idx = V.first_index(bad)
    raise ValueError(
        f"`{name}` must sum to 1 along axis {user_axis}; row {V.format_index(idx)} sums to "
        f"{V.format_value(sums_h[idx])} (tolerance {tol:.2g}); klpolicy never renormalises silently"
    )


def _check_finite(xp, name: str, x, axis: int) -> None:
    if not bool(xp.all(xp.isfinite(x))):
        V.as_rewards(name, _to_numpy(x), axis)


def _check_beta(xp, beta) -> None:
    if not bool(xp.all(beta >= 0)):  # NaN fails too
        V.check_beta_values("beta", _to_numpy(beta))


# --------------------------------------------------------------------------- setup


class _Deferred:
    """The value checks of a problem, not yet run: callables that raise the numpy message,
    and the row-sum tolerance of ``ref``'s own dtype (float16/bfloat16: their rounding)."""

    def __init__(self):
        self.checks: list = []
        self.tol = 0.0
        self.dtype = None


def _row_sum_tolerance(xp, x, axis: int) -> float:
    return V.row_sum_tolerance_for_eps(float(xp.finfo(x.dtype).eps), x.shape[axis])


def _problem(
    ref, reward, beta, axis: int, validate: bool, pending: _Deferred | None = None, cast=True
):
    """Validate and lay out a problem: (xp, ref, reward, beta, out dtype, axis_neg).

    ``ref`` and ``reward`` are broadcast with the probability axis last and in
    the compute dtype; ``beta`` has shape (..., 1) and may require gradients.
    With ``pending``, the value checks of ``ref`` and ``reward`` are not run but
    stored in it, for a caller that folds them into its own reductions
    (:func:`_fast_policy`) and runs them only when those find a bad value.
    ``cast=False`` leaves ``ref`` and ``reward`` in their own float dtypes (the caller
    casts them to the compute dtype, which ``pending.dtype`` then holds).
    """
    xp, template = _namespace(ref, reward, beta)
    import array_api_compat as aac

    device = _device(template)
    ref_a = _as_array(xp, "ref", ref, template, device)
    rew_a = _as_array(xp, "reward", reward, template, device)
    _scalar_error("ref", ref_a)
    _scalar_error("reward", rew_a)
    ax_ref = V.normalise_axis(axis, ref_a.ndim, "ref")
    ax_rew = V.normalise_axis(axis, rew_a.ndim, "reward")
    if validate and pending is not None:
        pending.checks.append(
            lambda: _check_probabilities(xp, "ref", ref_a, ax_ref, template, axis)
        )
        pending.checks.append(lambda: _check_finite(xp, "reward", rew_a, ax_rew))
        pending.tol = _row_sum_tolerance(xp, ref_a, ax_ref)
    elif validate:
        _check_probabilities(xp, "ref", ref_a, ax_ref, template, axis)
        _check_finite(xp, "reward", rew_a, ax_rew)
    ref_m, rew_m = xp.moveaxis(ref_a, ax_ref, -1), xp.moveaxis(rew_a, ax_rew, -1)
    V.broadcast_pair("ref", _dummy(ref_m.shape), "reward", _dummy(rew_m.shape))
    pair = np.broadcast_shapes(tuple(ref_m.shape), tuple(rew_m.shape))
    ndim = len(pair)
    ax = V.normalise_axis(axis, ndim)
    out_dt, dt = _dtypes(xp, [ref_m, rew_m], template)

    limits = True  # whether beta = 0 or inf may occur (unknown for a device array)
    if aac.is_array_api_obj(beta) and not isinstance(beta, (np.ndarray, np.generic)):
        b = beta
        if not xp.isdtype(b.dtype, "real floating"):
            b = xp.astype(b, dt, copy=False)
        if validate:
            _check_beta(xp, b)
        want = V.as_beta(_dummy(b.shape), ndim, ax)  # words shape errors
        if b.ndim < ndim:
            b = xp.reshape(b, (1,) * (ndim - b.ndim) + tuple(b.shape))
        b = xp.moveaxis(b, ax + (b.ndim - ndim), -1)
        assert tuple(b.shape) == want.shape
        b = xp.astype(b, dt, copy=False)
    else:
        host = V.as_beta(beta, ndim, ax)  # validates on the host: no device traffic
        b = xp.asarray(np.ascontiguousarray(host), dtype=dt, device=device)
        with np.errstate(under="ignore"):
            host_dt = host.astype(np.float32) if dt == xp.float32 else host
        # subnormal betas keep the limit branches: XLA flushes them to zero on the device
        normal = (host_dt >= np.finfo(host_dt.dtype).tiny) & np.isfinite(host_dt)
        limits = not bool(np.all(normal))
    shape = np.broadcast_shapes(pair, tuple(b.shape))
    if pending is not None:
        pending.dtype = dt
    if cast:
        ref_m, rew_m = xp.astype(ref_m, dt, copy=False), xp.astype(rew_m, dt, copy=False)
    ref_b = xp.broadcast_to(ref_m, shape)
    rew_b = xp.broadcast_to(rew_m, shape)
    b = xp.broadcast_to(b, shape[:-1] + (1,))
    return xp, ref_b, rew_b, b, out_dt, ax - ndim, limits


def _finish(xp, x, out_dt):
    return x if x.dtype == out_dt else xp.astype(x, out_dt)


# --------------------------------------------------------------------------- fast path

# The fast paths' bounds are the numpy core's (klpolicy.core._tilt), by item size: the
# exponent range that keeps every weight ref * exp(z) a normal float and their sum finite,
# and the |r| / beta up to which exp(r / beta) needs no shift by max(r).


def _concrete(*xs) -> bool:
    """False for JAX tracers (under ``jax.jit`` no value can be brought to the host)."""
    if "jax" not in sys.modules:
        return True
    import jax

    return not any(isinstance(x, jax.core.Tracer) for x in xs)


def _values_ok(xp, q, qmin, rmax, rmin, tol: float, dt):
    """One device flag: the value checks of ``ref`` (``q``, in its own dtype) and the
    rewards, from a fast path's row reductions (NaN fails every comparison)."""
    if xp.finfo(q.dtype).bits < 32:
        # float16 / bfloat16: summed in their own dtype (the library accumulates in
        # float32; asking for a wider dtype would copy the array whole), the sum
        # rounded to the dtype: the check is tightened by two of its ulps, and a row
        # that near the tolerance goes to the exact checks, which then decide.
        sums = xp.astype(xp.sum(q, axis=-1, keepdims=True), dt)
        sum_tol = tol - 2.0 * float(xp.finfo(q.dtype).eps)
    else:
        sums, sum_tol = _sum_wide(xp, q, -1, q), tol
    return (
        xp.all(qmin >= 0)
        & xp.all(xp.isfinite(rmax) & xp.isfinite(rmin))
        & xp.all(xp.abs(sums - 1.0) <= sum_tol)
    )


def _fast_policy(xp, q, r, b, tol: float, validate: bool, dt, out_dt):
    """pi*_beta by one exponential per entry, when that is provably as accurate: or ``None``.

    The array-API twin of the numpy core's fast path (:mod:`klpolicy.core._tilt`):
    ``w = ref * exp((r - c) / beta)``, ``pi = w / sum(w)``, with ``c = max(r)``, or
    ``c = 0`` when ``|r| / beta`` stays below a few tens (one pass fewer). It is
    taken when, on every row, ``beta`` is finite, positive and normal (known on
    the host, the caller's ``limits=False``), the reference has no zero and every
    weight on the row is a normal float, so no rounding differs in kind from the
    careful path's (which is used otherwise). Three row reductions (min of
    ``ref``, min and max of ``reward``) decide it and, with the float64 row sums
    of ``ref``, also carry the value checks; the flags come to the host in one
    transfer. ``max`` and ``min`` propagate NaN in torch, JAX and CuPy, so a NaN
    fails the checks.

    ``q`` and ``r`` come in their own dtypes, ``dt`` is the compute dtype and
    ``out_dt`` the result's: a float16 or bfloat16 result is computed in float32
    block of rows by block of rows (:func:`_blocks_in`), so that the float32 copies
    never exist whole.

    Returns ``(pi, valid)``: ``pi`` (in the compute dtype, or already in a low
    ``out_dt``) is ``None`` when the careful path must run; ``valid`` says whether
    the value checks passed.
    """
    size, n = xp.finfo(dt).bits // 8, q.shape[-1]
    qmin = xp.astype(xp.min(q, axis=-1, keepdims=True), dt)
    rmax = xp.astype(xp.max(r, axis=-1, keepdims=True), dt)
    rmin = xp.astype(xp.min(r, axis=-1, keepdims=True), dt)
    ib = 1.0 / b
    # the router's tests (klpolicy.core._route) on every row, unshifted and shifted by max r;
    # beta is finite, positive and normal here, so fits is what is left of its fast_rows (a
    # zero reference entry fails both: log(0) + lo is -inf; so do invalid rewards, NaN)
    log_n = math.log(n)
    unshifted = fits(xp, qmin, rmin * ib, rmax * ib, log_n, size)
    flags = [
        xp.all(unshifted & ~shifts(xp, rmax, rmin, ib, size)),
        xp.all(fits(xp, qmin, (rmin - rmax) * ib, 0.0, log_n, size)),
    ]
    if validate:
        flags.append(_values_ok(xp, q, qmin, rmax, rmin, tol, dt))
    host = np.asarray(_to_numpy(xp.stack(flags)))  # the one device-to-host transfer
    valid = bool(host[2]) if validate else True
    if not valid or not (host[0] or host[1]):
        return None, valid
    c = None if host[0] else _stop(rmax)
    if xp.finfo(out_dt).bits >= 32:
        return _one_exp(xp, q, r, c, ib, dt), True
    return _blocks_in(xp, q, r, c, ib, dt, out_dt), True


# A fast KL is kept when its summands' rounding, eps * (4 + max |z| + |log Z|) in all, is
# below this many ulp of it (1.1e-13 relative in float64; the numpy core's blocks ask 64
# ulp before their per-row series and re-centring, which a whole-batch path on a device
# does not do). A fast soft value: klpolicy.core._tilt._value_resolved.
_KL_ULPS = 512.0


def _fast_stats(xp, q, r, b, tol: float, validate: bool, dt, want):
    """The soft value and/or KL of pi*_beta by one exponential per entry: or ``None``.

    The array-API twin of the numpy core's fast statistics (``_tilt._block_stats``),
    for a whole batch at once: with ``c = max(r)`` on rows where ``|r| / beta`` exceeds
    a few tens (else 0), ``z = (r - c) / beta``, ``w = ref * exp(z)``,
    ``log Z = log(sum w / sum ref)``, ``V = c + beta log Z`` and
    ``KL = sum(pi (z - log Z - 1) + ref_n)``. Taken when every row has what the numpy
    core's fast rows need (no zero in the reference, every weight a normal float,
    ``(max r - min r) / beta >= 2``) and its results are resolved: the value to
    ``_tilt._VALUE_ULPS`` ulp of itself, the KL to ``_KL_ULPS`` ulp (a KL above about 1/50
    nat at ``spread / beta`` of a few). The
    checks, value checks included, come to the host in one transfer after the sums;
    otherwise (a small KL, a value near 0, the limits...) the careful kernel runs.

    Returns ``(stats, valid)`` as :func:`_fast_policy` does, ``stats`` a dict.
    """
    size, n = xp.finfo(dt).bits // 8, q.shape[-1]
    q_in = q
    q = xp.astype(q, dt, copy=False)
    r = xp.astype(r, dt, copy=False)
    qmin = xp.min(q, axis=-1, keepdims=True)
    rmax = xp.max(r, axis=-1, keepdims=True)
    rmin = xp.min(r, axis=-1, keepdims=True)
    ib = 1.0 / b
    # each row's shift and its fast test by the router (klpolicy.core._route), statistics
    # asked (beta finite, positive and normal: fits and spread_ok are what is left of its
    # fast_rows): a zero reference entry fails (log(0) + lo is -inf), so do invalid
    # rewards (NaN)
    c = xp.where(shifts(xp, rmax, rmin, ib, size), _stop(rmax), xp.zeros_like(rmax))
    lo, hi = (rmin - c) * ib, (rmax - c) * ib
    ok = fits(xp, qmin, lo, hi, math.log(n), size) & spread_ok(rmin, rmax, ib)
    z = (r - c) * ib
    w = q * xp.exp(z)
    total = xp.sum(q, axis=-1, keepdims=True)
    w_sum = xp.sum(w, axis=-1, keepdims=True)
    log_z = xp.log(w_sum / total)
    out = {}
    if "value" in want:
        value = c + log_z / ib
        ok = ok & _value_resolved(value, c, ib)
        out["value"] = value
    if "kl" in want:
        pi = w / w_sum
        terms = pi * (z - log_z - 1.0) + q / total
        kl = xp.sum(terms, axis=-1, keepdims=True)
        scale = 4.0 + xp.maximum(xp.abs(lo), xp.abs(hi)) + xp.abs(log_z)
        ok = ok & (kl * _KL_ULPS >= scale)  # rounding eps * scale <= _KL_ULPS ulp of kl
        out["kl"] = kl
    flags = [xp.all(ok)]
    if validate:
        flags.append(_values_ok(xp, q_in, qmin, rmax, rmin, tol, dt))
    host = np.asarray(_to_numpy(xp.stack(flags)))  # the one device-to-host transfer
    valid = bool(host[1]) if validate else True
    if not valid or not host[0]:
        return None, valid
    return out, True


def _one_exp(xp, q, r, c, ib, dt):
    """``w / sum(w)``, ``w = ref * exp((r - c) * ib)`` (``c = None``: no shift).

    One expression per step, so that at most two (..., n) arrays are alive at a time
    (the output included): exp's argument is freed as soon as exp returns, and so on.
    """
    q = xp.astype(q, dt, copy=False)
    r = xp.astype(r, dt, copy=False)
    if c is None:
        w = q * xp.exp(r * ib)
    else:
        w = q * xp.exp((r - c) * ib)
    return w / xp.sum(w, axis=-1, keepdims=True)


# float16 / bfloat16 input: rows per block so that a block's float32 arrays are about
# 1/16 of the input (and at least one row)
_LOW_PRECISION_BLOCKS = 16


def _blocks_in(xp, q, r, c, ib, dt, out_dt):
    """:func:`_one_exp` on blocks of the leading axis, each returned in the low ``out_dt``.

    The output is written block by block into one array of the low dtype (torch,
    CuPy), or joined (JAX, whose arrays are immutable), so the float32 work arrays
    exist one block at a time.
    """
    import array_api_compat as aac

    lead = q.shape[0] if q.ndim > 1 else 1
    step = max(1, -(-lead // _LOW_PRECISION_BLOCKS))
    if q.ndim == 1 or step >= lead:
        return xp.astype(_one_exp(xp, q, r, c, ib, dt), out_dt)

    def block(i):
        s = slice(i, min(i + step, lead))
        ci = None if c is None else c[s]
        return xp.astype(_one_exp(xp, q[s], r[s], ci, ib[s], dt), out_dt)  # ib: (lead, ..., 1)

    if aac.is_jax_array(q):
        return xp.concat([block(i) for i in range(0, lead, step)], axis=0)
    out = xp.empty(q.shape, dtype=out_dt, device=_device(q))
    for i in range(0, lead, step):
        out[i : i + step, ...] = block(i)
    return out


# --------------------------------------------------------------------------- closed form


def _closed_form(name: str, ref, reward, beta, axis: int, validate: bool):
    """pi*_beta (``name = "pi"``), its soft value (``"value"``) or KL (``"kl"``): the
    one-exponential path when it applies (:func:`_fast_policy`, :func:`_fast_stats`),
    with the value checks folded into its one host transfer, else the careful kernel."""
    pending = _Deferred()
    xp, q, r, b, out_dt, ax, limits = _problem(
        ref, reward, beta, axis, validate, pending, cast=False
    )
    dt = pending.dtype
    got = None
    if not limits and _concrete(q, r):
        with np.errstate(all="ignore"):  # numpy arrays through the array API: invalid rows
            if name == "pi":
                pi, valid = _fast_policy(xp, q, r, b, pending.tol, validate, dt, out_dt)
                got = None if pi is None else {"pi": pi}
            else:
                got, valid = _fast_stats(xp, q, r, b, pending.tol, validate, dt, {name})
        if valid:
            pending.checks.clear()
    for check in pending.checks:  # they raise for invalid input
        check()
    if got is None:
        q, r = xp.astype(q, dt, copy=False), xp.astype(r, dt, copy=False)
        got = _tilt(xp, q, r, b, {name}, limits)
    out = xp.moveaxis(got["pi"], -1, ax) if name == "pi" else got[name][..., 0]
    return _finish(xp, out, out_dt)


def optimal_policy(ref, reward, beta, *, axis: int = -1, validate: bool = True):
    """:func:`klpolicy.optimal_policy` for any array-API library (see the module docstring)."""
    return _closed_form("pi", ref, reward, beta, axis, validate)


def soft_value(ref, reward, beta, *, axis: int = -1, validate: bool = True):
    """:func:`klpolicy.soft_value` for any array-API library."""
    return _closed_form("value", ref, reward, beta, axis, validate)


def optimal_kl(ref, reward, beta, *, axis: int = -1, validate: bool = True):
    """:func:`klpolicy.optimal_kl` for any array-API library."""
    return _closed_form("kl", ref, reward, beta, axis, validate)


def max_kl(ref, reward, *, axis: int = -1, validate: bool = True):
    """:func:`klpolicy.max_kl` for any array-API library."""
    xp, q, r, b, out_dt, _, _ = _problem(ref, reward, 0.0, axis, validate)
    return _finish(xp, _tilt(xp, q, r, b, {"max_kl"})["max_kl"][..., 0], out_dt)


# --------------------------------------------------------------------------- divergences


def _pair(p, q, axis: int, validate: bool, names=("p", "q")):
    xp, template = _namespace(p, q)
    device = _device(template)
    pa = _as_array(xp, names[0], p, template, device)
    qa = _as_array(xp, names[1], q, template, device)
    _scalar_error(names[0], pa)
    _scalar_error(names[1], qa)
    ax_p = V.normalise_axis(axis, pa.ndim, names[0])
    ax_q = V.normalise_axis(axis, qa.ndim, names[1])
    if validate:
        _check_probabilities(xp, names[0], pa, ax_p, template, axis)
        _check_probabilities(xp, names[1], qa, ax_q, template, axis)
    pm, qm = xp.moveaxis(pa, ax_p, -1), xp.moveaxis(qa, ax_q, -1)
    V.broadcast_pair(names[0], _dummy(pm.shape), names[1], _dummy(qm.shape))
    out_dt, dt = _dtypes(xp, [pm, qm], template)
    shape = np.broadcast_shapes(tuple(pm.shape), tuple(qm.shape))
    pm = xp.broadcast_to(xp.astype(pm, dt, copy=False), shape)
    qm = xp.broadcast_to(xp.astype(qm, dt, copy=False), shape)
    return xp, pm, qm, out_dt


def _single(p, axis: int, validate: bool, name="p"):
    xp, template = _namespace(p)
    pa = _as_array(xp, name, p, template, _device(template))
    _scalar_error(name, pa)
    ax = V.normalise_axis(axis, pa.ndim, name)
    if validate:
        _check_probabilities(xp, name, pa, ax, template, axis)
    out_dt, dt = _dtypes(xp, [pa], template)
    return xp, xp.astype(xp.moveaxis(pa, ax, -1), dt, copy=False), out_dt


def _kl_rows(xp, p, q):
    """KL(p||q) along the last axis, the numpy core's careful summands, gradient-safe."""
    with np.errstate(all="ignore"):
        return _kl_rows_body(xp, p, q)


def _kl_rows_body(xp, p, q):
    zero_t = xp.zeros_like(p)
    one_t = xp.ones_like(p)
    pos_p, pos_q = p > 0, q > 0
    wq = xp.sum(q, axis=-1, keepdims=True)
    wp = xp.sum(p, axis=-1, keepdims=True)
    d = p - q
    # log(W_p / W_q) from the differences, so rounding in the row sums cancels
    a = xp.log1p(xp.sum(d, axis=-1, keepdims=True) / wq)
    ratio = _stop(xp.where(pos_q, d, zero_t) / xp.where(pos_q, q, one_t))
    close = (xp.abs(ratio) < 0.5) & pos_q  # implies p > 0
    both = pos_p & pos_q & ~close
    # (p - q) / q only where it is used: a huge ratio elsewhere would give 0 * inf backwards
    ratio = _div(xp, xp.where(close, d, zero_t), xp.where(close, q, one_t))
    u = xp.where(
        close,
        xp.log1p(ratio),
        xp.log(xp.where(both, p, one_t)) - xp.log(xp.where(both, q, one_t)),
    )
    u = u - a
    pn, qn = p / wp, q / wq
    terms = xp.where(pos_p, _kl_terms(xp, pn, qn, xp.where(pos_p, u, zero_t)), qn)
    inf = _const(xp, math.inf, p)
    terms = xp.where(pos_q, terms, xp.where(pos_p, inf, zero_t))
    return xp.sum(terms, axis=-1)


def kl_divergence(p, q, *, axis: int = -1, validate: bool = True):
    """:func:`klpolicy.kl_divergence` for any array-API library."""
    xp, pm, qm, out_dt = _pair(p, q, axis, validate)
    return _finish(xp, _kl_rows(xp, pm, qm), out_dt)


def cross_entropy(p, q, *, axis: int = -1, validate: bool = True):
    """:func:`klpolicy.cross_entropy` for any array-API library."""
    xp, pm, qm, out_dt = _pair(p, q, axis, validate)
    pos_p, pos_q = pm > 0, qm > 0
    zero_t = xp.zeros_like(pm)
    log_q = xp.log(xp.where(pos_q, qm, xp.ones_like(qm)))
    inf = _const(xp, math.inf, pm)
    terms = xp.where(pos_p, xp.where(pos_q, -pm * log_q, inf), zero_t)
    return _finish(xp, xp.sum(terms, axis=-1), out_dt)


def entropy(p, *, axis: int = -1, validate: bool = True):
    """:func:`klpolicy.entropy` for any array-API library."""
    xp, pm, out_dt = _single(p, axis, validate)
    pos = pm > 0
    terms = xp.where(pos, -pm * xp.log(xp.where(pos, pm, xp.ones_like(pm))), xp.zeros_like(pm))
    return _finish(xp, xp.sum(terms, axis=-1), out_dt)


def total_variation(p, q, *, axis: int = -1, validate: bool = True):
    """:func:`klpolicy.total_variation` for any array-API library."""
    xp, pm, qm, out_dt = _pair(p, q, axis, validate)
    return _finish(xp, 0.5 * xp.sum(xp.abs(pm - qm), axis=-1), out_dt)


# --------------------------------------------------------------------------- estimators


def _check_log_probs(xp, name: str, x, allow_neg_inf: bool) -> None:
    ok = (x < math.inf) & (x > -math.inf) if not allow_neg_inf else (x < math.inf)
    if not bool(xp.all(ok)):  # NaN fails too
        V.as_log_probs(name, _to_numpy(x), allow_neg_inf=allow_neg_inf)


def estimate(estimator, logp, logq, clip=None, log_ratio_clip=None, *, validate: bool = True):
    """The per-sample estimator ``estimator`` on any array-API arrays.

    ``estimator`` is a value formula ``f(xp, ell)`` of :mod:`klpolicy.core._estimates`
    (a registry row's ``array_value``) or the name of one ("k1", "k2", "k3", "abs").
    """
    formula = estimator if callable(estimator) else _estimates.formula(estimator)
    xp, template = _namespace(logp, logq)
    device = _device(template)
    lp = _as_array(xp, "logp", logp, template, device)
    lq = _as_array(xp, "logq", logq, template, device)
    c = V.as_optional_clip("clip", clip)
    lc = V.as_optional_clip("log_ratio_clip", log_ratio_clip)
    if validate:
        _check_log_probs(xp, "logp", lp, allow_neg_inf=False)
        _check_log_probs(xp, "logq", lq, allow_neg_inf=True)
    try:
        shape = np.broadcast_shapes(tuple(lp.shape), tuple(lq.shape))
    except ValueError:
        raise ValueError(
            f"the shapes of `logp` {tuple(lp.shape)} and `logq` {tuple(lq.shape)} do not broadcast"
        ) from None
    out_dt, dt = _dtypes(xp, [lp, lq], template)
    lp = xp.broadcast_to(xp.astype(lp, dt, copy=False), shape)
    lq = xp.broadcast_to(xp.astype(lq, dt, copy=False), shape)
    # ell = logp - logq; logq = -inf gives +inf (an infinite estimate), gradient-safe
    lq_inf = xp.isinf(lq)
    lq_s = xp.where(lq_inf, xp.zeros_like(lq), lq)
    ell = xp.where(lq_inf, _const(xp, math.inf, lp), lp - lq_s)
    if lc is not None:
        ell = xp.clip(ell, -lc, lc)
    out = formula(xp, ell)
    if c is not None:
        out = xp.clip(out, -c, c)
    return _finish(xp, out, out_dt)


def k1(logp, logq, *, clip=None, log_ratio_clip=None, validate: bool = True):
    """:func:`klpolicy.estimators.k1` for any array-API library."""
    return estimate(_estimates.k1_value, logp, logq, clip, log_ratio_clip, validate=validate)


def k2(logp, logq, *, clip=None, log_ratio_clip=None, validate: bool = True):
    """:func:`klpolicy.estimators.k2` for any array-API library."""
    return estimate(_estimates.k2_value, logp, logq, clip, log_ratio_clip, validate=validate)


def k3(logp, logq, *, clip=None, log_ratio_clip=None, validate: bool = True):
    """:func:`klpolicy.estimators.k3` for any array-API library."""
    return estimate(_estimates.k3_value, logp, logq, clip, log_ratio_clip, validate=validate)
