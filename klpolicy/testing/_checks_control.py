"""Check suite for KL-coefficient controllers: the exact update rule, and robustness.

Training loops feed a controller what they measure: NaN and inf KLs after a
diverged step, negative k1 estimates, batches far larger than the horizon,
targets of 0 from a config file, long runs far off target. The suite drives
the controller over those, next to klpolicy's reference controller, and
requires, after every update, either the exact rule's value or (where the
rule is undefined and klpolicy refuses) a refusal at once (``ValueError`` or
``FloatingPointError``) or a coefficient that is still finite and positive.
Where the exact rule's value is not finite and positive (a product that
underflows to 0.0), the rule is undefined too: every controller is held to
"finite and positive" first. Comparisons are resolution-aware: a coefficient
stored or computed in float32 (torchrl's ``coef *= tensor``) is float32
rounding, named as such, and passes with ``dtype="float32"``.
"""

from __future__ import annotations

import inspect
import math
import warnings
from typing import Any

import numpy as np
from hypothesis import strategies as st

from .. import control as _control
from ._draws import _draw_beta, _ints, _sampled
from ._resolution import EPS, as_dtype, lower_formats, output_dtype, representable, ulps
from ._runner import Falsified, check_options, run

__all__ = ["check_kl_controller"]

_KINDS = ("fixed", "adaptive", "deadzone")
_REFUSALS = (ValueError, FloatingPointError)  # "refuse at once": the caller can catch these
_REPORTS = ("first", "all")
_LONG = 200  # updates in a long run (beta stays within float64 for every drawn rule)


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


def _reference(kind, value, target, horizon, band, factor):
    """klpolicy.control's controller of this kind, at ``value`` (raises for invalid settings)."""
    if kind == "fixed":
        return _control.FixedKLController(value)
    if kind == "adaptive":
        return _control.AdaptiveKLController(value, target, horizon)
    return _control.DeadZoneKLController(value, target, band, factor)


def _reference_step(kind, value, current, n_steps, target, horizon, band, factor):
    """The exact rule's next value from ``value``, or None where klpolicy refuses the update."""
    try:
        ctl = _reference(kind, value, target, horizon, band, factor)
        ctl.update(current, n_steps)
    except ValueError:
        return None
    return float(ctl.value)


# what training loops hand a controller: (label, value as a multiple of the target or absolute)
_RATIOS = (1.0, 1.1, 0.9, 2.0, 0.5, 1.3, 0.7, 0.0, 10.0, 1e3, 1e-3, -0.5)
_SPECIAL = (math.nan, math.inf, -math.inf)
_TARGETS = (6.0, 0.1, 1.0, 20.0, 1e-12, 0.0)
_HORIZONS = (10000, 1000, 500, 100)
_N_STEPS = (1, 256, 10, 1000)
_SCALARS = ("float", "float64", "float32")


def _as_scalar(x: float, how: str) -> Any:
    """The KL as a training loop passes it: ``kl.item()`` or a numpy scalar."""
    return {"float": float, "float64": np.float64, "float32": np.float32}[how](x)


@st.composite
def _controller_runs(draw, kind):
    init = _draw_beta(draw, 1e-3, 10.0, False, False)
    target = draw(_sampled(_TARGETS))
    horizon = draw(_sampled(_HORIZONS))
    how = draw(_sampled(_SCALARS))
    n = draw(_ints(1, 6))
    steps = []
    for _ in range(n):
        if draw(_ints(0, 4)) < 4:
            ratio = draw(_sampled(_RATIOS))
            current = ratio * (target if target > 0 else 1.0)
        else:
            current = draw(_sampled(_SPECIAL))
        steps.append((_as_scalar(current, how), draw(_sampled(_N_STEPS))))
    repeat = draw(_sampled((1, _LONG)))  # the last update repeated: a long run off target
    return init, target, horizon, steps, repeat


