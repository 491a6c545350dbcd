r"""Closed-loop simulation of KL controllers on an analytic problem.

The plant is the KL-regularised problem itself: given a coefficient
:math:`\beta`, the policy a trainer converges to is
:math:`\pi^*_\beta \propto \pi_{ref} e^{r/\beta}`. A first-order lag in logit
space stands for a trainer that only moves part of the way per update. Since
the logits of :math:`\pi^*_\beta` are :math:`\log\pi_{ref} + \theta r + c` with
:math:`\theta = 1/\beta`, a lag on the logits is exactly a lag on
:math:`\theta`, and the lagged policy stays on the tilted family:

.. math::

    \theta_{t+1} = \lambda\,\theta_t + (1 - \lambda)/\beta_t, \qquad
    \pi_t = \pi^*_{1/\theta_t}, \qquad \theta_0 = 0 \ (\pi_0 = \pi_{ref}).

Each step the policy moves toward :math:`\pi^*_{\beta_t}` and the controller
updates :math:`\beta` from a KL measured (exactly, or by the k1 estimator on
samples) either *before* the move, on the policy that generated the batch
(TRL's order: sample, measure, optimise, adjust; the measurement lags the
coefficient by one step), or *after* it (the PPO paper's order, section 4:
optimise with :math:`\beta_t`, then compute :math:`d` and adjust).

Public names are re-exported by :mod:`klpolicy.control`.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core import beta_for_kl
from ..core.internal import prepare as _prepare
from ..core.internal import tilt as _tilt
from ..core.internal import validation as V
from ._inputs import as_unit_interval

__all__ = [
    "SimulationTrace",
    "StabilityRegion",
    "compare_controllers",
    "kl_elasticity",
    "simulate",
    "stability_region",
]


@dataclass(frozen=True)
class SimulationTrace:
    """The closed-loop trajectory of one controller.

    Attributes
    ----------
    beta : ndarray, shape (steps,)
        The coefficient in force at each step (before that step's update).
    kl : ndarray, shape (steps,)
        Exact KL to the reference, in nats per sequence, of the policy the
        controller measured at each step (the one before that step's move with
        ``measure="before"``, the one after it with ``measure="after"``).
    kl_measured : ndarray, shape (steps,)
        The KL that was fed to the controller, per sequence (equal to ``kl``
        when the KL is exact; the k1 estimate otherwise).
    reward : ndarray, shape (steps,)
        :math:`\\mathbb{E}_{\\pi_t}[r]`.
    target : float
        The controller's target in nats per sequence (nan if it has none).
    settle_time : float
        First step from which ``kl`` stays within ``settle_tol * target`` of the
        target until the end; ``inf`` if it is outside at the last step.
    overshoot : float
        Largest excursion of ``kl`` past the target, on the far side from the
        start, as a fraction of the initial error ``|target - kl[0]|``.
    steady_state_error : float
        Mean of ``kl`` over the last tenth of the steps (at least one) minus the
        target, in nats.
    """

    beta: NDArray[np.float64]
    kl: NDArray[np.float64]
    kl_measured: NDArray[np.float64]
    reward: NDArray[np.float64]
    target: float
    settle_time: float
    overshoot: float
    steady_state_error: float


@dataclass(frozen=True)
class StabilityRegion:
    """Behaviour of :class:`~klpolicy.control.AdaptiveKLController` over a lag x horizon grid.

    Attributes
    ----------
    lags : ndarray, shape (L,)
    horizons : ndarray, shape (H,)
    settle_time, overshoot, steady_state_error : ndarray, shape (L, H)
        As in :class:`SimulationTrace`, for each (lag, horizon).
    gain : ndarray, shape (H,)
        The loop gain :math:`g\\,\\eta` with :math:`g = n_{steps}/H`.
    elasticity : float
        :math:`\\eta = -d\\log\\mathrm{KL}/d\\log\\beta` at the target.
    """

    lags: NDArray[np.float64]
    horizons: NDArray[np.float64]
    settle_time: NDArray[np.float64]
    overshoot: NDArray[np.float64]
    steady_state_error: NDArray[np.float64]
    gain: NDArray[np.float64]
    elasticity: float


def _target_in_sequence_units(controller: Any, length: float) -> float:
    """The controller's target in nats per sequence, or nan when it has none."""
    target = getattr(controller, "target", None)
    if target is None:
        return math.nan
    return (
        float(target) * length
        if getattr(controller, "per", "sequence") == "token"
        else float(target)
    )


def _check_controller(name: str, c: Any) -> None:
    if not hasattr(c, "value") or not callable(getattr(c, "update", None)):
        raise ValueError(
            f"`{name}` must have a `.value` attribute and an `.update(current, n_steps)` "
            f"method; got {type(c).__name__}"
        )


def _problem(ref: ArrayLike, reward: ArrayLike) -> tuple[NDArray, NDArray]:
    V.one_problem(("ref", ref), ("reward", reward))
    ref_a, rew_a = _prepare(ref, reward, -1)
    if ref_a.ndim != 1:
        raise ValueError(f"`ref` must be one distribution (1-D); got shape {ref_a.shape}")
    return ref_a.astype(np.float64), rew_a.astype(np.float64)


def _metrics(kl: NDArray, target: float, tol: float) -> tuple[float, float, float]:
    """(settle_time, overshoot, steady_state_error) of one KL trace."""
    if not np.isfinite(target):
        return math.nan, math.nan, math.nan
    outside = np.abs(kl - target) > tol * target
    idx = np.flatnonzero(outside)
    tail = max(1, kl.size // 10)
    settle = 0.0 if idx.size == 0 else float(idx[-1] + 1)
    if settle > kl.size - tail:  # not inside the band for the whole last tenth
        settle = math.inf
    start_err = target - kl[0]
    if start_err == 0:
        over = 0.0
    else:
        side = math.copysign(1.0, start_err)
        over = max(0.0, float(np.max(side * (kl - target)))) / abs(start_err)
    return settle, over, float(np.mean(kl[-tail:]) - target)


def _move(theta: NDArray, beta: NDArray, lag: NDArray) -> NDArray:
    """One trainer update: the logits (i.e. theta = 1/beta) move toward pi*_beta by 1 - lag."""
    with np.errstate(divide="ignore", invalid="ignore"):
        goal = (1.0 / beta)[:, None]
        return np.where(lag == 0, goal, lag * theta + (1 - lag) * goal)


def _run(
    controllers: Sequence[Any],
    ref: NDArray,
    reward: NDArray,
    lags: NDArray,
    *,
    steps: int,
    n_steps: int,
    kl_samples: int | None,
    rng: Any,
    length: float,
    after: bool,
) -> dict[str, NDArray]:
    """Run B controllers (already copied) in lock-step; arrays of shape (B, steps)."""
    b = len(controllers)
    gen = V.as_rng("rng", rng) if kl_samples is not None else None
    per_token = np.array([getattr(c, "per", "sequence") == "token" for c in controllers])
    ref_b = np.broadcast_to(ref, (b, ref.size))
    rew_b = np.broadcast_to(reward, (b, reward.size))
    theta = np.zeros((b, 1))
    out = {k: np.empty((b, steps)) for k in ("beta", "kl", "kl_measured", "reward")}
    lag_c = lags[:, None]
    for t in range(steps):
        beta = np.array([float(c.value) for c in controllers])
        bad = ~(beta >= 0)
        if bad.any():
            i = int(np.flatnonzero(bad)[0])
            raise ValueError(
                f"controller {i} set its coefficient to {float(beta[i])!r} at step {t}; "
                "a KL coefficient must be non-negative"
            )
        if after:
            theta = _move(theta, beta, lag_c)
        with np.errstate(divide="ignore"):
            tilt = _tilt(ref_b, rew_b, 1.0 / theta)
        kl = tilt.kl[:, 0]
        if gen is None:
            measured = kl
        else:
            counts = gen.multinomial(kl_samples, tilt.pi)
            u = np.where(counts > 0, tilt.u, 0.0)  # log(pi/ref) on the sampled outcomes
            measured = np.sum(counts * u, axis=-1) / kl_samples
        out["beta"][:, t] = beta
        out["kl"][:, t] = kl
        out["kl_measured"][:, t] = measured
        out["reward"][:, t] = tilt.mean[:, 0]
        if not after:
            theta = _move(theta, beta, lag_c)
        fed = np.where(per_token, measured / length, measured)
        for c, f in zip(controllers, fed, strict=True):
            c.update(float(f), n_steps)
    return out


def _as_measure(measure: Any) -> bool:
    """True when the KL is measured after the update (PPO paper), False before (TRL)."""
    if measure not in ("before", "after"):
        raise ValueError(f"`measure` must be 'before' or 'after'; got {measure!r}")
    return measure == "after"


def _common(steps, n_steps, lag, kl_samples, length, settle_tol):
    steps = V.as_positive_int("steps", steps, hi=V.MAX_LOOP_COUNT)
    n_steps = V.as_positive_int("n_steps", n_steps)
    lag = as_unit_interval("lag", lag)
    if kl_samples is not None:
        kl_samples = V.as_positive_int("kl_samples", kl_samples, hi=V.MAX_LOOP_COUNT)
    length = V.as_positive_scalar("length", length)
    settle_tol = V.as_positive_scalar("settle_tol", settle_tol)
    return steps, n_steps, lag, kl_samples, length, settle_tol


def _traces(controllers, out, length, settle_tol) -> list[SimulationTrace]:
    traces = []
    for i, c in enumerate(controllers):
        target = _target_in_sequence_units(c, length)
        settle, over, sse = _metrics(out["kl"][i], target, settle_tol)
        traces.append(
            SimulationTrace(
                beta=out["beta"][i].copy(),
                kl=out["kl"][i].copy(),
                kl_measured=out["kl_measured"][i].copy(),
                reward=out["reward"][i].copy(),
                target=target,
                settle_time=settle,
                overshoot=over,
                steady_state_error=sse,
            )
        )
    return traces


def simulate(
    controller: Any,
    ref: ArrayLike,
    reward: ArrayLike,
    *,
    steps: int,
    n_steps: int = 1,
    lag: float = 0.0,
    kl_samples: int | None = None,
    rng: np.random.Generator | int | None = None,
    length: float = 1.0,
    settle_tol: float = 0.05,
    measure: str = "before",
) -> SimulationTrace:
    r"""Close the loop between a KL controller and the exact KL-regularised optimum.

    .. math::

        \pi_t = \pi^*_{1/\theta_t},\quad
        \theta_{t+1} = \lambda\theta_t + \frac{1-\lambda}{\beta_t},\quad
        \beta_{t+1} = \mathrm{update}\big(\beta_t,\ \widehat{\mathrm{KL}}(\pi_{t}\|\pi_{ref})\big)
        \ \text{("before")}\ \text{or}\
        \mathrm{update}\big(\beta_t,\ \widehat{\mathrm{KL}}(\pi_{t+1}\|\pi_{ref})\big)
        \ \text{("after")}

    Parameters
    ----------
    controller : object
        Anything with ``.value`` and ``.update(current, n_steps)`` (the
        controllers of this module, TRL's, your own). It is deep-copied: the
        object passed in is not modified.
    ref, reward : array_like, shape (V,)
        The analytic problem: one reference distribution and its rewards. An
        outcome stands for a whole response.
    steps : int
        Number of controller updates.
    n_steps : int, optional
        Passed to ``update`` each step (samples per update; TRL passes the
        batch size).
    lag : float, optional
        :math:`\lambda \in [0, 1)`: the fraction of the logit gap to
        :math:`\pi^*_{\beta_t}` that remains after one update. 0 (default) is
        an instant response, :math:`\pi_{t+1} = \pi^*_{\beta_t}`.
    kl_samples : int, optional
        If given, the controller sees the k1 estimate
        :math:`\frac1n\sum_i \log\frac{\pi_t(y_i)}{\pi_{ref}(y_i)}`,
        :math:`y_i \sim \pi_t`, from this many samples; otherwise the exact KL.
    rng : numpy.random.Generator or int, optional
        Source of the samples (a seed is passed to ``default_rng``).
    length : float, optional
        Tokens per response. A controller whose ``per`` is ``"token"`` is fed
        the per-sequence KL divided by ``length``, and its target is multiplied
        by ``length`` for the trace (default 1).
    settle_tol : float, optional
        Relative band around the target used for ``settle_time`` (default 0.05).
    measure : {"before", "after"}, optional
        Whether the controller sees the KL of the policy before this step's
        move (``"before"``, default: TRL's PPO loop, where the KL comes from the
        rollouts of the policy being updated) or after it (``"after"``: the PPO
        paper's section 4, where :math:`d` is computed once the policy has been
        optimised with :math:`\beta_t`).

    Returns
    -------
    SimulationTrace
        ``.beta``, ``.kl``, ``.kl_measured``, ``.reward`` of shape ``(steps,)``,
        and ``.target``, ``.settle_time``, ``.overshoot``,
        ``.steady_state_error``.

    Raises
    ------
    ValueError
        For an invalid problem (as in :func:`klpolicy.optimal_policy`), a
        ``ref`` that is not 1-D, ``steps``, ``n_steps`` or ``kl_samples`` below
        1, a ``lag`` outside [0, 1), a controller without ``.value``/``.update``
        or one that sets a negative or NaN coefficient, and whatever the
        controller's ``update`` raises.

    Notes
    -----
    The policy starts at the reference (:math:`\theta_0 = 0`, KL 0). With an
    instant response a controller whose fixed point has KL equal to its
    target settles on :func:`klpolicy.beta_for_kl`; with ``measure="after"``
    and ``lag=0``, ``kl[t]`` is exactly ``optimal_kl(ref, reward, beta[t])``.
    A coefficient of 0 gives the greedy policy (:math:`\theta = \infty`); with
    ``lag > 0`` the lagged logits then stay infinite, as a trainer pushed to a deterministic policy
    would. The k1 estimate is unbiased with variance
    :math:`\mathrm{Var}_{\pi_t}(\log\pi_t/\pi_{ref})/n`, and can be negative.

    References
    ----------
    .. [1] Ziegler et al., "Fine-Tuning Language Models from Human Preferences",
       2019, arXiv:1909.08593.
    .. [2] Schulman et al., "Proximal Policy Optimization Algorithms", 2017,
       arXiv:1707.06347.

    Examples
    --------
    >>> from klpolicy import beta_for_kl
    >>> from klpolicy.control import AdaptiveKLController, simulate
    >>> ref, r = [0.5, 0.3, 0.2], [1.0, 0.0, 0.5]
    >>> tr = simulate(AdaptiveKLController(1.0, target=0.1, horizon=4), ref, r, steps=300)
    >>> round(float(tr.kl[-1]), 6), round(float(tr.beta[-1] / beta_for_kl(ref, r, 0.1)), 6)
    (0.1, 1.0)
    """
    _check_controller("controller", controller)
    ref_a, rew_a = _problem(ref, reward)
    steps, n_steps, lag, kl_samples, length, settle_tol = _common(
        steps, n_steps, lag, kl_samples, length, settle_tol
    )
    c = copy.deepcopy(controller)
    out = _run(
        [c],
        ref_a,
        rew_a,
        np.array([lag]),
        steps=steps,
        n_steps=n_steps,
        kl_samples=kl_samples,
        rng=rng,
        length=length,
        after=_as_measure(measure),
    )
    return _traces([c], out, length, settle_tol)[0]


def compare_controllers(
    controllers: Mapping[str, Any],
    ref: ArrayLike,
    reward: ArrayLike,
    *,
    steps: int,
    n_steps: int = 1,
    lag: float = 0.0,
    kl_samples: int | None = None,
    rng: np.random.Generator | int | None = None,
    length: float = 1.0,
    settle_tol: float = 0.05,
    measure: str = "before",
) -> dict[str, SimulationTrace]:
    r"""Run several controllers on the same problem, in the same closed loop.

    Parameters
    ----------
    controllers : mapping of str to controller
        Named controllers (deep-copied, as in :func:`simulate`).
    ref, reward, steps, n_steps, lag, kl_samples, rng, length, settle_tol, measure
        As in :func:`simulate`; with ``kl_samples`` each controller sees its
        own draws from one generator.

    Returns
    -------
    dict of str to SimulationTrace
        One trace per name, in the order given.

    Raises
    ------
    ValueError
        As in :func:`simulate`, and for an empty mapping.

    References
    ----------
    .. [1] Schulman et al., 2017, arXiv:1707.06347, section 4.

    Examples
    --------
    >>> from klpolicy.control import AdaptiveKLController, DeadZoneKLController, compare_controllers
    >>> ref, r = [0.5, 0.3, 0.2], [1.0, 0.0, 0.5]
    >>> pair = {"adaptive": AdaptiveKLController(1.0, 0.4, 4),
    ...         "dead-zone": DeadZoneKLController(1.0, 0.4)}
    >>> out = compare_controllers(pair, ref, r, steps=200, measure="after")
    >>> {k: round(float(v.kl[-1]), 3) for k, v in out.items()}  # dead zone: [0.267, 0.6]
    {'adaptive': 0.4, 'dead-zone': 0.487}
    """
    if not isinstance(controllers, Mapping) or len(controllers) == 0:
        raise ValueError("`controllers` must be a non-empty mapping of names to controllers")
    for name, c in controllers.items():
        _check_controller(f"controllers[{name!r}]", c)
    ref_a, rew_a = _problem(ref, reward)
    steps, n_steps, lag, kl_samples, length, settle_tol = _common(
        steps, n_steps, lag, kl_samples, length, settle_tol
    )
    cs = [copy.deepcopy(c) for c in controllers.values()]
    out = _run(
        cs,
        ref_a,
        rew_a,
        np.full(len(cs), lag),
        steps=steps,
        n_steps=n_steps,
        kl_samples=kl_samples,
        rng=rng,
        length=length,
        after=_as_measure(measure),
    )
    return dict(zip(controllers.keys(), _traces(cs, out, length, settle_tol), strict=True))


def kl_elasticity(ref: ArrayLike, reward: ArrayLike, beta: float) -> float:
    r"""The loop's plant gain: the elasticity of the optimal KL in :math:`\beta`.

    .. math::

        \eta(\beta) = -\frac{d \log \mathrm{KL}_\beta}{d\log\beta}
                    = \frac{\mathrm{Var}_{\pi^*_\beta}(r)}{\beta^2\,\mathrm{KL}_\beta},
        \qquad \mathrm{KL}_\beta = \mathrm{KL}(\pi^*_\beta\|\pi_{ref})

    Parameters
    ----------
    ref, reward : array_like, shape (V,)
        The problem.
    beta : float
        A coefficient, ``> 0`` and finite.

    Returns
    -------
    float
        :math:`\eta > 0`; it tends to 2 as :math:`\beta\to\infty` (where
        :math:`\mathrm{KL}\approx\mathrm{Var}_{ref}(r)/2\beta^2`) and to 0 as
        :math:`\beta\to 0`.

    Raises
    ------
    ValueError
        For an invalid problem, a constant reward on the support (KL is 0 for
        every :math:`\beta`) or a ``beta`` that is not positive and finite.

    Notes
    -----
    Uses :math:`d\,\mathrm{KL}/d\beta = -\mathrm{Var}_{\pi^*_\beta}(r)/\beta^3`.
    The adaptive controller, linearised in :math:`\log\beta`, has loop gain
    :math:`g\eta` with :math:`g = n_{steps}/H` (see
    :doc:`/derivations/control`).

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593.

    Examples
    --------
    >>> from klpolicy.control import kl_elasticity
    >>> round(kl_elasticity([0.5, 0.5], [1.0, 0.0], 100.0), 4)  # -> 2 at large beta
    2.0
    """
    ref_a, rew_a = _problem(ref, reward)
    b = V.as_positive_scalar("beta", beta)
    t = _tilt(ref_a[None], rew_a[None], np.array([[b]]))
    pi, mean, kl = t.pi[0], t.mean[0, 0], t.kl[0, 0]
    if not kl > 0:
        raise ValueError("`reward` is constant on the support of `ref`: the KL is 0 for every beta")
    # Var(r) / beta^2 = E[x^2] - E[x]^2 with x = (r - r_mode) / beta: centred on the mode
    # (exact zero there), not on the rounded mean, whose error eps |r| squared swamps a
    # variance of 1e-33 |r|^2 (a tiny entry gaining weight); E[x^2] summed as
    # (sqrt(pi) x)^2: no b * b underflow (1e-200), no (1e308)^2 overflow, no inf * 0
    del mean
    mode = int(np.argmax(pi))
    with np.errstate(over="ignore", invalid="ignore"):
        x = np.where(pi > 0, (rew_a - rew_a[mode]) / b, 0.0)
        sx = np.sqrt(pi) * x
        m1 = float(np.sum(pi * x))
    return (float(np.sum(sx * sx)) - m1 * m1) / float(kl)


def stability_region(
    ref: ArrayLike,
    reward: ArrayLike,
    target: float,
    *,
    lags: ArrayLike,
    horizons: ArrayLike,
    init_kl_coef: float,
    steps: int,
    n_steps: int = 1,
    settle_tol: float = 0.05,
    measure: str = "before",
) -> StabilityRegion:
    r"""Sweep :class:`~klpolicy.control.AdaptiveKLController` over a lag x horizon grid.

    Parameters
    ----------
    ref, reward : array_like, shape (V,)
        The problem.
    target : float
        KL target in nats (per sequence), ``> 0`` and below the greedy KL.
    lags : array_like, shape (L,)
        Logit lags, each in [0, 1).
    horizons : array_like, shape (H,)
        Controller horizons, each ``> 0``.
    init_kl_coef : float
        Starting coefficient, ``> 0``.
    steps, n_steps, settle_tol, measure
        As in :func:`simulate` (exact KL).

    Returns
    -------
    StabilityRegion
        ``settle_time``, ``overshoot`` and ``steady_state_error`` of shape
        ``(L, H)``, the loop gain :math:`g\eta` per horizon and the elasticity
        :math:`\eta` at the target.

    Raises
    ------
    ValueError
        As in :func:`simulate` and :class:`~klpolicy.control.AdaptiveKLController`,
        and for a ``target`` above the greedy KL.

    Notes
    -----
    Linearised around the target, with :math:`g = n_{steps}/H`, the lag
    :math:`\lambda` and :math:`k = g\eta(1-\lambda)`, the poles solve
    :math:`z^2 - (1+\lambda)z + \lambda + k = 0` with ``measure="before"``:
    stable iff :math:`g\eta < 1` whatever :math:`\lambda`, oscillating iff
    :math:`g\eta > (1-\lambda)/4`. With ``measure="after"`` they solve
    :math:`z^2 - (1+\lambda-k)z + \lambda = 0`: stable iff
    :math:`g\eta < 2(1+\lambda)/(1-\lambda)`. The clip on the error bounds
    each step, so an unstable loop ends in a bounded limit cycle instead of
    diverging. All grid points are simulated together.

    References
    ----------
    .. [1] Ziegler et al., 2019, arXiv:1909.08593.

    Examples
    --------
    >>> from klpolicy.control import stability_region
    >>> reg = stability_region([0.5, 0.3, 0.2], [1.0, 0.0, 0.5], 0.1, lags=[0.0, 0.5],
    ...                        horizons=[1.0, 4.0], init_kl_coef=1.0, steps=300)
    >>> reg.gain.round(3)
    array([1.695, 0.424])
    >>> reg.settle_time
    array([[inf,  4.],
           [inf, 11.]])
    """
    from .controllers import AdaptiveKLController

    ref_a, rew_a = _problem(ref, reward)
    tgt = V.as_positive_scalar("target", target)
    top = float(_tilt(ref_a[None], rew_a[None], np.zeros((1, 1))).kl[0, 0])
    if not tgt < top:
        raise ValueError(f"`target` must be below the greedy policy's KL {top:.6g}; got {target!r}")
    lag_a = np.atleast_1d(V.as_float_array("lags", lags).astype(np.float64))
    hor_a = np.atleast_1d(V.as_float_array("horizons", horizons).astype(np.float64))
    if lag_a.ndim != 1 or hor_a.ndim != 1:
        raise ValueError("`lags` and `horizons` must be 1-D")
    for x in lag_a:
        as_unit_interval("lags", float(x))
    for x in hor_a:
        V.as_positive_scalar("horizons", float(x))
    steps, n_steps, _, _, _, settle_tol = _common(steps, n_steps, 0.0, None, 1.0, settle_tol)
    ctrls = [AdaptiveKLController(init_kl_coef, tgt, float(h)) for _ in lag_a for h in hor_a]
    eta = kl_elasticity(ref_a, rew_a, float(beta_for_kl(ref_a, rew_a, tgt)))
    lags_b = np.repeat(lag_a, hor_a.size)
    out = _run(
        ctrls,
        ref_a,
        rew_a,
        lags_b,
        steps=steps,
        n_steps=n_steps,
        kl_samples=None,
        rng=None,
        length=1.0,
        after=_as_measure(measure),
    )
    m = np.array([_metrics(k, tgt, settle_tol) for k in out["kl"]]).reshape(
        lag_a.size, hor_a.size, 3
    )
    return StabilityRegion(
        lags=lag_a,
        horizons=hor_a,
        settle_time=m[..., 0],
        overshoot=m[..., 1],
        steady_state_error=m[..., 2],
        gain=n_steps / hor_a * eta,
        elasticity=eta,
    )
