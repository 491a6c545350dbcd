r"""Preference games: the regularised Nash equilibrium of a preference matrix and Nash-MD.

Nash learning from human feedback (Munos et al. 2023, arXiv:2312.00886) replaces the
reward by a preference matrix ``P[i, j] = P(i preferred to j)`` (``P + P.T = 1``), which
need not be transitive (rock-paper-scissors), and the reward-maximising policy by the
equilibrium of the two-player constant-sum game

.. math::

    \pi^*_\tau = \arg\max_\pi \min_{\pi'}\;
        \pi^\top P \pi' - \tau\,\mathrm{KL}(\pi\|\mu) + \tau\,\mathrm{KL}(\pi'\|\mu).

*The fixed point.* The payoff is strongly concave in :math:`\pi` and strongly convex in
:math:`\pi'`, so the saddle point is unique. Against :math:`\pi'`, the best response is
the KL-regularised optimum of the reward :math:`P\pi'`,
:math:`\mathrm{BR}(\pi') = \mu\,e^{P\pi'/\tau}/Z` (:func:`klpolicy.optimal_policy`);
the minimiser's best response to :math:`\pi` is :math:`\mu\,e^{-P^\top\pi/\tau}/Z =
\mu\,e^{P\pi/\tau}/Z'` since :math:`P^\top\pi = \mathbf 1 - P\pi`: the same map. Swapping
the players maps a saddle point to a saddle point, and it is unique, so both play the same
policy, the one fixed point

.. math::

    \pi^*_\tau = \mathrm{softmax}\big(\log\mu + P\pi^*_\tau/\tau\big)
               = \mathrm{softmax}\big(\log\mu + A\pi^*_\tau/\tau\big),
    \qquad A = P - \tfrac12 \mathbf 1\mathbf 1^\top = \tfrac12 (P - P^\top),

(``A`` antisymmetric; ``P pi`` and ``A pi`` differ by the constant 1/2). Zeros of
:math:`\mu` stay zeros of :math:`\pi^*_\tau` (mass there has infinite KL).

*The duality gap.* :math:`\pi^\top P\pi = 1/2` for every :math:`\pi`, and the soft-value
identity :math:`J(\pi^*) - J(\pi) = \tau\,\mathrm{KL}(\pi\|\pi^*)` (:func:`klpolicy.suboptimality`)
give, for the pair :math:`(\pi, \pi)`,

.. math::

    \max_{\pi_1} P_\tau(\pi_1 \succ \pi) - \tfrac12 = \tfrac12 - \min_{\pi_2} P_\tau(\pi \succ \pi_2)
        = \tau\,\mathrm{KL}\big(\pi\,\|\,\mathrm{BR}(\pi)\big),

the exploitability (:func:`exploitability`); the duality gap is twice it, zero exactly at
the equilibrium, and the game's value is 1/2.

This module computes :func:`nash_equilibrium` (Newton's method on the fixed point in log
space, with a line search on the residual), :func:`best_response`, :func:`exploitability`,
the Nash-MD path :func:`nash_md_path` with its limit and exact asymptotic rate
:func:`nash_md_rate`, and the geometric mixture Nash-MD samples from, per token as TRL
does against per sequence: :func:`geometric_mixture_laws`.
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import kl_terms
from ..core.internal import validation as V
from ..sequences import joint as _joint
from ._inputs import as_preference_matrix

__all__ = [
    "GeometricMixtureLaws",
    "NashEquilibrium",
    "NashMDRate",
    "best_response",
    "exploitability",
    "geometric_mixture_laws",
    "nash_equilibrium",
    "nash_md_path",
    "nash_md_rate",
]

_EPS = float(np.finfo(np.float64).eps)
#: Newton iterations before the solver gives up at one tau (it needs 2 to 10 at tau >= 0.1).
_MAX_NEWTON = 500


class NashEquilibrium(NamedTuple):
    """The regularised Nash equilibrium of a preference game (see :func:`nash_equilibrium`)."""

    policy: NDArray  # pi*_tau, shape (n,), 0 off mu's support
    value: float  # min over opponents of P_tau(pi > pi'): 1/2 at the equilibrium, 1/2 - gap/2 here
    gap: float  # duality gap 2 tau KL(pi || BR(pi)) of the returned policy (rounding, ~1e-30)
    win_rate: float  # P(pi > mu) = pi^T P mu, the unregularised win rate against the reference
    iterations: int  # Newton iterations taken


class NashMDRate(NamedTuple):
    """Where constant-step Nash-MD converges and how fast (see :func:`nash_md_rate`)."""

    rate: (
        float  # exact asymptotic contraction factor per step, (1 - eta tau) sqrt(1 + eta^2 omega^2)
    )
    fixed_point: NDArray  # the limit of the path: BR_tau(mixture)
    mixture: NDArray  # the geometric mixture at the limit: the equilibrium at tau / (1 - eta tau)
    frequency: float  # omega: the largest rotation frequency of the linearised map


class GeometricMixtureLaws(NamedTuple):
    """The two geometric mixtures of a policy and a reference tree (see :func:`geometric_mixture_laws`)."""

    per_token: NDArray  # joint law of sequences sampled from the per-token (logit) mixture
    per_sequence: NDArray  # pi^(1-a) ref^a / Z over whole sequences
    kl: float  # KL(per_token || per_sequence)
    reverse_kl: float  # KL(per_sequence || per_token)


# ---------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------


def _game(preferences: ArrayLike, mu: ArrayLike | None) -> tuple[NDArray, NDArray, np.dtype]:
    """(P, mu, result dtype): P square with P + P^T = 1, mu a distribution of the same size."""
    raw = V.as_float_array("preferences", preferences)
    if raw.ndim != 2 or raw.shape[0] != raw.shape[1] or raw.shape[0] == 0:
        raise ValueError(
            f"`preferences` must be a non-empty square matrix (n, n); got shape {raw.shape}"
        )
    n = raw.shape[0]
    p = as_preference_matrix("preferences", raw, n, against="preferences")
    if mu is None:
        m = np.full(n, 1.0 / n)
        dtype = V.result_dtype(raw)
    else:
        m_raw = V.as_probabilities("mu", mu)
        if m_raw.ndim != 1 or m_raw.shape[0] != n:
            raise ValueError(
                f"`mu` must be one distribution over the {n} outcomes of `preferences`; "
                f"got shape {m_raw.shape}"
            )
        m = m_raw.astype(np.float64)
        dtype = V.result_dtype(raw, m_raw)
    return p, m, dtype


def _tau(tau: Any) -> float:
    return V.as_scalar("tau", tau, "(0, inf]")


def _skew(p: NDArray) -> NDArray:
    """A = (P - P^T)/2: exactly antisymmetric (P + P^T = 1 holds to its tolerance)."""
    return 0.5 * (p - p.T)


# ---------------------------------------------------------------------------
# the equilibrium
# ---------------------------------------------------------------------------


def _softmax(z: NDArray) -> NDArray:
    e = np.exp(z - z.max())
    return e / e.sum()


def _solve_fixed_point(
    a: NDArray, lmu: NDArray, tau: float, z0: NDArray, max_iter: int
) -> tuple[NDArray, int, bool]:
    r"""Solve ``z = log mu + A softmax(z) / tau + c`` on mu's support by damped Newton.

    Residual ``r(z) = z - log mu - A pi / tau`` centred (constants do not change pi);
    Jacobian ``J = I - A D / tau`` with ``D = diag(pi) - pi pi^T``. ``J`` is never
    singular (``A D`` is similar to an antisymmetric matrix plus zeros: its eigenvalues are
    imaginary), so the Newton direction is a descent direction of ``|r|^2`` and the
    Armijo line search converges from any start; the residual's sublevel sets are bounded
    modulo constants because ``A pi / tau`` is. Returns ``(z, iterations, converged)``.
    """
    m = lmu.size
    z = z0.copy()

    def residual(zz):
        pi = _softmax(zz)
        r = zz - lmu - (a @ pi) / tau
        return r - r.mean(), pi

    r, pi = residual(z)
    f = float(r @ r)
    # rounding of pi reaches the residual through A / tau, whatever A pi is
    a_scale = float(np.max(np.abs(a))) / tau if m > 1 else 0.0
    for it in range(1, max_iter + 1):
        scale = float(np.max(np.abs(z)) + np.max(np.abs(lmu))) + a_scale + 1.0
        tol = 2.0 * math.sqrt(m) * _EPS * scale
        if math.sqrt(f) <= tol:
            return z, it - 1, True
        # J = I - A (diag(pi) - pi pi^T) / tau, built in O(m^2)
        jac = np.outer(a @ pi, pi / tau) - a * (pi / tau)
        jac[np.diag_indices(m)] += 1.0
        step = np.linalg.solve(jac, -r)
        t = 1.0
        for _ in range(60):
            zn = z + t * step
            rn, pin = residual(zn)
            fn = float(rn @ rn)
            if fn <= (1.0 - 1e-4 * t) * f:
                break
            t *= 0.5
        else:  # no decrease along the Newton direction: done if at rounding level
            return z, it, math.sqrt(f) <= 1e3 * tol
        z, r, pi, f = zn - zn.max(), rn, pin, fn
        if float(np.max(np.abs(t * step))) <= 4.0 * _EPS * scale:
            return z, it, True
    return z, max_iter, False


#: Below this tau the equilibrium is reached by continuation in tau from here, each solve
#: started from the last one's log-policy, the step in tau shortened when a solve fails
#: (Newton from log mu alone needs hundreds of damped steps at tau = 1e-4).
_CONTINUATION_TAU = 0.1
_STEP_ITER = 60


def _equilibrium_z(a: NDArray, lmu: NDArray, tau: float) -> tuple[NDArray, int]:
    """The equilibrium's log-policy on the support, with continuation in tau for small tau."""
    t0 = max(tau, _CONTINUATION_TAU)
    z, total, ok = _solve_fixed_point(a, lmu, t0, lmu, _MAX_NEWTON)
    factor = 0.1
    while ok and t0 > tau:
        t1 = max(tau, t0 * factor)
        z1, it, ok1 = _solve_fixed_point(a, lmu, t1, z, _STEP_ITER)
        total += it
        if ok1:
            z, t0 = z1, t1
            factor = max(factor * factor, 0.01)
        elif factor < 0.95:  # too long a step in tau: a shorter one from the last solution
            factor = math.sqrt(factor)
        else:
            ok = False
    if not ok:  # pragma: no cover - not seen on any game; the proof says it cannot happen
        raise RuntimeError(
            f"nash_equilibrium: Newton did not converge (tau = {tau:.6g}); please report this game"
        )
    return z, total


