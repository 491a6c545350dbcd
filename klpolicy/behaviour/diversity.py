r"""Diversity and mode collapse of the KL-regularised optimum, exactly.

The KL penalty splits into an entropy bonus and a pull toward the reference,

.. math::

    \mathrm{KL}(\pi\|\pi_{ref}) = H(\pi, \pi_{ref}) - H(\pi),
    \qquad
    \mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_{ref})
      = \mathbb{E}_\pi[r] + \beta H(\pi) - \beta H(\pi, \pi_{ref}),

and with a uniform reference (:math:`H(\pi, u) = \log n`) it is maximum-entropy
RL. This module measures what the penalty does to diversity: the entropy and
effective support :math:`e^{H}` of :math:`\pi^*_\beta` against ``beta`` and
against the KL, their slope, the limits (``beta -> 0``: the best-reward set;
``beta -> inf``: the reference), and on token trees the exact expected number of
distinct sequences among ``k`` samples.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..best_of_n import best_of_n_kl, best_of_n_policy
from ..core import beta_for_kl
from ..core.internal import cross_entropy_last as _cross_entropy_last
from ..core.internal import entropy_last as _entropy_last
from ..core.internal import kl_last as _kl_last
from ..core.internal import pair as _pair
from ..core.internal import prepare as _prepare
from ..core.internal import setup as _setup
from ..core.internal import tilt as _tilt
from ..core.internal import validation as V
from ..sequences import joint
from ._inputs import as_beta_grid

__all__ = [
    "ENTROPY_STEPS",
    "BestOfNDiversity",
    "DiversityCurve",
    "EntropyStep",
    "KLDecomposition",
    "best_of_n_diversity",
    "diversity_curve",
    "entropy_slope",
    "entropy_step",
    "expected_distinct",
    "expected_distinct_sequences",
    "kl_decomposition",
    "max_entropy_objective",
    "optimal_effective_support",
    "optimal_entropy",
]


class KLDecomposition(NamedTuple):
    """``kl = cross_entropy - entropy``, each with the batch shape."""

    kl: NDArray
    cross_entropy: NDArray
    entropy: NDArray


class DiversityCurve(NamedTuple):
    """Diversity of :math:`\\pi^*_\\beta` along a grid; every array has the grid's shape."""

    beta: NDArray
    kl: NDArray
    expected_reward: NDArray
    entropy: NDArray
    effective_support: NDArray


class BestOfNDiversity(NamedTuple):
    """Best-of-n against :math:`\\pi^*_\\beta` at equal KL; every array has the shape of ``ns``."""

    n: NDArray
    kl: NDArray
    beta: NDArray
    best_of_n_entropy: NDArray
    optimal_entropy: NDArray
    best_of_n_effective_support: NDArray
    optimal_effective_support: NDArray


def kl_decomposition(pi: ArrayLike, ref: ArrayLike, *, axis: int = -1) -> KLDecomposition:
    r"""Split :math:`\mathrm{KL}(\pi\|\pi_{ref})` into cross-entropy minus entropy.

    .. math::

        \mathrm{KL}(\pi\|\pi_{ref}) = \underbrace{-\sum_y \pi(y)\log\pi_{ref}(y)}_{H(\pi,\pi_{ref})}
          - \underbrace{\Big(-\sum_y \pi(y)\log\pi(y)\Big)}_{H(\pi)}

    Parameters
    ----------
    pi, ref : array_like
        Probabilities along ``axis``; batch axes broadcast.
    axis : int, optional
        The probability axis (default -1).

    Returns
    -------
    KLDecomposition
        Named tuple ``(kl, cross_entropy, entropy)``, each of the batch shape.
        ``kl`` comes from :func:`klpolicy.kl_divergence` (full relative
        precision); ``cross_entropy - entropy`` equals it up to rounding of the
        two sums. Off the reference's support ``kl`` and ``cross_entropy`` are
        ``inf``.

    Raises
    ------
    ValueError
        For invalid probabilities, as in :func:`klpolicy.kl_divergence`.

    Notes
    -----
    Multiplying by :math:`-\beta`, the penalised objective is
    :math:`\mathbb{E}_\pi[r] + \beta H(\pi) - \beta H(\pi, \pi_{ref})`: an
    entropy bonus, which alone would spread :math:`\pi` uniformly, plus a pull
    toward the reference's likely outcomes (the cross-entropy is the
    reference's negative log-likelihood of :math:`\pi`'s samples). With a
    uniform reference the pull is the constant :math:`\log n` and only the
    entropy bonus is left (:func:`max_entropy_objective`).

    References
    ----------
    .. [1] Cover and Thomas, "Elements of Information Theory", 2nd ed., 2006,
       ch. 2.
    .. [2] Korbak, Perez and Buckley, "RL with KL penalties is better viewed as
       Bayesian inference", 2022, arXiv:2205.11275.

    Examples
    --------
    >>> from klpolicy.diversity import kl_decomposition
    >>> d = kl_decomposition([0.9, 0.1], [0.5, 0.5])
    >>> round(float(d.cross_entropy), 6), round(float(d.entropy), 6), round(float(d.kl), 6)
    (0.693147, 0.325083, 0.368064)
    """
    pa, qa = _pair(pi, ref, axis, names=("pi", "ref"))
    dt = pa.dtype
    return KLDecomposition(
        kl=_kl_last(pa, qa)[()],
        cross_entropy=_cross_entropy_last(pa, qa).astype(dt)[()],
        entropy=_entropy_last(pa).astype(dt)[()],
    )


