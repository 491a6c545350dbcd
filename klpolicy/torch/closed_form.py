r"""Tensor twins of the closed form: same contract as the numpy core, on tensors.

Each function takes tensors (or anything ``torch.as_tensor`` accepts), keeps
the device and dtype of its first tensor argument, is differentiable with
respect to every floating input, and on CPU in float64 equals the numpy core
(:mod:`klpolicy.core.closed_form`, :mod:`klpolicy.core.divergences`) to about 1e-12.
Probabilities lie along ``dim`` (default -1); the other dimensions broadcast.

Zeros of the reference are handled as in the core: they stay zero, their
logarithm never enters a gradient (``torch.where`` on a safe value, so no
``0 * inf = nan`` in the backward pass), and mass off the reference's support
gives an infinite KL.
"""

from __future__ import annotations

import math

import torch

__all__ = ["k1", "k2", "k3", "kl_divergence", "optimal_policy", "soft_value"]

_SERIES_RADIUS = 0.2
# exp(x) - 1 - x = sum_{k>=2} x^k / k!  (16 terms, as in klpolicy.core._numerics)
_EXPM1MX = [1.0 / math.factorial(k) for k in range(2, 18)]


def _as_tensor(x, like: torch.Tensor | None = None) -> torch.Tensor:
    if isinstance(x, torch.Tensor):
        if not x.is_floating_point():
            x = x.to(torch.float64 if like is None else like.dtype)
        return x if like is None else x.to(device=like.device)
    if like is None:
        return torch.as_tensor(x, dtype=torch.float64)
    return torch.as_tensor(x, dtype=like.dtype, device=like.device)


def _check_probabilities(name: str, p: torch.Tensor) -> None:
    if p.ndim == 0:
        raise ValueError(f"`{name}` must have at least one dimension; got a scalar")
    with torch.no_grad():
        if not bool((~(p >= 0)).any()):  # one pass catches both NaN and negatives
            return
        if torch.isnan(p).any():
            raise ValueError(f"`{name}` must not contain NaN")
        neg = p < 0
        if neg.any():
            idx = tuple(int(i) for i in torch.nonzero(neg)[0])
            raise ValueError(
                f"`{name}` must be non-negative; found {float(p[idx]):.6g} at index {idx}"
            )


def _check_same_size(a: torch.Tensor, b: torch.Tensor, dim: int, names=("ref", "reward")):
    if a.shape[dim] != b.shape[dim]:
        raise ValueError(
            f"`{names[1]}` must have the same size as `{names[0]}` along the probability "
            f"axis; got {b.shape[dim]} and {a.shape[dim]}"
        )


def _beta(beta, like: torch.Tensor) -> torch.Tensor:
    b = _as_tensor(beta, like)
    with torch.no_grad():
        if torch.isnan(b).any():
            raise ValueError("`beta` must not be NaN")
        if (b < 0).any():
            raise ValueError(f"`beta` must be non-negative; found {float(b.min()):.6g}")
    return b


def _setup(ref, reward, beta, dim):
    ref_t = _as_tensor(ref)
    rew_t = _as_tensor(reward, ref_t)
    _check_probabilities("ref", ref_t)
    _check_same_size(ref_t, rew_t, dim)
    b = _beta(beta, ref_t)
    if b.ndim == 0:
        b = b.reshape((1,) * ref_t.ndim)
    ref_t, rew_t, b = torch.broadcast_tensors(ref_t, rew_t, b)
    return ref_t, rew_t, b


def _log_tilt(ref, reward, b, dim):
    """(support, log_ref, finite-beta logits) for broadcast inputs."""
    support = ref > 0
    log_ref = torch.log(torch.where(support, ref, torch.ones_like(ref)))
    finite = (b > 0) & torch.isfinite(b)
    safe_b = torch.where(finite, b, torch.ones_like(b))
    neg_inf = torch.full_like(ref, -math.inf)
    logits = torch.where(support, log_ref + reward / safe_b, neg_inf)
    return support, log_ref, logits, safe_b


