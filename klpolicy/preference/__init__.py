"""Preferences and DPO: Bradley-Terry, pair losses, their population optima and finite data.

DPO (Rafailov et al. 2023) is derived from the closed form: under Bradley-Terry
preferences with reward ``r`` its population optimum is ``pi* = ref exp(r / beta) / Z``.

* :mod:`~klpolicy.preference.losses`: per-pair losses and gradients (DPO, IPO).
* :mod:`~klpolicy.preference.tabular`: population and empirical losses on a tabular problem.
* :mod:`~klpolicy.preference.optima`: Bradley-Terry, the exact population optima,
  implicit rewards.
* :mod:`~klpolicy.preference.solvers`: the convex solvers behind the optima.
* :mod:`~klpolicy.preference.data`: sampling preference counts and fitting DPO to them.
"""

from .data import DPOFit, fit_dpo, fit_dpo_online, sample_preference_counts
from .losses import PairGradient, dpo_loss, dpo_loss_grad, ipo_loss, ipo_loss_grad
from .optima import (
    RewardDecomposition,
    bradley_terry,
    dpo_optimum,
    implicit_reward,
    ipo_optimum,
    reward_decomposition,
)
from .solvers import laplacian_solve, minimise_pair_loss
from .tabular import empirical_dpo_loss, population_dpo_loss, population_ipo_loss

__all__ = [
    "DPOFit",
    "PairGradient",
    "RewardDecomposition",
    "bradley_terry",
    "dpo_loss",
    "dpo_loss_grad",
    "dpo_optimum",
    "empirical_dpo_loss",
    "fit_dpo",
    "fit_dpo_online",
    "implicit_reward",
    "ipo_loss",
    "ipo_loss_grad",
    "ipo_optimum",
    "laplacian_solve",
    "minimise_pair_loss",
    "population_dpo_loss",
    "population_ipo_loss",
    "reward_decomposition",
    "sample_preference_counts",
]
