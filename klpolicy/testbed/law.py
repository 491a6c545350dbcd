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


def _next_logits(model, batch):
    """Next-token logits of a (B, L) batch, for a transformers model or a plain callable."""
    import torch

    if isinstance(model, torch.nn.Module) and hasattr(model, "config"):
        out = model(input_ids=batch, attention_mask=torch.ones_like(batch))
        return out.logits[:, -1, :]
    return torch.as_tensor(model(batch))


def sequence_law(model, prompt_ids, *, max_new_tokens: int, eos_token_id=None) -> SequenceLaw:
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

    Returns
    -------
    SequenceLaw
        ``.completions``, ``.probs``, ``.logprobs`` (float64).

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
    small vocabularies and depths. Sampling is at temperature 1 with no top-k/top-p
    truncation (TRL 1.16.0's GRPO and RLOO sample so by default).

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
            lp = torch.log_softmax(logits.to(torch.float64), dim=-1).cpu().numpy()
            if np.isnan(lp).any() or np.isposinf(lp).any():
                raise ValueError("`model` returned logits that are not finite")
            nxt = []
            for (pre, base), row in zip(live, lp, strict=True):
                for v, l in enumerate(row):
                    item = (pre + (v,), base + float(l))
                    if v in eos or depth + 1 == max_new_tokens:
                        done.append(item)
                    else:
                        nxt.append(item)
            live = nxt
            if len(done) + len(live) > MAX_SEQUENCES:
                raise ValueError(
                    f"`max_new_tokens` = {max_new_tokens} with a vocabulary of {lp.shape[1]} "
                    f"gives more than {MAX_SEQUENCES:,} sequences to enumerate (every one is held "
                    "in memory); lower it or pass `eos_token_id`"
                )
    done.sort(key=lambda it: it[0])
    completions = tuple(c for c, _ in done)
    logprobs = np.array([l for _, l in done], dtype=np.float64)
    return SequenceLaw(completions=completions, probs=np.exp(logprobs), logprobs=logprobs)