def optimal_policy(ref, reward, beta, *, dim: int = -1) -> torch.Tensor:
    r"""The maximiser of :math:`\mathbb{E}_\pi[r] - \beta\,\mathrm{KL}(\pi\|\pi_{ref})`, on tensors.

    .. math::

        \pi^*_\beta = \operatorname{softmax}\big(\log\pi_{ref} + r/\beta\big)

    Parameters
    ----------
    ref : Tensor or array_like
        Reference probabilities along ``dim``; its device and dtype are kept.
    reward : Tensor or array_like
        Rewards, same size along ``dim``; other dimensions broadcast.
    beta : float or Tensor
        Coefficient ``>= 0``; ``0`` is the greedy limit, ``inf`` the reference.
        A tensor broadcasts against ``ref`` (size 1 along ``dim``).
    dim : int, optional
        The probability dimension.

    Returns
    -------
    Tensor
        :math:`\pi^*_\beta`, the broadcast shape, on ``ref``'s device and dtype.

    Raises
    ------
    ValueError
        For negative or NaN ``ref`` or ``beta``, or sizes that differ along ``dim``.

    Notes
    -----
    A softmax over the reference's support, with the greedy (``beta = 0``)
    and reference (``beta = inf``) limits selected by ``torch.where``; the
    gradient flows to ``ref``, ``reward`` and ``beta``.

    References
    ----------
    .. [1] Rafailov et al., "Direct Preference Optimization", 2023, arXiv:2305.18290, eq. (4).

    Examples
    --------
    >>> import torch
    >>> from klpolicy.torch import optimal_policy
    >>> optimal_policy(torch.tensor([0.5, 0.5]), torch.tensor([1.0, 0.0]), 0.5)
    tensor([0.8808, 0.1192])
    """
    if isinstance(beta, (int, float)) and 0 < beta < math.inf:
        # fast path for a plain positive coefficient: one masked softmax
        ref_t = _as_tensor(ref)
        rew_t = _as_tensor(reward, ref_t)
        _check_probabilities("ref", ref_t)
        _check_same_size(ref_t, rew_t, dim)
        if not (ref_t.requires_grad or rew_t.requires_grad):
            # log 0 = -inf masks the zeros by itself (rewards are finite)
            return torch.softmax(torch.log(ref_t) + rew_t / float(beta), dim=dim)
        ref_t, rew_t = torch.broadcast_tensors(ref_t, rew_t)
        support = ref_t > 0
        log_ref = torch.log(torch.where(support, ref_t, 1.0))
        return torch.softmax(
            torch.where(support, log_ref + rew_t / float(beta), -math.inf), dim=dim
        )
    ref_t, rew_t, b = _setup(ref, reward, beta, dim)
    support, _, logits, _ = _log_tilt(ref_t, rew_t, b, dim)
    pi = torch.softmax(logits, dim=dim)
    neg_inf = torch.full_like(rew_t, -math.inf)
    c = torch.amax(torch.where(support, rew_t, neg_inf), dim=dim, keepdim=True)
    best = torch.where(support & (rew_t == c), ref_t, torch.zeros_like(ref_t))
    greedy = best / best.sum(dim=dim, keepdim=True)
    plain = ref_t / ref_t.sum(dim=dim, keepdim=True)
    return torch.where(b == 0, greedy, torch.where(torch.isinf(b), plain, pi))