def _on_support(p: NDArray, m: NDArray) -> tuple[NDArray, NDArray, NDArray]:
    s = m > 0
    return s, _skew(p)[np.ix_(s, s)], np.log(m[s])


def _br_log(a: NDArray, lmu: NDArray, pi: NDArray, tau: float) -> NDArray:
    """log BR(pi) on the support: log softmax(log mu + A pi / tau)."""
    w = lmu + (a @ pi) / tau
    c = w.max()
    return w - (c + math.log(float(np.exp(w - c).sum())))


def _exploit(a, lmu, pi, tau) -> float:
    """tau KL(pi || BR(pi)) on the support, in log space (precise near the equilibrium)."""
    if math.isinf(tau):  # BR = mu, and any move off mu costs tau * KL = inf
        same = np.allclose(pi, np.exp(lmu), rtol=4 * _EPS, atol=0.0)  # exp(log mu) to an ulp
        return 0.0 if same else math.inf
    lbr = _br_log(a, lmu, pi, tau)
    with np.errstate(divide="ignore"):
        u = np.log(pi) - lbr
    pos = pi > 0
    terms = np.where(pos, kl_terms(pi, np.exp(lbr), np.where(pos, u, 0.0)), np.exp(lbr))
    return tau * float(np.sum(terms))


