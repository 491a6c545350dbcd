"""Best-of-n: its exact law, KL and win rate, against the KL-regularised optimum.

* :mod:`~klpolicy.best_of_n.law`: the exact law of the best of ``n`` draws (ties split),
  its KL to the reference, expected reward, win rate and the ``log n - (n-1)/n`` bound.
* :mod:`~klpolicy.best_of_n.frontier`: best-of-n's reward-KL curve against the
  closed form's frontier.
* :mod:`~klpolicy.best_of_n.overoptimization`: proxy-versus-gold reward
  over-optimisation (Gao et al. 2022) under the closed form and under best-of-n.
"""

from . import overoptimization as overoptimization
from .frontier import (
    BestOfNComparison,
    BestOfNCurve,
    best_of_n_curve,
    best_of_n_for_kl,
    best_of_n_vs_optimal,
)
from .law import (
    best_of_n_expected_reward,
    best_of_n_kl,
    best_of_n_kl_bound,
    best_of_n_policy,
    best_of_n_win_rate,
)
from .soft import soft_best_of_n_kl, soft_best_of_n_policy

__all__ = [
    "BestOfNComparison",
    "BestOfNCurve",
    "best_of_n_curve",
    "best_of_n_expected_reward",
    "best_of_n_for_kl",
    "best_of_n_kl",
    "best_of_n_kl_bound",
    "best_of_n_policy",
    "best_of_n_vs_optimal",
    "best_of_n_win_rate",
    "soft_best_of_n_kl",
    "soft_best_of_n_policy",
]
