r"""The reward ceiling: the best expected reward any policy reaches within a KL budget.

A KL penalty, or a KL budget, only reweights the reference: the best policy
within :math:`\mathrm{KL}(\pi\|\pi_{ref}) \le \epsilon` is the tilted policy
:math:`\pi^*_\beta \propto \pi_{ref} e^{r/\beta}` at the :math:`\beta` that
spends the budget, and no budget reaches an outcome the reference rules out.
:func:`reward_ceiling` computes that ceiling, for a single distribution or a
whole sequence space (``joint(ref).ravel()``); :mod:`klpolicy.sequences`
re-exports it.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core import beta_for_kl
from ..core.internal import prepare as _prepare
from ..core.internal import tilt as _tilt

__all__ = ["Ceiling", "reward_ceiling"]


class Ceiling(NamedTuple):
    """Result of :func:`reward_ceiling`; arrays have the batch shape."""

    expected_reward: NDArray
    beta: NDArray
    kl: NDArray
    support_max: NDArray
    unreachable_max: NDArray


def reward_ceiling(ref: ArrayLike, reward: ArrayLike, kl: ArrayLike, *, axis: int = -1) -> Ceiling:
    r"""The best expected reward any policy reaches within a KL budget of the reference.

    .. math::

        \max_{\pi:\ \mathrm{KL}(\pi\|\pi_{ref}) \le \epsilon} \mathbb{E}_\pi[r]
        = \mathbb{E}_{\pi^*_{\beta(\epsilon)}}[r]
        \;\le\; \max_{y:\ \pi_{ref}(y) > 0} r(y)

    Parameters
    ----------
    ref : array_like
        Reference probabilities along ``axis`` (for sequences, ``joint(ref).ravel()``).
    reward : array_like
        Finite rewards of the same size along ``axis``.
    kl : float or array_like
        KL budget in nats, ``>= 0``; ``np.inf`` allowed. Broadcasts over the batch.
    axis : int, optional
        The probability axis.

    Returns
    -------
    Ceiling
        ``expected_reward`` (the ceiling within the budget), ``beta`` (the
        coefficient attaining it: 0 when the budget reaches the greedy limit),
        ``kl`` (the KL actually spent, ``min(kl, max_kl)``), ``support_max``
        (the best reward the reference supports: the ceiling at any budget)
        and ``unreachable_max`` (the best reward anywhere, including outcomes
        the reference rules out, which no budget reaches when it is larger).

    Raises
    ------
    ValueError
        As in :func:`klpolicy.optimal_policy`, and for a negative or NaN ``kl``.

    Notes
    -----
    By Lagrangian duality the budget-constrained maximiser is the tilted
    policy at the :math:`\beta` whose KL equals the budget (the frontier is
    concave and :math:`\mathrm{KL}(\pi^*_\beta)` decreases in :math:`\beta`),
    or the greedy policy when the budget exceeds :func:`klpolicy.max_kl`. As
    :math:`\pi^* \propto \pi_{ref} e^{r/\beta}` only reweights the
    reference, outcomes with :math:`\pi_{ref}(y) = 0` keep probability zero
    at every :math:`\beta`: a better reference raises the ceiling, no
    :math:`\beta` does.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593.
    .. [2] Gao, Schulman and Hilton, "Scaling Laws for Reward Model
       Overoptimization", 2022, arXiv:2210.10760.

    Examples
    --------
    A weak reference rarely writes the good answer and never the best one:

    >>> from klpolicy.sequences.ceiling import reward_ceiling
    >>> weak = reward_ceiling([0.9, 0.1, 0.0], [0.0, 1.0, 2.0], 0.5)
    >>> strong = reward_ceiling([0.4, 0.4, 0.2], [0.0, 1.0, 2.0], 0.5)
    >>> round(float(weak.expected_reward), 3), round(float(strong.expected_reward), 3)
    (0.495, 1.55)
    >>> float(weak.support_max), float(weak.unreachable_max)
    (1.0, 2.0)
    """
    ref_a, rew_a = _prepare(ref, reward, axis)
    budget = np.asarray(kl, dtype=np.float64)
    if np.isnan(budget).any() or (budget < 0).any():
        bad = budget[np.isnan(budget) | (budget < 0)].flat[0]
        raise ValueError(f"`kl` must be a non-negative number of nats; got {bad:g}")
    batch = np.broadcast_shapes(ref_a.shape[:-1], budget.shape)
    ref_b = np.broadcast_to(ref_a, batch + ref_a.shape[-1:]).astype(np.float64)
    rew_b = np.broadcast_to(rew_a, batch + rew_a.shape[-1:]).astype(np.float64)
    kmax = _tilt(ref_b, rew_b, np.zeros((*batch, 1))).kl[..., 0]
    spent = np.minimum(np.broadcast_to(budget, batch), kmax)
    beta = np.asarray(beta_for_kl(ref_b, rew_b, spent), dtype=np.float64)
    best = _tilt(ref_b, rew_b, beta[..., None])
    support_max = np.max(np.where(ref_b > 0, rew_b, -np.inf), axis=-1)
    return Ceiling(
        expected_reward=best.mean[..., 0][()],
        beta=beta[()],
        kl=spent[()],
        support_max=support_max[()],
        unreachable_max=np.max(rew_b, axis=-1)[()],
    )