def nash_equilibrium(
    preferences: ArrayLike, tau: float, *, mu: ArrayLike | None = None
) -> NashEquilibrium:
    r"""The regularised Nash equilibrium of a preference game (Munos et al. 2023).

    .. math::

        \pi^*_\tau = \arg\max_\pi\min_{\pi'}\; \pi^\top P\pi'
            - \tau\,\mathrm{KL}(\pi\|\mu) + \tau\,\mathrm{KL}(\pi'\|\mu),
        \qquad
        \pi^*_\tau = \mathrm{softmax}\big(\log\mu + P\pi^*_\tau/\tau\big)

    Parameters
    ----------
    preferences : array_like, shape (n, n)
        ``preferences[i, j]`` = P(i preferred to j): entries in [0, 1] and
        ``P + P.T = 1`` within ``max(sqrt(eps), 8 eps)`` = 1.5e-8 (so the diagonal is 1/2);
        it need not be transitive.
    tau : float
        The regularisation, ``> 0``; ``inf`` gives ``mu``.
    mu : array_like, shape (n,), optional
        The reference policy (default uniform). Its zeros are zeros of the equilibrium.

    Returns
    -------
    NashEquilibrium
        ``policy`` (shape ``(n,)``, float32 for float32 input), ``value`` (the worst-case
        regularised win rate :math:`\min_{\pi'} P_\tau(\pi\succ\pi')` = 1/2 at the
        equilibrium; the returned one differs by ``gap / 2``), ``gap`` (the duality gap
        :math:`2\tau\,\mathrm{KL}(\pi\|\mathrm{BR}(\pi))` of the returned policy),
        ``win_rate`` (:math:`P(\pi\succ\mu) = \pi^\top P\mu`) and ``iterations``.

    Raises
    ------
    ValueError
        If ``preferences`` is not square, has NaN or entries outside [0, 1], or breaks
        ``P + P.T = 1``; if ``tau`` is not a number ``> 0`` (NaN included); if ``mu`` is not
        a distribution over the ``n`` outcomes.

    Notes
    -----
    The symmetric fixed point is derived in :mod:`klpolicy.preference.games`. It is
    solved for the log-policy :math:`z` on :math:`\mu`'s support by Newton's method on the
    residual :math:`r(z) = z - \log\mu - A\,\mathrm{softmax}(z)/\tau` (modulo constants),
    ``A = (P - P.T)/2``, with an Armijo line search on :math:`|r|^2`, started at
    :math:`z = \log\mu`. The Jacobian :math:`I - A D/\tau`, :math:`D = \mathrm{diag}(\pi) -
    \pi\pi^\top`, has eigenvalues :math:`1 - i\omega/\tau` (``A D`` is similar to an
    antisymmetric matrix), so it is never singular and Newton converges globally and then
    quadratically, to a residual at rounding level (about 1e-15 relative in the policy).
    A 50-outcome game takes about a millisecond (``benchmarks/horizon_bench.py``).

    Limits: ``tau -> inf`` gives ``mu``; ``tau -> 0`` gives a Nash equilibrium of the
    unregularised game (with a Condorcet winner, the point mass on it).

    References
    ----------
    .. [1] Munos et al., "Nash Learning from Human Feedback", 2023, arXiv:2312.00886
       (ICML 2024), section 3 (the regularised preference game and its unique equilibrium).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.preference import nash_equilibrium
    >>> rps = [[0.5, 1.0, 0.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.5]]
    >>> eq = nash_equilibrium(rps, 0.1)
    >>> eq.policy.tolist(), eq.value
    ([0.3333333333333333, 0.3333333333333333, 0.3333333333333333], 0.5)
    >>> eq = nash_equilibrium(rps, 0.1, mu=[0.6, 0.3, 0.1])
    >>> eq.policy.round(4), eq.gap < 1e-25
    (array([0.4321, 0.2303, 0.3376]), True)
    """
    p, m, dtype = _game(preferences, mu)
    t = _tau(tau)
    s, a, lmu = _on_support(p, m)
    if math.isinf(t):
        pi_s, iters = m[s], 0
    else:
        z, iters = _equilibrium_z(a, lmu, t)
        pi_s = _softmax(z)
    gap = 2.0 * _exploit(a, lmu, pi_s, t)
    pi = np.zeros_like(m)
    pi[s] = pi_s
    win = float(pi @ p @ m)
    return NashEquilibrium(pi.astype(dtype), 0.5 - 0.5 * gap, gap, win, iters)