def _stays_nan(ctl: Any, target: float) -> str:
    """Whether one more update, at the target KL, leaves the coefficient NaN (a poisoned state)."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            ctl.update(target, 1)
        stuck = math.isnan(float(ctl.value))
    except Exception:
        stuck = False
    lead = (
        ", and it stays nan (an update at the target KL afterwards leaves it nan)" if stuck else ""
    )
    return lead + ". Refuse a non-finite KL with a ValueError, or skip the update"


def _describe(kind, value, current, n_steps, target, horizon):
    """Why an adaptive step leaves (0, inf): the multiplier 1 + clip(error) * n_steps / horizon.

    Named where klpolicy's controller refuses the step: a multiplier that is negative,
    or zero up to rounding (``1 + (-0.1) * 10`` is ``3.3e-16`` in floats).
    """
    if kind != "adaptive" or not math.isfinite(float(current)) or not target > 0:
        return ""
    if _reference_step(kind, value, current, n_steps, target, horizon, 1.5, 2.0) is not None:
        return ""
    err = min(max(float(current) / target - 1, -0.2), 0.2)
    g = n_steps / horizon
    mult = 1 + err * g
    size = f"{mult:.3g}, zero up to rounding" if mult > 0 else f"{mult:g}"
    return (
        f": the clipped error {err:.6g} times n_steps / horizon = {g:g} makes the multiplier "
        f"1 + ({err:.6g}) * {g:g} = {size}; refuse a multiplier that is not positive beyond "
        "rounding (n_steps / horizon >= 5 can make it so) with a ValueError, "
        "or bound the step (e.g. multiply by exp(error * n_steps / horizon))"
    )


# numpydoc takes a first parameter named cls for a classmethod's and drops it: cls is "unknown"
def check_kl_controller(  # numpydoc ignore=PR02
    cls: Any,
    *,
    kind: str | None = None,
    max_examples: int = 100,
    rtol: float = 1e-9,
    band: float = 1.5,
    factor: float = 2.0,
    dtype: Any = None,
    report: str = "first",
) -> None:
    r"""Check a KL-coefficient controller class with TRL's ``.value`` and ``.update``.

    The class is built as TRL builds them: ``cls(kl_coef)`` (fixed),
    ``cls(init_kl_coef, target, horizon)`` (adaptive, Ziegler et al. 2019:
    ``value *= 1 + clip(current / target - 1, -0.2, 0.2) * n_steps / horizon``)
    or ``cls(init_kl_coef, target)`` (dead zone, Schulman et al. 2017, sec. 4:
    multiply by ``factor`` above ``target * band``, divide below
    ``target / band``). Runs of updates are compared, step by step, with
    klpolicy's controller of the same kind.

    The runs contain what training loops produce: KLs passed as Python floats
    and numpy scalars, NaN and infinite KLs (a diverged step), negative KLs
    (k1 estimates), KLs a thousand times off target, targets of ``1e-12``
    and ``0``, batches of up to ten horizons, and long runs (one update
    repeated 200 times). Where the rule is defined, the value must be the
    exact rule's; where it is not (a non-finite KL, a target of 0, a
    multiplier ``1 + clip(error) * n_steps / horizon`` that is not positive
    beyond rounding, such as ``1 + (-0.1) * 10``, which is ``3.3e-16`` in
    floats, or an exact value that underflows to 0), every controller, klpolicy's
    included, is held to one rule: refuse at once (``ValueError`` or
    ``FloatingPointError`` from the constructor or that update, leaving
    ``.value`` finite and positive), or keep a finite, positive coefficient.

    Parameters
    ----------
    cls : type
        The controller class under test.
    kind : {"fixed", "adaptive", "deadzone"}, optional
        Which rule it implements; inferred from the constructor's parameter
        names when omitted (``horizon`` -> adaptive, ``band``/``factor`` ->
        dead zone, one parameter -> fixed).
    max_examples : int, optional
        Hypothesis examples (default 100; at most 1,000,000).
    rtol : float, optional
        Relative tolerance on ``.value`` after each update (default 1e-9), on
        top of the rounding of ``dtype``.
    band, factor : float, optional
        The dead-zone rule's constants (defaults 1.5 and 2).
    dtype : {None, "float64", "float32", "bfloat16"} or numpy/torch dtype, optional
        The format the controller stores and updates its coefficient in
        (default float64). Each update may then differ from the exact rule by
        the rounding of forming the multiplier and the product in that format
        (8 ulps of the terms it forms). Without it, a coefficient that is
        float32 rounding of the exact rule's (torchrl's ``coef *= tensor``) is
        reported as float32 rounding, not as a wrong rule.
    report : {"first", "all"}, optional
        ``"first"`` (default): the first failing property. ``"all"``: every
        failing property, each with its smallest run, in one AssertionError
        (the battery is rerun with the properties already found skipped), for
        code you cannot edit to see the defect behind the first.

    Returns
    -------
    None
        When every property holds.

    Raises
    ------
    AssertionError
        Naming the smallest falsifying run (constructor arguments and updates)
        and the first step that goes wrong: a coefficient that becomes NaN,
        infinite, zero or negative (with the multiplier that made it so), a
        target of 0 accepted, an update that raises something other than a
        refusal, a moving fixed coefficient, a coefficient that moves the wrong
        way (a sign error), moves when the KL is on target or inside the dead
        zone, an unclipped error, ignores ``n_steps``, or is rounding of a
        coarser format than ``dtype``.
    ValueError
        For an unknown ``kind``, ``dtype`` or ``report``, or invalid options.

    References
    ----------
    .. [1] Ziegler et al., "Fine-Tuning Language Models from Human Preferences",
       2019, arXiv:1909.08593, sec. 2.2.
    .. [2] Schulman et al., "Proximal Policy Optimization Algorithms", 2017,
       arXiv:1707.06347, sec. 4.

    Examples
    --------
    >>> from klpolicy.control import AdaptiveKLController
    >>> check_kl_controller(AdaptiveKLController)
    >>> class Adaptive:  # TRL's AdaptiveKLController
    ...     def __init__(self, init_kl_coef, target, horizon):
    ...         self.value, self.target, self.horizon = init_kl_coef, target, horizon
    ...     def update(self, current, n_steps):
    ...         err = min(max(current / self.target - 1, -0.2), 0.2)
    ...         self.value *= 1 + err * n_steps / self.horizon
    >>> check_kl_controller(Adaptive)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    AssertionError: check_kl_controller(Adaptive): ...
    """
    kind = _infer_kind(cls) if kind is None else kind
    if kind not in _KINDS:
        raise ValueError(f"`kind` must be 'fixed', 'adaptive' or 'deadzone'; got {kind!r}")
    max_examples, rtol = check_options(max_examples, rtol)
    fmt_name = as_dtype(dtype)
    if report not in _REPORTS:
        raise ValueError(f"`report` must be 'first' or 'all'; got {report!r}")

    suite = _ControllerSuite(cls, kind, rtol, band, factor, fmt_name)
    # the three failures of released adaptive controllers, first: one NaN KL,
    # a batch ten horizons long at KL 0, a target of 0 with the KL as a numpy scalar;
    # then a multiplier 1 + (-0.1) * 10 that is 0 in exact arithmetic and 3.3e-16 in
    # floats, repeated until beta underflows to 0.0 (at the 21st update); then TRL's
    # defaults on target, where a coefficient stored in float32 (0.2 is not a float32
    # number) shows as rounding
    explicit = [
        (0.2, 6.0, 10000, [(math.nan, 256), (6.0, 256)], 1),
        (0.2, 6.0, 100, [(0.0, 1000)], 1),
        (0.2, 0.0, 10000, [(np.float64(3.0), 256)], 1),
        (1.0, 6.0, 100, [(5.4, 1000)], _LONG),
        (0.2, 6.0, 10000, [(6.0, 256)], 1),
    ]
    strategy = _controller_runs(kind)
    run("check_kl_controller", cls, suite.prop, strategy, max_examples, explicit, report=report)


class _Run:
    """One drawn run: the constructor's arguments, the updates, and how they are shown."""

    def __init__(self, kind: str, case) -> None:
        init, target, horizon, steps, repeat = case
        args = {"fixed": (init,), "adaptive": (init, target, horizon), "deadzone": (init, target)}
        self.args = args[kind]
        if kind == "fixed":
            target = 1.0  # not used
        self.init, self.target, self.horizon = init, target, horizon
        self.updates = steps[:-1] + [steps[-1]] * repeat
        shown = steps if repeat == 1 else [*steps[:-1], (*steps[-1], f"x{repeat}")]
        self.inputs = {"constructor": self.args, "updates (current, n_steps)": shown}
        self.bad_target = kind != "fixed" and not target > 0


