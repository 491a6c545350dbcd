r"""What the KL machinery sees when rollouts come from the sampler's law ``s``, not ``pi``.

The trainer scores tokens drawn from ``s`` with the policy's log-probabilities, so
the per-token estimators k1/k2/k3 of :math:`\mathrm{KL}(\pi\|\pi_{ref})` are
averaged under ``s``. On one distribution that is
:func:`klpolicy.estimators.off_policy_moments` with ``mu = s`` (``weighted=False``
is what a trainer logs; ``weighted=True`` the full importance ratio). This module
adds the token-tree version (:func:`logged_kl_moments`: sequences from the
sampler's tree, per-token estimates summed, as trainers log them) and the
importance corrections trainers use against the mismatch, each with its exact
bias and variance (:func:`corrected_kl_moments` for the KL estimate,
:func:`corrected_gradient_moments` for the policy gradient):

======== ===================================== ==========================================
name     per-sample weight :math:`c(x)`        used by
======== ===================================== ==========================================
none     :math:`1`                             a trainer that ignores the sampler
full     :math:`w = \pi(x)/s(x)`               ordinary importance sampling
tis      :math:`\min(w, C)`                    truncated IS (Yao et al. 2025)
mis      :math:`w\,\mathbb{1}[w \le C]`        masked IS: tokens beyond ``C`` dropped
======== ===================================== ==========================================

All of it is re-exported by :mod:`klpolicy.sampling`.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core import kl_divergence
from ..core.internal import normalised_log_ratio
from ..core.internal import validation as V
from ..estimators import ESTIMATORS, get_estimator
from ..sequences import joint

__all__ = [
    "CORRECTIONS",
    "CorrectedGradient",
    "CorrectedMoments",
    "corrected_gradient_moments",
    "corrected_kl_moments",
    "logged_kl_moments",
]

#: The importance corrections :func:`corrected_kl_moments` and
#: :func:`corrected_gradient_moments` know.
CORRECTIONS = ("none", "full", "tis", "mis")


class CorrectedMoments(NamedTuple):
    """Result of :func:`corrected_kl_moments` (see there)."""

    mean: NDArray
    bias: NDArray
    variance: NDArray


class CorrectedGradient(NamedTuple):
    """Result of :func:`corrected_gradient_moments` (see there)."""

    mean: NDArray
    bias: NDArray
    variance: NDArray


def _moments(weights: NDArray, values: NDArray) -> tuple[NDArray, NDArray]:
    """Mean and variance of ``values`` under the law ``weights`` (last axis), inf-safe."""
    on = weights > 0
    with np.errstate(invalid="ignore", over="ignore"):
        v = np.where(on, values, 0.0)
        mean = np.sum(np.where(on, weights * v, 0.0), axis=-1)
        pos = np.any(on & (v == np.inf), axis=-1)
        neg = np.any(on & (v == -np.inf), axis=-1)
        finite = ~(pos | neg)
        dev = np.where(on & finite[..., None], v - mean[..., None], 0.0)
        var = np.sum(weights * dev * dev, axis=-1)
    mean = np.where(pos & neg, np.nan, np.where(pos, np.inf, np.where(neg, -np.inf, mean)))
    var = np.where(finite, var, np.inf)
    if np.any(np.isnan(mean)):  # +inf and -inf estimates both drawn: no mean exists
        raise ValueError(
            "`sampler` draws samples whose estimates are +inf and -inf: the mean does not exist"
        )
    return mean, var


def logged_kl_moments(
    policy_conditionals: Any,
    ref_conditionals: Any,
    sampler_conditionals: Any,
    *,
    estimator: str = "k1",
) -> tuple[float, float]:
    r"""Exact mean and variance of the sequence KL a trainer logs when the sampler draws.

    .. math::

        \widehat{\mathrm{KL}}(y) = \sum_t k\big(\log\pi(a_t|a_{<t}) - \log\pi_{ref}(a_t|a_{<t})\big),
        \qquad y \sim s; \qquad
        \mathbb{E}_s[\widehat{\mathrm{KL}}_{k1}] = \mathrm{KL}(s\|\pi_{ref}) - \mathrm{KL}(s\|\pi)

    Parameters
    ----------
    policy_conditionals, ref_conditionals : list of array_like
        The trainer's policy and the reference, token trees as in
        :mod:`klpolicy.sequences`.
    sampler_conditionals : list of array_like
        The tree the responses are drawn from (e.g.
        ``sampler_tree(policy, top_k=...).conditionals``).
    estimator : {"k1", "k2", "k3"}
        The per-token estimator, summed over each response.

    Returns
    -------
    (float, float)
        Mean and variance by enumeration of all ``V**T`` sequences. The mean is
        what the logged KL converges to; for k1 it is
        :math:`\mathrm{KL}(s\|\pi_{ref}) - \mathrm{KL}(s\|\pi)`, negative whenever
        the sampler is closer to the reference than to the policy. ``inf`` where
        the sampler reaches a token the reference rules out; ``-inf`` (k1) where it
        draws a token the policy rules out.

    Raises
    ------
    ValueError
        For invalid trees, trees of different vocabulary or length, or an unknown
        estimator.

    Notes
    -----
    On-policy (``sampler = policy``) this is
    :func:`klpolicy.sequences.sequence_kl_moments`. The k1 mean follows from
    :math:`\mathbb{E}_s[\log(\pi/\pi_{ref})] = \mathbb{E}_s[\log(s/\pi_{ref})] -
    \mathbb{E}_s[\log(s/\pi)]`. k3 stays non-negative per token
    (:math:`\rho - 1 - \log\rho` with :math:`\rho = \pi_{ref}/\pi`), so its logged
    mean is never negative, but under ``s`` it estimates neither KL.

    References
    ----------
    .. [1] Schulman, "Approximating KL Divergence", 2020 (k1, k2, k3).
    .. [2] TRL, ``docs/source/how_to_train.md`` and issues #235, #925, #1002, 2023
       (negative logged KL under top-k and ``min_length``).

    Examples
    --------
    >>> from klpolicy.sampling import logged_kl_moments, sampler_tree
    >>> pi = [[0.5, 0.5], [[0.9, 0.1], [0.2, 0.8]]]
    >>> ref = [[0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]]]
    >>> s = sampler_tree(pi, temperature=3.0).conditionals
    >>> [round(float(x), 4) for x in logged_kl_moments(pi, ref, s)]  # a negative logged KL
    [-0.0957, 0.758]
    """
    trees = [
        V.as_token_tree(name, c)
        for name, c in (
            ("policy_conditionals", policy_conditionals),
            ("ref_conditionals", ref_conditionals),
            ("sampler_conditionals", sampler_conditionals),
        )
    ]
    V.same_tree_shape("policy_conditionals", trees[0], "ref_conditionals", trees[1])
    V.same_tree_shape("policy_conditionals", trees[0], "sampler_conditionals", trees[2])
    name = get_estimator(estimator, kl_only=True).name
    p, q, s = trees
    T = len(p)
    prob = joint(s).astype(np.float64)
    total = np.zeros(prob.shape, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for t in range(T):
            ell = normalised_log_ratio(p[t].astype(np.float64), q[t].astype(np.float64))
            # log(pi/ref) = -inf where pi = 0 < ref; +inf where ref = 0 < pi
            ell = np.where(p[t] > 0, ell, np.where(q[t] > 0, -np.inf, 0.0))
            est = ESTIMATORS[name].value(ell)
            total = total + est.reshape(est.shape + (1,) * (T - t - 1))
    mean, var = _moments(prob.reshape(1, -1), total.reshape(1, -1))
    return float(mean[0]), float(var[0])


def _weights(policy: NDArray, sampler: NDArray, correction: str, threshold: float | None):
    """The per-sample weight c(x) on the sampler's support (0 off it)."""
    on = sampler > 0
    if correction == "none":
        return np.where(on, 1.0, 0.0)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        w = np.where(on, policy / np.where(on, sampler, 1.0), 0.0)
    if correction == "tis":
        return np.minimum(w, threshold)
    if correction == "mis":
        return np.where(w <= threshold, w, 0.0)
    return w


