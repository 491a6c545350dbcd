"""Best-of-n: its exact law, KL and win rate, against the KL-regularised optimum.

* :mod:`~klpolicy.best_of_n.law`: the exact law of the best of ``n`` draws (ties split),
  its KL to the reference, expected reward, win rate and the ``log n - (n-1)/n`` bound.
* :mod:`~klpolicy.best_of_n.frontier`: best-of-n's reward-KL curve against the
  closed form's frontier.
* :mod:`~klpolicy.best_of_n.soft`: soft best-of-n (Verdun et al. 2025), its exact law,
  KL, distance to the tilt and frontier.
* :mod:`~klpolicy.best_of_n.calibrated`: calibrated rewards (InfAlign, QRPO), the exact
  partition function of a calibrated tilt against QRPO's closed form, and the win rate
  of best-of-N / worst-of-N decoding against the reference.
* :mod:`~klpolicy.best_of_n.overoptimization`: proxy-versus-gold reward
  over-optimisation (Gao et al. 2022) under the closed form and under best-of-n.
"""

from . import overoptimization as overoptimization
from .calibrated import (
    CALIBRATED_TRANSFORMS,
    CalibratedPartition,
    CalibratedTransform,
    OptimalExponent,
    calibrated_partition,
    calibrated_policy,
    calibrated_reward,
    inference_win_rate,
    optimal_exponent,
)
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
from .soft import (
    SoftBestOfNFrontier,
    SoftBestOfNGap,
    soft_best_of_n_frontier,
    soft_best_of_n_gap,
    soft_best_of_n_kl,
    soft_best_of_n_policy,
)

__all__ = [
    "CALIBRATED_TRANSFORMS",
    "BestOfNComparison",
    "BestOfNCurve",
    "CalibratedPartition",
    "CalibratedTransform",
    "OptimalExponent",
    "SoftBestOfNFrontier",
    "SoftBestOfNGap",
    "best_of_n_curve",
    "best_of_n_expected_reward",
    "best_of_n_for_kl",
    "best_of_n_kl",
    "best_of_n_kl_bound",
    "best_of_n_policy",
    "best_of_n_vs_optimal",
    "best_of_n_win_rate",
    "calibrated_partition",
    "calibrated_policy",
    "calibrated_reward",
    "inference_win_rate",
    "optimal_exponent",
    "soft_best_of_n_frontier",
    "soft_best_of_n_gap",
    "soft_best_of_n_kl",
    "soft_best_of_n_policy",
]
