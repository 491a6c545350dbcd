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

# The one definition of both series, as Python floats (weak scalars: a float32 array's
# arithmetic stays float32, in every array library).
# exp(x) - 1 - x = sum_{k>=2} x^k / k!
_EXPM1MX_TERMS = [1.0 / math.factorial(k) for k in range(2, 2 + _N_TERMS)]
# u e^u - e^u + 1 = sum_{k>=2} (k - 1) u^k / k!
_KLUNIT_TERMS = [(k - 1) / math.factorial(k) for k in range(2, 2 + _N_TERMS)]
# The same tables as float64 arrays, for numpy callers that cast them to their dtype.
_EXPM1MX = np.array(_EXPM1MX_TERMS)
_KLUNIT = np.array(_KLUNIT_TERMS)


def _horner(xp, x, coeffs):
    """``x^2 * sum_j coeffs[j] x^j`` by Horner's rule, in the array namespace ``xp``."""
    acc = xp.zeros_like(x) + coeffs[-1]
    for c in coeffs[-2::-1]:
        acc = acc * x + c
    return acc * x * x


def _series_in_place(xp, out, x, small, coeffs, factor=None):
    """``out[small] = (factor *) x^2 sum_j coeffs[j] x^j`` on a numpy ``out``, in place:
    the series only on the entries that use it (the same values as a ``where`` over a
    series of the whole array, in two passes instead of 33)."""

    def full(a):
        return a if a.shape == out.shape else np.broadcast_to(a, out.shape)

    idx = np.nonzero(full(small))
    if idx[0].size:
        series = _horner(xp, full(x)[idx], coeffs)
        out[idx] = series if factor is None else full(factor)[idx] * series
    return out


def _expm1mx(xp, x):
    """``exp(x) - 1 - x`` to a few ulp in the array namespace ``xp`` (series for
    ``|x| < 0.2``, evaluated on safe inputs, so gradients stay finite)."""
    small = xp.abs(x) < _SERIES_RADIUS
    if isinstance(x, np.ndarray) and x.ndim:
        return _series_in_place(xp, xp.expm1(x) - x, x, small, _EXPM1MX_TERMS)
    xs = xp.where(small, x, xp.zeros_like(x))
    return xp.where(small, _horner(xp, xs, _EXPM1MX_TERMS), xp.expm1(x) - x)


def _kl_terms(xp, p, q, u):
    """``q * kl_unit(u) = p (u - 1) + q >= 0`` in the array namespace ``xp``, with the
    series where ``|u| < 0.2`` (``u`` finite)."""
    small = xp.abs(u) < _SERIES_RADIUS
    if isinstance(u, np.ndarray) and u.ndim:
        return _series_in_place(xp, p * (u - 1) + q, u, small, _KLUNIT_TERMS, q)
    us = xp.where(small, u, xp.zeros_like(u))
    return xp.where(small, q * _horner(xp, us, _KLUNIT_TERMS), p * (u - 1) + q)


def _horner_x2(x: NDArray, coeffs: NDArray) -> NDArray:
    """The polynomial ``x^2 * sum_j coeffs[j] x^j``, by Horner's rule, on numpy arrays.

    Returns
    -------
    ndarray
        The polynomial at ``x``.
    """
    return _horner(np, x, coeffs)


def expm1mx(x: NDArray) -> NDArray:
    """``exp(x) - 1 - x`` accurate to a few ulp, for arrays of any float dtype.

    Returns
    -------
    ndarray
        ``exp(x) - 1 - x``, in the dtype of ``x``.

    Examples
    --------
    >>> float(expm1mx(np.array(1e-8)))  # exp(x) - 1 - x loses every digit here
    5.000000016666667e-17
    """
    x = np.asarray(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return _expm1mx(np, x.reshape(-1)).reshape(x.shape)


def kl_unit_series(u: NDArray) -> NDArray:
    """``u exp(u) - exp(u) + 1`` by its Taylor series, for ``|u| < 0.2``.

    Returns
    -------
    ndarray
        The series at ``u``.
    """
    return _horner(np, u, _KLUNIT_TERMS)


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
    return _series_in_place(np, big, u, small, _KLUNIT_TERMS, q)


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
