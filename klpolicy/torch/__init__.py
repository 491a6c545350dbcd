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
    differentiable): the core's one array-API kernel (:mod:`klpolicy.core._xp`),
    the very functions ``klpolicy.optimal_policy`` runs on tensors.
``klpolicy.torch.policies``
    :class:`TabularPolicy`, :class:`TabularConditionals` and the small
    autoregressive :class:`AutoregressivePolicy` (a GRU over tokens).
``klpolicy.torch.trainers``
    :func:`fit_policy`, :func:`fit_sequence_policy`, :func:`fit_reference`.

A leaf: it uses the numpy side's public API, and nothing on the numpy side
imports it. The numpy functions that used to be re-exported here
(``grpo_fixed_point``, ``token_k3_fixed_point``: :mod:`klpolicy.estimators`;
``trust_region_step``, ``ppo_clip_step``: :mod:`klpolicy.trust_region`) are still
reachable under their old names, with a :class:`DeprecationWarning` naming their home.

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
from klpolicy.torch.trainers import (
    FitResult,
    fit_policy,
    fit_reference,
    fit_sequence_policy,
)

del _torch

# Old homes of numpy functions: still importable from here, with a pointer to their home.
_MOVED = {
    "grpo_fixed_point": "klpolicy.estimators",
    "token_k3_fixed_point": "klpolicy.estimators",
    "ppo_clip_step": "klpolicy.trust_region",
    "trust_region_step": "klpolicy.trust_region",
}


def __getattr__(name: str):
    if name in _MOVED:
        import importlib
        import warnings

        warnings.warn(
            f"klpolicy.torch.{name} is a numpy function; import it from {_MOVED[name]}",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module(_MOVED[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
    "k1",
    "k2",
    "k3",
    "kl_divergence",
    "optimal_kl",
    "optimal_policy",
    "soft_value",
    "total_variation",
]
