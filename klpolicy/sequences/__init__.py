"""Token level: the sequence-level optimum as a policy over tokens, and KL along a sequence.

A token tree of vocabulary ``V`` and length ``T`` holds conditionals
``conditionals[t][a_0, ..., a_{t-1}, :] = p(a_t | a_<t)`` (shape ``(V,)*(t+1)``).

* :mod:`~klpolicy.sequences.trees`: joint law, marginals, sampling, log-probs of a tree.
* :mod:`~klpolicy.sequences.bellman`: the soft Bellman recursion whose token policy
  equals the sequence-level closed form, and the per-token KL.
* :mod:`~klpolicy.sequences.diagnostics`: sampled sequence KL with exact moments,
  the per-position KL profile of logged log-probs.
* :mod:`~klpolicy.sequences.ceiling`: the reward ceiling of a KL budget.
"""

from .bellman import SoftBellman, per_token_kl, soft_bellman, token_kl_map
from .ceiling import Ceiling, reward_ceiling
from .diagnostics import (
    OPENING_SHARE,
    STYLE_EVENNESS,
    VOCABULARY_TOP_SHARE,
    TokenKLProfile,
    sampled_kl,
    sequence_kl_moments,
    token_kl_profile,
)
from .trees import from_joint, joint, marginals, sample, token_logprobs

__all__ = [
    "OPENING_SHARE",
    "STYLE_EVENNESS",
    "VOCABULARY_TOP_SHARE",
    "Ceiling",
    "SoftBellman",
    "TokenKLProfile",
    "from_joint",
    "joint",
    "marginals",
    "per_token_kl",
    "reward_ceiling",
    "sample",
    "sampled_kl",
    "sequence_kl_moments",
    "soft_bellman",
    "token_kl_map",
    "token_kl_profile",
    "token_logprobs",
]
