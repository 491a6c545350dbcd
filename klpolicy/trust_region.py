r"""The trust-region step in closed form, and PPO's clipped step beside it.

TRPO (Schulman et al. 2015) improves a policy by

.. math::

    \max_\pi \; \mathbb{E}_\pi[A] \quad\text{s.t.}\quad
    \mathrm{KL}(\pi\,\|\,\pi_{old}) \le \delta .

On a tabular policy this is the KL-regularised problem with :math:`\pi_{old}`
as the reference: the Lagrangian :math:`\mathbb{E}_\pi[A] - \beta\,
\mathrm{KL}(\pi\|\pi_{old})` is maximised by :math:`\pi_{old}\,e^{A/\beta}/Z`,
and the multiplier :math:`\beta` is the one whose optimum spends exactly
:math:`\delta` (:func:`klpolicy.beta_for_kl`). Iterating the step is mirror
descent with the KL as Bregman divergence. PPO (Schulman et al. 2017) replaces
the constraint by a clipped ratio; :func:`ppo_clip_step` runs its exact
(population) surrogate so the two steps can be compared at equal KL.

Importing this module does not import torch.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from .core import beta_for_kl, optimal_policy
from .core.internal import prepare as _prepare
from .core.internal import tilt as _tilt
from .core.internal import validation as V

__all__ = ["ppo_clip_step", "trust_region_beta", "trust_region_step"]


def trust_region_beta(
    pi_old: ArrayLike, advantage: ArrayLike, delta: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The multiplier of the trust-region step: :math:`\beta` whose optimum spends :math:`\delta`.

    .. math:: \beta(\delta) = \texttt{beta\_for\_kl}(\pi_{old}, A, \min(\delta, \mathrm{KL}_{max}))

    Parameters
    ----------
    pi_old : array_like
        The current policy (probabilities along ``axis``).
    advantage : array_like
        Advantages (any finite values; constants along ``axis`` do not matter).
    delta : float or array_like
        KL radius in nats, ``>= 0``, broadcasting over the batch shape.
    axis : int, optional
        The probability axis.

    Returns
    -------
    ndarray or float
        ``beta`` per batch row; ``0`` (greedy) when ``delta`` exceeds the
        largest KL a step can spend, ``inf`` when ``delta = 0``.

    Raises
    ------
    ValueError
        As in :func:`klpolicy.beta_for_kl`.

    Examples
    --------
    >>> from klpolicy.trust_region import trust_region_beta
    >>> round(float(trust_region_beta([0.5, 0.5], [1.0, 0.0], 0.3499)), 3)
    0.5
    """
    p, a = _prepare(pi_old, advantage, axis)
    kmax = _tilt(p, a, np.zeros((*p.shape[:-1], 1), p.dtype)).kl[..., 0]
    d = np.asarray(delta, dtype=np.float64)
    if np.isnan(d).any() or (d < 0).any() or np.isinf(d).any():
        raise ValueError(f"`delta` must be a finite non-negative number of nats; got {delta!r}")
    return beta_for_kl(p, a, np.minimum(d, kmax))


def trust_region_step(
    pi_old: ArrayLike, advantage: ArrayLike, delta: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating]:
    r"""TRPO's step on a tabular policy, exactly: the closed form with pi_old as reference.

    .. math::

        \arg\max_{\mathrm{KL}(\pi\|\pi_{old})\le\delta} \mathbb{E}_\pi[A]
        = \frac{\pi_{old}\, e^{A/\beta_\delta}}{Z}, \qquad
        \beta_\delta = \texttt{beta\_for\_kl}(\pi_{old}, A, \delta)

    Parameters
    ----------
    pi_old, advantage, delta, axis
        As in :func:`trust_region_beta`.

    Returns
    -------
    ndarray
        The new policy, same shape as ``pi_old``; its KL from ``pi_old`` is
        ``delta`` (or the greedy policy's KL when that is smaller).

    Raises
    ------
    ValueError
        As in :func:`klpolicy.beta_for_kl`.

    Notes
    -----
    The objective is linear and the constraint set convex, so the constraint
    is active unless the greedy step already fits inside it; the KKT
    conditions are those of the KL-regularised problem with multiplier
    :math:`\beta`. Iterating with :math:`A = r - \beta_0\log(\pi_{old}/\pi_{ref})`
    (the functional gradient of :math:`\mathbb{E}_\pi[r] - \beta_0
    \mathrm{KL}(\pi\|\pi_{ref})`) is mirror descent on the regularised
    objective; it reaches :math:`\pi^*_{\beta_0}` in one step once the step's
    multiplier is capped at :math:`\beta_0` (see ``method="trust_region"`` in
    :func:`klpolicy.torch.fit_policy`).

    References
    ----------
    .. [1] Schulman et al., "Trust Region Policy Optimization", 2015, arXiv:1502.05477.
    .. [2] Beck and Teboulle, "Mirror descent and nonlinear projected subgradient
       methods for convex optimization", 2003, Oper. Res. Lett. 31(3).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy import kl_divergence
    >>> from klpolicy.trust_region import trust_region_step
    >>> new = trust_region_step([0.5, 0.5], [1.0, 0.0], 0.01)
    >>> new.round(4), round(float(kl_divergence(new, [0.5, 0.5])), 10)
    (array([0.5706, 0.4294]), 0.01)
    """
    beta = np.asarray(trust_region_beta(pi_old, advantage, delta, axis=axis))
    p = V.as_probabilities("pi_old", pi_old, axis)
    return optimal_policy(
        np.moveaxis(p, -1, axis), advantage, np.expand_dims(beta, axis), axis=axis
    )


