"""The steps of :mod:`klpolicy.trust_region`: the closed-form trust-region steps and PPO's clipped
step (the part's docstring has the maths)."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core import beta_for_kl, optimal_policy
from ..core.internal import expm1mx, special
from ..core.internal import prepare as _prepare
from ..core.internal import tilt as _tilt
from ..core.internal import validation as V

__all__ = ["ppo_clip_step", "trust_region_beta", "trust_region_step"]


#: The two trust regions: ``"mirror"`` bounds KL(pi || pi_old), ``"trpo"`` bounds KL(pi_old || pi).
_CONSTRAINTS = ("mirror", "trpo")


def _as_delta(delta: ArrayLike) -> NDArray[np.float64]:
    return V.as_kl_budget("delta", delta)


def _trpo_kl(p: NDArray, xh: NDArray, s: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    """KL(p || pi_t) for pi_t = p / (t + xh) / norm, t = exp(s); also log(pi_t / p) and log norm.

    Everything is in log space, so log t may lie far below the smallest float
    (a budget of hundreds of nats on an outcome of mass 1e-215 needs t ~ 1e-350):
    log(t / (t + xh)) = -softplus(log xh - s), log M = logsumexp(log p + that),
    and the ratio pi_t / p is rho = exp(log(t / (t + xh)) - log M). Near one it is
    also 1 + (m - v) / M with v = xh / (t + xh) and m = E_p[v] = 1 - M, which gives
    log(rho) without cancellation; the KL's summands p (rho - 1 - log rho)
    (non-negative, as the ratios average to one) are ``p * expm1mx(log rho)``, or
    ``exp(log p + log rho) - p (1 + log rho)`` where rho is large.
    """
    s_ = s[..., None]
    with np.errstate(divide="ignore"):
        lx = np.log(xh)
        logp = np.where(p > 0, np.log(p), -np.inf)
    lu = -np.logaddexp(0.0, lx - s_)  # log(t / (t + xh))
    v = np.exp(-np.logaddexp(0.0, s_ - lx))  # xh / (t + xh)
    m = np.sum(p * v, -1, keepdims=True)
    e = logp + lu
    top = np.max(e, -1, keepdims=True)
    log_m = top + np.log(np.sum(np.exp(e - top), -1, keepdims=True))
    big_m = np.exp(log_m)
    log_rho = lu - log_m
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        dev = (m - v) / big_m
        near = (big_m > 0.25) & (np.abs(dev) < 0.5)
        w = np.where(near, np.log1p(np.where(near, dev, 0.0)), log_rho)
    big = w > 1.0
    terms = np.where(
        big,
        np.exp(np.where(big, logp + w, 0.0)) - p * (1.0 + w),
        p * expm1mx(np.where(big, 0.0, w)),
    )
    kl = np.sum(np.where(p > 0, terms, 0.0), -1)
    return kl, w, log_m[..., 0]


def _trpo_solve(p: NDArray, a: NDArray, d: NDArray) -> tuple[NDArray, NDArray]:
    """TRPO's exact tabular step: (policy, beta), rows along the last axis, float64.

    pi = beta p / (lambda - A) on p's support; with x = max A - A (>= 0) scaled
    by its largest value on the support, lambda - A = xmax (t + xh) and
    KL(p || pi_t) falls strictly from +inf (t -> 0) to 0 (t -> inf), so t is
    found by bisection on log t (unbounded below) to the last bit.
    """
    shape = np.broadcast_shapes(p.shape[:-1], d.shape)
    p = np.broadcast_to(p, (*shape, p.shape[-1])).reshape(-1, p.shape[-1]).astype(np.float64)
    a = np.broadcast_to(a, (*shape, a.shape[-1])).reshape(-1, a.shape[-1]).astype(np.float64)
    dd = np.broadcast_to(d, shape).reshape(-1)
    p = p / p.sum(-1, keepdims=True)
    support = p > 0
    c = np.max(np.where(support, a, -np.inf), -1, keepdims=True)
    x = np.where(support, c - a, 0.0)
    xmax = np.max(x, -1)
    moves = (xmax > 0) & (dd > 0)  # otherwise the step is p itself (beta = inf)
    xh = x / np.where(xmax > 0, xmax, 1.0)[:, None]
    pm, xm, dm = p[moves], xh[moves], dd[moves]
    lo = np.full(dm.shape, -1.0)
    hi = np.full(dm.shape, 1.0)
    for _ in range(1100):  # widen the bracket: KL(lo) > delta >= KL(hi); log t is unbounded
        k_lo = _trpo_kl(pm, xm, lo)[0]
        k_hi = _trpo_kl(pm, xm, hi)[0]
        if np.all(k_lo > dm) and np.all(k_hi <= dm):
            break
        lo = np.where(k_lo > dm, lo, np.maximum(2.0 * lo, -np.finfo(np.float64).max))
        hi = np.where(k_hi <= dm, hi, np.minimum(2.0 * hi, np.finfo(np.float64).max))
    for _ in range(2200):  # bisection on log t to adjacent floats
        mid = 0.5 * lo + 0.5 * hi
        if np.all((mid == lo) | (mid == hi)):
            break
        above = _trpo_kl(pm, xm, mid)[0] > dm
        lo, hi = np.where(above, mid, lo), np.where(above, hi, mid)
    s = 0.5 * lo + 0.5 * hi
    _, log_rho, log_m = _trpo_kl(pm, xm, s)
    out = p.copy()
    with np.errstate(divide="ignore"):
        # p * rho rounds once (exp(log p + log rho) loses a subnormal p's last digits)
        fits = log_rho < 700.0
        ratio = np.exp(np.where(fits, log_rho, 0.0))
        out[moves] = np.where(pm > 0, np.where(fits, pm * ratio, np.exp(np.log(pm) + log_rho)), 0.0)
    beta = np.full(dd.shape, np.inf)
    with np.errstate(over="ignore"):
        beta[moves] = xmax[moves] * np.exp(s - log_m)
    return out.reshape(*shape, p.shape[-1]), beta.reshape(shape)


def _trpo_largest_radius(p: NDArray, a: NDArray, floor: float) -> float:
    """The KL at the smallest log t whose entries with log pi < ``floor`` <= log p carry at
    most 4 ulp of the KL (bisection on log t; one row, p normalised)."""
    sup = p > 0
    x = np.where(sup, np.max(a[sup]) - a, 0.0)
    xh = (x / x.max())[None]
    with np.errstate(divide="ignore"):
        logp = np.where(sup, np.log(p), -np.inf)

    def share(s):
        """(KL at log t = s, the part of it carried by entries below the floor)."""
        kl, w, _ = _trpo_kl(p[None], xh, np.array([s]))
        gone = sup & (logp >= floor) & (logp + w[0] < floor)
        return float(kl[0]), float(np.sum(np.where(gone, -p * w[0], 0.0)))

    def fine(s):
        kl, part = share(s)
        return part <= 4 * np.finfo(np.float64).eps * kl

    lo, hi = -1.0, 1.0
    while fine(lo) and lo > -1e300:
        lo *= 2.0
    while not fine(hi) and hi < 1e300:
        hi *= 2.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if fine(mid) else (mid, hi)
    return share(hi)[0]


def _trpo_refuse_unreachable(p: NDArray, a: NDArray, d: NDArray, step: NDArray) -> None:
    """ValueError when the TRPO step for ``delta`` needs probabilities below the smallest
    normal float of ``step.dtype`` that carry a share of its KL (rounded, they lose their
    digits or become 0, and the returned policy spends another KL, up to inf).

    KL(pi_old || pi_t) grows without bound as t -> 0, so every radius has an exact step;
    but its smallest probabilities fall like exp(-delta / mass), below the floats from a
    few hundred nats. The largest radius of a ``step.dtype`` step is the KL at the smallest
    t whose entries below the smallest normal float carry at most 4 ulp of the KL
    (entries of pi_old that are themselves that small carry nothing and do not count).
    """
    shape = step.shape
    tiny = np.finfo(step.dtype).tiny
    pb = np.broadcast_to(p, shape).reshape(-1, shape[-1]).astype(np.float64)
    ab = np.broadcast_to(a, shape).reshape(-1, shape[-1]).astype(np.float64)
    st = step.reshape(-1, shape[-1])
    dd = np.broadcast_to(d, shape[:-1]).reshape(-1)
    floor = float(np.log(np.float64(tiny)))
    for k in np.flatnonzero(np.any((pb >= tiny) & (st < tiny), -1)):
        largest = _trpo_largest_radius(pb[k] / pb[k].sum(), ab[k], floor)
        if dd[k] <= largest:
            continue
        digits = 10.0 ** (np.floor(np.log10(largest)) - 5)
        raise ValueError(
            f"`delta` = {float(dd[k])!r} cannot be spent by a TRPO step in {step.dtype} "
            f"(row {k}): its smallest probabilities would fall below the smallest normal "
            f"{step.dtype} (KL(pi_old || pi) grows without bound only as pi empties an "
            f"outcome); the largest radius a {step.dtype} step spends here is "
            f"{np.floor(largest / digits) * digits:.6g} nats"
        )


def trust_region_beta(
    pi_old: ArrayLike,
    advantage: ArrayLike,
    delta: ArrayLike,
    *,
    constraint: str = "mirror",
    axis: int = -1,
) -> NDArray[np.floating] | np.floating:
    r"""The multiplier of the trust-region step: :math:`\beta` whose step spends :math:`\delta`.

    .. math:: \beta(\delta) = \texttt{beta\_for\_kl}(\pi_{old}, A, \min(\delta, \mathrm{KL}_{max}))
              \quad (\text{``mirror''})

    Parameters
    ----------
    pi_old : array_like
        The current policy (probabilities along ``axis``).
    advantage : array_like
        Advantages (any finite values; constants along ``axis`` do not matter).
    delta : float or array_like
        KL radius in nats, ``>= 0``, broadcasting over the batch shape.
    constraint : {"mirror", "trpo"}, optional
        Which KL the radius bounds: ``"mirror"`` (default) bounds
        :math:`\mathrm{KL}(\pi\|\pi_{old})`, ``"trpo"`` bounds
        :math:`\mathrm{KL}(\pi_{old}\|\pi)`; see :func:`trust_region_step`.
    axis : int, optional
        The probability axis.

    Returns
    -------
    ndarray or float
        ``beta`` per batch row; ``inf`` when ``delta = 0``. For ``"mirror"``,
        ``0`` (greedy) when ``delta`` exceeds the largest KL a step can spend;
        for ``"trpo"`` the KL is unbounded and ``beta > 0`` for every radius the
        floats can hold (see Raises).

    Raises
    ------
    ValueError
        As in :func:`klpolicy.beta_for_kl`, for a negative or non-finite
        ``delta``, or an unknown ``constraint``. For ``"trpo"``, a ``delta`` whose step
        needs probabilities below the smallest normal float of the input's dtype (its
        smallest entries fall like :math:`e^{-\delta/m}`; from about 350 nats on
        ``[0.5, 0.3, 0.2]`` in float64, 42 in float32): the message names ``delta`` and
        gives the largest radius a step of that dtype can spend. Returning the rounded
        step instead would leave :math:`\pi_{old}`'s support (KL inf, not ``delta``).

    Examples
    --------
    >>> from klpolicy.trust_region import trust_region_beta
    >>> round(float(trust_region_beta([0.5, 0.5], [1.0, 0.0], 0.3499)), 3)
    0.5
    >>> round(float(trust_region_beta([0.5, 0.5], [1.0, 0.0], 0.3499, constraint="trpo")), 3)
    0.35
    """
    kind = V.as_choice("constraint", constraint, _CONSTRAINTS)
    p, a, unit = _problem(pi_old, advantage, axis)
    d = _as_delta(delta)
    if kind == "trpo":
        step, scaled = _trpo_solve(p, a, d)
        _trpo_refuse_unreachable(p, a, d, step.astype(p.dtype))
    else:
        scaled = _mirror_beta(p, a, d)
    scaled = np.asarray(scaled)
    with np.errstate(over="ignore"):
        beta = (scaled * np.broadcast_to(unit[..., 0], scaled.shape)).astype(p.dtype)
    over = np.isinf(beta) & np.isfinite(scaled)
    if over.any():
        k = int(np.argmax(over.reshape(-1)))
        raise ValueError(
            f"`delta` = {float(np.broadcast_to(d, over.shape).reshape(-1)[k])!r} is spent only "
            f"at a beta above the largest {p.dtype} for row {k}; scale `advantage` down"
        )
    return beta if beta.ndim else beta[()]


def _problem(pi_old, advantage, axis):
    """(pi_old, advantage / unit, unit): probability axis last; a row whose advantage is
    extreme in scale is measured in a power of two at most its largest magnitude. Both steps
    are invariant under A -> A / c (beta -> beta / c), so an advantage of 1e308 cannot
    overflow a difference of advantages."""
    p, a = _prepare(pi_old, advantage, axis, ("pi_old", "advantage"))
    a = np.broadcast_to(a, p.shape)
    big = np.max(np.abs(a), axis=-1, keepdims=True)
    # a power of two, so that a / unit is exact; 1 unless the advantage's scale is extreme
    # (near the float range's ends, where A_i - A_j could overflow or underflow; elsewhere
    # the step is bit for bit what beta_for_kl gives, to the accuracy its tests hold)
    unit = np.ldexp(1.0, np.frexp(np.where(big > 0, big, 1.0))[1] - 1)
    fi = np.finfo(a.dtype)  # the ends of the row's own float range (float32: 2**124, 2**-125)
    b64 = big.astype(np.float64)
    extreme = (b64 > 2.0 ** (fi.maxexp - 4)) | ((b64 > 0) & (b64 < 2.0 ** (fi.minexp + 1)))
    unit = np.where(extreme, unit, 1.0)
    unit = unit.astype(a.dtype)
    return p, a / unit, unit


def _mirror_beta(p, a, d):
    """The mirror step's multiplier for validated p and (scaled) a, probability axis last."""
    kmax = _tilt(p, a, np.zeros((*p.shape[:-1], 1), p.dtype)).kl[..., 0]
    beta = beta_for_kl(p, a, np.minimum(d, kmax))
    # a radius past the greedy step's KL is the greedy step (beta 0), at every dtype: in
    # float32 the tilt's KL reaches kmax to rounding at a beta well above 0
    return np.where(d > kmax, np.zeros_like(beta), beta)[()]


