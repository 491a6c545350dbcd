"""The ``klpolicy`` command: solve small problems from the shell and run the demo.

Examples
--------
``klpolicy solve --ref 0.5 0.5 --reward 1 0 --beta 0.5`` prints the optimal
policy, its log-ratio to the reference, the KL, the expected reward and the
soft value. Several ``--beta`` values give one column each; ``--kl TARGET``
solves for the beta that spends that KL; ``--json`` prints machine-readable
output. ``klpolicy demo`` prints the worked example of the KL penalty.

Bad input prints one line, ``klpolicy: error: ...``, and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Sequence

import numpy as np

from . import __version__
from .closed_form import beta_for_kl, max_kl, optimal_kl, optimal_policy, soft_value

__all__ = ["main", "solve_table"]


def _fmt(x: float, width: int = 10) -> str:
    if math.isinf(x):
        s = "inf" if x > 0 else "-inf"
    elif x == 0 or 1e-4 <= abs(x) < 1e6:
        s = f"{x:.6f}"
    else:
        s = f"{x:.4e}"
    return s.rjust(width)


def _beta_label(b: float) -> str:
    return "inf" if math.isinf(b) else f"{b:g}"


def solve_table(ref: Sequence[float], reward: Sequence[float], betas: Sequence[float]) -> dict:
    """Everything ``klpolicy solve`` prints, as a dictionary (the ``--json`` payload).

    Examples
    --------
    >>> out = solve_table([0.5, 0.5], [1.0, 0.0], [0.5])
    >>> [round(p, 4) for p in out["columns"][0]["policy"]]
    [0.8808, 0.1192]
    """
    ref_a = np.asarray(ref, dtype=float)
    rew_a = np.asarray(reward, dtype=float)
    cols = []
    for b in betas:
        pi = optimal_policy(ref_a, rew_a, b)
        with np.errstate(divide="ignore"):
            lr = np.where(
                ref_a > 0,
                np.log(np.where(pi > 0, pi, 1)) - np.log(np.where(ref_a > 0, ref_a, 1)),
                0,
            )
            lr = np.where((pi == 0) & (ref_a > 0), -np.inf, lr)
        cols.append(
            {
                "beta": float(b),
                "policy": [float(x) for x in pi],
                "log_ratio": [float(x) if ref_a[i] > 0 else None for i, x in enumerate(lr)],
                "kl": float(optimal_kl(ref_a, rew_a, b)),
                "expected_reward": float(np.dot(pi, rew_a)),
                "soft_value": float(soft_value(ref_a, rew_a, b)),
            }
        )
    return {"ref": [float(x) for x in ref_a], "reward": [float(x) for x in rew_a], "columns": cols}


def _print_table(out: dict, file=None) -> None:
    file = file or sys.stdout
    cols = out["columns"]
    single = len(cols) == 1
    head = ["action", "ref", "reward"]
    for c in cols:
        head.append(f"pi*(b={_beta_label(c['beta'])})")
        if single:
            head.append("log ratio")
    w = max(12, max(len(h) for h in head) + 1)
    print("".join(h.rjust(w) for h in head), file=file)
    for i, (q, r) in enumerate(zip(out["ref"], out["reward"])):
        row = [str(i).rjust(w), _fmt(q, w), _fmt(r, w)]
        for c in cols:
            row.append(_fmt(c["policy"][i], w))
            if single:
                lr = c["log_ratio"][i]
                row.append("(off support)".rjust(w) if lr is None else _fmt(lr, w))
        print("".join(row), file=file)
    print(file=file)
    for key, label in [
        ("kl", "KL(pi*||ref)"),
        ("expected_reward", "E_pi*[r]"),
        ("soft_value", "soft value"),
    ]:
        print(label.rjust(3 * w) + "".join(_fmt(c[key], w) for c in cols), file=file)


def _json_safe(x):
    """Strict JSON: infinities become the strings "inf" and "-inf"."""
    if isinstance(x, dict):
        return {k: _json_safe(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v) for v in x]
    if isinstance(x, float) and math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def _cmd_solve(args: argparse.Namespace) -> int:
    betas = list(args.beta or [])
    if args.kl is not None:
        betas.append(float(beta_for_kl(args.ref, args.reward, args.kl)))
    if not betas:
        raise ValueError("give at least one `--beta` or a `--kl` target")
    out = solve_table(args.ref, args.reward, betas)
    if args.kl is not None:
        out["kl_target"] = args.kl
        out["beta_for_kl"] = betas[-1]
    if args.json:
        json.dump(_json_safe(out), sys.stdout, indent=2, allow_nan=False)
        print()
    else:
        if args.kl is not None:
            print(f"beta for KL = {args.kl:g} nats: {betas[-1]:.10g}\n")
        _print_table(out)
    return 0


def _cmd_demo(args: argparse.Namespace) -> int:
    ref, reward = [0.5, 0.5], [1.0, 0.0]
    print("The KL penalty's worked example")
    print("===============================")
    print("Two responses, each of reference probability 0.5; rewards 1 and 0.")
    print("The optimal policy pi* = ref * exp(r / beta) / Z puts on the better response:\n")
    for b in (0.5, 2.0):
        p = float(optimal_policy(ref, reward, b)[0])
        print(f"  beta = {b:<4g}: {p:.4f}  (= e^{1 / b:g} / (e^{1 / b:g} + 1))")
    print("\nbeta acts as a temperature:")
    for b in (0.0, 0.1, 0.5, 2.0, 10.0, math.inf):
        p = float(optimal_policy(ref, reward, b)[0])
        print(
            f"  beta = {_beta_label(b):>4}: pi*(better) = {p:.4f}   KL = {float(optimal_kl(ref, reward, b)):.4f} nats"
        )
    print(
        f"\nThe largest reachable KL (greedy, beta -> 0) is log 2 = {float(max_kl(ref, reward)):.4f} nats."
    )
    b = float(beta_for_kl(ref, reward, 0.1))
    print(f"A KL budget of 0.1 nats is spent at beta = {b:.6f}.\n")
    _print_table(solve_table(ref, reward, [0.5, 2.0]))
    return 0


class _ArgumentError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors become one line, not usage plus traceback."""

    def error(self, message: str):  # type: ignore[override]
        raise _ArgumentError(message)


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="klpolicy",
        description="Exact KL-regularised policies: pi* = ref * exp(r / beta) / Z.",
    )
    p.add_argument("--version", action="version", version=f"klpolicy {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    s = sub.add_parser("solve", help="solve one problem and print the table")
    s.add_argument("--ref", type=float, nargs="+", required=True, help="reference probabilities")
    s.add_argument("--reward", type=float, nargs="+", required=True, help="rewards")
    s.add_argument(
        "--beta", type=float, nargs="+", action="extend", help="one or more KL coefficients"
    )
    s.add_argument("--kl", type=float, help="solve for the beta that spends this KL (nats)")
    s.add_argument("--json", action="store_true", help="machine-readable output")
    s.set_defaults(func=_cmd_solve)
    d = sub.add_parser("demo", help="print the worked example")
    d.set_defaults(func=_cmd_demo)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``klpolicy`` command; returns the exit status."""
    try:
        args = _parser().parse_args(argv)
        return args.func(args)
    except _ArgumentError as exc:
        print(f"klpolicy: error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"klpolicy: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
