"""The input checks shared by the parts, and the words of every error message.

Every public function of klpolicy validates its arguments through the helpers
below (or a part's own checks built on them), so that the same mistake always
gets the same message: a ``ValueError`` that names the argument in backticks and
shows the bad value and where it is. Nothing is renormalised silently and no NaN is ever returned for bad input.

The helpers return arrays with the probability axis moved to the end, so that
the numerical code can always work along ``axis=-1``.

What lives here: the formatting of bad values (``format_value``, ``format_index``,
``first_index``, ``describe``), the generic checks (probabilities, rewards, ``beta``,
scalars in an interval, counts, KL budgets, flags, choices, seeds), and the checks of the
objects several parts share: token trees, sequence rewards, masks and log-probabilities
(the comment above them names every part that calls each). A check that only one part
needs lives in that part's ``_inputs`` module (``preference``, ``control``, ``behaviour``,
``estimators``, ``dynamics``), built on these helpers, so every message has the same words.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _lazy as special

__all__ = [
    "as_beta",
    "as_float_array",
    "as_positive_int",
    "as_positive_scalar",
    "as_probabilities",
    "as_rewards",
    "broadcast_pair",
    "check_beta_values",
    "normalise_axis",
    "result_dtype",
    "row_sum_tolerance",
]


def format_index(idx: tuple[int, ...]) -> str:
    """An index as the messages show it: ``(3,)``, ``(0, 2)``."""
    if len(idx) == 1:
        return f"({idx[0]},)"
    return "(" + ", ".join(str(int(i)) for i in idx) + ")"


def format_value(v: Any) -> str:
    """A bad number as the messages show it: six significant digits, ``nan``, ``inf``, ``-inf``."""
    v = float(v)
    if np.isnan(v):
        return "nan"
    if np.isinf(v):
        return "inf" if v > 0 else "-inf"
    return f"{v:.6g}"


def _fmt_sum(v: Any, tol: float) -> str:
    """A row sum with the digits it needs: 1.0000000200000001 rather than a rounded 1."""
    v = float(v)
    short = format_value(v)
    if not np.isfinite(v) or abs(float(short) - 1.0) > tol:
        return short
    return repr(v)


def first_index(mask: NDArray[np.bool_]) -> tuple[int, ...]:
    """The index of the first ``True`` of ``mask`` (C order), the entry a message names."""
    return tuple(int(i) for i in np.argwhere(mask)[0])


def describe(x: Any) -> str:
    """A short, bounded ``repr`` of a bad value for an error message (numpy scalars unwrapped)."""
    if isinstance(x, np.generic):
        x = x.item()
    r = repr(x)
    return r if len(r) <= 60 else f"{type(x).__name__} {r[:57]}..."


def as_float_array(name: str, x: ArrayLike) -> NDArray[np.floating]:
    """Convert ``x`` to a real floating array, refusing complex, object and empty input.

    Refused with a message naming ``name``: ``None``, strings, bools, complex
    numbers, objects, ragged nested lists and empty arrays.
    """
    if x is None or isinstance(x, (str, bytes)):
        raise ValueError(f"`{name}` must be an array of real numbers; got {describe(x)}")
    try:
        arr = np.asarray(x)
    except Exception:  # ragged lists and the like
        raise ValueError(
            f"`{name}` must be a rectangular array of real numbers; got a ragged or "
            f"malformed sequence {describe(x)}"
        ) from None
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.floating) or np.issubdtype(arr.dtype, np.integer)
    ):
        what = {"b": "bools", "c": "complex numbers", "U": "strings", "S": "bytes"}.get(
            arr.dtype.kind, "objects" if arr.dtype.kind == "O" else ""
        )
        raise ValueError(
            f"`{name}` must be an array of real numbers; got dtype {arr.dtype}"
            + (f" ({what})" if what else "")
        )
    if arr.size == 0:
        raise ValueError(f"`{name}` must not be empty; got shape {arr.shape}")
    if not np.issubdtype(arr.dtype, np.floating):
        arr = arr.astype(np.float64)
    return arr


def result_dtype(*arrays: NDArray) -> np.dtype:
    """float32 when every input is float32 (or narrower), float64 otherwise."""
    if all(a.dtype == np.float64 for a in arrays):
        return np.dtype(np.float64)
    dt = np.result_type(*[a.dtype for a in arrays], np.float32)
    if dt not in (np.float32, np.float64):
        dt = np.dtype(np.float64)
    return np.dtype(dt)


def row_sum_tolerance(dtype: np.dtype, n: int) -> float:
    """Tolerance for ``|sum(row) - 1|``: sqrt(eps) of the dtype, widened for long rows."""
    return row_sum_tolerance_for_eps(float(np.finfo(dtype).eps), n)


def row_sum_tolerance_for_eps(eps: float, n: int) -> float:
    """:func:`row_sum_tolerance` from the dtype's ``eps`` (for dtypes numpy lacks: bfloat16)."""
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
    # two reductions clear the common case (NaN propagates into both); only a bad array
    # pays for the elementwise masks that find and word the first offending entry
    if not (arr.min() >= 0 and arr.max() < np.inf):
        _raise_not_finite_non_negative(name, arr)
    if check_sum:
        n = arr.shape[ax]
        with np.errstate(over="ignore"):  # huge entries sum to inf: refused just below
            sums = arr.sum(axis=ax, dtype=np.float64)
        tol = row_sum_tolerance(arr.dtype, n)
        bad = np.abs(sums - 1.0) > tol
        if np.ndim(bad) == 0:
            if bad:
                raise ValueError(
                    f"`{name}` must sum to 1 along axis {axis}; it sums to {_fmt_sum(sums, tol)}"
                    f" (tolerance {tol:.2g}); klpolicy never renormalises silently"
                )
        elif bad.any():
            idx = first_index(bad)
            raise ValueError(
                f"`{name}` must sum to 1 along axis {axis}; row {format_index(idx)} sums to "
                f"{_fmt_sum(sums[idx], tol)} (tolerance {tol:.2g}); klpolicy never renormalises silently"
            )
    return np.moveaxis(arr, ax, -1)