def _policy(name: str, policy: ArrayLike, m: NDArray) -> NDArray:
    pi = V.as_probabilities(name, policy).astype(np.float64)
    if pi.shape != m.shape:
        raise ValueError(
            f"`{name}` must be one distribution over the {m.size} outcomes of `preferences`; "
            f"got shape {pi.shape}"
        )
    off = (m == 0) & (pi > 0)
    if off.any():
        k = int(np.argmax(off))
        raise ValueError(f"`{name}` must be 0 where `mu` is 0; found {pi[k]:.6g} at index ({k},)")
    return pi


def best_response(
    policy: ArrayLike, preferences: ArrayLike, tau: float, *, mu: ArrayLike | None = None
) -> NDArray[np.floating]:
    r"""The regularised best response to a policy in the preference game.

    .. math::

        \mathrm{BR}(\pi) = \arg\max_{\pi'} P(\pi'\succ\pi) - \tau\,\mathrm{KL}(\pi'\|\mu)
            = \frac{\mu\,e^{P\pi/\tau}}{Z}

    Parameters
    ----------
    policy : array_like, shape (n,)
        The opponent's policy, 0 where ``mu`` is 0.
    preferences, tau, mu
        As in :func:`nash_equilibrium`.

    Returns
    -------
    ndarray, shape (n,)
        :func:`klpolicy.optimal_policy` of the reward ``P pi`` at ``beta = tau``; it is
        ``policy`` itself exactly when ``policy`` is the equilibrium.

    Raises
    ------
    ValueError
        As in :func:`nash_equilibrium`, and for a ``policy`` that is not a distribution over
        the ``n`` outcomes or puts mass where ``mu`` has none.

    References
    ----------
    .. [1] Munos et al., 2023, arXiv:2312.00886, section 3.

    Examples
    --------
    >>> from klpolicy.preference import best_response
    >>> best_response([0.0, 1.0], [[0.5, 0.9], [0.1, 0.5]], 0.4).round(4)  # 0 beats 1 nine times in ten
    array([0.7311, 0.2689])
    """
    p, m, dtype = _game(preferences, mu)
    t = _tau(tau)
    pi = _policy("policy", policy, m)
    s, a, lmu = _on_support(p, m)
    out = np.zeros_like(m)
    out[s] = m[s] if math.isinf(t) else np.exp(_br_log(a, lmu, pi[s], t))
    return out.astype(dtype)


