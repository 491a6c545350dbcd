r"""The covariance selection of Clip-Cov and KL-Cov (Cui et al. 2025), in the mean-field limit.

Cui et al. (arXiv:2505.22617) tie entropy collapse to the covariance, over the batch's
tokens, of a token's advantage and its log-probability,

.. math::

    c(y) = \big(A(y) - \bar A\big)\,\big(\log \pi(y) - \overline{\log \pi}\big),

and act on the few tokens where it is large. verl 0.9.1 (``verl/trainer/ppo/core_algos.py``
lines 1744-1846, ``compute_policy_loss_clip_cov``) detaches the gradient of
``max(int(clip_cov_ratio * N), 1)`` tokens drawn at random among those with
``clip_cov_lb < c < clip_cov_ub``; lines 1849-1920 (``compute_policy_loss_kl_cov``) add
``ppo_kl_coef * |log pi - log pi_old|`` to the loss of the ``kl_cov_ratio`` fraction of
tokens with the largest ``c``.

On a tabular policy with an infinite batch, :math:`\bar A = \mathbb{E}_\pi A`,
:math:`\overline{\log\pi} = \mathbb{E}_\pi \log\pi`, the band is a set of outcomes
:math:`S`, and a token of the band is detached with probability
:math:`\min(1, \rho / \pi(S))` (the rounding of ``int`` and the floor of one token vanish):
the expected policy-gradient step weights outcome :math:`y` by
:math:`w(y) = 1 - \mathbb{1}[y \in S] \min(1, \rho/\pi(S))`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

__all__ = ["clip_cov_weights", "token_covariance"]


def token_covariance(prob: NDArray, advantage: NDArray) -> NDArray[np.float64]:
    r"""Each outcome's covariance term :math:`(A(y) - \mathbb{E}_\pi A)(\log\pi(y) - \mathbb{E}_\pi\log\pi)`.

    Parameters
    ----------
    prob : ndarray, shape (n,)
        The policy (float64, summing to one).
    advantage : ndarray, shape (n,)
        Each outcome's advantage.

    Returns
    -------
    ndarray, shape (n,)
        The term on the policy's support; ``-inf`` off it (verl masks those tokens out).

    Examples
    --------
    >>> import numpy as np
    >>> token_covariance(np.array([0.75, 0.25]), np.array([1.0, -3.0])).round(4)
    array([0.2747, 2.4719])
    """
    on = prob > 0
    logp = np.log(np.where(on, prob, 1.0))
    a = advantage - prob[on] @ advantage[on]
    out = np.full(prob.shape, -np.inf)
    out[on] = a[on] * (logp[on] - prob[on] @ logp[on])
    return out


def clip_cov_weights(
    prob: NDArray, advantage: NDArray, *, ratio: float, lower: float, upper: float
) -> NDArray[np.float64]:
    r"""The expected weight of each outcome's policy gradient under Clip-Cov, infinite batch.

    .. math::

        w(y) = 1 - \mathbb{1}[\ell < c(y) < u]\,\min\!\big(1, \rho / \pi(S)\big),
        \qquad S = \{y : \ell < c(y) < u\}

    Parameters
    ----------
    prob, advantage : ndarray, shape (n,)
        The policy and each outcome's advantage.
    ratio : float
        ``clip_cov_ratio`` :math:`\rho`, the fraction of the batch's tokens detached.
    lower, upper : float
        ``clip_cov_lb`` :math:`\ell` and ``clip_cov_ub`` :math:`u`, the band (strict, as verl).

    Returns
    -------
    ndarray, shape (n,)
        Weights in ``[0, 1]``: 1 outside the band.

    Raises
    ------
    ValueError
        When ``lower >= upper`` (an empty band; verl would detach nothing).

    Examples
    --------
    >>> import numpy as np
    >>> p, a = np.array([0.9, 0.09, 0.01]), np.array([1.0, -3.0, -9.0])
    >>> token_covariance(p, a).round(3)
    array([ 0.116,  7.258, 40.522])
    >>> clip_cov_weights(p, a, ratio=0.005, lower=1.0, upper=50.0)
    array([1.  , 0.95, 0.95])
    """
    if not lower < upper:
        raise ValueError(f"`clip_cov_lb` must be below `clip_cov_ub`; got {lower!r} and {upper!r}")
    c = token_covariance(prob, advantage)
    band = (c > lower) & (c < upper)
    mass = float(prob[band].sum())
    w = np.ones(prob.shape)
    if mass > 0:
        w[band] = 1.0 - min(1.0, ratio / mass)
    return w
