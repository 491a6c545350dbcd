r"""The closed form on tensors: the core's one array-API kernel, with ``dim=`` for torch users.

These are the functions :func:`klpolicy.optimal_policy` and its siblings run
on torch tensors (:mod:`klpolicy.core._xp`): the same careful algorithm as for
numpy arrays, so that float64 tensors equal the numpy core to about 1e-12 at
every extreme (``beta`` from 0 to inf including subnormal values, tied
rewards, rewards of 1e308, reference entries of 1e-300 and 0). This module
only adds the torch conveniences:

* arguments that are not tensors (lists, numpy arrays, floats) are converted
  to the device and dtype of the first tensor argument (float64 when there
  is none), and the result is always a tensor;
* the probability axis may be given as ``dim=`` (torch's spelling) or
  ``axis=``;
* ``validate=False`` skips the value checks (NaN, negatives, row sums,
  ``beta >= 0``): each is one reduction and one boolean brought to the host,
  which a hot training loop on a GPU may want to avoid.

Every function is differentiable with respect to every floating tensor
argument, and the gradient is finite wherever the value is (no ``0 * inf``
from discarded branches). float16 and bfloat16 tensors are computed in
float32 and returned in their own dtype.
"""

from __future__ import annotations

import torch

from klpolicy.core.internal import array_api as _xp
from klpolicy.core.internal import validation as _V

__all__ = [
    "cross_entropy",
    "entropy",
    "k1",
    "k2",
    "k3",
    "kl_divergence",
    "optimal_kl",
    "optimal_policy",
    "soft_value",
    "total_variation",
]


def _axis(dim: int | None, axis: int | None) -> int:
    if dim is not None and axis is not None and dim != axis:
        raise ValueError(f"`dim` and `axis` name the same axis; got dim={dim} and axis={axis}")
    return -1 if dim is None and axis is None else (dim if dim is not None else axis)


def _tensors(*xs, names: tuple[str, ...] = ()):
    """The arguments as tensors on the first tensor's device (its dtype for converted ones).

    Non-tensors are read by the numpy validators first, so that ``None``, strings,
    ragged lists and the like are refused naming the caller's argument (``names``).
    """
    like = next((x for x in xs if isinstance(x, torch.Tensor)), None)
    out = []
    for i, x in enumerate(xs):
        if isinstance(x, torch.Tensor):
            out.append(x if like is None or x.device == like.device else x.to(like.device))
            continue
        if i < len(names):
            x = _V.as_float_array(names[i], x)
        if like is None:
            out.append(torch.as_tensor(x, dtype=torch.float64))
        else:
            dt = like.dtype if like.is_floating_point() else torch.float64
            out.append(torch.as_tensor(x, dtype=dt, device=like.device))
    return out


def _problem_tensors(ref, reward, beta):
    ref_t, rew_t = _tensors(ref, reward, names=("ref", "reward"))
    if isinstance(beta, torch.Tensor):
        beta = beta.to(ref_t.device)
    return ref_t, rew_t, beta


