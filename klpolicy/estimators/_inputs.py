"""The checks of :mod:`klpolicy.estimators`' own arguments: full log-probability vectors.

Only the exact per-sample estimates over the whole vocabulary take normalised
log-probability rows; the check builds on core's ``as_log_probs`` and words its messages
with core's formatting helpers (``klpolicy.core.internal.validation``).

>>> import numpy as np
>>> as_normalised_log_probs("logp_all", np.log([[0.25, 0.75]])).shape
(1, 2)
>>> as_normalised_log_probs("logp_all", np.log([0.5, 0.6]))
Traceback (most recent call last):
...
ValueError: `logp_all` must be normalised along axis -1 (logsumexp 0); its logsumexp is 0.09531...
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import special
from ..core.internal import validation as V

__all__ = ["as_normalised_log_probs"]


def as_normalised_log_probs(name: str, x: ArrayLike, axis: int = -1) -> NDArray[np.floating]:
    """Full log-probability vectors along ``axis`` (``-inf`` allowed) whose rows sum to one.

    Returned with ``axis`` moved last; the tolerance on ``|logsumexp|`` is the
    one core's ``row_sum_tolerance`` gives for the row sums.
    """
    arr = V.as_log_probs(name, x, allow_neg_inf=True)
    if arr.ndim == 0:
        raise ValueError(f"`{name}` must have at least one dimension; got a scalar {arr.item()!r}")
    ax = V.normalise_axis(axis, arr.ndim, name)
    arr = np.moveaxis(arr, ax, -1)
    lse = special.logsumexp(arr, axis=-1)  # -inf for a row of -inf: refused below
    tol = V.row_sum_tolerance(arr.dtype, arr.shape[-1])
    bad = ~(np.abs(lse) <= tol)
    if np.ndim(bad) == 0:
        if bad:
            raise ValueError(
                f"`{name}` must be normalised along axis {axis} (logsumexp 0); "
                f"its logsumexp is {V.format_value(lse)} (tolerance {tol:.2g})"
            )
    elif bad.any():
        idx = V.first_index(bad)
        raise ValueError(
            f"`{name}` must be normalised along axis {axis} (logsumexp 0); row "
            f"{V.format_index(idx)} has logsumexp {V.format_value(lse[idx])} (tolerance {tol:.2g})"
        )
    return arr
