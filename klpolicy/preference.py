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
from scipy.special import expit

from . import _validation as V
from ._preference_solvers import laplacian_solve, minimise_pair_loss
from .closed_form import _setup, _tilt, optimal_policy

__all__ = [
    "DPOFit",
    "PairGradient",
    "RewardDecomposition",
    "bradley_terry",
    "dpo_loss",
    "dpo_loss_grad",
    "dpo_optimum",
    "empirical_dpo_loss",
    "fit_dpo",
    "fit_dpo_online",
    "implicit_reward",
    "ipo_loss",
    "ipo_loss_grad",
    "ipo_optimum",
    "population_dpo_loss",
    "population_ipo_loss",
    "reward_decomposition",
    "sample_preference_counts",
]

_LOGP_NAMES = (
    "policy_chosen_logps",
    "policy_rejected_logps",
    "ref_chosen_logps",
    "ref_rejected_logps",
)


class PairGradient(NamedTuple):
    """Derivatives of a per-pair loss with respect to its four log-probability inputs."""

    policy_chosen: NDArray
    policy_rejected: NDArray
    ref_chosen: NDArray
    ref_rejected: NDArray


class RewardDecomposition(NamedTuple):
    """``reward = implicit_reward + log_partition`` on the reference's support."""

    policy: NDArray  # pi*_beta
    implicit_reward: NDArray  # beta log(pi*/ref), -inf off the support
    log_partition: NDArray  # beta log Z (the soft value), one per batch row


class DPOFit(NamedTuple):
    """Result of a gradient-descent DPO fit on a tabular policy."""

    policy: NDArray  # final policy, shape (n,)
    loss: NDArray  # loss before each step and after the last, shape (steps + 1,)
    path: NDArray  # policy before each step and after the last, shape (steps + 1, n)


# ---------------------------------------------------------------------------
# per-pair losses on log-probabilities
# ---------------------------------------------------------------------------


def _margin(pc, pr, rc, rr):
    """Validate the four log-prob arrays; return h = (pc - pr) - (rc - rr) in the common dtype."""
    arrs = [V.as_finite_array(n, a) for n, a in zip(_LOGP_NAMES, (pc, pr, rc, rr), strict=True)]
    try:
        shape = np.broadcast_shapes(*[a.shape for a in arrs])
    except ValueError:
        shapes = ", ".join(f"`{n}` {a.shape}" for n, a in zip(_LOGP_NAMES, arrs, strict=True))
        raise ValueError(f"the log-probability arrays do not broadcast: {shapes}") from None
    dtype = V.result_dtype(*arrs)
    a = [np.broadcast_to(x, shape).astype(dtype, copy=False) for x in arrs]
    return (a[0] - a[1]) - (a[2] - a[3]), dtype


def _softplus(x: NDArray) -> NDArray:
    """log(1 + e^x) without overflow: logaddexp(0, x) (underflow to 0 for x < -745 is exact)."""
    with np.errstate(under="ignore"):
        return np.logaddexp(np.zeros((), x.dtype), x)