def optimal_policy(
    ref, reward, beta, *, dim: int | None = None, axis: int | None = None, validate: bool = True
) -> torch.Tensor:
    r"""The maximiser :math:`\pi^*_\beta = \pi_{ref} e^{r/\beta} / Z` on tensors.

    .. math::

        \pi^*_\beta(y) = \frac{\pi_{ref}(y)\, e^{r(y)/\beta}}{\sum_{y'} \pi_{ref}(y')\, e^{r(y')/\beta}}

    Parameters
    ----------
    ref : Tensor or array_like
        Reference probabilities along ``dim`` (non-negative, rows summing to 1).
    reward : Tensor or array_like
        Finite rewards, same size along ``dim``; other dimensions broadcast.
    beta : float or Tensor
        Coefficient ``>= 0``: ``0`` is the greedy limit, ``inf`` the reference.
        A tensor has size 1 along ``dim`` and broadcasts over the batch.
    dim, axis : int, optional
        The probability dimension (either spelling; default -1).
    validate : bool, optional
        Check the values (default). ``False`` skips the device-to-host checks.

    Returns
    -------
    Tensor
        :math:`\pi^*_\beta`, on the inputs' device, in their dtype.

    Raises
    ------
    ValueError
        The numpy core's messages: NaN, negative, infinite or non-normalised
        ``ref``; non-finite ``reward``; negative or NaN ``beta``; sizes that
        differ along ``dim``.

    Notes
    -----
    The same algorithm as :func:`klpolicy.optimal_policy` (log space
    relative to the best reward on the support; greedy and reference limits;
    zeros of ``ref`` stay zero). :math:`\partial\pi_i/\partial r_j =
    \pi_i(\delta_{ij} - \pi_j)/\beta`.

    References
    ----------
    .. [1] Rafailov et al., "Direct Preference Optimization", 2023, arXiv:2305.18290, eq. (4).

    Examples
    --------
    >>> import torch
    >>> from klpolicy.torch import optimal_policy
    >>> optimal_policy(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]), 0.5)
    tensor([0.8808, 0.1192])
    >>> optimal_policy(torch.tensor([0.3, 0.7], dtype=torch.float64), [1.0, 1.0], 1e-16)
    tensor([0.3000, 0.7000], dtype=torch.float64)
    """
    ref_t, rew_t, beta = _problem_tensors(ref, reward, beta)
    return _xp.optimal_policy(ref_t, rew_t, beta, axis=_axis(dim, axis), validate=validate)


def soft_value(
    ref, reward, beta, *, dim: int | None = None, axis: int | None = None, validate: bool = True
) -> torch.Tensor:
    r"""The soft value :math:`\beta\log\mathbb{E}_{\pi_{ref}}[e^{r/\beta}]` on tensors.

    .. math::

        V_\beta = \max_\pi\; \mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_{ref})

    Parameters
    ----------
    ref, reward, beta, dim, axis, validate
        As in :func:`optimal_policy`.

    Returns
    -------
    Tensor
        One value per batch row (``dim`` removed). Its gradient in ``reward``
        is :math:`\pi^*_\beta`, in ``beta`` it is :math:`-\mathrm{KL}(\pi^*_\beta\|\pi_{ref})`.

    Raises
    ------
    ValueError
        As in :func:`optimal_policy`.

    Notes
    -----
    At large ``beta`` the value is re-centred on the reference mean, so the
    correction :math:`\mathrm{Var}_{ref}(r)/(2\beta)` keeps its digits.

    References
    ----------
    .. [1] Haarnoja et al., "Reinforcement Learning with Deep Energy-Based Policies",
       2017, arXiv:1702.08165.

    Examples
    --------
    >>> import torch
    >>> from klpolicy.torch import soft_value
    >>> round(float(soft_value(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]), 0.5)), 6)
    0.71689
    """
    ref_t, rew_t, beta = _problem_tensors(ref, reward, beta)
    return _xp.soft_value(ref_t, rew_t, beta, axis=_axis(dim, axis), validate=validate)


def optimal_kl(
    ref, reward, beta, *, dim: int | None = None, axis: int | None = None, validate: bool = True
) -> torch.Tensor:
    r"""The KL of the optimal policy from the reference, on tensors.

    .. math::

        \mathrm{KL}(\pi^*_\beta\|\pi_{ref}), \qquad
        \frac{d\,\mathrm{KL}}{d\beta} = -\frac{\mathrm{Var}_{\pi^*_\beta}(r)}{\beta^3}

    Parameters
    ----------
    ref, reward, beta, dim, axis, validate
        As in :func:`optimal_policy`.

    Returns
    -------
    Tensor
        One value per batch row, from the greedy limit's at ``beta = 0`` to 0 at ``inf``.

    Raises
    ------
    ValueError
        As in :func:`optimal_policy`.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593.

    Examples
    --------
    >>> import torch
    >>> from klpolicy.torch import optimal_kl
    >>> round(float(optimal_kl(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]), 0.5)), 5)
    0.32781
    """
    ref_t, rew_t, beta = _problem_tensors(ref, reward, beta)
    return _xp.optimal_kl(ref_t, rew_t, beta, axis=_axis(dim, axis), validate=validate)


