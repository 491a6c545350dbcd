"""The core: the closed form of the KL-regularised problem and the divergences.

``max_pi E_pi[r] - beta KL(pi || ref)`` is attained at ``pi* = ref exp(r / beta) / Z``.
:mod:`~klpolicy.core.closed_form` computes it and every quantity of it exactly
(soft value, KL, expected reward, frontier, the inverse ``beta_for_kl``);
:mod:`~klpolicy.core.divergences` computes KL, entropy, cross-entropy and total
variation; :mod:`~klpolicy.core.fdivergences` the f-divergences and their registry,
:mod:`~klpolicy.core.f_optima` the optima they regularise. The numpy kernel (its
blocked fast path) lives in ``_tilt``, the one router of the fast paths (each row's route
from its statistics, for numpy and the array API alike) in ``_route``, the careful kernel every array library shares
in ``_careful``, the same closed form for torch, JAX and CuPy in ``_xp``, the precise
numerics in ``_numerics``, the vectorised root finder in ``roots``, the stability test
of fixed points in ``_flows``, the lazy ``scipy.special`` in ``_lazy`` and the input
checks the parts share (with the wording of every message) in ``_validation``; other subpackages reach those through
:mod:`klpolicy.core.internal` only. Core imports nothing else from klpolicy.
Everything public here is re-exported by :mod:`klpolicy`.
"""

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
    suboptimality,
)
from .divergences import (
    cross_entropy,
    effective_support,
    entropy,
    kl_divergence,
    total_variation,
)
from .f_optima import (
    FFrontier,
    beta_for_divergence,
    f_frontier,
    f_optimal_policy,
    f_soft_value,
)
from .fdivergences import DIVERGENCES, FDivergence, f_divergence

__all__ = [
    "DIVERGENCES",
    "FDivergence",
    "FFrontier",
    "Frontier",
    "beta_for_divergence",
    "beta_for_kl",
    "cross_entropy",
    "effective_support",
    "entropy",
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
    "soft_value",
    "suboptimality",
    "total_variation",
]
