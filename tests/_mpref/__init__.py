"""The mpmath references of the exact tests: one package, as scipy's ``_mptestutils``.

Every exact test compares klpolicy against a function of this package (or, where its
recipe is particular to one test, against a helper that builds on these), and asserts
with :func:`assert_mp_close`. The working precision of a test is set by the
``_mp_working_precision`` fixture of ``tests/conftest.py`` (50 digits, or the test's
``@pytest.mark.mp_dps(n)``), never by assigning ``mp.mp.dps`` at import; the references
below that need more run inside ``mp.workdps`` themselves.

Modules
-------
``closed_form``
    pi*, the soft value, KL, cross-entropy, best-of-n and the tilt's moments at 400 digits.
``divergences``
    the f-divergences from their generators, f', its inverse, the f-regularised optimum and
    the forward-KL optimum at the extremes.
``estimators``
    the per-sample estimators k1/k2/k3/abs and their exact moments, on and off policy.
``dynamics``
    the expected update of the group rules (GRPO, REINFORCE) by enumeration of every group.
``preference``
    the finite-data DPO optimum (imported as ``tests._mpref.preference``: it builds on
    ``tests/preference/_mp_optima.py``).
``asserts``
    :func:`assert_mp_close` and :func:`rel_err`.
"""

from .asserts import assert_mp_close, rel_err
from .closed_form import (
    DPS,
    best_of_n_expected_reward,
    best_of_n_kl,
    best_of_n_policy,
    best_of_n_win_rate,
    cross_entropy,
    kl,
    optimal_kl,
    optimal_policy,
    soft_value,
    soft_value_scale,
    tilt_moments,
    to_float,
)
from .closed_form import _norm as normalise
from .closed_form import _precise as precise
from .divergences import f, f_divergence, f_optimum, f_ratio, forward_kl_optimum, fprime
from .dynamics import expected_group_update, group_advantages, softmax
from .estimators import estimator_moments, k

__all__ = [
    "DPS",
    "assert_mp_close",
    "best_of_n_expected_reward",
    "best_of_n_kl",
    "best_of_n_policy",
    "best_of_n_win_rate",
    "cross_entropy",
    "estimator_moments",
    "expected_group_update",
    "f",
    "f_divergence",
    "f_optimum",
    "f_ratio",
    "forward_kl_optimum",
    "fprime",
    "group_advantages",
    "k",
    "kl",
    "normalise",
    "optimal_kl",
    "optimal_policy",
    "precise",
    "rel_err",
    "soft_value",
    "soft_value_scale",
    "softmax",
    "tilt_moments",
    "to_float",
]