def exploitability(
    policy: ArrayLike, preferences: ArrayLike, tau: float, *, mu: ArrayLike | None = None
) -> float:
    r"""How much a best response gains against a policy in the regularised preference game.

    .. math::

        \max_{\pi'} P_\tau(\pi'\succ\pi) - \tfrac12 = \tau\,\mathrm{KL}\big(\pi\,\|\,\mathrm{BR}(\pi)\big)

    with :math:`P_\tau(\pi'\succ\pi) = \pi'^\top P\pi - \tau\mathrm{KL}(\pi'\|\mu) +
    \tau\mathrm{KL}(\pi\|\mu)`; the duality gap of the pair :math:`(\pi, \pi)` is twice it.

    Parameters
    ----------
    policy, preferences, tau, mu
        As in :func:`best_response`.

    Returns
    -------
    float
        Non-negative; 0 exactly at :func:`nash_equilibrium`. At ``tau = inf`` it is 0 for
        ``mu`` itself and ``inf`` for every other policy.

    Raises
    ------
    ValueError
        As in :func:`best_response`.

    Notes
    -----
    :math:`\pi^\top P\pi = 1/2` for every :math:`\pi` (``P + P.T = 1``), and the
    best response's regularised payoff exceeds :math:`\pi`'s own by
    :math:`\tau\,\mathrm{KL}(\pi\|\mathrm{BR}(\pi))` (the identity of
    :func:`klpolicy.suboptimality`). Computed in log space, so that a policy
    within 1e-12 of the equilibrium gets an exploitability near 1e-24, not rounding.

    References
    ----------
    .. [1] Munos et al., 2023, arXiv:2312.00886, section 3.

    Examples
    --------
    >>> from klpolicy.preference import exploitability
    >>> rps = [[0.5, 1.0, 0.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.5]]
    >>> round(exploitability([1.0, 0.0, 0.0], rps, 1.0), 6)  # always rock: paper wins
    1.18027
    >>> exploitability([1/3, 1/3, 1/3], rps, 1.0) < 1e-30
    True
    """
    p, m, _ = _game(preferences, mu)
    t = _tau(tau)
    pi = _policy("policy", policy, m)
    s, a, lmu = _on_support(p, m)
    return _exploit(a, lmu, pi[s], t)


# ---------------------------------------------------------------------------
# Nash-MD
# ---------------------------------------------------------------------------


def _etas(eta: Any, tau: float, steps: int) -> NDArray:
    arr = np.asarray(eta, dtype=object if isinstance(eta, (str, bytes)) else None)
    if arr.ndim == 0:
        e = V.as_scalar("eta", eta, "(0, inf)")
        etas = np.full(steps, e)
    else:
        etas = V.as_float_array("eta", eta).astype(np.float64).ravel()
        if np.shape(eta) != (steps,):
            raise ValueError(
                f"`eta` must be one number or one step size per step, shape ({steps},); "
                f"got shape {np.shape(eta)}"
            )
        bad = ~(np.isfinite(etas) & (etas > 0))
        if bad.any():
            k = int(np.argmax(bad))
            raise ValueError(
                f"`eta` must hold finite numbers > 0; found {float(etas[k])!r} at index ({k},)"
            )
    over = etas * tau > 1.0 + 4 * _EPS
    if over.any():
        k = int(np.argmax(over))
        raise ValueError(
            f"`eta` * `tau` must be at most 1 (the mixture weight of the reference); "
            f"got eta = {etas[k]:.6g} with tau = {tau:.6g} at step {k}"
        )
    return np.minimum(etas, 1.0 / tau)