def _raise_not_finite_non_negative(name: str, arr: NDArray) -> None:
    nan = np.isnan(arr)
    if nan.any():
        raise ValueError(
            f"`{name}` must not contain NaN; found nan at index {format_index(first_index(nan))}"
        )
    inf = np.isinf(arr)
    if inf.any():
        idx = first_index(inf)
        raise ValueError(
            f"`{name}` must be finite; found {format_value(arr[idx])} at index {format_index(idx)}"
        )
    neg = arr < 0
    if neg.any():
        idx = first_index(neg)
        raise ValueError(
            f"`{name}` must be non-negative; found {format_value(arr[idx])} at index {format_index(idx)}"
        )


def as_rewards(name: str, x: ArrayLike, axis: int = -1) -> NDArray[np.floating]:
    """Validate a finite real reward array and return it with ``axis`` moved last."""
    arr = as_float_array(name, x)
    if arr.ndim == 0:
        raise ValueError(f"`{name}` must have at least one dimension; got a scalar {arr.item()!r}")
    ax = normalise_axis(axis, arr.ndim, name)
    if not (np.isfinite(arr.min()) and np.isfinite(arr.max())):  # NaN propagates into both
        bad = ~np.isfinite(arr)
        idx = first_index(bad)
        raise ValueError(
            f"`{name}` must be finite; found {format_value(arr[idx])} at index {format_index(idx)}"
        )
    return np.moveaxis(arr, ax, -1)


def broadcast_pair(name_a: str, a: NDArray, name_b: str, b: NDArray) -> tuple[NDArray, NDArray]:
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
    b = check_beta_values(name, beta, allow_zero=allow_zero)
    if b.ndim == 0:
        return b.reshape((1,) * ndim)
    if b.ndim > ndim and axis != ndim - 1:
        raise ValueError(
            f"`{name}` has {b.ndim} dimensions but the problem has only {ndim}; got shape {b.shape}"
        )
    b = b.reshape((1,) * (ndim - b.ndim) + b.shape)
    ax = axis + (b.ndim - ndim)
    if b.shape[ax] != 1:
        raise ValueError(
            f"`{name}` must have size 1 along the probability axis (one beta per row); "
            f"got shape {np.shape(beta)}"
        )
    return b if ax == b.ndim - 1 else np.moveaxis(b, ax, -1)


