"""Population (infinite-data) preference losses on tabular problems, and shared helpers.

A pair law ``mu`` and a preference matrix ``P`` give the probability
``W[i, j] = (mu[i, j] + mu[j, i]) P[i, j]`` of observing ``i`` chosen over ``j``.
Public names are re-exported by :mod:`klpolicy.preference`.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import validation as V
from ._inputs import as_pair_counts, as_pair_law, as_preference_matrix
from .losses import _softplus

__all__ = ["empirical_dpo_loss", "population_dpo_loss", "population_ipo_loss"]


def _ref_1d(ref: ArrayLike) -> NDArray[np.float64]:
    r = V.as_probabilities("ref", ref).astype(np.float64, copy=False)
    if r.ndim != 1:
        raise ValueError(f"`ref` must be one distribution (1-D) here; got shape {r.shape}")
    return r


def _win_weights(ref, preferences, mu, label_smoothing=0.0):
    """W[i, j]: probability of observing (winner i, loser j), with smoothed labels."""
    p = as_preference_matrix("preferences", preferences, ref.shape[-1])
    joint = as_pair_law(mu, ref)
    if label_smoothing:
        p = (1 - label_smoothing) * p + label_smoothing * p.T
    return (joint + joint.T) * p


def _log_ratio(policy, ref, weights, name="policy"):
    """g = log(policy/ref) on the outcomes the weights touch (0 elsewhere, never used)."""
    pi = V.as_probabilities(name, policy).astype(np.float64, copy=False)
    if pi.shape != ref.shape:
        raise ValueError(
            f"`{name}` must have the same shape as `ref`; got {pi.shape} and {ref.shape}"
        )
    used = (weights.sum(0) + weights.sum(1)) > 0
    zero = used & (pi == 0)
    if zero.any():
        k = int(np.argmax(zero))
        raise ValueError(
            f"`{name}` must be positive on every outcome the pairs involve; found 0 at index ({k},)"
        )
    with np.errstate(divide="ignore"):
        return np.where(
            used, np.log(np.where(used, pi, 1.0)) - np.log(np.where(used, ref, 1.0)), 0.0
        )


def _dpo_value(g, weights, beta):
    h = g[:, None] - g[None, :]
    mask = weights > 0
    return float(np.sum(np.where(mask, weights * _softplus(-beta * h), 0.0)))


def population_dpo_loss(
    policy: ArrayLike,
    ref: ArrayLike,
    preferences: ArrayLike,
    beta: float,
    *,
    mu: ArrayLike | None = None,
    label_smoothing: float = 0.0,
) -> float:
    r"""Expected DPO loss of a tabular policy over pairs from ``mu`` labelled by ``preferences``.

    .. math::

        \mathcal{L}(\pi) = \sum_{i,j} W_{ij}\, \ell\big(h_\pi(i, j)\big),
        \quad W_{ij} = (\mu_{ij} + \mu_{ji}) P_{ij},
        \quad h_\pi(i, j) = \log\frac{\pi_i}{\pi_{ref,i}} - \log\frac{\pi_j}{\pi_{ref,j}}

    with :math:`\ell` the per-pair loss of :func:`dpo_loss`.

    Parameters
    ----------
    policy : array_like
        The policy, shape ``(n,)``; positive on every outcome the pairs involve.
    ref : array_like
        Reference distribution, shape ``(n,)``.
    preferences : array_like
        ``P[i, j]`` = probability that ``i`` is preferred to ``j``; shape
        ``(n, n)``, entries in [0, 1], ``P + P.T = 1``.
    beta, label_smoothing
        As in :func:`dpo_loss`.
    mu : array_like, optional
        Pair law: ``None`` (``ref x ref``), a vector (``mu x mu``) or an
        ``(n, n)`` joint law; no mass where ``ref`` is 0.

    Returns
    -------
    float
        The expected per-pair loss (pairs of identical responses included,
        each contributing :math:`\log 2` when :math:`\varepsilon = 0`).

    Raises
    ------
    ValueError
        For invalid ``policy``, ``ref``, ``preferences``, ``mu``, ``beta`` or
        ``label_smoothing`` (messages name the argument).

    Notes
    -----
    Only log-ratios on outcomes the pairs involve enter: a policy that moves
    mass onto outcomes never compared (even where ``ref`` is 0) has the same
    loss. :func:`dpo_optimum` is its minimiser.

    References
    ----------
    .. [1] Rafailov et al., 2023, arXiv:2305.18290, eq. (7).

    Examples
    --------
    >>> from klpolicy.preference import population_dpo_loss
    >>> round(population_dpo_loss([0.5, 0.5], [0.5, 0.5], [[0.5, 0.9], [0.1, 0.5]], 1.0), 6)
    0.693147
    """
    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    eps = V.as_closed_interval("label_smoothing", label_smoothing, 0.5)
    w = _win_weights(ref_a, preferences, mu, eps)
    return _dpo_value(_log_ratio(policy, ref_a, w), w, b)


def empirical_dpo_loss(
    policy: ArrayLike,
    ref: ArrayLike,
    counts: ArrayLike,
    beta: float,
    *,
    label_smoothing: float = 0.0,
) -> float:
    r"""Mean DPO loss of a tabular policy over a dataset given as pair counts.

    .. math::

        \hat{\mathcal{L}}(\pi) = \frac{1}{N}\sum_{i,j} C_{ij}\,\ell\big(h_\pi(i, j)\big),
        \qquad N = \sum_{i,j} C_{ij}

    Parameters
    ----------
    policy, ref, beta, label_smoothing
        As in :func:`population_dpo_loss`.
    counts : array_like
        ``C[i, j]``: number of comparisons in which ``i`` was chosen over
        ``j``, shape ``(n, n)``; zero where ``ref`` is 0.

    Returns
    -------
    float
        The mean loss over the ``N`` comparisons.

    Raises
    ------
    ValueError
        For invalid inputs, as in :func:`population_dpo_loss`, and for
        negative or all-zero ``counts``.

    Notes
    -----
    If some pair is only ever seen one way round (``C[i, j] > 0 = C[j, i]``,
    common with few samples), the loss has no minimiser: it keeps decreasing
    as :math:`\pi_i/\pi_j \to \infty`, whatever :math:`\beta` is.

    References
    ----------
    .. [1] Azar et al., 2023, arXiv:2310.12036, section 4.2.

    Examples
    --------
    >>> from klpolicy.preference import empirical_dpo_loss
    >>> round(empirical_dpo_loss([0.5, 0.5], [0.5, 0.5], [[0, 3], [1, 0]], 1.0), 6)
    0.693147
    """
    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    eps = V.as_closed_interval("label_smoothing", label_smoothing, 0.5)
    w = _count_weights(as_pair_counts("counts", counts, ref_a))
    if eps:
        w = (1 - eps) * w + eps * w.T
    return _dpo_value(_log_ratio(policy, ref_a, w), w, b)


def population_ipo_loss(
    policy: ArrayLike,
    ref: ArrayLike,
    preferences: ArrayLike,
    tau: float,
    *,
    mu: ArrayLike | None = None,
) -> float:
    r"""Expected IPO loss of a tabular policy over pairs from ``mu`` labelled by ``preferences``.

    .. math::

        \mathcal{L}(\pi) = \sum_{i,j} W_{ij}\,\Big(h_\pi(i, j) - \frac{1}{2\tau}\Big)^2

    Parameters
    ----------
    policy, ref, preferences, mu
        As in :func:`population_dpo_loss`.
    tau : float
        Positive, finite IPO coefficient.

    Returns
    -------
    float
        The expected per-pair loss.

    Raises
    ------
    ValueError
        As in :func:`population_dpo_loss`.

    References
    ----------
    .. [1] Azar et al., 2023, arXiv:2310.12036, eq. (17).

    Examples
    --------
    >>> from klpolicy.preference import population_ipo_loss
    >>> float(population_ipo_loss([0.5, 0.5], [0.5, 0.5], [[0.5, 1.0], [0.0, 0.5]], 0.5))
    1.0
    """
    ref_a = _ref_1d(ref)
    t = V.as_positive_scalar("tau", tau)
    w = _win_weights(ref_a, preferences, mu)
    g = _log_ratio(policy, ref_a, w)
    h = g[:, None] - g[None, :]
    return float(np.sum(np.where(w > 0, w * (h - 1 / (2 * t)) ** 2, 0.0)))


def _count_weights(c: NDArray) -> NDArray[np.float64]:
    """Pair counts as frequencies; scaled by the largest count first (a sum of 1e308s is inf)."""
    c = c / c.max()
    return c / c.sum()


def _normalise(ref: NDArray, g: NDArray) -> NDArray[np.float64]:
    """pi = ref e^g / sum(ref e^g), with g = -inf allowed (zero mass) and 0 off the support."""
    support = ref > 0
    gmax = np.max(np.where(support, g, -np.inf))
    with np.errstate(invalid="ignore"):
        w = np.where(support, ref * np.exp(np.where(support, g - gmax, 0.0)), 0.0)
    return w / w.sum()


def _tilt_scores(ref: NDArray, x: NDArray, beta: float) -> NDArray[np.float64]:
    """pi = ref e^{x / beta} / Z from beta-free scores x (-inf: zero mass), 0 off the support.

    The subtraction of the largest score comes before the division, so a subnormal beta
    gives the greedy limit (all mass on the best scores, split in proportion to ``ref``),
    as :func:`klpolicy.optimal_policy` does at ``beta = 0``, instead of inf / inf.
    """
    support = ref > 0
    xmax = np.max(np.where(support, x, -np.inf))
    with np.errstate(invalid="ignore", over="ignore", divide="ignore", under="ignore"):
        d = np.where(support & (x > -np.inf), x - xmax, -np.inf)
        t = np.where(d == 0, 0.0, d / beta)
        w = np.where(support, ref * np.exp(t), 0.0)
        z = w.sum()
        pi = w / z
        # an entry below the normal range lost its digits in ref * e^t before the division
        # (ref 1e-15 times e^t of 1e-312 is 0, not the 5e-321 it becomes after dividing by
        # a sum of 3e-7): there, e^{log ref + t - log Z}, rounded once
        low = support & (pi < np.finfo(np.float64).tiny) & (t > -np.inf)
        if low.any():
            pi[low] = np.exp(np.log(ref[low]) + t[low] - np.log(z))
    return pi