class _ControllerSuite:
    """The properties :func:`check_kl_controller` runs: each update of a run, step by step,
    against the exact rule (or, where it is undefined, "refuse at once or stay finite and
    positive")."""

    def __init__(self, cls, kind, rtol, band, factor, fmt_name) -> None:
        self.cls, self.kind, self.rtol = cls, kind, rtol
        self.band, self.factor, self.fmt_name = band, factor, fmt_name

    @staticmethod
    def read(ctl, inputs):
        """``float(ctl.value)`` and the dtype it is stored in."""
        try:
            raw = ctl.value
            return float(raw), output_dtype(raw)
        except Exception as exc:
            raise Falsified(
                f"reading .value raised {type(exc).__name__}: {exc}; it must be a number.",
                inputs,
                kind="value",
            ) from None

    def resolution(self, name, value, want, current, n_steps, target, horizon):
        """Relative rounding of one update in format ``name``: forming the multiplier, the product."""
        u = EPS[name]
        if self.kind != "adaptive" or not value > 0:
            return 8 * u
        g = n_steps / horizon
        mult = abs(want / value)
        # current / target - 1 (<= 2.2 u where unclipped), times g, plus 1, then the product
        return 8 * u * (1 + 3 * g) / max(mult, u) + 8 * u

    def prop(self, case):
        """One run: the constructor, the initial value, then every update in turn."""
        run_ = _Run(self.kind, case)
        ctl = self.construct(run_)
        if ctl is None:
            return  # refused at once
        value, _ = self.read(ctl, run_.inputs)
        if abs(value - run_.init) > (self.rtol + EPS[self.fmt_name]) * run_.init:
            raise Falsified(
                f"its initial .value is {value!r}, not {run_.init!r}.",
                run_.inputs,
                kind="initial",
            )
        for k, (current, n_steps) in enumerate(run_.updates):
            value = self.step(ctl, run_, k, value, current, n_steps)
            if value is None:
                return  # refused at once: the run stops, as a training loop's would

    def construct(self, run_: _Run):
        """The controller, or None where an invalid target is refused at once."""
        try:
            return self.cls(*run_.args)
        except Exception as exc:
            if run_.bad_target and isinstance(exc, _REFUSALS):
                return None
            raise Falsified(
                f"its constructor raised {type(exc).__name__}: {exc}.",
                run_.inputs,
                kind="constructor",
            ) from None

    @staticmethod
    def update(ctl, run_: _Run, current, n_steps, where: str):
        """``ctl.update(current, n_steps)``: None, or the refusal it raised."""
        try:
            with warnings.catch_warnings(), np.errstate(all="ignore"):
                warnings.simplefilter("ignore")
                ctl.update(current, n_steps)
            return None
        except _REFUSALS as exc:
            return exc
        except Exception as exc:
            target = run_.target
            lead = (
                f"it accepts target={target!r} in its constructor and then raises"
                if run_.bad_target
                else "it raises"
            )
            raise Falsified(
                f"{lead} {type(exc).__name__}: {exc} {where}; refuse invalid input at once "
                "with a ValueError naming the argument"
                + (" (target must be > 0)." if run_.bad_target else "."),
                run_.inputs,
                kind="target" if run_.bad_target else "raises",
            ) from None

    def step(self, ctl, run_: _Run, k: int, value, current, n_steps):
        """Update ``k``: the value to go on from, or None where the controller refused."""
        target, horizon, inputs = run_.target, run_.horizon, run_.inputs
        where = f"at update {k} (current={current!r}, n_steps={n_steps!r})"
        refused = self.update(ctl, run_, current, n_steps, where)
        new, stored = self.read(ctl, inputs)
        want = (
            None
            if run_.bad_target
            else _reference_step(
                self.kind, value, current, n_steps, target, horizon, self.band, self.factor
            )
        )
        if want is not None and not (math.isfinite(want) and want > 0):
            want = None  # the exact product leaves (0, inf): undefined, as a refusal is
        if refused is not None:
            self.refusal_ok(refused, new, want, where, inputs)
            return None
        if not (math.isfinite(new) and new > 0):
            self.left_range(ctl, run_, value, new, current, n_steps, where)
        if want is None:
            if run_.bad_target:
                raise Falsified(
                    f"it accepts target={target!r} and returns .value = {new!r} {where}, "
                    "silently: current / target is undefined at target 0. Refuse "
                    "target <= 0 in the constructor with a ValueError.",
                    inputs,
                    kind="target",
                )
            return new  # an undefined step kept beta finite and positive: go on from there
        # a KL passed as a float32 scalar makes TRL-style arithmetic float32: one rounding
        fmt_name = self.fmt_name
        name = "float32" if isinstance(current, np.float32) and fmt_name == "float64" else fmt_name
        tol = self.rtol + self.resolution(name, value, want, current, n_steps, target, horizon)
        if abs(new - want) <= tol * abs(want):
            return new  # each update is checked from the controller's own state
        sentence, tag = _mismatch(
            self.kind, value, new, want, stored, current, n_steps, target, horizon,
            self.band, self.factor, where, fmt_name, self.rtol, self.resolution,
        )  # fmt: skip
        raise Falsified(sentence, inputs, kind=tag)

    @staticmethod
    def refusal_ok(refused, new, want, where, inputs) -> None:
        """A refused update leaves ``.value`` finite and positive, and refuses no valid one."""
        if not (math.isfinite(new) and new > 0):
            raise Falsified(
                f"it refused {where} ({type(refused).__name__}) but left .value at "
                f"{new!r}; a refused update must leave the coefficient as it was.",
                inputs,
                kind="refused-left",
            )
        if want is not None:
            raise Falsified(
                f"it refused a valid update {where}: {type(refused).__name__}: "
                f"{refused}; the exact rule gives {want!r}.",
                inputs,
                kind="refused-valid",
            )

    def left_range(self, ctl, run_: _Run, value, new, current, n_steps, where) -> None:
        """Raise: the coefficient became NaN, infinite, zero or negative; say why."""
        c = float(current)
        target = run_.target
        if run_.bad_target:
            why = f"it accepts target={target!r} and .value became {new!r} {where}"
            tag = "target"
        elif math.isnan(c) and math.isnan(new):
            why = f"it turns beta into nan after one NaN KL, {where}" + _stays_nan(ctl, target)
            tag = "nan-kl"
        else:
            what = "nan" if math.isnan(new) else ("inf" if new > 0 else "not positive")
            why = f".value became {new!r} ({what}) {where}" + _describe(
                self.kind, value, current, n_steps, target, run_.horizon
            )
            tag = "leaves-(0,inf)"
        raise Falsified(f"{why}; beta must stay finite and positive.", run_.inputs, kind=tag)