def check_beta_values(
    name: str, beta: ArrayLike, *, allow_zero: bool = True
) -> NDArray[np.float64]:
    """Return ``beta`` as a float64 array after checking: not empty, no NaN, >= 0 (or > 0).

    ``inf`` is allowed (the reference limit). Bools, complex numbers, strings,
    ``None`` and ragged lists are refused by :func:`as_float_array`.
    """
    if isinstance(beta, (bool, np.bool_)):
        raise ValueError(f"`{name}` must be a real number or array; got {describe(beta)}")
    b = as_float_array(name, beta).astype(np.float64, copy=False)
    nan = np.isnan(b)
    if nan.any():
        where = "" if b.ndim == 0 else f" at index {format_index(first_index(nan))}"
        raise ValueError(f"`{name}` must not be NaN; found nan{where}")
    neg = (b < 0) if allow_zero else (b <= 0)
    if neg.any():
        where = "" if b.ndim == 0 else f" at index {format_index(first_index(neg))}"
        bad = b if b.ndim == 0 else b[first_index(neg)]
        kind = "non-negative" if allow_zero else "positive"
        raise ValueError(f"`{name}` must be {kind}; found {format_value(bad)}{where}")
    return b


# --------------------------------------------------------------------------------------
# Generic checkers: one real number in an interval, a count, a KL budget, a flag, a choice,
# a seed, a finite array, an array of counts
# --------------------------------------------------------------------------------------

#: Largest count accepted where a count sets a loop length or an allocation (steps,
#: rounds, sample sizes): larger values would run for days or exhaust memory.
MAX_LOOP_COUNT = 10**8
#: Largest count accepted where a count enters a closed form only (best-of-n's n):
#: every integer up to 2**53 is held exactly by a float64.
MAX_EXACT_COUNT = 2**53

_WORDS = {
    ("(", 0.0, np.inf, ")"): "a positive finite number",
    ("(", 0.0, np.inf, "]"): "a positive number",
    ("[", 0.0, np.inf, ")"): "a non-negative finite number",
    ("[", 0.0, np.inf, "]"): "a non-negative number (inf allowed)",
    ("(", -np.inf, np.inf, ")"): "a finite real number",
    ("(", 1.0, np.inf, ")"): "a finite number > 1",
}


def _parse_interval(interval: str) -> tuple[str, float, float, str]:
    left, right = interval[0], interval[-1]
    lo, hi = (float(t) for t in interval[1:-1].split(","))
    if left not in "([" or right not in ")]":
        raise AssertionError(f"bad interval spec {interval!r}")  # programming error
    return left, lo, hi, right


def _interval_words(interval: str) -> str:
    key = _parse_interval(interval)
    return _WORDS.get(key, f"a number in {interval}")


def as_scalar(name: str, x: Any, interval: str = "(-inf, inf)", *, what: str = "") -> float:
    """One real number inside ``interval`` (e.g. ``"(0, inf]"``), or a ValueError naming ``name``.

    The interval is written as in mathematics: ``"[0, 1)"`` includes 0 and
    excludes 1; an infinite end is allowed only when its bracket is closed
    (``"(0, inf]"`` takes ``inf``, ``"(0, inf)"`` does not). NaN, bools,
    complex numbers, strings, ``None`` and arrays of more than one element are
    refused. 0-d arrays and numpy scalars are accepted. ``what`` adds a few
    words on what the number means to the message.
    """
    left, lo, hi, right = _parse_interval(interval)
    words = _interval_words(interval) + (f" ({what})" if what else "")
    if isinstance(x, (bool, np.bool_)) or x is None or isinstance(x, (str, bytes, complex)):
        raise ValueError(f"`{name}` must be {words}; got {describe(x)}")
    if isinstance(x, np.ndarray) or hasattr(x, "__array__"):
        arr = np.asarray(x)
        if arr.ndim != 0 or arr.dtype.kind not in "iuf":
            raise ValueError(
                f"`{name}` must be {words}, a single number; got "
                + (f"an array of shape {arr.shape}" if arr.ndim else f"dtype {arr.dtype}")
            )
        x = arr.item()
    if not isinstance(x, numbers.Real):
        raise ValueError(f"`{name}` must be {words}; got {describe(x)}")
    try:
        v = float(x)
    except (OverflowError, TypeError, ValueError):
        raise ValueError(f"`{name}` must be {words}; got {describe(x)}") from None
    ok = (v > lo if left == "(" else v >= lo) and (v < hi if right == ")" else v <= hi)
    if not ok:  # also NaN
        raise ValueError(f"`{name}` must be {words}; got {describe(x)}")
    return v


