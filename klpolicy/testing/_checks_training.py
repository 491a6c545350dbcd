"""Check suites for training-time pieces: DPO losses and KL-coefficient controllers."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .. import control as _control
from ..preference import dpo_loss as _dpo_loss
from . import strategies as kst
from ._draws import _draw_beta, _ints, _sampled
from ._runner import (
    EPS,
    Falsified,
    call,
    check_options,
    first_alternative,
    fmt,
    run,
    worst,
)

__all__ = ["check_dpo_loss", "check_kl_controller"]

_LN2 = math.log(2.0)


# --------------------------------------------------------------------------- DPO


def check_dpo_loss(
    fn: Callable[..., Any],
    *,
    max_examples: int = 100,
    rtol: float = 1e-6,
    atol: float = 1e-12,
    reduction: str = "none",
) -> None:
    r"""Check a DPO loss ``fn(pc, pr, rc, rr, beta)`` against the exact per-pair loss.

    .. math::

        \ell = -\log\sigma\big(\beta[(\log\pi(y_c) - \log\pi_{ref}(y_c))
                                    - (\log\pi(y_r) - \log\pi_{ref}(y_r))]\big)

    ``fn`` receives the policy's chosen and rejected sequence log-probabilities,
    the reference's chosen and rejected ones (1-D arrays of one length) and a
    float ``beta``.

    Parameters
    ----------
    fn : callable
        The implementation under test.
    max_examples : int, optional
        Hypothesis examples (default 100).
    rtol, atol : float, optional
        Tolerances per pair (defaults 1e-6 and 1e-12), on top of the rounding
        slack of forming the margin from log-probabilities.
    reduction : {"none", "mean", "sum"}, optional
        What ``fn`` returns: the per-pair losses (default), or their mean or sum.

    Returns
    -------
    None
        When every property holds.

    Raises
    ------
    AssertionError
        Naming the smallest falsifying input and what is wrong: wrong shape,
        inf/NaN (``-log(sigmoid(x))`` overflows for margins below -745), a
        negative loss, or a mismatch, diagnosed when it has the sign of the
        margin reversed, ignores the reference log-probabilities, ignores or
        divides by ``beta``, or is in bits.
    ValueError
        For invalid options.

    Notes
    -----
    Log-probabilities go down to -1e4 and ``beta`` ranges over [1e-3, 1e3],
    so margins reach 1e7: a correct loss is ``softplus(-beta * margin)``
    (``np.logaddexp(0, -x)``, ``torch.nn.functional.softplus``, or
    ``-logsigmoid``), which is finite everywhere.

    References
    ----------
    .. [1] Rafailov et al., "Direct Preference Optimization: Your Language
       Model is Secretly a Reward Model", 2023, arXiv:2305.18290, eq. (7).

    Examples
    --------
    >>> import numpy as np
    >>> def dpo(pc, pr, rc, rr, beta):
    ...     return np.logaddexp(0.0, -beta * ((pc - rc) - (pr - rr)))
    >>> check_dpo_loss(dpo)
    """
    max_examples, rtol = check_options(max_examples, rtol)
    if reduction not in ("none", "mean", "sum"):
        raise ValueError(f"`reduction` must be 'none', 'mean' or 'sum'; got {reduction!r}")
    atol = float(atol)
    if not atol >= 0:
        raise ValueError(f"`atol` must be non-negative; got {atol!r}")

    def reduce(x):
        x = np.asarray(x, dtype=np.float64)
        return x if reduction == "none" else (x.mean() if reduction == "mean" else x.sum())

    def prop(case):
        (pc, pr, rc, rr), beta = case
        inputs = {"pc": pc, "pr": pr, "rc": rc, "rr": rr, "beta": beta}
        got = call(fn, inputs, pc, pr, rc, rr, beta)
        shape = pc.shape if reduction == "none" else ()
        if got.size != int(np.prod(shape)) or (reduction == "none" and got.shape != shape):
            raise Falsified(
                f"it returns shape {got.shape}; expected {shape}"
                + (
                    " (one loss per pair; pass reduction='mean' if it averages)."
                    if reduction == "none"
                    else "."
                ),
                inputs,
            )
        got = got.reshape(shape)
        exact = reduce(_dpo_loss(pc, pr, rc, rr, beta))
        detail = f"expected {fmt(exact)}, got {fmt(got)}"
        if not np.isfinite(got).all():
            raise Falsified(
                "it returns inf/nan: -log(sigmoid(beta * margin)) overflows for large negative "
                "margins; compute it as softplus(-beta * margin) (np.logaddexp(0, -x)).",
                inputs,
                detail,
            )
        tol = reduce(
            rtol * _dpo_loss(pc, pr, rc, rr, beta)
            + atol
            + 16 * EPS * beta * (np.abs(pc) + np.abs(pr) + np.abs(rc) + np.abs(rr))
        )
        if (got < -tol).any():
            raise Falsified(
                "it returns a negative loss; -log(sigmoid(x)) is always positive (is the sign of "
                "the loss flipped?).",
                inputs,
                detail,
            )
        if worst(got, exact, tol) is None:
            return
        alternatives = [
            (
                "it has the sign of the margin reversed: it prefers the rejected response.",
                lambda: reduce(_dpo_loss(pr, pc, rr, rc, beta)),
            ),
            (
                "it ignores the reference log-probabilities: the margin must be "
                "(pc - rc) - (pr - rr), not pc - pr.",
                lambda: reduce(_dpo_loss(pc, pr, 0 * rc, 0 * rr, beta)),
            ),
            ("it ignores beta.", lambda: reduce(_dpo_loss(pc, pr, rc, rr, 1.0))),
            (
                "it divides the margin by beta; DPO multiplies it by beta.",
                lambda: reduce(_dpo_loss(pc, pr, rc, rr, 1 / beta)),
            ),
            (
                "it returns bits (log base 2); the DPO loss is in nats.",
                lambda: reduce(_dpo_loss(pc, pr, rc, rr, beta) / _LN2),
            ),
        ]
        raise Falsified(
            lambda: (
                first_alternative(got, alternatives, tol)
                or "it differs from the exact DPO loss softplus(-beta * ((pc - rc) - (pr - rr)))."
            ),
            inputs,
            detail,
        )

    explicit = [
        ((np.array([-1.0]), np.array([-2.0]), np.array([-1.5]), np.array([-1.5])), 0.5),
    ]
    strategy = st.tuples(kst.preference_pairs(), kst.betas(min_beta=1e-3, max_beta=1e3))
    run("check_dpo_loss", fn, prop, strategy, max_examples, explicit)


# --------------------------------------------------------------------------- controllers

_KINDS = ("fixed", "adaptive", "deadzone")


def _infer_kind(cls: Any) -> str:
    try:
        params = set(inspect.signature(cls).parameters)
    except (TypeError, ValueError):
        params = set()
    if "horizon" in params:
        return "adaptive"
    if {"band", "factor"} & params:
        return "deadzone"
    if len(params) == 1 or "kl_coef" in params:
        return "fixed"
    raise ValueError(
        f"cannot tell which controller {cls!r} is from its constructor; pass "
        "kind='fixed', 'adaptive' or 'deadzone'"
    )


def _reference_step(kind, value, current, n_steps, target, horizon, band, factor) -> float:
    """One update of klpolicy.control's controller of this kind, started at ``value``."""
    if kind == "fixed":
        ctl = _control.FixedKLController(value)
    elif kind == "adaptive":
        ctl = _control.AdaptiveKLController(value, target, horizon)
    else:
        ctl = _control.DeadZoneKLController(value, target, band, factor)
    ctl.update(current, n_steps)
    return float(ctl.value)


