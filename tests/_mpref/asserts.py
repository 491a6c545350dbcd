"""One comparison for every exact test: klpolicy's float answer against an mpmath value."""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np


def _as_floats(x) -> np.ndarray:
    """An array of floats from a float, an array, an mpf or a (nested) list of mpfs."""
    if isinstance(x, np.ndarray) and x.dtype.kind == "f":
        return x.astype(np.float64)
    if isinstance(x, (list, tuple)):
        return np.array([_as_floats(v) for v in x], dtype=np.float64)
    return np.asarray(float(x) if isinstance(x, mp.mpf) else x, dtype=np.float64)


def rel_err(got, want) -> np.ndarray:
    """``|got - want| / |want|`` elementwise (``|got - want|`` where ``want`` is 0 or tiny).

    Equal infinities have error 0; an infinity against a finite value has error inf.
    """
    g, w = _as_floats(got), _as_floats(want)
    with np.errstate(invalid="ignore"):
        diff = np.where(g == w, 0.0, np.abs(g - w))
    return diff / np.maximum(np.abs(w), 1e-300)


def assert_mp_close(got, want, *, rtol: float, atol: float = 0.0, what: str = "") -> None:
    """Assert ``|got - want| <= rtol |want| + atol`` elementwise; infinities must match exactly.

    ``want`` is an mpmath value (or a list of them), converted once to float64; NaN in
    either is a failure. The message gives the worst entry, both values and the bound.
    """
    g, w = np.broadcast_arrays(_as_floats(got), _as_floats(want))
    if np.isnan(g).any() or np.isnan(w).any():
        raise AssertionError(f"{what}NaN: got {g!r}, want {w!r}")
    inf = np.isinf(w) | np.isinf(g)
    if (g[inf] != w[inf]).any():
        raise AssertionError(f"{what}infinities differ: got {g!r}, want {w!r}")
    fin = ~inf
    err = np.abs(g[fin] - w[fin])
    bound = rtol * np.abs(w[fin]) + atol
    if (err > bound).any():
        i = int(np.argmax(err - bound))
        worst = err[i] / abs(w[fin][i]) if w[fin][i] else math.inf
        raise AssertionError(
            f"{what}got {float(g[fin][i])!r}, want {float(w[fin][i])!r}: error {err[i]:.3g} "
            f"(relative {worst:.3g}) > rtol {rtol:g} * |want| + atol {atol:g}"
        )
