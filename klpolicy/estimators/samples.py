r"""Sample-based KL estimators k1, k2, k3 and ``|log r|``: values, exact moments and bias.

RLHF code rarely has the full next-token distributions at hand when it needs
:math:`\mathrm{KL}(\pi\|\pi_{ref})`; it has the log-probabilities of the
sampled tokens under both models and plugs them into a per-sample estimator.
With :math:`x \sim p` and :math:`\ell = \log p(x) - \log q(x)`:

=========  ======================================  =========================
name       per-sample value                         mean under :math:`x\sim p`
=========  ======================================  =========================
``k1``     :math:`\ell`                             :math:`\mathrm{KL}(p\|q)`
``k2``     :math:`\ell^2/2`                         :math:`\mathrm{KL}(p\|q) + O(\ell^3)`
``k3``     :math:`e^{-\ell} - 1 + \ell`             :math:`\mathrm{KL}(p\|q) - q(p = 0)`
``abs``    :math:`|\ell|`                           :math:`\ge \mathrm{KL}(p\|q)`
=========  ======================================  =========================

This module evaluates those estimators carefully (``k3`` through
``expm1mx``, so it is exact near zero and never negative), computes their exact
mean and variance on discrete distributions (:func:`moments`, :func:`bias`),
their off-policy (importance-weighted) forms, and reproduces Schulman's
Gaussian experiment in closed form (:func:`gaussian_moments`,
:func:`schulman_table`). What the estimators do when they are *trained on*
(placed in the reward or in the loss) is in :func:`expected_gradient` and
:func:`fixed_point`.

Sign convention: ``p`` is the distribution the samples come from (the policy
:math:`\pi`), ``q`` the one it is compared with (the reference
:math:`\pi_{ref}`). Schulman (2020) writes the same estimators for
:math:`\mathrm{KL}[q, p]` with samples from :math:`q` and :math:`r = p/q`; his
``k3 = (r - 1) - log r`` is ours with the roles of the letters swapped.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import array_api as _xp
from ..core.internal import kl_last as _kl_last
from ..core.internal import validation as V
from ._exact import _exact_bias, _normalised, _setup, _values, _weighted_moments
from ._inputs import as_normalised_log_probs
from .registry import ESTIMATORS

__all__ = [
    "abs_kl",
    "bias",
    "full_kl",
    "k1",
    "k2",
    "k3",
    "moments",
    "sample_estimates",
]

# ---------------------------------------------------------------------------
# per-sample estimators
# ---------------------------------------------------------------------------


def _per_sample(name, logp, logq, clip, log_ratio_clip):
    if _xp.is_foreign(logp, logq):  # torch, JAX, CuPy: the array-API kernel, same checks
        return _xp.estimate(ESTIMATORS[name].array_value, logp, logq, clip, log_ratio_clip)
    lp = V.as_log_probs("logp", logp, allow_neg_inf=False)
    lq = V.as_log_probs("logq", logq, allow_neg_inf=True)
    c = V.as_optional_clip("clip", clip)
    lc = V.as_optional_clip("log_ratio_clip", log_ratio_clip)
    try:
        lp, lq = np.broadcast_arrays(lp, lq)
    except ValueError:
        raise ValueError(
            f"the shapes of `logp` {lp.shape} and `logq` {lq.shape} do not broadcast"
        ) from None
    dtype = V.result_dtype(lp, lq)
    ell = lp.astype(dtype) - lq.astype(dtype)
    return _values(name, ell, c, lc).astype(dtype, copy=False)[()]


def _extend_doc(fn, text: str) -> None:
    """Append to ``fn``'s docstring; docstrings are None under ``python -OO``."""
    if fn.__doc__ is not None:
        fn.__doc__ += text


_PER_SAMPLE_DOC = r"""
    Parameters
    ----------
    logp : array_like
        Log-probabilities (or log-densities) of the samples under ``p``, the
        distribution they were drawn from. Finite: a sample drawn from ``p``
        has ``p(x) > 0``. Positive values are allowed (densities).
    logq : array_like
        Log-probabilities of the same samples under ``q`` (the reference);
        ``-inf`` is allowed and gives an infinite estimate. Broadcasts
        against ``logp``.
    clip : float, optional
        Clamp each estimate to ``[-clip, clip]``, as verl's ``low_var_kl`` does with
        ``clip = 10`` for k3. Off by default: clamping biases the mean
        downwards (see :func:`bias`, which accepts the same argument).
    log_ratio_clip : float, optional
        Clamp ``logq - logp`` to ``[-log_ratio_clip, log_ratio_clip]`` before
        evaluating (verl uses 20 for k3). Off by default; also
        biased.

    Returns
    -------
    ndarray or float
        One estimate per sample, the broadcast shape of ``logp`` and
        ``logq``; float32 when both inputs are float32.

    Raises
    ------
    ValueError
        For NaN inputs, an infinite ``logp``, ``logq = +inf``, shapes that do
        not broadcast, or a non-positive ``clip``.
"""


