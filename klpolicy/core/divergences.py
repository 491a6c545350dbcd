r"""Divergences between discrete distributions, exact and in nats.

All functions take probabilities along ``axis`` (default -1), broadcast the
batch axes, validate their inputs (non-negative, rows summing to one) and
return one value per batch row.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _validation as V
from . import _xp
from ._numerics import kl_terms, kl_unit_series

__all__ = [
    "cross_entropy",
    "effective_support",
    "entropy",
    "kl_divergence",
    "total_variation",
]


def _pair(p: ArrayLike, q: ArrayLike, axis: int, names=("p", "q")):
    pa = V.as_probabilities(names[0], p, axis)
    qa = V.as_probabilities(names[1], q, axis)
    pa, qa = V.broadcast_pair(names[0], pa, names[1], qa)
    dtype = V.result_dtype(pa, qa)
    return pa.astype(dtype, copy=False), qa.astype(dtype, copy=False)


def _fast_pair(p: ArrayLike, q: ArrayLike, axis: int):
    """The structural part of :func:`_pair`; values are checked block by block.

    Returns ``(p, q, check)`` for float arrays with valid shapes and axis, else
    ``None`` (then :func:`_pair` validates and words the error). ``check`` lets
    :func:`_kl_last` test, from each cached block's minima and row sums, what
    the validators test with elementwise masks (NaN propagates into the
    minimum, infinities into the sum).
    """
    try:
        pa, qa = np.asarray(p), np.asarray(q)
    except ValueError:  # ragged: the validators word the error
        return None
    floats = (np.float32, np.float64)
    if pa.dtype not in floats or qa.dtype not in floats or pa.ndim == 0 or qa.ndim == 0:
        return None
    if pa.size == 0 or qa.size == 0:
        return None
    try:
        pm = np.moveaxis(pa, V.normalise_axis(axis, pa.ndim, "p"), -1)
        qm = np.moveaxis(qa, V.normalise_axis(axis, qa.ndim, "q"), -1)
    except ValueError:
        return None
    if pm.shape[-1] != qm.shape[-1]:
        return None
    try:
        pm, qm = np.broadcast_arrays(pm, qm)
    except ValueError:
        return None
    dtype = V.result_dtype(pm, qm)
    n = pm.shape[-1]
    check = (
        V.row_sum_tolerance(pa.dtype, n),
        V.row_sum_tolerance(qa.dtype, n),
        dtype == np.float32,  # the validators sum in float64
    )
    return pm.astype(dtype, copy=False), qm.astype(dtype, copy=False), check


def _block_valid(p: NDArray, q: NDArray, wp: NDArray, wq: NDArray, check) -> bool:
    """The validators' checks from a block's row sums and minima (NaN fails every test)."""
    tol_p, tol_q, in64 = check
    if not (np.all(p.min(axis=-1) >= 0) and np.all(q.min(axis=-1) >= 0)):
        return False
    for a, w, tol in ((p, wp, tol_p), (q, wq, tol_q)):
        dev = np.abs(w - 1.0)
        if in64 and np.any(dev > 0.5 * tol):  # borderline in float32: sum in float64
            dev = np.abs(a.sum(axis=-1, dtype=np.float64) - 1.0)
        if not np.all(dev <= tol):  # also catches infinities
            return False
    return True


_BLOCK_BYTES = 1 << 18


def _kl_last(p: NDArray, q: NDArray, check=None) -> NDArray | None:
    """KL(p||q) along the last axis for validated arrays (keepdims=False).

    Row blocks that stay in cache, one ``log`` per entry (see :func:`_kl_block`).
    With ``check`` (from :func:`_fast_pair`) the values are validated block by
    block, and ``None`` is returned when one is invalid.

    Returns
    -------
    ndarray or None
        The KL per row, in nats; None when ``check`` finds an invalid value.
    """
    shape = p.shape
    n = shape[-1]
    p2, q2 = p.reshape(-1, n), q.reshape(-1, n)
    out = np.empty(p2.shape[0], p.dtype)
    step = max(1, _BLOCK_BYTES // max(1, n * p.dtype.itemsize))
    bufs = np.empty((6, min(step, p2.shape[0]), n), p.dtype)  # scratch, reused per block
    for start in range(0, p2.shape[0], step):
        s = slice(start, start + step)
        kl = _kl_block(p2[s], q2[s], bufs[:, : p2[s].shape[0]], check)
        if kl is None:
            return None
        out[s] = kl
    return out.reshape(shape[:-1])


def _kl_block(p: NDArray, q: NDArray, bufs: NDArray, check=None) -> NDArray | None:
    """KL of each row of a block: the same summands as :func:`_kl_careful`, fewer passes.

    ``u = log(p/q) - log(W_p/W_q)`` takes one (vectorised) ``log`` per entry:
    ``log(y) + (1 + x - y)/y`` with ``y = p/q`` rounded and ``x = (p - q)/q``,
    the first-order correction for the rounding of ``y`` (its square is below
    eps^2). ``x`` carries the digits of ``p - q`` (exact when ``p`` and ``q``
    are within a factor 2), so this is as accurate as ``log1p(x)`` near
    ``p = q`` and as ``log(p/q)`` elsewhere, without the (scalar) ``log1p``.
    Rows with a zero or subnormal ``q`` go to :func:`_kl_careful`.
    """
    tiny = np.finfo(p.dtype).tiny
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        wq = q.sum(axis=-1)
        wp = p.sum(axis=-1)
        if check is not None and not _block_valid(p, q, wp, wq, check):
            return None
        x, iq, u, ym1, pn, qn = bufs
        np.subtract(p, q, out=x)
        a = np.log1p(x.sum(axis=-1) / wq)  # log(W_p / W_q) from the differences
        np.divide(1, q, out=iq)
        np.multiply(x, iq, out=x)  # (p - q) / q
        y = ym1
        np.divide(p, q, out=y)  # y = p / q, rounded (exactly 1 where p == q)
        np.log(y, out=u)
        # log(p/q) = log(y) + log1p(d), d = (1 + x - y) / y the rounding of y (|d| ~ eps)
        np.subtract(1, y, out=pn)
        np.add(pn, x, out=pn)
        np.divide(pn, y, out=pn)
        np.add(u, pn, out=u)
        # p = 0 gives NaN; its summand is qn for any finite u, and -1e4 keeps it out of the
        # series (where p > 0, u >= log(tiny) > -1e4 is unchanged)
        np.fmax(u, -1e4, out=u)
        np.subtract(u, a[:, None], out=u)
        np.multiply(p, (1 / wp)[:, None], out=pn)
        np.multiply(q, (1 / wq)[:, None], out=qn)
        # summands pn (u - 1) + qn = qn kl_unit(u) >= 0, the series where |u| < 0.2
        t = np.subtract(u, 1, out=iq)
        np.multiply(t, pn, out=t)
        np.add(t, qn, out=t)
        kl = t.sum(axis=-1)
        # each summand is exact to about eps * qn * (4 + |a|); the series removes at most
        # eps * qn * 3 of cancellation: only rows whose KL does not dwarf that need it
        need = kl * 64 < 4 + np.abs(a)
        bad = ~(q.min(axis=-1) >= tiny)
        for i in np.nonzero(need & ~bad)[0]:
            small = np.abs(u[i]) < 0.2
            if small.any():
                t[i, small] = qn[i, small] * kl_unit_series(u[i, small])
                kl[i] = t[i].sum()
        for i in np.nonzero(bad)[0]:
            kl[i] = _kl_careful(p[i], q[i])
    return kl.astype(p.dtype, copy=False)


def _kl_careful(p: NDArray, q: NDArray) -> NDArray:
    """KL(p||q) along the last axis for validated arrays (keepdims=False), elementwise masks."""
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
    p: ArrayLike, q: ArrayLike, *, axis: int = -1, validate: bool = True
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
    validate : bool, optional
        For torch/JAX/CuPy input: ``False`` skips the value checks (see
        :func:`klpolicy.optimal_policy`). numpy input is always checked.

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
    if _xp.is_foreign(p, q):
        return _xp.kl_divergence(p, q, axis=axis, validate=validate)
    fast = _fast_pair(p, q, axis)
    if fast is not None:
        kl = _kl_last(*fast)
        if kl is not None:
            return kl[()]
    pa, qa = _pair(p, q, axis)  # raises for invalid values
    return _kl_last(pa, qa)[()]


def total_variation(
    p: ArrayLike, q: ArrayLike, *, axis: int = -1, validate: bool = True
) -> NDArray[np.floating] | np.floating:
    r"""Total-variation distance :math:`\tfrac12 \sum_y |p(y) - q(y)|`.

    Parameters
    ----------
    p, q : array_like
        Probabilities along ``axis``; batch axes broadcast.
    axis : int, optional
        The probability axis (default -1).
    validate : bool, optional
        For torch/JAX/CuPy input: ``False`` skips the value checks (see
        :func:`klpolicy.optimal_policy`). numpy input is always checked.

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
    if _xp.is_foreign(p, q):
        return _xp.total_variation(p, q, axis=axis, validate=validate)
    pa, qa = _pair(p, q, axis)
    return (0.5 * np.abs(pa - qa).sum(axis=-1))[()]


