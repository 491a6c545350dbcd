"""The one place that checks inputs and words the errors.

Every public function of klpolicy validates its arguments through the helpers
below, so that the same mistake always gets the same message: a ``ValueError``
that names the argument in backticks and shows the bad value and where it is.
Nothing is renormalised silently and no NaN is ever returned for bad input.

The helpers return arrays with the probability axis moved to the end, so that
the numerical code can always work along ``axis=-1``.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

__all__ = [
    "as_beta",
    "as_float_array",
    "as_positive_int",
    "as_positive_scalar",
    "as_probabilities",
    "as_rewards",
    "broadcast_pair",
    "normalise_axis",
    "result_dtype",
    "row_sum_tolerance",
]


def _fmt_index(idx: tuple[int, ...]) -> str:
    if len(idx) == 1:
        return f"({idx[0]},)"
    return "(" + ", ".join(str(int(i)) for i in idx) + ")"


def _fmt_value(v: Any) -> str:
    v = float(v)
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.6g}"


def _first(mask: NDArray[np.bool_]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def as_float_array(name: str, x: ArrayLike) -> NDArray[np.floating]:
    """Convert ``x`` to a real floating array, refusing complex, object and empty input."""
    try:
        arr = np.asarray(x)
    except Exception as exc:  # ragged lists and the like
        raise ValueError(f"`{name}` must be an array of real numbers; got {x!r}") from exc
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        raise ValueError(f"`{name}` must be an array of real numbers; got dtype {arr.dtype}")
    if arr.size == 0:
        raise ValueError(f"`{name}` must not be empty; got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    return arr


def result_dtype(*arrays: NDArray) -> np.dtype:
    """float32 when every input is float32 (or narrower), float64 otherwise."""
    dt = np.result_type(*[a.dtype for a in arrays], np.float32)
    if dt not in (np.float32, np.float64):
        dt = np.dtype(np.float64)
    return np.dtype(dt)


def row_sum_tolerance(dtype: np.dtype, n: int) -> float:
    """Tolerance for ``|sum(row) - 1|``: sqrt(eps) of the dtype, widened for long rows."""
    eps = float(np.finfo(dtype).eps)
    return max(float(np.sqrt(eps)), 4.0 * n * eps)


def normalise_axis(axis: Any, ndim: int, name: str = "ref") -> int:
    """Return ``axis`` as a non-negative int, or raise naming the array."""
    if isinstance(axis, bool) or not isinstance(axis, numbers.Integral):
        raise ValueError(f"`axis` must be an integer; got {axis!r}")
    axis = int(axis)
    if not -ndim <= axis < max(ndim, 1):
        raise ValueError(
            f"`axis` {axis} is out of bounds for `{name}` with {ndim} dimension"
            + ("" if ndim == 1 else "s")
        )
    return axis % max(ndim, 1)


def as_probabilities(
    name: str, x: ArrayLike, axis: int = -1, *, check_sum: bool = True
) -> NDArray[np.floating]:
    """Validate a probability array and return it with ``axis`` moved last.

    Checks: real dtype, at least one dimension, no NaN, no infinities, no
    negative entries, and (with ``check_sum``) every row summing to one
    within :func:`row_sum_tolerance`. The values are returned unchanged.
    """
    arr = as_float_array(name, x)
    if arr.ndim == 0:
        raise ValueError(f"`{name}` must have at least one dimension; got a scalar {arr.item()!r}")
    ax = normalise_axis(axis, arr.ndim, name)
    nan = np.isnan(arr)
    if nan.any():
        raise ValueError(f"`{name}` must not contain NaN; found nan at index {_fmt_index(_first(nan))}")
    inf = np.isinf(arr)
    if inf.any():
        idx = _first(inf)
        raise ValueError(
            f"`{name}` must be finite; found {_fmt_value(arr[idx])} at index {_fmt_index(idx)}"
        )
    neg = arr < 0
    if neg.any():
        idx = _first(neg)
        raise ValueError(
            f"`{name}` must be non-negative; found {_fmt_value(arr[idx])} at index {_fmt_index(idx)}"
        )
    if check_sum:
        n = arr.shape[ax]
        sums = arr.sum(axis=ax, dtype=np.float64)
        tol = row_sum_tolerance(arr.dtype, n)
        bad = np.abs(sums - 1.0) > tol
        if np.ndim(bad) == 0:
            if bad:
                raise ValueError(
                    f"`{name}` must sum to 1 along axis {axis}; it sums to {_fmt_value(sums)}"
                    f" (tolerance {tol:.2g}); klpolicy never renormalises silently"
                )
        elif bad.any():
            idx = _first(bad)
            raise ValueError(
                f"`{name}` must sum to 1 along axis {axis}; row {_fmt_index(idx)} sums to "
                f"{_fmt_value(sums[idx])} (tolerance {tol:.2g}); klpolicy never renormalises silently"
            )
    return np.moveaxis(arr, ax, -1)


def as_rewards(name: str, x: ArrayLike, axis: int = -1) -> NDArray[np.floating]:
    """Validate a finite real reward array and return it with ``axis`` moved last."""
    arr = as_float_array(name, x)
    if arr.ndim == 0:
        raise ValueError(f"`{name}` must have at least one dimension; got a scalar {arr.item()!r}")
    ax = normalise_axis(axis, arr.ndim, name)
    bad = ~np.isfinite(arr)
    if bad.any():
        idx = _first(bad)
        raise ValueError(
            f"`{name}` must be finite; found {_fmt_value(arr[idx])} at index {_fmt_index(idx)}"
        )
    return np.moveaxis(arr, ax, -1)


def broadcast_pair(
    name_a: str, a: NDArray, name_b: str, b: NDArray
) -> tuple[NDArray, NDArray]:
    """Broadcast two arrays whose last axis is the probability axis.

    The last axes must match exactly; only the batch axes broadcast.
    """
    if a.shape[-1] != b.shape[-1]:
        raise ValueError(
            f"`{name_b}` must have the same size as `{name_a}` along the probability axis; "
            f"got {b.shape[-1]} and {a.shape[-1]}"
        )
    try:
        return tuple(np.broadcast_arrays(a, b))  # type: ignore[return-value]
    except ValueError:
        raise ValueError(
            f"the batch shapes of `{name_a}` {a.shape[:-1]} and `{name_b}` {b.shape[:-1]} "
            "do not broadcast"
        ) from None


def as_beta(
    beta: ArrayLike, ndim: int, axis: int, *, name: str = "beta", allow_zero: bool = True
) -> NDArray[np.float64]:
    """Validate ``beta`` and shape it to broadcast against a last-axis array of ``ndim`` dims.

    ``beta`` may be a scalar or an array that broadcasts against the batch axes
    of the probability array, with size 1 along ``axis`` (e.g. shape ``(B, 1)``
    for a ``(B, V)`` problem). When ``axis`` is the last axis, ``beta`` may have
    extra leading dimensions, which become batch axes (``(B, 1)`` against a
    single row gives ``B`` rows). ``axis`` must already be non-negative. Zero and ``inf`` are allowed (the greedy and the
    reference limits); negative values and NaN are not.
    """
    try:
        b = np.asarray(beta, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"`{name}` must be a real number or array; got {beta!r}") from exc
    if b.size == 0:
        raise ValueError(f"`{name}` must not be empty; got shape {b.shape}")
    nan = np.isnan(b)
    if nan.any():
        where = "" if b.ndim == 0 else f" at index {_fmt_index(_first(nan))}"
        raise ValueError(f"`{name}` must not be NaN; found nan{where}")
    neg = (b < 0) if allow_zero else (b <= 0)
    if neg.any():
        where = "" if b.ndim == 0 else f" at index {_fmt_index(_first(neg))}"
        bad = b if b.ndim == 0 else b[_first(neg)]
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"`{name}` must be {kind}; found {_fmt_value(bad)}{where}")
    if b.ndim == 0:
        return b.reshape((1,) * ndim)
    if b.ndim > ndim and axis != ndim - 1:
        raise ValueError(
            f"`{name}` has {b.ndim} dimensions but the problem has only {ndim}; "
            f"got shape {b.shape}"
        )
    b = b.reshape((1,) * (ndim - b.ndim) + b.shape)
    ax = axis + (b.ndim - ndim)
    if b.shape[ax] != 1:
        raise ValueError(
            f"`{name}` must have size 1 along the probability axis (one beta per row); "
            f"got shape {np.shape(beta)}"
        )
    return np.moveaxis(b, ax, -1)


def as_positive_scalar(name: str, x: Any, *, allow_inf: bool = False) -> float:
    """A single positive real number (e.g. a KL target or a coefficient)."""
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise ValueError(f"`{name}` must be a positive number; got {x!r}") from None
    if np.isnan(v) or v <= 0 or (np.isinf(v) and not allow_inf):
        raise ValueError(f"`{name}` must be a positive{'' if allow_inf else ' finite'} number; got {x!r}")
    return v


def as_positive_int(name: str, x: Any) -> int:
    """A single integer >= 1, refusing floats with a fractional part and bools."""
    if isinstance(x, bool):
        raise ValueError(f"`{name}` must be an integer >= 1; got {x!r}")
    if isinstance(x, numbers.Integral):
        v = int(x)
    elif isinstance(x, numbers.Real) and float(x).is_integer():
        v = int(x)
    else:
        raise ValueError(f"`{name}` must be an integer >= 1; got {x!r}")
    if v < 1:
        raise ValueError(f"`{name}` must be an integer >= 1; got {x!r}")
    return v


# ---------------------------------------------------------------------------
# klpolicy.estimators: log-probabilities, estimator names, placements
# ---------------------------------------------------------------------------

ESTIMATORS = ("k1", "k2", "k3", "abs")
PLACEMENTS = ("reward", "loss")


def as_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of a fixed set of strings, or a ValueError listing the valid ones."""
    if not isinstance(value, str) or value not in choices:
        valid = ", ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}` must be one of {valid}; got {value!r}")
    return value