def max_entropy_objective(
    pi: ArrayLike, reward: ArrayLike, beta: float, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""The maximum-entropy RL objective :math:`\mathbb{E}_\pi[r] + \beta H(\pi)`.

    .. math::

        \mathbb{E}_\pi[r] + \beta H(\pi)
          = \mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\|u) + \beta \log n,
        \qquad u = \text{uniform on } n \text{ outcomes}

    Parameters
    ----------
    pi : array_like
        Probabilities along ``axis``.
    reward : array_like
        Finite rewards of the same size along ``axis``; batch axes broadcast.
    beta : float
        Entropy coefficient, finite and ``>= 0``.
    axis : int, optional
        The probability axis (default -1).

    Returns
    -------
    ndarray or float
        One value per batch row.

    Raises
    ------
    ValueError
        For invalid ``pi`` or ``reward``, or a negative, NaN or infinite ``beta``.

    Notes
    -----
    The KL-regularised problem with the uniform reference is this objective
    shifted by the constant :math:`\beta\log n`, so both have the same
    maximiser, ``optimal_policy(uniform, reward, beta)`` = softmax(r/beta), and
    the maximum is :math:`\beta \log\sum_y e^{r(y)/\beta}` =
    ``soft_value(uniform, reward, beta) + beta * log(n)``.

    References
    ----------
    .. [1] Ziebart et al., "Maximum Entropy Inverse Reinforcement Learning",
       2008, AAAI.
    .. [2] Haarnoja et al., "Reinforcement Learning with Deep Energy-Based
       Policies", 2017, arXiv:1702.08165.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy import optimal_policy
    >>> from klpolicy.diversity import max_entropy_objective
    >>> pi = optimal_policy([0.5, 0.5], [1.0, 0.0], 0.5)
    >>> round(float(max_entropy_objective(pi, [1.0, 0.0], 0.5)), 6)  # 0.5 log(e^2 + 1)
    1.063464
    """
    p = V.as_probabilities("pi", pi, axis)
    r = V.as_rewards("reward", reward, axis)
    p, r = V.broadcast_pair("pi", p, "reward", r)
    b = V.as_scalar("beta", beta, "[0, inf)")
    h = _entropy_last(p)
    return (np.sum(p * r, axis=-1, dtype=np.float64) + b * h).astype(V.result_dtype(p, r))[()]


def _policy_entropy(p: NDArray) -> NDArray:
    """H of a computed policy (rows exactly normalised in exact arithmetic), last axis.

    A policy close to one-hot has its top entry 1 - 1e-17 rounded to 1, so
    ``-p log p`` loses that entry's share (about 1e-17, a few percent of such an
    entropy): where the top entry holds at least half the mass, its log is taken as
    ``log1p(-others)``, the other entries being resolved to full relative precision.
    """
    p = p.astype(np.float64, copy=False)
    is_top = np.arange(p.shape[-1]) == np.argmax(p, axis=-1)[..., None]
    others = np.sum(np.where(is_top, 0.0, p), axis=-1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore"):
        logp = np.where(is_top & (others <= 0.5), np.log1p(-others), np.log(p))
        return np.sum(np.where(p > 0, -p * logp, 0.0), axis=-1)


def _optimal_entropy_last(ref: NDArray, reward: NDArray, beta: NDArray) -> NDArray:
    t = _tilt(ref, reward, beta)
    return _policy_entropy(t.pi)


def optimal_entropy(
    ref: ArrayLike, reward: ArrayLike, beta: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""Entropy of the optimal policy, :math:`H(\pi^*_\beta)`.

    .. math::

        H(\pi^*_\beta) = -\sum_y \pi^*_\beta(y)\log \pi^*_\beta(y),
        \qquad \pi^*_\beta \propto \pi_{ref}\, e^{r/\beta}

    Parameters
    ----------
    ref, reward, beta, axis
        As in :func:`klpolicy.optimal_policy` (``beta = 0`` and ``inf`` allowed).

    Returns
    -------
    ndarray or float
        One value per batch row.

    Raises
    ------
    ValueError
        As in :func:`klpolicy.optimal_policy`.

    Notes
    -----
    Limits: at ``beta = inf`` it is :math:`H(\pi_{ref})`; as ``beta -> 0`` it
    tends to the entropy of the reference restricted to the best-reward set
    :math:`B` (renormalised), which is 0 when the best reward is unique. Its
    slope is :func:`entropy_slope`. With a uniform reference it is increasing
    in ``beta``; with a reference far from uniform it need not be monotone: for
    ``ref = [0.98, 0.01, 0.01]``, ``reward = [0, 1, 0]`` it is 0 at
    ``beta = 0``, rises to about 0.722 nats near ``beta = 0.22`` and falls back
    to :math:`H(\pi_{ref}) \approx 0.112` as ``beta -> inf`` (the tilt first
    spreads the mass from the reference's mode onto the rewarded outcome and
    only then collapses onto it).

    References
    ----------
    .. [1] Korbak, Perez and Buckley, 2022, arXiv:2205.11275 (distribution
       collapse without the KL term).

    Examples
    --------
    >>> from klpolicy.diversity import optimal_entropy
    >>> optimal_entropy([0.25] * 4, [1.0, 0.0, 0.0, 0.0], [[0.0], [1.0], [float("inf")]]).round(4)
    array([0.    , 1.2683, 1.3863])
    """
    ref_a, rew_a, b, _ = _setup(ref, reward, beta, axis)
    return _optimal_entropy_last(ref_a, rew_a, b).astype(ref_a.dtype)[()]


