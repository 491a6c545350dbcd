"""``klpolicy check SUITE module:function [options]``: run a check suite from the shell.

For people who do not write pytest: the command imports the function (or
class), runs the suite and prints ``passed`` or the verdict with its smallest
counterexample. Exit status: 0 when every property holds, 1 on a failure, 2
with a one-line error for bad arguments (unknown suite, unimportable target,
invalid option).

The options are the suite's keyword arguments, with dashes:
``--max-examples 500``, ``--rtol 1e-9``, ``--dtype float32``,
``--reduction masked_mean``, ``--clamp -10 10``, ``--kind adaptive``,
``--supports-zero-q`` / ``--no-supports-zero-q``; ``check_kl_estimator``'s
``estimator`` is ``--estimator k3``, ``check_pair_loss``'s ``loss`` is ``--loss ipo`` and
its loss options are ``--option label_smoothing=0.1``. ``klpolicy check SUITE -h`` lists
them.

Examples
--------
``klpolicy check kl-estimator mypkg.losses:k3 --estimator k3``,
``klpolicy check kl-controller trl.trainer.utils:AdaptiveKLController``,
``klpolicy check kl-estimator mypkg.grpo:kl_term --estimator k3 --reduction seq_mean``.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import os
import sys
import warnings
from collections.abc import Sequence
from typing import Any

__all__ = ["run_check"]

# suite name on the command line -> check function name in klpolicy.testing
SUITES = {
    "kl-divergence": "check_kl_divergence",
    "kl-estimator": "check_kl_estimator",
    "kl-controller": "check_kl_controller",
    "dpo-loss": "check_dpo_loss",
    "optimal-policy": "check_optimal_policy",
    "soft-value": "check_soft_value",
}
# the pair-loss suite of issue 19, when it is installed
_OPTIONAL = {"pair-loss": ("klpolicy.testing._checks_losses", "check_pair_loss")}


class _Error(Exception):
    """A bad argument: one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise _Error(message)


def _suites() -> dict[str, Any]:
    """Every suite available here: name -> check function (imports hypothesis)."""
    from . import checks

    out = {name: getattr(checks, fn) for name, fn in SUITES.items()}
    for name, (module, fn) in _OPTIONAL.items():
        try:
            out[name] = getattr(importlib.import_module(module), fn)
        except (ImportError, AttributeError):
            continue
    return out


def _load(target: str) -> Any:
    """``module:attr.attr`` -> the object; the current directory is importable, as in python -m."""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr:
        raise _Error(f"the target must be module:function, e.g. mypkg.losses:k3; got {target!r}")
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        obj = importlib.import_module(module)
    except Exception as exc:
        raise _Error(f"cannot import {module!r}: {type(exc).__name__}: {exc}") from None
    for part in attr.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise _Error(f"{module!r} has no attribute {attr!r}") from None
    if not callable(obj):
        raise _Error(f"{target!r} is not callable; got {type(obj).__name__}")
    return obj


def _option(parser: argparse.ArgumentParser, name: str, param: inspect.Parameter) -> None:
    flag = "--" + name.replace("_", "-")
    default = param.default
    if name == "clamp":
        parser.add_argument(flag, type=float, nargs=2, metavar=("LO", "HI"), default=None)
    elif isinstance(default, bool):
        parser.add_argument(flag, action=argparse.BooleanOptionalAction, default=default)
    elif isinstance(default, int):
        parser.add_argument(flag, type=int, default=default, metavar="N")
    elif isinstance(default, float):
        parser.add_argument(flag, type=float, default=default, metavar="X")
    elif name == "dtype":
        parser.add_argument(flag, default=None, choices=["float64", "float32", "bfloat16"])
    elif name in ("atol", "min_entry"):
        parser.add_argument(flag, type=float, default=None, metavar="X")
    else:
        parser.add_argument(flag, default=default, metavar="VALUE")


def _suite_parser(suite: str, check: Any) -> argparse.ArgumentParser:
    p = _Parser(
        prog=f"klpolicy check {suite}",
        description=(inspect.getdoc(check) or "").split("\n")[0],
    )
    p.add_argument("target", metavar="module:function", help="what to check")
    for name, param in list(inspect.signature(check).parameters.items())[1:]:
        flag = "--" + name.replace("_", "-")
        if param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:  # `estimator`, `loss`
            if param.default is inspect.Parameter.empty:
                p.add_argument(flag, required=True, metavar="VALUE")
            else:
                p.add_argument(flag, default=param.default, metavar="VALUE")
        elif param.kind is inspect.Parameter.KEYWORD_ONLY:
            if name == "grad":  # a function too
                p.add_argument(flag, default=None, metavar="module:function", type=_load)
            else:
                _option(p, name, param)
        elif param.kind is inspect.Parameter.VAR_KEYWORD:  # a suite's extra options
            p.add_argument(
                "--option",
                dest="_extra",
                action="append",
                default=[],
                metavar="KEY=VALUE",
                type=_key_value,
                help="a number passed on as KEY=VALUE (e.g. label_smoothing=0.1)",
            )
    return p


def _key_value(text: str) -> tuple[str, float]:
    key, sep, value = text.partition("=")
    try:
        if not sep or not key.isidentifier():
            raise ValueError
        return key, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected KEY=NUMBER, got {text!r}") from None


def run_check(argv: Sequence[str] | None = None) -> int:
    """Run ``klpolicy check`` with arguments ``argv`` (after ``check``); return the exit status.

    Prints ``passed`` (0), the suite's verdict with its smallest counterexample
    (1), or ``klpolicy check: error: ...`` on stderr (2).

    Examples
    --------
    >>> run_check(["kl-divergence", "klpolicy:kl_divergence", "--max-examples", "20"])
    check_kl_divergence(kl_divergence): passed (20 examples)
    0
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        names = sorted({*SUITES, *_OPTIONAL})
        if not argv or argv[0] in ("-h", "--help"):
            print(
                "usage: klpolicy check SUITE module:function [options]\n"
                f"suites: {', '.join(names)}\n"
                "klpolicy check SUITE -h lists a suite's options."
            )
            return 0 if argv else 2
        suite = argv[0].replace("_", "-").removeprefix("check-")
        suites = _suites()
        if suite not in suites:
            known = ", ".join(sorted(suites))
            raise _Error(f"unknown suite {argv[0]!r}; choose one of {known}")
        check = suites[suite]
        args = vars(_suite_parser(suite, check).parse_args(argv[1:]))
        fn = _load(args.pop("target"))
        extra = dict(args.pop("_extra", []))
        kwargs = {k: v for k, v in args.items() if v is not None}
        kwargs.update(extra)
        if "clamp" in kwargs:
            kwargs["clamp"] = tuple(kwargs["clamp"])
        positional = [
            kwargs.pop(n)
            for n, p in list(inspect.signature(check).parameters.items())[1:]
            if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD and n in kwargs
        ]
        name = getattr(fn, "__name__", type(fn).__name__)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                check(fn, *positional, **kwargs)
            except AssertionError as exc:
                print(exc)
                return 1
            except ValueError as exc:
                raise _Error(str(exc)) from None
        for w in caught:
            if w.category.__module__.startswith("klpolicy"):
                print(f"{w.category.__name__}: {w.message}")
        examples = kwargs.get("max_examples", 100)
        print(f"{check.__name__}({name}): passed ({examples} examples)")
        return 0
    except _Error as exc:
        print(f"klpolicy check: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # -h of a suite's parser
        return int(exc.code or 0)
