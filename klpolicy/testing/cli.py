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
its loss options are ``--loss-option label_smoothing=0.1``. ``klpolicy check SUITE -h`` lists
them.

``--option NAME=VALUE`` (repeatable, every suite) passes a keyword argument to
the checked function (a class: to its constructor) on every call: verl's
``kl_penalty(logprob, ref_logprob, kl_penalty)`` is checked with
``--option kl_penalty=low_var_kl``. VALUE is read as a Python literal where it
is one (``0.1``, ``True``, ``None``, ``'k3'``, ``(1, 2)``) and as a string
otherwise. A function whose signature cannot take the suite's arguments plus
these options is a usage error (exit 2), found before anything runs.
``check_pair_loss``'s loss options (the exact loss's ``label_smoothing``,
``epsilon``, ``tau``, ``delta``) are ``--loss-option NAME=NUMBER``.

Examples
--------
``klpolicy check kl-estimator mypkg.losses:k3 --estimator k3``,
``klpolicy check kl-controller trl.trainer.utils:AdaptiveKLController``,
``klpolicy check kl-estimator mypkg.grpo:kl_term --estimator k3 --reduction seq_mean``,
``klpolicy check kl-estimator verl.trainer.ppo.core_algos:kl_penalty --estimator k3
--clamp -10 10 --option kl_penalty=low_var_kl``.
"""

from __future__ import annotations

import argparse
import ast
import functools
import importlib
import inspect
import os
import re
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
# what each suite passes to the checked function, positionally (for the signature check)
_ARGUMENTS = {
    "kl-divergence": ("p", "q"),
    "kl-estimator": ("logp", "logq"),
    "dpo-loss": ("pc", "pr", "rc", "rr", "beta"),
    "pair-loss": ("pc", "pr", "rc", "rr", "beta"),
    "optimal-policy": ("ref", "reward", "beta"),
    "soft-value": ("ref", "reward", "beta"),
}
_CONTROLLER_ARGUMENTS = {
    "fixed": ("kl_coef",),
    "adaptive": ("init_kl_coef", "target", "horizon"),
    "deadzone": ("init_kl_coef", "target"),
}
# examples on each suite's -h page (a suite not listed gets a generic one)
_EXAMPLES = {
    "kl-estimator": [
        ("mykl:k3 --estimator k3", "your k3 against Schulman's k3"),
        (
            "verl.trainer.ppo.core_algos:kl_penalty --estimator k3 --clamp -10 10 "
            "--option kl_penalty=low_var_kl",
            "verl's selector argument, and its clamp declared",
        ),
        (
            "mygrpo:kl_term --estimator k3 --reduction seq_mean --dtype float32",
            "a reduced, float32 KL term",
        ),
    ],
    "kl-controller": [
        ("trl.trainer.utils:AdaptiveKLController", "the kind is read from the constructor"),
        ("mypkg:Controller --kind adaptive --dtype float32 --report all", "every failure"),
    ],
    "kl-divergence": [("mykl:kl --max-examples 500", "your KL(p||q) of two distributions")],
    "dpo-loss": [("mydpo:loss --reduction mean", "a loss averaged over the batch")],
    "pair-loss": [
        ("mydpo:ipo --loss ipo", "one of TRL's loss_type values"),
        ("mydpo:cdpo --loss sigmoid --loss-option label_smoothing=0.1", "cDPO"),
    ],
    "optimal-policy": [("mypkg:pi_star", "fn(ref, reward, beta) -> pi*")],
    "soft-value": [("mypkg:soft_value", "fn(ref, reward, beta) -> beta log E_ref exp(r/beta)")],
}
# help of the suites' options, by keyword name
_HELP = {
    "estimator": "which estimator the function claims to be",
    "loss": "the row of klpolicy.preference.LOSSES (TRL's loss_type)",
    "max_examples": "hypothesis examples (default %(default)s)",
    "rtol": "relative tolerance (default %(default)s)",
    "atol": "absolute tolerance (default: the suite's)",
    "dtype": "the format the function computes in (default float64)",
    "reduction": "what the function returns: per-sample values or a reduction (default "
    "%(default)s)",
    "clamp": "a clamp the function applies to each estimate, checked exactly",
    "kind": "which rule the controller implements (default: read from its constructor)",
    "band": "the dead-zone rule's band (default %(default)s)",
    "factor": "the dead-zone rule's factor (default %(default)s)",
    "grad": "a function returning the gradients, checked on every example",
    "min_entry": "the smallest probability drawn (default: the suite's, per dtype)",
    "divergence": "f-DPO: the f-divergence whose score replaces the log-ratios (TRL's "
    "f_divergence_type; default %(default)s)",
    "alpha": "f-DPO: the alpha divergence's coefficient (TRL's f_alpha_divergence_coef)",
    "alpha_clamp": "f-DPO: the clamp of the alpha exponent the function applies (TRL: 80 in "
    "float32/bfloat16, 11 in float16; default: none)",
    "trl_version": "f-DPO: the TRL release whose scores and loss choices to follow (1.10.0 "
    "and later keep the scores' constants, 0.29.0-1.9.2 drop them; default %(default)s)",
}
# the pair-loss suite, when it is installed
_OPTIONAL = {"pair-loss": ("klpolicy.testing._checks_losses", "check_pair_loss")}
# the KL-term suite (needs torch): prints the report, exit 1 when it follows another divergence
_OPTIONAL["kl-term"] = ("klpolicy.testing._checks_kl_terms", "cli_kl_term")
_ARGUMENTS["kl-term"] = ("logp", "old_logp", "ref_logp")


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


def _option(
    parser: argparse.ArgumentParser, name: str, param: inspect.Parameter, suite: str
) -> None:
    flag = "--" + name.replace("_", "-")
    default = param.default
    helps = _HELP.get(name)
    if name == "reduction" and suite == "kl-term":
        helps = (
            "how the function's per-token terms (shape (N, T)) make a sequence's, at "
            "--level sequence (default %(default)s)"
        )
    if helps is None and name.startswith("supports_"):
        what = name.removeprefix("supports_").replace("_", " ")
        helps = f"whether the function claims to handle {what} inputs (default %(default)s)"
    parser = _Helped(parser, helps)
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
    elif name == "report":
        parser.add_argument(
            flag,
            default=default,
            choices=["first", "all"],
            help="first: the first failing property (default); all: every one, numbered",
        )
    elif name in ("atol", "min_entry", "alpha", "alpha_clamp"):
        parser.add_argument(flag, type=float, default=None, metavar="X")
    else:
        choices = _choices(name, suite)
        metavar = None if choices else "VALUE"
        parser.add_argument(flag, default=default, metavar=metavar, choices=choices)


class _Helped:
    """``parser`` whose ``add_argument`` fills in ``help`` where the call gives none."""

    def __init__(self, parser: argparse.ArgumentParser, helps: str | None) -> None:
        self._parser, self._help = parser, helps

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        if self._help is not None:
            kwargs.setdefault("help", self._help)
        return self._parser.add_argument(*args, **kwargs)


def _choices(name: str, suite: str = "") -> list[str] | None:
    """The values an option takes, from the library's own tables."""
    if name == "estimator":
        from ..estimators import estimator_names

        return list(estimator_names())
    if name == "loss":
        from ..preference import LOSSES

        return list(LOSSES)
    if name == "divergence":
        from ..preference import FDPO_DIVERGENCES

        return list(FDPO_DIVERGENCES)
    if name == "reduction":
        if suite == "kl-term":  # how per-token terms make a sequence's: no "none" there
            from ._checks_kl_terms import TERM_REDUCTIONS

            return list(TERM_REDUCTIONS)
        if suite != "kl-estimator":
            return ["none", "mean", "sum"]
        from ._checks_estimators import REDUCTIONS

        return list(REDUCTIONS)
    if name == "kind":
        from ._checks_control import _KINDS

        return list(_KINDS)
    return None


