"""The checks of :mod:`klpolicy.preference`'s own arguments: preference matrices, pair laws, counts.

No other part takes these arguments, so their checks live here, not in core; the
messages are worded with core's formatting helpers (``klpolicy.core.internal.validation``:
``format_value``, ``format_index``, ``first_index``), the same words as every other check.

>>> import numpy as np
>>> as_preference_matrix("preferences", [[0.5, 0.7], [0.3, 0.5]], 2).tolist()
[[0.5, 0.7], [0.3, 0.5]]
>>> as_preference_matrix("preferences", [[0.5, 0.7], [0.4, 0.5]], 2)
Traceback (most recent call last):
...
ValueError: `preferences` must satisfy P[i, j] + P[j, i] = 1 ...; found P[0, 1] + P[1, 0] = 1.1
>>> float(as_pair_law(None, np.array([0.25, 0.75])).sum())
1.0
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import validation as V

__all__ = ["as_pair_counts", "as_pair_law", "as_preference_matrix"]


def as_preference_matrix(
    name: str, x: ArrayLike, n: int, *, against: str = "ref"
) -> NDArray[np.float64]:
    """A preference matrix ``P`` of shape ``(n, n)``: entries in [0, 1] and ``P + P.T = 1``.

    ``P[i, j]`` is the probability that outcome ``i`` is preferred to outcome
    ``j``; the diagonal must therefore be 1/2. The tolerance on
    ``P[i, j] + P[j, i] = 1`` is core's ``row_sum_tolerance`` of float64 for two terms.
    """
    arr = V.as_float_array(name, x).astype(np.float64, copy=False)
    if arr.shape != (n, n):
        raise ValueError(
            f"`{name}` must be a square matrix of shape ({n}, {n}) matching `{against}`; "
            f"got shape {arr.shape}"
        )
    nan = np.isnan(arr)
    if nan.any():
        idx = V.format_index(V.first_index(nan))
        raise ValueError(f"`{name}` must not contain NaN; found nan at index {idx}")
    out = (arr < 0) | (arr > 1)
    if out.any():
        idx = V.first_index(out)
        raise ValueError(
            f"`{name}` entries must lie in [0, 1]; found {V.format_value(arr[idx])} at index "
            f"{V.format_index(idx)}"
        )
    tol = V.row_sum_tolerance(np.dtype(np.float64), 2)
    s = arr + arr.T
    bad = np.abs(s - 1.0) > tol
    if bad.any():
        i, j = V.first_index(bad)
        raise ValueError(
            f"`{name}` must satisfy P[i, j] + P[j, i] = 1 (tolerance {tol:.2g}); "
            f"found P[{i}, {j}] + P[{j}, {i}] = {V.format_value(s[i, j])}"
        )
    return arr


def as_pair_law(mu: ArrayLike | None, ref: NDArray, *, name: str = "mu") -> NDArray[np.float64]:
    """The law of the ordered pair shown to the labeller, as an ``(n, n)`` matrix summing to one.

    ``None`` means ``ref x ref``; a vector ``m`` of size ``n`` means ``m x m``;
    a matrix is taken as the joint law itself. Every pair with positive mass
    must lie inside the support of ``ref`` (``ref`` is 1-D and validated).
    """
    n = ref.shape[-1]
    if mu is None:
        joint = np.outer(ref, ref)
    else:
        arr = V.as_float_array(name, mu)
        if arr.ndim == 1:
            m = V.as_probabilities(name, arr)
            if m.shape[-1] != n:
                raise ValueError(
                    f"`{name}` must have the same size as `ref` along the probability axis; "
                    f"got {m.shape[-1]} and {n}"
                )
            joint = np.outer(m, m)
        elif arr.ndim == 2:
            if arr.shape != (n, n):
                raise ValueError(
                    f"`{name}` as a joint law of pairs must have shape ({n}, {n}); "
                    f"got shape {arr.shape}"
                )
            V.as_probabilities(name, arr.reshape(-1))
            joint = arr.astype(np.float64, copy=False)
        else:
            raise ValueError(
                f"`{name}` must be a vector of size {n} or an ({n}, {n}) matrix; "
                f"got shape {arr.shape}"
            )
    off = (joint > 0) & ((ref[:, None] == 0) | (ref[None, :] == 0))
    if off.any():
        i, j = V.first_index(off)
        k = i if ref[i] == 0 else j
        raise ValueError(
            f"`{name}` puts mass {V.format_value(joint[i, j])} on the pair ({i}, {j}) "
            f"but `ref` is 0 at outcome {k}; log(pi/ref) is undefined there"
        )
    return joint.astype(np.float64, copy=False)


def as_pair_counts(name: str, x: ArrayLike, ref: NDArray) -> NDArray[np.float64]:
    """Counts ``C[i, j]`` of "i chosen over j": finite, >= 0, ``(n, n)``, on ref's support."""
    n = ref.shape[-1]
    arr = V.as_float_array(name, x).astype(np.float64, copy=False)
    if arr.shape != (n, n):
        raise ValueError(
            f"`{name}` must be a square matrix of shape ({n}, {n}) matching `ref`; "
            f"got shape {arr.shape}"
        )
    bad = ~np.isfinite(arr) | (arr < 0)
    if bad.any():
        idx = V.first_index(bad)
        raise ValueError(
            f"`{name}` must be finite and non-negative; found {V.format_value(arr[idx])} at index "
            f"{V.format_index(idx)}"
        )
    if not arr.any():  # not arr.sum() == 0: a sum of 1e308s overflows
        raise ValueError(f"`{name}` must contain at least one comparison; all counts are 0")
    off = (arr > 0) & ((ref[:, None] == 0) | (ref[None, :] == 0))
    if off.any():
        i, j = V.first_index(off)
        k = i if ref[i] == 0 else j
        raise ValueError(
            f"`{name}` has comparisons of the pair ({i}, {j}) but `ref` is 0 at outcome {k}; "
            "log(pi/ref) is undefined there"
        )
    return arr
