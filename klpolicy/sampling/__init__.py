"""Sampling: the laws inference engines sample from, and what they do to the KL.

RLHF rollouts come from an engine that transforms the policy's logits
(temperature, top-k, top-p, min-p) before it samples, while the trainer scores the
tokens with the policy's own log-probabilities. The samples then come from a law
``s``, not from ``pi``.

* :mod:`~klpolicy.sampling.laws`: the exact law ``s`` of a batch of logit rows, in
  Hugging Face transformers' or vLLM's processing order.
* :mod:`~klpolicy.sampling.trees`: the sampler's law on a token tree and its KL to the
  policy both ways (``inf`` where truncation removes support).
* :mod:`~klpolicy.sampling.estimates`: the KL a trainer logs from the sampler's draws,
  and importance corrections (full ratio, truncated, masked) with exact bias and variance
  of the KL estimate and of the policy gradient.
* :mod:`~klpolicy.sampling.diagnostics`: the sampler/trainer mismatch estimated from
  logged per-token log-probs (KL(s||pi) with standard errors, extreme ratios, the
  trainer's mass outside the sampler's support).
"""

from .diagnostics import SamplerMismatch, sampler_mismatch
from .estimates import (
    CORRECTIONS,
    CorrectedGradient,
    CorrectedMoments,
    corrected_gradient_moments,
    corrected_kl_moments,
    logged_kl_moments,
)
from .laws import (
    ENGINE_DEFAULTS,
    ORDERS,
    VLLM_GREEDY_BELOW,
    CutSensitivity,
    cut_sensitivity,
    sampler_law,
)
from .trees import SamplerTree, sampler_tree

__all__ = [
    "CORRECTIONS",
    "ENGINE_DEFAULTS",
    "ORDERS",
    "VLLM_GREEDY_BELOW",
    "CorrectedGradient",
    "CorrectedMoments",
    "CutSensitivity",
    "SamplerMismatch",
    "SamplerTree",
    "corrected_gradient_moments",
    "corrected_kl_moments",
    "cut_sensitivity",
    "logged_kl_moments",
    "sampler_law",
    "sampler_mismatch",
    "sampler_tree",
]
