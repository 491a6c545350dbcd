r"""Where biased trainers converge, computed exactly (numpy).

GRPO (Shao et al. 2024) replaces the advantage by the group-normalised reward
:math:`A_i = (r_i - \bar r_G)/(s_G + \epsilon)` over a group of ``G`` samples of
the current policy, and puts the k3 estimator of :math:`\mathrm{KL}(\pi\|\pi_{ref})`
in the loss. Both change the fixed point:

* k3 in the loss has expected gradient :math:`\nabla\mathrm{KL}(\pi_{ref}\|\pi)`
  (the *forward* KL), so with plain advantages the stationary policy is
  :math:`\pi = \beta\pi_{ref}/(\lambda - r)` rather than :math:`\pi^*`;
* the division by the group standard deviation rescales the reward by a
  *policy-dependent* factor.

On a softmax (tabular) policy the expected update of the logits is

.. math::

    F(\pi)_j = \frac1G\,\mathbb{E}\big[n_j A_j\big] + \beta\,(\pi_{ref,j} - \pi_j),

with :math:`n \sim \mathrm{Multinomial}(G, \pi)` the group's counts. For a
large group, :math:`A \to (r - \mu_\pi)/\sigma_\pi` and :math:`F = 0` gives

.. math::

    \pi_j = \frac{\beta\sigma_\pi\,\pi_{ref,j}}{\beta\sigma_\pi + \mu_\pi - r_j},

the forward-KL fixed point at the effective coefficient :math:`\beta\sigma_\pi`.
:func:`grpo_fixed_point` solves :math:`F = 0` exactly for a finite ``G`` by
summing over all group compositions, or in the large-group limit.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import ascent_growth_rate, special
from ..core.internal import validation as V
from .gradients import _forward_kl_optimum

__all__ = ["grpo_expected_update", "grpo_fixed_point", "token_k3_fixed_point"]


def _compositions(g: int, v: int) -> NDArray[np.int64]:
    """All count vectors of ``v`` non-negative integers summing to ``g``."""
    if v == 1:
        return np.array([[g]])
    rows = [
        np.column_stack([np.full(len(c), k), c])
        for k in range(g + 1)
        for c in [_compositions(g - k, v - 1)]
    ]
    return np.concatenate(rows)


def grpo_expected_update(
    pi: ArrayLike,
    ref: ArrayLike,
    reward: ArrayLike,
    beta: float,
    *,
    group_size: int | None = 8,
    eps: float = 1e-6,
    unbiased_std: bool = True,
) -> NDArray[np.float64]:
    r"""The expected ascent direction of GRPO on the logits of a tabular policy.

    .. math::

        F_j = \tfrac1G\,\mathbb{E}_{n\sim\mathrm{Mult}(G,\pi)}[n_j A_j] + \beta(\pi_{ref,j} - \pi_j)

    Parameters
    ----------
    pi, ref : array_like, shape (V,)
        Current policy and reference.
    reward : array_like, shape (V,)
        Rewards.
    beta : float
        Coefficient of the k3 term in the loss.
    group_size : int or None, optional
        ``G``; ``None`` gives the large-group limit ``A = (r - mu_pi)/(sigma_pi + eps)``.
    eps : float, optional
        Added to the group standard deviation.
    unbiased_std : bool, optional
        Group standard deviation with ``G - 1`` (``torch.std``'s default) or ``G``.

    Returns
    -------
    ndarray, shape (V,)
        Expected negative gradient of the GRPO loss with respect to the logits.

    Examples
    --------
    >>> from klpolicy.estimators import grpo_expected_update
    >>> grpo_expected_update([0.5, 0.5], [0.5, 0.5], [1.0, 0.0], 0.1, group_size=None).round(4)
    array([ 0.5, -0.5])
    """
    V.one_problem(("pi", pi), ("ref", ref), ("reward", reward))
    p = V.as_probabilities("pi", pi).astype(np.float64, copy=False)
    q = V.as_probabilities("ref", ref).astype(np.float64, copy=False)
    r = V.as_rewards("reward", reward).astype(np.float64, copy=False)
    p, q = V.broadcast_pair("ref", q, "pi", p)[::-1]
    p, r = V.broadcast_pair("pi", p, "reward", r)
    if p.ndim != 1 or q.ndim != 1:
        raise ValueError(f"`pi` and `ref` must be one-dimensional; got shape {p.shape}")
    beta = V.as_positive_scalar("beta", beta)
    eps = V.as_scalar("eps", eps, "[0, inf)")
    unbiased_std = V.as_bool("unbiased_std", unbiased_std)
    if group_size is not None:
        group_size = V.as_positive_int("group_size", group_size, hi=V.MAX_LOOP_COUNT)
        if group_size < 2:
            raise ValueError(f"`group_size` must be at least 2; got {group_size}")
    scaled, eps_c = _unit_rewards(r, eps)
    adv, _ = _advantage_term(p, scaled, group_size, eps_c, int(unbiased_std))
    return adv + beta * (q - p)


def _unit_rewards(r: NDArray, eps: float) -> tuple[NDArray, float]:
    """(r / c, eps / c) with c = max |r|: A = (r - m)/(s + eps) does not change, and a reward
    of 1e308 cannot overflow the mean. eps / c may be inf (then every advantage is 0)."""
    c = float(np.max(np.abs(r), initial=0.0))
    if c == 0:
        return r, np.inf if eps > 0 else 0.0
    with np.errstate(over="ignore"):
        return r / c, eps / c


def _advantage_term(
    p: NDArray, r: NDArray, group_size: int | None, eps: float, ddof: int
) -> tuple[NDArray, NDArray]:
    """(E[n_j A_j]/G, its magnitude p_j max|A|): the advantage part of GRPO's update.

    ``r`` in units of its largest magnitude and ``eps`` in the same unit (``_unit_rewards``).
    The magnitude bounds the terms the sum cancels, the scale of its rounding."""
    if group_size is None:
        n = (p > 0)[None, :].astype(np.float64)
        w, m, ddof = np.ones(1), np.atleast_1d(p @ r), 0
    else:
        G = group_size
        n = _compositions(G, p.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            logp = np.log(p)
            terms = np.where(n > 0, n * logp, 0.0)
        logw = special.gammaln(G + 1) - special.gammaln(n + 1).sum(1) + terms.sum(1)
        w = np.exp(logw)
        m = n @ r / G
    # each group's deviations in units of their own largest (a variance cannot underflow);
    # a group whose rewards are all equal has A = 0 (its deviations are 0), also at eps = 0
    dev = np.where(n > 0, r[None, :] - m[:, None], 0.0)
    unit = np.max(np.abs(dev), axis=1, keepdims=True)
    z = np.divide(dev, unit, out=np.zeros_like(dev), where=unit > 0)
    if group_size is None:
        s_z = np.sqrt(p @ z[0] ** 2)[None, None]
    else:
        s_z = np.sqrt((n * z**2).sum(1, keepdims=True) / (group_size - ddof))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        eps_z = np.where(unit > 0, eps / unit, np.inf)
    denom = np.broadcast_to(s_z + eps_z, z.shape)
    adv = np.divide(z, denom, out=np.zeros_like(z), where=np.isfinite(denom) & (denom > 0))
    if group_size is None:
        return p * adv[0], p * np.abs(adv[0]).max(initial=0.0)
    return (w[:, None] * n * adv).sum(0) / group_size, p * np.abs(adv).max(initial=0.0)


def grpo_fixed_point(
    ref: ArrayLike,
    reward: ArrayLike,
    beta: float,
    *,
    group_size: int | None = 8,
    eps: float = 1e-6,
    unbiased_std: bool = True,
) -> NDArray[np.float64]:
    r"""The policy GRPO converges to on a tabular problem: the zero of its expected update.

    .. math::

        \tfrac1G\,\mathbb{E}_{n\sim\mathrm{Mult}(G,\pi)}[n_j A_j] = \beta\,(\pi_j - \pi_{ref,j})

    Parameters
    ----------
    ref : array_like, shape (V,)
        Reference probabilities (the zeros stay zero).
    reward : array_like, shape (V,)
        Rewards.
    beta : float
        Coefficient of the k3 term in the loss (``> 0``).
    group_size, eps, unbiased_std
        As in :func:`grpo_expected_update`.

    Returns
    -------
    ndarray, shape (V,)
        The stationary policy.

    Raises
    ------
    ValueError
        For invalid ``ref`` or ``reward``, ``beta <= 0``, ``group_size < 2``; when no
        zero is reached from any start (the message names ``beta`` and ``group_size``:
        the exact update stays above 1e-9 of the terms it sums); or when the zero reached
        is unstable (an eigenvalue of positive real part of the expected update's Jacobian
        in the logits: training moves away from it, as in
        :func:`klpolicy.estimators.fixed_point`).

    Notes
    -----
    The advantage :math:`(r - \bar r_G)/(s_G + \epsilon)` does not change under
    :math:`r \to r/c,\ \epsilon \to \epsilon/c`: the rewards are taken in units of their
    largest magnitude (rewards up to 1e308, any ``eps`` including 0). Where every advantage
    is 0 (equal rewards on the support, or ``eps`` beyond the rewards' range by more
    than the floats hold) the k3 term alone remains and the answer is ``ref``.

    *Large group* (``group_size=None``): :math:`\pi` is the k3-in-the-loss fixed point
    (:func:`klpolicy.estimators.fixed_point`) at the coefficient
    :math:`t = \beta(\sigma_\pi + \epsilon)`, and :math:`t` is the root of the scalar
    equation :math:`t = \beta(\sigma_{\pi_t} + \epsilon)`, bracketed in
    :math:`\log t` (Brent): reliable at every ``beta`` from 1e-300 to 1e300. A root
    below the smallest normal float is the greedy limit.

    *Finite group*: Levenberg-Marquardt on the logits of the reference's support, with
    each component of the update divided by its own terms
    (:math:`\pi_j + \beta(\pi_j + \pi_{ref,j})`), so that entries near 0 (small
    ``beta``) are solved as finely as the large ones; started at the reference, then at
    the large-group solution, then near each vertex from the best reward down. Accepted
    when every component is below 1e-9 of the terms it sums. Small groups without
    ``eps`` can have several stable zeros (a group of 2 sees only the order of its two
    rewards); the first start that converges to a stable zero decides. Summing over the
    ``C(G + V - 1, V - 1)`` group compositions is exact; keep ``G`` and ``V`` small
    (``G = 16, V = 4``: 969 terms).

    References
    ----------
    .. [1] Shao et al., "DeepSeekMath: Pushing the Limits of Mathematical
       Reasoning in Open Language Models", 2024, arXiv:2402.03300.

    Examples
    --------
    >>> from klpolicy.estimators import grpo_fixed_point
    >>> grpo_fixed_point([0.5, 0.5], [1.0, 0.0], 0.5, group_size=None).round(4)
    array([0.9472, 0.0528])
    """
    V.one_problem(("ref", ref), ("reward", reward))
    q = V.as_probabilities("ref", ref)
    r = V.as_rewards("reward", reward)
    q, r = V.broadcast_pair("ref", q, "reward", r)
    if q.ndim != 1:
        raise ValueError(f"`ref` must be one-dimensional; got shape {q.shape}")
    b = V.as_positive_scalar("beta", beta)
    eps = V.as_scalar("eps", eps, "[0, inf)")
    ddof = int(V.as_bool("unbiased_std", unbiased_std))
    if group_size is not None:
        group_size = V.as_positive_int("group_size", group_size, hi=V.MAX_LOOP_COUNT)
        if group_size < 2:
            raise ValueError(f"`group_size` must be at least 2; got {group_size}")
    sup = q > 0
    qs = q[sup].astype(np.float64) / q[sup].astype(np.float64).sum()
    rs, eps_c = _unit_rewards(r[sup].astype(np.float64), eps)
    out = np.zeros_like(q)
    if qs.size == 1 or np.all(rs == rs[0]) or eps_c == np.inf:
        out[sup] = qs  # every advantage is 0: the k3 term alone, whose zero is the reference
        return out

    def full_field(th):
        pt = np.exp(th - th.max())
        pt /= pt.sum()
        adv, _ = _advantage_term(pt, rs, group_size, eps_c, ddof)
        return adv + b * (qs - pt)

    def growth(p):
        """The largest real part of the Jacobian's eigenvalues, or None where stable."""
        if not np.all(p > 0):
            return None
        g, tol = ascent_growth_rate(full_field, np.log(p))
        return g if g > tol else None

    if group_size is None:
        p = _large_group_fixed_point(qs, rs, b, eps_c)
        rate = growth(p)
    else:
        p, rate = _finite_group_fixed_point(qs, rs, b, eps_c, group_size, ddof, growth)
    if rate is not None:
        raise ValueError(
            f"GRPO: a stationary point at {np.array2string(p, precision=4, separator=', ')} "
            f"is unstable: training moves away from it (the expected update's Jacobian in "
            f"the logits has an eigenvalue of real part {rate:.3g} > 0)"
        )
    out[sup] = p
    return out


def _large_group_fixed_point(q: NDArray, r: NDArray, beta: float, eps: float) -> NDArray:
    """The k3-in-the-loss fixed point at the coefficient t = beta (sigma_pi + eps) it implies.

    ``r`` in units of its largest magnitude. h(log t) = 1 - beta (sigma(pi_t) + eps) / t is
    positive at t = 2 beta (1 + eps) (sigma <= 1) and tends to -inf as t -> 0 (sigma ~ sqrt t):
    bracketed root finding (Brent) in log t. A root below the smallest normal float is the
    greedy limit to float64's resolution (the other entries are t ref_j / (r_max - r_j)).
    """
    from scipy import optimize  # lazy: `import klpolicy` must not load scipy.optimize

    def policy(log_t):
        with np.errstate(over="ignore"):  # t = inf (beta eps past the floats) gives the ref
            t = np.exp(log_t)
        return _forward_kl_optimum(q[None], r[None], np.array([[t]]))[0]

    def h(log_t):
        p = policy(log_t)
        sigma = np.sqrt(p @ (r - p @ r) ** 2)
        with np.errstate(divide="ignore"):
            return 1.0 - np.exp(np.log(beta) + np.log(sigma + eps) - log_t)

    hi = np.log(2.0) + np.log(beta) + np.log1p(eps)
    lo = hi
    floor = np.log(np.finfo(np.float64).tiny)
    while h(lo) >= 0:
        if lo <= floor:  # t below the floats: the other entries round to 0
            return _forward_kl_optimum(q[None], r[None], np.zeros((1, 1)))[0]
        lo = max(lo - 16.0, floor)
    if lo == hi:
        return policy(hi)
    return policy(optimize.brentq(h, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps))


def _finite_group_fixed_point(
    q: NDArray, r: NDArray, beta: float, eps: float, group_size: int, ddof: int, growth
) -> tuple[NDArray, float | None]:
    """Stable zero of the exact expected update over all group compositions, and None;
    or an unstable zero and its growth rate when no start reaches a stable one.

    Unknowns: the free logits (the last is 0). Residual: F_j / (p_j + beta (p_j + q_j)), each
    component in units of its own terms, so that entries near 0 are solved as finely as the
    large ones (Levenberg-Marquardt on all V components). Started at the reference, then at
    the large-group solution, then near each vertex from the best reward down; the first
    stable zero is the answer (``growth(p)``: None where stable).
    """
    from scipy import optimize  # lazy: `import klpolicy` must not load scipy.optimize

    def probs(z):
        theta = np.append(z, 0.0)
        p = np.exp(theta - theta.max())
        return p / p.sum()

    def parts(z):
        p = probs(z)
        adv, size = _advantage_term(p, r, group_size, eps, ddof)
        return p, adv + beta * (q - p), size + beta * (p + q)

    def resid(z):
        p, f, _ = parts(z)
        return f / (p + beta * (p + q))

    def logits(p):
        lp = np.log(p)
        return lp[:-1] - lp[-1]

    def vertex(k):
        """Near the vertex of outcome k: pi_j = beta q_j / (1 + beta) for j != k."""
        p = beta * q / (1.0 + beta)
        p[k] = 0.0
        p[k] = max(1.0 - p.sum(), 0.5)
        return p / p.sum()

    best, unstable = np.inf, None
    starts = [q, _large_group_fixed_point(q, r, beta, eps)]
    starts += [vertex(k) for k in np.argsort(-r, kind="stable")]
    for start in starts:
        if not np.all(start > 0):
            continue
        sol = optimize.root(resid, logits(start), method="lm", options={"xtol": 1e-15})
        p, f, size = parts(sol.x)
        err = float(np.max(np.abs(f) / size))
        if err < 1e-9:
            rate = growth(p)
            if rate is None:
                return p, None
            unstable = unstable or (p, rate)
        best = min(best, err)
    if unstable is not None:
        return unstable
    raise ValueError(
        f"GRPO fixed point not found for `beta` {beta:.6g} and `group_size` {group_size}: "
        f"the exact expected update stays at {best:.3g} of its terms; try another `eps`"
    )


def token_k3_fixed_point(ref_conditionals, reward: ArrayLike, beta: float) -> list[NDArray]:
    r"""Where per-token k3 in the loss (plain advantages) converges on a token tree.

    .. math::

        \pi(a\mid s) = \frac{\beta\,\pi_{ref}(a\mid s)}{\beta + V^\pi(s) - Q^\pi(s, a)},
        \qquad V^\pi(s) = \textstyle\sum_a \pi(a\mid s)\, Q^\pi(s, a)

    Parameters
    ----------
    ref_conditionals : list of array_like
        The reference token tree (``klpolicy.sequences`` layout).
    reward : array_like, shape (V,)*T
        Whole-sequence reward.
    beta : float
        Coefficient of the summed per-token k3 estimates in the loss (``> 0``).

    Returns
    -------
    list of ndarray
        The stationary conditionals, ``[t]`` of shape ``(V,)*(t+1)``.

    Raises
    ------
    ValueError
        For an invalid tree, reward or ``beta``.

    Notes
    -----
    The loss ``beta * sum_t k3(log pi(a_t|s_t), log ref(a_t|s_t))`` has expected
    gradient ``P_pi(s) (pi(.|s) - ref(.|s))`` in the logits of prefix ``s``: a
    forward KL *per prefix*. With the score-function term
    ``P_pi(s) pi(a|s) (Q(s, a) - V(s))`` the stationarity condition at each
    prefix is the one-step k3-in-the-loss condition with reward ``Q(s, .)``,
    so the fixed point follows by backward induction from ``Q = r`` at the
    last token, each step solved by ``klpolicy.estimators.fixed_point``.
    Summing k3 over tokens is not k3 of the sequence: compare
    ``estimators.fixed_point(joint(ref), r, beta, estimator="k3", placement="loss")``.

    References
    ----------
    .. [1] Shao et al., "DeepSeekMath", 2024, arXiv:2402.03300 (per-token k3 in GRPO).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.estimators import token_k3_fixed_point
    >>> tree = token_k3_fixed_point([np.array([0.5, 0.5])], np.array([1.0, 0.0]), 0.5)
    >>> tree[0].round(4)
    array([0.809, 0.191])
    """
    from .gradients import fixed_point

    conds = V.as_token_tree("ref_conditionals", ref_conditionals)
    vocab, length = conds[0].shape[0], len(conds)
    q_val = V.as_sequence_rewards("reward", reward, (vocab,) * length, "one reward per sequence")
    b = V.as_positive_scalar("beta", beta)
    out: list[NDArray] = [None] * length  # type: ignore[list-item]
    for t in range(length - 1, -1, -1):
        pi_t = fixed_point(conds[t], q_val, b, estimator="k3", placement="loss")
        out[t] = pi_t
        q_val = np.sum(pi_t * q_val, axis=-1)  # V(s) becomes Q of the previous position
    return out