def soft_value(ref, reward, beta, *, dim: int = -1) -> torch.Tensor:
    r"""The soft value :math:`\beta\log\mathbb{E}_{\pi_{ref}}[e^{r/\beta}]`, on tensors.

    .. math::

        V_\beta = \beta \operatorname{logsumexp}\big(\log\pi_{ref} + r/\beta\big)

    Parameters
    ----------
    ref, reward, beta, dim
        As in :func:`optimal_policy`.

    Returns
    -------
    Tensor
        One value per batch row (``dim`` removed). Its gradient with respect to
        ``reward`` is :math:`\pi^*_\beta`.

    Raises
    ------
    ValueError
        As in :func:`optimal_policy`.

    Notes
    -----
    ``beta = 0`` gives the best reward on the support and ``beta = inf`` the
    reference mean. At very large ``beta`` the numpy core is more precise (it
    re-centres on the reference mean); the two agree to about
    ``1e-16 * max|r|`` in absolute terms.

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
    ref_t, rew_t, b = _setup(ref, reward, beta, dim)
    support, _, logits, safe_b = _log_tilt(ref_t, rew_t, b, dim)
    total = ref_t.sum(dim=dim, keepdim=True)
    value = safe_b.narrow(dim, 0, 1) * (
        torch.logsumexp(logits, dim=dim, keepdim=True) - torch.log(total)
    )
    neg_inf = torch.full_like(rew_t, -math.inf)
    c = torch.amax(torch.where(support, rew_t, neg_inf), dim=dim, keepdim=True)
    mean = (ref_t * rew_t).sum(dim=dim, keepdim=True) / total
    bk = b.narrow(dim, 0, 1)
    out = torch.where(bk == 0, c, torch.where(torch.isinf(bk), mean, value))
    return out.squeeze(dim)


def kl_divergence(p, q, *, dim: int = -1) -> torch.Tensor:
    r"""Kullback-Leibler divergence :math:`\mathrm{KL}(p\|q)` in nats, on tensors.

    .. math::

        \mathrm{KL}(p\|q) = \sum_y p(y)\log\frac{p(y)}{q(y)} - p(y) + q(y)

    Parameters
    ----------
    p, q : Tensor or array_like
        Probabilities along ``dim`` (rows summing to one); other dimensions
        broadcast. ``p``'s device and dtype are kept.
    dim : int, optional
        The probability dimension.

    Returns
    -------
    Tensor
        One non-negative value per row (``dim`` removed); ``inf`` where ``p``
        puts mass on a zero of ``q``.

    Raises
    ------
    ValueError
        For negative or NaN inputs or sizes that differ along ``dim``.

    Notes
    -----
    Summed from the non-negative terms ``p (log(p/q) - 1) + q`` (equal to the
    KL for normalised rows), so the result is never negative. Zeros of ``p``
    contribute ``q`` and do not enter the gradient through ``log 0``. The
    numpy core keeps full relative precision for KLs below 1e-16; this twin
    is exact to ``1e-16`` in absolute terms.

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
    p_t = _as_tensor(p)
    q_t = _as_tensor(q, p_t)
    _check_probabilities("p", p_t)
    _check_probabilities("q", q_t)
    _check_same_size(p_t, q_t, dim, ("p", "q"))
    p_t, q_t = torch.broadcast_tensors(p_t, q_t)
    pos_p, pos_q = p_t > 0, q_t > 0
    one = torch.ones_like(p_t)
    u = torch.log(torch.where(pos_p, p_t, one)) - torch.log(torch.where(pos_q, q_t, one))
    terms = torch.where(pos_p, p_t * (u - 1), torch.zeros_like(p_t)) + q_t
    terms = torch.where(pos_p & ~pos_q, torch.full_like(p_t, math.inf), terms)
    return terms.sum(dim=dim)


def k1(logp, logq) -> torch.Tensor:
    r"""The k1 estimate of :math:`\mathrm{KL}(p\|q)` from a sample of p: :math:`\log p - \log q`.

    Parameters
    ----------
    logp, logq : Tensor
        Log-probabilities of the sampled outcomes under ``p`` and ``q``.

    Returns
    -------
    Tensor
        Per-sample estimates (broadcast shape); unbiased, can be negative.

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
    logp = _as_tensor(logp)
    return logp - _as_tensor(logq, logp)


def k2(logp, logq) -> torch.Tensor:
    r"""The k2 estimate :math:`\tfrac12(\log p - \log q)^2` (biased, low variance, non-negative).

    Parameters
    ----------
    logp, logq : Tensor
        Log-probabilities of the sampled outcomes under ``p`` and ``q``.

    Returns
    -------
    Tensor
        Per-sample estimates. Its gradient in ``logp`` is ``k1 * grad(logp)``,
        the unbiased score-function gradient of the KL when placed in the loss.

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
    d = k1(logp, logq)
    return 0.5 * d * d


def k3(logp, logq) -> torch.Tensor:
    r"""The k3 estimate :math:`e^{x} - 1 - x`, :math:`x = \log q - \log p` (unbiased, non-negative).

    Parameters
    ----------
    logp, logq : Tensor
        Log-probabilities of the sampled outcomes under ``p`` and ``q``.

    Returns
    -------
    Tensor
        Per-sample estimates, evaluated with a Taylor series for ``|x| < 0.2``
        so that the relative error is a few ulp even at ``x = 1e-8``. Its
        gradient in ``logp`` has expectation :math:`-\mathbb{E}_q[\nabla\log p]`,
        the gradient of the *reverse* KL: k3 in the loss is biased.

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
    logp = _as_tensor(logp)
    x = _as_tensor(logq, logp) - logp
    small = torch.abs(x) < _SERIES_RADIUS
    xs = torch.where(small, x, torch.zeros_like(x))
    acc = torch.full_like(xs, _EXPM1MX[-1])
    for c in _EXPM1MX[-2::-1]:
        acc = acc * xs + c
    series = acc * xs * xs
    return torch.where(small, series, torch.expm1(x) - x)