def _epilog(suite: str) -> str:
    lines = _EXAMPLES.get(suite) or [("mypkg.module:function", "")]
    out = ["examples:"]
    for args, what in lines:
        out.append(f"  klpolicy check {suite} {args}")
        if what:
            out.append(f"      {what}")
    return "\n".join(out) + "\n"


def _suite_parser(suite: str, check: Any) -> argparse.ArgumentParser:
    p = _Parser(
        prog=f"klpolicy check {suite}",
        description=(inspect.getdoc(check) or "").split("\n")[0],
        epilog=_epilog(suite),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("target", metavar="module:function", help="what to check")
    for name, param in list(inspect.signature(check).parameters.items())[1:]:
        flag = "--" + name.replace("_", "-")
        if param.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:  # `estimator`, `loss`
            choices = _choices(name, suite)
            extra = {"choices": choices, "help": _HELP.get(name)}
            extra["metavar"] = None if choices else "NAME"
            if param.default is inspect.Parameter.empty:
                p.add_argument(flag, required=True, **extra)
            else:
                p.add_argument(flag, default=param.default, **extra)
        elif param.kind is inspect.Parameter.KEYWORD_ONLY:
            if name == "grad":  # a function too
                p.add_argument(
                    flag, default=None, metavar="module:function", type=_load, help=_HELP[name]
                )
            else:
                _option(p, name, param, suite)
        elif param.kind is inspect.Parameter.VAR_KEYWORD:  # the exact loss's options
            p.add_argument(
                "--loss-option",
                dest="_extra",
                action="append",
                default=[],
                metavar="NAME=NUMBER",
                type=_loss_option,
                help="an option of the exact loss, e.g. label_smoothing=0.1 (repeatable)",
            )
    p.add_argument(
        "--option",
        dest="_fn_options",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        type=_fn_option,
        help="a keyword argument passed to the checked function (a class: its constructor) "
        "on every call, e.g. kl_penalty=low_var_kl; VALUE is a Python literal where it "
        "parses (0.1, True, None, 'k3'), a string otherwise (repeatable)",
    )
    return p


def _name_value(text: str, what: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}")
    return key, value


def _loss_option(text: str) -> tuple[str, float]:
    key, value = _name_value(text, "NAME=NUMBER")
    try:
        return key, float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=NUMBER, got {text!r}") from None


def _fn_option(text: str) -> tuple[str, Any]:
    """``NAME=VALUE``: VALUE as a Python literal where it parses, else the string itself."""
    key, value = _name_value(text, "NAME=VALUE")
    try:
        return key, ast.literal_eval(value.strip())
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return key, value


def _with_options(fn: Any, suite: str, options: dict[str, Any], kwargs: dict[str, Any]) -> Any:
    """``fn`` with ``options`` bound as keywords; a signature that cannot take the call is _Error.

    The suite calls ``fn`` with its positional arguments (``_ARGUMENTS``); binding those
    names plus ``options`` to ``fn``'s signature finds a missing or unknown argument
    before anything runs, instead of a TypeError reported as a failed property.
    """
    name = getattr(fn, "__name__", type(fn).__name__)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        sig = None
    names = _ARGUMENTS.get(suite)
    if suite == "kl-controller":
        from ._checks_control import _infer_kind

        try:
            kind = kwargs.get("kind") or _infer_kind(functools.partial(fn, **options))
        except ValueError:
            kind = None
        names = _CONTROLLER_ARGUMENTS.get(kind)
    elif suite == "kl-estimator" and kwargs.get("reduction", "none").startswith(("masked", "seq")):
        names = ("logp", "logq", "mask")
    if sig is not None and names is not None:
        try:
            sig.bind(*names, **options)
        except TypeError as exc:
            shown = ", ".join(names)
            missing = re.search(r"missing a required argument: '(\w+)'", str(exc))
            hint = f"; pass it with --option {missing[1]}=VALUE" if missing else ""
            raise _Error(
                f"{name}{sig} cannot be called as {name}({shown}) by the {suite} suite"
                + (f" with --option {', '.join(options)}" if options else "")
                + f": {exc}{hint}"
            ) from None
    if not options:
        return fn
    bound = functools.partial(fn, **options)
    bound.__name__ = name  # type: ignore[attr-defined]  # for the verdicts
    return bound


def run_check(argv: Sequence[str] | None = None) -> int:
    """Run ``klpolicy check`` with arguments ``argv`` (after ``check``); return the exit status.

    Prints ``passed`` (0), the suite's verdict with its smallest counterexample
    (1), or ``klpolicy check: error: ...`` on stderr (2).

    Returns
    -------
    int
        The exit status: 0 when the suite passes, 1 when it fails, 2 for an invalid
        argument, 141 when the reader of the output left.

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
                "klpolicy check SUITE -h lists a suite's options, with examples.\n"
                "The suites need hypothesis: pip install klpolicy[testing]"
            )
            return 0 if argv else 2
        suite = argv[0].replace("_", "-").removeprefix("check-")
        try:
            suites = _suites()
        except ImportError as exc:
            if "hypothesis" not in (getattr(exc, "name", None) or str(exc)):
                raise
            raise _Error(
                "klpolicy check needs hypothesis, which is not installed; install it with "
                "`pip install klpolicy[testing]`"
            ) from None
        if suite not in suites:
            known = ", ".join(sorted(suites))
            raise _Error(f"unknown suite {argv[0]!r}; choose one of {known}")
        check = suites[suite]
        args = vars(_suite_parser(suite, check).parse_args(argv[1:]))
        fn = _load(args.pop("target"))
        extra = dict(args.pop("_extra", []))
        fn_options = dict(args.pop("_fn_options"))
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
        fn = _with_options(fn, suite, fn_options, kwargs)
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
        if getattr(check, "prints_report", False):  # kl-term: the report is the answer
            if kwargs.get("expect") is not None:
                print(f"{check.__name__}({name}): follows {kwargs['expect']}")
            return 0
        examples = kwargs.get("max_examples", 100)
        print(f"{check.__name__}({name}): passed ({examples} examples)")
        return 0
    except _Error as exc:
        print(f"klpolicy check: error: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # -h of a suite's parser
        return int(exc.code or 0)
    except BrokenPipeError:  # `klpolicy check ... | head`: the reader left, as for cat
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 141
