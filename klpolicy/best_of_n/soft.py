r"""Soft best-of-n: draw ``n`` from the reference, keep draw ``i`` with probability softmax(r/lam).

The exact law on a discrete support is one integral in ``t`` per outcome over a
shared moment generating function,

.. math::

    \pi_{n,\lambda}(y) = n\,\pi_{ref}(y)\, w(y) \int_0^\infty e^{-t\,w(y)}\,
        M(t)^{n-1}\,dt, \qquad w = e^{r/\lambda},\;
        M(t) = \mathbb{E}_{\pi_{ref}}\big[e^{-t\,w(Y)}\big],

from :math:`\mathbb{P}(\text{keep } y) = n\,\mathbb{E}\big[\mathbb 1\{Y_1 = y\}\,
w(y) / (w(y) + S_{n-1})\big]` with :math:`S_{n-1} = \sum_{j=2}^n w(Y_j)` and
:math:`1/x = \int_0^\infty e^{-tx}\,dt`. See ``docs/derivations/horizon.md``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import setup as _setup
from ..core.internal import validation as V
from .law import best_of_n_policy

__all__ = ["soft_best_of_n_kl", "soft_best_of_n_policy"]

# trapezoid in s = log t: the integrand is analytic in the strip |Im s| < pi/2, so the
# error is about exp(-2 pi (pi/2) / h); h = 0.2 gives ~1e-21 (aliasing), well below the
# float64 rounding of the sum.
_H = 0.2
_BLOCK = 1 << 21  # elements of one (outcomes x nodes) block


def _row(q: NDArray, r: NDArray, n: int, lam: float) -> NDArray:
    """The law of one row (probability axis last), ``0 < lam < inf``, ``n >= 2``."""
    with np.errstate(over="ignore", under="ignore", divide="ignore"):
        return _row_body(q, r, n, lam)


def _row_body(q: NDArray, r: NDArray, n: int, lam: float) -> NDArray:
    support = q > 0
    qs = q[support] / q[support].sum()
    lw = (r[support] - r[support].max()) / lam  # log w, max 0
    lq = np.log(qs)
    lw_min = lw.min()
    # nodes: t from 1e-18 (the integrand is ~t below it) to 40 / (n w_min) (e^{-t(w+S)},
    # w + S >= n w_min, is below e^-40 there)
    s_lo = np.log(1e-18)
    s_hi = np.log(40.0 / n) - lw_min
    s = np.arange(s_lo, s_hi + _H, _H)
    k = qs.size
    # log M(t) = log sum q exp(-t w): log1p of sum q expm1(-t w) while M >= 1/2, else
    # a log-sum-exp (the terms are all <= q, nothing overflows); t w = exp(s + log w)
    # is formed in log space (t itself may overflow)
    log_m = np.empty_like(s)
    step = max(1, _BLOCK // max(k, 1))
    for a in range(0, s.size, step):
        x = -np.exp(np.add.outer(lw, s[a : a + step]))  # -t w, (k, g)
        acc = qs @ np.expm1(x)
        lm = np.log1p(np.maximum(acc, -1.0 + 1e-300))
        far = acc < -0.5
        if far.any():
            y = lq[:, None] + x[:, far]
            c = y.max(axis=0)
            lm[far] = c + np.log(np.exp(y - c).sum(axis=0))
        log_m[a : a + step] = lm
    base = s + (n - 1) * log_m  # log of t M(t)^{n-1} (the Jacobian dt = t ds)
    # outcome y needs the nodes s <= log(60) - log w(y) only: M is decreasing, so the
    # rest is below e^-55 of the part around s = -log w(y). Blocks of outcomes sorted
    # by weight share a cut.
    order = np.argsort(-lw, kind="stable")
    out = np.empty(k)
    a = 0
    while a < k:
        cut = min(s.size, int(np.searchsorted(s, np.log(60.0) - lw[order[a]], "right")) + 1)
        step = max(1, _BLOCK // max(cut, 1))
        idx = order[a : a + step]
        # the block's last (smallest) weight may need more nodes: extend the cut
        cut = min(s.size, int(np.searchsorted(s, np.log(60.0) - lw[idx[-1]], "right")) + 1)
        lwb = lw[idx]
        e = base[None, :cut] - np.exp(np.add.outer(lwb, s[:cut])) + (lq[idx] + lwb)[:, None]
        out[idx] = np.exp(e).sum(axis=1) * (_H * n)
        a += idx.size
    pi = np.zeros_like(q, dtype=np.float64)
    pi[support] = out
    return pi


def soft_best_of_n_policy(
    ref: ArrayLike, reward: ArrayLike, n: int, lam: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating]:
    r"""The exact law of soft best-of-n: ``n`` reference draws, one kept by softmax(r/lam).

    .. math::

        \pi_{n,\lambda}(y) = n\,\pi_{ref}(y)\, e^{r(y)/\lambda}
        \int_0^\infty e^{-t e^{r(y)/\lambda}}\,
        \Big(\textstyle\sum_{y'} \pi_{ref}(y')\, e^{-t e^{r(y')/\lambda}}\Big)^{n-1} dt

    Parameters
    ----------
    ref : array_like
        Reference probabilities along ``axis``.
    reward : array_like
        Finite rewards, broadcast against ``ref``.
    n : int
        Number of draws, an integer ``>= 1``.
    lam : float or array_like
        The selection temperature ``>= 0`` (one per batch row, or a scalar);
        ``0`` is hard best-of-n (:func:`~klpolicy.best_of_n.best_of_n_policy`),
        ``inf`` the reference.

    Returns
    -------
    ndarray
        :math:`\pi_{n,\lambda}`, the broadcast shape of ``ref`` and ``reward``; float64
        (float32 for float32 inputs). Zero off the reference's support.

    Raises
    ------
    ValueError
        For ``n`` that is not an integer ``>= 1``, ``lam`` negative or NaN, and
        invalid ``ref`` / ``reward`` as in :func:`klpolicy.optimal_policy`.

    Notes
    -----
    Kept draw ``y`` with weight :math:`w = e^{r/\lambda}`: by exchangeability
    :math:`\pi(y) = n\,\pi_{ref}(y)\,w(y)\,\mathbb{E}[1/(w(y) + S_{n-1})]`, and
    :math:`\mathbb{E}[1/(w+S)] = \int_0^\infty e^{-tw} M(t)^{n-1} dt`. The integral is
    a trapezoid rule in :math:`s = \log t` (exponentially convergent; ~1e-13 relative
    against an exact enumeration, ``tests/best_of_n/test_soft.py``), ``M`` in log space,
    the weights scaled by the largest. Ties need no rule: equal rewards get equal
    weights. As ``n -> inf`` the law tends to :math:`\pi^*_{\beta=\lambda}` (the tilt)
    with KL and total-variation gaps :math:`O(1/n)` (Verdun et al., Theorem 1); as
    ``lam -> 0`` it tends to hard best-of-n. Cost :math:`O(V\,G)` with ``G`` about
    ``5 log(1/(n w_min))`` nodes.

    References
    ----------
    .. [1] Verdun, Oesterling, Lakkaraju, Calmon, 2025, "Soft best-of-n sampling for
       model alignment", arXiv:2505.03156.

    Examples
    --------
    >>> from klpolicy.best_of_n import soft_best_of_n_policy
    >>> soft_best_of_n_policy([0.5, 0.5], [1.0, 0.0], 2, 1.0).round(6)
    array([0.615529, 0.384471])
    """
    ref_a, rew_a, lam_a, ax = _setup(ref, reward, lam, axis, names=("ref", "reward", "lam"))
    nn = V.as_positive_int("n", n)
    shape = ref_a.shape
    q2 = ref_a.reshape(-1, shape[-1]).astype(np.float64)
    r2 = rew_a.reshape(-1, shape[-1]).astype(np.float64)
    l2 = np.broadcast_to(lam_a, shape[:-1] + (1,)).reshape(-1).astype(np.float64)
    out = np.empty_like(q2)
    hard = None
    for i in range(q2.shape[0]):
        lam_i = l2[i]
        if nn == 1 or lam_i == np.inf:
            out[i] = q2[i] / q2[i].sum()
        elif lam_i == 0:
            if hard is None:
                hard = best_of_n_policy(q2, r2, nn).reshape(q2.shape)
            out[i] = hard[i]
        else:
            out[i] = _row(q2[i], r2[i], nn, lam_i)
    out = out.reshape(shape).astype(ref_a.dtype, copy=False)
    return np.moveaxis(out, -1, ax)


def soft_best_of_n_kl(
    ref: ArrayLike, reward: ArrayLike, n: int, lam: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The exact :math:`\mathrm{KL}(\pi_{n,\lambda}\|\pi_{ref})` of soft best-of-n.

    Parameters
    ----------
    ref, reward, n, lam, axis
        As in :func:`soft_best_of_n_policy`.

    Returns
    -------
    ndarray or float
        The KL per batch row; at most :math:`\log n` (the hard best-of-n bound
        :math:`\log n - (n-1)/n` at ``lam = 0``).

    Raises
    ------
    ValueError
        As in :func:`soft_best_of_n_policy`.

    Notes
    -----
    :func:`klpolicy.kl_divergence` of the exact law.

    References
    ----------
    .. [1] Verdun et al., 2025, arXiv:2505.03156.

    Examples
    --------
    >>> from klpolicy.best_of_n import soft_best_of_n_kl
    >>> round(float(soft_best_of_n_kl([0.5, 0.5], [1.0, 0.0], 2, 1.0)), 6)
    0.026937
    """
    from ..core import kl_divergence

    law = soft_best_of_n_policy(ref, reward, n, lam, axis=axis)
    ref_a = np.broadcast_to(np.asarray(ref, dtype=law.dtype), law.shape)
    return kl_divergence(law, ref_a, axis=axis)
