"""Hypothesis strategies for KL-regularised policy problems.

Every strategy is built directly from a few integer and float draws (no
rejection sampling), so that hypothesis shrinks a failing case toward the
simplest one of its kind: the smallest size, a uniform distribution, rewards
of 0, ``beta = 1``, equal log-probabilities. Bounds are keyword-only and take
either a value or a strategy; values that make the strategy impossible
(``min_size > max_size``, a negative ``min_beta`` ...) raise
:class:`InvalidArgument` at once, when the strategy is built, and bounds given
as strategies are checked when they are drawn.

>>> from hypothesis import given
>>> from klpolicy.testing import strategies as kst
>>> @given(kst.problems(max_size=4))
... def test_sums_to_one(problem):
...     import klpolicy
...     pi = klpolicy.optimal_policy(*problem)
...     assert abs(pi.sum() - 1) < 1e-12
>>> test_sums_to_one()
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from hypothesis import strategies as st
from hypothesis.strategies import SearchStrategy
from numpy.typing import NDArray

from ._draws import (
    InvalidArgument,
    _check_beta_bounds,
    _check_min_entry,
    _check_real,
    _columns,
    _dist_spec,
    _draw,
    _draw_beta,
    _draw_sizes,
    _int_bound,
    _ints,
    _is_strategy,
    _one_distribution,
    _order,
    _real_bound,
    _value_spec,
)

__all__ = [
    "InvalidArgument",
    "PreferenceBatch",
    "Problem",
    "betas",
    "distributions",
    "log_ratios",
    "preference_pairs",
    "problems",
    "rewards",
    "token_trees",
]


class Problem(NamedTuple):
    """A KL-regularised problem: ``optimal_policy(*problem)`` solves it."""

    ref: NDArray[np.float64]
    reward: NDArray[np.float64]
    beta: float


class PreferenceBatch(NamedTuple):
    """Sequence log-probabilities of ``n`` preference pairs, in DPO's argument order."""

    policy_chosen: NDArray[np.float64]
    policy_rejected: NDArray[np.float64]
    ref_chosen: NDArray[np.float64]
    ref_rejected: NDArray[np.float64]


def distributions(
    *, min_size: Any = 1, max_size: Any = 8, zeros: bool = True, min_entry: Any = 1e-300
) -> SearchStrategy[NDArray[np.float64]]:
    """Probability vectors (1-D float64 arrays summing to one within rounding).

    Entries are of three kinds: ordinary (integer weights 1..10, normalised),
    tiny (powers of ten down to ``min_entry``) and exact zeros (when
    ``zeros``). At least one entry is ordinary. Shrinks toward the uniform
    distribution of size ``min_size``.

    Parameters
    ----------
    min_size, max_size : int or strategy
        Bounds on the length (``1 <= min_size <= max_size``).
    zeros : bool
        Whether entries may be exactly zero.
    min_entry : float or strategy
        The smallest positive entry that may appear, in ``(0, 0.5 / max_size]``
        (default 1e-300).

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of 1-D float64 arrays.

    Raises
    ------
    InvalidArgument
        At once, for bounds given as values that are impossible.

    Examples
    --------
    >>> from hypothesis import given
    >>> @given(distributions(min_size=3, max_size=3, zeros=False))
    ... def test(p):
    ...     assert p.shape == (3,) and (p > 0).all() and abs(p.sum() - 1) < 1e-15
    >>> test()
    """
    min_size, max_size = _int_bound("min_size", min_size), _int_bound("max_size", max_size)
    _order("min_size", min_size, "max_size", max_size)
    min_entry = _real_bound("min_entry", min_entry)
    _check_min_entry(min_entry, max_size)
    zeros = bool(zeros)

    @st.composite
    def _dist(draw):
        lo, hi = _draw_sizes(draw, "min_size", min_size, "max_size", max_size)
        me = _check_real("min_entry", _draw(draw, min_entry))
        _check_min_entry(me, hi)
        return _one_distribution(draw, (lo, hi), zeros, me)

    return _dist()


# --------------------------------------------------------------------------- rewards