def k1(
    logp: ArrayLike,
    logq: ArrayLike,
    *,
    clip: float | None = None,
    log_ratio_clip: float | None = None,
) -> NDArray[np.floating]:
    r"""The naive estimator :math:`k_1 = \log p(x) - \log q(x)` of :math:`\mathrm{KL}(p\|q)`.

    .. math:: k_1(x) = \ell, \qquad \ell = \log p(x) - \log q(x),\ x \sim p
    """
    return _per_sample("k1", logp, logq, clip, log_ratio_clip)


def k2(
    logp: ArrayLike,
    logq: ArrayLike,
    *,
    clip: float | None = None,
    log_ratio_clip: float | None = None,
) -> NDArray[np.floating]:
    r"""The squared-log-ratio estimator :math:`k_2 = \tfrac12 (\log p - \log q)^2`.

    .. math:: k_2(x) = \tfrac12 \ell^2, \qquad \ell = \log p(x) - \log q(x),\ x \sim p
    """
    return _per_sample("k2", logp, logq, clip, log_ratio_clip)


def k3(
    logp: ArrayLike,
    logq: ArrayLike,
    *,
    clip: float | None = None,
    log_ratio_clip: float | None = None,
) -> NDArray[np.floating]:
    r"""Schulman's control-variate estimator :math:`k_3 = e^{-\ell} - 1 + \ell`.

    .. math:: k_3(x) = \frac{q(x)}{p(x)} - 1 - \log\frac{q(x)}{p(x)} \ \ge 0,
              \qquad \ell = \log p(x) - \log q(x),\ x \sim p
    """
    return _per_sample("k3", logp, logq, clip, log_ratio_clip)


def abs_kl(
    logp: ArrayLike,
    logq: ArrayLike,
    *,
    clip: float | None = None,
    log_ratio_clip: float | None = None,
) -> NDArray[np.floating]:
    r"""The absolute log-ratio :math:`|\log p(x) - \log q(x)|` (TRL's and verl's ``"abs"``).

    .. math:: k_{abs}(x) = |\ell|, \qquad \ell = \log p(x) - \log q(x),\ x \sim p
    """
    return _per_sample("abs", logp, logq, clip, log_ratio_clip)


_extend_doc(
    k1,
    _PER_SAMPLE_DOC
    + r"""
    Notes
    -----
    Unbiased: :math:`\mathbb{E}_p[k_1] = \mathrm{KL}(p\|q)`, but negative for
    every sample with :math:`q(x) > p(x)`; its standard deviation is large
    compared with the mean when ``p`` and ``q`` are close (20 times the KL
    for Gaussians a tenth of a standard deviation apart). It is the
    per-token penalty of InstructGPT-style PPO (Ziegler et al. 2019; TRL's
    ``kl_penalty="kl"``).

    References
    ----------
    .. [1] J. Schulman, "Approximating KL Divergence", blog post, 2020,
       http://joschu.net/blog/kl-approx.html.
    .. [2] Ziegler et al., "Fine-Tuning Language Models from Human
       Preferences", 2019, arXiv:1909.08593.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.estimators import k1
    >>> k1(np.log([0.5, 0.25]), np.log([0.25, 0.5])).round(6)
    array([ 0.693147, -0.693147])
    """,
)

_extend_doc(
    k2,
    _PER_SAMPLE_DOC
    + r"""
    Notes
    -----
    Non-negative but biased: its mean is the f-divergence with
    :math:`f(u) = \tfrac12 \log^2 u`, which agrees with the KL to second order
    in :math:`\ell`. The exact bias is
    :math:`-\mathbb{E}_p[e^{-\ell} - 1 + \ell - \ell^2/2] - q(p = 0)`
    (:func:`bias`); for two unit Gaussians it is :math:`\mu^4/8`. Called
    ``"mse"`` in TRL and verl.

    References
    ----------
    .. [1] J. Schulman, "Approximating KL Divergence", blog post, 2020,
       http://joschu.net/blog/kl-approx.html.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.estimators import k2
    >>> k2(np.log([0.5, 0.25]), np.log([0.25, 0.5])).round(6)
    array([0.240227, 0.240227])
    """,
)

