"""Small numerical kernels shared by the exact modules.

Two functions of one variable appear all over KL computations and lose every
digit when evaluated naively near zero:

* ``expm1mx(x) = exp(x) - 1 - x``: the k3 estimator, and the second-order part
  of a log-partition function;
* ``kl_unit(u) = u exp(u) - exp(u) + 1``: ``q * kl_unit(log(p/q))`` is the
  non-negative summand of ``KL(p||q) = sum_i q_i kl_unit(log(p_i/q_i))`` (valid
  when ``p`` and ``q`` both sum to one).

Both are evaluated with a Taylor polynomial for ``|x| < 0.2`` and with the
closed form outside, which keeps the relative error at a few ulp everywhere.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

_SERIES_RADIUS = 0.2
_N_TERMS = 16

# exp(x) - 1 - x = sum_{k>=2} x^k / k!
_EXPM1MX = np.array([1.0 / math.factorial(k) for k in range(2, 2 + _N_TERMS)])
# u e^u - e^u + 1 = sum_{k>=2} (k - 1) u^k / k!
_KLUNIT = np.array([(k - 1) / math.factorial(k) for k in range(2, 2 + _N_TERMS)])


def _horner_x2(x: NDArray, coeffs: NDArray) -> NDArray:
    """x^2 * sum_j coeffs[j] x^j by Horner's rule."""
    acc = np.full_like(x, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc = acc * x + c
    return acc * x * x


def expm1mx(x: NDArray) -> NDArray:
    """``exp(x) - 1 - x`` accurate to a few ulp, for arrays of any float dtype."""
    x = np.asarray(x)
    shape = x.shape
    x = x.reshape(-1)
    small = np.abs(x) < _SERIES_RADIUS
    with np.errstate(over="ignore", invalid="ignore"):
        out = np.expm1(x) - x
    if small.any():
        # the series only on the entries that need it (same values, fewer passes)
        idx = np.nonzero(small)
        out[idx] = _horner_x2(x[idx], _EXPM1MX.astype(x.dtype))
    return out.reshape(shape)


def kl_unit_series(u: NDArray) -> NDArray:
    """``u exp(u) - exp(u) + 1`` by its Taylor series, for ``|u| < 0.2``."""
    return _horner_x2(u, _KLUNIT.astype(u.dtype))


def kl_terms(p: NDArray, q: NDArray, u: NDArray) -> NDArray:
    """Non-negative summands ``q * kl_unit(u)`` of ``KL(p||q)``, with ``u = log(p/q)``.

    ``p = q exp(u)`` must be passed too: outside the series radius the summand
    is evaluated as ``p (u - 1) + q``, which never overflows. Entries with
    ``q == 0`` must be handled by the caller (they give 0 when ``p == 0`` and
    ``inf`` otherwise); entries with ``p == 0`` and ``q > 0`` (``u = -inf``)
    give ``q``.
    """
    small = np.abs(u) < _SERIES_RADIUS
    with np.errstate(invalid="ignore"):
        big = np.where(p > 0, p * (u - 1), 0) + q
    if small.any():
        q = np.broadcast_to(q, big.shape)
        u = np.broadcast_to(u, big.shape)
        small = np.broadcast_to(small, big.shape)
        # the series only on the entries that need it (same values, fewer passes)
        idx = np.nonzero(small)
        big[idx] = q[idx] * kl_unit_series(u[idx])
    return big
