r"""Off-policy KL estimates: samples from a behaviour policy, with or without importance weights.

Private: import the public functions from :mod:`klpolicy.estimators`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import kl_last as _kl_last
from ..core.internal import pair as _pair
from ..core.internal import validation as V
from ._exact import _exact_bias, _normalised, _values, _weighted_moments
from .registry import get_estimator

__all__ = ["off_policy_bias", "off_policy_moments"]


def off_policy_moments(
    p: ArrayLike,
    q: ArrayLike,
    mu: ArrayLike,
    estimator: str,
    *,
    weighted: bool = True,
    axis: int = -1,
) -> tuple[NDArray[np.floating], NDArray[np.floating]]:
    r"""Exact mean and variance of a KL estimator when the samples come from ``mu``, not ``p``.

    .. math::

        \text{weighted: } \mathbb{E}_{x\sim\mu}\Big[\tfrac{p(x)}{\mu(x)}\, k(x)\Big]
          = \sum_{x:\,\mu(x)>0} p(x) k(x), \qquad
        \text{unweighted: } \mathbb{E}_{x\sim\mu}[k(x)] = \sum_x \mu(x) k(x)

    where :math:`k(x)` is evaluated with the current :math:`\log p(x)` and
    :math:`\log q(x)`.

    Parameters
    ----------
    p : array_like
        The current policy (whose KL to ``q`` is wanted).
    q : array_like
        The reference.
    mu : array_like
        The behaviour policy that generated the samples (``pi_old`` of PPO
        epochs after the first, of GRPO with several iterations per batch).
    estimator : {"k1", "k2", "k3", "abs"}
        Which per-sample estimator.
    weighted : bool, optional
        Multiply each estimate by the importance weight :math:`p(x)/\mu(x)`
        (default) or not (what GRPO's KL term does).
    axis : int, optional
        The probability axis.

    Returns
    -------
    mean : ndarray or float
        The estimator's mean, per batch row; ``inf`` where an estimate is infinite
        with positive probability.
    variance : ndarray or float
        Its variance, per batch row (``inf`` likewise).

    Raises
    ------
    ValueError
        As in :func:`moments`, and for an invalid ``mu``.

    Notes
    -----
    With weights, the estimators keep their on-policy bias when ``p``'s
    support lies inside ``mu``'s (mass of ``p`` where ``mu`` is zero is never
    sampled and is missing from the mean); the variance grows with the
    second moment of the weights. Without weights the mean is
    :math:`\mathbb{E}_\mu[k]`, e.g. for k1
    :math:`\mathrm{KL}(\mu\|q) - \mathrm{KL}(\mu\|p)`: see
    :func:`off_policy_bias`.

    References
    ----------
    .. [1] Schulman et al., "Proximal Policy Optimization Algorithms", 2017,
       arXiv:1707.06347.
    .. [2] Shao et al., 2024, arXiv:2402.03300 (GRPO, eq. 3).

    Examples
    --------
    >>> from klpolicy.estimators import off_policy_moments, moments
    >>> p, q, mu = [0.6, 0.4], [0.5, 0.5], [0.5, 0.5]
    >>> m_w, _ = off_policy_moments(p, q, mu, "k3")
    >>> bool(abs(m_w - moments(p, q, "k3")[0]) < 1e-15)
    True
    >>> round(float(off_policy_moments(p, q, mu, "k3", weighted=False)[0]), 6)
    0.021256
    """
    name = get_estimator(estimator).name
    weighted = V.as_bool("weighted", weighted)
    pa, qa = _pair(p, q, axis)
    ma = V.as_probabilities("mu", mu, axis)
    pa, ma = V.broadcast_pair("p", pa, "mu", ma)
    qa, ma = V.broadcast_pair("q", qa, "mu", ma)
    pa = np.broadcast_to(pa, ma.shape)
    ma = ma.astype(pa.dtype, copy=False)
    pa, qa, ell = _normalised(pa, qa)
    ma = ma / ma.sum(-1, keepdims=True)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        # samples where p = 0: logp = -inf, so l = -inf (k1 -inf, k2 and k3 +inf)
        ell = np.where(pa > 0, ell, np.where(qa > 0, -np.inf, 0))
        k = _values(name, ell, None, None)
        if weighted:
            w = np.where(ma > 0, pa / np.where(ma > 0, ma, 1), 0)
            vals = np.where(pa > 0, w * k, 0)
        else:
            vals = k
    mean, var = _weighted_moments(ma, vals)
    # a sample where p = 0 gives k1 = -inf: the unweighted k1 mean is then -inf
    neg = np.any((ma > 0) & (vals == -np.inf), -1) & ~np.any((ma > 0) & (vals == np.inf), -1)
    mean = np.where(neg, -np.inf, mean)
    return mean.astype(pa.dtype)[()], var.astype(pa.dtype)[()]


def off_policy_bias(
    p: ArrayLike,
    q: ArrayLike,
    mu: ArrayLike,
    estimator: str,
    *,
    weighted: bool = True,
    axis: int = -1,
) -> NDArray[np.floating]:
    r"""Exact bias of an off-policy KL estimate: its mean minus :math:`\mathrm{KL}(p\|q)`.

    .. math::

        b = \mathbb{E}_{x\sim\mu}[w(x)\,k(x)] - \mathrm{KL}(p\|q), \qquad
        w = p/\mu \ \text{(or 1 when unweighted)}

    Parameters
    ----------
    p, q, mu, estimator, weighted, axis
        As in :func:`off_policy_moments`.

    Returns
    -------
    ndarray or float
        One value per batch row (0 where both the mean and the KL are
        infinite; never NaN).

    Raises
    ------
    ValueError
        As in :func:`off_policy_moments`.

    Notes
    -----
    For unweighted k1 the bias is
    :math:`\mathrm{KL}(\mu\|q) - \mathrm{KL}(\mu\|p) - \mathrm{KL}(p\|q)`,
    which is of first order in :math:`p - \mu`; the importance weights remove
    it at the price of variance.

    References
    ----------
    .. [1] Shao et al., 2024, arXiv:2402.03300.

    Examples
    --------
    >>> from klpolicy.estimators import off_policy_bias
    >>> p, q, mu = [0.6, 0.4], [0.5, 0.5], [0.5, 0.5]
    >>> round(float(off_policy_bias(p, q, mu, "k3", weighted=False)), 6)
    0.00112
    """
    mean, _ = off_policy_moments(p, q, mu, estimator, weighted=weighted, axis=axis)
    pa, qa = _pair(p, q, axis)
    kl = _kl_last(pa, qa)
    kl, mean = np.broadcast_arrays(kl, np.asarray(mean))
    with np.errstate(invalid="ignore"):
        out = np.where(np.isinf(kl) & np.isinf(mean), 0, mean - kl)
    if weighted:
        # E_mu[(p/mu) k] = E_p[k] - sum_{mu = 0} p k: the on-policy bias (exact) minus
        # the mass never sampled, free of the rounding in ``mean - kl``
        ma = V.as_probabilities("mu", mu, axis)
        pb, ma = V.broadcast_pair("p", pa, "mu", ma)
        qb, _ = V.broadcast_pair("q", qa, "mu", ma)
        pb, qb = np.broadcast_to(pb, ma.shape), np.broadcast_to(qb, ma.shape)
        pn, qn, ell = _normalised(pb, qb)
        with np.errstate(over="ignore", invalid="ignore"):
            k = _values(estimator, ell, None, None)
            missing = np.sum(np.where((ma == 0) & (pn > 0), pn * k, 0), -1)
            exact = _exact_bias(pn, qn, ell, estimator) - missing
        out = np.where(np.isfinite(exact), exact, out)
    return out.astype(pa.dtype)[()]
