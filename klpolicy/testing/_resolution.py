"""What a floating-point format resolves: dtypes, rounding to them, ulps, and the estimator names.

The suites tell two formulas apart only where they differ by more than the
rounding of the dtype the code under test computes in, and call an error
that is within that rounding "rounding", with its size in ulps.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import estimators as _est

# The per-sample estimators, from ONE place: klpolicy.estimators' registry.
ESTIMATOR_NAMES: tuple[str, ...] = _est.estimator_names()

# unit of least precision at 1 (numpy's eps) of each format the suites know
EPS = {
    "float64": float(np.finfo(np.float64).eps),
    "float32": float(np.finfo(np.float32).eps),
    "bfloat16": 2.0**-7,
}
# the smallest positive probability drawn by default for each format (its logs stay finite
# and exp of the log-ratios stays below the format's overflow threshold)
MIN_ENTRY = {"float64": 1e-300, "float32": 1e-30, "bfloat16": 1e-30}
# the largest |log q - log p| drawn: exp of it is finite in the format
MAX_LOG_RATIO = {"float64": 100.0, "float32": 80.0, "bfloat16": 80.0}


def as_dtype(dtype: Any) -> str:
    """``None``, a name, a numpy dtype or a torch dtype, as one of :data:`EPS`'s keys."""
    if dtype is None:
        return "float64"
    if isinstance(dtype, type) or isinstance(dtype, np.dtype):
        try:
            dtype = np.dtype(dtype).name
        except TypeError:
            pass
    name = str(dtype).removeprefix("torch.")
    if name in ("double", "float"):  # torch aliases
        name = {"double": "float64", "float": "float32"}[name]
    try:
        if name not in EPS:
            name = np.dtype(name).name
    except TypeError:
        pass
    if name not in EPS:
        raise ValueError(
            f"`dtype` must be 'float64', 'float32' or 'bfloat16' (or the numpy/torch dtype); "
            f"got {dtype!r}"
        )
    return name


def round_to(x: np.ndarray, name: str) -> np.ndarray:
    """``x`` rounded to the nearest value of format ``name`` (ties to even), as float64."""
    x = np.asarray(x, dtype=np.float64)
    if name == "float64":
        return x
    with np.errstate(over="ignore"):
        f = x.astype(np.float32)
    if name == "float32":
        return f.astype(np.float64)
    bits = f.view(np.uint32).astype(np.uint64)
    finite = np.isfinite(f)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32)
    out = np.where(finite, rounded.view(np.float32), f)
    return out.astype(np.float64)


def representable(x: np.ndarray, name: str) -> bool:
    """Whether every finite entry of ``x`` is a value of format ``name``."""
    x = np.asarray(x, dtype=np.float64)
    fin = np.isfinite(x)
    return bool(np.array_equal(round_to(x[fin], name), x[fin]))


def as_inputs(x: np.ndarray, name: str) -> np.ndarray:
    """The array handed to the function under test: float32 for float32 and bfloat16."""
    return np.asarray(x, dtype=np.float64 if name == "float64" else np.float32)


def output_dtype(raw: Any) -> str | None:
    """The format of what someone's function returned, when it says (numpy or torch)."""
    name = str(getattr(raw, "dtype", "")).removeprefix("torch.")
    return name if name in EPS else None


def ulps(err: float, magnitude: float, name: str) -> float:
    """``err`` in units of the last place of format ``name`` at ``magnitude``."""
    m = abs(magnitude)
    if not m > 0 or not math.isfinite(m):
        return math.inf
    unit = EPS[name] * 2.0 ** math.floor(math.log2(m))
    return abs(err) / unit


def lower_formats(name: str) -> tuple[str, ...]:
    """The formats coarser than ``name``, finest first."""
    order = ("float64", "float32", "bfloat16")
    return order[order.index(name) + 1 :]