def _clipped_gradient(p, pi_old, adv, clip):
    """Gradient in the logits of sum_y pi_old min(rho A, clip(rho) A), rho = p / pi_old."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(pi_old > 0, p / pi_old, 1.0)
    active = np.where(adv >= 0, rho <= 1 + clip, rho >= 1 - clip)
    g = np.where(active & (pi_old > 0), adv, 0.0)  # d/dp_y of the surrogate
    return p * (g - np.sum(p * g, axis=-1, keepdims=True))


def ppo_clip_step(
    pi_old: ArrayLike,
    advantage: ArrayLike,
    clip: float = 0.2,
    *,
    lr: float = 1.0,
    epochs: int = 4,
    axis: int = -1,
) -> NDArray[np.float64]:
    r"""PPO's update of a tabular softmax policy on its exact clipped surrogate.

    .. math::

        L(\pi) = \mathbb{E}_{y\sim\pi_{old}}\Big[\min\big(\rho A,\
        \mathrm{clip}(\rho, 1-\epsilon, 1+\epsilon) A\big)\Big],
        \qquad \rho = \pi(y)/\pi_{old}(y)

    Starting at :math:`\pi_{old}`, takes ``epochs`` gradient-ascent steps of
    size ``lr`` on the logits, with the expectation over :math:`\pi_{old}`
    computed exactly (an infinite batch).

    Parameters
    ----------
    pi_old, advantage, axis
        As in :func:`trust_region_step`.
    clip : float, optional
        The clip range :math:`\epsilon`.
    lr : float, optional
        Step size on the logits.
    epochs : int, optional
        Number of gradient steps on the same surrogate (PPO's epochs per batch).

    Returns
    -------
    ndarray
        The new policy. Unlike :func:`trust_region_step`, its KL from
        ``pi_old`` is not set by ``clip``: the clip only zeroes the gradient of
        outcomes whose ratio has left :math:`[1-\epsilon, 1+\epsilon]`, while the
        softmax keeps moving them through the other outcomes.

    Raises
    ------
    ValueError
        For invalid probabilities, advantages, ``clip``, ``lr`` or ``epochs``.

    References
    ----------
    .. [1] Schulman et al., "Proximal Policy Optimization Algorithms", 2017,
       arXiv:1707.06347, eq. (7).

    Examples
    --------
    >>> from klpolicy.trust_region import ppo_clip_step
    >>> ppo_clip_step([0.5, 0.5], [1.0, -1.0], 0.2, lr=1.0, epochs=1).round(4)
    array([0.7311, 0.2689])
    """
    p_old, adv = _prepare(pi_old, advantage, axis)
    eps = V.as_positive_scalar("clip", clip)
    step = V.as_positive_scalar("lr", lr)
    n = V.as_positive_int("epochs", epochs)
    p_old = p_old.astype(np.float64) / p_old.sum(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        theta = np.where(p_old > 0, np.log(p_old), -np.inf)
    for _ in range(n):
        z = theta - np.max(theta, axis=-1, keepdims=True)
        p = np.exp(z) / np.sum(np.exp(z), axis=-1, keepdims=True)
        theta = theta + step * _clipped_gradient(p, p_old, adv, eps)
    z = theta - np.max(theta, axis=-1, keepdims=True)
    p = np.exp(z) / np.sum(np.exp(z), axis=-1, keepdims=True)
    return np.moveaxis(p, -1, axis)
