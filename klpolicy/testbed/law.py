"""The exact completion law of a causal language model, by enumerating its token tree."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from klpolicy.core.internal import validation as V

#: The most sequences :func:`sequence_law` enumerates (each one is held in memory).
MAX_SEQUENCES = 10**6


def _token_ids(name: str, ids) -> list[int]:
    """Token ids: integers >= 0 in a flat sequence (or one integer), refused by name."""
    try:
        a = np.asarray(ids)
    except ValueError:  # ragged
        a = None
    if a is None or a.dtype.kind not in "iu" or (a.size and a.min() < 0) or a.ndim > 2:
        raise ValueError(
            f"`{name}` must be token ids: integers >= 0 in a flat sequence; got {V.describe(ids)}"
        )
    return [int(t) for t in a.reshape(-1)]


__all__ = ["SequenceLaw", "sequence_law"]


@dataclass(frozen=True)
class SequenceLaw:
    """Every completion of a prompt with its exact probability.

    Attributes
    ----------
    completions : tuple of tuple of int
        The completions (token ids, without the prompt), in depth-first order of the tree
        with tokens ascending; one that ends at EOS includes the EOS token.
    probs : ndarray, shape (n,)
        Their probabilities (float64); they sum to 1 up to the float rounding of the logits.
    logprobs : ndarray, shape (n,)
        Their log-probabilities (float64), accumulated token by token.
    """

    completions: tuple
    probs: NDArray[np.float64]
    logprobs: NDArray[np.float64]
    vocab_size: int = 0
    eos_token_id: int | None = None

    def conditionals(self) -> list[NDArray[np.float64]]:
        r"""The law as a :mod:`klpolicy.sequences` token tree of fixed length.

        ``conditionals()[t][a_0, ..., a_{t-1}, :]`` is :math:`p(a_t \mid a_{<t})` over
        completions padded after EOS with EOS (a finished completion stays finished: the
        conditional after an EOS is a point mass on EOS), so the tree has depth
        ``max(len(c))`` and :math:`V^T` leaves, of which the completions are the
        non-padded ones. A prefix of probability 0 gets the uniform conditional (any row
        of a zero-mass prefix leaves the joint law unchanged).

        Returns
        -------
        list of ndarray
            ``T`` arrays of shapes ``(V,)``, ``(V, V)``, ..., ``(V,)*T``.

        Raises
        ------
        ValueError
            When completions have different lengths and no EOS token ends the short ones,
            or when the tree would exceed 10**7 entries.

        Examples
        --------
        >>> import torch
        >>> law = sequence_law(lambda ids: torch.zeros(len(ids), 3), [0], max_new_tokens=2,
        ...                    eos_token_id=2)
        >>> [c.shape for c in law.conditionals()], law.conditionals()[1][2].tolist()
        ([(3,), (3, 3)], [0.0, 0.0, 1.0])
        """
        V = int(self.vocab_size)
        T = max(len(c) for c in self.completions)
        if V**T > 10**7:
            raise ValueError(
                f"the token tree would hold {V}**{T} entries, more than 10**7; use `.probs`"
            )
        eos = self.eos_token_id
        if eos is None and any(len(c) != T for c in self.completions):
            raise ValueError("completions of different lengths need `eos_token_id` to pad them")
        joint = np.zeros((V,) * T)
        for c, p in zip(self.completions, self.probs, strict=True):
            joint[tuple(c) + (eos,) * (T - len(c))] += p
        out = []
        for t in range(T):
            prefix = joint.sum(axis=tuple(range(t + 1, T))) if t + 1 < T else joint
            mass = prefix.sum(axis=-1, keepdims=True)
            with np.errstate(invalid="ignore", divide="ignore"):
                out.append(np.where(mass > 0, prefix / np.where(mass > 0, mass, 1.0), 1.0 / V))
        return out


def _next_logits(model, batch):
    """Next-token logits of a (B, L) batch, for a transformers model or a plain callable."""
    import torch

    if isinstance(model, torch.nn.Module) and hasattr(model, "config"):
        out = model(input_ids=batch, attention_mask=torch.ones_like(batch))
        return out.logits[:, -1, :]
    return torch.as_tensor(model(batch))


def _check_tree_size(T: int, V: int, e: int) -> None:
    """Refuse a tree of more than MAX_SEQUENCES completions before enumerating it.

    The tree's shape does not depend on the probabilities: ``(V - e)**t`` prefixes are live
    at depth ``t`` (``e`` of the ``V`` tokens end a completion), so there are
    ``e * sum_{t < T-1} (V - e)**t + V * (V - e)**(T - 1)`` completions, counted here until
    the count passes the bound (so ``T = 2**63`` is refused at once).
    """
    total, live = 0, 1
    for _ in range(T - 1):
        total += live * e
        live *= V - e
        if total + live * V > MAX_SEQUENCES or live == 0:
            break
    total += live * V
    if total > MAX_SEQUENCES:
        raise ValueError(
            f"`max_new_tokens` = {T} with a vocabulary of {V} gives more than "
            f"{MAX_SEQUENCES:,} sequences to enumerate (every one is held in memory); lower it "
            "or pass `eos_token_id`"
        )


def sequence_law(
    model, prompt_ids, *, max_new_tokens: int, eos_token_id=None, sampling=None
) -> SequenceLaw:
    r"""The exact law of every completion of ``prompt_ids`` of at most ``max_new_tokens`` tokens.

    .. math::

        p(y \mid x) = \prod_{t} \mathrm{softmax}(\mathrm{logits}(x, y_{<t}))_{y_t}

    Parameters
    ----------
    model : transformers causal LM or callable
        A ``torch.nn.Module`` with a ``config`` (called as ``model(input_ids=...,
        attention_mask=...)``, its ``.logits[:, -1]`` taken), or a callable mapping a
        ``(B, L)`` tensor of token ids to ``(B, V)`` next-token logits.
    prompt_ids : sequence of int
        The prompt's token ids (non-empty).
    max_new_tokens : int
        The most tokens a completion has (at least 1).
    eos_token_id : int or sequence of int, optional
        Tokens that end a completion (kept in it). ``None``: every completion has
        ``max_new_tokens`` tokens.
    sampling : mapping, optional
        The law the engine samples from instead of the model's own: keywords of
        :func:`klpolicy.sampling.sampler_law` (``temperature``, ``top_k``, ``top_p``,
        ``min_p``, ``order``, ``defaults``) applied to each next-token row. Mind
        ``generate``'s defaults: transformers 5.25.0 applies ``top_k=50`` unless told
        otherwise, which ``{"defaults": "transformers", "temperature": 0.7}`` reproduces
        and ``{"temperature": 0.7}`` does not. ``None``: the model's softmax
        (temperature 1, no truncation: how TRL 1.16.0's GRPO and RLOO sample by default).

    Returns
    -------
    SequenceLaw
        ``.completions``, ``.probs``, ``.logprobs`` (float64; ``-inf`` for a completion a
        truncating ``sampling`` never draws), and ``.conditionals()``, the same law as a
        :mod:`klpolicy.sequences` token tree.

    Raises
    ------
    ValueError
        For an empty ``prompt_ids``, ``max_new_tokens`` below 1, or logits that are not
        finite or not of one shape ``(B, V)``.

    Notes
    -----
    One batched forward pass per depth over every live prefix (all of the same length, so
    no padding); the log-softmax is taken in float64 from the model's logits, so the law is
    exact to the rounding of the logits. The tree has up to :math:`V^T` leaves: meant for
    small vocabularies and depths. With ``sampling`` the law of each row is
    :func:`klpolicy.sampling.sampler_law`'s, in float64.

    Examples
    --------
    >>> import torch
    >>> law = sequence_law(lambda ids: torch.zeros(len(ids), 3), [0], max_new_tokens=2, eos_token_id=2)
    >>> law.completions[:3], round(float(law.probs.sum()), 12)
    (((0, 0), (0, 1), (0, 2)), 1.0)
    """
    import torch

    if not callable(model):
        raise ValueError(
            f"`model` must be callable (a causal LM or ids -> logits); got {V.describe(model)}"
        )
    if sampling is not None:
        from collections.abc import Mapping

        from ..sampling import sampler_law

        if not isinstance(sampling, Mapping):
            raise ValueError(
                "`sampling` must be a mapping of sampler_law keywords (temperature, top_k, "
                f"top_p, min_p, order, defaults) or None; got {type(sampling).__name__}"
            )
        sampling = dict(sampling)
        sampler_law(np.zeros(2), **sampling)  # a bad keyword or value, by sampler_law's words
    prompt = _token_ids("prompt_ids", prompt_ids)
    if not prompt:
        raise ValueError("`prompt_ids` must hold at least one token; found an empty prompt")
    max_new_tokens = V.as_count("max_new_tokens", max_new_tokens)
    eos = set() if eos_token_id is None else set(_token_ids("eos_token_id", eos_token_id))
    device = None
    if isinstance(model, torch.nn.Module):
        p = next(model.parameters(), None)
        device = p.device if p is not None else None
    done: list[tuple[tuple, float]] = []
    live: list[tuple[tuple, float]] = [((), 0.0)]
    with torch.no_grad():
        for depth in range(int(max_new_tokens)):
            batch = torch.tensor(
                [prompt + list(pre) for pre, _ in live], dtype=torch.long, device=device
            )
            logits = _next_logits(model, batch)
            if logits.ndim != 2 or logits.shape[0] != len(live):
                raise ValueError(
                    f"`model` must return next-token logits of shape (B, V); found {tuple(logits.shape)}"
                )
            raw = logits.to(torch.float64).cpu().numpy()
            if np.isnan(raw).any() or np.isposinf(raw).any() or np.isneginf(raw).all(-1).any():
                raise ValueError("`model` returned logits that are not finite")
            if sampling is None:
                lp = raw - np.max(raw, axis=-1, keepdims=True)
                lp = lp - np.log(np.sum(np.exp(lp), axis=-1, keepdims=True))
            else:
                with np.errstate(divide="ignore"):
                    lp = np.log(sampler_law(raw, **sampling))
            vocab = lp.shape[-1]
            if depth == 0:
                _check_tree_size(int(max_new_tokens), vocab, len(eos & set(range(vocab))))
            nxt = []
            for (pre, base), row in zip(live, lp, strict=True):
                for v, l in enumerate(row):
                    item = (pre + (v,), base + float(l))
                    if v in eos or depth + 1 == max_new_tokens:
                        done.append(item)
                    else:
                        nxt.append(item)
            live = nxt
    done.sort(key=lambda it: it[0])
    completions = tuple(c for c, _ in done)
    logprobs = np.array([l for _, l in done], dtype=np.float64)
    return SequenceLaw(
        completions=completions,
        probs=np.exp(logprobs),
        logprobs=logprobs,
        vocab_size=int(vocab),
        eos_token_id=min(eos) if len(eos) == 1 else None,
    )