def trust_region_step(
    pi_old: ArrayLike,
    advantage: ArrayLike,
    delta: ArrayLike,
    *,
    constraint: str = "mirror",
    axis: int = -1,
) -> NDArray[np.floating]:
    r"""The exact trust-region step on a tabular policy, for either direction of the KL.

    .. math::

        \text{mirror:}\ \arg\max_{\mathrm{KL}(\pi\|\pi_{old})\le\delta} \mathbb{E}_\pi[A]
        = \frac{\pi_{old}\, e^{A/\beta_\delta}}{Z}, \qquad
        \text{trpo:}\ \arg\max_{\mathrm{KL}(\pi_{old}\|\pi)\le\delta} \mathbb{E}_\pi[A]
        = \frac{\beta_\delta\,\pi_{old}}{\lambda - A}

    Parameters
    ----------
    pi_old, advantage, delta, axis
        As in :func:`trust_region_beta`.
    constraint : {"mirror", "trpo"}, optional
        ``"mirror"`` (the default, and this function's meaning before the
        option existed) bounds :math:`\mathrm{KL}(\pi\|\pi_{old})`: the step is
        the exponential tilt, mirror descent's step. ``"trpo"`` bounds
        :math:`\mathrm{KL}(\pi_{old}\|\pi)`, the constraint of TRPO
        (Schulman et al. 2015, eq. 12).

    Returns
    -------
    ndarray
        The new policy, same shape as ``pi_old``; its KL to ``pi_old`` (in the
        constrained direction) is ``delta``, or for ``"mirror"`` the greedy
        policy's KL :math:`-\log \pi_{old}(\arg\max A)` when that is smaller (the
        supremum of the mirror KL; the TRPO KL has none).

    Raises
    ------
    ValueError
        As in :func:`trust_region_beta`; for ``"trpo"``, a ``delta`` beyond what a step
        in the input's dtype can spend (the message gives the largest radius it can).

    Notes
    -----
    The objective is linear and both constraint sets are convex, so the KKT
    conditions decide. With multiplier :math:`\beta`:

    * mirror: :math:`A - \beta(\log(\pi/\pi_{old}) + 1) - \lambda = 0` gives the
      tilt, the KL-regularised optimum with :math:`\pi_{old}` as reference; the
      constraint is active unless the greedy step fits inside it.
    * trpo: :math:`A + \beta\,\pi_{old}/\pi - \lambda = 0` gives
      :math:`\pi = \beta\pi_{old}/(\lambda - A)` with :math:`\lambda > \max A`.
      As :math:`\mathrm{KL}(\pi_{old}\|\pi)` is unbounded (the step may not
      empty any outcome of :math:`\pi_{old}`), the constraint is always active.
      This is the stationary point of k3 in the loss
      (:func:`klpolicy.estimators.fixed_point`), whose expected gradient is
      that of :math:`\mathrm{KL}(\pi_{ref}\|\pi)`.

    The two steps agree to second order in :math:`\delta` (both KLs are
    :math:`\tfrac12\chi^2` near :math:`\pi_{old}`) and differ beyond. Iterating
    the mirror step with :math:`A = r - \beta_0\log(\pi_{old}/\pi_{ref})` is
    mirror descent on :math:`\mathbb{E}_\pi[r] - \beta_0\mathrm{KL}(\pi\|\pi_{ref})`;
    it reaches :math:`\pi^*_{\beta_0}` in one step once the step's multiplier is
    capped at :math:`\beta_0` (``method="trust_region"`` in
    :func:`klpolicy.torch.fit_policy`).

    References
    ----------
    .. [1] Schulman et al., "Trust Region Policy Optimization", 2015, arXiv:1502.05477.
    .. [2] Beck and Teboulle, "Mirror descent and nonlinear projected subgradient
       methods for convex optimization", 2003, Oper. Res. Lett. 31(3).
    .. [3] Tomar et al., "Mirror Descent Policy Optimization", 2020, arXiv:2005.09814.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy import kl_divergence
    >>> from klpolicy.trust_region import trust_region_step
    >>> new = trust_region_step([0.5, 0.5], [1.0, 0.0], 0.01)
    >>> new.round(4), round(float(kl_divergence(new, [0.5, 0.5])), 10)
    (array([0.5706, 0.4294]), 0.01)
    >>> trpo = trust_region_step([0.5, 0.5], [1.0, 0.0], 0.01, constraint="trpo")
    >>> trpo.round(4), round(float(kl_divergence([0.5, 0.5], trpo)), 10)
    (array([0.5704, 0.4296]), 0.01)
    """
    kind = V.as_choice("constraint", constraint, _CONSTRAINTS)
    p, a, _ = _problem(pi_old, advantage, axis)
    d = _as_delta(delta)
    if kind == "trpo":
        step = _trpo_solve(p, a, d)[0].astype(p.dtype)
        _trpo_refuse_unreachable(p, a, d, step)
        return np.moveaxis(step, -1, axis)
    beta = np.asarray(_mirror_beta(p, a, d))
    shape = np.broadcast_shapes(p.shape[:-1], beta.shape)
    step = optimal_policy(
        np.broadcast_to(p, (*shape, p.shape[-1])),
        np.broadcast_to(a, (*shape, p.shape[-1])),
        np.expand_dims(beta, -1),
    )
    return np.moveaxis(step, -1, axis)