def as_count(name: str, x: Any, *, lo: int = 1, hi: int = MAX_LOOP_COUNT) -> int:
    """One integer in ``[lo, hi]``; integral floats (``4.0``) are accepted, bools are not.

    ``hi`` bounds counts that set a loop length or an allocation
    (:data:`MAX_LOOP_COUNT`) so that ``2**63`` is refused at once instead of
    running forever; counts that only enter a closed form use :data:`MAX_EXACT_COUNT`.
    """
    words = f"an integer >= {lo}"
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x[()]
    if isinstance(x, (bool, np.bool_)) or not isinstance(x, numbers.Real):
        raise ValueError(f"`{name}` must be {words}; got {describe(x)}")
    if isinstance(x, numbers.Integral):
        v = int(x)
    else:
        f = float(x)
        if not (np.isfinite(f) and f.is_integer()):
            raise ValueError(f"`{name}` must be {words}; got {describe(x)}")
        v = int(f)
    if v < lo:
        raise ValueError(f"`{name}` must be {words}; got {describe(x)}")
    if v > hi:
        why = "(a loop length or an allocation that large would not finish)"
        if hi == MAX_EXACT_COUNT:
            raise ValueError(f"`{name}` must be at most 2**53 to be held exactly; got {v}")
        raise ValueError(f"`{name}` must be at most {hi:,} {why}; got {v}")
    return v


def as_kl_budget(name: str, x: Any, *, allow_inf: bool = False) -> NDArray[np.float64]:
    """A KL budget in nats: a scalar or a non-empty array of numbers ``>= 0``, no NaN.

    One meaning everywhere: a budget is a finite non-negative number of nats
    (0 means "stay at the reference"). ``allow_inf=True`` only where an
    infinite budget has a documented meaning: functions that return the best
    value *within* a budget (:func:`klpolicy.sequences.reward_ceiling`,
    :func:`klpolicy.retention.worst_case_drop`) clip a budget above the
    largest reachable KL to it, so ``inf`` there is the unconstrained (greedy)
    limit. Functions that return the coefficient that *spends* a budget
    (:func:`klpolicy.beta_for_kl`, :func:`klpolicy.best_of_n.best_of_n_for_kl`)
    refuse ``inf``.
    """
    words = ("a non-negative" if allow_inf else "a finite non-negative") + " number of nats"
    if isinstance(x, (bool, np.bool_)):
        raise ValueError(f"`{name}` must be {words}; got {describe(x)}")
    arr = as_float_array(name, x).astype(np.float64, copy=False)
    with np.errstate(invalid="ignore"):
        bad = np.isnan(arr) | (arr < 0)
    if not allow_inf:
        bad |= np.isinf(arr)
    if bad.any():
        if arr.ndim == 0:
            raise ValueError(f"`{name}` must be {words}; got {format_value(arr)}")
        idx = first_index(bad)
        raise ValueError(
            f"`{name}` must be {words}; got {format_value(arr[idx])} at index {format_index(idx)}"
        )
    return arr


def one_problem(*named: tuple[str, Any]) -> None:
    """Refuse a batch where one problem is expected, naming the argument that is not 1-D.

    ``named`` holds ``(name, value)`` pairs as the user passed them (``None`` skipped);
    checked before any broadcasting, so a 2-D ``reward`` is reported as ``reward``,
    not as the ``ref`` it was broadcast against. Ragged input is left to the
    validators that follow.
    """
    for name, x in named:
        if x is None:
            continue
        try:
            shape = np.shape(x)
        except ValueError:  # ragged: reported by the array validators
            continue
        if len(shape) > 1:
            raise ValueError(
                f"`{name}` must be one problem's 1-D array (shape (V,)); got shape {shape}"
            )


