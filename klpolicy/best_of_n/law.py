r"""Best-of-n sampling: its exact law, KL, expected reward and win rate.

Draw :math:`Y_1, \dots, Y_n` i.i.d. from :math:`\pi_{ref}` and keep the one
with the highest reward, choosing uniformly at random among the draws that tie
for the highest reward. Group the outcomes by reward value: for a reward level
:math:`g` with reference mass :math:`q_g`, mass strictly below :math:`F^-_g`
and mass at or below :math:`F_g = F^-_g + q_g`, the kept draw has reward
:math:`g` with probability :math:`F_g^n - (F^-_g)^n`, and given that, it is
distributed as :math:`\pi_{ref}` restricted to the level:

.. math::

    \pi_n(y) = \pi_{ref}(y)\, \frac{F_g^n - (F^-_g)^n}{q_g}, \qquad g = r(y).

The numerical method (one sort, then linear passes in log space) is described
in ``klpolicy/best_of_n/_law.py``. Curves along ``n``, the largest ``n``
within a KL budget and the comparison with the KL-regularised optimum live in
:mod:`klpolicy.best_of_n.frontier` and are re-exported here.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import validation as V
from ._law import (
    _expected_reward,
    _kl,
    _kl_bound,
    _law,
    _levels,
    _log_ratio,
    _out,
    _setup,
    _win_rate,
)

__all__ = [
    "best_of_n_expected_reward",
    "best_of_n_kl",
    "best_of_n_kl_bound",
    "best_of_n_policy",
    "best_of_n_win_rate",
]


def best_of_n_policy(
    ref: ArrayLike, reward: ArrayLike, n: int, *, axis: int = -1
) -> NDArray[np.floating]:
    r"""The exact law of the highest-reward draw among ``n`` i.i.d. draws from ``ref``.

    .. math::

        \pi_n(y) = \pi_{ref}(y)\, \frac{F(r(y))^n - F^-(r(y))^n}{\pi_{ref}(r = r(y))},
        \quad F(t) = \pi_{ref}(r \le t), \; F^-(t) = \pi_{ref}(r < t)

    Parameters
    ----------
    ref : array_like
        Reference probabilities along ``axis`` (non-negative, rows summing to 1).
    reward : array_like
        Finite rewards, same size as ``ref`` along ``axis``; batch axes broadcast.
    n : int
        Number of draws, an integer ``>= 1`` (``4.0`` is accepted, ``2.5`` is not).
    axis : int, optional
        The probability axis (default -1).

    Returns
    -------
    ndarray
        :math:`\pi_n`, with the broadcast shape of ``ref`` and ``reward``;
        float32 when the inputs are float32, float64 otherwise.

    Raises
    ------
    ValueError
        For ``n`` that is not an integer ``>= 1`` (or is above 2**53), and for
        invalid ``ref`` or ``reward`` as in :func:`klpolicy.optimal_policy`.

    Notes
    -----
    Ties: among the draws sharing the highest reward, one is chosen uniformly
    at random. The kept draw is then distributed as the reference restricted to
    that reward level, whatever the tie-breaking rule, as long as it does not
    look at which outcome a draw is; so outcomes of equal reward keep their
    reference odds. Outcomes with zero reference probability get zero.
    ``n = 1`` returns the reference. Cost: one ``argsort`` per row and a few
    linear passes, :math:`O(V \log V)`; a million outcomes take a fraction of a
    second (``benchmarks/best_of_n_bench.py``). Accurate to about 1e-13
    relative for ``n`` up to 2**53 (see the notes of ``klpolicy/best_of_n/_law.py``
    for the log/expm1 form).

    References
    ----------
    .. [1] Beirami et al., "Theoretical guarantees on the best-of-n alignment
       policy", 2024, arXiv:2401.01879.
    .. [2] Nakano et al., "WebGPT: Browser-assisted question-answering with
       human feedback", 2021, arXiv:2112.09332 (best-of-n as a baseline).

    Examples
    --------
    >>> from klpolicy.best_of_n import best_of_n_policy
    >>> best_of_n_policy([0.5, 0.5], [1.0, 0.0], 2)  # 1 - 0.5**2 and 0.5**2
    array([0.75, 0.25])
    >>> best_of_n_policy([0.25, 0.25, 0.5], [1.0, 1.0, 0.0], 3).round(4)  # a tie
    array([0.4375, 0.4375, 0.125 ])
    """
    ref_a, rew_a, ax = _setup(ref, reward, axis)
    nn = _scalar_n(n)
    shape = ref_a.shape
    lv = _levels(ref_a, rew_a)
    law = _law(lv, nn)
    with np.errstate(under="ignore", invalid="ignore", divide="ignore"):
        # mass / q, from the logs where the mass is subnormal
        ratio = law.mass / lv.q
        tiny = law.mass < 1e-290
        if tiny.any():
            ratio = np.where(tiny, np.exp(_log_ratio(lv, law)), ratio)
    pi = np.empty_like(lv.ref_n)
    pi[lv.flat] = ratio if lv.gid is None else ratio[lv.gid]
    pi *= lv.ref_n
    pi = pi.reshape(shape).astype(ref_a.dtype, copy=False)
    return np.moveaxis(pi, -1, ax)


def _scalar_n(n) -> float:
    nn = V.as_positive_int_array("n", n)
    if nn.ndim != 0:
        raise ValueError(
            f"`n` must be a single integer >= 1; got shape {nn.shape} "
            "(use best_of_n_curve for a grid)"
        )
    return float(nn)


def _stat(ref, reward, n, axis, fn):
    ref_a, rew_a, _ = _setup(ref, reward, axis)
    nn = _scalar_n(n)
    lv = _levels(ref_a, rew_a)
    return _out(fn(lv, _law(lv, nn)), ref_a.dtype)


def best_of_n_kl(
    ref: ArrayLike, reward: ArrayLike, n: int, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The exact KL divergence of the best-of-n policy from the reference.

    .. math::

        \mathrm{KL}(\pi_n\|\pi_{ref}) = \sum_g P_n(g) \log\frac{P_n(g)}{q_g},
        \qquad P_n(g) = F_g^n - (F_g^-)^n

    summed over the reward levels :math:`g` (within a level :math:`\pi_n`
    is proportional to :math:`\pi_{ref}`, so those terms cancel).

    Parameters
    ----------
    ref, reward, n, axis
        As in :func:`best_of_n_policy`.

    Returns
    -------
    ndarray or float
        KL in nats for each batch row (the probability axis removed). At most
        :func:`best_of_n_kl_bound` ``(n)`` and below :func:`klpolicy.max_kl`.

    Raises
    ------
    ValueError
        As in :func:`best_of_n_policy`.

    Notes
    -----
    The widely quoted :math:`\log n - (n-1)/n` is the value for a reference
    whose reward has no atoms (a continuum of distinct rewards); on a discrete
    reference it is an upper bound, reached only in that limit. The summands
    ``q (u e^u - e^u + 1)`` are non-negative, so the sum keeps full relative
    precision (about 1e-13 against mpmath for ``n = 10**9``).

    References
    ----------
    .. [1] Beirami et al., "Theoretical guarantees on the best-of-n alignment
       policy", 2024, arXiv:2401.01879.

    Examples
    --------
    >>> from klpolicy.best_of_n import best_of_n_kl, best_of_n_kl_bound
    >>> round(float(best_of_n_kl([0.5, 0.5], [1.0, 0.0], 2)), 6)  # 0.75 log 1.5 + 0.25 log 0.5
    0.130812
    >>> round(float(best_of_n_kl_bound(2)), 6)
    0.193147
    """
    return _stat(ref, reward, n, axis, _kl)