def rewards(
    *, min_size: Any = 1, max_size: Any = 8, min_value: Any = -1e6, max_value: Any = 1e6
) -> SearchStrategy[NDArray[np.float64]]:
    """Finite reward vectors with ties and large magnitudes.

    Entries are small integers in [-3, 3] (so ties are common), arbitrary
    floats in ``[min_value, max_value]``, or exactly ``min_value`` /
    ``max_value`` (magnitude 1e6 by default). Shrinks toward all zeros.

    Parameters
    ----------
    min_size, max_size : int or strategy
        Bounds on the length.
    min_value, max_value : float or strategy
        Finite bounds on the entries.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of 1-D float64 arrays.

    Raises
    ------
    InvalidArgument
        At once, for impossible bounds (``min_value > max_value``, infinite bounds ...).

    Examples
    --------
    >>> from hypothesis import given
    >>> @given(rewards(min_value=-1.0, max_value=1.0))
    ... def test(r):
    ...     assert (abs(r) <= 1).all()
    >>> test()
    """
    min_size, max_size = _int_bound("min_size", min_size), _int_bound("max_size", max_size)
    _order("min_size", min_size, "max_size", max_size)
    min_value, max_value = _real_bound("min_value", min_value), _real_bound("max_value", max_value)
    _order("min_value", min_value, "max_value", max_value)

    @st.composite
    def _rew(draw):
        lo, hi = _draw_sizes(draw, "min_size", min_size, "max_size", max_size)
        a, b = _draw_sizes(draw, "min_value", min_value, "max_value", max_value, _check_real)
        return _columns(draw, (lo, hi), _value_spec(a, b, (-3, 3)))[0]

    return _rew()


# --------------------------------------------------------------------------- betas


def betas(
    *,
    min_beta: Any = 1e-8,
    max_beta: Any = 1e8,
    allow_zero: bool = False,
    allow_inf: bool = False,
) -> SearchStrategy[float]:
    """KL coefficients: round values (1, 0.5, 2, ...) or log-uniform in ``[min_beta, max_beta]``.

    Shrinks toward ``beta = 1``. ``allow_zero`` adds the greedy limit
    ``0.0`` and ``allow_inf`` the reference limit ``inf``.

    Parameters
    ----------
    min_beta, max_beta : float or strategy
        Positive finite bounds (defaults 1e-8 and 1e8).
    allow_zero, allow_inf : bool
        Whether to also draw 0.0 and ``inf``.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of floats.

    Raises
    ------
    InvalidArgument
        At once, for a non-positive or infinite bound or ``min_beta > max_beta``.

    Examples
    --------
    >>> from hypothesis import given
    >>> @given(betas(min_beta=1e-3, max_beta=1e3, allow_zero=True))
    ... def test(beta):
    ...     assert beta == 0 or 1e-3 <= beta <= 1e3
    >>> test()
    """
    _check_beta_bounds(min_beta, max_beta)
    allow_zero, allow_inf = bool(allow_zero), bool(allow_inf)

    @st.composite
    def _beta(draw):
        return _draw_beta(draw, min_beta, max_beta, allow_zero, allow_inf)

    return _beta()


# --------------------------------------------------------------------------- problems


def problems(
    *,
    min_size: Any = 1,
    max_size: Any = 8,
    zeros: bool = True,
    min_entry: Any = 1e-300,
    min_reward: Any = -1e6,
    max_reward: Any = 1e6,
    min_beta: Any = 1e-8,
    max_beta: Any = 1e8,
    allow_zero_beta: bool = False,
    allow_inf_beta: bool = False,
) -> SearchStrategy[Problem]:
    """Problems ``(ref, reward, beta)`` of one size, as a :class:`Problem` named tuple.

    ``ref`` is drawn as by :func:`distributions`, ``reward`` as by
    :func:`rewards` with the same length, ``beta`` as by :func:`betas`.

    Parameters
    ----------
    min_size, max_size, zeros, min_entry
        As in :func:`distributions` (for ``ref``).
    min_reward, max_reward
        As ``min_value`` and ``max_value`` in :func:`rewards`.
    min_beta, max_beta
        As in :func:`betas`.
    allow_zero_beta, allow_inf_beta : bool
        Whether ``beta`` may be 0 (greedy limit) or ``inf`` (the reference).

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of :class:`Problem` named tuples.

    Raises
    ------
    InvalidArgument
        At once, for impossible bounds.

    Examples
    --------
    >>> from hypothesis import given
    >>> @given(problems(max_size=3))
    ... def test(problem):
    ...     ref, reward, beta = problem
    ...     assert ref.shape == reward.shape and beta > 0
    >>> test()
    """
    distributions(min_size=min_size, max_size=max_size, zeros=zeros, min_entry=min_entry)
    rewards(min_value=min_reward, max_value=max_reward)  # validates the reward bounds
    beta = betas(
        min_beta=min_beta, max_beta=max_beta, allow_zero=allow_zero_beta, allow_inf=allow_inf_beta
    )

    @st.composite
    def _problem(draw):
        lo, hi = _draw_sizes(draw, "min_size", min_size, "max_size", max_size)
        me = _check_real("min_entry", _draw(draw, min_entry))
        _check_min_entry(me, hi)
        a, b = _draw_sizes(draw, "min_reward", min_reward, "max_reward", max_reward, _check_real)
        ref, reward = _columns(
            draw, (lo, hi), _dist_spec(hi, zeros, me), _value_spec(a, b, (-3, 3))
        )
        return Problem(ref, reward, draw(beta))

    return _problem()


