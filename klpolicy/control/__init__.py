"""KL-coefficient controllers and their closed loop on an analytic problem.

* :mod:`~klpolicy.control.controllers`: fixed, adaptive (Ziegler et al. 2019),
  dead-zone and Lagrangian controllers, each with ``.value`` and
  ``.update(current, n_steps)`` (drop-in for TRL's).
* :mod:`~klpolicy.control.simulation`: the closed loop on the exact optimum
  (:func:`simulate`), comparisons, the KL elasticity and stability maps.
"""

from .controllers import (
    AdaptiveKLController,
    DeadZoneKLController,
    FixedKLController,
    LagrangianKLController,
    convert_kl_target,
)
from .simulation import (
    SimulationTrace,
    StabilityRegion,
    compare_controllers,
    kl_elasticity,
    simulate,
    stability_region,
)

__all__ = [
    "AdaptiveKLController",
    "DeadZoneKLController",
    "FixedKLController",
    "LagrangianKLController",
    "SimulationTrace",
    "StabilityRegion",
    "compare_controllers",
    "convert_kl_target",
    "kl_elasticity",
    "simulate",
    "stability_region",
]