def _triple(policy, ref, sampler, axis, *, with_ref=True):
    pa = V.as_probabilities("policy", policy, axis)
    sa = V.as_probabilities("sampler", sampler, axis)
    pa, sa = V.broadcast_pair("policy", pa, "sampler", sa)
    arrays = [pa, sa]
    if with_ref:
        qa = V.as_probabilities("ref", ref, axis)
        qa, pa = V.broadcast_pair("ref", qa, "policy", pa)
        qa, sa = V.broadcast_pair("ref", qa, "sampler", sa)
        arrays = [pa, sa, qa]
    shape = np.broadcast_shapes(*(a.shape for a in arrays))
    dtype = V.result_dtype(*arrays)
    return dtype, [np.broadcast_to(a, shape).astype(np.float64) for a in arrays]


def _trace_variance(sn: NDArray, cr: NDArray, pn: NDArray, sq: NDArray) -> NDArray:
    """``E_s||c r (e_x - pi)||^2 - ||E_s[c r (e_x - pi)]||^2`` without overflow.

    The sums are formed on ``c r`` divided by a power of two near its largest entry
    (an exact scaling), and the result is multiplied back: the same value where the
    variance is finite, ``inf`` (no NaN) where it overflows (rewards past ~1e154).
    """
    big = np.max(np.abs(cr), axis=-1, keepdims=True)
    _, expo = np.frexp(np.where(np.isfinite(big) & (big > 0), big, 1.0))
    scale = np.ldexp(1.0, expo - 1)  # <= big: finite; |c r| / scale < 2
    u = cr / scale
    a = sn * u
    mean = a - pn * a.sum(-1, keepdims=True)
    second = np.sum(sn * u * u * sq, axis=-1)
    var = np.maximum(second - np.sum(mean * mean, axis=-1), 0.0)
    with np.errstate(over="ignore"):
        return (var * scale[..., 0]) * scale[..., 0]