_extend_doc(
    k3,
    _PER_SAMPLE_DOC
    + r"""
    Notes
    -----
    Unbiased whenever ``q`` puts no mass outside ``p``'s support, because
    :math:`\mathbb{E}_p[q/p - 1] = q(p > 0) - 1`; otherwise it is biased
    downwards by exactly :math:`q(p = 0)`. It is never negative (the gap of
    the convex function :math:`-\log` above its tangent). Evaluated as
    ``expm1mx(logq - logp)``: exact to a few ulp near :math:`\ell = 0`, where
    ``exp(x) - 1 - x`` returns rounding noise (sometimes negative). It
    overflows to ``inf`` when ``logq - logp`` exceeds about 709 (88 in float32):
    that is the correctly rounded value, not an error. This is the KL term of
    GRPO (Shao et al. 2024) and verl's ``"low_var_kl"``.

    References
    ----------
    .. [1] J. Schulman, "Approximating KL Divergence", blog post, 2020,
       http://joschu.net/blog/kl-approx.html.
    .. [2] Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical
       Reasoning in Open Language Models", 2024, arXiv:2402.03300 (GRPO).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.estimators import k3
    >>> k3(np.log([0.5, 0.25]), np.log([0.25, 0.5])).round(6)  # 0.5 - 1 + log 2, 2 - 1 - log 2
    array([0.193147, 0.306853])
    >>> float(k3(-1e-9, 0.0))  # naive exp(x) - 1 - x gives about 8.3e-17 here
    5.000000001666667e-19
    """,
)

_extend_doc(
    abs_kl,
    _PER_SAMPLE_DOC
    + r"""
    Notes
    -----
    Its mean :math:`\mathbb{E}_p|\ell|` is not the KL: it exceeds it by
    :math:`2\,\mathbb{E}_p[\max(-\ell, 0)]` and behaves like a total-variation-type
    distance (of order :math:`\sqrt{\mathrm{KL}}`) for close distributions.

    References
    ----------
    .. [1] von Werra et al., "TRL: Transformer Reinforcement Learning", 2020,
       https://github.com/huggingface/trl (``kl_penalty="abs"``).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.estimators import abs_kl
    >>> abs_kl(np.log([0.5, 0.25]), np.log([0.25, 0.5])).round(6)
    array([0.693147, 0.693147])
    """,
)


def full_kl(logp_all: ArrayLike, logq_all: ArrayLike, *, axis: int = -1):
    r"""The exact :math:`\mathrm{KL}(p\|q)` from full log-probability vectors over a vocabulary.

    .. math:: \mathrm{KL}(p\|q) = \sum_{v} e^{\log p_v} (\log p_v - \log q_v)

    Parameters
    ----------
    logp_all, logq_all : array_like
        Log-probabilities over the whole vocabulary along ``axis`` (each row
        normalised: logsumexp 0); ``-inf`` marks a zero probability. Batch
        axes (e.g. batch and sequence position) broadcast.
    axis : int, optional
        The vocabulary axis (default -1).

    Returns
    -------
    ndarray or float
        One non-negative value per batch row (the vocabulary axis removed);
        ``inf`` where ``p`` has mass on a token where ``q`` has none.

    Raises
    ------
    ValueError
        For NaN or ``+inf`` entries, rows whose logsumexp is not 0 within
        rounding, or sizes that differ along ``axis``.

    Notes
    -----
    This is what an estimator tries to approximate from one sampled token;
    computing it costs a pass over the vocabulary (TRL's and verl's ``"full"``).
    It is summed from non-negative terms :math:`q(u e^u - e^u + 1)`,
    :math:`u = \log p - \log q`, so it never returns a negative number.

    References
    ----------
    .. [1] Kullback and Leibler, "On Information and Sufficiency", 1951.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.estimators import full_kl
    >>> round(float(full_kl(np.log([0.5, 0.5]), np.log([0.25, 0.75]))), 6)
    0.143841
    """
    lp = as_normalised_log_probs("logp_all", logp_all, axis)
    lq = as_normalised_log_probs("logq_all", logq_all, axis)
    lp, lq = V.broadcast_pair("logp_all", lp, "logq_all", lq)
    dtype = V.result_dtype(lp, lq)
    lp, lq = lp.astype(dtype), lq.astype(dtype)
    with np.errstate(invalid="ignore", under="ignore"):
        p, q = np.exp(lp), np.exp(lq)
        p = p / p.sum(-1, keepdims=True)
        q = q / q.sum(-1, keepdims=True)
        return _kl_last(p, q).astype(dtype)[()]


