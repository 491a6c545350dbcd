r"""Preferences and DPO, from the closed form of the KL-regularised policy.

The maximiser of :math:`\mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_{ref})`
is :math:`\pi^* = \pi_{ref} e^{r/\beta}/Z`. Solved for the reward,

.. math::

    r(y) = \beta \log\frac{\pi^*(y)}{\pi_{ref}(y)} + \beta \log Z ,

and the :math:`\beta\log Z` term cancels in the Bradley-Terry probability
:math:`\sigma(r(y_w) - r(y_l))`. Maximum likelihood of the preferences in the
policy's *implicit reward* :math:`\beta\log(\pi/\pi_{ref})` is the DPO loss
(Rafailov et al., 2023). This module computes every object of that argument:

* per-pair losses on log-probabilities, with TRL's argument order:
  :func:`dpo_loss` (with conservative-DPO label smoothing), :func:`ipo_loss`,
  and their exact gradients :func:`dpo_loss_grad`, :func:`ipo_loss_grad`;
* :func:`bradley_terry`, :func:`implicit_reward` and
  :func:`reward_decomposition` (the identity above, number by number);
* population (infinite-data) losses on tabular problems and their exact
  minimisers :func:`dpo_optimum` and :func:`ipo_optimum`;
* finite data: :func:`sample_preference_counts`, :func:`empirical_dpo_loss`,
  gradient-descent fits :func:`fit_dpo` (offline) and :func:`fit_dpo_online`
  (pairs drawn from the current policy).

A tabular *pair law* ``mu`` is the distribution of the ordered pair shown to
the labeller: ``None`` means both responses are drawn independently from the
reference, a vector ``m`` means ``m x m``, an ``(n, n)`` matrix is the joint
law. The labeller then prefers ``i`` to ``j`` with probability
``preferences[i, j]``, so the pair (winner ``i``, loser ``j``) is observed with
probability ``W[i, j] = (mu[i, j] + mu[j, i]) * P[i, j]``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core import optimal_policy
from ..core.internal import setup as _setup
from ..core.internal import special
from ..core.internal import tilt as _tilt
from ..core.internal import validation as V
from ._inputs import as_pair_law, as_preference_matrix
from .solvers import consistent_potentials, laplacian_solve, minimise_pair_loss
from .tabular import (
    _ref_1d,
    _tilt_scores,
    _win_weights,
)

__all__ = [
    "RewardDecomposition",
    "bradley_terry",
    "dpo_optimum",
    "implicit_reward",
    "ipo_optimum",
    "reward_decomposition",
]


class RewardDecomposition(NamedTuple):
    """``reward = implicit_reward + log_partition`` on the reference's support."""

    policy: NDArray  # pi*_beta
    implicit_reward: NDArray  # beta log(pi*/ref), -inf off the support
    log_partition: NDArray  # beta log Z (the soft value), one per batch row


# ---------------------------------------------------------------------------
# Bradley-Terry and the implicit reward
# ---------------------------------------------------------------------------


def bradley_terry(reward: ArrayLike, *, axis: int = -1) -> NDArray[np.floating]:
    r"""The Bradley-Terry preference matrix of a reward.

    .. math::

        P[i, j] = \sigma\big(r_i - r_j\big) = \frac{e^{r_i}}{e^{r_i} + e^{r_j}}

    Parameters
    ----------
    reward : array_like
        Finite rewards along ``axis``; other axes are batch axes.
    axis : int, optional
        The outcome axis (default -1).

    Returns
    -------
    ndarray
        Shape ``batch_shape + (n, n)`` (the outcome axis is moved last and
        doubled); ``P + P.T = 1`` to rounding, diagonal exactly 1/2.

    Raises
    ------
    ValueError
        For non-finite or empty rewards, or a bad ``axis``.

    Notes
    -----
    ``scipy.special.expit`` keeps full relative precision in both tails, so
    reward gaps of hundreds of nats give probabilities like ``1e-200``, not 0.

    References
    ----------
    .. [1] Bradley and Terry, "Rank Analysis of Incomplete Block Designs", 1952,
       Biometrika 39(3/4).

    Examples
    --------
    >>> from klpolicy.preference import bradley_terry
    >>> bradley_terry([1.0, 0.0]).round(4)
    array([[0.5   , 0.7311],
           [0.2689, 0.5   ]])
    """
    r = V.as_rewards("reward", reward, axis)
    return special.expit(r[..., :, None] - r[..., None, :]).astype(r.dtype, copy=False)