def kl_divergence(
    p, q, *, dim: int | None = None, axis: int | None = None, validate: bool = True
) -> torch.Tensor:
    r"""Kullback-Leibler divergence :math:`\mathrm{KL}(p\|q)` in nats, on tensors.

    .. math::

        \mathrm{KL}(p\|q) = \sum_y p(y)\log\frac{p(y)}{q(y)}

    Parameters
    ----------
    p, q : Tensor or array_like
        Probabilities along ``dim``; other dimensions broadcast.
    dim, axis, validate
        As in :func:`optimal_policy`.

    Returns
    -------
    Tensor
        One non-negative value per row; ``inf`` where ``p`` puts mass on a zero of ``q``.

    Raises
    ------
    ValueError
        For negative, NaN, infinite or non-normalised inputs, or sizes that differ.

    Notes
    -----
    Summed from the non-negative terms :math:`q(u e^u - e^u + 1)`,
    :math:`u = \log(p/q)` taken as ``log1p((p - q)/q)`` where ``p`` and ``q``
    are close: a KL of 1e-20 keeps its relative precision.

    References
    ----------
    .. [1] Kullback and Leibler, "On Information and Sufficiency", 1951.

    Examples
    --------
    >>> import torch
    >>> from klpolicy.torch import kl_divergence
    >>> round(float(kl_divergence(torch.tensor([0.88, 0.12]), torch.tensor([0.5, 0.5]))), 6)
    0.326222
    """
    p_t, q_t = _tensors(p, q, names=("p", "q"))
    return _xp.kl_divergence(p_t, q_t, axis=_axis(dim, axis), validate=validate)


def cross_entropy(
    p, q, *, dim: int | None = None, axis: int | None = None, validate: bool = True
) -> torch.Tensor:
    r"""Cross-entropy :math:`H(p, q) = -\sum_y p(y)\log q(y)` on tensors.

    Parameters
    ----------
    p, q : Tensor or array_like
        Probabilities along ``dim``.
    dim, axis, validate
        As in :func:`optimal_policy`.

    Returns
    -------
    Tensor
        One value per row; ``inf`` where ``p > 0 = q``.

    Raises
    ------
    ValueError
        As in :func:`kl_divergence`.

    References
    ----------
    .. [1] Cover and Thomas, "Elements of Information Theory", 2nd ed., 2006, ch. 2.

    Examples
    --------
    >>> import torch
    >>> from klpolicy.torch import cross_entropy
    >>> round(float(cross_entropy(torch.tensor([0.5, 0.5]), torch.tensor([0.9, 0.1]))), 6)
    1.203973
    """
    p_t, q_t = _tensors(p, q, names=("p", "q"))
    return _xp.cross_entropy(p_t, q_t, axis=_axis(dim, axis), validate=validate)


def entropy(p, *, dim: int | None = None, axis: int | None = None, validate: bool = True):
    r"""Shannon entropy :math:`H(p) = -\sum_y p(y)\log p(y)` on tensors (0 log 0 = 0).

    Parameters
    ----------
    p : Tensor or array_like
        Probabilities along ``dim``.
    dim, axis, validate
        As in :func:`optimal_policy`.

    Returns
    -------
    Tensor
        One value per row.

    Raises
    ------
    ValueError
        As in :func:`kl_divergence`.

    References
    ----------
    .. [1] Shannon, "A Mathematical Theory of Communication", 1948.

    Examples
    --------
    >>> import torch
    >>> from klpolicy.torch import entropy
    >>> round(float(entropy(torch.tensor([0.5, 0.5]))), 6)
    0.693147
    """
    (p_t,) = _tensors(p, names=("p",))
    return _xp.entropy(p_t, axis=_axis(dim, axis), validate=validate)


def total_variation(
    p, q, *, dim: int | None = None, axis: int | None = None, validate: bool = True
) -> torch.Tensor:
    r"""Total-variation distance :math:`\tfrac12\sum_y |p(y) - q(y)|` on tensors.

    Parameters
    ----------
    p, q : Tensor or array_like
        Probabilities along ``dim``.
    dim, axis, validate
        As in :func:`optimal_policy`.

    Returns
    -------
    Tensor
        One value in [0, 1] per row.

    Raises
    ------
    ValueError
        As in :func:`kl_divergence`.

    References
    ----------
    .. [1] Tsybakov, "Introduction to Nonparametric Estimation", 2009, sec. 2.4.

    Examples
    --------
    >>> import torch
    >>> from klpolicy.torch import total_variation
    >>> round(float(total_variation(torch.tensor([0.88, 0.12]), torch.tensor([0.5, 0.5]))), 6)
    0.38
    """
    p_t, q_t = _tensors(p, q, names=("p", "q"))
    return _xp.total_variation(p_t, q_t, axis=_axis(dim, axis), validate=validate)


