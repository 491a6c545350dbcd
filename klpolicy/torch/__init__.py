"""Torch twins of the closed form, learned policies and the trainers RLHF uses.

Install with ``pip install klpolicy[torch]``. Everything here measures itself
against the exact answer of the numpy core: the trainers record, per step,
the distance of the learned policy to the exact optimum
``pi* = ref exp(r / beta) / Z``.

Modules
-------
``klpolicy.torch.closed_form``
    :func:`optimal_policy`, :func:`soft_value`, :func:`optimal_kl`, the
    divergences and the k1/k2/k3 estimators on tensors (device and dtype kept,
    differentiable): the core's one array-API kernel (:mod:`klpolicy._xp`),
    the very functions ``klpolicy.optimal_policy`` runs on tensors.
``klpolicy.torch.policies``
    :class:`TabularPolicy`, :class:`TabularConditionals` and the small
    autoregressive :class:`AutoregressivePolicy` (a GRU over tokens).
``klpolicy.torch.trainers``
    :func:`fit_policy`, :func:`fit_sequence_policy`, :func:`fit_reference`.
``klpolicy.torch.targets``
    where the biased trainers converge (numpy): :func:`grpo_fixed_point`,
    :func:`token_k3_fixed_point`.

Importing ``klpolicy`` never imports torch; importing ``klpolicy.torch`` does.
"""

try:
    import torch as _torch  # absolute import: the real torch, not this package
except ImportError as exc:  # pragma: no cover - exercised only without torch
    raise ImportError(
        "klpolicy.torch needs PyTorch, which is not installed. "
        "Install it with `pip install klpolicy[torch]` "
        "(or `pip install torch` first to choose a CPU or CUDA build)."
    ) from exc

from klpolicy.torch.closed_form import (
    cross_entropy,
    entropy,
    k1,
    k2,
    k3,
    kl_divergence,
    optimal_kl,
    optimal_policy,
    soft_value,
    total_variation,
)
from klpolicy.torch.policies import (
    AutoregressivePolicy,
    TabularConditionals,
    TabularPolicy,
    default_device,
)
from klpolicy.torch.targets import grpo_fixed_point, token_k3_fixed_point
from klpolicy.torch.trainers import (
    FitResult,
    fit_policy,
    fit_reference,
    fit_sequence_policy,
)
from klpolicy.trust_region import ppo_clip_step, trust_region_step

del _torch

__all__ = [
    "AutoregressivePolicy",
    "FitResult",
    "TabularConditionals",
    "TabularPolicy",
    "cross_entropy",
    "default_device",
    "entropy",
    "fit_policy",
    "fit_reference",
    "fit_sequence_policy",
    "grpo_fixed_point",
    "k1",
    "k2",
    "k3",
    "kl_divergence",
    "optimal_kl",
    "optimal_policy",
    "ppo_clip_step",
    "soft_value",
    "token_k3_fixed_point",
    "total_variation",
    "trust_region_step",
]
