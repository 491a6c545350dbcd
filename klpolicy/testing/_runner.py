"""Run a property battery with hypothesis and turn its smallest failure into an AssertionError."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
from hypothesis import HealthCheck, Verbosity, given, settings
from hypothesis.errors import Flaky

try:
    from hypothesis.errors import FlakyFailure
except ImportError:  # hypothesis < 6.99 raises Flaky itself
    FlakyFailure = Flaky

EPS = float(np.finfo(np.float64).eps)


class Falsified(Exception):
    """Raised by a property: a sentence saying what is wrong, and the inputs."""

    def __init__(
        self,
        sentence: str | Callable[[], str],
        inputs: dict[str, Any],
        detail: str = "",
        *,
        kind: str = "",
    ) -> None:
        super().__init__("falsified")
        self._sentence, self.inputs, self.detail = sentence, inputs, detail
        self.kind = kind  # which property failed (report="all" collects one of each)

    @property
    def sentence(self) -> str:
        """The diagnosis; computed lazily, so that shrinking does not pay for it."""
        s = self._sentence
        return s() if callable(s) else s


def fmt(x: Any) -> str:
    """Repr that round-trips: arrays as nested lists of Python floats."""
    if isinstance(x, np.ndarray):
        return repr(x.tolist())
    if isinstance(x, (list, tuple)) and any(isinstance(v, np.ndarray) for v in x):
        return "[" + ", ".join(fmt(v) for v in x) + "]"
    if isinstance(x, (float, np.floating)):
        return repr(float(x))
    return repr(x)


def render(check: str, fn_name: str, f: Falsified) -> str:
    args = ", ".join(f"{k}={fmt(v)}" for k, v in f.inputs.items())
    msg = f"{check}({fn_name}): {f.sentence}\nFalsifying input: {args}"
    return msg + (f"\n{f.detail}" if f.detail else "")


def fn_name(fn: Any) -> str:
    return getattr(fn, "__name__", None) or type(fn).__name__


def to_array(out: Any) -> np.ndarray:
    """The result of someone else's function as a float64 array (torch tensors too).

    A pair ``(loss, metrics)`` whose second element is a dict, as trainer methods
    return, counts as its first element.
    """
    out = first_of(out)
    if hasattr(out, "detach"):
        out = out.detach().cpu()
        if str(out.dtype) in ("torch.bfloat16", "torch.float16"):  # numpy has no bfloat16
            out = out.float()
        out = out.numpy()
    return np.asarray(out, dtype=np.float64)


def first_of(out: Any) -> Any:
    """``loss`` from ``(loss, metrics_dict)``; anything else unchanged."""
    if isinstance(out, tuple) and len(out) == 2 and isinstance(out[1], dict):
        return out[0]
    return out


def call(fn: Callable, inputs: dict[str, Any], *args: Any) -> np.ndarray:
    """Call ``fn(*args)`` on copies, silencing floating-point warnings; errors become Falsified."""
    return call_raw(fn, inputs, *args)[0]


def call_raw(fn: Callable, inputs: dict[str, Any], *args: Any) -> tuple[np.ndarray, Any]:
    """As :func:`call`, also returning what ``fn`` returned (to read its dtype)."""
    copies = [a.copy() if isinstance(a, np.ndarray) else a for a in args]
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        try:
            out = fn(*copies)
            return to_array(out), first_of(out)
        except Falsified:
            raise
        except Exception as exc:
            raise Falsified(
                f"it raised {type(exc).__name__}: {exc}. If this input is outside what it "
                "supports, say so with the check's supports_* options.",
                inputs,
            ) from None


def run(
    check: str,
    fn: Any,
    prop: Callable[[Any], None],
    strategy: Any,
    max_examples: int,
    explicit: Iterable[Any] = (),
    *,
    report: str = "first",
) -> None:
    """Run ``prop`` on the explicit cases, then on ``max_examples`` hypothesis draws.

    The first explicit failure, or hypothesis's shrunk (smallest) failure,
    is re-raised as an AssertionError naming the input and what is wrong.
    With ``report="all"``, the battery is run again after each failure with the
    properties already found (each ``Falsified.kind``) skipped, so that a second
    defect behind the first is found without editing the code under test; one
    AssertionError lists them all, numbered, each with its own smallest input.
    """
    if report != "all":
        _run_once(check, fn, prop, strategy, max_examples, explicit)
        return
    found: dict[str, str] = {}
    last: list[str] = []

    def skip_found(case):
        try:
            prop(case)
        except Falsified as f:
            if f.kind and f.kind in found:
                return  # a run that hits a known property stops there
            last[:] = [f.kind]
            raise

    for _ in range(16):  # at most one rerun per property a suite tags
        last.clear()
        try:
            _run_once(check, fn, skip_found, strategy, max_examples, explicit)
            break
        except AssertionError as exc:
            kind = last[0] if last else ""
            found[kind or f"untagged {len(found)}"] = str(exc)
            if not kind:  # a failure that cannot be skipped: stop here
                break
    if len(found) == 1:
        raise AssertionError(next(iter(found.values())))
    if found:
        parts = [f"{check}({fn_name(fn)}): {len(found)} properties fail."]
        parts += [f"{k}. {msg}" for k, msg in enumerate(found.values(), 1)]
        raise AssertionError("\n\n".join(parts))


def _run_once(check, fn, prop, strategy, max_examples, explicit) -> None:
    name = fn_name(fn)
    for case in explicit:
        try:
            prop(case)
        except Falsified as f:
            raise AssertionError(render(check, name, f)) from None

    @settings(
        max_examples=max_examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        report_multiple_bugs=False,
        verbosity=Verbosity.quiet,
        print_blob=False,
    )
    @given(strategy)
    def _battery(case):
        prop(case)

    try:
        _battery()
    except Falsified as f:
        raise AssertionError(render(check, name, f)) from None
    except (Flaky, FlakyFailure) as exc:
        interruption = _interruption(exc)
        if interruption is not None:  # e.g. a timeout while an example was drawn
            raise interruption from None
        raise AssertionError(
            f"{check}({name}): it gives different results on the same input, "
            f"so no property can be checked reliably ({type(exc).__name__})."
        ) from None


def _interruption(exc: BaseException) -> BaseException | None:
    """The exception that interrupted a run which hypothesis reports as flaky.

    A timeout raised while an example was drawn shows as inconsistent data generation
    (FlakyStrategyDefinition), one raised while the checked function ran as a flaky
    failure (FlakyFailure): either is a timeout, not a property of the function.
    Returned: the first TimeoutError in the chain, or for FlakyStrategyDefinition the
    first exception that is not hypothesis's own; None otherwise.
    """
    strategy = type(exc).__name__ == "FlakyStrategyDefinition"
    stack, seen = [exc], set()
    while stack:
        e = stack.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, TimeoutError):
            return e
        own = type(e).__module__.startswith("hypothesis") or isinstance(
            e, (AssertionError, Falsified)
        )
        if strategy and e is not exc and not own:
            return e
        stack += [*getattr(e, "exceptions", ()), e.__cause__, e.__context__]
    return None


#: The largest ``max_examples`` a suite accepts.
MAX_EXAMPLES = 1_000_000


def check_options(max_examples: Any, rtol: Any) -> tuple[int, float]:
    if isinstance(max_examples, bool) or not isinstance(max_examples, (int, np.integer)):
        raise ValueError(f"`max_examples` must be a positive integer; got {max_examples!r}")
    if max_examples < 1:
        raise ValueError(f"`max_examples` must be a positive integer; got {max_examples!r}")
    if max_examples > MAX_EXAMPLES:  # 2**63 examples run until killed
        raise ValueError(f"`max_examples` must be at most {MAX_EXAMPLES:,}; got {max_examples!r}")
    try:
        r = float(rtol)
    except (TypeError, ValueError):
        raise ValueError(f"`rtol` must be a number in (0, 1); got {rtol!r}") from None
    if not 0 < r < 1:
        raise ValueError(f"`rtol` must be a number in (0, 1); got {rtol!r}")
    return int(max_examples), r


def worst(got: np.ndarray, exact: np.ndarray, tol: np.ndarray) -> int | None:
    """Flat index of the worst violation of ``|got - exact| <= tol`` (infinities must match)."""
    got, exact = np.broadcast_arrays(got, exact)
    with np.errstate(invalid="ignore"):
        err = np.abs(got - exact)
        err = np.where((got == exact), 0.0, err)  # equal infinities
        err = np.where(np.isnan(err), np.inf, err)
        excess = err - tol
    if (excess <= 0).all():
        return None
    return int(np.argmax(np.where(np.isnan(excess), np.inf, excess)))


def matches(got: np.ndarray, alt: np.ndarray, tol: np.ndarray) -> bool:
    """Whether ``got`` equals ``alt`` within ``tol`` (equal infinities match, NaN never does)."""
    got, alt = np.asarray(got), np.asarray(alt)
    if got.shape != alt.shape or np.isnan(alt).any():
        return False
    return worst(got, alt, tol) is None


def log_support(ref: np.ndarray) -> np.ndarray:
    """|log ref| on the support, 0 elsewhere."""
    with np.errstate(divide="ignore"):
        return np.where(ref > 0, np.abs(np.log(np.where(ref > 0, ref, 1.0))), 0.0)


def first_alternative(got, alternatives, tol, exact=None, resolution=None):
    """The sentence of the first alternative formula that ``got`` matches, else None.

    With ``exact`` and ``resolution``, an alternative is named only where it
    differs from the exact value by more than ``resolution`` (the rounding of
    the dtype): formulas that rounding cannot tell apart are not diagnosed.
    """
    for sentence, make in alternatives:
        try:
            with np.errstate(all="ignore"):
                alt = np.asarray(make(), dtype=np.float64)
        except (ValueError, ZeroDivisionError, FloatingPointError):
            continue
        if exact is not None and matches(np.asarray(exact, dtype=np.float64), alt, resolution):
            continue
        if matches(got, alt, tol):
            return sentence
    return None
