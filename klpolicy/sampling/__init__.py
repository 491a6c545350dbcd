"""Sampling: the laws inference engines sample from, and what they do to the KL.

RLHF rollouts come from an engine that transforms the policy's logits
(temperature, top-k, top-p, min-p) before it samples, while the trainer scores the
tokens with the policy's own log-probabilities. The samples then come from a law
``s``, not from ``pi``.

* :mod:`~klpolicy.sampling.laws`: the exact law ``s`` of a batch of logit rows, in
  Hugging Face transformers' or vLLM's processing order.
"""

from .laws import ORDERS, VLLM_GREEDY_BELOW, sampler_law

__all__ = [
    "ORDERS",
    "VLLM_GREEDY_BELOW",
    "sampler_law",
]
