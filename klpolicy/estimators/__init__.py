"""KL estimators: per-sample estimates, their exact moments and bias, and where training lands.

Samples ``x ~ p`` with ``logp = log p(x)``, ``logq = log q(x)`` give per-sample
estimates of ``KL(p || q)``: k1 = logp - logq, k2 = (logp - logq)^2 / 2,
k3 = exp(logq - logp) - 1 - (logq - logp) (Schulman 2020).

* :mod:`~klpolicy.estimators.registry`: one row per estimator (value, derivative, exact
  bias, Gaussian moments, where each placement converges); every other module looks
  estimators up there.
* :mod:`~klpolicy.estimators.samples`: the per-sample estimators, exact moments and bias.
* :mod:`~klpolicy.estimators.offpolicy`: moments and bias under another sampling law.
* :mod:`~klpolicy.estimators.gaussian`: moments for Gaussian log-ratios, Schulman's table.
* :mod:`~klpolicy.estimators.gradients`: expected gradients of an estimator placed in
  the reward or in the loss, on- or off-policy (``sampler=``, ``ratio=``), the gradient
  flow and its fixed point.
* :mod:`~klpolicy.estimators.fgradients`: the exact gradient of a divergence of
  :data:`klpolicy.DIVERGENCES` (reverse and forward KL, chi-squared, ...) in the logits.
* :mod:`~klpolicy.estimators.targets`: where GRPO-style trainers converge.
"""

from .fgradients import divergence_gradient
from .gaussian import SCHULMAN_2020_TABLE, GaussianTable, gaussian_moments, schulman_table
from .gradients import (
    RATIOS,
    Flow,
    Stability,
    expected_gradient,
    fixed_point,
    fixed_point_stability,
    gradient_flow,
    objective_gradient,
)
from .offpolicy import off_policy_bias, off_policy_moments
from .registry import ESTIMATORS, PLACEMENTS, Estimator, estimator_names, get_estimator
from .samples import abs_kl, bias, full_kl, k1, k2, k3, moments, sample_estimates
from .targets import grpo_expected_update, grpo_fixed_point, token_k3_fixed_point

__all__ = [
    "ESTIMATORS",
    "PLACEMENTS",
    "RATIOS",
    "SCHULMAN_2020_TABLE",
    "Estimator",
    "Flow",
    "GaussianTable",
    "Stability",
    "abs_kl",
    "bias",
    "divergence_gradient",
    "estimator_names",
    "expected_gradient",
    "fixed_point",
    "fixed_point_stability",
    "full_kl",
    "gaussian_moments",
    "get_estimator",
    "gradient_flow",
    "grpo_expected_update",
    "grpo_fixed_point",
    "k1",
    "k2",
    "k3",
    "moments",
    "objective_gradient",
    "off_policy_bias",
    "off_policy_moments",
    "sample_estimates",
    "schulman_table",
    "token_k3_fixed_point",
]
