"""klpolicy: exact KL-regularised policies, the maths behind the RLHF KL penalty.

The problem ``max_pi E_pi[r] - beta KL(pi || pi_ref)`` has the closed-form
maximiser ``pi* = pi_ref exp(r / beta) / Z``. The top-level namespace
re-exports the numpy core; the submodules ``estimators``, ``sequences``,
``control``, ``preference``, ``best_of_n``, ``overoptimization``,
``diversity``, ``calibration``, ``retention``, ``plotting``, ``testing`` and
``torch`` hold the rest. Importing klpolicy
imports numpy and scipy only.

>>> import klpolicy
>>> klpolicy.optimal_policy([0.5, 0.5], [1.0, 0.0], beta=0.5).round(2)
array([0.88, 0.12])
"""

from . import (
    best_of_n,
    calibration,
    control,
    diversity,
    estimators,
    overoptimization,
    preference,
    retention,
    sequences,
)
from .best_of_n import best_of_n_kl, best_of_n_policy
from .closed_form import (
    Frontier,
    beta_for_kl,
    expected_reward,
    frontier,
    max_kl,
    objective,
    optimal_kl,
    optimal_policy,
    soft_value,
)
from .divergences import (
    cross_entropy,
    effective_support,
    entropy,
    kl_divergence,
    total_variation,
)

__version__ = "0.1.0"

__all__ = [
    "Frontier",
    "__version__",
    "best_of_n",
    "best_of_n_kl",
    "best_of_n_policy",
    "beta_for_kl",
    "calibration",
    "control",
    "cross_entropy",
    "diversity",
    "effective_support",
    "entropy",
    "estimators",
    "expected_reward",
    "frontier",
    "kl_divergence",
    "max_kl",
    "objective",
    "optimal_kl",
    "optimal_policy",
    "overoptimization",
    "preference",
    "retention",
    "sequences",
    "soft_value",
    "total_variation",
]
