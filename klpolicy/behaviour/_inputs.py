"""The checks of :mod:`klpolicy.behaviour`'s own arguments: the grid of coefficients it sweeps.

No other part takes a grid of ``beta`` (``0`` and ``inf`` included); the check is core's
``check_beta_values`` (``klpolicy.core.internal.validation``) with zero allowed.

>>> as_beta_grid("beta", [0.0, 1.0, float("inf")]).tolist()
[0.0, 1.0, inf]
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..core.internal import validation as V

__all__ = ["as_beta_grid"]


def as_beta_grid(name: str, x: Any) -> NDArray[np.float64]:
    """A non-empty grid of coefficients (any shape), each ``>= 0`` (``inf`` allowed)."""
    return V.check_beta_values(name, x, allow_zero=True)