# ---------------------------------------------------------------------------
# exact moments on discrete distributions
# ---------------------------------------------------------------------------


def moments(
    p: ArrayLike,
    q: ArrayLike,
    estimator: str,
    *,
    axis: int = -1,
    clip: float | None = None,
    log_ratio_clip: float | None = None,
) -> tuple[NDArray[np.floating], NDArray[np.floating]]:
    r"""Exact mean and variance of a per-sample KL estimator under sampling from ``p``.

    .. math::

        \mathbb{E}_p[k] = \sum_x p(x)\, k(x), \qquad
        \mathrm{Var}_p[k] = \sum_x p(x)\, \big(k(x) - \mathbb{E}_p[k]\big)^2

    Parameters
    ----------
    p : array_like
        The sampling distribution (the policy), probabilities along ``axis``.
    q : array_like
        The reference distribution, same size along ``axis``; batch axes broadcast.
    estimator : {"k1", "k2", "k3", "abs"}
        Which per-sample estimator.
    axis : int, optional
        The probability axis (default -1).
    clip, log_ratio_clip : float, optional
        As in :func:`k3`: the moments of the clamped estimator.

    Returns
    -------
    mean : ndarray or float
        The estimator's mean under ``p``, one value per batch row; ``inf`` when
        ``p`` puts mass where ``q`` has none (the estimate is infinite with
        positive probability), unless clamping makes it finite.
    variance : ndarray or float
        Its variance under ``p``, one value per batch row (``inf`` likewise). The
        variance of the mean of ``n`` independent samples is ``variance / n``.

    Raises
    ------
    ValueError
        For an unknown ``estimator`` (the message lists the valid names),
        invalid probabilities, or a non-positive ``clip``.

    Notes
    -----
    The log-ratio is evaluated as ``log1p((p - q)/q)``, and the ``k1`` mean
    comes from :func:`klpolicy.kl_divergence`, so nearly equal ``p`` and ``q``
    keep their relative precision. The variance is the two-pass sum above,
    never ``E[k^2] - E[k]^2``.

    References
    ----------
    .. [1] J. Schulman, "Approximating KL Divergence", 2020,
       http://joschu.net/blog/kl-approx.html.

    Examples
    --------
    >>> from klpolicy.estimators import moments
    >>> p, q = [0.5, 0.5], [0.25, 0.75]
    >>> [tuple(round(float(v), 6) for v in moments(p, q, k)) for k in ("k1", "k2", "k3")]
    [(0.143841, 0.301737), (0.161214, 0.006243), (0.143841, 0.002431)]
    """
    name, pa, qa, c, lc = _setup(p, q, estimator, axis, clip, log_ratio_clip)
    pn, _, ell = _normalised(pa, qa)
    k = _values(name, ell, c, lc)
    mean, var = _weighted_moments(pn, k)
    if ESTIMATORS[name].mean_is_kl and c is None and lc is None:
        # the mean is the KL (k1), summed from non-negative terms (the variance above is centred
        # on the heaviest outcome's value, exact for near point masses)
        mean = _kl_last(pa, qa)
        var = np.where(np.isfinite(mean), var, np.inf)
    return mean.astype(pa.dtype)[()], var.astype(pa.dtype)[()]