# --------------------------------------------------------------------------- sequences


_MAX_LEAVES = 100_000  # every leaf's distribution is drawn and stored


def _check_tree_size(vocab: int, length: int) -> None:
    """Refuse a tree of more than ``_MAX_LEAVES`` leaves (or positions) without forming
    ``vocab**length`` (``3**(2**63)`` exactly did not finish)."""
    if length > _MAX_LEAVES:
        raise InvalidArgument(
            f"a tree with `max_length` = {length} has {length} positions, one array each; "
            f"at most {_MAX_LEAVES:,} are allowed"
        )
    if vocab > 1 and length * math.log10(vocab) > math.log10(_MAX_LEAVES) + 1e-12:
        digits = length * math.log10(vocab)
        count = f"{vocab**length:,}" if digits < 30 else f"about 10^{digits:.4g}"
        raise InvalidArgument(
            f"a tree with `max_vocab` = {vocab} and `max_length` = {length} has "
            f"`max_vocab` ** `max_length` = {count} leaves (every one a distribution drawn and "
            f"held in memory); at most {_MAX_LEAVES:,} are allowed"
        )


def token_trees(
    *,
    min_vocab: Any = 1,
    max_vocab: Any = 3,
    min_length: Any = 1,
    max_length: Any = 3,
    zeros: bool = True,
    min_entry: Any = 1e-300,
) -> SearchStrategy[list[NDArray[np.float64]]]:
    """Token trees: lists of conditionals with ``conditionals[t].shape == (V,) * (t + 1)``.

    ``conditionals[t][a_0, ..., a_{t-1}, :]`` is the distribution of token
    ``t`` after the prefix ``a_0 ... a_{t-1}``, drawn as by
    :func:`distributions` of size ``V``. This is the layout of
    ``klpolicy.sequences``. Shrinks toward one token of a vocabulary of
    ``min_vocab``, uniform.

    Parameters
    ----------
    min_vocab, max_vocab : int or strategy
        Bounds on the vocabulary size ``V``.
    min_length, max_length : int or strategy
        Bounds on the sequence length ``T``.
    zeros, min_entry
        As in :func:`distributions`.

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of lists of float64 arrays (the conditionals).

    Raises
    ------
    InvalidArgument
        At once, for impossible bounds or a tree with more than 100,000 leaves.

    Examples
    --------
    >>> from hypothesis import given
    >>> @given(token_trees(min_vocab=2, max_vocab=2, min_length=2, max_length=2))
    ... def test(tree):
    ...     assert [c.shape for c in tree] == [(2,), (2, 2)]
    >>> test()
    """
    min_vocab, max_vocab = _int_bound("min_vocab", min_vocab), _int_bound("max_vocab", max_vocab)
    _order("min_vocab", min_vocab, "max_vocab", max_vocab)
    min_length = _int_bound("min_length", min_length)
    max_length = _int_bound("max_length", max_length)
    _order("min_length", min_length, "max_length", max_length)
    if not _is_strategy(max_vocab) and not _is_strategy(max_length):
        _check_tree_size(max_vocab, max_length)
    min_entry = _real_bound("min_entry", min_entry)
    if not _is_strategy(min_entry) and not _is_strategy(max_vocab):
        _check_min_entry(min_entry, max_vocab)

    @st.composite
    def _tree(draw):
        v_lo, v_hi = _draw_sizes(draw, "min_vocab", min_vocab, "max_vocab", max_vocab)
        t_lo, t_hi = _draw_sizes(draw, "min_length", min_length, "max_length", max_length)
        me = _check_real("min_entry", _draw(draw, min_entry))
        _check_min_entry(me, v_hi)
        _check_tree_size(v_hi, t_hi)  # bounds drawn from strategies
        v, t_len = draw(_ints(v_lo, v_hi)), draw(_ints(t_lo, t_hi))
        tree = []
        for t in range(t_len):
            rows = [_one_distribution(draw, v, zeros, me) for _ in range(v**t)]
            tree.append(np.array(rows).reshape((v,) * (t + 1)))
        return tree

    return _tree()


