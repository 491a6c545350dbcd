r"""Token-level KL diagnostics: sampled estimates of the sequence KL and logged log-prob arrays.

RLHF libraries estimate the KL of a run from the tokens they sampled: a
per-token estimator (Schulman's ``k1``, ``k2`` or ``k3``) of the log ratio
:math:`x_t = \log \pi_{ref}(a_t|a_{<t}) - \log \pi(a_t|a_{<t})`, summed
over each response. On a token tree (:mod:`klpolicy.sequences.trees`) this module
draws those estimates (:func:`sampled_kl`) and gives their exact mean and
variance by enumeration (:func:`sequence_kl_moments`). On the ``(batch, T)``
or ``(batch, T, V)`` log-prob arrays a run logs, :func:`token_kl_profile`
shows where along the responses the KL sits and labels its shape
(opening, vocabulary, style) with the thresholds :data:`OPENING_SHARE`,
:data:`VOCABULARY_TOP_SHARE` and :data:`STYLE_EVENNESS`.

All of it is re-exported by :mod:`klpolicy.sequences`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import kl_last as _kl_last
from ..core.internal import normalised_log_ratio
from ..core.internal import validation as V
from ..estimators import ESTIMATORS, get_estimator
from .bellman import per_token_kl
from .trees import _pair_trees, _prefix_probs, sample, token_logprobs

__all__ = [
    "OPENING_SHARE",
    "STYLE_EVENNESS",
    "VOCABULARY_TOP_SHARE",
    "TokenKLProfile",
    "sampled_kl",
    "sequence_kl_moments",
    "token_kl_profile",
]

#: ``token_kl_profile`` calls a profile an *opening* change when at least this share of
#: the KL sits in the first ``first_k`` positions.
OPENING_SHARE = 0.5
#: ... a *vocabulary* shift when the top 1% of tokens carry at least this share.
VOCABULARY_TOP_SHARE = 0.2
#: ... a *style* change when the effective fraction of tokens carrying KL is at least this.
STYLE_EVENNESS = 0.3

# ------------------------------------------------------------------ sampled estimates


def _per_token_estimate(logp: NDArray, logq: NDArray, estimator: str) -> NDArray:
    """The registry's estimator on per-token log-probs."""
    with np.errstate(invalid="ignore", over="ignore"):
        return ESTIMATORS[estimator].value(logp - logq)


def _check_estimator(estimator: Any) -> str:
    return get_estimator(estimator, kl_only=True).name


def sampled_kl(
    policy_conditionals: Any,
    ref_conditionals: Any,
    n: int,
    rng: Any = None,
    *,
    estimator: str = "k1",
) -> NDArray[np.floating]:
    r"""Per-sequence estimates of the sequence KL from ``n`` sequences sampled from the policy.

    .. math::

        \widehat{\mathrm{KL}}(y) = \sum_{t} k(x_t), \quad
        x_t = \log\frac{\pi_{ref}(a_t|a_{<t})}{\pi(a_t|a_{<t})}, \quad
        k_1 = -x, \; k_2 = x^2/2, \; k_3 = e^{x} - 1 - x

    Parameters
    ----------
    policy_conditionals, ref_conditionals : list of array_like
        Two token trees of the same vocabulary and length.
    n : int
        Number of sequences drawn from the policy.
    rng : numpy.random.Generator or int or None
        Source of randomness for :func:`klpolicy.sequences.trees.sample`.
    estimator : {"k1", "k2", "k3"}
        The per-token estimator, summed over the tokens of each sequence as
        RLHF libraries do.

    Returns
    -------
    ndarray
        Shape ``(n,)``; their mean estimates the sequence KL. ``k1`` and
        ``k3`` are unbiased (``k1`` sums to the sequence log ratio; ``k3`` is
        unbiased for each conditional KL given the prefix); ``k2`` is biased.
        :func:`sequence_kl_moments` gives their exact mean and variance.

    Raises
    ------
    ValueError
        As in :func:`klpolicy.sequences.per_token_kl`, for ``n`` not an integer
        ``>= 1`` and for an unknown ``estimator``.

    Notes
    -----
    The estimators are written here privately (a few lines, ``k3`` through
    the cancellation-free ``expm1mx``); :mod:`klpolicy.estimators` holds the
    public ones with their exact moments.

    References
    ----------
    .. [1] Schulman, "Approximating KL Divergence", 2020, blog post
       (http://joschu.net/blog/kl-approx.html).

    Examples
    --------
    >>> from klpolicy.sequences import per_token_kl
    >>> from klpolicy.sequences.diagnostics import sampled_kl
    >>> pol = [[0.8, 0.2], [[0.6, 0.4], [0.3, 0.7]]]
    >>> ref = [[0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]]
    >>> round(float(per_token_kl(pol, ref).sum()), 3)
    0.225
    >>> round(float(sampled_kl(pol, ref, 100_000, rng=0, estimator="k3").mean()), 2)
    0.22
    """
    p, q = _pair_trees(policy_conditionals, ref_conditionals)
    _check_estimator(estimator)
    seqs = sample(p, n, rng)
    return _per_token_estimate(token_logprobs(p, seqs), token_logprobs(q, seqs), estimator).sum(-1)


