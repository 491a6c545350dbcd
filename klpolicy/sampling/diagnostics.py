r"""The sampler/trainer mismatch on logged data, in the style of ``sequences.token_kl_profile``.

A run logs, for every generated token, the sampler's log-probability
:math:`\log s(a_t)` (the engine's processed log-probs) and the trainer's
:math:`\log \pi(a_t)`. Tokens were drawn from ``s``, so
:math:`\rho_t = \pi(a_t)/s(a_t)` is the importance ratio of each token and
:math:`k_1 = -\log\rho` is an unbiased per-token estimate of
:math:`\mathrm{KL}(s\|\pi)` (the mismatch); :math:`k_3 = \rho - 1 - \log\rho`
is non-negative but falls short by the trainer's mass that the sampler truncated. :func:`sampler_mismatch`
gives them with standard errors, the tokens of extreme ratio and, with the
full-vocabulary logits and the settings, how much of the trainer's mass lies
outside the sampler's support.

All of it is re-exported by :mod:`klpolicy.sampling`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import validation as V
from ..estimators import ESTIMATORS, get_estimator
from .laws import as_logits, law_last, settings

__all__ = ["SamplerMismatch", "sampler_mismatch"]


class SamplerMismatch(NamedTuple):
    """Result of :func:`sampler_mismatch` (see there for the meaning of each field)."""

    log_ratio: NDArray
    per_token: NDArray
    per_position: NDArray
    per_position_se: NDArray
    sequence_kl: NDArray
    kl: float
    kl_se: float
    extreme: NDArray
    extreme_fraction: float
    trainer_zero_fraction: float
    outside_mass: NDArray | None
    outside_fraction: float | None
    impossible_fraction: float | None


def _mean_se(values: NDArray, keep: NDArray, axis: int) -> tuple[NDArray, NDArray]:
    """Mean and standard error over kept entries (inf SE with fewer than two)."""
    n = keep.sum(axis=axis)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        v = np.where(keep, values, 0.0)
        mean = np.where(n > 0, v.sum(axis=axis) / np.maximum(n, 1), 0.0)
        dev = np.where(keep, values - np.expand_dims(mean, axis), 0.0)
        var = np.where(n > 1, (dev * dev).sum(axis=axis) / np.maximum(n - 1, 1), np.inf)
        se = np.sqrt(var / np.maximum(n, 1))
        infinite = np.any(keep & np.isinf(values), axis=axis)
    return np.where(infinite, np.inf, mean), np.where(infinite, np.inf, se)


def sampler_mismatch(
    sampler_logprobs: ArrayLike,
    trainer_logprobs: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    estimator: str = "k1",
    ratio_threshold: float = 2.0,
    tokens: ArrayLike | None = None,
    logits: ArrayLike | None = None,
    temperature: float | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    order: str = "transformers",
    min_tokens_to_keep: int = 1,
    defaults: Any = None,
    strict: bool = True,
) -> SamplerMismatch:
    r"""Estimate the sampler/trainer mismatch :math:`\mathrm{KL}(s\|\pi)` from logged log-probs.

    .. math::

        \rho_{bt} = \frac{\pi(a_{bt})}{s(a_{bt})}, \qquad
        k_1 = -\log\rho, \quad k_3 = \rho - 1 - \log\rho, \qquad
        \mathbb{E}_{a\sim s}[k_1] = \mathrm{KL}\big(s(\cdot|a_{<t}) \,\|\, \pi(\cdot|a_{<t})\big),
        \quad \mathbb{E}_{a\sim s}[k_3] = \mathrm{KL}(s\|\pi) - \pi(\{x: s(x) = 0\})

    Parameters
    ----------
    sampler_logprobs : array_like
        Shape ``(batch, T)``: :math:`\log s(a_t)` of the drawn tokens under the law
        they were drawn from (vLLM's ``processed_logprobs``; its default
        ``raw_logprobs`` are the *untransformed* model's, which is not ``s`` at
        ``temperature != 1`` or with truncation; TRL switched to processed log-probs
        for this, trl#4163, and prime-rl#697 found vLLM 0.10.0's processed log-probs
        still without the temperature). Finite at every unmasked token.
    trainer_logprobs : array_like
        Shape ``(batch, T)``: :math:`\log \pi(a_t)`, the trainer's log-probs of the
        same tokens; ``-inf`` allowed (the trainer rules the token out).
    mask : array_like of bool or 0/1, optional
        Shape ``(batch, T)``; 0 marks padding.
    estimator : {"k1", "k2", "k3"}
        Per-token estimate of :math:`\mathrm{KL}(s\|\pi)`: k1 (default) is
        unbiased; k3 is non-negative and of lower variance, unbiased only where the
        sampler covers the trainer's support (no truncation), else short by the
        truncated mass; k2 is biased (its mean is half the second moment of the
        log-ratio).
    ratio_threshold : float, optional
        A token is *extreme* when :math:`\rho > C` or :math:`\rho < 1/C`
        (``C > 1``; default 2).
    tokens : array_like of int, optional
        Shape ``(batch, T)``: the drawn token ids. Needed with ``logits``.
    logits : array_like, optional
        Shape ``(batch, T, V)``: full-vocabulary logits of the trainer at every
        position. With the settings below, :func:`sampler_law` of them is the
        sampler's law as the trainer computes it.
    temperature, top_k, top_p, min_p, order, min_tokens_to_keep, defaults
        The sampling settings (as in :func:`sampler_law`), used with ``logits``.
    strict : bool, optional
        With ``logits``: raise for a drawn token of probability zero under the
        stated settings (default), or count it in ``impossible_fraction``.

    Returns
    -------
    SamplerMismatch
        ``log_ratio`` (batch, T): :math:`\log\rho` (0 where masked);
        ``per_token`` (batch, T): the estimates (0 where masked);
        ``per_position``, ``per_position_se`` (T,): their mean over unmasked tokens
        at each position and its standard error (``inf`` with fewer than two);
        ``sequence_kl`` (batch,): per-response sums (estimates of the sequence
        :math:`\mathrm{KL}(s\|\pi)`), ``kl``, ``kl_se``: their mean and standard
        error over responses; ``extreme`` (batch, T) and ``extreme_fraction``;
        ``trainer_zero_fraction``: share of tokens the trainer gives probability
        zero (:math:`\mathrm{KL}(s\|\pi) = \infty`); with ``logits``:
        ``outside_mass`` (batch, T), the trainer's mass
        :math:`\sum_{x:\,s(x)=0}\pi(x)` that the stated settings remove,
        ``outside_fraction``, its mean over unmasked positions (what importance
        weights can never recover), and ``impossible_fraction``, the share of
        drawn tokens outside the stated sampler's support; else ``None``.

    Raises
    ------
    ValueError
        For arrays of the wrong shape, NaN, positive log-probabilities, a sampler
        log-prob of ``-inf`` at an unmasked token (a token the sampler could not
        have drawn), a bad mask, ``ratio_threshold <= 1``, an unknown estimator,
        ``tokens`` without ``logits`` or outside ``[0, V)``, and, with ``logits``
        and ``strict``, a drawn token of probability zero under the stated
        settings (the message names the token and the settings).

    Notes
    -----
    Tokens within one response are not independent; the standard error of ``kl``
    is over responses (each a sum over its tokens), which is valid. Per position
    the standard error is over the batch. The per-token estimates average to
    :math:`\mathrm{KL}(s\|\pi)` of each conditional given its prefix (k1; k3 less
    the truncated mass: :math:`\mathbb{E}_s[\rho] = \sum_{x:\,s(x)>0}\pi(x)`), so
    k1's ``sequence_kl`` averages to the sequence-level KL of the two trees
    (:func:`klpolicy.sampling.sampler_tree` computes it exactly when the trees
    are known).

    References
    ----------
    .. [1] Yao et al., "Your Efficient RL Framework Secretly Brings You
       Off-Policy RL Training", 2025, fengyao.notion.site/off-policy-rl.
    .. [2] Schulman, "Approximating KL Divergence", 2020 (k1, k3).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.sampling import sampler_mismatch
    >>> s_lp = np.log([[0.5, 0.9, 0.6], [0.4, 0.8, 0.5]])
    >>> pi_lp = np.log([[0.5, 0.8, 0.6], [0.5, 0.8, 0.1]])
    >>> m = sampler_mismatch(s_lp, pi_lp, estimator="k3")
    >>> m.extreme.astype(int)
    array([[0, 0, 0],
           [0, 0, 1]])
    >>> round(m.kl, 4), round(m.kl_se, 4)
    (0.4215, 0.4148)
    """
    ls_raw = V.as_float_array("sampler_logprobs", sampler_logprobs)
    if ls_raw.ndim != 2:
        raise ValueError(f"`sampler_logprobs` must have shape (batch, T); got shape {ls_raw.shape}")
    lp_raw = V.as_float_array("trainer_logprobs", trainer_logprobs)
    if lp_raw.shape != ls_raw.shape:
        raise ValueError(
            f"`trainer_logprobs` must have the same shape as `sampler_logprobs` {ls_raw.shape}; "
            f"got {lp_raw.shape}"
        )
    B, T = ls_raw.shape
    keep = np.ones((B, T), bool) if mask is None else V.as_mask(mask, (B, T))
    ls = V.as_log_probs(
        "sampler_logprobs", ls_raw, keep=keep, allow_neg_inf=False, at_most_zero=True
    )
    lp = V.as_log_probs(
        "trainer_logprobs", lp_raw, keep=keep, allow_neg_inf=True, at_most_zero=True
    )
    estimator = get_estimator(estimator, kl_only=True).name
    C = V.as_scalar("ratio_threshold", ratio_threshold, "(1, inf)")
    strict = V.as_bool("strict", strict)
    s = settings(temperature, top_k, top_p, min_p, order, min_tokens_to_keep, defaults)
    with np.errstate(invalid="ignore", over="ignore"):
        ell = np.where(keep, lp.astype(np.float64) - ls, 0.0)  # log rho = log pi - log s
        # the registry's value takes log(p/q) of samples x ~ p: here p = s, q = pi
        k = np.where(keep, ESTIMATORS[estimator].value(-ell), 0.0)
    n_kept = int(keep.sum())
    per_position, per_position_se = _mean_se(k, keep, axis=0)
    seq = k.sum(axis=1)
    rows = keep.any(axis=1)
    kl, kl_se = _mean_se(seq[:, None], rows[:, None], axis=0)
    lc = math.log(C)
    extreme = keep & (np.abs(ell) > lc)
    zero = keep & (lp == -np.inf)
    outside = outside_fraction = impossible = None
    if tokens is not None and logits is None:
        raise ValueError("`tokens` is used only with `logits` (the full-vocabulary logits)")
    if logits is not None:
        arr, _ = as_logits("logits", logits)
        if arr.ndim != 3 or arr.shape[:2] != (B, T):
            raise ValueError(
                f"`logits` must have shape (batch, T, V) = ({B}, {T}, V); got {arr.shape}"
            )
        if tokens is None:
            raise ValueError("`tokens` is required with `logits`: the drawn token ids, (batch, T)")
        tok = _as_tokens(tokens, (B, T), arr.shape[-1])
        arr = arr.astype(np.float64)
        law = law_last(arr, s)
        m = np.max(arr, axis=-1, keepdims=True)
        with np.errstate(invalid="ignore"):
            pi = np.exp(arr - m)
        pi /= pi.sum(-1, keepdims=True)
        outside = np.where(keep, np.sum(np.where(law == 0, pi, 0.0), axis=-1), 0.0)
        outside_fraction = float(outside.sum() / max(n_kept, 1))
        drawn = np.take_along_axis(law, tok[..., None], axis=-1)[..., 0]
        bad = keep & (drawn == 0)
        if strict and bad.any():
            b, t = (int(i) for i in np.argwhere(bad)[0])
            raise ValueError(
                f"`tokens` holds token {int(tok[b, t])} at (batch {b}, position {t}), which the "
                f"sampler could not have drawn: it has probability 0 under the stated settings "
                f"({_describe(s)}) on `logits`; pass strict=False to count such tokens instead"
            )
        impossible = float(bad.sum() / max(n_kept, 1))
    dtype = V.result_dtype(ls, lp)
    return SamplerMismatch(
        log_ratio=ell.astype(dtype),
        per_token=k.astype(dtype),
        per_position=per_position.astype(dtype),
        per_position_se=per_position_se.astype(dtype),
        sequence_kl=seq.astype(dtype),
        kl=float(kl[0]),
        kl_se=float(kl_se[0]),
        extreme=extreme,
        extreme_fraction=float(extreme.sum() / max(n_kept, 1)),
        trainer_zero_fraction=float(zero.sum() / max(n_kept, 1)),
        outside_mass=outside,
        outside_fraction=outside_fraction,
        impossible_fraction=impossible,
    )


def _describe(s: Any) -> str:
    parts = [f"temperature={s.temperature:g}"]
    for name in ("top_k", "top_p", "min_p"):
        if getattr(s, name) is not None:
            parts.append(f"{name}={getattr(s, name):g}")
    parts.append(f"order={s.order!r}")
    return ", ".join(parts)


def _as_tokens(tokens: Any, shape: tuple[int, int], size: int) -> NDArray[np.int64]:
    try:
        tok = np.asarray(tokens)
    except ValueError:
        raise ValueError(f"`tokens` must be an integer array of shape {shape}") from None
    if tok.shape != shape or tok.dtype == np.bool_ or not np.issubdtype(tok.dtype, np.integer):
        raise ValueError(
            f"`tokens` must be an integer array of shape {shape}; got dtype {tok.dtype} and "
            f"shape {tok.shape}"
        )
    bad = (tok < 0) | (tok >= size)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(f"`tokens` must hold ids in [0, {size}); found {int(tok[idx])} at {idx}")
    return tok.astype(np.int64)
