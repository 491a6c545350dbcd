r"""Divergences between discrete distributions, exact and in nats.

All functions take probabilities along ``axis`` (default -1), broadcast the
batch axes, validate their inputs (non-negative, rows summing to one) and
return one value per batch row.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _validation as V
from ._numerics import kl_terms

__all__ = ["kl_divergence", "total_variation"]


def _pair(p: ArrayLike, q: ArrayLike, axis: int, names=("p", "q")):
    pa = V.as_probabilities(names[0], p, axis)
    qa = V.as_probabilities(names[1], q, axis)
    pa, qa = V.broadcast_pair(names[0], pa, names[1], qa)
    dtype = V.result_dtype(pa, qa)
    return pa.astype(dtype, copy=False), qa.astype(dtype, copy=False)


def _kl_last(p: NDArray, q: NDArray) -> NDArray:
    """KL(p||q) along the last axis for validated arrays (keepdims=False)."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        wq = q.sum(axis=-1, keepdims=True)
        d = p - q
        # log(W_p / W_q) from the differences, so rounding in the row sums cancels
        a = np.log1p(np.sum(d, axis=-1, keepdims=True) / wq)
        ratio = d / q
        # log1p((p - q)/q) where p and q are close (exact then), log p - log q elsewhere
        u = np.where(np.abs(ratio) < 0.5, np.log1p(ratio), np.log(p) - np.log(q)) - a
        wp = p.sum(axis=-1, keepdims=True)
        terms = kl_terms(p / wp, q / wq, u)
        terms = np.where(q > 0, terms, np.where(p > 0, np.inf, 0)).astype(p.dtype, copy=False)
    return terms.sum(axis=-1)


def kl_divergence(
    p: ArrayLike, q: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""Kullback-Leibler divergence :math:`\mathrm{KL}(p\|q)` in nats.

    .. math::

        \mathrm{KL}(p\|q) = \sum_y p(y) \log\frac{p(y)}{q(y)},
        \qquad 0 \log\tfrac{0}{q} = 0, \quad p \log\tfrac{p}{0} = \infty \ (p > 0)

    Parameters
    ----------
    p, q : array_like
        Probabilities along ``axis`` (non-negative, rows summing to 1 within
        rounding); batch axes broadcast.
    axis : int, optional
        The probability axis (default -1).

    Returns
    -------
    ndarray or float
        One non-negative value per batch row; ``inf`` when ``p`` puts mass
        where ``q`` has none.

    Raises
    ------
    ValueError
        For negative, NaN, infinite or non-normalised inputs, or sizes that
        differ along ``axis``.

    Notes
    -----
    Summed as :math:`\sum_y q(y)\,(u e^u - e^u + 1)` with
    :math:`u = \log(p/q)`, whose terms are all non-negative, and with
    ``u = log1p((p - q)/q)``, so that the result keeps its relative precision
    when ``p`` and ``q`` are nearly equal (a KL of 1e-20 is exact, where
    ``sum(p * log(p/q))`` returns rounding noise, sometimes negative). The row
    sums enter through ``log(sum(p)/sum(q))`` computed from ``sum(p - q)``, so
    inputs normalised only to rounding are treated as the exactly normalised
    distributions ``p/sum(p)`` and ``q/sum(q)``.

    References
    ----------
    .. [1] Kullback and Leibler, "On Information and Sufficiency", 1951,
       Ann. Math. Statist. 22(1).

    Examples
    --------
    >>> from klpolicy import kl_divergence
    >>> round(float(kl_divergence([0.88, 0.12], [0.5, 0.5])), 6)
    0.326222
    >>> float(kl_divergence([0.5, 0.5], [1.0, 0.0]))
    inf
    >>> float(kl_divergence([1.0, 0.0], [0.5, 0.5]))  # log 2
    0.6931471805599453
    """
    pa, qa = _pair(p, q, axis)
    return _kl_last(pa, qa)[()]


def total_variation(
    p: ArrayLike, q: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""Total-variation distance :math:`\tfrac12 \sum_y |p(y) - q(y)|`.

    Parameters
    ----------
    p, q : array_like
        Probabilities along ``axis``; batch axes broadcast.
    axis : int, optional
        The probability axis (default -1).

    Returns
    -------
    ndarray or float
        One value in [0, 1] per batch row. Pinsker:
        :math:`\mathrm{TV} \le \sqrt{\mathrm{KL}/2}`.

    Raises
    ------
    ValueError
        As in :func:`kl_divergence`.

    References
    ----------
    .. [1] Tsybakov, "Introduction to Nonparametric Estimation", 2009, sec. 2.4.

    Examples
    --------
    >>> from klpolicy import total_variation
    >>> float(total_variation([0.88, 0.12], [0.5, 0.5]))
    0.38
    """
    pa, qa = _pair(p, q, axis)
    return (0.5 * np.abs(pa - qa).sum(axis=-1))[()]