def nash_md_path(
    preferences: ArrayLike,
    tau: float,
    eta: float | ArrayLike,
    steps: int,
    *,
    mu: ArrayLike | None = None,
    init: ArrayLike | None = None,
) -> NDArray[np.floating]:
    r"""The policies of Nash-MD, step by step, on a tabular preference game (exact, no sampling).

    .. math::

        \pi_t^\mu = \frac{\pi_t^{1-\eta\tau}\,\mu^{\eta\tau}}{Z_t},\qquad
        \pi_{t+1} = \arg\max_\pi\;\eta\,P(\pi\succ\pi_t^\mu) - \mathrm{KL}(\pi\|\pi_t^\mu)
                  = \frac{\pi_t^\mu\,e^{\eta P\pi_t^\mu}}{Z'_t}

    Parameters
    ----------
    preferences, tau, mu
        As in :func:`nash_equilibrium` (``tau`` finite here).
    eta : float or array_like of shape (steps,)
        The step size, one for all steps or one per step (the paper's decreasing schedule is
        ``2 / (tau (t + 2))``); ``0 < eta * tau <= 1``.
    steps : int
        Number of updates, ``>= 1``.
    init : array_like, shape (n,), optional
        :math:`\pi_0` (default ``mu``); positive wherever ``mu`` is.

    Returns
    -------
    ndarray, shape (steps + 1, n)
        Row ``t`` is :math:`\pi_t`; row 0 is ``init``.

    Raises
    ------
    ValueError
        As in :func:`nash_equilibrium`; for ``eta`` not a positive number (or one per step),
        ``eta * tau > 1``, a bad ``steps``, or an ``init`` that is not a distribution
        positive on ``mu``'s support.

    Notes
    -----
    In the log-policy :math:`x_t` (up to constants) the step is
    :math:`x_{t+1} = (1-\eta\tau)\,x_t + \eta\tau\log\mu + \eta P\pi_t^\mu`. With a constant
    step it converges to :func:`nash_md_rate`'s ``fixed_point``, which is *not*
    :math:`\pi^*_\tau` but the best response to the equilibrium at
    :math:`\tau/(1-\eta\tau)`, within :math:`O(\eta)` of it; with the paper's decreasing
    steps it converges to :math:`\pi^*_\tau` with
    :math:`\mathrm{KL}(\pi^*_\tau\|\pi_T) \le 8/(\tau^2(T+1))` (the paper's Theorem 1).

    References
    ----------
    .. [1] Munos et al., "Nash Learning from Human Feedback", 2023, arXiv:2312.00886,
       section 6 (Nash-MD, eq. for :math:`\pi_t^\mu` and the update), Theorem 1.

    Examples
    --------
    >>> from klpolicy.preference import nash_md_path
    >>> rps = [[0.5, 1.0, 0.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.5]]
    >>> path = nash_md_path(rps, 0.5, 0.5, 200, init=[0.8, 0.1, 0.1])
    >>> path.shape, path[-1].round(8)
    ((201, 3), array([0.33333333, 0.33333333, 0.33333333]))
    """
    p, m, dtype = _game(preferences, mu)
    t = V.as_scalar("tau", tau, "(0, inf)")
    n_steps = V.as_count("steps", steps)
    etas = _etas(eta, t, n_steps)
    if init is None:
        pi0 = m.copy()
    else:
        pi0 = V.as_probabilities("init", init).astype(np.float64)
        if pi0.shape != m.shape:
            raise ValueError(
                f"`init` must be one distribution over the {m.size} outcomes of "
                f"`preferences`; got shape {pi0.shape}"
            )
        zero = (m > 0) & (pi0 == 0)
        if zero.any():
            raise ValueError(
                f"`init` must be positive wherever `mu` is; found 0 at index "
                f"({int(np.argmax(zero))},)"
            )
    s, a, lmu = _on_support(p, m)
    x = np.log(pi0[s])
    out = np.zeros((n_steps + 1, m.size))
    out[0] = pi0
    for k, e in enumerate(etas):
        w = (1.0 - e * t) * x + e * t * lmu  # log of the geometric mixture, up to a constant
        mix = _softmax(w)
        x = w + e * (a @ mix)
        x -= x.max()
        out[k + 1, s] = _softmax(x)
    return out.astype(dtype)