def implicit_reward(
    policy_logps: ArrayLike, ref_logps: ArrayLike, beta: float
) -> NDArray[np.floating]:
    r"""DPO's implicit reward :math:`\beta \log(\pi(y)/\pi_{ref}(y))`.

    .. math::

        \hat r(y) = \beta\,\big(\log\pi(y) - \log\pi_{ref}(y)\big)

    Parameters
    ----------
    policy_logps, ref_logps : array_like
        Finite log-probabilities of the same responses; they broadcast.
    beta : float
        Positive, finite coefficient.

    Returns
    -------
    ndarray
        The broadcast shape of the inputs. TRL logs these values as
        ``rewards/chosen`` and ``rewards/rejected``.

    Raises
    ------
    ValueError
        For non-finite log-probabilities, shapes that do not broadcast, or a
        bad ``beta``.

    Notes
    -----
    The implicit reward differs from the reward that :math:`\pi` is optimal
    for by the constant :math:`\beta\log Z` (see :func:`reward_decomposition`),
    which cancels in every difference :math:`\hat r(y_w) - \hat r(y_l)`.

    References
    ----------
    .. [1] Rafailov et al., 2023, arXiv:2305.18290, eq. (5).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.preference import implicit_reward
    >>> float(implicit_reward(np.log(0.8), np.log(0.4), 0.5)).__round__(6)  # 0.5 * log 2
    0.346574
    """
    p = V.as_finite_array("policy_logps", policy_logps)
    q = V.as_finite_array("ref_logps", ref_logps)
    try:
        p, q = np.broadcast_arrays(p, q)
    except ValueError:
        raise ValueError(
            f"`policy_logps` {p.shape} and `ref_logps` {q.shape} do not broadcast"
        ) from None
    b = V.as_positive_scalar("beta", beta)
    dtype = V.result_dtype(p, q)
    return (dtype.type(b) * (p.astype(dtype) - q.astype(dtype))).astype(dtype, copy=False)[()]


def reward_decomposition(
    ref: ArrayLike, reward: ArrayLike, beta: ArrayLike, *, axis: int = -1
) -> RewardDecomposition:
    r"""The identity :math:`r = \beta\log(\pi^*/\pi_{ref}) + \beta\log Z`, term by term.

    .. math::

        \pi^* = \frac{\pi_{ref}\,e^{r/\beta}}{Z}
        \;\Longleftrightarrow\;
        r(y) = \underbrace{\beta\log\frac{\pi^*(y)}{\pi_{ref}(y)}}_{\text{implicit reward}}
             + \underbrace{\beta\log Z}_{\text{soft value}}
        \quad (\pi_{ref}(y) > 0)

    Parameters
    ----------
    ref, reward, axis
        As in :func:`klpolicy.optimal_policy`.
    beta : float or array_like
        Positive, finite coefficient (per batch row allowed, as in
        :func:`klpolicy.optimal_policy`).

    Returns
    -------
    RewardDecomposition
        ``policy`` (:math:`\pi^*`, shape of ``ref``), ``implicit_reward``
        (same shape; ``-inf`` where ``ref`` is 0, where the reward cannot be
        recovered from :math:`\pi^*`) and ``log_partition``
        (:math:`\beta\log Z`, one per batch row).

    Raises
    ------
    ValueError
        As in :func:`klpolicy.optimal_policy`, and for ``beta`` 0 or ``inf``
        (the log-ratio is then not a reward).

    Notes
    -----
    Both terms come from the same log-space evaluation as
    :func:`klpolicy.optimal_policy`, so ``implicit_reward + log_partition``
    equals ``reward`` on the support to a few ulp of ``max |r|``. The reward is
    identified by :math:`\pi^*` only up to the constant :math:`\beta\log Z`:
    the reason DPO can train on reward *differences* alone.

    References
    ----------
    .. [1] Rafailov et al., 2023, arXiv:2305.18290, eq. (5).

    Examples
    --------
    >>> from klpolicy.preference import reward_decomposition
    >>> d = reward_decomposition([0.5, 0.5], [1.0, 0.0], 0.5)
    >>> (d.implicit_reward + d.log_partition).round(12)
    array([1., 0.])
    """
    ref_a, rew_a, b, ax = _setup(ref, reward, beta, axis)
    bad = (b == 0) | np.isinf(b)
    if bad.any():
        raise ValueError(
            f"`beta` must be positive and finite for the decomposition; found {float(b[bad][0]):g}"
        )
    t = _tilt(ref_a, rew_a, b)
    with np.errstate(invalid="ignore"):
        implicit = np.where(ref_a > 0, b * t.u, -np.inf).astype(ref_a.dtype)
    return RewardDecomposition(
        np.moveaxis(t.pi, -1, ax), np.moveaxis(implicit, -1, ax), t.value[..., 0][()]
    )


# ---------------------------------------------------------------------------
# tabular problems: population and empirical losses
# ---------------------------------------------------------------------------