def dpo_loss(
    policy_chosen_logps: ArrayLike,
    policy_rejected_logps: ArrayLike,
    ref_chosen_logps: ArrayLike,
    ref_rejected_logps: ArrayLike,
    beta: float,
    *,
    label_smoothing: float = 0.0,
) -> NDArray[np.floating]:
    r"""Per-pair DPO loss, with TRL's argument order and conservative-DPO label smoothing.

    .. math::

        h = \big(\log\pi(y_w) - \log\pi(y_l)\big)
          - \big(\log\pi_{ref}(y_w) - \log\pi_{ref}(y_l)\big),
        \qquad
        \ell = -(1-\varepsilon)\log\sigma(\beta h) - \varepsilon\log\sigma(-\beta h)

    Parameters
    ----------
    policy_chosen_logps, policy_rejected_logps : array_like
        Log-probabilities of the chosen (preferred) and rejected responses
        under the policy, finite; all four arrays broadcast together.
    ref_chosen_logps, ref_rejected_logps : array_like
        The same under the reference.
    beta : float
        Positive, finite DPO temperature (the KL coefficient).
    label_smoothing : float, optional
        :math:`\varepsilon \in [0, 1/2]`, the probability that a label is
        flipped (cDPO). ``0`` is the original DPO loss.

    Returns
    -------
    ndarray
        One loss per pair, the broadcast shape of the inputs (0-d for scalars);
        float32 when every input is float32.

    Raises
    ------
    ValueError
        For non-finite log-probabilities, shapes that do not broadcast,
        ``beta <= 0`` or not finite, ``label_smoothing`` outside ``[0, 0.5]``.

    Notes
    -----
    :math:`-\log\sigma(x) = \log(1 + e^{-x})` is evaluated as
    ``logaddexp(0, -x)``: no overflow and no ``log(0)`` for margins of
    thousands of nats. For :math:`x = \beta h \to +\infty` the loss is
    :math:`e^{-x}(1-\varepsilon) + \varepsilon x` (``exp(-x)`` underflows to 0
    below ``-745``); for :math:`x \to -\infty` it is
    :math:`(1-\varepsilon)|x|`, exactly linear. TRL's ``loss_type="sigmoid"``
    computes the same expression and then averages over the batch; this
    function returns the per-pair values.

    References
    ----------
    .. [1] Rafailov et al., "Direct Preference Optimization: Your Language Model is
       Secretly a Reward Model", 2023, arXiv:2305.18290, eq. (7).
    .. [2] Mitchell, "A note on DPO with noisy preferences & relationship to IPO",
       2023 (cDPO), https://ericmitchell.ai/cdpo.pdf.

    Examples
    --------
    >>> from klpolicy.preference import dpo_loss
    >>> round(float(dpo_loss(-1.0, -2.0, -1.5, -1.5, 0.5)), 6)  # -log sigmoid(0.5)
    0.474077
    >>> float(dpo_loss(0.0, -5000.0, 0.0, 0.0, 1.0)), float(dpo_loss(-5000.0, 0.0, 0.0, 0.0, 1.0))
    (0.0, 5000.0)
    """
    h, dtype = _margin(
        policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps
    )
    b = V.as_positive_scalar("beta", beta)
    eps = V.as_unit_interval("label_smoothing", label_smoothing, 0.5)
    x = (dtype.type(b) * h).astype(dtype, copy=False)
    loss = _softplus(-x)
    if eps > 0:
        loss = dtype.type(1 - eps) * loss + dtype.type(eps) * _softplus(x)
    return loss.astype(dtype, copy=False)[()]


def dpo_loss_grad(
    policy_chosen_logps: ArrayLike,
    policy_rejected_logps: ArrayLike,
    ref_chosen_logps: ArrayLike,
    ref_rejected_logps: ArrayLike,
    beta: float,
    *,
    label_smoothing: float = 0.0,
) -> PairGradient:
    r"""Exact derivatives of :func:`dpo_loss` with respect to its four inputs.

    .. math::

        \frac{\partial\ell}{\partial h} = \beta\,\big(\varepsilon - \sigma(-\beta h)\big),
        \qquad
        \frac{\partial\ell}{\partial \log\pi(y_w)} = \frac{\partial\ell}{\partial h},\;
        \frac{\partial\ell}{\partial \log\pi(y_l)} = -\frac{\partial\ell}{\partial h}

    and the reference's derivatives are the negatives of the policy's.

    Parameters
    ----------
    policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps : array_like
        As in :func:`dpo_loss`.
    beta, label_smoothing : float
        As in :func:`dpo_loss`.

    Returns
    -------
    PairGradient
        Named tuple ``(policy_chosen, policy_rejected, ref_chosen, ref_rejected)``,
        each of the broadcast shape of the inputs.

    Raises
    ------
    ValueError
        As in :func:`dpo_loss`.

    Notes
    -----
    :math:`\sigma(-\beta h)` is ``scipy.special.expit``, exact in both tails:
    the gradient of a pair the policy already separates by 5000 nats is
    0 (not NaN), and that of a pair it gets wrong by 5000 nats is
    :math:`-\beta(1-\varepsilon)`. The weight :math:`\sigma(-\beta h)` is the
    model's probability of the *wrong* label: DPO's gradient is large on
    pairs the implicit reward ranks wrongly.

    References
    ----------
    .. [1] Rafailov et al., 2023, arXiv:2305.18290, section 4 ("What does the DPO
       update do?").

    Examples
    --------
    >>> from klpolicy.preference import dpo_loss_grad
    >>> g = dpo_loss_grad(0.0, 0.0, 0.0, 0.0, 2.0)
    >>> float(g.policy_chosen), float(g.policy_rejected)  # beta * sigmoid(0) = 1
    (-1.0, 1.0)
    """
    h, dtype = _margin(
        policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps
    )
    b = V.as_positive_scalar("beta", beta)
    eps = V.as_unit_interval("label_smoothing", label_smoothing, 0.5)
    d = (b * (eps - expit(-b * h.astype(np.float64)))).astype(dtype)
    return PairGradient(d[()], (-d)[()], (-d)[()], d[()])