def k1(logp, logq, *, clip=None, log_ratio_clip=None, validate: bool = True) -> torch.Tensor:
    r"""The k1 estimate of :math:`\mathrm{KL}(p\|q)` from a sample of p: :math:`\log p - \log q`.

    Parameters
    ----------
    logp, logq : Tensor
        Log-probabilities of the sampled outcomes under ``p`` and ``q``
        (``logq = -inf`` allowed: an infinite estimate).
    clip, log_ratio_clip : float, optional
        As in :func:`klpolicy.estimators.k1`.
    validate : bool, optional
        Check for NaN and infinities (default).

    Returns
    -------
    Tensor
        Per-sample estimates (broadcast shape); unbiased, can be negative.

    Raises
    ------
    ValueError
        As :func:`klpolicy.estimators.k1`: NaN, infinite ``logp``, ``logq = +inf``.

    References
    ----------
    .. [1] Schulman, "Approximating KL Divergence", 2020, http://joschu.net/blog/kl-approx.html.

    Examples
    --------
    >>> import torch
    >>> from klpolicy.torch import k1
    >>> k1(torch.tensor([-0.5]), torch.tensor([-1.0]))
    tensor([0.5000])
    """
    lp, lq = _tensors(logp, logq, names=("logp", "logq"))
    return _xp.k1(lp, lq, clip=clip, log_ratio_clip=log_ratio_clip, validate=validate)


def k2(logp, logq, *, clip=None, log_ratio_clip=None, validate: bool = True) -> torch.Tensor:
    r"""The k2 estimate :math:`\tfrac12(\log p - \log q)^2` (biased, low variance, non-negative).

    Parameters
    ----------
    logp, logq, clip, log_ratio_clip, validate
        As in :func:`k1`.

    Returns
    -------
    Tensor
        Per-sample estimates. Its gradient in ``logp`` is ``k1 * grad(logp)``,
        the unbiased score-function gradient of the KL when placed in the loss.

    Raises
    ------
    ValueError
        As in :func:`k1`.

    References
    ----------
    .. [1] Schulman, "Approximating KL Divergence", 2020.

    Examples
    --------
    >>> import torch
    >>> from klpolicy.torch import k2
    >>> k2(torch.tensor([-0.5]), torch.tensor([-1.0]))
    tensor([0.1250])
    """
    lp, lq = _tensors(logp, logq, names=("logp", "logq"))
    return _xp.k2(lp, lq, clip=clip, log_ratio_clip=log_ratio_clip, validate=validate)


def k3(logp, logq, *, clip=None, log_ratio_clip=None, validate: bool = True) -> torch.Tensor:
    r"""The k3 estimate :math:`e^{x} - 1 - x`, :math:`x = \log q - \log p` (unbiased, non-negative).

    Parameters
    ----------
    logp, logq, clip, log_ratio_clip, validate
        As in :func:`k1`.

    Returns
    -------
    Tensor
        Per-sample estimates, with a Taylor series for ``|x| < 0.2`` (a few
        ulp even at ``x = 1e-8``). Its gradient in ``logp`` has expectation
        :math:`-\mathbb{E}_q[\nabla\log p]`, the gradient of the *forward*
        KL: k3 in the loss is biased.

    Raises
    ------
    ValueError
        As in :func:`k1`.

    References
    ----------
    .. [1] Schulman, "Approximating KL Divergence", 2020.
    .. [2] Shao et al., "DeepSeekMath" (GRPO), 2024, arXiv:2402.03300.

    Examples
    --------
    >>> import torch
    >>> from klpolicy.torch import k3
    >>> k3(torch.tensor([-0.5]), torch.tensor([-1.0]))
    tensor([0.1065])
    """
    lp, lq = _tensors(logp, logq, names=("logp", "logq"))
    return _xp.k3(lp, lq, clip=clip, log_ratio_clip=log_ratio_clip, validate=validate)
