"""Preferences and DPO: Bradley-Terry, pair losses, their population optima and finite data.

DPO (Rafailov et al. 2023) is derived from the closed form: under Bradley-Terry
preferences with reward ``r`` its population optimum is ``pi* = ref exp(r / beta) / Z``.

* :mod:`~klpolicy.preference.losses`: per-pair losses and gradients (DPO, IPO).
* :mod:`~klpolicy.preference.tabular`: population and empirical losses on a tabular problem.
* :mod:`~klpolicy.preference.optima`: Bradley-Terry, the exact population optima,
  implicit rewards.
* :mod:`~klpolicy.preference.solvers`: the convex solvers behind the optima.
* :mod:`~klpolicy.preference.registry`: :data:`LOSSES`, one row per pair loss (TRL's
  ``loss_type`` values) with its value, gradient, options and paper.
* :mod:`~klpolicy.preference.family`: :func:`population_loss`, :func:`population_optimum`
  and :func:`optimum_set` for every row of the registry.
* :mod:`~klpolicy.preference.fdpo`: f-DPO, TRL's f-divergence scores
  (:func:`f_divergence_score`) behind ``population_loss(..., divergence=)`` and
  ``population_optimum(..., divergence=)``.
* :mod:`~klpolicy.preference.data`: sampling preference counts and fitting DPO to them.
* :mod:`~klpolicy.preference.games`: preference games (Nash learning from human feedback):
  :func:`nash_equilibrium`, the Nash-MD path and its rate, and the geometric mixture per
  token against per sequence.
"""

from .data import DPOFit, fit_dpo, fit_dpo_online, sample_preference_counts
from .family import (
    LossComparison,
    OptimumSet,
    compare_losses,
    optimum_set,
    population_loss,
    population_optimum,
)
from .fdpo import FDPO_DIVERGENCES, f_divergence_score
from .games import (
    GeometricMixtureLaws,
    NashEquilibrium,
    NashMDRate,
    best_response,
    exploitability,
    geometric_mixture_laws,
    nash_equilibrium,
    nash_md_path,
    nash_md_rate,
)
from .losses import PairGradient, dpo_loss, dpo_loss_grad, ipo_loss, ipo_loss_grad
from .optima import (
    RewardDecomposition,
    bradley_terry,
    dpo_optimum,
    implicit_reward,
    ipo_optimum,
    reward_decomposition,
)
from .registry import LOSSES, LossOption, PairLoss
from .solvers import laplacian_solve, minimise_pair_loss
from .tabular import empirical_dpo_loss, population_dpo_loss, population_ipo_loss

__all__ = [
    "FDPO_DIVERGENCES",
    "LOSSES",
    "DPOFit",
    "GeometricMixtureLaws",
    "LossComparison",
    "LossOption",
    "NashEquilibrium",
    "NashMDRate",
    "OptimumSet",
    "PairGradient",
    "PairLoss",
    "RewardDecomposition",
    "best_response",
    "bradley_terry",
    "compare_losses",
    "dpo_loss",
    "dpo_loss_grad",
    "dpo_optimum",
    "empirical_dpo_loss",
    "exploitability",
    "f_divergence_score",
    "fit_dpo",
    "fit_dpo_online",
    "geometric_mixture_laws",
    "implicit_reward",
    "ipo_loss",
    "ipo_loss_grad",
    "ipo_optimum",
    "laplacian_solve",
    "minimise_pair_loss",
    "nash_equilibrium",
    "nash_md_path",
    "nash_md_rate",
    "optimum_set",
    "population_dpo_loss",
    "population_ipo_loss",
    "population_loss",
    "population_optimum",
    "reward_decomposition",
    "sample_preference_counts",
]
