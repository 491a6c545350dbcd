r"""Token trees: the sequence-level closed form, token by token.

Language models act one token at a time while RLHF regularises whole
sequences. On a *token tree* of vocabulary :math:`V` and length :math:`T`,
stored as a list of conditionals ``conditionals[t]`` of shape ``(V,)*(t+1)``
with ``conditionals[t][a_0, ..., a_{t-1}, :] = p(a_t | a_{<t})``, this module
computes the optimal KL-regularised policy by the soft Bellman recursion,

.. math::

    V_T(a_{<T}) = r(a_{<T}), \quad
    Q_t(a_{<t}, a) = r_t(a_{<t}, a) + V_{t+1}(a_{<t}, a), \quad
    V_t(a_{<t}) = \beta \log \sum_a \pi_{ref}(a | a_{<t})\, e^{Q_t(a_{<t}, a)/\beta},

    \pi^*(a | a_{<t}) = \pi_{ref}(a | a_{<t})\, e^{(Q_t(a_{<t}, a) - V_t(a_{<t}))/\beta},

whose product over positions is exactly the sequence-level closed form
:math:`\pi_{ref}(y) e^{R(y)/\beta} / Z` and whose :math:`V_0` is
:math:`\beta \log Z`. It also computes where the KL accumulates along a
response (the chain rule :math:`\mathrm{KL}(\pi\|\pi_{ref}) = \sum_t
\mathbb{E}_{\pi}[\mathrm{KL}_t]`).

Everything is exact and vectorised: each function makes one pass per position
``t`` over arrays of shape ``(V,)*(t+1)``, never a Python loop over nodes.

This module is also the front door to the rest of the token-level toolkit,
which it re-exports: the tree basics (:func:`joint`, :func:`marginals`,
:func:`from_joint`, :func:`sample`, :func:`token_logprobs`) live in
:mod:`klpolicy.sequences.trees`; sampled estimates of the sequence KL and the
diagnostics on logged log-prob arrays (:func:`sampled_kl`,
:func:`sequence_kl_moments`, :func:`token_kl_profile`) in
:mod:`klpolicy.sequences.diagnostics`; and the ceiling the reference sets on
the reward reachable within a KL budget (:func:`reward_ceiling`) in
:mod:`klpolicy.sequences.ceiling`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import kl_last as _kl_last
from ..core.internal import special
from ..core.internal import tilt as _tilt
from ..core.internal import validation as V
from .trees import (
    _pair_trees,
    _prefix_probs,
    _tree,
)

__all__ = [
    "SoftBellman",
    "per_token_kl",
    "soft_bellman",
    "token_kl_map",
]


# ------------------------------------------------------------------ soft Bellman


class SoftBellman(NamedTuple):
    """Result of :func:`soft_bellman`.

    ``policy[t]`` has shape ``(V,)*(t+1)`` (a token tree); ``q[t]`` has shape
    ``(V,)*(t+1)``; ``value[t]`` has shape ``(V,)*t`` for ``t = 0..T``, with
    ``value[0] = beta log Z`` a scalar and ``value[T]`` the terminal reward.
    """

    policy: list
    value: list
    q: list


def soft_bellman(
    ref_conditionals: Any,
    reward: ArrayLike,
    beta: float,
    *,
    token_rewards: Any = None,
) -> SoftBellman:
    r"""The optimal KL-regularised policy of a token tree, by backward soft Bellman recursion.

    .. math::

        V_T = r, \quad Q_t(s, a) = r_t(s, a) + V_{t+1}(s, a), \quad
        V_t(s) = \beta \log \sum_a \pi_{ref}(a|s)\, e^{Q_t(s,a)/\beta}, \quad
        \pi^*(a|s) = \pi_{ref}(a|s)\, e^{(Q_t(s,a) - V_t(s))/\beta}

    Parameters
    ----------
    ref_conditionals : list of array_like
        The reference token tree: ``[t]`` of shape ``(V,)*(t+1)``.
    reward : array_like
        Terminal reward on whole sequences, shape ``(V,)*T``, finite.
    beta : float
        KL coefficient, ``>= 0``; ``0`` gives the greedy limit and ``np.inf``
        the reference, as in :func:`klpolicy.optimal_policy`.
    token_rewards : list of array_like, optional
        Per-token rewards ``r_t``, ``[t]`` of shape ``(V,)*(t+1)`` (the reward
        for emitting ``a_t`` after ``a_{<t}``). The sequence's return is
        ``sum_t r_t + reward``.

    Returns
    -------
    SoftBellman
        ``.policy`` (a token tree, same structure as ``ref_conditionals``),
        ``.value`` (``T + 1`` arrays, ``value[t]`` of shape ``(V,)*t``;
        ``value[0] = beta log Z``, the soft value of the sequence problem) and
        ``.q`` (``T`` arrays of shape ``(V,)*(t+1)``).

    Raises
    ------
    ValueError
        For an invalid tree, a reward of the wrong shape or not finite,
        ``token_rewards`` of the wrong length or shapes, or a negative, NaN or
        non-scalar ``beta``.

    Notes
    -----
    Each level is one call of the core tilt on arrays of shape ``(V,)*(t+1)``,
    so the recursion inherits its log-space stability (log-sum-exp relative to
    the best ``Q`` on the support) and its limits. The product of the token
    policies equals :func:`klpolicy.optimal_policy` on the joint with the
    return ``R = sum_t r_t + reward`` to rounding, and ``value[0]`` equals
    :func:`klpolicy.soft_value`. At ``beta = 0`` the token policy is the limit
    of the soft one, not the per-node greedy choice: it splits mass in
    proportion to ``ref(a|s)`` times the reference mass of the best
    continuations below ``a``, so that its product is again the sequence-level
    greedy policy; ``value`` and ``q`` are then hard (max) values. Ties are
    judged on ``R`` summed as ``r_0 + (r_1 + (... + (r_{T-1} + reward)))``.

    References
    ----------
    .. [1] Ziebart, "Modeling Purposeful Adaptive Behavior with the Principle
       of Maximum Causal Entropy", 2010, PhD thesis, CMU (soft Bellman).
    .. [2] Rafailov et al., "From r to Q*: Your Language Model is Secretly a
       Q-Function", 2024, arXiv:2404.12358.

    Examples
    --------
    The worked example as a one-token tree, then a two-token tree whose
    reward only looks at the last token:

    >>> import numpy as np
    >>> from klpolicy.sequences import soft_bellman
    >>> soft_bellman([[0.5, 0.5]], [1.0, 0.0], 0.5).policy[0].round(4)
    array([0.8808, 0.1192])
    >>> res = soft_bellman([[0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]], [[1.0, 0.0], [1.0, 0.0]], 0.5)
    >>> res.policy[0], res.policy[1].round(4)
    (array([0.5, 0.5]), array([[0.8808, 0.1192],
           [0.8808, 0.1192]]))
    >>> round(float(res.value[0]), 6)  # 0.5 log((e^2 + 1) / 2)
    0.71689
    """
    ref = _tree("ref_conditionals", ref_conditionals)
    size, T = ref[0].shape[0], len(ref)
    rew = V.as_sequence_rewards("reward", reward, (size,) * T, "one reward per sequence, (V,)*T")
    tr = _token_rewards(token_rewards, size, T)
    dtype = V.result_dtype(*ref, rew, *(tr or []))
    ref = [c.astype(dtype, copy=False) for c in ref]
    rew = rew.astype(dtype, copy=False)
    b_arr = V.check_beta_values("beta", beta)
    if b_arr.ndim != 0:
        raise ValueError(f"`beta` must be a scalar for soft_bellman; got shape {b_arr.shape}")
    b = float(b_arr)
    values: list = [None] * (T + 1)
    policy: list = [None] * T
    qs: list = [None] * T
    values[T] = rew
    if b == 0:
        return _greedy_bellman(ref, rew, tr, dtype)
    # |V| / beta bounds the exponent error eps |V| / beta of the one-sum recursion below:
    # under 64 (1.4e-14) it is exact enough and about 3x faster than the split one
    bound = float(np.max(np.abs(rew))) + sum(float(np.max(np.abs(x))) for x in (tr or []))
    if b == np.inf or bound <= 64 * b:  # at beta = inf: the mean return, nothing to split
        for t in range(T - 1, -1, -1):
            q = values[t + 1] if tr is None else tr[t].astype(dtype, copy=False) + values[t + 1]
            res = _tilt(ref[t], q, np.full((1,) * (t + 1), b, dtype=dtype), {"pi", "value"})
            policy[t], qs[t], values[t] = res.pi, q, res.value[..., 0][()]
        return SoftBellman(policy, values, qs)
    # V_t = H_t + beta L_t is carried as its two parts: H the hard (max) value and L the log
    # reference mass near it. Summed, beta L drowns in H's rounding at tiny beta (1e6 +
    # 1e-12 log 0.3 is 1e6), and the policy above would lose which subtree holds more
    # mass; L enters the next level as a reweighted reference, ref e^L (normalised).
    hard, logm = rew, np.zeros(rew.shape)
    for t in range(T - 1, -1, -1):
        q = values[t + 1] if tr is None else tr[t].astype(dtype, copy=False) + values[t + 1]
        qh = hard if tr is None else tr[t].astype(dtype, copy=False) + hard
        support = ref[t] > 0
        with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
            logw = np.where(support, np.log(np.where(support, ref[t], 1.0)) + logm, -np.inf)
            top = np.max(logw, axis=-1, keepdims=True)
            w = np.exp(logw - top)
            tot = w.sum(axis=-1, keepdims=True)
            ref_eff = (w / tot).astype(dtype, copy=False)
        beta_t = np.full((1,) * (t + 1), b, dtype=dtype)
        res = _tilt(ref_eff, qh, beta_t, {"pi", "value"})
        shift = (top + np.log(tot))[..., 0]  # log sum ref e^L
        c = np.max(np.where(support, qh, -np.inf), axis=-1)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
            z = np.where(support, (qh - c[..., None]) / b, 0.0)
            lz = special.logsumexp(np.where(support, np.log(ref_eff) + z, -np.inf), axis=-1)
        policy[t], qs[t] = res.pi, q
        values[t] = np.asarray(res.value[..., 0] + b * shift, dtype=dtype)[()]
        hard, logm = c, shift + lz
    return SoftBellman(policy, values, qs)


def _token_rewards(token_rewards: Any, size: int, T: int) -> list | None:
    if token_rewards is None:
        return None
    if not isinstance(token_rewards, (list, tuple)) or len(token_rewards) != T:
        got = (
            len(token_rewards)
            if isinstance(token_rewards, (list, tuple))
            else type(token_rewards).__name__
        )
        raise ValueError(
            f"`token_rewards` must be a list of T = {T} arrays, [t] of shape (V,)*(t+1); got {got}"
        )
    return [
        V.as_sequence_rewards(f"token_rewards[{t}]", r, (size,) * (t + 1), "(V,)*(t+1)")
        for t, r in enumerate(token_rewards)
    ]


def _greedy_bellman(ref: list, rew: NDArray, tr: list | None, dtype) -> SoftBellman:
    """beta = 0: hard values and the limit of the soft policy (split by best-continuation mass)."""
    T = len(ref)
    values: list = [None] * (T + 1)
    policy: list = [None] * T
    qs: list = [None] * T
    values[T] = rew
    log_mass = np.zeros_like(rew)  # log ref-mass of the best continuations below each node
    neg_inf = np.asarray(-np.inf, dtype=dtype)
    for t in range(T - 1, -1, -1):
        q = values[t + 1] if tr is None else tr[t].astype(dtype, copy=False) + values[t + 1]
        c = ref[t]
        support = c > 0
        best_q = np.max(np.where(support, q, neg_inf), axis=-1, keepdims=True)
        best = support & (q == best_q)
        with np.errstate(divide="ignore"):
            logw = np.where(best, np.log(c / c.sum(axis=-1, keepdims=True)) + log_mass, neg_inf)
        top = np.max(logw, axis=-1, keepdims=True)
        w = np.exp(logw - top)
        tot = w.sum(axis=-1, keepdims=True)
        policy[t] = (w / tot).astype(dtype, copy=False)
        log_mass = (top + np.log(tot))[..., 0]
        qs[t], values[t] = q, best_q[..., 0][()]
    return SoftBellman(policy, values, qs)


# ------------------------------------------------------------------ where KL accumulates


def token_kl_map(
    policy_conditionals: Any, ref_conditionals: Any, *, weighted: bool = False
) -> list[NDArray[np.floating]]:
    r"""The KL of the next-token distributions at every prefix of the tree.

    .. math::

        \mathrm{KL}_t(a_{<t})
          = \mathrm{KL}\big(\pi(\cdot|a_{<t}) \,\|\, \pi_{ref}(\cdot|a_{<t})\big)

    Parameters
    ----------
    policy_conditionals, ref_conditionals : list of array_like
        Two token trees of the same vocabulary and length.
    weighted : bool, optional
        Multiply each prefix's KL by the prefix's probability under the policy
        (prefixes of probability zero then give 0, also where the KL is inf),
        so that ``sum(map[t]) == per_token_kl(...)[t]``.

    Returns
    -------
    list of ndarray
        ``T`` arrays; ``map[t]`` has shape ``(V,)*t`` (``map[0]`` is a scalar
        array). In nats; ``inf`` where the policy leaves the reference's support.

    Raises
    ------
    ValueError
        For invalid trees or trees of different vocabulary or length.

    Examples
    --------
    >>> from klpolicy.sequences import token_kl_map
    >>> pol = [[0.5, 0.5], [[0.5, 0.5], [1.0, 0.0]]]
    >>> ref = [[0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]]
    >>> maps = token_kl_map(pol, ref)
    >>> maps[0].shape, maps[1].round(4)  # no KL at the root; log 2 below a_0 = 1
    ((), array([0.    , 0.6931]))
    """
    weighted = V.as_bool("weighted", weighted)
    p, q = _pair_trees(policy_conditionals, ref_conditionals)
    maps = [np.asarray(_kl_last(a, b)) for a, b in zip(p, q, strict=True)]
    if not weighted:
        return maps
    prefix = [np.ones((), p[0].dtype), *_prefix_probs(p)[:-1]]
    with np.errstate(invalid="ignore"):
        return [
            np.where(m > 0, m * k, 0.0).astype(p[0].dtype)
            for m, k in zip(prefix, maps, strict=True)
        ]


def per_token_kl(policy_conditionals: Any, ref_conditionals: Any) -> NDArray[np.floating]:
    r"""Expected KL contributed by each position; they sum to the sequence KL (chain rule).

    .. math::

        \mathrm{KL}(\pi \| \pi_{ref}) = \sum_{t=0}^{T-1}
          \mathbb{E}_{a_{<t} \sim \pi}\Big[\mathrm{KL}\big(\pi(\cdot|a_{<t}) \,\|\,
          \pi_{ref}(\cdot|a_{<t})\big)\Big]

    Parameters
    ----------
    policy_conditionals, ref_conditionals : list of array_like
        Two token trees of the same vocabulary and length.

    Returns
    -------
    ndarray
        Shape ``(T,)``, non-negative, in nats; ``inf`` at a position where the
        policy reaches, with positive probability, a token the reference rules out.

    Raises
    ------
    ValueError
        For invalid trees or trees of different vocabulary or length.

    Notes
    -----
    The chain rule of KL divergence: writing both joints as products of
    conditionals, :math:`\log(\pi/\pi_{ref})` is a sum of per-token log ratios
    and the expectation of the ``t``-th one given the prefix is the
    conditional KL. ``per_token_kl(p, q).sum()`` equals
    ``kl_divergence(joint(p).ravel(), joint(q).ravel())`` to rounding.

    References
    ----------
    .. [1] Cover and Thomas, "Elements of Information Theory", 2006, thm 2.5.3.

    Examples
    --------
    >>> from klpolicy.sequences import per_token_kl
    >>> pol = [[0.5, 0.5], [[0.5, 0.5], [1.0, 0.0]]]
    >>> ref = [[0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]]
    >>> per_token_kl(pol, ref).round(4)  # log 2 / 2 at the second token
    array([0.    , 0.3466])
    """
    maps = token_kl_map(policy_conditionals, ref_conditionals, weighted=True)
    return np.array([m.sum() for m in maps], dtype=maps[0].dtype)