def optimal_effective_support(
    ref: ArrayLike, reward: ArrayLike, beta: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""Effective support :math:`e^{H(\pi^*_\beta)}` of the optimal policy.

    .. math::

        N_{\mathrm{eff}}(\beta) = \exp H(\pi^*_\beta)

    Parameters
    ----------
    ref, reward, beta, axis
        As in :func:`optimal_entropy`.

    Returns
    -------
    ndarray or float
        One value per batch row, from :math:`e^{H(\pi_{ref}|_B)}` (1 for a
        unique best reward) at ``beta = 0`` to :math:`e^{H(\pi_{ref})}` at
        ``beta = inf``.

    Raises
    ------
    ValueError
        As in :func:`klpolicy.optimal_policy`.

    Notes
    -----
    See :func:`optimal_entropy` for the limits and the non-monotone case.

    References
    ----------
    .. [1] Hill, 1973, Ecology 54(2) (effective numbers).

    Examples
    --------
    >>> from klpolicy.diversity import optimal_effective_support
    >>> optimal_effective_support([0.25] * 4, [1.0, 1.0, 0.0, 0.0], [[0.0], [float("inf")]])
    array([2., 4.])
    """
    ref_a, rew_a, b, _ = _setup(ref, reward, beta, axis)
    return np.exp(_optimal_entropy_last(ref_a, rew_a, b)).astype(ref_a.dtype)[()]


def entropy_slope(
    ref: ArrayLike, reward: ArrayLike, beta: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""Exact derivative :math:`dH(\pi^*_\beta)/d\beta`.

    .. math::

        \frac{dH(\pi^*_\beta)}{d\beta}
          = \frac{\mathrm{Cov}_{\pi^*_\beta}(\log\pi^*_\beta,\, r)}{\beta^2}
          = \frac{\mathrm{Cov}_{\pi^*_\beta}(\log\pi_{ref},\, r)}{\beta^2}
            + \frac{\mathrm{Var}_{\pi^*_\beta}(r)}{\beta^3}

    Parameters
    ----------
    ref, reward, beta, axis
        As in :func:`optimal_entropy`.

    Returns
    -------
    ndarray or float
        One value per batch row; 0 at ``beta = 0`` and ``beta = inf`` (the
        limits of the formula).

    Raises
    ------
    ValueError
        As in :func:`klpolicy.optimal_policy`.

    Notes
    -----
    With :math:`s = 1/\beta`, :math:`\log\pi^* = \log\pi_{ref} + s r - \log Z`
    and :math:`d\,\mathbb{E}_{\pi^*}[f]/ds = \mathrm{Cov}_{\pi^*}(f, r)`, so
    :math:`dH/ds = -\mathrm{Cov}(\log\pi^*, r)`. For a uniform reference the
    first covariance vanishes and the slope is
    :math:`\mathrm{Var}_{\pi^*}(r)/\beta^3 \ge 0`: the entropy is monotone.
    A negative covariance between :math:`\log\pi_{ref}` and the reward (the
    reward favours outcomes the reference finds unlikely) can make it
    negative: see :func:`optimal_entropy`.

    Accuracy: the slope is a covariance, computed from moments centred on the mode of
    :math:`\pi^*_\beta` to a few eps of its terms' scale
    :math:`\mathbb{E}_{\pi^*}[|x|\,(|d| + |x|)]/\beta`, with :math:`x = (r -
    \mathbb{E} r)/\beta` and :math:`d` the centred :math:`\log\pi_{ref}`; the rounding of
    :math:`\pi^*` alone moves it that much. Where the slope is far below that scale
    (a large ``beta`` on a reference whose log is uncorrelated with the reward under
    the reference: ``(1/4, 1/4, 1/2)``, ``(-1, -3, -2)``, ``beta = 1e6`` gives 3.27e-19
    from terms of 1.7e-13) its relative error grows accordingly (1.9e-9 there).

    References
    ----------
    .. [1] Jaynes, "Information Theory and Statistical Mechanics", 1957, Phys.
       Rev. 106(4) (the same identity for the Gibbs entropy).

    Examples
    --------
    >>> from klpolicy.diversity import entropy_slope
    >>> round(float(entropy_slope([0.5, 0.5], [1.0, 0.0], 1.0)), 6)  # Var / beta^3
    0.196612
    >>> round(float(entropy_slope([0.98, 0.01, 0.01], [0.0, 1.0, 0.0], 1.0)), 6)
    -0.092039
    """
    ref_a, rew_a, b, _ = _setup(ref, reward, beta, axis)
    t = _tilt(ref_a, rew_a, b)
    support = t.pi > 0
    finite = (b > 0) & np.isfinite(b)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # Cov(log ref, r) + Var(r)/beta, with log ref shifted by its largest value on the
        # support (a uniform reference gives exact zeros) and Var summed from squares >= 0
        logref = np.log(np.where(support, ref_a, 1))
        d = np.where(
            support, logref - np.max(np.where(support, logref, -np.inf), -1, keepdims=True), 0
        )
        bs = np.where(finite, b, 1)
        # (Cov(d, r) / beta + Var(r) / beta^2) / beta = E[x (dd + x)] / beta, x = (r - E r) / beta,
        # summed as sqrt(pi) x (sqrt(pi) dd + sqrt(pi) x): no beta^3 (underflows at 1e-110),
        # no x^2 overflowing where pi is tiny, no inf * 0 off the policy's support
        # moments centred on the mode k (exact zeros there), not on rounded means, whose
        # error eps |r| squared would swamp a variance of 1e-33 |r|^2:
        # E[x (dd + x)] = E[y (e + y)] - E[y] (E[e] + E[y]), y = (r - r_k)/beta, e = d - d_k
        k = np.argmax(t.pi, axis=-1)[..., None]
        y = np.where(support, (rew_a - np.take_along_axis(rew_a, k, -1)) / bs, 0)
        e = np.where(support, d - np.take_along_axis(d, k, -1), 0)
        w = np.sqrt(t.pi)
        ey = np.sum(t.pi * y, axis=-1, keepdims=True)
        ee = np.sum(t.pi * e, axis=-1, keepdims=True)
        raw = np.sum((w * y) * (w * e + w * y), axis=-1, keepdims=True)
        slope = np.where(finite, (raw - ey * (ee + ey)) / bs, 0)
    return slope[..., 0].astype(ref_a.dtype)[()]


def diversity_curve(
    ref: ArrayLike,
    reward: ArrayLike,
    *,
    beta: ArrayLike | None = None,
    kl: ArrayLike | None = None,
) -> DiversityCurve:
    r"""Entropy, effective support, KL and reward of :math:`\pi^*_\beta` along a grid.

    .. math::

        \beta \mapsto \big(\mathrm{KL}(\pi^*_\beta\|\pi_{ref}),\,
        \mathbb{E}_{\pi^*_\beta}[r],\, H(\pi^*_\beta),\, e^{H(\pi^*_\beta)}\big)

    Parameters
    ----------
    ref, reward : array_like
        One problem: 1-D probabilities and rewards of the same length.
    beta : array_like, optional
        Grid of coefficients (``>= 0``, ``inf`` allowed).
    kl : array_like, optional
        Grid of KL budgets in nats (``0 <= kl <= max_kl``) instead of ``beta``;
        each is turned into ``beta`` by :func:`klpolicy.beta_for_kl`.

    Returns
    -------
    DiversityCurve
        Named tuple ``(beta, kl, expected_reward, entropy, effective_support)``,
        each with the grid's shape.

    Raises
    ------
    ValueError
        Unless exactly one of ``beta`` and ``kl`` is given; for a ``ref`` that
        is not 1-D; as in :func:`klpolicy.optimal_policy` and
        :func:`klpolicy.beta_for_kl`.

    References
    ----------
    .. [1] Gao, Schulman and Hilton, 2022, arXiv:2210.10760.

    Examples
    --------
    >>> from klpolicy.diversity import diversity_curve
    >>> c = diversity_curve([0.25] * 4, [1.0, 0.5, 0.0, 0.0], kl=[0.0, 0.5])
    >>> c.effective_support.round(4)
    array([4.    , 2.4261])
    """
    if (beta is None) == (kl is None):
        raise ValueError("give exactly one of `beta` and `kl`")
    V.one_problem(("ref", ref), ("reward", reward))
    ref_a, rew_a = _prepare(ref, reward, -1)
    if ref_a.ndim != 1:
        raise ValueError(f"`ref` must be 1-D for a curve (one problem); got shape {np.shape(ref)}")
    if kl is not None:
        grid = np.asarray(beta_for_kl(ref_a, rew_a, kl), dtype=np.float64)
    else:
        grid = as_beta_grid("beta", beta)
    flat = grid.reshape(-1, 1)
    n = flat.shape[0]
    t = _tilt(
        np.broadcast_to(ref_a, (n, ref_a.size)), np.broadcast_to(rew_a, (n, ref_a.size)), flat
    )
    h = _policy_entropy(t.pi)
    shape = grid.shape
    return DiversityCurve(
        beta=grid.copy(),
        kl=t.kl[:, 0].reshape(shape),
        expected_reward=t.mean[:, 0].reshape(shape),
        entropy=h.reshape(shape),
        effective_support=np.exp(h).reshape(shape),
    )


def expected_distinct(
    p: ArrayLike, k: int, *, axis: int = -1
) -> NDArray[np.floating] | np.floating:
    r"""Expected number of distinct outcomes among ``k`` independent draws from ``p``.

    .. math::

        \mathbb{E}[D_k] = \sum_y \big(1 - (1 - p(y))^k\big)
                        = -\sum_y \operatorname{expm1}\big(k \operatorname{log1p}(-p(y))\big)

    Parameters
    ----------
    p : array_like
        Probabilities along ``axis`` (for sequences, the joint; see
        :func:`expected_distinct_sequences`).
    k : int
        Number of draws, ``>= 1``.
    axis : int, optional
        The probability axis (default -1).

    Returns
    -------
    ndarray or float
        One value per batch row, between 1 and ``min(k, #support)``.

    Raises
    ------
    ValueError
        For invalid ``p``; for ``k`` not an integer ``>= 1``.

    Notes
    -----
    Each term is the probability that outcome :math:`y` appears at least once.
    Written with ``log1p``/``expm1`` it keeps full relative precision for
    :math:`p(y)` down to the smallest subnormal and for ``k`` up to 1e15
    (the naive ``1 - (1 - p)**k`` returns 0 for :math:`p < 10^{-16}`).

    References
    ----------
    .. [1] Feller, "An Introduction to Probability Theory and Its Applications",
       vol. 1, 3rd ed., 1968, ch. II (occupancy problems).

    Examples
    --------
    >>> from klpolicy.diversity import expected_distinct
    >>> float(expected_distinct([0.5, 0.5], 2))  # 1 + P(two different) = 1.5
    1.5
    >>> round(float(expected_distinct([1e-20, 1.0 - 1e-20], 1000)), 12)
    1.0
    """
    pa = V.as_probabilities("p", p, axis)
    kk = V.as_positive_int("k", k)
    # an entry may exceed 1 by rounding (a normalised point mass); it is certain to appear
    p64 = np.minimum(pa.astype(np.float64, copy=False), 1.0)
    with np.errstate(divide="ignore"):
        terms = -np.expm1(kk * np.log1p(-p64))
    return terms.sum(axis=-1).astype(V.result_dtype(pa))[()]


def expected_distinct_sequences(conditionals, k: int) -> float:
    r"""Expected number of distinct sequences among ``k`` samples of a token tree.

    .. math::

        \mathbb{E}[D_k] = \sum_{y_{1:T}} 1 - \big(1 - p(y_{1:T})\big)^k,
        \qquad p(y_{1:T}) = \prod_t p(y_t \mid y_{<t})

    Parameters
    ----------
    conditionals : list of array_like
        A token tree of vocabulary ``V`` and length ``T``: ``conditionals[t]``
        has shape ``(V,)*(t+1)`` and ``conditionals[t][a_0, ..., a_{t-1}, :]``
        is :math:`p(a_t \mid a_{<t})`.
    k : int
        Number of sampled sequences, ``>= 1``.

    Returns
    -------
    float
        The exact expectation, between 1 and ``min(k, V**T)``.

    Raises
    ------
    ValueError
        For a ``conditionals`` that is not a non-empty list, a level of the
        wrong shape, an invalid conditional distribution, or a bad ``k``.

    Notes
    -----
    The joint (``V**T`` entries) is formed explicitly by
    :func:`klpolicy.sequences.joint`, so this is for trees
    small enough to enumerate. For the optimal policy on sequences, whose joint
    is :math:`\pi_{ref}(y)e^{R(y)/\beta}/Z`, pass
    ``optimal_policy(joint.ravel(), R.ravel(), beta)`` to
    :func:`expected_distinct`. Mode collapse shows as
    :math:`\mathbb{E}[D_k]/k` falling from near 1 to :math:`1/k`.

    References
    ----------
    .. [1] Kirk et al., "Understanding the Effects of RLHF on LLM
       Generalisation and Diversity", 2023, arXiv:2310.06452.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.diversity import expected_distinct_sequences
    >>> c0 = np.array([0.5, 0.5])
    >>> c1 = np.array([[1.0, 0.0], [0.5, 0.5]])
    >>> round(float(expected_distinct_sequences([c0, c1], 2)), 6)  # joint 0.5, 0, 0.25, 0.25
    1.625
    """
    p = joint(conditionals).astype(np.float64)
    return float(expected_distinct(p.reshape(-1), k))


def best_of_n_diversity(ref: ArrayLike, reward: ArrayLike, ns: ArrayLike) -> BestOfNDiversity:
    r"""Entropy of best-of-n and of :math:`\pi^*_\beta` at the same KL from the reference.

    .. math::

        k_n = \mathrm{KL}(\pi_n\|\pi_{ref}),\quad
        \mathrm{KL}(\pi^*_{\beta_n}\|\pi_{ref}) = k_n,\quad
        \big(H(\pi_n),\; H(\pi^*_{\beta_n})\big)

    Parameters
    ----------
    ref, reward : array_like
        One problem: 1-D probabilities and finite rewards of the same length.
    ns : int or array_like of int
        Sample counts, integers ``>= 1``, any shape.

    Returns
    -------
    BestOfNDiversity
        Named tuple ``(n, kl, beta, best_of_n_entropy, optimal_entropy,
        best_of_n_effective_support, optimal_effective_support)``, each of the
        shape of ``ns``; ``beta`` is ``inf`` at ``n = 1``.

    Raises
    ------
    ValueError
        For a ``ref`` that is not 1-D, and as in
        :func:`klpolicy.best_of_n.best_of_n_policy`.

    Notes
    -----
    With a uniform reference the two entropies are equal at every ``n``:
    :math:`H(\pi) = \log n - \mathrm{KL}(\pi\|u)` for every :math:`\pi`. With
    two reward levels they are equal too (at a given KL the law of the level is
    fixed and both policies are proportional to the reference within a level).
    Otherwise they differ: best-of-n is a tilt of the reference by a function of
    the reward's *rank* (:math:`\pi_n/\pi_{ref}` depends on the CDF), the optimum
    by the reward's *value*. The exact law comes from
    :func:`klpolicy.best_of_n.best_of_n_policy`, the matching ``beta`` from
    :func:`klpolicy.beta_for_kl`.

    References
    ----------
    .. [1] Beirami et al., "Theoretical guarantees on the best-of-n alignment
       policy", 2024, arXiv:2401.01879.
    .. [2] Gui, Garbacea and Veitch, "BoNBoN Alignment for Large Language Models
       and the Sweetness of Best-of-n Sampling", 2024, arXiv:2406.00832.

    Examples
    --------
    >>> from klpolicy.diversity import best_of_n_diversity
    >>> d = best_of_n_diversity([0.5, 0.3, 0.2], [0.0, 1.0, 2.0], [1, 4])
    >>> d.best_of_n_entropy.round(4), d.optimal_entropy.round(4)
    (array([1.0297, 0.8517]), array([1.0297, 0.8565]))
    """
    V.one_problem(("ref", ref), ("reward", reward))
    ref_a, rew_a = _prepare(ref, reward, -1)
    if ref_a.ndim != 1:
        raise ValueError(f"`ref` must be 1-D (one problem); got shape {np.shape(ref)}")
    nn = V.as_positive_int_array("ns", ns)
    flat = nn.reshape(-1)
    pis = np.stack([best_of_n_policy(ref_a, rew_a, int(k)) for k in flat])
    kls = np.array([float(best_of_n_kl(ref_a, rew_a, int(k))) for k in flat])
    betas = np.atleast_1d(np.asarray(beta_for_kl(ref_a, rew_a, kls), dtype=np.float64))
    h_bon = _policy_entropy(pis)
    m = flat.size
    t = _tilt(
        np.broadcast_to(ref_a, (m, ref_a.size)),
        np.broadcast_to(rew_a, (m, ref_a.size)),
        betas[:, None],
    )
    h_opt = _policy_entropy(t.pi)
    shape = nn.shape
    return BestOfNDiversity(
        n=nn.astype(np.int64),
        kl=kls.reshape(shape),
        beta=betas.reshape(shape),
        best_of_n_entropy=h_bon.reshape(shape),
        optimal_entropy=h_opt.reshape(shape),
        best_of_n_effective_support=np.exp(h_bon).reshape(shape),
        optimal_effective_support=np.exp(h_opt).reshape(shape),
    )


# --- one policy-gradient step and the entropy (Cui et al. 2025) ------------------------------


def _natural_direction(pi: NDArray, advantage: NDArray) -> NDArray:
    """Natural policy gradient of a tabular softmax: the logits move by the advantage."""
    return advantage


def _vanilla_direction(pi: NDArray, advantage: NDArray) -> NDArray:
    """Vanilla policy gradient in the logits: d E_pi[A] / dz_a = pi_a (A_a - E_pi A)."""
    return pi * (advantage - np.sum(pi * advantage, axis=-1, keepdims=True))


#: The policy-gradient steps of :func:`entropy_step`: name -> the logit direction
#: ``d(pi, advantage)`` (the logits move to ``z + eta d``).
ENTROPY_STEPS = {"natural": _natural_direction, "vanilla": _vanilla_direction}


class EntropyStep(NamedTuple):
    """One softmax policy-gradient step and its entropy change; batch shape on each field."""

    exact: NDArray
    covariance: NDArray
    entropy_before: NDArray
    entropy_after: NDArray


def entropy_step(
    logits: ArrayLike,
    advantage: ArrayLike,
    eta: float,
    *,
    step: str = "natural",
    axis: int = -1,
) -> EntropyStep:
    r"""The exact entropy change of a softmax policy under one policy-gradient step.

    .. math::

        z' = z + \eta\, d(\pi, A),\qquad
        \Delta H = H(\mathrm{softmax}\, z') - H(\mathrm{softmax}\, z)
        = -\eta\,\mathrm{Cov}_{a\sim\pi}\big(\log\pi(a),\, d_a\big) + O(\eta^2),

    with :math:`d = A` for the natural gradient (so the law is
    :math:`-\eta\,\mathrm{Cov}_\pi(\log\pi, A)`) and
    :math:`d = \pi\,(A - \mathbb{E}_\pi A)` for the vanilla gradient.

    Parameters
    ----------
    logits : array_like
        Finite logits ``z`` (probability axis ``axis``).
    advantage : array_like
        Finite advantages ``A``, broadcast against ``logits``.
    eta : float
        The step size (finite; negative steps descend).
    step : {"natural", "vanilla"}
        A row of :data:`ENTROPY_STEPS`.
    axis : int
        The action axis.

    Returns
    -------
    EntropyStep
        ``exact`` (:math:`\Delta H`, computed from both entropies), ``covariance``
        (:math:`-\eta\,\mathrm{Cov}_\pi(\log\pi, d)`), ``entropy_before`` and
        ``entropy_after``, each with the batch shape.

    Raises
    ------
    ValueError
        For non-finite ``logits``/``advantage``/``eta``, mismatched shapes, or an
        unknown ``step`` (each named).

    Notes
    -----
    With :math:`\pi = \mathrm{softmax}\, z`, :math:`dH = -\sum_a d\pi_a \log\pi_a`
    and :math:`d\pi_a = \pi_a (dz_a - \mathbb{E}_\pi dz)`, so
    :math:`dH = -\mathrm{Cov}_\pi(\log\pi, dz)`: entropy falls when actions the
    policy already favours get the larger logit increase. The law is first order in
    ``eta``; ``exact - covariance`` is :math:`O(\eta^2)`.

    References
    ----------
    .. [1] Cui et al., 2025, "The entropy mechanism of reinforcement learning for
       reasoning language models", arXiv:2505.22617.

    Examples
    --------
    >>> from klpolicy.diversity import entropy_step
    >>> out = entropy_step([1.0, 0.0, -1.0], [1.0, 0.0, -1.0], 1e-4)
    >>> bool(abs(out.exact - out.covariance) < 1e-8), bool(out.exact < 0)
    (True, True)
    """
    step = V.as_choice("step", step, tuple(ENTROPY_STEPS))
    z = V.as_rewards("logits", logits, axis)
    a = V.as_rewards("advantage", advantage, axis)
    z, a = V.broadcast_pair("logits", z, "advantage", a)
    z = np.moveaxis(np.asarray(z, np.float64), axis, -1)
    a = np.moveaxis(np.asarray(a, np.float64), axis, -1)
    eta_f = V.as_scalar("eta", eta)

    def log_softmax(x):
        m = np.max(x, axis=-1, keepdims=True)
        return x - m - np.log(np.sum(np.exp(x - m), axis=-1, keepdims=True))

    lp = log_softmax(z)
    pi = np.exp(lp)
    d = ENTROPY_STEPS[step](pi, a)
    lp2 = log_softmax(z + eta_f * d)
    h0 = -np.sum(pi * lp, axis=-1)
    h1 = -np.sum(np.exp(lp2) * lp2, axis=-1)
    mean_lp = np.sum(pi * lp, axis=-1, keepdims=True)
    cov = np.sum(pi * (lp - mean_lp) * (d - np.sum(pi * d, axis=-1, keepdims=True)), axis=-1)
    return EntropyStep((h1 - h0)[()], (-eta_f * cov)[()], h0[()], h1[()])