def ipo_loss(
    policy_chosen_logps: ArrayLike,
    policy_rejected_logps: ArrayLike,
    ref_chosen_logps: ArrayLike,
    ref_rejected_logps: ArrayLike,
    tau: float,
) -> NDArray[np.floating]:
    r"""Per-pair IPO loss, with TRL's argument order.

    .. math::

        \ell = \Big(h - \frac{1}{2\tau}\Big)^2, \qquad
        h = \big(\log\pi(y_w) - \log\pi(y_l)\big)
          - \big(\log\pi_{ref}(y_w) - \log\pi_{ref}(y_l)\big)

    Parameters
    ----------
    policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps : array_like
        As in :func:`dpo_loss`.
    tau : float
        Positive, finite regularisation coefficient :math:`\tau` of the IPO
        paper (TRL passes it as ``beta`` with ``loss_type="ipo"``).

    Returns
    -------
    ndarray
        One loss per pair, the broadcast shape of the inputs.

    Raises
    ------
    ValueError
        As in :func:`dpo_loss`, with ``tau`` in place of ``beta``.

    Notes
    -----
    This is eq. (17) of Azar et al. and TRL's ``(logits - 1/(2*beta))**2``:
    the squared loss regresses the log-ratio margin onto the target
    :math:`1/(2\tau)`, which is the symmetrised form of regressing it onto
    :math:`I/\tau` with the label :math:`I \in \{0, 1\}` (section 5.2 of the
    paper). Unlike DPO the loss is minimised at a finite margin, also when
    the preferences are deterministic. TRL (in its ``concatenated_forward``)
    divides the summed token log-probabilities by the completion length
    before this loss for IPO; pass such averaged log-probabilities to
    reproduce TRL's numbers.

    References
    ----------
    .. [1] Azar et al., "A General Theoretical Paradigm to Understand Learning from
       Human Preferences", 2023, arXiv:2310.12036, eq. (17).

    Examples
    --------
    >>> from klpolicy.preference import ipo_loss
    >>> float(ipo_loss(-1.0, -2.0, -1.0, -1.0, 0.25))  # (1 - 2)^2
    1.0
    """
    h, dtype = _margin(
        policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps
    )
    t = V.as_positive_scalar("tau", tau)
    return ((h - dtype.type(1 / (2 * t))) ** 2).astype(dtype, copy=False)[()]


def ipo_loss_grad(
    policy_chosen_logps: ArrayLike,
    policy_rejected_logps: ArrayLike,
    ref_chosen_logps: ArrayLike,
    ref_rejected_logps: ArrayLike,
    tau: float,
) -> PairGradient:
    r"""Exact derivatives of :func:`ipo_loss` with respect to its four inputs.

    .. math::

        \frac{\partial\ell}{\partial h} = 2\Big(h - \frac{1}{2\tau}\Big)

    with the same signs per input as in :func:`dpo_loss_grad`.

    Parameters
    ----------
    policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, tau
        As in :func:`ipo_loss`.

    Returns
    -------
    PairGradient
        Each field of the broadcast shape of the inputs.

    Raises
    ------
    ValueError
        As in :func:`ipo_loss`.

    References
    ----------
    .. [1] Azar et al., 2023, arXiv:2310.12036.

    Examples
    --------
    >>> from klpolicy.preference import ipo_loss_grad
    >>> float(ipo_loss_grad(0.0, 0.0, 0.0, 0.0, 0.5).policy_chosen)  # 2 * (0 - 1)
    -2.0
    """
    h, dtype = _margin(
        policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps
    )
    t = V.as_positive_scalar("tau", tau)
    d = (2 * (h - dtype.type(1 / (2 * t)))).astype(dtype, copy=False)
    return PairGradient(d[()], (-d)[()], (-d)[()], d[()])


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
    return expit(r[..., :, None] - r[..., None, :]).astype(r.dtype, copy=False)


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


def _ref_1d(ref: ArrayLike) -> NDArray[np.float64]:
    r = V.as_probabilities("ref", ref).astype(np.float64, copy=False)
    if r.ndim != 1:
        raise ValueError(f"`ref` must be one distribution (1-D) here; got shape {r.shape}")
    return r


