"""The checks of :mod:`klpolicy.control`'s own arguments: coefficients, factors, measured KLs, lags.

No other part takes these arguments; each check is a named interval of core's
``as_scalar`` (``klpolicy.core.internal.validation``), so the messages are core's.

>>> as_factor("band", 1.5)
1.5
>>> as_unit_interval("lag", 1.0)
Traceback (most recent call last):
...
ValueError: `lag` must be a number in [0, 1); got 1.0
"""

from __future__ import annotations

from typing import Any

from ..core.internal import validation as V

__all__ = ["as_factor", "as_kl_measurement", "as_nonnegative_scalar", "as_unit_interval"]


def as_nonnegative_scalar(name: str, x: Any) -> float:
    """A single finite real number >= 0 (e.g. a fixed KL coefficient)."""
    return V.as_scalar(name, x, "[0, inf)")


def as_factor(name: str, x: Any) -> float:
    """A single finite real number strictly above 1 (a dead-zone band or a multiplier)."""
    return V.as_scalar(name, x, "(1, inf)")


def as_kl_measurement(name: str, x: Any) -> float:
    """A measured (possibly estimated, hence possibly negative) KL: any finite real number."""
    return V.as_scalar(name, x, "(-inf, inf)", what="a KL in nats")


def as_unit_interval(name: str, x: Any) -> float:
    """A single real number in [0, 1) (e.g. the lag of a first-order filter)."""
    return V.as_scalar(name, x, "[0, 1)")
