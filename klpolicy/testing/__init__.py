"""Test other people's KL-regularised-policy code against klpolicy's exact answers.

Install with ``pip install klpolicy[testing]`` (it needs hypothesis).

* :mod:`klpolicy.testing.strategies`: hypothesis strategies for problems of
  the field (distributions, rewards, betas, problems, token trees, preference
  pairs, log-ratios).
* ``check_*`` suites: plain functions that run a property battery on someone
  else's function and either return ``None`` or raise ``AssertionError``
  naming the smallest falsifying input and what is wrong.
* :mod:`klpolicy.testing.pytest_plugin`: pytest fixtures and a marker.

>>> import numpy as np
>>> from scipy.special import rel_entr
>>> from klpolicy.testing import check_kl_divergence
>>> check_kl_divergence(lambda p, q: rel_entr(p, q).sum())  # passes: returns None
"""

from . import strategies
from .checks import (
    check_dpo_loss,
    check_kl_controller,
    check_kl_divergence,
    check_kl_estimator,
    check_optimal_policy,
    check_soft_value,
)

__all__ = [
    "check_dpo_loss",
    "check_kl_controller",
    "check_kl_divergence",
    "check_kl_estimator",
    "check_optimal_policy",
    "check_soft_value",
    "strategies",
]
