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
    # A = (r - m)/(s + eps) is invariant under r -> r/c, eps -> eps/c: the mean is taken in
    # units of c = max|r| (a reward of 1e308 cannot overflow it) and each group's deviations
    # in units of their own largest (a variance cannot underflow); a group whose rewards are
    # all equal has A = 0 (its deviations are 0), also at eps = 0
    c = float(np.max(np.abs(r), initial=0.0))
    r = r / c if c > 0 else r
    if group_size is None:
        n = (p > 0)[None, :].astype(np.float64)
        w, m, ddof = np.ones(1), np.atleast_1d(p @ r), 0
    else:
        G = V.as_positive_int("group_size", group_size, hi=V.MAX_LOOP_COUNT)
        if G < 2:
            raise ValueError(f"`group_size` must be at least 2; got {G}")
        n = _compositions(G, p.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            logp = np.log(p)
            terms = np.where(n > 0, n * logp, 0.0)
        logw = special.gammaln(G + 1) - special.gammaln(n + 1).sum(1) + terms.sum(1)
        w = np.exp(logw)
        m, ddof = n @ r / G, int(unbiased_std)
    dev = np.where(n > 0, r[None, :] - m[:, None], 0.0)
    unit = np.max(np.abs(dev), axis=1, keepdims=True)
    z = np.divide(dev, unit, out=np.zeros_like(dev), where=unit > 0)
    if group_size is None:
        s_z = np.sqrt(p @ z[0] ** 2)[None, None]
    else:
        s_z = np.sqrt((n * z**2).sum(1, keepdims=True) / (G - ddof))
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        eps_z = (
            np.where(unit > 0, eps / (c * unit), np.inf) if c > 0 else np.full_like(unit, np.inf)
        )
    denom = np.broadcast_to(s_z + eps_z, z.shape)
    adv = np.divide(z, denom, out=np.zeros_like(z), where=np.isfinite(denom) & (denom > 0))
    if group_size is None:
        g = p * adv[0]
    else:
        g = (w[:, None] * n * adv).sum(0) / G
    return g + beta * (q - p)


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
        For invalid ``ref`` or ``reward``, ``beta <= 0``, when the solver
        does not reach a zero (residual above 1e-10), or when the zero it reaches is
        unstable (an eigenvalue of positive real part of the expected update's Jacobian in
        the logits: training moves away from it, as in
        :func:`klpolicy.estimators.fixed_point`).

    Notes
    -----
    Solved by Newton-type root finding (``scipy.optimize.root``) on the logits
    of the reference's support, started at the forward-KL solution; the residual
    is measured relative to ``1 + beta`` (the field's scale). Summing
    over the ``C(G + V - 1, V - 1)`` group compositions is exact; keep ``G``
    and ``V`` small (``G = 16, V = 4``: 969 terms).

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
    unbiased_std = V.as_bool("unbiased_std", unbiased_std)
    sup = q > 0
    qs, rs = q[sup] / q[sup].sum(), r[sup]

    def field(theta_head):
        theta = np.append(theta_head, 0.0)
        p = np.exp(theta - theta.max())
        p /= p.sum()
        return grpo_expected_update(
            p, qs, rs, b, group_size=group_size, eps=eps, unbiased_std=unbiased_std
        )[:-1]

    start = np.log(qs)
    start = start[:-1] - start[-1]
    # scipy's hybrid Powell, not core.roots: a system in n - 1 logits, not a monotone scalar
    from scipy import optimize  # lazy: `import klpolicy` must not load scipy.optimize

    sol = optimize.root(field, start, method="hybr", options={"xtol": 1e-14})
    # relative residual: the field is O(1) advantages plus beta times a difference of
    # probabilities, so it is evaluated to about 1e-16 (1 + beta), not 1e-16
    resid = np.max(np.abs(field(sol.x))) / (1.0 + b) if sol.x.size else 0.0
    if not resid < 1e-10:
        raise ValueError(f"GRPO fixed point not found (residual {resid:.3g}); try another `eps`")
    theta = np.append(sol.x, 0.0)
    p = np.exp(theta - theta.max())
    p /= p.sum()

    def full_field(th):
        pt = np.exp(th - th.max())
        return grpo_expected_update(
            pt / pt.sum(), qs, rs, b, group_size=group_size, eps=eps, unbiased_std=unbiased_std
        )

    growth, tol = ascent_growth_rate(full_field, theta)
    if growth > tol:
        raise ValueError(
            f"GRPO: a stationary point at {np.array2string(p, precision=4, separator=', ')} "
            f"is unstable: training moves away from it (the expected update's Jacobian in the "
            f"logits has an eigenvalue of real part {growth:.3g} > 0)"
        )
    out = np.zeros_like(q)
    out[sup] = p
    return out


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
