"""Test other people's KL-regularised-policy code against klpolicy's exact answers.

Install with ``pip install klpolicy[testing]`` (it needs hypothesis).

* :mod:`klpolicy.testing.strategies`: hypothesis strategies for problems of
  the field (distributions, rewards, betas, problems, token trees, preference
  pairs, log-ratios).
* ``check_*`` suites: plain functions that run a property battery on someone
  else's function and either return ``None`` or raise ``AssertionError``
  naming the smallest falsifying input and what is wrong.
* :mod:`klpolicy.testing.pytest_plugin`: pytest fixtures and a marker.
* :mod:`klpolicy.testing.cli`: ``klpolicy check SUITE module:function``, the
  suites from the shell (exit 0 on pass, 1 on failure, 2 on bad arguments).

>>> import numpy as np
>>> from scipy.special import rel_entr
>>> from klpolicy.testing import check_kl_divergence
>>> check_kl_divergence(lambda p, q: rel_entr(p, q).sum())  # passes: returns None
"""

import importlib
from typing import Any

_CHECKS = (
    "ClampBiasWarning",
    "check_dpo_loss",
    "check_kl_controller",
    "check_kl_divergence",
    "check_kl_estimator",
    "check_optimal_policy",
    "check_soft_value",
)


_LOSS_CHECKS = ("check_pair_loss",)
# the KL-term suite needs torch, not hypothesis
_TERM_CHECKS = ("KLTermReport", "check_kl_term", "kl_term_report")


def _load(module: str):
    """Import a submodule that needs hypothesis, naming the extra when it is missing."""
    try:
        return importlib.import_module(module, __name__)
    except ModuleNotFoundError as exc:
        if exc.name != "hypothesis":
            raise
        raise ImportError(
            "klpolicy.testing's suites and strategies need hypothesis, which is not "
            "installed. Install it with `pip install klpolicy[testing]`."
        ) from exc


def __getattr__(name: str) -> Any:
    # lazy, so that importing klpolicy.testing.pytest_plugin does not import hypothesis
    if name in _TERM_CHECKS:
        return getattr(importlib.import_module("._checks_kl_terms", __name__), name)
    if name in _LOSS_CHECKS:
        return getattr(_load("._checks_losses"), name)
    if name in _CHECKS:
        return getattr(_load(".checks"), name)
    if name in ("strategies", "checks"):
        return _load("." + name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_CHECKS, *_LOSS_CHECKS, *_TERM_CHECKS, "strategies", "checks"])


__all__ = [
    "ClampBiasWarning",
    "KLTermReport",
    "check_dpo_loss",
    "check_kl_controller",
    "check_kl_divergence",
    "check_kl_estimator",
    "check_kl_term",
    "check_optimal_policy",
    "check_pair_loss",
    "check_soft_value",
    "kl_term_report",
    "strategies",
]
