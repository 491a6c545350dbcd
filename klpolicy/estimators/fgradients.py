r"""The exact gradient of a divergence from the reference, in the logits of a softmax policy.

Implementation module of :func:`klpolicy.estimators.divergence_gradient` (import it
from there). Every divergence it knows is an f-divergence
:math:`D_f(\pi\|\pi_{ref}) = \sum_y \pi_{ref}(y)\, f(\pi(y)/\pi_{ref}(y))`, so with
:math:`\pi = \mathrm{softmax}(\theta)` and :math:`t = \pi/\pi_{ref}`

.. math:: \nabla_{\theta_j} D_f = \pi_j\big(f'(t_j) - \mathbb{E}_\pi f'(t)\big).

It is what :func:`klpolicy.estimators.expected_gradient` and
:func:`klpolicy.testing.kl_term_report` compare a KL term's expected gradient with,
to name the divergence the term follows.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import as_divergence
from ..core.internal import restore as _restore
from ..core.internal import validation as V
from .gradients import _policy

__all__ = ["divergence_gradient"]


def divergence_gradient(
    logits: ArrayLike,
    ref: ArrayLike,
    divergence: str,
    *,
    alpha: float | None = None,
    axis: int = -1,
) -> NDArray[np.floating]:
    r"""Exact gradient of :math:`D_f(\pi\|\pi_{ref})` in the logits of :math:`\pi = \mathrm{softmax}(\theta)`.

    .. math::

        \nabla_{\theta_j} D_f(\pi\|\pi_{ref}) = \pi_j\big(f'(t_j) - \mathbb{E}_\pi f'(t)\big),
        \qquad t = \pi/\pi_{ref}

    ``"reverse_kl"`` :math:`\mathrm{KL}(\pi\|\pi_{ref})` (:math:`f = t\log t`),
    ``"forward_kl"`` :math:`\mathrm{KL}(\pi_{ref}\|\pi)` (:math:`f = -\log t`), ``"chi2"``
    :math:`\chi^2(\pi\|\pi_{ref}) = \sum\pi^2/\pi_{ref} - 1` (:math:`f = (t - 1)^2`),
    ``"reverse_chi2"`` :math:`\chi^2(\pi_{ref}\|\pi)` (:math:`f = (1 - t)^2/t`), and every
    other row of :data:`klpolicy.DIVERGENCES` (its :math:`f'`: one definition of each).

    Parameters
    ----------
    logits : array_like
        Policy logits :math:`\theta` along ``axis`` (``-inf`` allowed: probability zero).
    ref : array_like
        Reference probabilities.
    divergence : str
        A name of :data:`klpolicy.DIVERGENCES`.
    alpha : float, optional
        The order of the ``"alpha"`` row (required there, refused elsewhere).
    axis : int, optional
        The probability axis.

    Returns
    -------
    ndarray
        :math:`\nabla_\theta D`, the broadcast shape of ``logits`` and ``ref``; it sums to
        zero along ``axis``. Gradient *descent* on the divergence is its negative.

    Raises
    ------
    ValueError
        For an unknown ``divergence``, a missing or misplaced ``alpha``; invalid ``logits`` or
        ``ref``; where the divergence
        is infinite, so that it has no gradient: probability where ``ref`` is zero for a
        divergence with :math:`f'(\infty) = \infty` (the reverse KL, chi-squared), or
        ``-inf`` logits where ``ref`` is positive for one with :math:`f(0) = \infty`
        (the forward KL, the reverse chi-squared).

    Notes
    -----
    Support. An outcome off the reference's support (:math:`\pi_{ref} = 0 < \pi`) enters
    :math:`D_f` as :math:`\pi\, f'(\infty)`, so its derivative is :math:`f'(\infty)`
    (0 for the forward KL, 1 for the reverse chi-squared); where that is infinite the
    divergence is. An outcome with :math:`\pi = 0` has :math:`\nabla_{\theta_j} = 0` and
    contributes :math:`\lim_{\pi\to 0}\pi f'(\pi/\pi_{ref}) = 0` to the mean when
    :math:`f(0)` is finite; when it is infinite, so is the divergence. A constant added
    to :math:`f'` (as :math:`+1` in the reverse KL's) cancels in the centring.

    References
    ----------
    .. [1] I. Csiszar, "Information-type measures of difference of probability
       distributions and indirect observations", 1967, Studia Sci. Math. Hungarica 2.
    .. [2] Tang and Munos, "On a few pitfalls in KL divergence gradient estimation for
       RL", 2025, arXiv:2506.09477.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.estimators import divergence_gradient
    >>> th, ref = np.log([0.7, 0.3]), [0.5, 0.5]
    >>> divergence_gradient(th, ref, "forward_kl").round(4)  # pi - ref
    array([ 0.2, -0.2])
    >>> divergence_gradient(th, ref, "reverse_kl").round(4)
    array([ 0.1779, -0.1779])
    """
    row, alpha = as_divergence(divergence, alpha)
    name = row.name
    f_inf = float(row.fprime_inf(alpha=alpha))
    f0_finite = bool(np.isfinite(row.f_zero(alpha=alpha)))
    th = V.as_log_probs("logits", logits, allow_neg_inf=True)
    if th.ndim == 0:
        raise ValueError(f"`logits` must have at least one dimension; got a scalar {th.item()!r}")
    ax = V.normalise_axis(axis, th.ndim, "logits") - th.ndim  # negative: survives broadcasting
    ref = V.as_float_array("ref", ref)  # a ragged `ref` is named before np.ndim meets it
    q = V.as_probabilities("ref", ref, axis=ax if ref.ndim >= -ax else -1)
    th = np.moveaxis(th, ax, -1)
    th, q = V.broadcast_pair("logits", th, "ref", q)
    dead = np.all(th == -np.inf, axis=-1)
    if dead.any():
        idx = tuple(int(i) for i in np.argwhere(dead)[0]) if dead.ndim else ()
        raise ValueError(f"`logits` must have a finite entry in every row; row {idx} is all -inf")
    dtype = np.result_type(th.dtype, q.dtype, np.float32)
    th, q = th.astype(dtype), q.astype(dtype)
    q = q / q.sum(-1, keepdims=True)
    pi, logpi = _policy(th)
    off = (pi > 0) & (q == 0)
    if off.any() and not np.isfinite(f_inf):
        idx = tuple(int(i) for i in np.argwhere(off)[0])
        raise ValueError(
            f"`logits` put probability where `ref` is zero (index {idx}): {name} is "
            "infinite there and has no gradient"
        )
    lost = (pi == 0) & (q > 0)
    if lost.any() and not f0_finite:
        idx = tuple(int(i) for i in np.argwhere(lost)[0])
        raise ValueError(
            f"`logits` give probability zero where `ref` is positive (index {idx}): "
            f"{name} is infinite there and has no gradient"
        )
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t = np.exp(np.where((pi > 0) & (q > 0), logpi - np.log(np.where(q > 0, q, 1)), 0))
        fp = np.where(q > 0, np.asarray(row.fprime(t, alpha=alpha), dtype=dtype), dtype.type(f_inf))
        pf = np.where(pi > 0, pi * fp, 0)
    g = pf - pi * np.sum(pf, axis=-1, keepdims=True)
    return _restore(g.astype(dtype, copy=False), ax)