def nash_md_rate(
    preferences: ArrayLike, tau: float, eta: float, *, mu: ArrayLike | None = None
) -> NashMDRate:
    r"""Where constant-step Nash-MD converges, and its exact asymptotic rate.

    .. math::

        \pi_\eta = \mathrm{BR}_\tau(m_\eta),\quad m_\eta = \pi^*_{\tau/(1-\eta\tau)};
        \qquad
        \rho = (1-\eta\tau)\sqrt{1 + \eta^2\omega^2},\quad
        \omega = \big\|L^\top A L\big\|_2,\; LL^\top = \mathrm{diag}(m_\eta) - m_\eta m_\eta^\top

    Parameters
    ----------
    preferences, tau, mu
        As in :func:`nash_equilibrium` (``tau`` finite).
    eta : float
        The constant step, ``0 < eta * tau < 1``.

    Returns
    -------
    NashMDRate
        ``rate`` (:math:`\rho`: near the limit the error of :func:`nash_md_path` in the log-
        policy shrinks by this factor per step, exactly in the norm of
        :math:`L^\top(x - x_\eta)` for three outcomes; it converges iff :math:`\rho < 1`),
        ``fixed_point`` (:math:`\pi_\eta`, shape ``(n,)``), ``mixture`` (:math:`m_\eta`,
        the geometric mixture :math:`\pi_\eta^{1-\eta\tau}\mu^{\eta\tau}/Z` there) and
        ``frequency`` (:math:`\omega`).

    Raises
    ------
    ValueError
        As in :func:`nash_md_path`, and for ``eta * tau = 1`` (one step lands on the limit).

    Notes
    -----
    *The limit.* Write :math:`w = (1-\eta\tau)x + \eta\tau\log\mu` for the log-mixture. A
    fixed point :math:`x = w + \eta A\,\mathrm{softmax}(w) + c` gives
    :math:`\tau(x - \log\mu) = A m + c'`, so :math:`w = \log\mu + (1-\eta\tau)A m/\tau + c''`:
    the mixture :math:`m` is the equilibrium of the same game at
    :math:`\tau' = \tau/(1-\eta\tau)`, and :math:`x = \log\mu + A m/\tau + c`, the best
    response to it at :math:`\tau`. It equals :math:`\pi^*_\tau` only when the two
    equilibria coincide (rock-paper-scissors with a uniform :math:`\mu`); the paper's bound
    :math:`\mathrm{KL}(\pi^*_\tau\|\pi_T) \le (1-\eta\tau)^T\mathrm{KL}(\pi^*_\tau\|\pi_0) + 2\eta/\tau`
    allows this :math:`O(\eta)` offset.

    *The rate.* The map's Jacobian at the limit is
    :math:`J = (1-\eta\tau)(I + \eta A D)`, :math:`D = \mathrm{diag}(m) - mm^\top = LL^\top`
    with :math:`L = \mathrm{diag}(\sqrt m)(I - \sqrt m\sqrt m^\top)`. In :math:`y = L^\top x`
    (which forgets constants) it is :math:`(1-\eta\tau)(I + \eta B)` with
    :math:`B = L^\top A L` antisymmetric, a normal matrix whose eigenvalues
    :math:`(1-\eta\tau)(1 \pm i\eta\omega_k)` all have modulus
    :math:`(1-\eta\tau)\sqrt{1+\eta^2\omega_k^2}`; the largest is the rate. The
    :math:`(1-\eta\tau)` factor is the paper's per-step contraction; the rotation of the
    intransitive part adds the square root, so too large a step diverges
    (:math:`\rho \ge 1` for :math:`\eta \ge 2\tau/(\tau^2 + \omega^2)`, roughly).

    References
    ----------
    .. [1] Munos et al., 2023, arXiv:2312.00886, section 6 and Theorem 1.

    Examples
    --------
    >>> from klpolicy.preference import nash_md_rate
    >>> rps = [[0.5, 1.0, 0.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.5]]
    >>> r = nash_md_rate(rps, 0.5, 0.5)
    >>> round(r.rate, 12), r.fixed_point.tolist()  # 0.75 sqrt(1 + 1/48)
    (0.757772228311, [0.3333333333333333, 0.3333333333333333, 0.3333333333333333])
    """
    p, m, dtype = _game(preferences, mu)
    t = V.as_scalar("tau", tau, "(0, inf)")
    e = V.as_scalar("eta", eta, "(0, inf)")
    a_ = e * t
    if a_ >= 1.0:
        raise ValueError(
            f"`eta` * `tau` must be below 1 for a rate (at 1 one step lands on the limit); "
            f"got eta = {e:.6g} with tau = {t:.6g}"
        )
    s, a, lmu = _on_support(p, m)
    z, _ = _equilibrium_z(a, lmu, t / (1.0 - a_))
    mix = _softmax(z)
    fixed = np.exp(_br_log(a, lmu, mix, t))
    sq = np.sqrt(mix)
    proj = np.eye(mix.size) - np.outer(sq, sq)
    low = sq[:, None] * proj  # L = diag(sqrt m) (I - sqrt m sqrt m^T), D = L L^T
    b = low.T @ a @ low
    omega = float(np.linalg.norm(0.5 * (b - b.T), 2)) if mix.size > 1 else 0.0
    rate = (1.0 - a_) * math.sqrt(1.0 + (e * omega) ** 2)
    fp = np.zeros_like(m)
    fp[s] = fixed
    mx = np.zeros_like(m)
    mx[s] = mix
    return NashMDRate(rate, fp.astype(dtype), mx.astype(dtype), omega)


# ---------------------------------------------------------------------------
# the geometric mixture, per token and per sequence
# ---------------------------------------------------------------------------