# --------------------------------------------------------------------------- log-probabilities


def preference_pairs(
    *, min_size: Any = 1, max_size: Any = 8, min_logp: Any = -1e4
) -> SearchStrategy[PreferenceBatch]:
    """Batches of sequence log-probabilities for DPO-style losses.

    Four arrays of one length, entries in ``[min_logp, 0]``: small integers
    (ties), arbitrary floats, or exactly ``min_logp`` (a long, unlikely
    sequence; large margins make naive losses overflow). Shrinks toward all
    zeros (a zero margin).

    Parameters
    ----------
    min_size, max_size : int or strategy
        Bounds on the number of pairs.
    min_logp : float or strategy
        The most negative log-probability, ``< 0`` (default -1e4).

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of :class:`PreferenceBatch` named tuples.

    Raises
    ------
    InvalidArgument
        At once, for impossible bounds.

    Examples
    --------
    >>> from hypothesis import given
    >>> @given(preference_pairs(max_size=3))
    ... def test(batch):
    ...     assert all(x.shape == batch.policy_chosen.shape and (x <= 0).all() for x in batch)
    >>> test()
    """
    min_size, max_size = _int_bound("min_size", min_size), _int_bound("max_size", max_size)
    _order("min_size", min_size, "max_size", max_size)
    min_logp = _real_bound("min_logp", min_logp)
    if not _is_strategy(min_logp) and min_logp >= 0:
        raise InvalidArgument(f"`min_logp` must be negative; got {min_logp!r}")

    @st.composite
    def _pairs(draw):
        lo, hi = _draw_sizes(draw, "min_size", min_size, "max_size", max_size)
        m = _check_real("min_logp", _draw(draw, min_logp))
        spec = _value_spec(m, 0.0, (-5, 0))
        return PreferenceBatch(*_columns(draw, (lo, hi), spec, spec, spec, spec))

    return _pairs()


def log_ratios(
    *, min_size: Any = 1, max_size: Any = 8, min_value: Any = -100.0, max_value: Any = 100.0
) -> SearchStrategy[NDArray[np.float64]]:
    """Arrays of log-ratios ``log q(x) - log p(x)`` for per-sample KL estimators.

    Entries are small integers in [-3, 3], tiny values ``+-10**-k``
    (``k <= 15``, where ``exp(x) - 1 - x`` loses its digits), arbitrary floats
    in the bounds, or exactly the bounds. Shrinks toward all zeros (``p = q``).

    Parameters
    ----------
    min_size, max_size : int or strategy
        Bounds on the length.
    min_value, max_value : float or strategy
        Finite bounds on the entries (defaults -100 and 100).

    Returns
    -------
    hypothesis.strategies.SearchStrategy
        Of 1-D float64 arrays.

    Raises
    ------
    InvalidArgument
        At once, for impossible bounds.

    Examples
    --------
    >>> from hypothesis import given
    >>> @given(log_ratios(min_value=-1.0, max_value=1.0))
    ... def test(x):
    ...     assert (abs(x) <= 1).all()
    >>> test()
    """
    min_size, max_size = _int_bound("min_size", min_size), _int_bound("max_size", max_size)
    _order("min_size", min_size, "max_size", max_size)
    min_value, max_value = _real_bound("min_value", min_value), _real_bound("max_value", max_value)
    _order("min_value", min_value, "max_value", max_value)

    @st.composite
    def _ratios(draw):
        lo, hi = _draw_sizes(draw, "min_size", min_size, "max_size", max_size)
        a, b = _draw_sizes(draw, "min_value", min_value, "max_value", max_value, _check_real)
        return _columns(draw, (lo, hi), _value_spec(a, b, (-3, 3), tiny=True))[0]

    return _ratios()