def sequence_kl_moments(
    policy_conditionals: Any, ref_conditionals: Any, *, estimator: str = "k1"
) -> tuple[float, float]:
    r"""Exact mean and variance of the per-sequence estimate of :func:`sampled_kl`.

    .. math::

        \mu = \sum_y \pi(y)\, \widehat{\mathrm{KL}}(y), \qquad
        \sigma^2 = \sum_y \pi(y)\, \big(\widehat{\mathrm{KL}}(y) - \mu\big)^2

    Parameters
    ----------
    policy_conditionals, ref_conditionals : list of array_like
        Two token trees of the same vocabulary and length.
    estimator : {"k1", "k2", "k3"}
        As in :func:`sampled_kl`.

    Returns
    -------
    (float, float)
        Mean and variance, by enumeration of all ``V**T`` sequences (one pass
        per position). The standard error of an ``n``-sample mean is
        ``sqrt(variance / n)``. Both are ``inf`` when the policy leaves the
        reference's support.

    Raises
    ------
    ValueError
        As in :func:`sampled_kl`.

    Examples
    --------
    >>> from klpolicy.sequences.diagnostics import sequence_kl_moments
    >>> pol = [[0.8, 0.2], [[0.6, 0.4], [0.3, 0.7]]]
    >>> ref = [[0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]]
    >>> [round(float(x), 4) for x in sequence_kl_moments(pol, ref, estimator="k1")]
    [0.2253, 0.3423]
    """
    p, q = _pair_trees(policy_conditionals, ref_conditionals)
    _check_estimator(estimator)
    prob = _prefix_probs(p)[-1]
    T = len(p)
    total = np.zeros(prob.shape, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        for t in range(T):
            est = ESTIMATORS[estimator].value(_row_log_ratio(p[t], q[t]))
            total = total + est.reshape(est.shape + (1,) * (T - t - 1))
        on = prob > 0
        mean = float(np.sum(np.where(on, prob * total, 0.0)))
        if not np.isfinite(mean):
            return math.inf, math.inf
        var = float(np.sum(np.where(on, prob * (total - mean) ** 2, 0.0)))
    if ESTIMATORS[estimator].mean_is_kl:
        # E[k1] is the KL: summed by the chain rule from non-negative terms, where the signed
        # log-ratios above (1e-10 each for a KL of 1e-20) cancel to rounding
        mean = float(np.sum(per_token_kl(p, q)))
    return mean, var


def _row_log_ratio(p: NDArray, q: NDArray) -> NDArray:
    """log(p_n / q_n) per entry of rows taken as exactly normalised (core's precise kernel)."""
    with np.errstate(invalid="ignore"):
        return normalised_log_ratio(p, q)


# ------------------------------------------------------------------ diagnostics on log-prob arrays


class TokenKLProfile(NamedTuple):
    """Result of :func:`token_kl_profile` (see there for the meaning of each field)."""

    per_token: NDArray
    per_position: NDArray
    contribution: NDArray
    sequence_kl: NDArray
    first_k: int
    first_k_share: float
    top_share: float
    evenness: float
    shape: str


def token_kl_profile(
    policy_logprobs: ArrayLike,
    ref_logprobs: ArrayLike,
    mask: ArrayLike | None = None,
    *,
    estimator: str = "k1",
    first_k: int | None = None,
) -> TokenKLProfile:
    r"""Where the KL sits along responses, from the log-prob arrays an RLHF run logs.

    .. math::

        c_t = \frac{1}{B} \sum_{b} m_{bt}\, k_{bt}, \qquad \sum_t c_t = \widehat{\mathrm{KL}},
        \qquad \text{evenness} = \frac{\exp H(w)}{N}, \; w_{bt} = \frac{k_{bt}}{\sum k}

    Parameters
    ----------
    policy_logprobs, ref_logprobs : array_like
        Either ``(batch, T)``: the log-probabilities of the *sampled* tokens
        under the policy and the reference (responses drawn from the policy);
        or ``(batch, T, V)``: full-vocabulary log-probabilities at every
        position, which give the exact per-position KL
        ``sum_v p_v (log p_v - log q_v)``. Same shape.
    mask : array_like of bool or 0/1, optional
        Shape ``(batch, T)``; 0 marks padding (not inspected, not counted).
    estimator : {"k1", "k2", "k3"}
        Per-token estimator for ``(batch, T)`` input (ignored for full
        vocabulary input, which is exact).
    first_k : int, optional
        How many opening positions the opening share counts; default
        ``max(1, ceil(T / 10))``.

    Returns
    -------
    TokenKLProfile
        ``per_token`` (batch, T): the per-token values (0 where masked);
        ``per_position`` (T,): their mean over the unmasked tokens at each
        position (NaN-free: 0 where a position is all padding);
        ``contribution`` (T,): ``sum_b per_token / batch``, summing to the mean
        sequence KL; ``sequence_kl`` (batch,): per-sequence sums;
        ``first_k``; the summary ``first_k_share`` (share of the KL in the
        first ``first_k`` positions), ``top_share`` (share carried by the top
        1% of tokens, at least one token), ``evenness`` (effective fraction of
        tokens carrying KL, 1 when all carry the same); and ``shape``, one of
        ``"opening"``, ``"vocabulary"``, ``"style"``, ``"mixed"`` or ``"none"``
        (zero KL).

    Raises
    ------
    ValueError
        For arrays that are not 2-D or 3-D or differ in shape, NaN or positive
        log-probabilities at unmasked tokens, ``-inf`` at a sampled token of the
        policy, full-vocabulary rows that are not normalised, a mask of the
        wrong shape or values or masking everything, an unknown estimator or a
        ``first_k`` outside ``[1, T]``.

    Notes
    -----
    The summary shares use non-negative per-token values: the exact KL for
    full-vocabulary input, and ``k3`` for sampled-token input whatever
    ``estimator`` is (``k1`` values can be negative, so shares of them are
    not shares; ``k3`` is non-negative and unbiased per token). Tokens of
    infinite KL (off the reference's support) carry equal shares of everything.
    ``shape`` is decided in this order, with the module constants:

    * ``"opening"`` if ``first_k_share >= OPENING_SHARE`` (0.5): a changed opening;
    * ``"vocabulary"`` if ``top_share >= VOCABULARY_TOP_SHARE`` (0.2): a few
      tokens carry the KL (20 times their even share), vocabulary shifts;
    * ``"style"`` if ``evenness >= STYLE_EVENNESS`` (0.3): at least 30% of the
      tokens carry KL evenly, a broad stylistic change;
    * ``"mixed"`` otherwise.

    The thresholds separate the constructed trees of the tests and the
    tutorial with wide margins; on real runs read the three numbers, not only
    the label.

    References
    ----------
    .. [1] Lambert, "Reinforcement Learning from Human Feedback", 2025,
       arXiv:2504.12501, ch. "Regularization" (where per-token KL accumulates).
    .. [2] Schulman, "Approximating KL Divergence", 2020 (k1, k2, k3).

    Examples
    --------
    All the KL at the first position of four-token responses:

    >>> import numpy as np
    >>> from klpolicy.sequences.diagnostics import token_kl_profile
    >>> ref = np.log(np.full((2, 4, 2), 0.5))
    >>> pol = ref.copy(); pol[:, 0] = np.log([0.9, 0.1])
    >>> prof = token_kl_profile(pol, ref)
    >>> prof.contribution.round(4), prof.shape
    (array([0.3681, 0.    , 0.    , 0.    ]), 'opening')
    """
    lp_raw = V.as_float_array("policy_logprobs", policy_logprobs)
    if lp_raw.ndim not in (2, 3):
        raise ValueError(
            "`policy_logprobs` must have shape (batch, T) or (batch, T, V); "
            f"got shape {lp_raw.shape}"
        )
    lq_raw = V.as_float_array("ref_logprobs", ref_logprobs)
    if lq_raw.shape != lp_raw.shape:
        raise ValueError(
            f"`ref_logprobs` must have the same shape as `policy_logprobs` {lp_raw.shape}; "
            f"got {lq_raw.shape}"
        )
    _check_estimator(estimator)
    B, T = lp_raw.shape[:2]
    keep = np.ones((B, T), bool) if mask is None else V.as_mask(mask, (B, T))
    full = lp_raw.ndim == 3
    lp = V.as_log_probs("policy_logprobs", lp_raw, keep=keep, allow_neg_inf=full, at_most_zero=True)
    lq = V.as_log_probs("ref_logprobs", lq_raw, keep=keep, allow_neg_inf=True, at_most_zero=True)
    if first_k is None:
        first_k = max(1, math.ceil(T / 10))
    elif isinstance(first_k, bool) or not isinstance(first_k, int) or not 1 <= first_k <= T:
        raise ValueError(f"`first_k` must be an integer in [1, T = {T}]; got {first_k!r}")
    dtype = V.result_dtype(lp, lq)
    lp, lq = lp.astype(dtype, copy=False), lq.astype(dtype, copy=False)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        if full:
            k = _kl_last(
                np.exp(np.where(keep[..., None], lp, 0.0)),
                np.exp(np.where(keep[..., None], lq, 0.0)),
            )
            weights = k
        else:
            lp_kept, lq_kept = np.where(keep, lp, 0.0), np.where(keep, lq, 0.0)
            k = _per_token_estimate(lp_kept, lq_kept, estimator)
            # the shares weigh tokens by k3, non-negative whatever the estimator reported
            weights = _per_token_estimate(lp_kept, lq_kept, "k3")
    k = np.where(keep, k, 0.0).astype(dtype)
    weights = np.where(keep, weights, 0.0)
    counts = keep.sum(axis=0)
    per_position = np.where(counts > 0, k.sum(axis=0) / np.maximum(counts, 1), 0.0).astype(dtype)
    shares = _shape_summary(weights, keep, first_k)
    return TokenKLProfile(
        per_token=k,
        per_position=per_position,
        contribution=(k.sum(axis=0) / B).astype(dtype),
        sequence_kl=k.sum(axis=1),
        first_k=first_k,
        **shares,
    )


def _shape_summary(w: NDArray, keep: NDArray, first_k: int) -> dict:
    w = np.asarray(w, dtype=np.float64)
    if np.isinf(w).any():
        w = np.isinf(w).astype(np.float64)
    total = w.sum()
    n = int(keep.sum())
    if total == 0:
        return {"first_k_share": 0.0, "top_share": 0.0, "evenness": 1.0, "shape": "none"}
    first = float(w[:, :first_k].sum() / total)
    n_top = max(1, math.ceil(0.01 * n))
    top = float(np.sort(w[keep])[-n_top:].sum() / total)
    frac = w[keep] / total
    with np.errstate(divide="ignore", invalid="ignore"):
        entropy = -float(np.sum(np.where(frac > 0, frac * np.log(frac), 0.0)))
    even = float(np.exp(entropy) / n)
    if first >= OPENING_SHARE:
        shape = "opening"
    elif top >= VOCABULARY_TOP_SHARE:
        shape = "vocabulary"
    elif even >= STYLE_EVENNESS:
        shape = "style"
    else:
        shape = "mixed"
    return {"first_k_share": first, "top_share": top, "evenness": even, "shape": shape}