@st.composite
def _controller_runs(draw, kind):
    init = _draw_beta(draw, 1e-3, 10.0, False, False)
    target = draw(_sampled((6.0, 0.1, 1.0, 20.0)))
    horizon = draw(_sampled((10000, 1000, 500)))  # n_steps / horizon <= 2
    n = draw(_ints(1, 6))
    steps = []
    for _ in range(n):
        ratio = draw(_sampled((1.0, 1.1, 0.9, 2.0, 0.5, 1.3, 0.7, 0.0, 10.0)))
        steps.append((ratio * target, draw(_sampled((1, 256, 10, 1000)))))
    return init, target, horizon, steps


def check_kl_controller(
    cls: Any,
    *,
    kind: str | None = None,
    max_examples: int = 100,
    rtol: float = 1e-9,
    band: float = 1.5,
    factor: float = 2.0,
) -> None:
    r"""Check a KL-coefficient controller class with TRL's ``.value`` and ``.update``.

    The class is built as TRL builds them: ``cls(kl_coef)`` (fixed),
    ``cls(init_kl_coef, target, horizon)`` (adaptive, Ziegler et al. 2019:
    ``value *= 1 + clip(current / target - 1, -0.2, 0.2) * n_steps / horizon``)
    or ``cls(init_kl_coef, target)`` (dead zone, Schulman et al. 2017, sec. 4:
    multiply by ``factor`` above ``target * band``, divide below
    ``target / band``). A run of updates is compared, step by step, with the
    exact rule.

    Parameters
    ----------
    cls : type
        The controller class under test.
    kind : {"fixed", "adaptive", "deadzone"}, optional
        Which rule it implements; inferred from the constructor's parameter
        names when omitted (``horizon`` -> adaptive, ``band``/``factor`` ->
        dead zone, one parameter -> fixed).
    max_examples : int, optional
        Hypothesis examples (default 100).
    rtol : float, optional
        Relative tolerance on ``.value`` after each update (default 1e-9).
    band, factor : float, optional
        The dead-zone rule's constants (defaults 1.5 and 2).

    Returns
    -------
    None
        When every property holds.

    Raises
    ------
    AssertionError
        Naming the smallest falsifying run (constructor arguments and updates)
        and the first step that goes wrong: a moving fixed coefficient, a
        coefficient that moves the wrong way (a sign error), moves when the KL
        is on target or inside the dead zone, an unclipped error, or ignores
        ``n_steps``.
    ValueError
        For an unknown ``kind`` or invalid options.

    References
    ----------
    .. [1] Ziegler et al., "Fine-Tuning Language Models from Human Preferences",
       2019, arXiv:1909.08593, sec. 2.2.
    .. [2] Schulman et al., "Proximal Policy Optimization Algorithms", 2017,
       arXiv:1707.06347, sec. 4.

    Examples
    --------
    >>> class Adaptive:  # TRL's AdaptiveKLController
    ...     def __init__(self, init_kl_coef, target, horizon):
    ...         self.value, self.target, self.horizon = init_kl_coef, target, horizon
    ...     def update(self, current, n_steps):
    ...         err = min(max(current / self.target - 1, -0.2), 0.2)
    ...         self.value *= 1 + err * n_steps / self.horizon
    >>> check_kl_controller(Adaptive)
    """
    kind = _infer_kind(cls) if kind is None else kind
    if kind not in _KINDS:
        raise ValueError(f"`kind` must be 'fixed', 'adaptive' or 'deadzone'; got {kind!r}")
    max_examples, rtol = check_options(max_examples, rtol)

    def prop(case):
        init, target, horizon, steps = case
        args = {"fixed": (init,), "adaptive": (init, target, horizon), "deadzone": (init, target)}
        inputs = {"constructor": args[kind], "updates (current, n_steps)": steps}
        try:
            ctl = cls(*args[kind])
        except Exception as exc:
            raise Falsified(
                f"its constructor raised {type(exc).__name__}: {exc}.", inputs
            ) from None
        value = float(call(lambda: ctl.value, inputs))
        if abs(value - init) > rtol * init:
            raise Falsified(f"its initial .value is {value!r}, not {init!r}.", inputs)
        for k, (current, n_steps) in enumerate(steps):
            call(ctl.update, inputs, current, n_steps)
            new = float(call(lambda: ctl.value, inputs))
            want = _reference_step(kind, value, current, n_steps, target, horizon, band, factor)
            if abs(new - want) <= rtol * abs(want):
                value = want
                continue
            where = f"at update {k} (current={current!r}, n_steps={n_steps!r})"
            ratio = current / target
            if kind == "fixed":
                why = f"the coefficient moved from {value!r} to {new!r}; a fixed one never moves"
            elif (new - value) * (want - value) < 0:
                why = (
                    "it moved the coefficient the wrong way (a sign error): beta must rise "
                    "when the KL is above its target and fall when it is below"
                )
            elif want == value:
                why = "it moved the coefficient although " + (
                    "the KL is on target"
                    if kind == "adaptive"
                    else "the KL is inside the dead zone"
                )
            elif (
                kind == "adaptive"
                and abs(ratio - 1) > 0.2
                and math.isclose(new, value * (1 + (ratio - 1) * n_steps / horizon), rel_tol=1e-9)
            ):
                why = "it does not clip the proportional error current / target - 1 to [-0.2, 0.2]"
            elif kind == "adaptive" and math.isclose(
                new,
                _reference_step(kind, value, current, 1, target, horizon, band, factor),
                rel_tol=1e-9,
            ):
                why = "it ignores n_steps: the step is proportional to n_steps / horizon"
            else:
                why = f"the coefficient is {new!r}; the exact rule gives {want!r}"
            raise Falsified(f"{why}, {where}.", inputs)

    strategy = _controller_runs(kind)
    run("check_kl_controller", cls, prop, strategy, max_examples)
