r"""The closed form written once against the Python array API: torch, JAX, CuPy (and numpy).

:func:`klpolicy.optimal_policy` and its siblings hand numpy input to the
blocked fast path of :mod:`klpolicy.core._tilt`. Any other array library that
`array-api-compat <https://data-apis.org/array-api-compat/>`_ recognises
(torch tensors on any device, JAX arrays, CuPy arrays) comes here, and runs
the same careful algorithm as the numpy core's :func:`klpolicy.core._tilt._tilt_careful`,
expressed with array-API operations only:

* the tilt relative to the best reward **on the reference's support**
  ``c``: ``z = (r - c) / beta <= 0``; the log-partition as
  ``log1p(sum(ref * expm1(z)) / sum(ref))`` when that sum is above -1/2 and as
  ``log(sum(ref * exp(z)) / sum(ref))`` otherwise;
* the soft value re-centred on the reference mean at large ``beta``
  (``m + beta log1p(E[expm1mx(x)] + E[x])``, ``x = (r - m) / beta``);
* the KL of the optimum summed from non-negative terms with the log-ratio
  centred on the optimum's mode (exact when the KL is 1e-34);
* the greedy (``beta = 0``) and reference (``beta = inf``) limits; the
  reference's zeros stay exactly zero.

Results come back in the caller's array type, device and dtype; float16 and
bfloat16 are computed in float32 and returned in their own dtype.

Gradients
---------
Every branch is computed on *safe inputs*: entries that a ``where`` will
discard are replaced before the operation that could overflow or divide by
zero (``0 * inf = nan`` never appears in a backward pass). The best reward
``c`` and the mode's reward are constants for autograd (the result does not
depend on them: their derivatives cancel exactly, but as ``1/beta - 1/beta``,
which is ``inf - inf`` for a subnormal ``beta``). Entries whose weight
``exp((r - c) / beta)`` is below ``exp(-10^4)`` (zero in any float format) get
the constant log-weight ``-10^4``: their gradient is zero, as it is exactly.

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

from . import _validation as V
from ._tilt import _NO_SHIFT, _RANGE, _value_resolved

# Log-weights below -_DEAD are replaced by -_DEAD: exp(-1e4) is zero in every float format,
# while a reference entry is at least 5e-324 (log > -745), so nothing representable is lost.
_DEAD = 1.0e4
_SERIES_RADIUS = 0.2
_EXPM1MX = [1.0 / math.factorial(k) for k in range(2, 18)]  # exp(x) - 1 - x
_KLUNIT = [(k - 1) / math.factorial(k) for k in range(2, 18)]  # u e^u - e^u + 1

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


def _stop(x):
    """``x`` without gradient (torch: detach; JAX: stop_gradient; others: itself)."""
    import array_api_compat as aac

    if aac.is_torch_array(x):
        return x.detach()
    if aac.is_jax_array(x):
        import jax

        return jax.lax.stop_gradient(x)
    return x


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


def _device(template):
    import array_api_compat as aac

    return None if template is None else aac.device(template)


def _const(xp, value: float, like):
    """A 0-d array of ``like``'s dtype on its device."""
    return xp.asarray(value, dtype=like.dtype, device=_device(like))


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
            f"`{name}` must sum to 1 along axis {user_axis}; it sums to {V._fmt_value(sums_h)}"
            f" (tolerance {tol:.2g}); klpolicy never renormalises silently"
        )
    idx = V._first(bad)
    raise ValueError(
        f"`{name}` must sum to 1 along axis {user_axis}; row {V._fmt_index(idx)} sums to "
        f"{V._fmt_value(sums_h[idx])} (tolerance {tol:.2g}); klpolicy never renormalises silently"
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


# --------------------------------------------------------------------------- numerics


def _horner_x2(xp, x, coeffs):
    """x^2 * sum_j coeffs[j] x^j."""
    acc = xp.zeros_like(x) + coeffs[-1]
    for c in coeffs[-2::-1]:
        acc = acc * x + c
    return acc * x * x


def _expm1mx(xp, x):
    """``exp(x) - 1 - x`` to a few ulp (series for |x| < 0.2, on safe inputs)."""
    small = xp.abs(x) < _SERIES_RADIUS
    xs = xp.where(small, x, xp.zeros_like(x))
    return xp.where(small, _horner_x2(xp, xs, _EXPM1MX), xp.expm1(x) - x)


def _kl_terms(xp, p, q, u):
    """``q * kl_unit(u) = p (u - 1) + q >= 0`` with the series where |u| < 0.2 (u finite)."""
    small = xp.abs(u) < _SERIES_RADIUS
    us = xp.where(small, u, xp.zeros_like(u))
    return xp.where(small, q * _horner_x2(xp, us, _KLUNIT), p * (u - 1) + q)


def _exp_limit(xp, dtype) -> float:
    """Largest argument with exp() comfortably finite: 707 in float64, 86 in float32."""
    return math.floor(math.log(float(xp.finfo(dtype).max))) - 2.0


def _may_need_grad(*xs) -> bool:
    """False when no argument can carry a gradient (numpy, CuPy, torch without grad)."""
    import array_api_compat as aac

    for x in xs:
        if aac.is_torch_array(x):
            if x.requires_grad:
                import torch

                if torch.is_grad_enabled():
                    return True
        elif aac.is_jax_array(x):
            return True  # a tracer may be differentiated: keep the scaled form
    return False


def _div(xp, num, beta):
    """``num / beta`` (``beta > 0``) whose derivative in ``beta`` never forms ``beta**2``.

    Numerator and denominator are scaled by two constant powers of two ``p1 p2 ~ 1/beta``
    (exact: the quotient is the same float), so autograd differentiates ``n' / m`` with
    ``m = beta p1 p2`` in [1, 2): JAX's ``-x * y**-2`` and torch's ``(x / y) / y`` stay
    finite (and zero where the incoming gradient is zero) even for ``beta = 1e-310``.
    """
    if not _may_need_grad(num, beta):
        return num / beta  # the same float: the scaling matters only to the derivative
    b = _stop(beta)
    e = xp.floor(xp.log2(b))
    e1 = xp.floor(e * 0.5)
    p1 = xp.pow(_const(xp, 2.0, b), -e1)
    p2 = xp.pow(_const(xp, 2.0, b), -(e - e1))
    return ((num * p1) * p2) / ((beta * p1) * p2)


def _scaled_diff(xp, a, b, beta, dead):
    """``(a - b) / beta`` with ``-_DEAD`` where it is below that or where ``dead`` is set.

    ``a - b`` may overflow (rewards of 1e308): those entries are computed as
    ``(a/2 - b/2) / beta * 2``. The discarded entries are zeroed *before* the
    division, so neither value nor gradient sees an infinity.
    """
    diff = a - b
    big = xp.isinf(diff)
    half = a * 0.5 - b * 0.5
    num = xp.where(big, half, diff)
    scale = xp.where(big, _const(xp, 2.0, a), _const(xp, 1.0, a))
    raw = (_stop(num) / _stop(beta)) * scale
    drop = (raw < -_DEAD) | dead
    num = xp.where(drop, xp.zeros_like(num), num)
    return xp.where(drop, _const(xp, -_DEAD, a), _div(xp, num, beta) * scale)


def _expm1_sum(xp, q, z, w, total):
    """``sum(q * expm1(z)) / total`` whose gradient is that of ``sum(w) / total``, w = q e^z.

    ``expm1``'s derivative is formed as ``expm1(z) + 1`` by torch and JAX: 0 once
    ``expm1(z)`` rounds to -1 (z < -37), where the true ``e^z`` (1e-22 at z = -50) still
    carries the gradient of an unlikely outcome. Forward value from expm1, gradient from exp.
    """
    s = xp.sum(q * xp.expm1(z), axis=-1, keepdims=True) / total
    e = xp.sum(w, axis=-1, keepdims=True) / total
    return _stop(s) + (e - _stop(e))


def _safe_exp_times(xp, q, u, limit):
    """``q * exp(u)`` for ``q >= 0``; as ``exp(log q + u)`` where ``exp(u)`` would overflow."""
    big = u >= limit
    zero = xp.zeros_like(u)
    lo = q * xp.exp(xp.where(big, zero, u))
    q_hi = xp.where(big, q, xp.ones_like(q))
    hi = xp.exp(xp.log(q_hi) + xp.where(big, u, zero))
    return xp.where(big, hi, lo), big


def _mode_log_ratio(xp, q, r, beta, total, pi, support):
    """``u = log(pi*/ref_n)`` centred on each row's mode (see klpolicy.core._tilt._mode_log_ratio).

    Returns ``(u, is_mode, pi_mode, value)``: also a mask of each row's mode, its
    probability as a quotient (``ref_k / sum(ref e^d)``, or ``ref_n_k / (1 + S)``) and the
    soft value anchored on the mode, ``r_k + beta log1p(S)``. ``r_k`` enters as a constant
    (the gradient reaches it through ``d_k``), so ``dV/dr = pi`` and ``dV/dbeta = -KL``.
    """
    dt = q.dtype
    k = xp.argmax(_stop(pi), axis=-1, keepdims=True)
    rk = xp.take_along_axis(_stop(r), k, axis=-1)
    d = _scaled_diff(xp, r, rk, beta, ~support)
    limit = _exp_limit(xp, dt)
    w, big = _safe_exp_times(xp, q, d, limit)
    d_lo = xp.where(big, xp.zeros_like(d), d)
    term = xp.where(big, w, q * xp.expm1(d_lo))
    s = xp.sum(term, axis=-1, keepdims=True) / total
    e = xp.sum(w, axis=-1, keepdims=True) / total
    s = _stop(s) + (e - _stop(e))  # expm1's gradient, from exp (see _expm1_sum)
    far = s <= -0.5  # the mode holds little reference mass
    near_s = xp.where(far, xp.zeros_like(s), s)
    w_sum = xp.sum(w, axis=-1, keepdims=True)
    log_zk = xp.where(far, xp.log(w_sum / total), xp.log1p(near_s))
    # a mode on a reference entry below tiny / eps: the weights beside it are subnormal;
    # sum them relative to ref_k in log space (see klpolicy.core._tilt._mode_log_ratio)
    qk = xp.take_along_axis(q, k, axis=-1)
    fi = xp.finfo(dt)
    low = far & (_stop(qk) < float(fi.smallest_normal) / float(fi.eps))
    # ref_k enters the shift as a constant: log Z_k = log ref_k + log sum e^a then has the
    # exact gradient in every ref_i (e^{d_i} / sum(ref e^d)), without 1/ref_k - 1/ref_k
    one = xp.ones_like(qk)
    log_qk = xp.log(_stop(xp.where(low, qk, one)))  # select, then take logs
    keep = low & support
    a = xp.where(keep, d, xp.zeros_like(d)) + (xp.log(xp.where(keep, q, xp.ones_like(q))) - log_qk)
    w_rel = xp.where(keep, xp.exp(xp.where(keep, a, xp.zeros_like(a))), xp.zeros_like(a))
    s_rel = xp.sum(w_rel, axis=-1, keepdims=True)  # >= 1 on the rows used (the mode's 1)
    s_rel = xp.where(low, s_rel, one)
    log_zk = xp.where(low, log_qk - xp.log(total) + xp.log(s_rel), log_zk)
    u = xp.where(support, d - log_zk, xp.zeros_like(d))
    # w_k = ref_k e^{d_k} is ref_k in value (d_k = 0) and carries d_k's gradient (r_k enters
    # every d_j, but through rk only as a constant: see the module docstring)
    wk = xp.take_along_axis(w, k, axis=-1)
    # _div: JAX differentiates x / y as -x * y**-2, which overflows for w_sum ~ 1e-300
    pi_k = xp.where(far, _div(xp, wk, w_sum), (wk / total) / (1 + near_s))
    # 1 in value (a_k = 0), with d_k's gradient, as w_k above
    pi_k = xp.where(low, xp.take_along_axis(w_rel, k, axis=-1) / s_rel, pi_k)
    is_mode = xp.arange(q.shape[-1], device=_device(q)) == k
    return u, is_mode, pi_k, rk + beta * log_zk


def _tilt(xp, ref, reward, beta, want, limits=True):
    """pi*_beta and the statistics in ``want`` ("pi", "value", "kl", "mean", "max_kl").

    ``ref``, ``reward``: (..., n) one float dtype; ``beta``: (..., 1), >= 0, inf allowed.
    Discarded branches may overflow in the forward pass (never in a selected value or a
    gradient); numpy's warnings about them are silenced.
    """
    with np.errstate(all="ignore"):
        return _tilt_body(xp, ref, reward, beta, want, limits)


def _tilt_body(xp, ref, reward, beta, want, limits):
    """The kernel; ``limits=False`` when ``beta`` is known (on the host) to be finite and > 0:
    the greedy and reference branches, which every row would discard, are not computed."""
    zero_t = xp.zeros_like(ref)
    one_b = xp.ones_like(beta)
    neg_inf = _const(xp, -math.inf, ref)
    support = ref > 0
    total = xp.sum(ref, axis=-1, keepdims=True)
    ref_n = ref / total
    c = xp.max(xp.where(support, _stop(reward), neg_inf), axis=-1, keepdims=True)
    out = {}
    if limits or want == {"max_kl"}:
        zero = beta == 0
        inf = xp.isinf(beta)
        beta_s = xp.where(~(zero | inf), beta, one_b)
    else:
        beta_s = beta

    if not limits and want != {"max_kl"}:
        return _finite_rows(xp, ref, reward, beta_s, want, support, total, ref_n, c)
    # beta = 0: all mass on the best rewards inside the support, split as ref
    best = support & (reward == c)
    rest = xp.sum(xp.where(best, zero_t, ref), axis=-1, keepdims=True) / total
    best_mass = xp.sum(xp.where(best, ref, zero_t), axis=-1, keepdims=True)
    low_rest = rest < 0.5
    greedy_log_mass = xp.where(
        low_rest,
        xp.log1p(-xp.where(low_rest, rest, xp.zeros_like(rest))),
        xp.log(best_mass / total),
    )
    if want == {"max_kl"}:
        return {"max_kl": -greedy_log_mass}
    pi0 = _div(xp, xp.where(best, ref, zero_t), best_mass)  # select, then divide
    f = _finite_rows(xp, ref, reward, beta_s, want, support, total, ref_n, c)
    out["pi"] = pi = xp.where(zero, pi0, xp.where(inf, ref_n, f["pi"]))
    if "value" in want:
        # beta = 0: the best reward on the support, with the greedy policy as its gradient
        v0 = c + xp.sum(pi0 * xp.where(best, reward - c, zero_t), axis=-1, keepdims=True)
        out["value"] = xp.where(zero, v0, xp.where(inf, f["m"], f["value"]))
    if "mean" in want:
        out["mean"] = xp.sum(pi * reward, axis=-1, keepdims=True)
    if "kl" in want:
        kl = f["kl"]
        out["kl"] = xp.where(zero, -greedy_log_mass, xp.where(inf, xp.zeros_like(kl), kl))
    return out


def _finite_rows(xp, ref, reward, beta_s, want, support, total, ref_n, c):
    """pi, soft value (and the reference mean m), KL at a finite positive ``beta_s``."""
    dt = ref.dtype
    zero_t = xp.zeros_like(ref)
    out = {}
    z = _scaled_diff(xp, reward, c, beta_s, ~support)  # <= 0; -_DEAD off the support
    w = ref * xp.exp(z)
    s = _expm1_sum(xp, ref, z, w, total)
    low = s <= -0.5
    direct = xp.log(xp.sum(w, axis=-1, keepdims=True) / total)
    log_z = xp.where(low, direct, xp.log1p(xp.where(low, xp.zeros_like(s), s)))
    limit = _exp_limit(xp, dt)
    pi, _ = _safe_exp_times(xp, ref_n, z - log_z, limit)
    out["pi"] = pi
    if want & {"pi", "mean", "kl", "value"}:
        # u centred on the mode of pi, so that d = (r - r_mode) / beta_s stays below ~745
        # and the weights ref e^d <= ref_mode do not underflow where the mode sits far below
        # the best reward; pi from that u (the KL below keeps this pi, which matches u),
        # and the mode's probability as a quotient, not exp of a large log-ratio (a mode
        # of 1 - 5e-135 on a reference entry of 1e-300 is 1.0, not 1 - 2e-14).
        u, is_mode, pi_k, v_mode = _mode_log_ratio(xp, ref, reward, beta_s, total, pi, support)
        pi, _ = _safe_exp_times(xp, ref_n, u, limit)
        out["pi"] = xp.where(is_mode & (pi_k > 0) & (pi_k <= 1), pi_k, pi)

    if "value" in want:
        value = v_mode  # anchored on the mode of pi (see _mode_log_ratio)
        # large beta: re-centre on the reference mean m (no cancellation between m and
        # the O(Var / beta) correction)
        m = xp.sum(ref_n * reward, axis=-1, keepdims=True)
        x_raw = _scaled_diff(xp, _stop(reward), _stop(m), _stop(beta_s), ~support)
        near = xp.max(xp.where(support, xp.abs(x_raw), zero_t), axis=-1, keepdims=True) < 1
        keep = near & support
        x = _div(xp, xp.where(keep, reward - m, zero_t), beta_s)
        e1 = xp.sum(ref_n * _expm1mx(xp, x), axis=-1, keepdims=True)
        e1 = xp.where(near, e1, xp.zeros_like(e1))
        # E_ref[x] is 0 in exact arithmetic (m = E_ref[r]) and only the rounding of m: the
        # value keeps it, the gradient is that of m + beta log1p(e1), where it would
        # otherwise swamp dV/dbeta = -KL ~ -Var / (2 beta^2)
        mean_x = xp.where(near, xp.sum(ref_n * x, axis=-1, keepdims=True), xp.zeros_like(e1))
        v_near = m + beta_s * xp.log1p(e1 + mean_x)
        g_near = m + beta_s * xp.log1p(e1)
        v_near = _stop(v_near) + (g_near - _stop(g_near))
        out["value"] = xp.where(near, v_near, value)
        out["m"] = m
    if "mean" in want:
        out["mean"] = xp.sum(out["pi"] * reward, axis=-1, keepdims=True)
    if "kl" in want:
        terms = xp.where(support, _kl_terms(xp, pi, ref_n, u), zero_t)
        out["kl"] = xp.sum(terms, axis=-1, keepdims=True)
    return out


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
    size = xp.finfo(dt).bits // 8
    low = _RANGE[size][0]
    qmin = xp.astype(xp.min(q, axis=-1, keepdims=True), dt)
    rmax = xp.astype(xp.max(r, axis=-1, keepdims=True), dt)
    rmin = xp.astype(xp.min(r, axis=-1, keepdims=True), dt)
    ib = 1.0 / b
    pos = qmin > 0
    log_q = xp.log(xp.where(pos, qmin, xp.ones_like(qmin)))
    spread = (rmax - rmin) * ib  # NaN or inf for invalid rewards: every flag below is False
    mag = xp.maximum(xp.abs(rmax), xp.abs(rmin)) * ib
    flags = [
        xp.all(pos & (mag <= _NO_SHIFT[size]) & (log_q + rmin * ib > low)),
        xp.all(pos & (log_q - spread > low)),
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
    size = xp.finfo(dt).bits // 8
    low, high = _RANGE[size]
    q_in = q
    q = xp.astype(q, dt, copy=False)
    r = xp.astype(r, dt, copy=False)
    qmin = xp.min(q, axis=-1, keepdims=True)
    rmax = xp.max(r, axis=-1, keepdims=True)
    rmin = xp.min(r, axis=-1, keepdims=True)
    ib = 1.0 / b
    pos = qmin > 0
    log_q = xp.log(xp.where(pos, qmin, xp.ones_like(qmin)))
    mag = xp.maximum(xp.abs(rmax), xp.abs(rmin)) * ib
    c = xp.where(mag <= _NO_SHIFT[size], xp.zeros_like(rmax), _stop(rmax))
    lo, hi = (rmin - c) * ib, (rmax - c) * ib  # NaN for invalid rewards: every flag False
    ok = pos & (log_q + lo > low) & (hi - lo >= 2.0)
    ok = ok & (hi + math.log(q.shape[-1]) < high)
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


def estimate(name: str, logp, logq, clip=None, log_ratio_clip=None, *, validate: bool = True):
    """The per-sample estimator ``name`` ("k1", "k2", "k3", "abs") on any array-API arrays."""
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
    fin = xp.isfinite(ell)
    ell_s = xp.where(fin, ell, xp.zeros_like(ell))
    if name == "k1":
        out = ell
    elif name == "k2":
        out = xp.where(fin, 0.5 * ell_s * ell_s, ell)
    elif name == "k3":
        # expm1mx(-ell): +inf log-ratio gives exp(-inf) - 1 + inf = inf
        out = xp.where(fin, _expm1mx(xp, -ell_s), ell)
    else:
        out = xp.abs(ell)
    if c is not None:
        out = xp.clip(out, -c, c)
    return _finish(xp, out, out_dt)


def k1(logp, logq, *, clip=None, log_ratio_clip=None, validate: bool = True):
    """:func:`klpolicy.estimators.k1` for any array-API library."""
    return estimate("k1", logp, logq, clip, log_ratio_clip, validate=validate)


def k2(logp, logq, *, clip=None, log_ratio_clip=None, validate: bool = True):
    """:func:`klpolicy.estimators.k2` for any array-API library."""
    return estimate("k2", logp, logq, clip, log_ratio_clip, validate=validate)


def k3(logp, logq, *, clip=None, log_ratio_clip=None, validate: bool = True):
    """:func:`klpolicy.estimators.k3` for any array-API library."""
    return estimate("k3", logp, logq, clip, log_ratio_clip, validate=validate)