def best_of_n_expected_reward(
    ref: ArrayLike, reward: ArrayLike, n: int, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The exact expected reward of the best of ``n`` draws.

    .. math::

        \mathbb{E}_{\pi_n}[r] = \sum_g \big(F_g^n - (F_g^-)^n\big)\, g

    Parameters
    ----------
    ref, reward, n, axis
        As in :func:`best_of_n_policy`.

    Returns
    -------
    ndarray or float
        For each batch row; rises from :math:`\mathbb{E}_{ref}[r]` at ``n = 1``
        to the best reward on the support as ``n -> inf``.

    Raises
    ------
    ValueError
        As in :func:`best_of_n_policy`.

    Notes
    -----
    Evaluated as the best reward on the support minus the expected shortfall
    :math:`\sum_g P_n(g)(c - g)`, which keeps its precision at large ``n``.

    References
    ----------
    .. [1] Gao, Schulman and Hilton, "Scaling Laws for Reward Model
       Overoptimization", 2022, arXiv:2210.10760.

    Examples
    --------
    >>> from klpolicy.best_of_n import best_of_n_expected_reward
    >>> float(best_of_n_expected_reward([0.5, 0.5], [1.0, 0.0], 3))  # 1 - 0.5**3
    0.875
    """
    return _stat(ref, reward, n, axis, _expected_reward)


def best_of_n_win_rate(
    ref: ArrayLike, reward: ArrayLike, n: int, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The exact win rate of the best of ``n`` draws against one draw from the reference.

    .. math::

        P\big(r(Y_n) > r(Y)\big) + \tfrac12 P\big(r(Y_n) = r(Y)\big)
          = \sum_g P_n(g)\,\big(F_g^- + \tfrac12 q_g\big),
        \quad Y_n \sim \pi_n,\; Y \sim \pi_{ref}

    Parameters
    ----------
    ref, reward, n, axis
        As in :func:`best_of_n_policy`.

    Returns
    -------
    ndarray or float
        For each batch row: exactly 1/2 at ``n = 1``; it tends to ``n / (n + 1)``
        as the reference becomes continuous (many small outcomes with distinct
        rewards), and is below that on a discrete reference, where the two draws
        can tie.

    Raises
    ------
    ValueError
        As in :func:`best_of_n_policy`.

    Notes
    -----
    Ties count half a win, the usual convention for win rates. The sum equals
    :math:`\sum_g (F_g^n - (F^-_g)^n)(F_g + F^-_g)/2`, a trapezoid rule for
    :math:`\int_0^1 u\, d(u^n) = n/(n+1)`, the continuous value.

    References
    ----------
    .. [1] Beirami et al., 2024, arXiv:2401.01879.

    Examples
    --------
    >>> from klpolicy.best_of_n import best_of_n_win_rate
    >>> float(best_of_n_win_rate([0.5, 0.5], [1.0, 0.0], 1))
    0.5
    >>> float(best_of_n_win_rate([0.5, 0.5], [1.0, 0.0], 3))  # 0.875 * 0.75 + 0.125 * 0.25
    0.6875
    """
    return _stat(ref, reward, n, axis, _win_rate)


def best_of_n_kl_bound(n: ArrayLike) -> NDArray[np.float64] | np.float64:
    r"""The widely quoted best-of-n KL, :math:`\log n - (n-1)/n`: an upper bound.

    .. math::

        \mathrm{KL}(\pi_n\|\pi_{ref}) \le \log n - \frac{n-1}{n}

    Parameters
    ----------
    n : int or array_like of int
        Number of draws, integers ``>= 1``.

    Returns
    -------
    float or ndarray
        Same shape as ``n``, in nats. 0 at ``n = 1``.

    Raises
    ------
    ValueError
        For entries of ``n`` that are not integers ``>= 1``; the message shows
        the first bad entry and its index.

    Notes
    -----
    It is the exact KL when the reference's reward has a continuous law: the
    best-of-n quantile :math:`U = F(r(Y_n))` then has density :math:`n u^{n-1}`
    on :math:`[0, 1]` against the uniform law of :math:`F(r(Y))`, and
    :math:`\int_0^1 n u^{n-1}\log(n u^{n-1})\,du = \log n - (n-1)/n`. A
    discrete reference groups the quantiles into intervals, which replaces the
    density by its interval averages; by Jensen's inequality this can only
    lower the KL (see ``docs/derivations/best_of_n.md``). The bound is tight
    in the limit of many equiprobable outcomes with distinct rewards.

    References
    ----------
    .. [1] Beirami et al., "Theoretical guarantees on the best-of-n alignment
       policy", 2024, arXiv:2401.01879.
    .. [2] Stiennon et al., "Learning to summarize from human feedback", 2020,
       arXiv:2009.01325 (the formula as stated there).

    Examples
    --------
    >>> from klpolicy.best_of_n import best_of_n_kl_bound
    >>> best_of_n_kl_bound([1, 2, 16]).round(4)
    array([0.    , 0.1931, 1.8351])
    """
    nn = V.as_positive_int_array("n", n)
    return _kl_bound(nn)[()]
