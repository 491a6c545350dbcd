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
\mathbb{E}_{\pi}[\mathrm{KL}_t]`), sampled estimates of the sequence KL,
diagnostics on the log-prob arrays that RLHF libraries log, and the ceiling the
reference sets on the reward reachable within a KL budget.

Everything is exact and vectorised: each function makes one pass per position
``t`` over arrays of shape ``(V,)*(t+1)``, never a Python loop over nodes.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from . import _validation as V
from ._numerics import expm1mx
from .closed_form import _prepare, _tilt, beta_for_kl
from .divergences import _kl_last

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

#: ``token_kl_profile`` calls a profile an *opening* change when at least this share of
#: the KL sits in the first ``first_k`` positions.
OPENING_SHARE = 0.5
#: ... a *vocabulary* shift when the top 1% of tokens carry at least this share.
VOCABULARY_TOP_SHARE = 0.2
#: ... a *style* change when the effective fraction of tokens carrying KL is at least this.
STYLE_EVENNESS = 0.3

_ESTIMATORS = ("k1", "k2", "k3")


# ------------------------------------------------------------------ trees


def _tree(name: str, conditionals: Any) -> list[NDArray]:
    return V.as_token_tree(name, conditionals)


def _pair_trees(policy: Any, ref: Any, names=("policy_conditionals", "ref_conditionals")):
    p = _tree(names[0], policy)
    q = _tree(names[1], ref)
    V.same_tree_shape(names[0], p, names[1], q)
    dtype = V.result_dtype(p[0], q[0])
    return [a.astype(dtype, copy=False) for a in p], [a.astype(dtype, copy=False) for a in q]


def _prefix_probs(levels: list[NDArray]) -> list[NDArray]:
    """P(a_0..a_t) for t = 0..T-1 (one pass per position)."""
    out = [levels[0]]
    for c in levels[1:]:
        out.append(out[-1][..., None] * c)
    return out


def joint(conditionals: Any) -> NDArray[np.floating]:
    r"""The joint law of whole sequences of a token tree.

    .. math::

        p(a_0, \dots, a_{T-1}) = \prod_{t=0}^{T-1} p(a_t \mid a_{<t})

    Parameters
    ----------
    conditionals : list of array_like
        A token tree: ``conditionals[t]`` has shape ``(V,)*(t+1)`` and each row
        along the last axis sums to one.

    Returns
    -------
    ndarray
        Shape ``(V,)*T``; entry ``[a_0, ..., a_{T-1}]`` is the sequence's
        probability. It sums to one.

    Raises
    ------
    ValueError
        If ``conditionals`` is not a non-empty list, a level has the wrong
        shape, or a conditional row is negative or does not sum to one.

    References
    ----------
    .. [1] Bengio et al., "A Neural Probabilistic Language Model", 2003, JMLR 3
       (the autoregressive factorisation).

    Examples
    --------
    >>> from klpolicy.sequences import joint
    >>> joint([[0.5, 0.5], [[0.9, 0.1], [0.2, 0.8]]])
    array([[0.45, 0.05],
           [0.1 , 0.4 ]])
    """
    return _prefix_probs(_tree("conditionals", conditionals))[-1]


def marginals(conditionals: Any) -> list[NDArray[np.floating]]:
    r"""Prefix probabilities :math:`p(a_0, \dots, a_t)` for every position ``t``.

    .. math::

        m_t(a_{\le t}) = \prod_{s \le t} p(a_s \mid a_{<s}), \qquad m_{T-1} = \text{joint}

    Parameters
    ----------
    conditionals : list of array_like
        A token tree, as in :func:`joint`.

    Returns
    -------
    list of ndarray
        ``T`` arrays; ``marginals[t]`` has shape ``(V,)*(t+1)`` and sums to one.
        The law of the token at position ``t`` alone is
        ``marginals[t].sum(axis=tuple(range(t)))``.

    Raises
    ------
    ValueError
        As in :func:`joint`.

    Examples
    --------
    >>> from klpolicy.sequences import marginals
    >>> m = marginals([[0.5, 0.5], [[0.9, 0.1], [0.2, 0.8]]])
    >>> m[0], m[1].sum(axis=0)
    (array([0.5, 0.5]), array([0.55, 0.45]))
    """
    return _prefix_probs(_tree("conditionals", conditionals))


def from_joint(joint: ArrayLike) -> list[NDArray[np.floating]]:
    r"""The token tree (conditionals) of a joint law over sequences.

    .. math::

        p(a_t \mid a_{<t}) = \frac{m_t(a_{\le t})}{m_{t-1}(a_{<t})}, \qquad
        m_t(a_{\le t}) = \sum_{a_{>t}} p(a_0, \dots, a_{T-1})

    Parameters
    ----------
    joint : array_like
        Probabilities of shape ``(V,)*T`` summing to one over all entries.

    Returns
    -------
    list of ndarray
        ``T`` conditionals, ``[t]`` of shape ``(V,)*(t+1)``.

    Raises
    ------
    ValueError
        If ``joint`` is not a probability array, its axes differ in length, or
        it does not sum to one.

    Notes
    -----
    Below a prefix of probability zero the conditional is undefined; it is set
    to the uniform distribution ``1/V`` so that the result is always a valid
    token tree. Such rows never matter: :func:`joint` gives them weight zero
    and :func:`per_token_kl` weights every prefix by its probability.
    ``joint(from_joint(p))`` equals ``p`` up to rounding.

    Examples
    --------
    >>> from klpolicy.sequences import from_joint

    The prefix ``a_0 = 1`` has probability zero, so its row is uniform:

    >>> c = from_joint([[0.9, 0.1], [0.0, 0.0]])
    >>> c[0], c[1]
    (array([1., 0.]), array([[0.9, 0.1],
           [0.5, 0.5]]))
    """
    arr = V.as_float_array("joint", joint)
    if arr.ndim == 0 or len(set(arr.shape)) != 1:
        raise ValueError(
            f"`joint` must have shape (V,)*T (all axes of one length); got shape {np.shape(arr)}"
        )
    V.as_probabilities("joint", arr, check_sum=False)
    flat = arr.reshape(-1)
    total = float(flat.sum(dtype=np.float64))
    tol = V.row_sum_tolerance(arr.dtype, flat.size)
    if abs(total - 1.0) > tol:
        raise ValueError(
            f"`joint` must sum to 1 over all entries; it sums to {total:.6g} "
            f"(tolerance {tol:.2g}); klpolicy never renormalises silently"
        )
    size, T = arr.shape[0], arr.ndim
    prefix = [arr]
    for _ in range(T - 1):
        prefix.insert(0, prefix[0].sum(axis=-1))
    out = []
    with np.errstate(invalid="ignore", divide="ignore"):
        for t in range(T):
            m = prefix[t]
            parent = m.sum(axis=-1, keepdims=True)
            out.append(np.where(parent > 0, m / np.where(parent > 0, parent, 1), 1.0 / size))
    return out


def sample(conditionals: Any, n: int, rng: Any = None) -> NDArray[np.int64]:
    r"""Draw ``n`` sequences from a token tree, one position at a time.

    .. math::

        a_t \sim p(\cdot \mid a_{<t}), \quad t = 0, \dots, T-1

    Parameters
    ----------
    conditionals : list of array_like
        A token tree, as in :func:`joint`.
    n : int
        Number of sequences, ``>= 1``.
    rng : numpy.random.Generator or int or None
        The source of randomness (an int is a seed). Never the global RNG.

    Returns
    -------
    ndarray of int64
        Shape ``(n, T)``: row ``i`` is the ``i``-th sequence of token ids.

    Raises
    ------
    ValueError
        As in :func:`joint`, and for ``n`` not an integer ``>= 1``.

    Notes
    -----
    Inverse-CDF sampling on each row, vectorised over the ``n`` sequences; a
    token of probability zero is never drawn.

    Examples
    --------
    >>> from klpolicy.sequences import sample
    >>> sample([[0.0, 1.0], [[0.5, 0.5], [1.0, 0.0]]], 3, rng=0)
    array([[1, 0],
           [1, 0],
           [1, 0]])
    """
    levels = _tree("conditionals", conditionals)
    n = V.as_positive_int("n", n)
    gen = np.random.default_rng(rng)
    seqs = np.zeros((n, len(levels)), dtype=np.int64)
    for t, c in enumerate(levels):
        rows = c[tuple(seqs[:, :t].T)] if t else np.broadcast_to(c, (n, c.shape[0]))
        cum = np.cumsum(rows, axis=-1, dtype=np.float64)
        u = gen.random(n)[:, None] * cum[:, -1:]
        seqs[:, t] = np.minimum((cum <= u).sum(axis=-1), c.shape[0] - 1)
    return seqs


def token_logprobs(conditionals: Any, sequences: ArrayLike) -> NDArray[np.floating]:
    r"""Log-probabilities :math:`\log p(a_t \mid a_{<t})` of given sequences, per token.

    Parameters
    ----------
    conditionals : list of array_like
        A token tree, as in :func:`joint`.
    sequences : array_like of int
        Token ids of shape ``(n, T)``, each in ``[0, V)``.

    Returns
    -------
    ndarray
        Shape ``(n, T)``, the per-token log-probabilities as RLHF libraries log
        them (``-inf`` for a token of probability zero). Their row sums are the
        sequence log-probabilities.

    Raises
    ------
    ValueError
        As in :func:`joint`, and for ``sequences`` of the wrong shape or with
        ids outside ``[0, V)``.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.sequences import token_logprobs
    >>> np.exp(token_logprobs([[0.5, 0.5], [[0.9, 0.1], [0.2, 0.8]]], [[0, 0], [1, 1]]))
    array([[0.5, 0.9],
           [0.5, 0.8]])
    """
    levels = _tree("conditionals", conditionals)
    seqs = _as_sequences(sequences, levels[0].shape[0], len(levels))
    with np.errstate(divide="ignore"):
        return np.stack(
            [np.log(c[tuple(seqs[:, : t + 1].T)]) for t, c in enumerate(levels)], axis=-1
        )


def _as_sequences(sequences: ArrayLike, size: int, T: int) -> NDArray[np.int64]:
    s = np.asarray(sequences)
    if s.ndim != 2 or s.shape[1] != T or not np.issubdtype(s.dtype, np.integer):
        raise ValueError(
            f"`sequences` must be an integer array of shape (n, T) with T = {T}; "
            f"got dtype {s.dtype} and shape {s.shape}"
        )
    bad = (s < 0) | (s >= size)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise ValueError(
            f"`sequences` must hold token ids in [0, {size}); found {int(s[idx])} at index {idx}"
        )
    return s.astype(np.int64, copy=False)


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
    if np.ndim(beta) != 0:
        raise ValueError(f"`beta` must be a scalar for soft_bellman; got shape {np.shape(beta)}")
    b = float(V.as_beta(beta, 1, 0)[0])
    values: list = [None] * (T + 1)
    policy: list = [None] * T
    qs: list = [None] * T
    values[T] = rew
    if b == 0:
        return _greedy_bellman(ref, rew, tr, dtype)
    for t in range(T - 1, -1, -1):
        q = values[t + 1] if tr is None else tr[t].astype(dtype, copy=False) + values[t + 1]
        res = _tilt(ref[t], q, np.full((1,) * (t + 1), b, dtype=dtype))
        policy[t], qs[t], values[t] = res.pi, q, res.value[..., 0][()]
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


# ------------------------------------------------------------------ sampled estimates


def _per_token_estimate(logp: NDArray, logq: NDArray, estimator: str) -> NDArray:
    """k1/k2/k3 of Schulman (2020) on per-token log-probs (private twin of klpolicy.estimators)."""
    with np.errstate(invalid="ignore", over="ignore"):
        d = logp - logq
        if estimator == "k1":
            return d
        if estimator == "k2":
            return 0.5 * d * d
        return expm1mx(-d)


def _check_estimator(estimator: Any) -> str:
    if estimator not in _ESTIMATORS:
        raise ValueError(f"`estimator` must be one of 'k1', 'k2', 'k3'; got {estimator!r}")
    return estimator


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
        Source of randomness for :func:`sample`.
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
        As in :func:`per_token_kl`, for ``n`` not an integer ``>= 1`` and for an
        unknown ``estimator``.

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
    >>> from klpolicy.sequences import per_token_kl, sampled_kl
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
    >>> from klpolicy.sequences import sequence_kl_moments
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
            est = _per_token_estimate(np.log(p[t]), np.log(q[t]), estimator)
            total = total + est.reshape(est.shape + (1,) * (T - t - 1))
        on = prob > 0
        mean = float(np.sum(np.where(on, prob * total, 0.0)))
        if not np.isfinite(mean):
            return math.inf, math.inf
        var = float(np.sum(np.where(on, prob * (total - mean) ** 2, 0.0)))
    return mean, var


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
    >>> from klpolicy.sequences import token_kl_profile
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
    lp = V.as_logprobs("policy_logprobs", lp_raw, keep, sampled=not full)
    lq = V.as_logprobs("ref_logprobs", lq_raw, keep, sampled=False)
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
            k = _per_token_estimate(np.where(keep, lp, 0.0), np.where(keep, lq, 0.0), estimator)
            weights = _per_token_estimate(np.where(keep, lp, 0.0), np.where(keep, lq, 0.0), "k3")
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


# ------------------------------------------------------------------ the reference ceiling


class Ceiling(NamedTuple):
    """Result of :func:`reward_ceiling`; arrays have the batch shape."""

    expected_reward: NDArray
    beta: NDArray
    kl: NDArray
    support_max: NDArray
    unreachable_max: NDArray


def reward_ceiling(ref: ArrayLike, reward: ArrayLike, kl: ArrayLike, *, axis: int = -1) -> Ceiling:
    r"""The best expected reward any policy reaches within a KL budget of the reference.

    .. math::

        \max_{\pi:\ \mathrm{KL}(\pi\|\pi_{ref}) \le \epsilon} \mathbb{E}_\pi[r]
        = \mathbb{E}_{\pi^*_{\beta(\epsilon)}}[r]
        \;\le\; \max_{y:\ \pi_{ref}(y) > 0} r(y)

    Parameters
    ----------
    ref : array_like
        Reference probabilities along ``axis`` (for sequences, ``joint(ref).ravel()``).
    reward : array_like
        Finite rewards of the same size along ``axis``.
    kl : float or array_like
        KL budget in nats, ``>= 0``; ``np.inf`` allowed. Broadcasts over the batch.
    axis : int, optional
        The probability axis.

    Returns
    -------
    Ceiling
        ``expected_reward`` (the ceiling within the budget), ``beta`` (the
        coefficient attaining it: 0 when the budget reaches the greedy limit),
        ``kl`` (the KL actually spent, ``min(kl, max_kl)``), ``support_max``
        (the best reward the reference supports: the ceiling at any budget)
        and ``unreachable_max`` (the best reward anywhere, including outcomes
        the reference rules out, which no budget reaches when it is larger).

    Raises
    ------
    ValueError
        As in :func:`klpolicy.optimal_policy`, and for a negative or NaN ``kl``.

    Notes
    -----
    By Lagrangian duality the budget-constrained maximiser is the tilted
    policy at the :math:`\beta` whose KL equals the budget (the frontier is
    concave and :math:`\mathrm{KL}(\pi^*_\beta)` decreases in :math:`\beta`),
    or the greedy policy when the budget exceeds :func:`klpolicy.max_kl`. As
    :math:`\pi^* \propto \pi_{ref} e^{r/\beta}` only reweights the
    reference, outcomes with :math:`\pi_{ref}(y) = 0` keep probability zero
    at every :math:`\beta`: a better reference raises the ceiling, no
    :math:`\beta` does.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593.
    .. [2] Gao, Schulman and Hilton, "Scaling Laws for Reward Model
       Overoptimization", 2022, arXiv:2210.10760.

    Examples
    --------
    A weak reference rarely writes the good answer and never the best one:

    >>> from klpolicy.sequences import reward_ceiling
    >>> weak = reward_ceiling([0.9, 0.1, 0.0], [0.0, 1.0, 2.0], 0.5)
    >>> strong = reward_ceiling([0.4, 0.4, 0.2], [0.0, 1.0, 2.0], 0.5)
    >>> round(float(weak.expected_reward), 3), round(float(strong.expected_reward), 3)
    (0.495, 1.55)
    >>> float(weak.support_max), float(weak.unreachable_max)
    (1.0, 2.0)
    """
    ref_a, rew_a = _prepare(ref, reward, axis)
    budget = np.asarray(kl, dtype=np.float64)
    if np.isnan(budget).any() or (budget < 0).any():
        bad = budget[np.isnan(budget) | (budget < 0)].flat[0]
        raise ValueError(f"`kl` must be a non-negative number of nats; got {bad:g}")
    batch = np.broadcast_shapes(ref_a.shape[:-1], budget.shape)
    ref_b = np.broadcast_to(ref_a, batch + ref_a.shape[-1:]).astype(np.float64)
    rew_b = np.broadcast_to(rew_a, batch + rew_a.shape[-1:]).astype(np.float64)
    kmax = _tilt(ref_b, rew_b, np.zeros((*batch, 1))).kl[..., 0]
    spent = np.minimum(np.broadcast_to(budget, batch), kmax)
    beta = np.asarray(beta_for_kl(ref_b, rew_b, spent), dtype=np.float64)
    best = _tilt(ref_b, rew_b, beta[..., None])
    support_max = np.max(np.where(ref_b > 0, rew_b, -np.inf), axis=-1)
    return Ceiling(
        expected_reward=best.mean[..., 0][()],
        beta=beta[()],
        kl=spent[()],
        support_max=support_max[()],
        unreachable_max=np.max(rew_b, axis=-1)[()],
    )