# ---------------------------------------------------------------------------
# exact population optima
# ---------------------------------------------------------------------------


def dpo_optimum(
    ref: ArrayLike,
    preferences: ArrayLike,
    beta: float,
    *,
    mu: ArrayLike | None = None,
    label_smoothing: float = 0.0,
) -> NDArray[np.float64]:
    r"""The exact minimiser of the population DPO loss on a tabular problem.

    .. math::

        \pi_{DPO} = \arg\min_\pi \sum_{i,j} W_{ij}\,\ell\big(h_\pi(i, j)\big);
        \qquad P = \mathrm{BT}(r) \;\Rightarrow\; \pi_{DPO} = \frac{\pi_{ref}\,e^{r/\beta}}{Z}

    Parameters
    ----------
    ref : array_like
        Reference distribution, shape ``(n,)``.
    preferences : array_like
        Preference matrix ``(n, n)``: entries in [0, 1], ``P + P.T = 1``.
    beta : float
        Positive, finite coefficient.
    mu : array_like, optional
        Pair law, as in :func:`population_dpo_loss` (default ``ref x ref``).
    label_smoothing : float, optional
        The label smoothing :math:`\varepsilon \in [0, 1/2]` of cDPO: the labels are flipped with
        probability :math:`\varepsilon`, i.e. ``P`` becomes
        ``(1 - eps) P + eps P.T``.

    Returns
    -------
    ndarray
        The policy, shape ``(n,)``; exactly 0 where ``ref`` is 0.

    Raises
    ------
    ValueError
        For invalid inputs; and when the minimiser is not unique: when the
        pairs ``mu`` draws do not connect all of the reference's support, or
        when several groups of outcomes each win all their comparisons with
        the rest with probability one.

    Notes
    -----
    The loss depends on :math:`\pi` only through the log-ratios
    :math:`g = \log(\pi/\pi_{ref})` on the support, and is convex in
    :math:`g`; it is solved there by Newton's method (exact gradient and
    weighted-Laplacian Hessian) with steps clipped to 8 log-odds units and a line
    search on the loss's change pair by pair, started from the weighted
    least-squares fit of :math:`\beta(g_i - g_j)` to
    :math:`\mathrm{logit}\,P_{ij}` (exact for Bradley-Terry preferences), until the
    gradient is zero to rounding. The answer does not depend on the order of the
    outcomes (one-sided pairs, :math:`P_{ij} = 1`, put the start where the softplus is
    linear; unclipped steps from there stopped at a non-minimiser that did).

    *Bradley-Terry preferences.* Each pair's loss is minimised at
    :math:`\beta h(i, j) = r_i - r_j`, which :math:`g = r/\beta + c` achieves for
    all pairs at once, so the minimiser is :func:`klpolicy.optimal_policy`
    for *every* pair law that connects the support.

    *Deterministic preferences.* If the outcomes split into groups and one
    group wins every drawn comparison with the others with probability one,
    the loss has no minimiser: it keeps decreasing as the winners' log-ratio
    grows. Every minimising sequence then converges to the group's own
    optimum, with zero mass elsewhere, whatever ``beta``; that limit is
    returned. Label smoothing (``eps > 0``) restores a finite minimiser.

    References
    ----------
    .. [1] Rafailov et al., 2023, arXiv:2305.18290, section 5.
    .. [2] Azar et al., 2023, arXiv:2310.12036, section 4.2 (DPO and
       deterministic preferences).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy import optimal_policy
    >>> from klpolicy.preference import bradley_terry, dpo_optimum
    >>> ref, r = np.array([0.2, 0.3, 0.5]), np.array([1.0, 0.0, -1.0])
    >>> pi = dpo_optimum(ref, bradley_terry(r), 0.7)
    >>> float(np.max(np.abs(pi - optimal_policy(ref, r, 0.7)))) < 1e-14
    True
    >>> dpo_optimum([0.5, 0.5], [[0.5, 1.0], [0.0, 0.5]], 1.0)  # deterministic: the limit
    array([1., 0.])
    """
    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    eps = V.as_closed_interval("label_smoothing", label_smoothing, 0.5)
    w = _win_weights(ref_a, preferences, mu, eps)
    # additive log-odds (Bradley-Terry): every pair is at its own optimum, so the answer is
    # the closed form, exact at any beta (1e-310 too) and whatever the pair masses (1e-300
    # products underflow; the Newton solve on such weights was singular or stopped early)
    support = ref_a > 0
    p = as_preference_matrix("preferences", preferences, ref_a.shape[-1])
    if eps:
        p = (1 - eps) * p + eps * p.T
    if mu is None or np.ndim(mu) == 1:
        m = ref_a if mu is None else np.asarray(mu, dtype=np.float64)
        compared = np.outer(m > 0, m > 0)
    else:
        joint = np.asarray(mu, dtype=np.float64)
        compared = (joint + joint.T) > 0
    with np.errstate(divide="ignore"):
        logit = np.log(p) - np.log(p.T)
    a = consistent_potentials(logit, compared & np.outer(support, support), support)
    if a is not None:
        return optimal_policy(ref_a, a, b)
    # the loss depends on g only through beta g: solve for x = beta g at beta 1, then tilt
    # (a subnormal beta is then the greedy limit, as in optimal_policy)
    return _tilt_scores(ref_a, minimise_pair_loss(w, support, 1.0, kind="dpo"), b)