def _clipped_gradient(p, pi_old, adv, clip):
    """Gradient in the logits of sum_y pi_old min(rho A, clip(rho) A), rho = p / pi_old."""
    with np.errstate(divide="ignore", invalid="ignore"):
        rho = np.where(pi_old > 0, p / pi_old, 1.0)
    active = np.where(adv >= 0, rho <= 1 + clip, rho >= 1 - clip)
    g = np.where(active & (pi_old > 0), adv, 0.0)  # d/dp_y of the surrogate
    return p * (g - np.sum(p * g, axis=-1, keepdims=True))


def ppo_clip_step(
    pi_old: ArrayLike,
    advantage: ArrayLike,
    clip: float = 0.2,
    *,
    lr: float = 1.0,
    epochs: int = 4,
    axis: int = -1,
) -> NDArray[np.float64]:
    r"""PPO's update of a tabular softmax policy on its exact clipped surrogate.

    .. math::

        L(\pi) = \mathbb{E}_{y\sim\pi_{old}}\Big[\min\big(\rho A,\
        \mathrm{clip}(\rho, 1-\epsilon, 1+\epsilon) A\big)\Big],
        \qquad \rho = \pi(y)/\pi_{old}(y)

    Starting at :math:`\pi_{old}`, takes ``epochs`` gradient-ascent steps of
    size ``lr`` on the logits, with the expectation over :math:`\pi_{old}`
    computed exactly (an infinite batch).

    Parameters
    ----------
    pi_old, advantage, axis
        As in :func:`trust_region_step`.
    clip : float, optional
        The clip range :math:`\epsilon`.
    lr : float, optional
        Step size on the logits.
    epochs : int, optional
        Number of gradient steps on the same surrogate (PPO's epochs per batch).

    Returns
    -------
    ndarray
        The new policy. Unlike :func:`trust_region_step`, its KL from
        ``pi_old`` is not set by ``clip``: the clip only zeroes the gradient of
        outcomes whose ratio has left :math:`[1-\epsilon, 1+\epsilon]`, while the
        softmax keeps moving them through the other outcomes.

    Raises
    ------
    ValueError
        For invalid probabilities, advantages, ``clip``, ``lr`` or ``epochs``.

    References
    ----------
    .. [1] Schulman et al., "Proximal Policy Optimization Algorithms", 2017,
       arXiv:1707.06347, eq. (7).

    Examples
    --------
    >>> from klpolicy.trust_region import ppo_clip_step
    >>> ppo_clip_step([0.5, 0.5], [1.0, -1.0], 0.2, lr=1.0, epochs=1).round(4)
    array([0.7311, 0.2689])
    """
    p_old, adv = _prepare(pi_old, advantage, axis, ("pi_old", "advantage"))
    eps = V.as_positive_scalar("clip", clip)
    step = V.as_positive_scalar("lr", lr)
    n = V.as_positive_int("epochs", epochs, hi=V.MAX_LOOP_COUNT)
    p_old = p_old.astype(np.float64) / p_old.sum(-1, keepdims=True)
    with np.errstate(divide="ignore"):
        theta = np.where(p_old > 0, np.log(p_old), -np.inf)
    for _ in range(n):
        theta = theta + step * _clipped_gradient(special.softmax(theta, axis=-1), p_old, adv, eps)
    return np.moveaxis(special.softmax(theta, axis=-1), -1, axis)