def _win_weights(ref, preferences, mu, label_smoothing=0.0):
    """W[i, j]: probability of observing (winner i, loser j), with smoothed labels."""
    p = V.as_preference_matrix("preferences", preferences, ref.shape[-1])
    joint = V.as_pair_law(mu, ref)
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
    eps = V.as_unit_interval("label_smoothing", label_smoothing, 0.5)
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
    eps = V.as_unit_interval("label_smoothing", label_smoothing, 0.5)
    c = V.as_pair_counts("counts", counts, ref_a)
    w = c / c.sum()
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
        cDPO's :math:`\varepsilon \in [0, 1/2]`: the labels are flipped with
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
    :math:`g`; it is solved there by Newton's method with a line search (exact
    gradient and weighted-Laplacian Hessian), started from the weighted
    least-squares fit of :math:`\beta(g_i - g_j)` to
    :math:`\mathrm{logit}\,P_{ij}` (exact for Bradley-Terry preferences), to a
    step below ``1e-13``.

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
    eps = V.as_unit_interval("label_smoothing", label_smoothing, 0.5)
    w = _win_weights(ref_a, preferences, mu, eps)
    return _normalise(ref_a, minimise_pair_loss(w, ref_a > 0, b, kind="dpo"))


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
    p = V.as_preference_matrix("preferences", preferences, ref_a.shape[-1])
    if mu is None or np.ndim(mu) == 1:
        m = ref_a if mu is None else V.as_probabilities("mu", mu).astype(np.float64)
        if m.shape != ref_a.shape:
            raise ValueError(
                "`mu` must have the same size as `ref` along the probability axis; "
                f"got {m.shape[-1]} and {ref_a.shape[-1]}"
            )
        return optimal_policy(ref_a, p @ m, t)
    joint = V.as_pair_law(mu, ref_a)
    sym = joint + joint.T
    g = laplacian_solve(sym, np.sum(sym * (p - 0.5), axis=1) / t, ref_a > 0)
    return _normalise(ref_a, g)


def _normalise(ref: NDArray, g: NDArray) -> NDArray[np.float64]:
    """pi = ref e^g / sum(ref e^g), with g = -inf allowed (zero mass) and 0 off the support."""
    support = ref > 0
    gmax = np.max(np.where(support, g, -np.inf))
    with np.errstate(invalid="ignore"):
        w = np.where(support, ref * np.exp(np.where(support, g - gmax, 0.0)), 0.0)
    return w / w.sum()


# ---------------------------------------------------------------------------
# finite data
# ---------------------------------------------------------------------------


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
    n = m.shape[0]
    ref_like = np.ones(n) / n
    w = _win_weights(ref_like, preferences, m)
    gen = np.random.default_rng(rng)
    return gen.multinomial(n_draws, (w / w.sum()).ravel()).reshape(n, n).astype(np.int64)


def _dpo_grad_g(g, w, beta):
    """Gradient of sum_ij w_ij softplus(-beta (g_i - g_j)) with respect to g."""
    h = g[:, None] - g[None, :]
    c = np.where(w > 0, -beta * w * expit(-beta * h), 0.0)
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
            theta = theta - lr * np.where(support, _dpo_grad_g(g, w, beta), 0.0)
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
        Number of full-batch gradient steps.
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
    eps = V.as_unit_interval("label_smoothing", label_smoothing, 0.5)
    c = V.as_pair_counts("counts", counts, ref_a)
    n_steps = int(steps)
    if n_steps < 0:
        raise ValueError(f"`steps` must be a non-negative integer; got {steps!r}")
    eta = V.as_positive_scalar("lr", lr)
    start = ref_a if init is None else _init_policy(init, ref_a)
    w = c / c.sum()
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
    p = V.as_preference_matrix("preferences", preferences, ref_a.shape[-1])
    n_rounds = V.as_positive_int("rounds", rounds)
    n_pairs = V.as_positive_int("pairs_per_round", pairs_per_round)
    n_steps = V.as_positive_int("steps_per_round", steps_per_round)
    eta = V.as_positive_scalar("lr", lr)
    gen = np.random.default_rng(rng)
    w_pop = _win_weights(ref_a, p, None)
    pi = ref_a.copy()
    path, losses = [pi], []
    for _ in range(n_rounds):
        losses.append(_dpo_value(_log_ratio(pi, ref_a, w_pop), w_pop, b))
        c = sample_preference_counts(p, pi, n_pairs, rng=gen).astype(np.float64)
        pi = _gd(ref_a, c / c.sum(), b, pi, n_steps, eta).policy
        path.append(pi)
    losses.append(_dpo_value(_log_ratio(pi, ref_a, w_pop), w_pop, b))
    return DPOFit(pi, np.array(losses), np.array(path))