def _correction(correction: Any, threshold: Any) -> tuple[str, float | None]:
    correction = V.as_choice("correction", correction, CORRECTIONS)
    if correction in ("tis", "mis"):
        if threshold is None:
            raise ValueError(f"`threshold` is required with correction={correction!r}; got None")
        return correction, V.as_scalar("threshold", threshold, "(0, inf]")
    if threshold is not None:
        raise ValueError(
            f"`threshold` is used only by correction='tis' or 'mis'; got {threshold!r} "
            f"with correction={correction!r}"
        )
    return correction, None


def corrected_kl_moments(
    policy: ArrayLike,
    ref: ArrayLike,
    sampler: ArrayLike,
    *,
    estimator: str = "k1",
    correction: str = "full",
    threshold: float | None = None,
    axis: int = -1,
) -> CorrectedMoments:
    r"""Exact mean, bias and variance of an importance-corrected KL estimate from sampler draws.

    .. math::

        \hat K(x) = c(x)\, k\big(\log\pi(x) - \log\pi_{ref}(x)\big), \quad x \sim s;
        \qquad \text{bias} = \mathbb{E}_s[\hat K] - \mathrm{KL}(\pi\|\pi_{ref})

    with :math:`c` one of :data:`CORRECTIONS` (module table).

    Parameters
    ----------
    policy : array_like
        The trainer's policy :math:`\pi` (whose KL to ``ref`` is wanted).
    ref : array_like
        The reference.
    sampler : array_like
        The law the samples come from (e.g. ``sampler_law(log(policy), top_k=...)``).
    estimator : {"k1", "k2", "k3", "abs"}
        The per-sample estimator (a row of :data:`klpolicy.estimators.ESTIMATORS`).
    correction : {"none", "full", "tis", "mis"}
        The weight :math:`c(x)`.
    threshold : float, optional
        ``C`` of ``"tis"`` (truncate the ratio at ``C``) and ``"mis"`` (drop samples
        with ratio above ``C``); required there, refused elsewhere.
    axis : int, optional
        The probability axis; other axes broadcast.

    Returns
    -------
    CorrectedMoments
        ``mean``, ``bias`` and ``variance`` of one sample's estimate, one per
        batch row (the standard error of an ``n``-sample mean is
        ``sqrt(variance / n)``). ``inf`` where an infinite estimate is drawn.

    Raises
    ------
    ValueError
        For invalid distributions, an unknown estimator or correction, or a
        ``threshold`` missing, not positive, or given where it has no meaning.

    Notes
    -----
    With ``"full"`` the mean is :math:`\sum_{x: s(x)>0} \pi(x) k(x)`: unbiased
    (up to the estimator's own bias) exactly when ``s`` covers ``pi``'s support;
    mass of ``pi`` that the sampler truncated is never seen, whatever the weight,
    so top-k/top-p/min-p leave a bias
    :math:`-\sum_{s(x)=0}\pi(x)k(x)` that no importance correction removes. The
    variance is :math:`\sum_x s\,c^2 k^2 - (\sum_x s\,c\,k)^2`; truncation and
    masking lower the second moment and add bias
    :math:`\sum_x s\,(c - w)\,k`. Samples with weight zero contribute nothing
    (also where :math:`k` is infinite).

    References
    ----------
    .. [1] Yao et al., "Your Efficient RL Framework Secretly Brings You
       Off-Policy RL Training", 2025, blog (fengyao.notion.site/off-policy-rl);
       "On the Rollout-Training Mismatch in Modern RL Systems", NeurIPS 2025 (TIS).
    .. [2] Owen, "Monte Carlo theory, methods and examples", 2013, ch. 9
       (importance sampling and its variance).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.sampling import corrected_kl_moments, sampler_law
    >>> pi, ref = np.array([0.6, 0.3, 0.1]), np.array([0.4, 0.4, 0.2])
    >>> s = sampler_law(np.log(pi), temperature=0.5)
    >>> m = corrected_kl_moments(pi, ref, s, correction="full")
    >>> round(float(m.bias), 12), round(float(m.variance), 4)
    (0.0, 0.327)
    >>> m = corrected_kl_moments(pi, ref, s, correction="none")
    >>> round(float(m.bias), 4)
    0.1583
    """
    name = get_estimator(estimator).name
    correction, threshold = _correction(correction, threshold)
    dtype, (pa, sa, qa) = _triple(policy, ref, sampler, axis)
    c = _weights(pa, sa, correction, threshold)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        pn = pa / pa.sum(-1, keepdims=True)
        qn = qa / qa.sum(-1, keepdims=True)
        ell = normalised_log_ratio(pn, qn)
        ell = np.where(pn > 0, ell, np.where(qn > 0, -np.inf, 0.0))
        k = ESTIMATORS[name].value(ell)
        vals = k if correction == "none" else np.where(c > 0, c * k, 0.0)
    mean, var = _moments(sa / sa.sum(-1, keepdims=True), vals)
    # the rows were validated in their own dtype (float32 rows at float32's tolerance);
    # the KL of the same float64-normalised rows the estimate used
    kl = np.asarray(kl_divergence(pn, qn), dtype=np.float64)
    with np.errstate(invalid="ignore"):
        bias = np.where(np.isinf(kl) & (mean == kl), 0.0, mean - kl)
    return CorrectedMoments(*(np.asarray(x).astype(dtype)[()] for x in (mean, bias, var)))