def as_bool(name: str, x: Any) -> bool:
    """A flag: ``True`` or ``False`` (numpy bools too), nothing else."""
    if isinstance(x, (bool, np.bool_)):
        return bool(x)
    raise ValueError(f"`{name}` must be True or False; got {describe(x)}")


def as_positive_scalar(name: str, x: Any, *, allow_inf: bool = False) -> float:
    """A single positive real number (e.g. a coefficient); ``inf`` only with ``allow_inf``."""
    return as_scalar(name, x, "(0, inf]" if allow_inf else "(0, inf)")


def as_positive_int(name: str, x: Any, *, hi: int = MAX_EXACT_COUNT) -> int:
    """A single integer >= 1 and <= ``hi``, refusing floats with a fractional part and bools."""
    return as_count(name, x, lo=1, hi=hi)


def as_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of a fixed set of strings, or a ValueError listing the valid ones."""
    if not isinstance(value, str) or value not in choices:
        valid = ", ".join(repr(c) for c in choices)
        raise ValueError(f"`{name}` must be one of {valid}; got {describe(value)}")
    return value


def as_rng(name: str, x: Any) -> np.random.Generator:
    """A numpy Generator from ``None``, a non-negative integer seed, a SeedSequence or a Generator.

    The library's one check of ``rng=`` / ``seed=`` arguments: anything else (a negative or
    fractional seed, a bool, a string, a seed of 2**128 or more) is refused naming ``name``,
    where numpy's own message ("expected non-negative integer") names nothing.
    """
    if x is None or isinstance(x, (np.random.Generator, np.random.SeedSequence)):
        return np.random.default_rng(x)
    if isinstance(x, np.ndarray) and x.ndim == 0:
        x = x[()]
    if isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_)):
        if 0 <= int(x) < 2**128:
            return np.random.default_rng(int(x))
    raise ValueError(
        f"`{name}` must be None, an integer seed in [0, 2**128) or a numpy.random.Generator; "
        f"got {describe(x)}"
    )


def as_finite_array(name: str, x: ArrayLike) -> NDArray[np.floating]:
    """A real array (scalars allowed) with no NaN and no infinities, e.g. log-probabilities."""
    arr = as_float_array(name, x)
    bad = ~np.isfinite(arr)
    if bad.any():
        if arr.ndim == 0:
            raise ValueError(f"`{name}` must be finite; got {format_value(arr)}")
        idx = first_index(bad)
        raise ValueError(
            f"`{name}` must be finite; found {format_value(arr[idx])} at index {format_index(idx)}"
        )
    return arr


def as_closed_interval(name: str, x: Any, hi: float = 1.0) -> float:
    """A single real number in ``[0, hi]`` (e.g. a label-smoothing probability, hi = 0.5)."""
    return as_scalar(name, x, f"[0, {hi:g}]")


def as_positive_int_array(name: str, x: Any) -> NDArray[np.float64]:
    """An integer >= 1 or an array of them, returned as exact float64 values (<= 2**53).

    Used for best-of-n sample counts. Floats are accepted only when they hold an
    integer value (``4.0``); bools, NaN, infinities and fractional values are
    refused, naming the first bad entry.
    """
    if isinstance(x, bool) or (isinstance(x, np.ndarray) and x.dtype == np.bool_):
        raise ValueError(f"`{name}` must be an integer >= 1; got {x!r}")
    try:
        arr = np.asarray(x)
    except Exception as exc:
        raise ValueError(
            f"`{name}` must be an integer >= 1 or an array of them; got {x!r}"
        ) from exc
    if arr.ndim == 0:
        return np.asarray(float(as_count(name, x, lo=1, hi=MAX_EXACT_COUNT)))
    if arr.size == 0:
        raise ValueError(f"`{name}` must not be empty; got shape {arr.shape}")
    if arr.dtype == np.bool_ or not (
        np.issubdtype(arr.dtype, np.integer) or np.issubdtype(arr.dtype, np.floating)
    ):
        raise ValueError(
            f"`{name}` must be an integer >= 1 or an array of them; got dtype {arr.dtype}"
        )
    is_int = np.issubdtype(arr.dtype, np.integer)
    with np.errstate(invalid="ignore"):
        bad = (arr < 1) if is_int else (~np.isfinite(arr) | (arr < 1) | (arr != np.round(arr)))
    if bad.any():
        idx = first_index(bad)
        shown = str(int(arr[idx])) if is_int else format_value(arr[idx])
        raise ValueError(
            f"`{name}` must be an integer >= 1; found {shown} at index {format_index(idx)}"
        )
    big = arr > 2**53
    if big.any():
        idx = first_index(big)
        raise ValueError(
            f"`{name}` must be at most 2**53 to be held exactly; found {arr[idx]!r} at "
            f"index {format_index(idx)}"
        )
    return arr.astype(np.float64)


# --------------------------------------------------------------------------------------
# Checks of the objects several parts share (each list of parts is every caller):
#   as_token_tree        dynamics, estimators, preference, sampling, sequences, torch
#   same_tree_shape      preference, sampling, sequences
#   as_sequence_rewards  dynamics, estimators, sequences, torch
#   as_mask              sampling, sequences
#   as_log_probs         core (_xp), estimators, sampling, sequences
#   as_optional_clip     core (_xp), estimators
# A check that only one part needs lives in that part's _inputs module instead.
# --------------------------------------------------------------------------------------


def _shape_str(shape: tuple[int, ...]) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


def as_token_tree(name: str, conditionals: Any) -> list[NDArray[np.floating]]:
    """Validate a token tree: a non-empty list whose ``t``-th array has shape ``(V,)*(t+1)``.

    Every array is checked by :func:`as_probabilities` under the name
    ``name[t]`` (so each conditional row must sum to one, also below
    prefixes of zero probability). Returns float arrays of one common dtype.
    """
    if isinstance(conditionals, np.ndarray) or not isinstance(conditionals, (list, tuple)):
        raise ValueError(
            f"`{name}` must be a non-empty list of arrays, conditionals[t] of shape (V,)*(t+1); "
            f"got {type(conditionals).__name__}"
        )
    if len(conditionals) == 0:
        raise ValueError(f"`{name}` must be a non-empty list of arrays; got an empty list")
    levels = []
    size = None
    for t, c in enumerate(conditionals):
        arr = as_float_array(f"{name}[{t}]", c)
        if t == 0:
            if arr.ndim != 1:
                raise ValueError(
                    f"`{name}[0]` must have shape (V,) (the first token's distribution); "
                    f"got shape {_shape_str(arr.shape)}"
                )
            size = arr.shape[0]
        want = (size,) * (t + 1)
        if arr.shape != want:
            raise ValueError(
                f"`{name}[{t}]` must have shape {_shape_str(want)} (vocabulary {size}, "
                f"position {t}); got shape {_shape_str(arr.shape)}"
            )
        levels.append(as_probabilities(f"{name}[{t}]", arr))
    dtype = result_dtype(*levels)
    return [lv.astype(dtype, copy=False) for lv in levels]


def same_tree_shape(name_a: str, a: list, name_b: str, b: list) -> None:
    """Two token trees must share the vocabulary size and the length."""
    va, ta, vb, tb = a[0].shape[0], len(a), b[0].shape[0], len(b)
    if (va, ta) != (vb, tb):
        raise ValueError(
            f"`{name_b}` must have the same vocabulary and length as `{name_a}`; "
            f"got V={vb}, T={tb} and V={va}, T={ta}"
        )


def as_sequence_rewards(name: str, x: ArrayLike, shape: tuple[int, ...], what: str) -> NDArray:
    """Finite real array of exactly ``shape`` (``what`` says what the shape means)."""
    arr = as_float_array(name, x)
    if arr.shape != shape:
        raise ValueError(
            f"`{name}` must have shape {_shape_str(shape)} ({what}); "
            f"got shape {_shape_str(arr.shape)}"
        )
    if not (np.isfinite(arr.min()) and np.isfinite(arr.max())):  # NaN propagates into both
        bad = ~np.isfinite(arr)
        idx = first_index(bad)
        raise ValueError(
            f"`{name}` must be finite; found {format_value(arr[idx])} at index {format_index(idx)}"
        )
    return arr


def as_mask(mask: Any, shape: tuple[int, ...]) -> NDArray[np.bool_]:
    """A (batch, T) mask of booleans or 0/1 numbers that keeps at least one token."""
    try:
        m = np.asarray(mask)
    except Exception as exc:
        raise ValueError(f"`mask` must be an array of booleans or 0/1; got {mask!r}") from exc
    if m.shape != shape:
        raise ValueError(
            f"`mask` must have shape (batch, T) = {_shape_str(shape)}; "
            f"got shape {_shape_str(m.shape)}"
        )
    if m.dtype != np.bool_:
        if not (np.issubdtype(m.dtype, np.integer) or np.issubdtype(m.dtype, np.floating)):
            raise ValueError(f"`mask` must be an array of booleans or 0/1; got dtype {m.dtype}")
        bad = (m != 0) & (m != 1)
        if bad.any():
            idx = first_index(bad)
            raise ValueError(
                f"`mask` must hold only booleans or 0/1; found {format_value(m[idx])} "
                f"at index {format_index(idx)}"
            )
        m = m == 1
    if not m.any():
        raise ValueError("`mask` must keep at least one token; it masks every token")
    return m


def as_log_probs(
    name: str,
    x: ArrayLike,
    *,
    allow_neg_inf: bool,
    keep: NDArray[np.bool_] | None = None,
    at_most_zero: bool = False,
) -> NDArray[np.floating]:
    """Validate an array of log-probabilities (or log-densities): no NaN, no ``+inf``.

    The one log-probability checker of klpolicy (per-sample estimators, logits,
    per-token diagnostics). ``-inf`` (probability zero) is refused unless
    ``allow_neg_inf`` (a sampled token had positive probability). By default
    values above zero are allowed: log-densities of continuous distributions
    can be positive; ``at_most_zero`` refuses values above ``sqrt(eps)``
    (log-probabilities of a discrete distribution).

    With ``keep`` (a ``(batch, T)`` mask) the array has shape ``(batch, T)`` or
    ``(batch, T, V)``, only kept positions are inspected (padding may hold
    anything), and full-vocabulary rows (3-D input) must have a log-sum-exp of
    zero within :func:`row_sum_tolerance`.
    """
    arr = as_float_array(name, x)
    if keep is None:
        k = np.ones(arr.shape, dtype=bool)
        full = False
    else:
        full = arr.ndim == 3
        k = np.broadcast_to(keep[..., None] if full else keep, arr.shape)
    nan = np.isnan(arr) & k
    if nan.any():
        where = "" if arr.ndim == 0 else f" at index {format_index(first_index(nan))}"
        raise ValueError(f"`{name}` must not contain NaN; found nan{where}")
    if at_most_zero:
        tol = float(np.sqrt(np.finfo(arr.dtype).eps))
        with np.errstate(invalid="ignore"):
            high = (arr > tol) & k
        if high.any():
            idx = first_index(high)
            raise ValueError(
                f"`{name}` must hold log-probabilities (<= 0); found {format_value(arr[idx])} "
                f"at index {format_index(idx)}"
            )
    bad = ((arr == np.inf) if allow_neg_inf else np.isinf(arr)) & k
    if bad.any():
        if arr.ndim == 0:
            val, where = arr[()], ""
        else:
            idx = first_index(bad)
            val, where = arr[idx], f" at index {format_index(idx)}"
        if keep is not None and not allow_neg_inf and val < 0:
            raise ValueError(
                f"`{name}` must be finite at sampled tokens (they had positive probability); "
                f"found -inf{where}"
            )
        what = "must not be +inf" if allow_neg_inf else "must be finite"
        raise ValueError(f"`{name}` {what}; found {format_value(val)}{where}")
    if full:
        lse = special.logsumexp(np.where(k, arr, 0.0), axis=-1)  # rows not kept are ignored below
        rtol = row_sum_tolerance(arr.dtype, arr.shape[-1])
        bad = (np.abs(lse) > rtol) & keep
        if bad.any():
            idx = first_index(bad)
            raise ValueError(
                f"`{name}` must be normalised along the vocabulary axis (log-sum-exp 0); row "
                f"{format_index(idx)} has log-sum-exp {format_value(lse[idx])} "
                f"(tolerance {rtol:.2g}); klpolicy never renormalises silently"
            )
    return arr


def as_optional_clip(name: str, x: Any) -> float | None:
    """``None`` (no clipping) or a positive number (``inf`` allowed)."""
    if x is None:
        return None
    return as_positive_scalar(name, x, allow_inf=True)