def as_log_probs(name: str, x: ArrayLike, *, allow_neg_inf: bool) -> NDArray[np.floating]:
    """Validate an array of log-probabilities (or log-densities): no NaN, no +inf.

    ``-inf`` (probability zero) is refused unless ``allow_neg_inf``. Values above
    zero are allowed: log-densities of continuous distributions can be positive.
    """
    arr = as_float_array(name, x)
    nan = np.isnan(arr)
    if nan.any():
        where = "" if arr.ndim == 0 else f" at index {_fmt_index(_first(nan))}"
        raise ValueError(f"`{name}` must not contain NaN; found nan{where}")
    bad = (arr == np.inf) if allow_neg_inf else np.isinf(arr)
    if bad.any():
        if arr.ndim == 0:
            val, where = arr[()], ""
        else:
            idx = _first(bad)
            val, where = arr[idx], f" at index {_fmt_index(idx)}"
        what = "must not be +inf" if allow_neg_inf else "must be finite"
        raise ValueError(f"`{name}` {what}; found {_fmt_value(val)}{where}")
    return arr


def as_normalised_log_probs(name: str, x: ArrayLike, axis: int = -1) -> NDArray[np.floating]:
    """Full log-probability vectors along ``axis`` (``-inf`` allowed) whose rows sum to one.

    Returned with ``axis`` moved last; the tolerance on ``|logsumexp|`` is the
    one :func:`row_sum_tolerance` gives for the row sums.
    """
    arr = as_log_probs(name, x, allow_neg_inf=True)
    if arr.ndim == 0:
        raise ValueError(f"`{name}` must have at least one dimension; got a scalar {arr.item()!r}")
    ax = normalise_axis(axis, arr.ndim, name)
    arr = np.moveaxis(arr, ax, -1)
    with np.errstate(divide="ignore", over="ignore"):
        m = np.max(arr, axis=-1, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        lse = np.log(np.sum(np.exp(arr - m), axis=-1)) + m[..., 0]
    tol = row_sum_tolerance(arr.dtype, arr.shape[-1])
    bad = ~(np.abs(lse) <= tol)
    if np.ndim(bad) == 0:
        if bad:
            raise ValueError(
                f"`{name}` must be normalised along axis {axis} (logsumexp 0); "
                f"its logsumexp is {_fmt_value(lse)} (tolerance {tol:.2g})"
            )
    elif bad.any():
        idx = _first(bad)
        raise ValueError(
            f"`{name}` must be normalised along axis {axis} (logsumexp 0); row "
            f"{_fmt_index(idx)} has logsumexp {_fmt_value(lse[idx])} (tolerance {tol:.2g})"
        )
    return arr


def as_optional_clip(name: str, x: Any) -> float | None:
    """``None`` (no clipping) or a positive number (``inf`` allowed)."""
    if x is None:
        return None
    return as_positive_scalar(name, x, allow_inf=True)