def bias(
    p: ArrayLike,
    q: ArrayLike,
    estimator: str,
    *,
    axis: int = -1,
    clip: float | None = None,
    log_ratio_clip: float | None = None,
) -> NDArray[np.floating]:
    r"""Exact bias :math:`\mathbb{E}_p[k] - \mathrm{KL}(p\|q)` of a per-sample estimator.

    .. math::

        b_{k_1} = 0, \quad
        b_{k_3} = -q(p = 0), \quad
        b_{k_2} = -\mathbb{E}_p\!\left[e^{-\ell} - 1 + \ell - \tfrac{\ell^2}{2}\right] - q(p = 0),
        \quad b_{abs} = 2\,\mathbb{E}_p[\max(-\ell, 0)]

    Parameters
    ----------
    p, q, estimator, axis, clip, log_ratio_clip
        As in :func:`moments`.

    Returns
    -------
    ndarray or float
        One value per batch row. ``nan`` is never returned: where the KL is
        infinite the bias of an unclamped estimator is reported as 0 (its
        mean is infinite too) and that of a clamped one as ``-inf``.

    Raises
    ------
    ValueError
        As in :func:`moments`.

    Notes
    -----
    The closed forms above use :math:`\mathbb{E}_p[q/p] = q(p > 0)`; they are
    summed from terms of one sign, so a bias of 1e-20 is resolved (the
    difference ``mean - KL`` would return rounding noise). ``k3`` is biased
    only when ``q`` has mass outside ``p``'s support, which a softmax policy
    never does. With clamping the bias is ``mean - KL`` computed directly;
    clamping k3 at ``clip`` removes the samples whose estimate exceeds it,
    which are the samples where ``q(x) / p(x)`` is large.

    References
    ----------
    .. [1] J. Schulman, "Approximating KL Divergence", 2020,
       http://joschu.net/blog/kl-approx.html.

    Examples
    --------
    >>> from klpolicy.estimators import bias
    >>> p, q = [0.5, 0.5], [0.25, 0.75]
    >>> [round(float(bias(p, q, k)), 6) for k in ("k1", "k2", "k3", "abs")]
    [0.0, 0.017373, 0.0, 0.405465]
    >>> round(float(bias([0.9, 0.1], [0.02, 0.98], "k3", clip=2.0)), 6)  # verl-style clamp at 2
    -1.197758
    """
    name, pa, qa, c, lc = _setup(p, q, estimator, axis, clip, log_ratio_clip)
    kl = _kl_last(pa, qa)
    if c is not None or lc is not None:
        mean, _ = moments(pa, qa, name, clip=c, log_ratio_clip=lc)
        with np.errstate(invalid="ignore"):
            out = np.where(np.isfinite(kl), mean - kl, np.where(np.isfinite(mean), -np.inf, 0))
        return out.astype(pa.dtype)[()]
    out = _exact_bias(*_normalised(pa, qa), name)
    return np.where(np.isfinite(kl), out, 0).astype(pa.dtype)[()]


def sample_estimates(
    p: ArrayLike,
    q: ArrayLike,
    estimator: str,
    n: int,
    rng: np.random.Generator | int,
    *,
    axis: int = -1,
    clip: float | None = None,
    log_ratio_clip: float | None = None,
) -> NDArray[np.floating]:
    r"""Draw ``n`` samples :math:`x_i \sim p` and return the per-sample estimates :math:`k(x_i)`.

    .. math:: \hat{\mathrm{KL}} = \frac1n \sum_{i=1}^n k(x_i), \qquad
              \mathrm{Var}[\hat{\mathrm{KL}}] = \mathrm{Var}_p[k] / n

    Parameters
    ----------
    p, q, estimator, axis, clip, log_ratio_clip
        As in :func:`moments`.
    n : int
        Number of samples per batch row, ``>= 1``.
    rng : numpy.random.Generator or int
        The source of randomness (an int is used as a seed).

    Returns
    -------
    ndarray
        Shape ``batch_shape + (n,)``: the estimates, in the order drawn.

    Raises
    ------
    ValueError
        As in :func:`moments`; for ``n < 1``; for an ``rng`` that is neither a
        Generator nor an int.

    Notes
    -----
    Use :func:`moments` for the exact mean and variance that these samples
    scatter around; tests and tutorials derive their tolerances from it.

    References
    ----------
    .. [1] J. Schulman, "Approximating KL Divergence", 2020,
       http://joschu.net/blog/kl-approx.html.

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.estimators import sample_estimates
    >>> est = sample_estimates([0.5, 0.5], [0.25, 0.75], "k3", 4, np.random.default_rng(0))
    >>> est.shape, bool((est >= 0).all())
    ((4,), True)
    """
    name, pa, qa, c, lc = _setup(p, q, estimator, axis, clip, log_ratio_clip)
    n = V.as_positive_int("n", n, hi=V.MAX_LOOP_COUNT)
    if rng is None:  # no default: draws of the estimates are reproducible only by a seed
        raise ValueError("`rng` must be a numpy.random.Generator or an int seed; got None")
    rng = V.as_rng("rng", rng)
    _, _, ell = _normalised(pa, qa)
    k = _values(name, ell, c, lc)
    batch = pa.shape[:-1]
    flat_p = pa.reshape(-1, pa.shape[-1]).astype(np.float64)
    flat_k = k.reshape(-1, k.shape[-1])
    out = np.empty((flat_p.shape[0], n), dtype=pa.dtype)
    for i, (row_p, row_k) in enumerate(zip(flat_p, flat_k, strict=True)):
        idx = rng.choice(row_p.size, size=n, p=row_p / row_p.sum())
        out[i] = row_k[idx]
    return out.reshape((*batch, n))
