"""klpolicy: exact KL-regularised policies, the maths behind the RLHF KL penalty.

The problem ``max_pi E_pi[r] - beta KL(pi || pi_ref)`` has the closed-form
maximiser ``pi* = pi_ref exp(r / beta) / Z``. The top-level namespace
re-exports the core (:mod:`klpolicy.core`); one subpackage per area holds the
rest: ``sequences``, ``estimators``, ``control``, ``best_of_n`` (with
``overoptimization``), ``preference``, ``sampling``, ``behaviour`` (``diversity``,
``calibration``, ``retention``), the module ``trust_region``, and the leaves
``plotting``, ``testing``, ``torch`` and ``app`` (the command line). See
``docs/architecture.md`` for the parts and the arrows allowed between them.
Importing klpolicy imports numpy and scipy only.

>>> import klpolicy
>>> klpolicy.optimal_policy([0.5, 0.5], [1.0, 0.0], beta=0.5).round(2)
array([0.88, 0.12])
"""

import sys as _sys

from . import (
    _moved,
    behaviour,
    best_of_n,
    control,
    core,
    estimators,
    preference,
    sampling,
    sequences,
    trust_region,
)
from .behaviour import calibration, diversity, retention
from .best_of_n import best_of_n_kl, best_of_n_policy, overoptimization
from .core import (
    DIVERGENCES,
    FDivergence,
    FFrontier,
    Frontier,
    beta_for_divergence,
    beta_for_kl,
    cross_entropy,
    effective_support,
    entropy,
    expected_reward,
    f_divergence,
    f_frontier,
    f_optimal_policy,
    f_soft_value,
    frontier,
    kl_divergence,
    max_kl,
    objective,
    optimal_kl,
    optimal_policy,
    soft_value,
    suboptimality,
    total_variation,
)

# Short import paths for the modules that live inside an area's subpackage:
# ``klpolicy.diversity`` is the module object ``klpolicy.behaviour.diversity``.
for _module in (calibration, diversity, retention, overoptimization):
    _sys.modules[f"{__name__}.{_module.__name__.rsplit('.', 1)[-1]}"] = _module
del _module, _sys
# the module paths of the layout before the re-layout: one table, each with a warning
_moved.install()

__version__ = "0.1.0"

__all__ = [
    "DIVERGENCES",
    "FDivergence",
    "FFrontier",
    "Frontier",
    "__version__",
    "behaviour",
    "best_of_n",
    "best_of_n_kl",
    "best_of_n_policy",
    "beta_for_divergence",
    "beta_for_kl",
    "calibration",
    "control",
    "core",
    "cross_entropy",
    "diversity",
    "effective_support",
    "entropy",
    "estimators",
    "expected_reward",
    "f_divergence",
    "f_frontier",
    "f_optimal_policy",
    "f_soft_value",
    "frontier",
    "kl_divergence",
    "max_kl",
    "objective",
    "optimal_kl",
    "optimal_policy",
    "overoptimization",
    "preference",
    "retention",
    "sampling",
    "sequences",
    "soft_value",
    "suboptimality",
    "total_variation",
    "trust_region",
]
