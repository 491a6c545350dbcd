r"""Expected gradients of KL-estimator placements and where training converges.

Implementation module of :func:`klpolicy.estimators.expected_gradient`,
:func:`klpolicy.estimators.objective_gradient` and
:func:`klpolicy.estimators.fixed_point` (import them from there).

A tabular softmax policy :math:`\pi = \mathrm{softmax}(\theta)` is trained on
:math:`\mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_{ref})` with the KL
replaced by a per-sample estimator :math:`k(\ell)`,
:math:`\ell = \log\pi(y) - \log\pi_{ref}(y)`, :math:`y \sim \pi`. With
:math:`\partial_{\theta_j} \log\pi(y) = \delta_{yj} - \pi_j`, the two
placements have the exact expected gradients

* reward: :math:`g_j = \pi_j (R_j - \mathbb{E}_\pi R)`, :math:`R = r - \beta k(\ell)`
  (the estimate is a reward; score-function gradient, no gradient through k);
* loss: :math:`g_j = \pi_j (r_j - \mathbb{E}_\pi r) - \beta\,\pi_j (k'_j - \mathbb{E}_\pi k')`,
  :math:`k' = \partial k / \partial \log\pi` (the sample is held fixed and the
  estimate is differentiated through the log-probability).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core import optimal_policy
from ..core.internal import ascent_growth_rate, monotone_root, special
from ..core.internal import restore as _restore
from ..core.internal import setup as _setup
from ..core.internal import validation as V
from .registry import ESTIMATORS, PLACEMENTS, estimator_names, get_estimator

__all__ = [
    "Flow",
    "Stability",
    "expected_gradient",
    "fixed_point",
    "fixed_point_stability",
    "gradient_flow",
    "objective_gradient",
]

#: How a trainer weights the KL term when samples come from another policy: not at all,
#: by pi/pi_old with no gradient through the weight, or by pi/pi_old differentiated.
RATIOS = ("none", "detached", "differentiable")


def _as_ratio_clip(x) -> tuple[float, float] | None:
    """``None`` or a pair ``(low, high)`` with ``0 <= low <= high <= inf``."""
    if x is None:
        return None
    words = "a pair (low, high) with 0 <= low <= high"
    try:
        lo, hi = x
        lo, hi = float(lo), float(hi)
    except (TypeError, ValueError):
        raise ValueError(f"`ratio_clip` must be {words}; got {V.describe(x)}") from None
    if isinstance(x, (str, bytes)) or not (0 <= lo <= hi):  # also NaN
        raise ValueError(f"`ratio_clip` must be {words}; got {V.describe(x)}")
    return lo, hi


#: Where the reward's part of the gradient comes from when a ``sampler`` draws the samples.
REWARD_SOURCES = ("policy", "sampler")


def _as_reward_source(x) -> str | None:
    return None if x is None else V.as_choice("sample_reward", x, REWARD_SOURCES)


def _sampler_logits(sampler, th: NDArray, axis: int, against: str = "logits") -> NDArray:
    """The sampler's logits, validated, ``axis`` moved last, broadcast against the policy's.

    ``against`` names the caller's argument that ``th`` comes from (``logits``, or ``ref``
    and ``policy`` for the fixed-point functions, whose ``th`` is their log), so that the
    messages name an argument the caller has.
    """
    zero = "are -inf" if against == "logits" else "is 0"
    ph = V.as_log_probs("sampler", sampler, allow_neg_inf=True)
    ph = np.moveaxis(ph, V.normalise_axis(axis, ph.ndim, "sampler"), -1)
    if ph.shape[-1:] != th.shape[-1:]:
        raise ValueError(
            f"`sampler` must have {th.shape[-1]} entries along the axis, as `{against}`; "
            f"got shape {ph.shape}"
        )
    try:
        ph = np.broadcast_to(ph, th.shape)
    except ValueError:
        raise ValueError(
            f"`sampler` of shape {ph.shape} does not broadcast with `{against}` of shape {th.shape}"
        ) from None
    dead = np.all(ph == -np.inf, axis=-1)
    if dead.any():
        idx = tuple(int(i) for i in np.argwhere(dead)[0]) if dead.ndim else ()
        raise ValueError(f"`sampler` must have a finite entry in every row; row {idx} is all -inf")
    off = (ph > -np.inf) & (th == -np.inf)
    if off.any():
        idx = tuple(int(i) for i in np.argwhere(off)[0])
        raise ValueError(
            f"`sampler` draws index {idx} where `{against}` {zero}: the policy's "
            "log-probability, and every KL estimate, is infinite on that sample"
        )
    return ph.astype(th.dtype)


def _prepare(logits, ref, reward, beta, axis):
    """Validated (theta, ref, reward, beta, axis_neg) with the probability axis last."""
    return _with_logits(logits, *_setup(ref, reward, beta, axis), axis)


def _with_logits(logits, ref_a, rew_a, b, ax, axis):
    """:func:`_prepare` for a problem :func:`_setup` has validated already."""
    if np.isinf(b).any():
        raise ValueError("`beta` must be finite for a gradient; got inf")
    th = V.as_log_probs("logits", logits, allow_neg_inf=True)
    if th.ndim == 0:
        raise ValueError(f"`logits` must have at least one dimension; got a scalar {th.item()!r}")
    th = np.moveaxis(th, V.normalise_axis(axis, th.ndim, "logits"), -1)
    th, ref_a = V.broadcast_pair("logits", th, "ref", ref_a)
    th, rew_a = V.broadcast_pair("logits", th, "reward", rew_a)
    b = np.broadcast_to(b, (*th.shape[:-1], 1))
    dead = np.all(th == -np.inf, axis=-1)
    if dead.any():
        idx = tuple(int(i) for i in np.argwhere(dead)[0]) if dead.ndim else ()
        raise ValueError(f"`logits` must have a finite entry in every row; row {idx} is all -inf")
    off = (th > -np.inf) & (ref_a == 0)
    if off.any():
        idx = tuple(int(i) for i in np.argwhere(off)[0])
        raise ValueError(
            f"`logits` put probability where `ref` is zero (index {idx}); every KL "
            "estimate is infinite there (use -inf logits off the reference's support)"
        )
    dtype = np.result_type(th.dtype, ref_a.dtype, np.float32)
    return th.astype(dtype), ref_a.astype(dtype), rew_a.astype(dtype), b.astype(dtype), ax


def _policy(th: NDArray) -> tuple[NDArray, NDArray]:
    """softmax and log-softmax along the last axis (-inf logits allowed)."""
    return special.softmax(th, axis=-1), special.log_softmax(th, axis=-1)


def _project(ma: NDArray, pi: NDArray) -> NDArray:
    r"""``ma - pi * sum(ma)`` along the last axis, every entry without cancellation.

    Every expected gradient here is :math:`\sum_y a_y (e_y - \pi)` with ``ma = a``
    (a weighted term per outcome). For the most likely outcome :math:`*` the plain form
    :math:`a_* - \pi_* \sum_y a_y` subtracts two numbers of the size of :math:`a_*` when
    :math:`\pi_* \approx 1`; the equal form
    :math:`a_* \sum_{z\ne *}\pi_z - \pi_* \sum_{y\ne *} a_y` has no such cancellation
    (its sums are of the small entries, formed directly). ``pi * S`` is 0 where ``pi`` is
    0 (an underflowed probability), so that an overflowed term stays in its own entry.
    """
    n = ma.shape[-1]
    star = np.argmax(pi, axis=-1)[..., None]
    is_star = np.arange(n) == star
    with np.errstate(invalid="ignore"):
        total = np.sum(ma, axis=-1, keepdims=True)
        g = ma - np.where(pi == 0, 0, pi * total)
        rest = np.sum(np.where(is_star, 0, pi), axis=-1, keepdims=True)
        others = np.sum(np.where(is_star, 0, ma), axis=-1, keepdims=True)
        ma_star = np.take_along_axis(ma, star, axis=-1)
        pi_star = np.take_along_axis(pi, star, axis=-1)
        g_star = np.where(rest == 0, 0, ma_star * rest) - pi_star * others
    # an infinite term (an estimate beyond the float range) dominates its own entry
    g = np.where(np.isinf(ma), ma, g)
    return np.where(is_star, g_star, g)


def _weighted_derivative(row, pi: NDArray, ref: NDArray, ell: NDArray) -> NDArray:
    r"""``pi * k'(l)``, the registry's form, also where ``pi`` underflowed to 0 (``l`` finite).

    k3's :math:`\pi k' = \pi - \pi_{ref}` tends to :math:`-\pi_{ref}`, not 0, as
    :math:`\pi \to 0`; the registry's row reads ``pi = 0`` as off the support (0).
    """
    out = row.weighted_derivative(pi, ref, ell)
    if row.weighted_derivative is ESTIMATORS["k3"].weighted_derivative:
        out = np.where(pi == 0, -ref, out)
    return out


def _grad(th, ref, rew, b, name, placement):
    row = ESTIMATORS[name]
    pi, logpi = _policy(th)
    alive = logpi > -np.inf  # the support; pi may underflow to 0 on it, logpi does not
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ell = np.where(alive, logpi - np.log(ref), 0)
        if placement == "reward":
            # pi * R, with pi * k in the registry's form that stays finite for rare actions
            pr = np.where(alive, pi * rew - b * row.weighted_value(pi, ref, ell), 0)
            return _project(pr, pi)
        pk = np.where(alive, pi * rew - b * _weighted_derivative(row, pi, ref, ell), 0)
        return _project(pk, pi)


def _times(p: NDArray, x: NDArray) -> NDArray:
    """``p * x``, 0 where the probability ``p`` underflowed to 0 (``x`` may be infinite)."""
    return np.where(p == 0, 0, p * x)


def _grad_ratio(th, ref, rew, b, name, placement, ph, ratio, clip, reward_from=None):
    """:func:`_grad` with samples from softmax(ph) (None: the policy) and a ratio weight.

    Every term is ``sum_y mu_y a_y (e_y - pi)``: ``ma = mu * a`` per outcome, projected by
    :func:`_project`. The log-ratio and the weight come from the log-probabilities, so an
    outcome whose policy probability underflows (logits -800 against a sampler that draws
    it) keeps its terms; ``pi * k`` and ``pi * k'`` are the registry's forms that stay
    finite there. ``reward_from`` (``"policy"``, ``"sampler"``; None: ``"sampler"`` in the
    reward placement, ``"policy"`` in the loss) is where the reward's part comes from.
    """
    row = ESTIMATORS[name]
    pi, logpi = _policy(th)
    alive = logpi > -np.inf  # the policy's support (pi itself may underflow to 0 on it)
    mu, logmu = (pi, logpi) if ph is None else _policy(ph)
    drawn = logmu > -np.inf  # inside `alive` (checked by _sampler_logits)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore", under="ignore"):
        ell = np.where(alive, logpi - np.log(ref), 0)
        if ph is None:
            w = np.ones_like(pi)
        else:  # w = pi / mu from the logs: neither underflow nor overflow of pi or mu
            w = np.where(drawn, np.exp(np.where(drawn, logpi - logmu, 0)), 0)
        lo, hi = clip if clip is not None else (0.0, np.inf)
        inside = (w >= lo) & (w <= hi)  # torch.clamp passes the gradient on [lo, hi]
        wc = np.clip(w, lo, hi)
        mu_wc = np.where(inside, pi, _times(mu, wc))  # mu * clip(w): exactly pi where unclipped
        pk = np.where(alive, row.weighted_value(pi, ref, ell), 0)  # pi * k, finite when rare

        def sampled(pix, mux, x):
            # the score-function term of x drawn from mu, weighted by c = mu, mu clip(w) or
            # pi 1[inside] and centred on m = E_mu x: a = c (x - m). _project drops any
            # multiple of pi, so a = c x - m (c - pi): where c = pi the baseline m (large
            # when a rare outcome carries a large x) cancels exactly, not in rounding
            m = np.sum(np.where(drawn, mux, 0), axis=-1, keepdims=True)
            if ratio == "none":
                out = mux - _times(mu - pi, m)
            elif ratio == "detached":
                out = np.where(inside, pix, _times(mu_wc, x) - _times(mu_wc - pi, m))
            else:
                out = np.where(inside, pix, _times(pi, m))
            return np.where(drawn, out, 0)

        if reward_from is None:
            reward_from = "sampler" if placement == "reward" else "policy"
        if reward_from == "sampler":
            a_r = sampled(pi * rew, mu * rew, rew)
        else:  # the exact policy gradient of E_pi[r]
            a_r = np.where(alive, pi * rew, 0)
        if placement == "reward":
            k = np.where(alive, row.value(ell), 0)
            a_k = sampled(pk, pk if ph is None else _times(mu, k), k)
            return _project(a_r - b * a_k, pi)
        wd = np.where(alive, _weighted_derivative(row, pi, ref, ell), 0)  # pi * k'
        if ratio == "none":
            ma = wd if ph is None else _times(mu, row.derivative(ell))
        else:  # mu * clip(w) * k'
            if ratio == "differentiable":  # + k * d clip(w): mu * w * k = pi * k inside
                k3 = ESTIMATORS["k3"]
                if row.weighted_derivative is k3.weighted_derivative and (
                    row.weighted_value is k3.weighted_value
                ):  # pi (k3' + k3) = pi l: pi - ref and ref - pi + pi l cancel when pi << ref
                    wd = np.where(alive, pi * ell, 0)
                else:
                    wd = wd + pk
            ma = np.where(inside, wd, _times(mu_wc, row.derivative(ell)))
        ma = np.where(drawn, ma, 0)
        return _project(a_r - b * ma, pi)


def expected_gradient(
    logits: ArrayLike,
    ref: ArrayLike,
    reward: ArrayLike,
    beta: ArrayLike,
    *,
    estimator: str,
    placement: str,
    sampler: ArrayLike | None = None,
    ratio: str = "none",
    ratio_clip: tuple[float, float] | None = None,
    sample_reward: str | None = None,
    axis: int = -1,
) -> NDArray[np.floating]:
    r"""Exact expected gradient when the KL term is a per-sample estimator, on- or off-policy.

    .. math::

        \text{reward:}\quad g_j = \pi_j\big(R_j - \mathbb{E}_\pi R\big),\ \
        R = r - \beta\, k(\ell); \qquad
        \text{loss:}\quad g_j = \pi_j\big(r_j - \mathbb{E}_\pi r\big)
            - \beta\,\pi_j\big(k'(\ell_j) - \mathbb{E}_\pi k'\big)

    with :math:`\pi = \mathrm{softmax}(\theta)`, :math:`\ell = \log\pi - \log\pi_{ref}`
    and :math:`k' = \partial k/\partial\log\pi`: 1 for k1, :math:`\ell` for k2,
    :math:`1 - \pi_{ref}/\pi` for k3, :math:`\mathrm{sign}\,\ell` for abs (and
    :math:`\ell`, k2's, for the straight-through rows ``k1+``, ``k3+``, ``abs+``).
    Off-policy, samples come from :math:`\mu = \mathrm{softmax}(\phi)` (``sampler``)
    and the term is weighted by :math:`c(y)`, a function of :math:`w = \pi(y)/\mu(y)`:

    .. math::

        \text{loss:}\quad g = \pi(r - \mathbb{E}_\pi r)
            - \beta\,\mathbb{E}_{y\sim\mu}\big[\nabla_\theta\, c(y)\,k(\ell_y)\big];
        \qquad
        \text{reward:}\quad g = \mathbb{E}_{y\sim\mu}\big[s(y)\,(R_y - \mathbb{E}_\mu R)
            \,\nabla_\theta\log\pi(y)\big]

    with :math:`c = 1` (``ratio="none"``), :math:`c = \mathrm{sg}(\bar w)` (``"detached"``)
    or :math:`c = \bar w` (``"differentiable"``), :math:`\bar w = \mathrm{clip}(w, low, high)`
    (``ratio_clip``; its gradient is zero where it clips, as ``torch.clamp``'s), and in the
    reward :math:`s = 1`, :math:`\bar w`, or :math:`w\,1[low \le w \le high]`.

    Parameters
    ----------
    logits : array_like
        Policy logits :math:`\theta` along ``axis`` (``-inf`` allowed, giving
        probability zero; required wherever ``ref`` is zero).
    ref : array_like
        Reference probabilities.
    reward : array_like
        Finite rewards.
    beta : float or array_like
        Finite KL coefficient ``>= 0`` (one per batch row, as in
        :func:`klpolicy.optimal_policy`).
    estimator : {"k1", "k2", "k3", "abs", "k1+", "k3+", "abs+"}
        The per-sample KL estimate (:data:`~klpolicy.estimators.ESTIMATORS`); the
        straight-through rows take the value of the named estimate and the gradient of
        k2, as verl's ``kl_penalty="k3+"``.
    placement : {"reward", "loss"}
        ``"reward"``: the estimate is subtracted from the reward and enters
        through the score function, as in InstructGPT-style PPO and TRL's
        PPO trainer. ``"loss"``: ``beta * k`` is added to the loss and
        differentiated through :math:`\log\pi(y)` with the sample fixed, as in
        GRPO.
    sampler : array_like, optional
        Logits of the policy that drew the samples (:math:`\pi_{old}`, a rollout engine's
        policy); default the current policy (``logits``). Where ``logits`` are ``-inf``
        the sampler must be too.
    ratio : {"none", "detached", "differentiable"}
        How the term is weighted by :math:`w = \pi/\pi_{old}`: not at all (TRL's GRPO
        KL term), by :math:`w` with no gradient through it, or by :math:`w`
        differentiated (DeepSeek-V3.2's corrected k3). In the ``"reward"`` placement the
        weight multiplies the whole advantage, as PPO's ratio does.
    ratio_clip : (float, float), optional
        ``(low, high)``: the weight is :math:`\mathrm{clip}(w, low, high)` (truncated
        importance sampling, TIS, with ``low = 0``; PPO-style clipping otherwise).
    sample_reward : {"policy", "sampler"}, optional
        Where the reward's own part of the gradient comes from when ``sampler`` is given.
        ``"sampler"``: from the sampler's samples, as the KL term,
        :math:`\mathbb{E}_{y\sim\mu}[s(y)(r_y - \mathbb{E}_\mu r)\nabla_\theta\log\pi(y)]`
        with the reward placement's weight :math:`s` (so ``ratio`` weights it too): a
        trainer that scores the engine's samples for both terms, as GRPO and PPO do.
        ``"policy"``: the exact :math:`\pi(r - \mathbb{E}_\pi r)`, as if the reward
        term were drawn from :math:`\pi` or fully importance-corrected. Default: the
        placement's own, ``"sampler"`` in the reward placement (the estimate is part of
        the advantage) and ``"policy"`` in the loss (the formula above: only the KL
        term sees the sampler). Without ``sampler`` the two are the same.
    axis : int, optional
        The probability axis.

    Returns
    -------
    ndarray
        :math:`\mathbb{E}_{y\sim\pi}[\hat g]` with respect to the logits, the
        ascent direction of the objective (minus the gradient of the loss),
        with the broadcast shape of the inputs. It sums to zero along
        ``axis``.

    Raises
    ------
    ValueError
        For an unknown ``estimator``, ``placement``, ``ratio`` or ``sample_reward``; a ``ratio_clip``
        that is not ``(low, high)`` with ``0 <= low <= high``; ``logits`` that give
        probability where ``ref`` is zero, or a row of all ``-inf``; a ``sampler``
        that draws where ``logits`` are ``-inf``; invalid ``ref``, ``reward`` or
        ``beta`` (including ``beta = inf``).

    Notes
    -----
    Off the sampler's support an outcome is never drawn and contributes nothing. The
    log-ratio and the weight :math:`w` are formed from log-probabilities, so an outcome the
    sampler draws keeps its terms where :math:`\pi(y)` underflows (logits -800:
    :math:`\pi\,k_3 \to \pi_{ref}` and :math:`\ell` stays finite), and the entry of
    the most likely outcome is formed as
    :math:`a_*\sum_{z\ne *}\pi_z - \pi_*\sum_{y\ne *}a_y`, without the cancellation of
    :math:`a_* - \pi_*\sum_y a_y` when :math:`\pi_* \approx 1`. k3's value
    :math:`e^{-\ell} - 1 + \ell` is beyond float64 from :math:`\ell < -709.8`: where a
    sampler draws such an outcome, k3 and ``k3+`` in the reward placement (with
    ``ratio="none"`` or a clipped ratio) have entries beyond float64's range, and the
    result holds NaN there (the loss placement returns the infinities). With
    ``ratio="detached"`` or ``"differentiable"`` and no clipping, :math:`\mu w = \pi`
    and the gradient is the on-policy one of the same ratio mode whatever the sampler.
    ``"differentiable"`` adds the score-function term :math:`\pi(k - \mathbb{E}_\pi k)`
    to the loss placement's, so the term's expected gradient is
    :math:`\nabla_\theta\mathbb{E}_\pi[k]`: for k1 and k3 the gradient of
    :math:`\mathrm{KL}(\pi\|\pi_{ref})` (DeepSeek-V3.2, arXiv:2512.02556), for ``k1+``
    and ``k3+`` twice it. In the ``"reward"`` placement the baseline is
    :math:`\mathbb{E}_\mu R` (a group mean in the large-group limit); it matters only
    where the weights do not average out (``"none"`` off-policy, or clipped).

    The true gradient of :math:`\mathbb{E}_\pi[r] - \beta\mathrm{KL}(\pi\|\pi_{ref})`
    (:func:`objective_gradient`) is reproduced exactly by k1 in the reward and
    by k2 in the loss, since :math:`\mathbb{E}_\pi[\ell\,\nabla\log\pi] = \nabla\mathrm{KL}`.
    k1 in the loss contributes nothing (:math:`\mathbb{E}_\pi[\nabla\log\pi] = 0`);
    k3 in the loss contributes :math:`\beta(\pi - \pi_{ref})`, the gradient of
    the forward :math:`\mathrm{KL}(\pi_{ref}\|\pi)`. Entries with
    :math:`\pi_j = 0` are never sampled and contribute zero.

    References
    ----------
    .. [1] Tang and Munos, "On a few pitfalls in KL divergence gradient
       estimation for RL", 2025, arXiv:2506.09477.
    .. [2] Shao et al., 2024, arXiv:2402.03300 (GRPO: k3 in the loss).
    .. [3] Ouyang et al., "Training language models to follow instructions with
       human feedback", 2022, arXiv:2203.02155 (KL in the reward).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.estimators import expected_gradient, objective_gradient
    >>> th, ref, r = np.log([0.7, 0.3]), [0.5, 0.5], [1.0, 0.0]
    >>> expected_gradient(th, ref, r, 0.5, estimator="k3", placement="loss").round(4)
    array([ 0.11, -0.11])
    >>> objective_gradient(th, ref, r, 0.5).round(4)
    array([ 0.121, -0.121])

    Off-policy, k3 weighted by a differentiable ratio follows the true gradient:

    >>> old = np.log([0.5, 0.5])
    >>> expected_gradient(th, ref, r, 0.5, estimator="k3", placement="loss",
    ...                   sampler=old, ratio="differentiable").round(4)
    array([ 0.121, -0.121])
    """
    name = get_estimator(estimator, straight_through=True).name
    place = V.as_choice("placement", placement, PLACEMENTS)
    how = V.as_choice("ratio", ratio, RATIOS)
    clip = _as_ratio_clip(ratio_clip)
    source = _as_reward_source(sample_reward)
    th, ref_a, rew_a, b, ax = _prepare(logits, ref, reward, beta, axis)
    ph = None if sampler is None else _sampler_logits(sampler, th, axis)
    if ph is None and how == "none":
        return _restore(_grad(th, ref_a, rew_a, b, name, place), ax)
    return _restore(_grad_ratio(th, ref_a, rew_a, b, name, place, ph, how, clip, source), ax)


def objective_gradient(
    logits: ArrayLike, ref: ArrayLike, reward: ArrayLike, beta: ArrayLike, *, axis: int = -1
) -> NDArray[np.floating]:
    r"""The true gradient of the KL-regularised objective with respect to the logits.

    .. math:: \nabla_{\theta_j} = \pi_j \big(f_j - \mathbb{E}_\pi f\big), \qquad
              f = r - \beta \log(\pi/\pi_{ref})

    Parameters
    ----------
    logits, ref, reward, beta, axis
        As in :func:`expected_gradient`.

    Returns
    -------
    ndarray
        Same shape as :func:`expected_gradient`'s; zero exactly at
        :math:`\pi^*_\beta` (:func:`klpolicy.optimal_policy`).

    Raises
    ------
    ValueError
        As in :func:`expected_gradient`.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy import optimal_policy
    >>> from klpolicy.estimators import objective_gradient
    >>> pi = optimal_policy([0.5, 0.5], [1.0, 0.0], 0.5)
    >>> bool(np.abs(objective_gradient(np.log(pi), [0.5, 0.5], [1.0, 0.0], 0.5)).max() < 1e-15)
    True
    """
    th, ref_a, rew_a, b, ax = _prepare(logits, ref, reward, beta, axis)
    return _restore(_grad(th, ref_a, rew_a, b, "k1", "reward"), ax)


# ---------------------------------------------------------------------------
# fixed points
# ---------------------------------------------------------------------------


def _forward_kl_optimum(ref: NDArray, rew: NDArray, b: NDArray) -> NDArray:
    r"""argmax_pi E_pi[r] - beta KL(ref || pi), rows along the last axis.

    pi_j = ref_j / (u + d_j), d_j = (r_max - r_j)/beta, with u in [W_best, 1]
    the unique root of sum_j ref_j / (u + d_j) = 1 (W_best: the reference
    mass on the best rewards). Safeguarded Newton on log u (klpolicy.core.roots).
    """
    support = ref > 0
    ref_n = ref / ref.sum(-1, keepdims=True)
    c = np.max(np.where(support, rew, -np.inf), -1, keepdims=True)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        d = np.where(support, (c - rew) / b, np.inf)
        d = np.where(b == np.inf, np.where(support, 0.0, np.inf), d)
        d = np.where(b == 0, np.where(support & (rew == c), 0.0, np.inf), d)
    w_best = np.sum(np.where(d == 0, ref_n, 0), -1, keepdims=True)

    full = np.broadcast_shapes(ref_n.shape, d.shape)
    q2 = np.broadcast_to(ref_n, full).reshape(-1, full[-1])
    d2 = np.broadcast_to(d, full).reshape(-1, full[-1])
    sup2 = np.broadcast_to(support, full).reshape(-1, full[-1])
    shape = full[:-1] + (1,)

    def h(s, rows):
        """f(e^s) = sum ref / (e^s + d) - 1 (decreasing) and its slope in s."""
        u = np.exp(s)[:, None]
        q, dd = q2[rows], d2[rows]
        keep = sup2[rows]
        w = np.where(keep, q / (u + dd), 0)
        return w.sum(-1) - 1.0, -u[:, 0] * np.sum(np.where(keep, w / (u + dd), 0), -1)

    # the root lies in [log W_best, 0]: f(W_best) >= 0 >= f(1); a root at an end (beta = inf
    # or 0) comes back flagged "outside" at that end, which is then the answer
    lo = np.broadcast_to(np.log(w_best), shape).reshape(-1)
    root = monotone_root(h, lo, 0.0, increasing=False, ftol=4 * np.finfo(np.float64).eps)
    s_root = np.where(root.outside > 0, 0.0, np.where(root.outside < 0, lo, root.x))
    u = np.exp(s_root).reshape(shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        pi = np.where(support, ref_n / (u + d), 0)
    return pi / pi.sum(-1, keepdims=True)


class Flow(NamedTuple):
    """Result of :func:`gradient_flow`: the final policy and the recorded trajectory."""

    policy: NDArray  # final policy, the broadcast shape of the inputs
    logits: NDArray  # final logits (-inf off the reference's support)
    history: NDArray  # shape (n_records,) + policy.shape
    steps: NDArray  # the step numbers of the records, shape (n_records,)


def gradient_flow(
    ref: ArrayLike,
    reward: ArrayLike,
    beta: ArrayLike,
    *,
    estimator: str,
    placement: str,
    steps: int = 1000,
    lr: float = 1.0,
    logits: ArrayLike | None = None,
    record_every: int = 1,
    axis: int = -1,
) -> Flow:
    r"""Deterministic training: gradient ascent on the logits along the exact expected gradient.

    .. math:: \theta_{t+1} = \theta_t
              + \eta\, \mathbb{E}_{y\sim\pi_{\theta_t}}[\hat g(\theta_t)],
              \qquad \theta_0 = \log \pi_{ref}

    the infinite-batch limit of on-policy training with :func:`expected_gradient`.

    Parameters
    ----------
    ref, reward, beta, estimator, placement, axis
        As in :func:`expected_gradient`.
    steps : int, optional
        Number of updates (default 1000).
    lr : float, optional
        Step size :math:`\eta > 0` (default 1).
    logits : array_like, optional
        Starting logits; default ``log(ref)`` (training starts at the reference).
    record_every : int, optional
        Keep every ``record_every``-th policy in ``history`` (the first and
        the last are always kept).

    Returns
    -------
    Flow
        ``policy`` and ``logits`` after ``steps`` updates, ``history`` of the
        recorded policies (shape ``(n_records,) + policy.shape``) and their
        ``steps``.

    Raises
    ------
    ValueError
        As in :func:`expected_gradient`; for ``steps < 1``, ``record_every < 1``
        or a non-positive ``lr``.

    Notes
    -----
    Use it to watch the placements that :func:`fixed_point` refuses: with k2
    or k3 in the reward the probability of some actions keeps decaying towards
    zero and the support shrinks.

    References
    ----------
    .. [1] Williams, "Simple statistical gradient-following algorithms for
       connectionist reinforcement learning", 1992, Machine Learning 8.

    Examples
    --------
    >>> from klpolicy.estimators import gradient_flow
    >>> f = gradient_flow([0.5, 0.5], [1.0, 0.0], 0.5, estimator="k3", placement="loss", steps=500)
    >>> f.policy.round(4)
    array([0.809, 0.191])
    """
    name = get_estimator(estimator).name
    place = V.as_choice("placement", placement, PLACEMENTS)
    steps = V.as_positive_int("steps", steps, hi=V.MAX_LOOP_COUNT)
    every = V.as_positive_int("record_every", record_every)
    lr = V.as_positive_scalar("lr", lr)
    ref_a, rew_a, b, ax = _setup(ref, reward, beta, axis)
    if logits is None:
        with np.errstate(divide="ignore"):
            logits = _restore(np.log(ref_a), ax)
    th, ref_a, rew_a, b, ax = _with_logits(logits, ref_a, rew_a, b, ax, axis)
    hist, marks = [_policy(th)[0]], [0]
    for t in range(1, steps + 1):
        step = _grad(th, ref_a, rew_a, b, name, place)
        th = np.where(np.isfinite(th), th + lr * step, th)
        th = th - np.max(th, axis=-1, keepdims=True)
        if t % every == 0 or t == steps:
            hist.append(_policy(th)[0])
            marks.append(t)
    history = np.stack([_restore(h, ax) for h in hist])
    return Flow(_restore(_policy(th)[0], ax), _restore(th, ax), history, np.asarray(marks))


def fixed_point(
    ref: ArrayLike,
    reward: ArrayLike,
    beta: ArrayLike,
    *,
    estimator: str,
    placement: str,
    sampler: ArrayLike | None = None,
    ratio: str = "none",
    ratio_clip: tuple[float, float] | None = None,
    sample_reward: str | None = None,
    axis: int = -1,
) -> NDArray[np.floating]:
    r"""The policy that gradient training converges to for an estimator, placement and ratio.

    .. math::

        \begin{array}{lll}
        \text{k1, reward;\ k2, loss:} & \pi^*_\beta \propto \pi_{ref}\, e^{r/\beta}
          & \text{(the KL-regularised optimum)}\\
        \text{k1, loss:} & \pi^*_0 & \text{(greedy: no KL gradient at all)}\\
        \text{k3, loss:} & \pi_j = \dfrac{\beta\,\pi_{ref}(j)}{\beta + m - r_j},\
          m = \mathbb{E}_\pi[r]
          & \text{(argmax of } \mathbb{E}_\pi r - \beta\mathrm{KL}(\pi_{ref}\|\pi))\\
        \text{k2, k3 in the reward:} & \text{none: the support collapses (ValueError)}
        \end{array}

    Parameters
    ----------
    ref : array_like
        Reference probabilities along ``axis``; training starts at the
        reference (logits ``log ref``), so entries where it is zero stay zero.
    reward : array_like
        Finite rewards.
    beta : float or array_like
        KL coefficient ``>= 0``. ``0`` gives the greedy policy for every
        placement; ``inf`` gives the reference, except for k1 in the loss
        (greedy at every ``beta``) and k2 or k3 in the reward (refused).
    estimator : {"k1", "k2", "k3", "k1+", "k3+", "abs+"}
        The per-sample KL estimate (``"abs"`` is refused, see Raises).
    placement : {"reward", "loss"}
        As in :func:`expected_gradient`.
    sampler : array_like, optional
        Logits of a *fixed* sampling policy (a behaviour policy that does not follow
        training). Default: the samples come from the policy being trained, as in any
        trainer whose rollouts are refreshed (several updates per batch included: at a
        fixed point the old policy equals the current one).
    ratio, ratio_clip
        As in :func:`expected_gradient`.
    sample_reward : {"policy", "sampler"}, optional
        As in :func:`expected_gradient`: with a fixed ``sampler``, ``"sampler"`` draws the
        reward's part of the gradient from it too (the loss placement's default is the
        exact reward gradient). The fixed point is then the zero of that field.
    axis : int, optional
        The probability axis.

    Returns
    -------
    ndarray
        The limiting policy, with the broadcast shape of ``ref`` and ``reward``.
        :func:`expected_gradient` (with the same arguments) vanishes there.

    Raises
    ------
    ValueError
        For ``estimator="abs"`` (its derivative jumps at :math:`\ell = 0`:
        the stationarity condition is set-valued and plain gradient training
        chatters instead of converging); for k2 or k3 in the reward with
        ``beta > 0`` (no interior fixed point is reached, see Notes; simulate
        with :func:`gradient_flow`); where the expected gradient has no zero
        (``ratio_clip`` that excludes 1 with a differentiable ratio on-policy: the
        gradient is zero everywhere; a fixed ``sampler`` with ``ratio="none"``, whose
        reward gradient does not depend on the policy); where the numerical path (see
        Notes) finds a stationary point that is unstable ("a stationary point at ... is
        unstable: training moves away from it"; see :func:`fixed_point_stability`); for
        invalid inputs.

    Notes
    -----
    *Ratios.* On-policy :math:`w = 1`: ``"none"`` and ``"detached"`` have the fixed
    point of the table (a detached clipped weight :math:`\mathrm{clip}(1)` only
    rescales ``beta`` in the loss); ``"differentiable"`` in the loss follows
    :math:`\nabla\mathbb{E}_\pi[k]`, so k1 and k3 converge to :math:`\pi^*_\beta`
    and ``k1+`` (k2's gradient plus k1's score term) to :math:`\pi^*_{2\beta}`. Other combinations (k2 with a
    differentiable ratio, a fixed ``sampler`` with a clipped or missing ratio) are
    solved numerically: Powell's hybrid method (``scipy.optimize.root``) on the logits
    of the reference's support, started at :math:`\pi^*_\beta`, accepted when the
    expected gradient there is below 1e-12 and no probability of the support below
    1e-12 (otherwise training collapses the support and a ValueError says so), and only
    when the point is stable: a root finder also finds stationary points that training
    moves away from (k1 in the loss on a fixed sampler without a ratio, whose term pushes
    :math:`\pi` away from the sampler), so an eigenvalue of positive real part of the
    expected gradient's Jacobian in the free logits (:func:`fixed_point_stability`) is a
    ValueError, not an answer.

    *k3 in the loss* (GRPO). The expected gradient is
    :math:`\pi_j (r_j - m) - \beta(\pi_j - \pi_{ref}(j))`; setting it to zero
    gives the formula above, with :math:`\beta + m - r_j > 0`. Writing
    :math:`u = (\beta + m - r_{max})/\beta` and :math:`d_j = (r_{max} - r_j)/\beta`,
    :math:`\pi_j = \pi_{ref}(j)/(u + d_j)` and :math:`u` is the unique root in
    :math:`[\pi_{ref}(\arg\max r), 1]` of the decreasing function
    :math:`\sum_j \pi_{ref}(j)/(u + d_j) - 1`, found by safeguarded Newton
    steps on :math:`\log u` inside that bracket. It agrees with
    :math:`\pi^*_\beta` to first order in :math:`1/\beta`, but its tails are
    polynomial, :math:`u/(u + d_j)`, rather than :math:`e^{-d_j}`: at small
    ``beta`` it keeps far more mass on bad responses and never becomes greedy.

    *k2 and k3 in the reward* (TRL's ``kl_penalty="mse"``, or k3 as a reward).
    Both estimates are large for rare responses (:math:`\ell \ll 0`), and in
    the reward they get no gradient through :math:`\log\pi`: a response
    whose probability falls is penalised more, so it falls further. For two
    actions with a uniform reference the penalised-reward gap
    :math:`R_1 - R_2 = r_1 - r_2 + \tfrac\beta2 \log\tfrac{p}{1-p}\,
    \log\tfrac{1}{4p(1-p)}` (k2, :math:`p = \pi_1`) stays above
    :math:`r_1 - r_2 > 0` for every :math:`p > 1/2`, so training goes to the
    greedy vertex at every ``beta``. In general the expected-gradient flow
    from the reference drives some probabilities to zero and
    where it ends depends on the path, so no fixed point is returned;
    :func:`gradient_flow` simulates it. At ``beta = 0`` every placement is
    plain reward maximisation and the greedy policy is returned.

    References
    ----------
    .. [1] Tang and Munos, 2025, arXiv:2506.09477.
    .. [2] Shao et al., 2024, arXiv:2402.03300.
    .. [3] Ouyang et al., 2022, arXiv:2203.02155.

    Examples
    --------
    >>> from klpolicy.estimators import fixed_point
    >>> ref, r = [0.5, 0.5], [1.0, 0.0]
    >>> fixed_point(ref, r, 0.5, estimator="k1", placement="reward").round(4)
    array([0.8808, 0.1192])
    >>> fixed_point(ref, r, 0.5, estimator="k3", placement="loss").round(4)  # 1/(1 + sqrt 5) - ...
    array([0.809, 0.191])
    >>> fixed_point(ref, r, 0.5, estimator="k1", placement="loss")
    array([1., 0.])
    """
    name = get_estimator(estimator, straight_through=True).name
    place = V.as_choice("placement", placement, PLACEMENTS)
    how = V.as_choice("ratio", ratio, RATIOS)
    clip = _as_ratio_clip(ratio_clip)
    source = _as_reward_source(sample_reward)
    kind, scale = _kind(name, place, how, clip, sampler is not None)
    if kind == "numeric":
        return _numeric_fixed_point(
            ref, reward, beta, name, place, sampler, how, clip, axis, source
        )
    if kind == "flat":
        raise ValueError(
            f"`ratio_clip` {clip!r} excludes 1: on-policy the differentiable ratio's "
            "gradient is zero, every policy is stationary"
        )
    if scale != 1.0:
        ref_a, rew_a, b, ax = _setup(ref, reward, beta, axis)
        beta = _restore(
            np.broadcast_to(b * scale, (*np.broadcast_shapes(ref_a.shape, rew_a.shape)[:-1], 1)), ax
        )
    if kind == "undefined":
        usable = [n for n in estimator_names() if ESTIMATORS[n].fixed_point[place] != "undefined"]
        raise ValueError(
            f"`estimator` {name!r} has no fixed point here: its derivative jumps at "
            "log pi = log ref, so gradient training does not converge; use "
            + ", ".join(repr(n) for n in usable[:-1])
            + f" or {usable[-1]!r}"
        )
    if kind == "optimum":
        return optimal_policy(ref, reward, beta, axis=axis)
    ref_a, rew_a, b, ax = _setup(ref, reward, beta, axis)
    if kind == "greedy":
        return _restore(optimal_policy(ref_a, rew_a, np.zeros_like(b)), ax)
    if kind == "forward_kl":
        return _restore(_forward_kl_optimum(ref_a, rew_a, b).astype(ref_a.dtype), ax)
    if (b > 0).any():  # kind == "none"
        raise ValueError(
            f"{name!r} in the {place} has no fixed point for `beta` > 0: the estimate "
            "penalises rare responses most, so on-policy training drives some "
            "probabilities to zero instead of converging to an interior policy; "
            "simulate it with klpolicy.estimators.gradient_flow"
        )
    return _restore(optimal_policy(ref_a, rew_a, b), ax)


def _kind(name: str, place: str, how: str, clip, fixed_sampler: bool) -> tuple[str, float]:
    """The registry kind of fixed point for a ratio mode, with its beta scale, or "numeric"."""
    row = ESTIMATORS[name]
    lo, hi = clip if clip is not None else (0.0, np.inf)
    if fixed_sampler:
        # unclipped detached/differentiable weights give mu w = pi: the on-policy gradient
        if how == "none" or clip is not None:
            return "numeric", 1.0
    inside = lo <= 1.0 <= hi
    c1 = float(np.clip(1.0, lo, hi))
    if how == "none" or (how == "detached" and place == "reward"):
        return row.fixed_point[place], 1.0
    if how == "detached":  # loss: the term is scaled by clip(1)
        return row.fixed_point[place], c1
    if not inside:
        return "flat", 1.0
    if place == "reward":
        return row.fixed_point[place], 1.0
    # differentiable, loss: pathwise k' plus the score-function term of k's value
    if row.differentiable_loss is not None:  # the registry's row says where it lands
        return row.differentiable_loss
    if row.straight_through is None:
        if row.unbiased:  # E_pi k = KL(pi || ref) and the gradient of the mean is grad KL
            return "optimum", 1.0
        return ("undefined", 1.0) if row.fixed_point["loss"] == "undefined" else ("numeric", 1.0)
    return "numeric", 1.0


def _numeric_fixed_point(ref, reward, beta, name, place, sampler, how, clip, axis, source=None):
    """The zero of :func:`expected_gradient`, row by row, by Powell's hybrid method."""
    from scipy import optimize  # lazy: `import klpolicy` must not load scipy.optimize

    ref_a, rew_a, b, ax = _setup(ref, reward, beta, axis)
    if np.isinf(b).any():
        raise ValueError("`beta` must be finite for this fixed point; got inf")
    shape = np.broadcast_shapes(ref_a.shape, rew_a.shape, b.shape[:-1] + (1,))
    q2 = np.broadcast_to(ref_a, shape).reshape(-1, shape[-1]).astype(np.float64)
    r2 = np.broadcast_to(rew_a, shape).reshape(-1, shape[-1]).astype(np.float64)
    b2 = np.broadcast_to(b, shape[:-1] + (1,)).reshape(-1, 1).astype(np.float64)
    ph2 = None
    if sampler is not None:
        with np.errstate(divide="ignore"):
            th0 = np.broadcast_to(np.log(ref_a), shape)
        ph2 = _sampler_logits(sampler, th0, axis, "ref").reshape(-1, shape[-1])
    out = np.zeros_like(q2)
    for i in range(q2.shape[0]):
        sup = q2[i] > 0
        q, r = q2[i][sup] / q2[i][sup].sum(), r2[i][sup]
        bb = b2[i : i + 1]
        phs = None if ph2 is None else ph2[i][sup][None, :]

        def field(head, q=q, r=r, bb=bb, phs=phs):
            th = np.append(head, 0.0)[None, :]
            return _grad_ratio(th, q[None], r[None], bb, name, place, phs, how, clip, source)[
                0, :-1
            ]

        start = np.log(optimal_policy(q, r, float(bb[0, 0])))
        start = start[:-1] - start[-1]
        sol = optimize.root(field, start, method="hybr", options={"xtol": 1e-15})
        resid = np.max(np.abs(field(sol.x))) if sol.x.size else 0.0
        th = np.append(sol.x, 0.0)
        p = np.exp(th - th.max())
        p /= p.sum()
        if not (np.all(np.isfinite(sol.x)) and resid < 1e-12 and p.min() > 1e-12):
            raise ValueError(
                f"{name!r} in the {place} with ratio={how!r} has no interior fixed point "
                f"here (the expected gradient stays at {resid:.3g} or more, or a probability "
                "goes to zero); simulate training with klpolicy.estimators.gradient_flow"
            )
        growth, tol = _growth_rate(th, q, r, bb, name, place, phs, how, clip, source)
        if growth > tol:
            raise ValueError(
                f"{name!r} in the {place} with ratio={how!r}: a stationary point at "
                f"{np.array2string(p, precision=4, separator=', ')} is unstable: training moves "
                f"away from it (the expected gradient's Jacobian in the logits has an eigenvalue "
                f"of real part {growth:.3g} > 0), so it is not where training lands"
            )
        out[i, sup] = p
    return _restore(out.reshape(shape).astype(ref_a.dtype), ax)


def _growth_rate(th, q, r, bb, name, place, phs, how, clip, source=None) -> tuple[float, float]:
    """:func:`ascent_growth_rate` of :func:`expected_gradient`'s field on one row's support."""

    def full_field(theta):
        return _grad_ratio(
            theta[None, :], q[None], r[None], bb, name, place, phs, how, clip, source
        )[0]

    return ascent_growth_rate(full_field, th)


class Stability(NamedTuple):
    """Result of :func:`fixed_point_stability`."""

    growth_rate: NDArray  # largest real part of the Jacobian's eigenvalues, batch shape
    stable: NDArray  # bool, batch shape: growth_rate is not above rounding


def fixed_point_stability(
    policy: ArrayLike,
    ref: ArrayLike,
    reward: ArrayLike,
    beta: ArrayLike,
    *,
    estimator: str,
    placement: str,
    sampler: ArrayLike | None = None,
    ratio: str = "none",
    ratio_clip: tuple[float, float] | None = None,
    sample_reward: str | None = None,
    axis: int = -1,
) -> Stability:
    r"""Whether gradient training returns to a stationary policy or moves away from it.

    .. math::

        \dot z = g(z),\quad z_j = \theta_j - \theta_n,\qquad
        \lambda_{max} = \max \operatorname{Re}\,\operatorname{eig}
          \Big(\frac{\partial g}{\partial z}\Big|_{\pi}\Big)

    with :math:`g` the exact expected ascent direction of :func:`expected_gradient` in the
    free logits of ``policy``'s support (the last logit fixed: adding a constant to every
    logit leaves the policy unchanged). Training with a small step returns to the policy
    when every eigenvalue has a negative real part, and leaves it along an eigenvector
    whose eigenvalue has a positive real part: such a point is not where training lands.

    Parameters
    ----------
    policy : array_like
        The stationary policy (e.g. from :func:`fixed_point`), zero off ``ref``'s support;
        its zeros stay zero (the Jacobian is taken on its own support).
    ref, reward, beta, estimator, placement, sampler, ratio, ratio_clip, sample_reward, axis
        As in :func:`expected_gradient`.

    Returns
    -------
    Stability
        ``growth_rate``: the largest real part :math:`\lambda_{max}` (batch shape; negative:
        training returns, at the rate :math:`e^{\lambda_{max}\eta t}` for step ``eta``);
        ``stable``: ``growth_rate`` is not above the central differences' rounding,
        ``1e-7 * max(1, max |J|)``.

    Raises
    ------
    ValueError
        As in :func:`expected_gradient`; where ``policy`` puts mass off ``ref``'s support.

    Notes
    -----
    The Jacobian comes from central differences of step 1e-5 in the logits of the exact
    expected gradient (truncation about 1e-10, rounding about 1e-11, relative); the
    tests check it against mpmath. :func:`fixed_point` refuses a numerically found
    stationary point that this function calls unstable. Whether the point is stationary
    at all is not checked here: :func:`expected_gradient` says that.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy import optimal_policy
    >>> from klpolicy.estimators import fixed_point_stability
    >>> ref, r = [0.4, 0.3, 0.2, 0.1], [0.0, 0.5, 1.0, 2.0]
    >>> pi = optimal_policy(ref, r, 0.5)
    >>> bool(fixed_point_stability(pi, ref, r, 0.5, estimator="k1", placement="reward").stable)
    True
    >>> # k1 in the loss, samples from a fixed mu, no ratio: g = pi (r - m + beta) - beta mu
    >>> # vanishes at pi = beta mu / (beta + r - m), a point the term pushes training away from
    >>> from scipy.optimize import brentq
    >>> mu, r = np.array([0.3, 0.2, 0.25, 0.25]), np.array(r)
    >>> m = brentq(lambda m: np.sum(0.5 * mu / (0.5 + r - m)) - 1, -50, 0.4999, xtol=1e-15)
    >>> point = 0.5 * mu / (0.5 + r - m)
    >>> point.round(3)
    array([0.701, 0.14 , 0.103, 0.056])
    >>> s = fixed_point_stability(point / point.sum(), ref, r, 0.5, estimator="k1",
    ...                           placement="loss", sampler=np.log(mu))
    >>> bool(s.stable), round(float(s.growth_rate), 3)
    (False, 0.253)
    """
    name = get_estimator(estimator, straight_through=True).name
    place = V.as_choice("placement", placement, PLACEMENTS)
    how = V.as_choice("ratio", ratio, RATIOS)
    clip = _as_ratio_clip(ratio_clip)
    source = _as_reward_source(sample_reward)
    pol = V.as_probabilities("policy", policy)
    with np.errstate(divide="ignore"):
        logits = np.log(pol)
    ref_a, rew_a, b, ax = _setup(ref, reward, beta, axis)
    moved = np.moveaxis(pol, V.normalise_axis(axis, pol.ndim, "policy"), -1)
    # the shapes are checked here, by the user's name: the logits' check below says `logits`
    if moved.shape[-1] != ref_a.shape[-1]:
        raise ValueError(
            "`policy` must have the same size as `ref` along the probability axis; "
            f"got {moved.shape[-1]} and {ref_a.shape[-1]}"
        )
    try:
        np.broadcast_shapes(moved.shape, ref_a.shape)
    except ValueError:
        raise ValueError(
            f"the batch shapes of `policy` {moved.shape[:-1]} and `ref` {ref_a.shape[:-1]} "
            "do not broadcast"
        ) from None
    off = np.argwhere((moved > 0) & (ref_a == 0))
    if off.size:
        raise ValueError(
            f"`policy` puts probability where `ref` is zero (index {tuple(int(i) for i in off[0])}); "
            "every KL estimate is infinite there"
        )
    th, ref_a, rew_a, b, _ = _with_logits(logits, ref_a, rew_a, b, ax, axis)
    shape = th.shape
    th2 = th.reshape(-1, shape[-1]).astype(np.float64)
    q2 = np.broadcast_to(ref_a, shape).reshape(-1, shape[-1]).astype(np.float64)
    r2 = np.broadcast_to(rew_a, shape).reshape(-1, shape[-1]).astype(np.float64)
    b2 = np.broadcast_to(b, shape[:-1] + (1,)).reshape(-1, 1).astype(np.float64)
    ph2 = None
    if sampler is not None:
        ph2 = _sampler_logits(sampler, th, axis, "policy").reshape(-1, shape[-1])
        ph2 = ph2.astype(np.float64)
    growth = np.empty(th2.shape[0])
    stable = np.empty(th2.shape[0], dtype=bool)
    for i in range(th2.shape[0]):
        sup = np.isfinite(th2[i])
        phs = None if ph2 is None else ph2[i][sup][None, :]
        g, tol = _growth_rate(
            th2[i][sup],
            q2[i][sup],
            r2[i][sup],
            b2[i : i + 1],
            name,
            place,
            phs,
            how,
            clip,
            source,
        )
        growth[i], stable[i] = g, g <= tol
    batch = shape[:-1]
    return Stability(growth.reshape(batch), stable.reshape(batch))
