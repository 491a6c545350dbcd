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
    """The polynomial ``x^2 * sum_j coeffs[j] x^j``, by Horner's rule.

    Returns
    -------
    ndarray
        The polynomial at ``x``.
    """
    acc = np.full_like(x, coeffs[-1])
    for c in coeffs[-2::-1]:
        acc = acc * x + c
    return acc * x * x


def expm1mx(x: NDArray) -> NDArray:
    """``exp(x) - 1 - x`` accurate to a few ulp, for arrays of any float dtype.

    Returns
    -------
    ndarray
        ``exp(x) - 1 - x``, in the dtype of ``x``.
    """
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
    """``u exp(u) - exp(u) + 1`` by its Taylor series, for ``|u| < 0.2``.

    Returns
    -------
    ndarray
        The series at ``u``.
    """
    return _horner_x2(u, _KLUNIT.astype(u.dtype))


def kl_terms(p: NDArray, q: NDArray, u: NDArray) -> NDArray:
    """Non-negative summands ``q * kl_unit(u)`` of ``KL(p||q)``, with ``u = log(p/q)``.

    ``p = q exp(u)`` must be passed too: outside the series radius the summand
    is evaluated as ``p (u - 1) + q``, which never overflows. Entries with
    ``q == 0`` must be handled by the caller (they give 0 when ``p == 0`` and
    ``inf`` otherwise); entries with ``p == 0`` and ``q > 0`` (``u = -inf``)
    give ``q``.

    Returns
    -------
    ndarray
        The summands, of the shape of ``u``.
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


def normalised_log_ratio(p: NDArray, q: NDArray) -> NDArray:
    """``log(p_n / q_n)`` along the last axis, ``p_n = p / sum(p)``, ``q_n = q / sum(q)``.

    Rows that sum to one only within rounding are taken as exactly normalised, and
    nearly equal ``p`` and ``q`` keep their relative precision. With ``d = p - q``
    (exact within a factor 2) and ``D = sum(d)``,
    ``p_n / q_n - 1 = (d (S_q - q) - q (D - d)) / (q S_p)``, evaluated where
    ``p`` and ``q`` are within a factor 1.5 and passed to ``log1p``. For the
    entry with the largest ``q`` (the only one that can hold most of the mass),
    ``S_q - q`` and ``D - d`` are summed from the other entries, so nothing large
    cancels: ``log1p(d / q) - log1p(D / S_q)`` loses the digits of a log-ratio of
    4e-24 beside a one-ulp difference of 1.1e-16 between ``p`` and ``q`` there.
    Elsewhere ``log p - log q - log(S_p / S_q)``. ``q = 0`` gives ``+inf`` (``p > 0``)
    or NaN (``p = 0``), ``p = 0 < q`` gives ``-inf``: callers mask as they need.

    Returns
    -------
    ndarray
        The log-ratio, of the shape of ``p``.
    """
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    p, q = np.broadcast_arrays(p, q)
    d = p - q
    sp = p.sum(axis=-1, keepdims=True)
    sq = q.sum(axis=-1, keepdims=True)
    top = np.arange(q.shape[-1]) == np.argmax(q, axis=-1)[..., None]
    rest_d = np.sum(np.where(top, 0.0, d), axis=-1, keepdims=True)
    rest_q = np.sum(np.where(top, 0.0, q), axis=-1, keepdims=True)
    big_d = rest_d + np.sum(np.where(top, d, 0.0), axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        others_q = np.where(top, rest_q, sq - q)
        others_d = np.where(top, rest_d, big_d - d)
        y = (d * others_q - q * others_d) / (q * sp)
        near = np.abs(d) < 0.5 * q
        far = np.log(p) - np.log(q) - np.log1p((sp - sq) / sq)
        return np.where(near, np.log1p(y), far)