def corrected_gradient_moments(
    policy: ArrayLike,
    reward: ArrayLike,
    sampler: ArrayLike,
    *,
    correction: str = "full",
    threshold: float | None = None,
    axis: int = -1,
) -> CorrectedGradient:
    r"""Exact mean, bias and variance of a corrected policy gradient from sampler draws.

    .. math::

        \hat g(x) = c(x)\, r(x)\, \nabla_\theta \log \pi_\theta(x)
                  = c(x)\, r(x)\,(e_x - \pi), \quad x \sim s; \qquad
        g = \nabla_\theta \mathbb{E}_\pi[r] = \pi \odot (r - \mathbb{E}_\pi r)

    for a softmax policy :math:`\pi = \mathrm{softmax}(\theta)` (gradient in the
    logits), with :math:`c` one of :data:`CORRECTIONS`.

    Parameters
    ----------
    policy : array_like
        The trainer's policy :math:`\pi`.
    reward : array_like
        Per-outcome reward (or advantage) :math:`r(x)`, finite, same shape.
    sampler : array_like
        The law the samples come from.
    correction : {"none", "full", "tis", "mis"}
        The weight :math:`c(x)`.
    threshold : float, optional
        ``C`` of ``"tis"`` and ``"mis"``; required there, refused elsewhere.
    axis : int, optional
        The probability axis; other axes broadcast.

    Returns
    -------
    CorrectedGradient
        ``mean`` :math:`\mathbb{E}_s[\hat g]` and ``bias`` ``mean - g`` (same shape
        as ``policy``: one component per logit), and ``variance``, the trace of the
        covariance :math:`\mathbb{E}_s\|\hat g\|^2 - \|\mathbb{E}_s \hat g\|^2`,
        one per batch row.

    Raises
    ------
    ValueError
        For invalid distributions or rewards, an unknown correction, or a
        ``threshold`` missing, not positive, or given where it has no meaning.

    Notes
    -----
    :math:`\mathbb{E}_s[\hat g]_j = s_j c_j r_j - \pi_j \sum_x s(x) c(x) r(x)`. With
    ``"full"`` and ``s`` covering ``pi``'s support this is ``g`` exactly; a
    truncating sampler (top-k/top-p/min-p) leaves the bias of the missing mass.
    :math:`\|e_x - \pi\|^2 = 1 - 2\pi_x + \|\pi\|^2` gives the second moment in
    closed form.

    References
    ----------
    .. [1] Williams, "Simple statistical gradient-following algorithms", 1992,
       Machine Learning 8 (REINFORCE).
    .. [2] Yao et al., 2025, fengyao.notion.site/off-policy-rl (TIS, MIS).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.sampling import corrected_gradient_moments, sampler_law
    >>> pi, r = np.array([0.6, 0.3, 0.1]), np.array([1.0, 0.0, 2.0])
    >>> s = sampler_law(np.log(pi), top_k=2)
    >>> corrected_gradient_moments(pi, r, s, correction="full").bias.round(4)
    array([ 0.12,  0.06, -0.18])
    """
    correction, threshold = _correction(correction, threshold)
    dtype, (pa, sa) = _triple(policy, None, sampler, axis, with_ref=False)
    ra = V.as_rewards("reward", reward, axis)
    pa, ra = V.broadcast_pair("policy", pa, "reward", ra)
    sa = np.broadcast_to(sa, pa.shape)
    ra = np.broadcast_to(ra, pa.shape).astype(np.float64)
    pn = pa / pa.sum(-1, keepdims=True)
    sn = sa / sa.sum(-1, keepdims=True)
    c = _weights(pn, sn, correction, threshold)
    a = sn * c * ra  # s(x) c(x) r(x)
    mean = a - pn * a.sum(-1, keepdims=True)
    true = pn * (ra - np.sum(pn * ra, axis=-1, keepdims=True))
    sq = 1.0 - 2.0 * pn + np.sum(pn * pn, axis=-1, keepdims=True)
    var = _trace_variance(sn, c * ra, pn, sq)
    return CorrectedGradient(
        mean.astype(dtype)[()], (mean - true).astype(dtype)[()], var.astype(dtype)[()]
    )