def _mismatch(
    kind,
    value,
    new,
    want,
    stored,
    current,
    n_steps,
    target,
    horizon,
    band,
    factor,
    where,
    fmt_name,
    rtol,
    resolution,
):
    """The sentence (and its kind) for an update that is not the exact rule's value."""
    err = abs(new - want)
    for name in lower_formats(fmt_name):
        in_format = stored == name or (stored is None and representable(np.array([new]), name))
        res = resolution(name, value, want, current, n_steps, target, horizon)
        if in_format and err <= (rtol + res) * abs(want):
            return (
                f"it computes in {name}, not {fmt_name}: its coefficient is a {name} number and "
                f"differs from the exact rule's {want!r} by {err:.3g}, "
                f"{ulps(err, want, name):.2g} ulp of {name}, {where}: {name} rounding, not a "
                f"wrong rule. Pass dtype={name!r} to check it at {name} resolution.",
                f"rounding-{name}",
            )
    ratio = float(current) / target
    if kind == "fixed":
        why = f"the coefficient moved from {value!r} to {new!r}; a fixed one never moves"
        tag = "fixed-moves"
    elif (new - value) * (want - value) < 0:
        why = (
            "it moved the coefficient the wrong way (a sign error): beta must rise "
            "when the KL is above its target and fall when it is below"
        )
        tag = "wrong-way"
    elif new == value:
        why = f"it left the coefficient at {value!r}; the exact rule moves it to {want!r}" + (
            " (the KL is outside the dead zone)" if kind == "deadzone" else ""
        )
        tag = "stuck"
    elif want == value:
        why = "it moved the coefficient although " + (
            "the KL is on target" if kind == "adaptive" else "the KL is inside the dead zone"
        )
        tag = "moves-on-target"
    elif (
        kind == "adaptive"
        and abs(ratio - 1) > 0.2
        and math.isclose(new, value * (1 + (ratio - 1) * n_steps / horizon), rel_tol=1e-9)
    ):
        why = "it does not clip the proportional error current / target - 1 to [-0.2, 0.2]"
        tag = "unclipped"
    elif kind == "adaptive" and math.isclose(
        new,
        _reference_step(kind, value, current, 1, target, horizon, band, factor) or 0.0,
        rel_tol=1e-9,
    ):
        why = "it ignores n_steps: the step is proportional to n_steps / horizon"
        tag = "ignores-n_steps"
    else:
        why = f"the coefficient is {new!r}; the exact rule gives {want!r}"
        tag = "differs"
    return f"{why}, {where}.", tag