# --- entropy-type quantities (diversity, mode collapse) -----------------------


def _entropy_last(p: NDArray) -> NDArray:
    """-sum p log p along the last axis for a validated array; 0 log 0 = 0, float64.

    Returns
    -------
    ndarray
        The entropy per row, in nats.
    """
    p64 = p.astype(np.float64, copy=False)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p64 > 0, -p64 * np.log(p64), 0.0)
    return terms.sum(axis=-1)


def _cross_entropy_last(p: NDArray, q: NDArray) -> NDArray:
    """H(p/W_p, q/W_q) along the last axis for validated arrays; inf where p > 0 = q, float64.

    ``-sum(p log q) / W_p + log W_q``, with ``log W_q = log1p(W_q - 1)`` and
    ``W_q - 1 = (max q - 1) + (the other entries)`` (the first difference is exact), so
    that rows normalised only to rounding are treated as exactly normalised, as in
    :func:`kl_divergence`: ``q = [7.9e-146, 1]`` sums to 1 in float64, yet its second
    entry, normalised, is ``1 - 7.9e-146``.

    Returns
    -------
    ndarray
        The cross-entropy per row, in nats.
    """
    p64 = p.astype(np.float64, copy=False)
    q64 = q.astype(np.float64, copy=False)
    p64, q64 = np.broadcast_arrays(p64, q64)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(p64 > 0, -p64 * np.log(q64), 0.0)
        top = np.argmax(q64, axis=-1)[..., None]
        qmax = np.take_along_axis(q64, top, axis=-1)[..., 0]
        rest = np.where(np.arange(q64.shape[-1]) == top, 0.0, q64).sum(axis=-1)
        log_wq = np.log1p((qmax - 1.0) + rest)
        return terms.sum(axis=-1) / p64.sum(axis=-1) + log_wq


