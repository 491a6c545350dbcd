"""Per-pair preference losses on log-probabilities (TRL's argument order) and their gradients.

Public names are re-exported by :mod:`klpolicy.preference`.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import special
from ..core.internal import validation as V

__all__ = ["PairGradient", "dpo_loss", "dpo_loss_grad", "ipo_loss", "ipo_loss_grad"]

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


def _log_prob_inputs(pc, pr, rc, rr, compute_dtype=None):
    """Validate the four log-prob arrays of a pair loss and broadcast them.

    Returns the arrays in ``compute_dtype`` (the common dtype by default) and the common
    dtype, which the result is returned in.
    """
    arrs = [V.as_finite_array(n, a) for n, a in zip(_LOGP_NAMES, (pc, pr, rc, rr), strict=True)]
    try:
        shape = np.broadcast_shapes(*[a.shape for a in arrs])
    except ValueError:
        shapes = ", ".join(f"`{n}` {a.shape}" for n, a in zip(_LOGP_NAMES, arrs, strict=True))
        raise ValueError(f"the log-probability arrays do not broadcast: {shapes}") from None
    dtype = V.result_dtype(*arrs)
    work = dtype if compute_dtype is None else compute_dtype
    return [np.broadcast_to(x, shape).astype(work, copy=False) for x in arrs], dtype


def _margin(pc, pr, rc, rr):
    """Validate the four log-prob arrays; return h = (pc - pr) - (rc - rr) in the common dtype."""
    a, dtype = _log_prob_inputs(pc, pr, rc, rr)
    with np.errstate(over="ignore"):  # |h| beyond the largest float is +-inf, exactly so
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
    eps = V.as_closed_interval("label_smoothing", label_smoothing, 0.5)
    with np.errstate(over="ignore"):  # beta h past the largest float is +-inf, exactly so
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
    eps = V.as_closed_interval("label_smoothing", label_smoothing, 0.5)
    with np.errstate(over="ignore"):  # beta h past the largest float: expit's limit
        d = (b * (eps - special.expit(-b * h.astype(np.float64)))).astype(dtype)
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
    with np.errstate(over="ignore"):  # a loss beyond the largest float is inf, not a warning
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
    with np.errstate(over="ignore"):  # a gradient beyond the largest float is +-inf
        d = (2 * (h - dtype.type(1 / (2 * t)))).astype(dtype, copy=False)
    return PairGradient(d[()], (-d)[()], (-d)[()], d[()])
