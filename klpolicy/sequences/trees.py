r"""Token trees: a law over sequences, stored as its next-token conditionals.

A *token tree* of vocabulary :math:`V` and length :math:`T` is a list of
conditionals ``conditionals[t]`` of shape ``(V,)*(t+1)`` with
``conditionals[t][a_0, ..., a_{t-1}, :] = p(a_t | a_{<t})``, the way a language
model writes a law over responses one token at a time:

.. math::

    p(a_0, \dots, a_{T-1}) = \prod_{t=0}^{T-1} p(a_t \mid a_{<t}).

This module converts between a tree and its joint law (:func:`joint`,
:func:`marginals`, :func:`from_joint`), samples sequences from it
(:func:`sample`) and reads off the per-token log-probabilities that RLHF
libraries log (:func:`token_logprobs`). :mod:`klpolicy.sequences` builds the
optimal policy and the per-token KL on these trees.

Everything is vectorised: one pass per position ``t`` over arrays of shape
``(V,)*(t+1)``, never a Python loop over nodes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import validation as V

__all__ = ["from_joint", "joint", "marginals", "sample", "token_logprobs"]


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
    >>> from klpolicy.sequences.trees import joint
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
    >>> from klpolicy.sequences.trees import marginals
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
    and :func:`klpolicy.sequences.per_token_kl` weights every prefix by its
    probability.
    ``joint(from_joint(p))`` equals ``p`` up to rounding.

    Examples
    --------
    >>> from klpolicy.sequences.trees import from_joint

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
    with np.errstate(over="ignore"):  # huge entries sum to inf: refused just below
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
    >>> from klpolicy.sequences.trees import sample
    >>> sample([[0.0, 1.0], [[0.5, 0.5], [1.0, 0.0]]], 3, rng=0)
    array([[1, 0],
           [1, 0],
           [1, 0]])
    """
    levels = _tree("conditionals", conditionals)
    n = V.as_positive_int("n", n, hi=V.MAX_LOOP_COUNT)
    gen = V.as_rng("rng", rng)
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
    >>> from klpolicy.sequences.trees import token_logprobs
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
    if isinstance(sequences, (bool, np.bool_, str)) or sequences is None:
        raise ValueError(
            f"`sequences` must be an integer array of shape (n, T); got {V.describe(sequences)}"
        )
    try:
        s = np.asarray(sequences)
    except ValueError:
        raise ValueError(
            f"`sequences` must be an integer array of shape (n, T) with T = {T}; got a ragged "
            f"sequence {V.describe(sequences)}"
        ) from None
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