def entropy(
    p: ArrayLike, *, axis: int = -1, validate: bool = True
) -> NDArray[np.floating] | np.floating:
    r"""Shannon entropy :math:`H(p)` in nats.

    .. math::

        H(p) = -\sum_y p(y) \log p(y), \qquad 0 \log 0 = 0

    Parameters
    ----------
    p : array_like
        Probabilities along ``axis`` (non-negative, rows summing to 1 within
        rounding); other axes are batch axes.
    axis : int, optional
        The probability axis (default -1).
    validate : bool, optional
        For torch/JAX/CuPy input: ``False`` skips the value checks (see
        :func:`klpolicy.optimal_policy`). numpy input is always checked.

    Returns
    -------
    ndarray or float
        One value in :math:`[0, \log n]` per batch row (shape: the batch
        shape); float32 for float32 input, float64 otherwise.

    Raises
    ------
    ValueError
        For negative, NaN, infinite or non-normalised ``p``, or an empty one.

    Notes
    -----
    Every summand :math:`-p \log p` is non-negative for :math:`p \le 1`, so the
    sum has no cancellation and is accurate to a few ulp relative, including
    entries of 1e-300 and subnormals. The entries are used as given (no
    renormalisation): a row that sums to one only within rounding gives the
    entropy of those exact numbers. The computation runs in float64 and is
    cast back for float32 input.

    References
    ----------
    .. [1] Shannon, "A Mathematical Theory of Communication", 1948, Bell
       System Technical Journal 27.
    .. [2] Cover and Thomas, "Elements of Information Theory", 2nd ed., 2006,
       ch. 2.

    Examples
    --------
    >>> from klpolicy.core import divergences
    >>> round(float(divergences.entropy([0.5, 0.5])), 6)  # log 2
    0.693147
    >>> float(divergences.entropy([1.0, 0.0]))
    0.0
    >>> divergences.entropy([[0.25, 0.25, 0.25, 0.25], [0.7, 0.1, 0.1, 0.1]]).round(6)
    array([1.386294, 0.940448])
    """
    if _xp.is_foreign(p):
        return _xp.entropy(p, axis=axis, validate=validate)
    pa = V.as_probabilities("p", p, axis)
    return _entropy_last(pa).astype(V.result_dtype(pa))[()]