def ipo_optimum(
    ref: ArrayLike, preferences: ArrayLike, tau: float, *, mu: ArrayLike | None = None
) -> NDArray[np.float64]:
    r"""The IPO optimum: :math:`\pi_{ref}\exp(p(y \succ \mu)/\tau)` normalised.

    .. math::

        \pi_{IPO}(y) = \frac{\pi_{ref}(y)\,\exp\big(p(y\succ\mu)/\tau\big)}{Z},
        \qquad p(y\succ\mu) = \sum_{y'} \mu(y') P[y, y']

    Parameters
    ----------
    ref : array_like
        Reference distribution, shape ``(n,)``.
    preferences : array_like
        Preference matrix ``(n, n)``.
    tau : float
        Positive, finite coefficient.
    mu : array_like, optional
        ``None`` (the reference) or a vector: the closed form above. An
        ``(n, n)`` joint law of pairs: the exact minimiser of the population
        IPO loss for that law (a linear solve; no closed form in general).

    Returns
    -------
    ndarray
        The policy, shape ``(n,)``; 0 where ``ref`` is 0.

    Raises
    ------
    ValueError
        For invalid inputs; for a joint ``mu`` whose pairs do not connect the
        reference's support (the minimiser is then not unique).

    Notes
    -----
    With a vector ``mu`` the closed form is always the maximiser of the IPO
    objective :math:`\mathbb{E}_{y\sim\pi,\,y'\sim\mu}[P(y\succ y')] -
    \tau\,\mathrm{KL}(\pi\|\pi_{ref})` (it is :func:`klpolicy.optimal_policy`
    with reward :math:`p(y\succ\mu)` and :math:`\beta = \tau`). It is also the
    unique minimiser of the population IPO loss (:func:`population_ipo_loss`)
    exactly when (i) the pair is drawn from :math:`\mu\times\mu`, (ii)
    :math:`\mathrm{supp}\,\mu = \mathrm{supp}\,\pi_{ref}`, and (iii)
    :math:`P + P^T = 1`: the stationarity condition of the quadratic loss is
    :math:`\sum_j (\mu_{ij}+\mu_{ji})(g_i - g_j) = \tau^{-1}\sum_j
    (\mu_{ij}+\mu_{ji})(P_{ij} - 1/2)`, which for :math:`\mu_{ij} = \mu_i\mu_j`
    reads :math:`\mu_i (g_i - \bar g) = \mu_i(p(i\succ\mu) - 1/2)/\tau`.
    Where :math:`\mu_i = 0` the loss leaves :math:`g_i` free. The IPO optimum
    is finite for deterministic preferences, where DPO's is not.

    References
    ----------
    .. [1] Azar et al., "A General Theoretical Paradigm to Understand Learning from
       Human Preferences", 2023, arXiv:2310.12036, section 5.

    Examples
    --------
    >>> from klpolicy.preference import ipo_optimum
    >>> ipo_optimum([0.5, 0.5], [[0.5, 1.0], [0.0, 0.5]], 1.0).round(4)  # e^0.75, e^0.25
    array([0.6225, 0.3775])
    """
    ref_a = _ref_1d(ref)
    t = V.as_positive_scalar("tau", tau)
    p = as_preference_matrix("preferences", preferences, ref_a.shape[-1])
    if mu is None or V.as_float_array("mu", mu).ndim == 1:
        m = ref_a if mu is None else V.as_probabilities("mu", mu).astype(np.float64)
        if m.shape != ref_a.shape:
            raise ValueError(
                "`mu` must have the same size as `ref` along the probability axis; "
                f"got {m.shape[-1]} and {ref_a.shape[-1]}"
            )
        return optimal_policy(ref_a, p @ m, t)
    joint = as_pair_law(mu, ref_a)
    sym = joint + joint.T
    x = laplacian_solve(sym, np.sum(sym * (p - 0.5), axis=1), ref_a > 0)  # x = tau g
    return _tilt_scores(ref_a, x, t)
