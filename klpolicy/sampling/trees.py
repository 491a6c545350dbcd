r"""The sampler's law on a token tree: per-token transforms give a new sequence law.

An engine applies temperature/top-k/top-p/min-p to every next-token conditional,
so the law of whole responses is the tree of transformed conditionals
:math:`s(a_t \mid a_{<t})`, not the transform of the sequence law
:math:`\pi(y)` (top-k of a joint would keep ``k`` sequences; top-k per token keeps
up to ``k**T``). :func:`sampler_tree` builds that tree and measures it against the
policy with the chain rule of :mod:`klpolicy.sequences`.

All of it is re-exported by :mod:`klpolicy.sampling`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..core.internal import validation as V
from ..sequences import joint, per_token_kl
from .laws import law_last, settings

__all__ = ["SamplerTree", "sampler_tree"]


class SamplerTree(NamedTuple):
    """Result of :func:`sampler_tree` (see there for the meaning of each field)."""

    conditionals: list[NDArray]
    kl_sampler_policy: float
    kl_policy_sampler: float
    per_token_sampler_policy: NDArray
    per_token_policy_sampler: NDArray
    policy_mass_outside: float


def transform_tree(levels: list[NDArray], s: Any, eos_token: int | None, min_length: int):
    """Apply the sampler's law to every conditional row of a validated tree."""
    out = []
    with np.errstate(divide="ignore"):
        for t, c in enumerate(levels):
            logits = np.log(c.astype(np.float64))
            if eos_token is not None and t < min_length:
                logits[..., eos_token] = -np.inf
                dead = np.all(logits == -np.inf, axis=-1)
                if np.any(dead):
                    idx = tuple(int(i) for i in np.argwhere(dead)[0]) if dead.ndim else ()
                    raise ValueError(
                        f"`min_length` = {min_length} blocks `eos_token` = {eos_token} where it "
                        f"holds all the mass: conditionals[{t}] row {idx} has nothing else to "
                        "sample"
                    )
            out.append(law_last(logits, s).astype(c.dtype, copy=False))
    return out