def cross_entropy(
    p: ArrayLike, q: ArrayLike, *, axis: int = -1, validate: bool = True
) -> NDArray[np.floating] | np.floating:
    r"""Cross-entropy :math:`H(p, q)` of ``q`` relative to ``p``, in nats.

    .. math::

        H(p, q) = -\sum_y p(y) \log q(y)
                = H(p) + \mathrm{KL}(p\|q),
        \qquad 0 \log q = 0, \quad -p \log 0 = \infty \ (p > 0)

    Parameters
    ----------
    p, q : array_like
        Probabilities along ``axis``; batch axes broadcast, sizes along ``axis``
        must match.
    axis : int, optional
        The probability axis (default -1).
    validate : bool, optional
        For torch/JAX/CuPy input: ``False`` skips the value checks (see
        :func:`klpolicy.optimal_policy`). numpy input is always checked.

    Returns
    -------
    ndarray or float
        One value :math:`\ge H(p)` per batch row; ``inf`` when ``p`` puts mass
        where ``q`` has none.

    Raises
    ------
    ValueError
        As in :func:`kl_divergence`.

    Notes
    -----
    Every summand :math:`-p \log q` is non-negative for :math:`q \le 1`, so the
    sum is accurate to a few ulp relative. As in :func:`kl_divergence`, rows
    that sum to one only within rounding are treated as the exactly normalised
    ``p/sum(p)`` and ``q/sum(q)``: the sum is divided by ``sum(p)`` and
    ``log(sum(q))`` is added, computed from ``(max q - 1) + (the rest)``
    so that ``q = [7.9e-146, 1.0]`` gives ``H([0, 1], q) = 7.9e-146``.
    :math:`H(p, q) - H(p)` equals :math:`\mathrm{KL}(p\|q)`
    up to rounding of the two sums; when the KL is small compared with
    :math:`H(p)` that difference loses its relative precision, so compute the
    KL itself with :func:`kl_divergence`.

    References
    ----------
    .. [1] Cover and Thomas, "Elements of Information Theory", 2nd ed., 2006,
       ch. 2.

    Examples
    --------
    >>> from klpolicy.core import divergences
    >>> round(float(divergences.cross_entropy([0.5, 0.5], [0.9, 0.1])), 6)
    1.203973
    >>> float(divergences.cross_entropy([0.5, 0.5], [1.0, 0.0]))
    inf
    >>> float(divergences.cross_entropy([1.0, 0.0], [1.0, 0.0]))
    0.0
    """
    if _xp.is_foreign(p, q):
        return _xp.cross_entropy(p, q, axis=axis, validate=validate)
    pa, qa = _pair(p, q, axis)
    return _cross_entropy_last(pa, qa).astype(pa.dtype)[()]


def effective_support(p: ArrayLike, *, axis: int = -1) -> NDArray[np.floating] | np.floating:
    r"""Effective support size :math:`\exp H(p)` (the perplexity of ``p``).

    .. math::

        N_{\mathrm{eff}}(p) = e^{H(p)} = \prod_y p(y)^{-p(y)}

    Parameters
    ----------
    p : array_like
        Probabilities along ``axis``.
    axis : int, optional
        The probability axis (default -1).

    Returns
    -------
    ndarray or float
        One value per batch row, between 1 (a point mass) and the number of
        non-zero entries (reached by the uniform distribution on them).

    Raises
    ------
    ValueError
        As in :func:`entropy`.

    Notes
    -----
    The exponential of the Shannon entropy is the Hill number of order 1: the
    number of equally likely outcomes that would have the same entropy. It is
    the natural count of "modes" for mode-collapse plots.

    References
    ----------
    .. [1] Hill, "Diversity and Evenness: A Unifying Notation and Its
       Consequences", 1973, Ecology 54(2).

    Examples
    --------
    >>> from klpolicy.core import divergences
    >>> round(float(divergences.effective_support([0.25, 0.25, 0.5, 0.0])), 6)  # 2**1.5
    2.828427
    >>> float(divergences.effective_support([1.0, 0.0, 0.0]))
    1.0
    """
    pa = V.as_probabilities("p", p, axis)
    return np.exp(_entropy_last(pa)).astype(V.result_dtype(pa))[()]
