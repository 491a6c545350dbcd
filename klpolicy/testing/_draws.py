"""Private kernels of the strategies: bounds checking and direct, shrink-friendly draws.

Strategy objects are built once and cached (building one inside a draw is slow:
hypothesis computes its label from source code), and arrays that belong
together (a reference and its reward, p and q) are drawn row by row, so that
the shrinker deletes whole outcomes.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from hypothesis import errors
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy
from numpy.typing import NDArray


class InvalidArgument(errors.InvalidArgument, ValueError):
    """An impossible or malformed bound: a hypothesis ``InvalidArgument`` and a ``ValueError``."""


# --------------------------------------------------------------------------- bounds

_SMALL_ORDER = (0, 1, -1, 2, -2, 3, -3, 4, -4, 5, -5)


@functools.lru_cache(maxsize=512)
def _ints(a: int, b: int) -> SearchStrategy[int]:
    return st.integers(a, b)


@functools.lru_cache(maxsize=512)
def _floats(a: float, b: float) -> SearchStrategy[float]:
    return st.floats(a, b, allow_nan=False, allow_infinity=False)


@functools.lru_cache(maxsize=512)
def _sampled(values: tuple) -> SearchStrategy:
    return st.sampled_from(values)


def _is_strategy(x: Any) -> bool:
    return isinstance(x, SearchStrategy)


def _check_int(name: str, v: Any, lo: int = 1) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise InvalidArgument(f"`{name}` must be an integer or a strategy; got {v!r}")
    if v < lo:
        raise InvalidArgument(f"`{name}` must be >= {lo}; got {v!r}")
    return int(v)


def _check_real(name: str, v: Any, *, finite: bool = True) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise InvalidArgument(f"`{name}` must be a real number or a strategy; got {v!r}")
    v = float(v)
    if math.isnan(v) or (finite and math.isinf(v)):
        raise InvalidArgument(f"`{name}` must be a finite number; got {v!r}")
    return v


def _order(lo_name: str, lo: Any, hi_name: str, hi: Any) -> None:
    if not _is_strategy(lo) and not _is_strategy(hi) and lo > hi:
        raise InvalidArgument(f"`{lo_name}` = {lo!r} must not exceed `{hi_name}` = {hi!r}")


def _int_bound(name: str, v: Any, lo: int = 1) -> Any:
    return v if _is_strategy(v) else _check_int(name, v, lo)


def _real_bound(name: str, v: Any) -> Any:
    return v if _is_strategy(v) else _check_real(name, v)


def _draw(draw, v: Any) -> Any:
    return draw(v) if _is_strategy(v) else v


def _draw_sizes(draw, min_name, lo, max_name, hi, check=_check_int):
    lo_v, hi_v = check(min_name, _draw(draw, lo)), check(max_name, _draw(draw, hi))
    _order(min_name, lo_v, max_name, hi_v)
    return lo_v, hi_v


def _check_min_entry(min_entry: Any, max_size: Any) -> None:
    if _is_strategy(min_entry):
        return
    if not 0 < min_entry <= 1:
        raise InvalidArgument(f"`min_entry` must lie in (0, 1]; got {min_entry!r}")
    if not _is_strategy(max_size) and min_entry > 0.5 / max_size:
        raise InvalidArgument(
            f"`min_entry` = {min_entry!r} is too large for `max_size` = {max_size!r}: "
            f"it must be at most 0.5 / max_size = {0.5 / max_size:.3g}"
        )


def _dist_spec(max_n: int, zeros: bool, min_entry: float) -> tuple:
    """How entries of a distribution of at most ``max_n`` entries are drawn (hashable)."""
    k_lo = math.ceil(math.log10(10 * max_n))  # tiny entries add up to at most 0.1
    k_hi = math.floor(-math.log10(min_entry) + 1e-9)
    # min_entry * max_n * 10 rather than 0.9 / (min_entry * max_n): inf for a subnormal min_entry
    w_max = 10 if min_entry * max_n * 10 <= 0.9 else max(1, math.floor(0.9 / (min_entry * max_n)))
    return ("dist", w_max, k_lo, k_hi, bool(zeros))


def _value_spec(lo: float, hi: float, small: tuple[int, int], tiny: bool = False) -> tuple:
    """How real entries in [lo, hi] are drawn (hashable)."""
    smalls = tuple(v for v in _SMALL_ORDER if small[0] <= v <= small[1] and lo <= v <= hi)
    return ("value", smalls or (lo,), float(lo), float(hi), bool(tiny))


def _entry(draw, spec: tuple):
    """One entry: one choice for the common kinds, so that shrinking is cheap.

    A distribution entry is ``("b", w)`` (ordinary, integer weight w = choice + 1),
    ``("t", 10**-k)`` (tiny) or ``("z", 0)``; all choices 0 give the uniform
    distribution. A value is a small integer (ordered 0, 1, -1, 2, ... so ties
    are common), any float, one of the two bounds, or (with ``tiny``) +-10**-k.
    """
    if spec[0] == "dist":
        _, w_max, k_lo, k_hi, zeros = spec
        tiny = k_hi >= k_lo
        c = draw(_ints(0, w_max - 1 + tiny + zeros))
        if c < w_max:
            return ("b", c + 1.0)
        if tiny and c == w_max:
            return ("t", float(f"1e-{draw(_ints(k_lo, k_hi))}"))
        return ("z", 0.0)
    _, smalls, lo, hi, tiny = spec
    m = len(smalls)
    c = draw(_ints(0, m + 1 + tiny))
    if c < m:
        return float(smalls[c])
    if c == m:
        return draw(_floats(lo, hi))
    if c == m + 1:
        return draw(_sampled((lo, hi)))
    x = float(f"1e-{draw(_ints(1, 15))}") * draw(_sampled((1.0, -1.0)))
    return min(max(x, lo), hi)


def _assemble(spec: tuple, column: list) -> NDArray[np.float64]:
    if spec[0] == "value":
        return np.array(column, dtype=np.float64)
    p = np.array([v if kind == "t" else 0.0 for kind, v in column])
    bulk = np.array([v if kind == "b" else 0.0 for kind, v in column])
    if not bulk.any():
        bulk[0], p[0] = 1.0, 0.0
    return p + bulk / bulk.sum() * (1.0 - p.sum())


@st.composite
def _row(draw, specs: tuple) -> tuple:
    return tuple(_entry(draw, s) for s in specs)


@functools.lru_cache(maxsize=512)
def _row_lists(specs: tuple, lo: int, hi: int) -> SearchStrategy[list]:
    return st.lists(_row(specs), min_size=lo, max_size=hi)


def _columns(draw, n: int | tuple[int, int], *specs: tuple) -> list[NDArray[np.float64]]:
    """Arrays of one length, drawn row by row (entry i of every array together).

    With a size range, the rows are a hypothesis list, so the shrinker deletes
    whole rows (entry i of every array at once) and reaches the smallest size.
    """
    if isinstance(n, int):
        rows = [tuple(_entry(draw, s) for s in specs) for _ in range(n)]
    else:
        rows = draw(_row_lists(specs, n[0], n[1]))
    return [_assemble(s, [r[j] for r in rows]) for j, s in enumerate(specs)]


def _one_distribution(draw, n, zeros: bool, min_entry: float) -> NDArray[np.float64]:
    hi = n if isinstance(n, int) else n[1]
    return _columns(draw, n, _dist_spec(hi, zeros, min_entry))[0]


# --------------------------------------------------------------------------- betas

_NICE_BETAS = (1.0, 0.5, 2.0, 0.1, 10.0, 0.01, 100.0)


def _check_beta_bounds(lo: Any, hi: Any) -> None:
    for name, v in (("min_beta", lo), ("max_beta", hi)):
        if _is_strategy(v):
            continue
        _check_real(name, v, finite=False)
        if v <= 0:
            raise InvalidArgument(
                f"`{name}` must be positive; got {v!r} (pass allow_zero=True to include beta = 0)"
            )
        if math.isinf(v):
            raise InvalidArgument(
                f"`{name}` must be finite; got {v!r} (pass allow_inf=True to include beta = inf)"
            )
    _order("min_beta", lo, "max_beta", hi)


def _draw_beta(draw, lo, hi, allow_zero: bool, allow_inf: bool) -> float:
    lo, hi = _draw(draw, lo), _draw(draw, hi)
    _check_beta_bounds(lo, hi)
    nice = [b for b in _NICE_BETAS if lo <= b <= hi]
    kinds = ["nice"] * bool(nice) + ["log"] + ["zero"] * allow_zero + ["inf"] * allow_inf
    kind = kinds[draw(_ints(0, len(kinds) - 1))]
    if kind == "nice":
        return draw(_sampled(tuple(nice)))
    if kind == "zero":
        return 0.0
    if kind == "inf":
        return math.inf
    e = draw(_floats(math.log10(lo), math.log10(hi)))
    return min(max(10.0**e, lo), hi)