def geometric_mixture_laws(
    policy_conditionals: Any, ref_conditionals: Any, mixture_coef: float
) -> GeometricMixtureLaws:
    r"""Nash-MD's geometric mixture on a token tree: per token (as TRL samples it) and per sequence.

    .. math::

        q_{tok}(a_t\mid a_{<t}) = \frac{\pi(a_t\mid a_{<t})^{1-\alpha}\,
            \pi_{ref}(a_t\mid a_{<t})^{\alpha}}{Z(a_{<t})},
        \qquad
        q_{seq}(y) = \frac{\pi(y)^{1-\alpha}\,\pi_{ref}(y)^{\alpha}}{Z}

    Parameters
    ----------
    policy_conditionals, ref_conditionals : list of array_like
        Token trees of the same shape (:mod:`klpolicy.sequences`).
    mixture_coef : float
        :math:`\alpha \in [0, 1]`, TRL's ``mixture_coef`` (the weight of the reference;
        Nash-MD's :math:`\eta\tau`).

    Returns
    -------
    GeometricMixtureLaws
        ``per_token`` and ``per_sequence``: joint laws of shape ``(V,)*T``; ``kl`` =
        :math:`\mathrm{KL}(q_{tok}\|q_{seq})` and ``reverse_kl`` =
        :math:`\mathrm{KL}(q_{seq}\|q_{tok})`.

    Raises
    ------
    ValueError
        For invalid trees, trees of different shapes, or ``mixture_coef`` outside [0, 1].

    Notes
    -----
    TRL's ``GeometricMixtureWrapper`` returns ``log_softmax(mixture_coef * ref_logits +
    (1 - mixture_coef) * policy_logits)`` at every position and ``generate`` samples from it
    (TRL v1.9.0, ``trl/experimental/nash_md/nash_md_trainer.py:48``, the mixing at lines
    85-87; the installed trl 1.16.0 no longer ships ``trl.experimental.nash_md``). That is
    :math:`q_{tok}`. Its sequence law is
    :math:`q_{tok}(y) = \prod_t \pi^{1-\alpha}\pi_{ref}^{\alpha}/Z(a_{<t})
    = q_{seq}(y)\,Z/\prod_t Z(a_{<t})`, so the two agree iff the product of the per-prefix
    normalisers is the same along every sequence, e.g. at :math:`\alpha \in \{0, 1\}` or when
    :math:`\pi = \pi_{ref}` below the first token. By Hölder, :math:`Z(a_{<t}) \le 1` with
    equality where the two agree on the next token, so the per-token mixture favours
    continuations of prefixes where they disagree. In general the per-token mixture is not
    the paper's :math:`\pi^\mu_t`, which is the sequence-level mixture.
    :math:`\log q_{seq}` is exact: a sum of per-token log-probabilities, normalised once.

    References
    ----------
    .. [1] Munos et al., 2023, arXiv:2312.00886, section 6 (the mixture over whole responses)
       and section 7 (its per-token approximation).

    Examples
    --------
    >>> from klpolicy.preference import geometric_mixture_laws
    >>> pol = [[0.9, 0.1], [[0.9, 0.1], [0.7, 0.3]]]
    >>> ref = [[0.5, 0.5], [[0.5, 0.5], [0.1, 0.9]]]
    >>> g = geometric_mixture_laws(pol, ref, 0.5)
    >>> g.per_token.round(4), g.per_sequence.round(4), round(g.kl, 6)
    (array([[0.5625, 0.1875],
           [0.0843, 0.1657]]), array([[0.5804, 0.1935],
           [0.0763, 0.1499]]), 0.001586)
    """
    pol = V.as_token_tree("policy_conditionals", policy_conditionals)
    ref = V.as_token_tree("ref_conditionals", ref_conditionals)
    V.same_tree_shape("policy_conditionals", pol, "ref_conditionals", ref)
    alpha = V.as_scalar("mixture_coef", mixture_coef, "[0, 1]")
    dtype = V.result_dtype(pol[0], ref[0])
    levels = []
    reach = np.ones(())  # per-token mixture mass of each prefix
    with np.errstate(divide="ignore"):
        for t, (cp, cr) in enumerate(zip(pol, ref)):
            w = _mix_logs(np.log(cp.astype(np.float64)), np.log(cr.astype(np.float64)), alpha)
            c = np.max(w, axis=-1, keepdims=True)
            c = np.where(np.isfinite(c), c, 0.0)
            e = np.exp(w - c)
            tot = e.sum(axis=-1, keepdims=True)
            stuck = (tot[..., 0] == 0) & (reach > 0)
            if stuck.any():
                idx = tuple(int(i) for i in np.argwhere(stuck)[0])
                raise ValueError(
                    f"the per-token mixture is undefined at position {t}, prefix {idx}: "
                    "`policy_conditionals` and `ref_conditionals` share no next token there"
                )
            # a prefix the mixture never reaches: any row will do (it carries no mass)
            row = np.where(tot > 0, e / np.where(tot > 0, tot, 1.0), 1.0 / e.shape[-1])
            levels.append(row)
            reach = reach[..., None] * row
        per_token = _joint(levels)
        lj = _mix_logs(np.log(_joint(pol)), np.log(_joint(ref)), alpha)
    c = np.max(lj)
    if not np.isfinite(c):
        raise ValueError(
            "`policy_conditionals` and `ref_conditionals` share no sequence: "
            "the sequence-level mixture is undefined"
        )
    e = np.exp(lj - c)
    per_seq = e / e.sum()
    kl = _kl_flat(per_token, per_seq)
    rkl = _kl_flat(per_seq, per_token)
    return GeometricMixtureLaws(per_token.astype(dtype), per_seq.astype(dtype), kl, rkl)


def _mix_logs(lp: NDArray, lr: NDArray, alpha: float) -> NDArray:
    """(1 - a) log p + a log r with 0 * (-inf) = 0 at the ends a = 0, 1."""
    if alpha == 0.0:
        return lp
    if alpha == 1.0:
        return lr
    return (1.0 - alpha) * lp + alpha * lr


def _kl_flat(p: NDArray, q: NDArray) -> float:
    p, q = p.ravel(), q.ravel()
    pos = p > 0
    if np.any(pos & (q == 0)):
        return math.inf
    with np.errstate(divide="ignore"):
        u = np.where(pos, np.log(np.where(pos, p, 1.0)) - np.log(np.where(q > 0, q, 1.0)), 0.0)
    terms = np.where(pos, kl_terms(p, q, u), q)
    return float(np.sum(terms))
