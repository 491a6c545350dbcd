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

from .. import core as _core
from ..core.internal import restore as _restore
from ..core.internal import special
from ..core.internal import validation as V
from .gradients import _policy

__all__ = ["divergence_gradient", "divergence_names", "divergence_value"]

# f' of the four divergences the KL-terms issue names, and f'(inf) = lim f(t)/t and whether
# f(0) is finite (what happens off either support). ONE small table, used only for names
# that klpolicy.DIVERGENCES (the f-divergence registry) does not have: where that registry
# exists its rows' f' are used, so each divergence keeps one definition.
# Each entry: (f, f', f'(inf), f(0) finite).
_FALLBACK = {
    # KL(pi || ref): f = t log t
    "reverse_kl": (lambda t: special.xlogy(t, t), lambda t: np.log(t) + 1.0, np.inf, True),
    # KL(ref || pi): f = -log t
    "forward_kl": (lambda t: -np.log(t), lambda t: -1.0 / t, 0.0, False),
    # chi^2(pi || ref) = sum pi^2/ref - 1: f = (t - 1)^2
    "chi2": (lambda t: (t - 1.0) ** 2, lambda t: 2.0 * (t - 1.0), np.inf, True),
    # chi^2(ref || pi) = sum ref^2/pi - 1: f = (1 - t)^2 / t
    "reverse_chi2": (lambda t: (1.0 - t) ** 2 / t, lambda t: 1.0 - 1.0 / (t * t), 1.0, False),
}


def _registry():
    return getattr(_core, "DIVERGENCES", None) or {}


def divergence_names() -> tuple[str, ...]:
    """The divergences :func:`divergence_gradient` knows, the registry's rows first.

    Examples
    --------
    >>> from klpolicy.estimators import divergence_names
    >>> {"reverse_kl", "forward_kl", "chi2", "reverse_chi2"} <= set(divergence_names())
    True
    """
    names = list(_registry())
    return tuple(names + [n for n in _FALLBACK if n not in names])


def _generator(name: str, alpha):
    """(f, f', f'(inf), f(0) finite) of ``name``: the registry's row, else the fallback table."""
    rows = _registry()
    if name in rows:
        row = rows[name]
        inf = float(row.fprime_inf(alpha=alpha))
        f0 = float(row.f_zero(alpha=alpha))
        return (
            (lambda t: row.f(t, alpha=alpha)),
            (lambda t: row.fprime(t, alpha=alpha)),
            inf,
            np.isfinite(f0),
        )
    return _FALLBACK[name]


def divergence_value(
    p: ArrayLike, ref: ArrayLike, divergence: str, *, alpha: float | None = None, axis: int = -1
) -> NDArray[np.floating]:
    r"""The divergence :math:`D_f(p\|\pi_{ref}) = \sum_y \pi_{ref}(y) f(p(y)/\pi_{ref}(y))`.

    The value whose gradient :func:`divergence_gradient` gives, with the same generators
    (the f-divergence registry's rows where installed; until then, the four of the
    KL-terms issue). Off the reference's support an outcome adds :math:`p\,f'(\infty)`.

    Parameters
    ----------
    p, ref : array_like
        Probabilities along ``axis``.
    divergence : str
        A name of :func:`divergence_names`.
    alpha : float, optional
        The order of the ``"alpha"`` row.
    axis : int, optional
        The probability axis.

    Returns
    -------
    ndarray
        One value per row (``inf`` where the divergence is infinite).

    Raises
    ------
    ValueError
        For an unknown ``divergence`` or invalid ``p`` or ``ref``.

    Examples
    --------
    >>> from klpolicy.estimators import divergence_value
    >>> float(divergence_value([0.7, 0.3], [0.5, 0.5], "chi2").round(4))  # 2 (0.49 + 0.09) - 1
    0.16
    """
    name = V.as_choice("divergence", divergence, divergence_names())
    f, _, f_inf, _ = _generator(name, alpha)
    pa = V.as_probabilities("p", p, axis)
    q = V.as_probabilities("ref", ref, axis)
    pa, q = V.broadcast_pair("p", pa, "ref", q)
    dtype = np.result_type(pa.dtype, q.dtype, np.float32)
    pa, q = pa.astype(dtype), q.astype(dtype)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t = np.where(q > 0, pa / np.where(q > 0, q, 1), 1.0)
        terms = np.where(q > 0, q * np.asarray(f(t), dtype=dtype), 0)
        off = np.where((q == 0) & (pa > 0), pa * dtype.type(f_inf), 0)
    return (terms.sum(-1) + off.sum(-1))[()]


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
    row of the f-divergence registry where it is installed.

    Parameters
    ----------
    logits : array_like
        Policy logits :math:`\theta` along ``axis`` (``-inf`` allowed: probability zero).
    ref : array_like
        Reference probabilities.
    divergence : str
        A name of :func:`divergence_names`.
    alpha : float, optional
        The order of the ``"alpha"`` row (ignored by the others).
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
        For an unknown ``divergence``; invalid ``logits`` or ``ref``; where the divergence
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
    name = V.as_choice("divergence", divergence, divergence_names())
    _, fprime, f_inf, f0_finite = _generator(name, alpha)
    th = V.as_log_probs("logits", logits, allow_neg_inf=True)
    if th.ndim == 0:
        raise ValueError(f"`logits` must have at least one dimension; got a scalar {th.item()!r}")
    ax = V.normalise_axis(axis, th.ndim, "logits") - th.ndim  # negative: survives broadcasting
    q = V.as_probabilities("ref", ref, axis=ax if np.ndim(ref) >= -ax else -1)
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
        fp = np.where(q > 0, np.asarray(fprime(t), dtype=dtype), dtype.type(f_inf))
        pf = np.where(pi > 0, pi * fp, 0)
    g = pf - pi * np.sum(pf, axis=-1, keepdims=True)
    return _restore(g.astype(dtype, copy=False), ax)
