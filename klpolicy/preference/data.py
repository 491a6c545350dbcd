"""Finite preference data: sampling pair counts, offline and online DPO fits by gradient descent.

Public names are re-exported by :mod:`klpolicy.preference`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import special
from ..core.internal import validation as V
from ._inputs import as_pair_counts, as_preference_matrix
from .tabular import _count_weights, _dpo_value, _log_ratio, _normalise, _ref_1d, _win_weights

__all__ = ["DPOFit", "fit_dpo", "fit_dpo_online", "sample_preference_counts"]


class DPOFit(NamedTuple):
    """Result of a gradient-descent DPO fit on a tabular policy."""

    policy: NDArray  # final policy, shape (n,)
    loss: NDArray  # loss before each step and after the last, shape (steps + 1,)
    path: NDArray  # policy before each step and after the last, shape (steps + 1, n)


def sample_preference_counts(
    preferences: ArrayLike, mu: ArrayLike, size: int, *, rng: np.random.Generator | int | None
) -> NDArray[np.int64]:
    r"""Sample a dataset of labelled pairs, returned as counts ``C[winner, loser]``.

    .. math::

        C \sim \mathrm{Multinomial}\big(N,\; W\big), \qquad
        W_{ij} = (\mu_{ij} + \mu_{ji})\,P_{ij}

    Parameters
    ----------
    preferences : array_like
        Preference matrix ``(n, n)``.
    mu : array_like
        Pair law: a vector of size ``n`` (``mu x mu``) or an ``(n, n)`` joint law.
    size : int
        Number of labelled pairs ``N >= 1``.
    rng : numpy.random.Generator or int
        The random generator, or a seed for ``numpy.random.default_rng``.

    Returns
    -------
    ndarray of int64
        ``C`` of shape ``(n, n)``, summing to ``size``; the diagonal counts
        comparisons of a response with itself.

    Raises
    ------
    ValueError
        For invalid ``preferences``, ``mu`` or ``size``.

    References
    ----------
    .. [1] Rafailov et al., 2023, arXiv:2305.18290, section 3.

    Examples
    --------
    >>> from klpolicy.preference import sample_preference_counts
    >>> c = sample_preference_counts([[0.5, 0.9], [0.1, 0.5]], [0.5, 0.5], 1000, rng=0)
    >>> int(c.sum()), c.shape
    (1000, (2, 2))
    """
    n_draws = V.as_positive_int("size", size)
    m = V.as_float_array("mu", mu)
    if m.ndim not in (1, 2):
        raise ValueError(
            "`mu` must be a distribution over the outcomes (1-D) or a joint law of pairs "
            f"(2-D); got shape {m.shape}"
        )
    n = m.shape[0]
    ref_like = np.ones(n) / n
    p = as_preference_matrix("preferences", preferences, n, against="mu")
    w = _win_weights(ref_like, p, m)
    gen = V.as_rng("rng", rng)
    return gen.multinomial(n_draws, (w / w.sum()).ravel()).reshape(n, n).astype(np.int64)


def _dpo_grad_g(g, w, beta):
    """Gradient of sum_ij w_ij softplus(-beta (g_i - g_j)) with respect to g."""
    h = g[:, None] - g[None, :]
    c = np.where(w > 0, -beta * w * special.expit(-beta * h), 0.0)
    return c.sum(axis=1) - c.sum(axis=0)


def _gd(ref, w, beta, init, steps, lr):
    support = ref > 0
    theta = np.where(support, np.log(np.where(support, init, 1.0)), -np.inf)
    logref = np.where(support, np.log(np.where(support, ref, 1.0)), 0.0)
    losses = np.empty(steps + 1)
    path = np.empty((steps + 1, ref.size))
    for k in range(steps + 1):
        g = np.where(support, theta - logref, 0.0)
        pi = _normalise(ref, g)
        path[k] = pi
        losses[k] = _dpo_value(g, w, beta)
        if k < steps:
            # the softmax normaliser cancels in every margin, so d loss / d theta = d loss / d g
            with np.errstate(over="ignore", invalid="ignore"):
                theta = theta - lr * np.where(support, _dpo_grad_g(g, w, beta), 0.0)
                spread = np.ptp(theta[support]) * max(beta, 1.0)
            if not np.isfinite(spread):  # a margin beta * (g_i - g_j) would overflow
                raise ValueError(
                    f"`beta` = {beta!r} with `lr` = {lr!r}: gradient descent leaves the floats "
                    f"at step {k + 1} (each step moves the logits by up to lr x beta); "
                    "lower `lr` or `beta`"
                )
    return DPOFit(path[-1].copy(), losses, path)


def fit_dpo(
    ref: ArrayLike,
    counts: ArrayLike,
    beta: float,
    *,
    steps: int = 1000,
    lr: float = 1.0,
    init: ArrayLike | None = None,
    label_smoothing: float = 0.0,
) -> DPOFit:
    r"""Offline DPO: gradient descent on :func:`empirical_dpo_loss` for a softmax policy.

    .. math::

        \pi_\theta = \mathrm{softmax}(\theta), \qquad
        \theta \leftarrow \theta - \eta\,\nabla_\theta \hat{\mathcal{L}}(\pi_\theta),
        \qquad \theta_0 = \log \pi_{init}

    Parameters
    ----------
    ref : array_like
        Reference distribution, shape ``(n,)``.
    counts : array_like
        The dataset, ``C[winner, loser]`` (see :func:`sample_preference_counts`).
    beta, label_smoothing
        As in :func:`dpo_loss`.
    steps : int, optional
        Number of full-batch gradient steps, ``>= 1``.
    lr : float, optional
        Step size :math:`\eta > 0`.
    init : array_like, optional
        Starting policy (default ``ref``); its support must be the reference's.

    Returns
    -------
    DPOFit
        ``policy`` (shape ``(n,)``), ``loss`` (``steps + 1``) and ``path``
        (``(steps + 1, n)``).

    Raises
    ------
    ValueError
        For invalid inputs.

    Notes
    -----
    The margin :math:`h(i, j) = (\theta_i - \theta_j) - \log(\pi_{ref,i}/\pi_{ref,j})`
    does not involve the softmax normaliser, so an outcome absent from the data
    gets no gradient: its logit stays put, and its probability moves only
    through the normaliser, up or down. With the true preferences the
    KL-regularised optimum would move it according to its reward instead.

    References
    ----------
    .. [1] Xu et al., "Is DPO Superior to PPO for LLM Alignment? A Comprehensive
       Study", 2024, arXiv:2404.10719, section 4.1.

    Examples
    --------
    Outcome 2 is never compared, yet its probability rises from 0.3 to 0.45:

    >>> from klpolicy.preference import fit_dpo
    >>> fit = fit_dpo([0.05, 0.65, 0.3], [[0, 3, 0], [1, 0, 0], [0, 0, 0]], 0.5, steps=2000, lr=5.0)
    >>> fit.policy.round(3)
    array([0.225, 0.325, 0.45 ])
    """
    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    eps = V.as_closed_interval("label_smoothing", label_smoothing, 0.5)
    c = as_pair_counts("counts", counts, ref_a)
    n_steps = V.as_positive_int("steps", steps, hi=V.MAX_LOOP_COUNT)
    eta = V.as_positive_scalar("lr", lr)
    start = ref_a if init is None else _init_policy(init, ref_a)
    w = _count_weights(c)
    if eps:
        w = (1 - eps) * w + eps * w.T
    return _gd(ref_a, w, b, start, n_steps, eta)


def _init_policy(init, ref):
    pi = V.as_probabilities("init", init).astype(np.float64)
    if pi.shape != ref.shape:
        raise ValueError(
            f"`init` must have the same shape as `ref`; got {pi.shape} and {ref.shape}"
        )
    bad = (pi > 0) != (ref > 0)
    if bad.any():
        k = int(np.argmax(bad))
        raise ValueError(f"`init` must have the same support as `ref`; they differ at index ({k},)")
    return pi


def fit_dpo_online(
    ref: ArrayLike,
    preferences: ArrayLike,
    beta: float,
    *,
    rounds: int,
    pairs_per_round: int,
    steps_per_round: int = 50,
    lr: float = 1.0,
    rng: np.random.Generator | int | None,
) -> DPOFit:
    r"""Online DPO: each round, label fresh pairs drawn from the *current* policy, then fit.

    .. math::

        C_t \sim \mathrm{Multinomial}\big(N, W(\pi_t \times \pi_t)\big), \qquad
        \pi_{t+1} = \text{``steps\_per\_round'' gradient steps on } \hat{\mathcal{L}}_{C_t}
        \text{ from } \pi_t

    Parameters
    ----------
    ref, preferences, beta
        As in :func:`dpo_optimum`.
    rounds : int
        Number of rounds.
    pairs_per_round : int
        Labelled pairs sampled per round.
    steps_per_round : int, optional
        Gradient steps on each round's data.
    lr : float, optional
        Step size.
    rng : numpy.random.Generator or int
        Random generator or seed.

    Returns
    -------
    DPOFit
        ``policy`` after the last round; ``loss`` and ``path`` have one entry
        per round (before it) plus the final one: the loss is the population
        DPO loss under ``ref x ref`` pairs, and ``path`` the policy.

    Raises
    ------
    ValueError
        For invalid inputs.

    Notes
    -----
    The reference in every margin stays ``ref``; only the sampling moves.
    With Bradley-Terry preferences the population optimum is the same for
    every pair law that covers the support (:func:`dpo_optimum`), so what the
    online loop changes is which outcomes the finite data cover.

    References
    ----------
    .. [1] Guo et al., "Direct Language Model Alignment from Online AI Feedback",
       2024, arXiv:2402.04792.

    Examples
    --------
    >>> from klpolicy.preference import bradley_terry, fit_dpo_online
    >>> fit = fit_dpo_online([0.5, 0.5], bradley_terry([1.0, 0.0]), 1.0, rounds=3,
    ...                      pairs_per_round=200, rng=0)
    >>> fit.path.shape
    (4, 2)
    """
    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    p = as_preference_matrix("preferences", preferences, ref_a.shape[-1])
    n_rounds = V.as_positive_int("rounds", rounds, hi=V.MAX_LOOP_COUNT)
    n_pairs = V.as_positive_int("pairs_per_round", pairs_per_round, hi=V.MAX_LOOP_COUNT)
    n_steps = V.as_positive_int("steps_per_round", steps_per_round, hi=V.MAX_LOOP_COUNT)
    eta = V.as_positive_scalar("lr", lr)
    gen = V.as_rng("rng", rng)
    w_pop = _win_weights(ref_a, p, None)
    pi = ref_a.copy()
    path, losses = [pi], []
    for _ in range(n_rounds):
        losses.append(_dpo_value(_log_ratio(pi, ref_a, w_pop), w_pop, b))
        c = sample_preference_counts(p, pi, n_pairs, rng=gen).astype(np.float64)
        pi = _gd(ref_a, _count_weights(c), b, pi, n_steps, eta).policy
        path.append(pi)
    losses.append(_dpo_value(_log_ratio(pi, ref_a, w_pop), w_pop, b))
    return DPOFit(pi, np.array(losses), np.array(path))
