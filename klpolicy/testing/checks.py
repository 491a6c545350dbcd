r"""Conformance suites: check someone else's implementation against klpolicy's exact values.

Each ``check_*`` function takes a function written by someone else, calls it
with numpy arrays in the positional order of the klpolicy function it mirrors,
and runs a property battery on it with hypothesis: agreement with klpolicy's
exact values, normalisation, invariances, limits, support, units (nats),
unbiasedness and stability at extreme inputs. It returns ``None`` when every
property holds and otherwise raises ``AssertionError`` whose message names
the smallest falsifying input hypothesis found and says in one sentence what
is wrong (for example "it computes KL(q||p), not KL(p||q)").

Runs are derandomised (the same examples every time) and store nothing on
disk. Floating-point warnings raised inside the function under test are
silenced: the check judges the numbers it returns.

Tolerances
----------
A value passes when ``|got - exact| <= rtol * |exact| + slack`` where the
slack is the rounding error that any float64 algorithm of the textbook form
makes on that input (a few ulp of the largest term it must form, e.g.
``reward / beta`` for a softmax, or ``p log p`` for a KL sum). Round-off
therefore never fails a correct implementation, while the mistakes these
suites look for (a wrong temperature, a missing reference term, a reversed KL,
bits instead of nats, overflow) are wrong by far more.
"""

from __future__ import annotations

from ._checks_control import check_kl_controller
from ._checks_estimators import ClampBiasWarning, check_kl_estimator
from ._checks_kl import check_kl_divergence
from ._checks_policy import check_optimal_policy, check_soft_value
from ._checks_training import check_dpo_loss

__all__ = [
    "ClampBiasWarning",
    "check_dpo_loss",
    "check_kl_controller",
    "check_kl_divergence",
    "check_kl_estimator",
    "check_optimal_policy",
    "check_soft_value",
]