def sampler_tree(
    conditionals: Any,
    *,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    order: str = "transformers",
    min_tokens_to_keep: int = 1,
    defaults: Any = None,
    eos_token: int | None = None,
    min_length: int = 0,
) -> SamplerTree:
    r"""The token tree an engine samples responses from, and its KL to the policy both ways.

    .. math::

        s(a_t \mid a_{<t}) = \mathrm{law}\big(\log \pi(\cdot \mid a_{<t})\big), \qquad
        \mathrm{KL}(s \| \pi) = \sum_t \mathbb{E}_{a_{<t} \sim s}
            \mathrm{KL}\big(s(\cdot|a_{<t}) \,\|\, \pi(\cdot|a_{<t})\big)

    where ``law`` is :func:`klpolicy.sampling.sampler_law` with the given settings,
    applied to every conditional row.

    .. warning::

       Unset settings are off here; ``generate`` (transformers 5.25.0) fills them
       from its defaults, ``top_k=50`` among them
       (``transformers/generation/configuration_utils.py`` line 623). For the tree
       ``model.generate(do_sample=True, ...)`` samples, pass
       ``defaults="transformers"`` or ``defaults=model.generation_config``.

    Parameters
    ----------
    conditionals : list of array_like
        The policy's token tree, as :mod:`klpolicy.sequences` takes it:
        ``conditionals[t]`` of shape ``(V,)*(t+1)``, rows summing to one.
    temperature, top_k, top_p, min_p, order, min_tokens_to_keep, defaults
        As in :func:`klpolicy.sampling.sampler_law` (``top_k=0`` is off; ``defaults``
        fills the settings left ``None``).
    eos_token : int, optional
        A token id in ``[0, V)`` that ends a response. With ``min_length``, the
        engine forbids it at positions ``t < min_length`` before any other
        processing (transformers' ``MinLengthLogitsProcessor``, vLLM's
        ``min_tokens``): its logit is ``-inf`` there.
    min_length : int, optional
        Number of leading positions where ``eos_token`` is forbidden (0: none).

    Returns
    -------
    SamplerTree
        ``conditionals``: the sampler's tree ``s`` (same structure and dtype);
        ``kl_sampler_policy``: the sequence-level :math:`\mathrm{KL}(s\|\pi)`,
        finite (``s`` lives inside ``pi``'s support);
        ``kl_policy_sampler``: :math:`\mathrm{KL}(\pi\|s)`, ``inf`` as soon as any
        filter removes a token that ``pi`` reaches with positive probability
        (truncation removes support: importance weights ``pi/s`` cannot recover
        that mass);
        ``per_token_sampler_policy`` and ``per_token_policy_sampler``: shape
        ``(T,)``, the per-position contributions (prefixes drawn from the first
        law), summing to the two sequence KLs;
        ``policy_mass_outside``: :math:`\pi(\{y : s(y) = 0\})`, the probability of
        the responses the sampler never produces.

    Raises
    ------
    ValueError
        For an invalid tree or settings (as in ``sampler_law``), ``eos_token``
        outside ``[0, V)``, ``min_length`` negative, or ``min_length`` forbidding
        ``eos_token`` in a row where it holds all the mass.

    Notes
    -----
    The transformed sequence law is not the transform of the sequence law: at
    ``T != 1`` the product of tempered conditionals is not proportional to
    :math:`\pi(y)^{1/T}` (each conditional has its own normaliser), and
    truncation per token keeps different sequences than truncation of the joint.
    The two KLs are computed by the chain rule
    (:func:`klpolicy.sequences.per_token_kl`), exact on every row.

    References
    ----------
    .. [1] Holtzman et al., "The Curious Case of Neural Text Degeneration", 2020,
       arXiv:1904.09751.
    .. [2] TRL, ``docs/source/how_to_train.md`` and issue #1002, 2023 (top-k and
       ``min_length`` in PPO's rollouts as causes of a negative KL).

    Examples
    --------
    >>> from klpolicy.sampling import sampler_tree
    >>> pi = [[0.6, 0.3, 0.1], [[0.7, 0.2, 0.1], [0.4, 0.4, 0.2], [0.5, 0.3, 0.2]]]
    >>> res = sampler_tree(pi, top_k=2)
    >>> res.conditionals[0].round(4)
    array([0.6667, 0.3333, 0.    ])
    >>> round(res.kl_sampler_policy, 4), res.kl_policy_sampler
    (0.25, inf)
    >>> round(res.policy_mass_outside, 4)  # 1 - (0.6 * 0.9 + 0.3 * 0.8)
    0.22
    """
    s = settings(temperature, top_k, top_p, min_p, order, min_tokens_to_keep, defaults)
    levels = V.as_token_tree("conditionals", conditionals)
    size = levels[0].shape[0]
    if eos_token is not None:
        eos_token = V.as_count("eos_token", eos_token, lo=0)
        if eos_token >= size:
            raise ValueError(f"`eos_token` must be a token id in [0, {size}); got {eos_token}")
    min_length = V.as_count("min_length", min_length, lo=0, hi=V.MAX_LOOP_COUNT)
    out = transform_tree(levels, s, eos_token, min_length)
    forward = per_token_kl(out, levels)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        backward = per_token_kl(levels, out)
    pj, sj = joint(levels), joint(out)
    outside = float(np.sum(np.where(sj == 0, pj, 0.0), dtype=np.float64))
    kl_back = float(np.sum(backward, dtype=np.float64))
    return SamplerTree(
        conditionals=out,
        kl_sampler_policy=float(np.sum(forward, dtype=np.float64)),
        kl_policy_sampler=math.inf if outside > 0 else kl_back,
        per_token_sampler_policy=forward,
        per_token_policy_sampler=backward,
        policy_mass_outside=outside,
    )
