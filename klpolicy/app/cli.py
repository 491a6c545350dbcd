"""The ``klpolicy`` command: solve small problems from the shell and run the demo.

Examples
--------
``klpolicy solve --ref 0.5 0.5 --reward 1 0 --beta 0.5`` prints the optimal
policy, its log-ratio to the reference, the KL, the expected reward and the
soft value. Several ``--beta`` values give one column each; ``--kl TARGET``
solves for the beta that spends that KL; ``--json`` prints machine-readable
output. ``klpolicy demo`` prints the worked example of the KL penalty;
``klpolicy demo --out DIR`` also writes the headline figures as PNG files.
``klpolicy plot FIGURE ... -o FILE`` draws one figure of
:mod:`klpolicy.plotting` from inputs given on the command line, e.g.
``klpolicy plot beta-sweep --ref 0.5 0.5 --reward 1 0 -o sweep.png``
(``klpolicy plot -h`` lists the figures). matplotlib is imported only by these
two.

Bad input prints one line, ``klpolicy: error: ...``, and exits with status 2;
an unexpected failure inside klpolicy prints one line, ``klpolicy: internal
error: ...`` (please report it), and exits with status 1. No command prints a
traceback. Negative numbers may be typed in any form Python's ``float`` reads
(``-1.5e3``, ``-inf``).

``--json`` writes strict JSON (RFC 8259): every number is finite. An infinite
value (``beta = inf``, a log-ratio of ``-inf`` where ``pi*`` is 0 inside the
reference's support, ...) is written as ``null``, and the top-level object
``"nonfinite"`` maps its path (``"columns[1].beta"``) to ``"inf"`` or ``"-inf"``;
a ``null`` log-ratio with no entry there is an outcome off the reference's support.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from .. import __version__
from ..core import beta_for_kl
from .tables import print_table as _print_table
from .tables import solve_table

__all__ = ["main", "solve_table"]


def _json_safe(x, path: str = "", nonfinite: dict | None = None):
    """Strict JSON: an infinity becomes ``null`` and its path is recorded in ``nonfinite``."""
    if nonfinite is None:
        nonfinite = {}
        out = _json_safe(x, path, nonfinite)
        if nonfinite:
            out["nonfinite"] = nonfinite
        return out
    if isinstance(x, dict):
        return {k: _json_safe(v, f"{path}.{k}" if path else k, nonfinite) for k, v in x.items()}
    if isinstance(x, list):
        return [_json_safe(v, f"{path}[{i}]", nonfinite) for i, v in enumerate(x)]
    if isinstance(x, float) and not math.isfinite(x):
        nonfinite[path] = "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")
        return None
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


def _writable_folder(out: str, option: str) -> Path:
    """Create ``out`` if missing and check that files can be written there, or raise naming it.

    Runs before anything is printed, so that a bad folder costs one line of error
    and no half-finished output.
    """
    folder = Path(out)
    if folder.exists() and not folder.is_dir():
        raise ValueError(f"`{option}` {out!r} exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe = folder / f".klpolicy-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise ValueError(
            f"cannot write into `{option}` folder {out!r}: {exc.strerror or exc}"
        ) from None
    return folder


def _cmd_demo(args: argparse.Namespace) -> int:
    from .demo import worked_example, write_figures

    if args.out is not None:
        _need_matplotlib("klpolicy demo --out")
        _writable_folder(args.out, "--out")
    worked_example()
    if args.out is not None:
        try:
            paths = write_figures(args.out)
        except OSError as exc:  # e.g. the disk filled up after the check
            raise ValueError(
                f"cannot write the figures into `--out` {args.out!r}: {exc.strerror or exc}"
            ) from None
        print(f"\nWrote {len(paths)} figures:")
        for path in paths:
            print(f"  {path}")
    return 0


def _need_matplotlib(what: str) -> None:
    try:
        import matplotlib
    except ImportError:
        raise ValueError(
            f"{what} needs matplotlib; install it with `pip install 'klpolicy[plot]'`"
        ) from None
    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")  # files only: never open a window


def _beta_grid(a: argparse.Namespace, n: int) -> np.ndarray:
    """The log-spaced ``--beta-range`` grid, refusing a range a log axis cannot hold."""
    lo, hi = a.beta_range
    if not (0 < lo < hi < math.inf):
        raise ValueError(
            f"`--beta-range` LO HI must be finite positive numbers with LO < HI (a log-spaced "
            f"grid); got {lo:g} {hi:g}"
        )
    return np.geomspace(lo, hi, n)


def _plot_beta_sweep(a: argparse.Namespace, ax):
    from .. import plotting

    return plotting.beta_sweep(
        a.ref, a.reward, betas=_beta_grid(a, 400), mark=a.mark or (), top=a.top, ax=ax
    )


def _plot_frontier(a: argparse.Namespace, ax):
    from .. import plotting

    if a.best_of_n and importlib.util.find_spec("klpolicy.best_of_n") is None:
        raise ValueError("`--best-of-n` needs klpolicy.best_of_n, which this installation lacks")
    return plotting.frontier(
        a.ref, a.reward, betas=_beta_grid(a, 300), best_of_n=a.best_of_n or None, ax=ax
    )


def _plot_token_kl(a: argparse.Namespace, ax):
    from .. import plotting

    kl = np.asarray(a.kl, dtype=float)
    bad = ~(kl >= 0) | np.isinf(kl)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"`--kl` values are per-position KLs, finite and >= 0; found {kl[i]:g} at position "
            f"{i} (a per-token estimate such as k1 can be negative: plot it from Python with "
            "klpolicy.plotting.token_kl)"
        )
    if a.rows is not None:
        if a.rows < 1 or kl.size % a.rows:
            raise ValueError(
                f"`--rows` = {a.rows} must be positive and divide the {kl.size} `--kl` values"
            )
        kl = kl.reshape(a.rows, -1)
    return plotting.token_kl(kl, ax=ax)


def _plot_controller_trace(a: argparse.Namespace, ax):
    from .. import control, plotting

    if a.controller == "fixed":
        ctl = control.FixedKLController(a.init_beta)
    elif a.controller == "adaptive":
        ctl = control.AdaptiveKLController(a.init_beta, target=a.target, horizon=a.horizon)
    elif a.controller == "dead-zone":
        ctl = control.DeadZoneKLController(a.init_beta, target=a.target)
    else:
        ctl = control.LagrangianKLController(a.init_beta, target=a.target, lr=a.lr)
    trace = control.simulate(ctl, a.ref, a.reward, steps=a.steps, lag=a.lag)
    return plotting.controller_trace(trace, target=a.target, ax=ax)


def _plot_kl_budget(a: argparse.Namespace, ax):
    from .. import plotting

    return plotting.kl_budget(a.d, a.gold, a.proxy, ax=ax)


def _plot_estimator_histograms(a: argparse.Namespace, ax):
    from .. import plotting

    return plotting.estimator_histograms(a.p, a.q, n=a.n, rng=a.seed, ax=ax)


def _plot_fixed_points(a: argparse.Namespace, ax):
    from .. import plotting

    return plotting.fixed_points(a.ref, a.reward, betas=_beta_grid(a, 40), ax=ax)


def _plot_landing_points(a: argparse.Namespace, ax):
    from .. import plotting

    rules = [
        (f"GRPO, G={g}, no std", "grpo", {"num_generations": g, "scale_rewards": "none"})
        for g in a.num_generations
    ] + [("RLOO", "rloo", {})]
    return plotting.landing_points(a.ref, a.reward, betas=a.betas, rules=rules, ax=ax)


def _plot_training_path(a: argparse.Namespace, ax):
    from .. import dynamics, plotting

    options = {"num_generations": a.num_generations} if a.rule in ("grpo", "rloo") else {}
    path = dynamics.trajectory(
        a.rule, a.ref, a.reward, a.beta, steps=a.steps, lr=a.lr, optimizer=a.optimizer, **options
    )
    return plotting.training_path(path, ax=ax)


#: The named games of ``klpolicy plot nash-md --game``, with their help text.
_GAMES = {
    "rps": "rock-paper-scissors (rock beats scissors beats paper beats rock, surely: intransitive)",
    "transitive": "Bradley-Terry of the rewards 1 0 -1 (P[i, j] = sigmoid(r_i - r_j))",
}


def _game_matrix(name: str) -> np.ndarray:
    if name == "rps":
        return np.array([[0.5, 1.0, 0.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.5]])
    from ..preference import bradley_terry

    return bradley_terry([1.0, 0.0, -1.0])


def _preference_rows(words: Sequence[str]) -> np.ndarray:
    """``--preferences``: rows split by ``;``, numbers by spaces or commas
    (``"0.5 1 0; 0 0.5 1; 1 0 0.5"``), or ``k*k`` numbers read row by row
    (an @FILE loses its line breaks)."""
    rows = []
    for row in " ".join(words).split(";"):
        numbers = []
        for x in re.split(r"[\s,]+", row.strip()):
            if not x:
                continue
            try:
                numbers.append(float(x))
            except ValueError:
                raise ValueError(f"`--preferences` must hold numbers; found {x!r}") from None
        rows.append(numbers)
    if rows and not rows[-1]:  # a trailing `;`
        rows.pop()
    if len(rows) == 1:  # no `;`: a square number of values, row by row
        flat = rows[0]
        k = math.isqrt(len(flat))
        if k * k != len(flat):
            raise ValueError(
                "`--preferences` takes the matrix's rows separated by `;` "
                f'("0.5 1 0; 0 0.5 1; 1 0 0.5") or k*k numbers row by row; got {len(flat)} '
                "numbers and no `;`"
            )
        rows = [flat[i * k : (i + 1) * k] for i in range(k)]
    for i, row in enumerate(rows):
        if len(row) != len(rows[0]):
            raise ValueError(
                f"`--preferences` rows must have the same length; row 0 has {len(rows[0])} "
                f"numbers, row {i} has {len(row)}"
            )
    return np.array(rows, dtype=float)


def _plot_nash_md(a: argparse.Namespace, ax):
    from .. import plotting

    if a.game is not None:
        preferences = _game_matrix(a.game)
    else:
        preferences = _preference_rows(a.preferences)
    if not 1 <= a.steps <= 10_000:  # a path to draw, not a solve: 10^4 points at most
        raise ValueError(f"`--steps` must be an integer in [1, 10000]; got {a.steps}")
    labels = a.labels
    if labels is None:
        labels = ("rock", "scissors", "paper") if a.game == "rps" else ("0", "1", "2")
    return plotting.nash_md_trajectory(
        preferences, a.tau, a.eta, mu=a.mu, init=a.init, steps=a.steps, labels=labels, ax=ax
    )


def _plot_soft_best_of_n(a: argparse.Namespace, ax):
    from .. import plotting

    try:
        return plotting.soft_best_of_n(a.ref, a.reward, a.n, lams=a.lam, ax=ax)
    except ValueError as exc:  # the library names `lams`; the user typed --lam
        raise ValueError(str(exc).replace("`lams`", "`--lam`")) from None


def _cmd_plot(args: argparse.Namespace) -> int:
    _need_matplotlib("klpolicy plot")
    import matplotlib.pyplot as plt

    from ..plotting import save_figure

    for module in args.needs:
        if importlib.util.find_spec(f"klpolicy.{module}") is None:
            raise ValueError(
                f"`klpolicy plot {args.figure}` needs klpolicy.{module}, "
                "which this installation lacks"
            )
    from pathlib import Path

    animate = getattr(args, "animate", None)
    if args.output is None and animate is None:
        raise ValueError(f"`klpolicy plot {args.figure}` needs `-o FILE` (or `--animate FILE.gif`)")
    if animate is not None:
        from ..plotting import animate_beta_sweep

        if Path(animate).suffix.lower() != ".gif":
            raise ValueError(f"`--animate` writes a GIF; got {animate!r} (name it *.gif)")
        try:
            animate_beta_sweep(
                args.ref,
                args.reward,
                frames=args.frames,
                fps=args.fps,
                path=animate,
                dpi=args.dpi,
                hold=args.hold,
            )
        except OSError as exc:
            raise ValueError(
                f"cannot write `--animate` {animate!r}: {exc.strerror or exc}"
            ) from None
        finally:
            plt.close("all")
        print(animate)
        if args.output is None:
            return 0
    output = Path(args.output)
    if output.is_dir():  # -o DIR: the figure's own file inside it (as `demo --out DIR`)
        output = output / f"{args.figure.replace('-', '_')}.{args.format or 'png'}"
    try:
        written = save_figure(
            lambda ax: args.draw(args, ax),
            output,
            dpi=args.dpi,
            title=args.title,
            format=args.format,
        )
    except OSError as exc:
        raise ValueError(f"cannot write `-o` {args.output!r}: {exc.strerror or exc}") from None
    except ValueError as exc:  # the library names `path`/`format`; the user typed -o/--format
        msg = str(exc).replace("`path`", "`-o`").replace("`format`", "`--format`")
        msg = msg.replace("`dpi`", "`--dpi`")
        raise ValueError(msg) from None
    finally:
        plt.close("all")
    print(written)
    return 0


class _ArgumentError(Exception):
    pass


def _seed(text: str) -> int:
    """``--seed``: an integer in [0, 2**128) (numpy's SeedSequence range), read by argparse."""
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0; got {text!r}") from None
    if not 0 <= v < 2**128:
        raise argparse.ArgumentTypeError(f"must be an integer in [0, 2**128); got {text}")
    return v


#: What argparse must read as a negative number, not an option: everything Python's
#: ``float`` reads with a leading minus (``-1``, ``-.5``, ``-1.5e3``, ``-1E-3``, ``-inf``).
_NEGATIVE_NUMBER = re.compile(
    r"^-(\d+\.?\d*(e[+-]?\d+)?|\.\d+(e[+-]?\d+)?|inf|infinity|nan)$", re.IGNORECASE
)


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors become one line, not usage plus traceback.

    It also reads ``-1.5e3`` and ``-inf`` as negative numbers (argparse alone
    takes only ``-1`` and ``-1.5`` and calls the others unknown options).
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = _NEGATIVE_NUMBER

    def error(self, message: str):  # type: ignore[override]
        raise _ArgumentError(message)

    def convert_arg_line_to_args(self, arg_line: str) -> list[str]:
        # an @file holds arguments separated by spaces, commas or newlines; # starts a comment
        return [a for a in re.split(r"[\s,]+", arg_line.split("#", 1)[0]) if a]


_SOLVE_EXAMPLES = """examples:
  klpolicy solve --ref 0.5 0.5 --reward 1 0 --beta 0.5
      the optimal policy at beta = 0.5, its log-ratio, KL, E[r] and soft value
  klpolicy solve --ref 0.5 0.3 0.2 --reward 1 0 -1.5e3 --beta 0.1 1 inf
      one column per beta (inf: the reference itself)
  klpolicy solve --ref 0.5 0.5 --reward 1 0 --kl 0.1
      the beta whose optimal policy spends KL = 0.1 nats
  klpolicy solve --ref 0.5 0.5 --reward 1 0 --beta 0 0.5 --json
      machine-readable; infinities are null, listed in "nonfinite"
"""


_FILE_ARGS = """long inputs:
  any argument @FILE is replaced by the numbers (or arguments) in FILE, separated by
  spaces, commas or newlines (# starts a comment): the shell refuses argument lists
  past about 1 MB, a file has no limit.
  klpolicy solve --ref @ref.txt --reward @reward.txt --beta 0.5
  klpolicy plot beta-sweep --ref @ref.txt --reward @reward.txt -o sweep.png
"""


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="klpolicy",
        description="Exact KL-regularised policies: pi* = ref * exp(r / beta) / Z.",
        epilog=_FILE_ARGS,
        fromfile_prefix_chars="@",
    )
    p.add_argument("--version", action="version", version=f"klpolicy {__version__}")
    sub = p.add_subparsers(dest="command", title="commands")
    s = sub.add_parser(
        "solve",
        help="solve one problem and print the table",
        description="Solve max E_pi[r] - beta KL(pi||ref) exactly and print the table.",
        epilog=_SOLVE_EXAMPLES,
    )
    s.add_argument("--ref", type=float, nargs="+", required=True, help="reference probabilities")
    s.add_argument("--reward", type=float, nargs="+", required=True, help="rewards")
    s.add_argument(
        "--beta", type=float, nargs="+", action="extend", help="one or more KL coefficients"
    )
    s.add_argument("--kl", type=float, help="solve for the beta that spends this KL (nats)")
    s.add_argument(
        "--json",
        action="store_true",
        help='machine-readable output (strict JSON: infinities are null, listed in "nonfinite")',
    )
    s.set_defaults(func=_cmd_solve)
    d = sub.add_parser("demo", help="print the worked example; with --out, write the figures")
    d.add_argument("--out", metavar="DIR", help="write the headline figures as PNG into DIR")
    d.set_defaults(func=_cmd_demo)
    _add_plot_parser(sub)
    _add_testbed_parser(sub)
    sub.add_parser(
        "check",
        help="run a klpolicy.testing suite on module:function (needs hypothesis); "
        "klpolicy check -h lists the suites",
    )
    return p


#: One example per figure, shown on ``klpolicy plot -h`` and on the figure's own -h page.
_PLOT_EXAMPLES = {
    "beta-sweep": "--ref 0.5 0.3 0.2 --reward 1 0 -1 -o sweep.png",
    "frontier": "--ref 0.5 0.3 0.2 --reward 1 0 -1 --best-of-n 2 4 8 -o frontier.png",
    "token-kl": "--kl 0.1 0.3 0.2 0.05 0.4 0.1 --rows 2 -o token_kl.png",
    "controller-trace": "--ref 0.5 0.3 0.2 --reward 1 0 -1 --controller adaptive --target 0.1 "
    "--horizon 3 --lag 0.7 -o trace.png",
    "kl-budget": "--d 0 0.5 1 1.5 --gold 0 0.3 0.2 -0.1 --proxy 0 0.5 1 1.5 -o budget.png",
    "estimator-histograms": "--p 0.5 0.3 0.2 --q 0.2 0.3 0.5 --n 20000 --seed 0 -o hist.png",
    "fixed-points": "--ref 0.5 0.3 0.2 --reward 1 0 -1 -o fixed_points.png",
    "landing-points": "--ref 0.5 0.3 0.2 --reward 1 0 0.5 -o landing_points.png",
    "training-path": "--ref 0.5 0.5 --reward 1 0 --rule grpo --beta 0.5 -o path.png",
    "nash-md": '--preferences "0.5 1 0; 0 0.5 1; 1 0 0.5" --tau 0.2 --eta 1 '
    "--init 0.8 0.15 0.05 -o nash_md.png",
    "soft-best-of-n": "--ref 0.2 0.5 0.3 --reward 1 0.3 -2 --n 8 -o soft_bon.png",
}


def _plot_epilog(*names: str) -> str:
    lines = [f"  klpolicy plot {n} {_PLOT_EXAMPLES[n]}" for n in names or _PLOT_EXAMPLES]
    return "examples:\n" + "\n".join(lines) + "\n"


def _add_plot_parser(sub) -> None:
    """Add ``klpolicy plot FIGURE``: one sub-parser per figure, built by its own step."""
    pl = sub.add_parser(
        "plot",
        help="draw one figure into a file (needs matplotlib)",
        description="Draw one figure of klpolicy.plotting into a file; "
        "klpolicy plot FIGURE -h lists its options.",
        epilog=_plot_epilog() + "\n" + _FILE_ARGS,
    )
    figs = pl.add_subparsers(dest="figure", required=True, metavar="FIGURE")
    for add in (
        _add_beta_sweep_plot,
        _add_frontier_plot,
        _add_token_kl_plot,
        _add_controller_trace_plot,
        _add_kl_budget_plot,
        _add_estimator_histograms_plot,
        _add_fixed_points_plot,
        _add_landing_points_plot,
        _add_training_path_plot,
        _add_nash_md_plot,
        _add_soft_best_of_n_plot,
    ):
        add(figs)


def _figure_parser(
    figs, name: str, draw, help: str, needs: tuple[str, ...] = (), output_required=True
):
    """One figure's parser with the options every figure shares (output, format, title, dpi)."""
    f = figs.add_parser(
        name, help=help, description=help, epilog=_plot_epilog(name) + "\n" + _FILE_ARGS
    )
    f.add_argument(
        "-o",
        "--output",
        required=output_required,
        metavar="FILE",
        help="image file; its suffix (.png, .svg, .pdf) sets the format; an existing "
        "folder gets FIGURE.png inside it (e.g. beta_sweep.png)",
    )
    f.add_argument(
        "--format",
        choices=("png", "svg", "pdf"),
        help="file format for slides, for a FILE without a suffix (default: from the "
        "suffix of FILE; a suffix naming another format is refused)",
    )
    f.add_argument("--title", help="replace the figure's title")
    f.add_argument("--dpi", type=float, default=150.0, help="resolution, 1 to 1200 (default 150)")
    f.set_defaults(func=_cmd_plot, draw=draw, needs=needs)
    return f


def _problem_args(f, ref="--ref", reward="--reward") -> None:
    """The analytic problem: reference probabilities and rewards."""
    f.add_argument(ref, type=float, nargs="+", required=True, help="reference probabilities")
    f.add_argument(reward, type=float, nargs="+", required=True, help="rewards")


def _beta_range_arg(f, lo: float, hi: float) -> None:
    """A log-spaced beta grid with the figure's default ends."""
    f.add_argument(
        "--beta-range",
        type=float,
        nargs=2,
        default=(lo, hi),
        metavar=("LO", "HI"),
        help=f"beta grid, log-spaced (default {lo:g} {hi:g})",
    )


def _add_beta_sweep_plot(figs) -> None:
    f = _figure_parser(
        figs,
        "beta-sweep",
        _plot_beta_sweep,
        "pi*(y) against beta (log axis)",
        output_required=False,
    )
    _problem_args(f)
    _beta_range_arg(f, 1e-2, 1e2)
    f.add_argument(
        "--mark",
        type=float,
        nargs="*",
        default=[0.5, 2.0],
        help="betas at which to mark the best action's probability (default 0.5 2)",
    )
    f.add_argument(
        "--animate",
        metavar="GIF",
        help="also (or instead of -o) write an animation of pi*_beta as beta goes from inf to 0",
    )
    f.add_argument("--frames", type=int, default=60, help="frames of the animation (default 60)")
    f.add_argument("--fps", type=float, default=10.0, help="frames per second (default 10)")
    f.add_argument(
        "--hold",
        type=float,
        default=1.0,
        help="seconds the animation holds its first and last frames (default 1)",
    )
    f.add_argument(
        "--top",
        type=int,
        help="actions drawn one by one, 1 to 6 (default: all up to 6, else 4: the best, "
        "the reference's most likely, the next best; the rest as a total and a band)",
    )


def _add_frontier_plot(figs) -> None:
    f = _figure_parser(figs, "frontier", _plot_frontier, "E[r] against KL, with best-of-n points")
    _problem_args(f)
    _beta_range_arg(f, 1e-3, 1e3)
    f.add_argument(
        "--best-of-n", type=int, nargs="*", default=None, metavar="N", help="best-of-n points"
    )


def _add_token_kl_plot(figs) -> None:
    f = _figure_parser(
        figs, "token-kl", _plot_token_kl, "KL at each position (heatmap with --rows)"
    )
    f.add_argument("--kl", type=float, nargs="+", required=True, help="per-position KL (nats)")
    f.add_argument("--rows", type=int, help="reshape the values into ROWS sequences (heatmap)")


def _add_controller_trace_plot(figs) -> None:
    f = _figure_parser(
        figs, "controller-trace", _plot_controller_trace, "a KL controller's closed loop"
    )
    _problem_args(f)
    f.add_argument(
        "--controller",
        choices=("adaptive", "dead-zone", "fixed", "lagrangian"),
        default="adaptive",
        help="the rule: adaptive (Ziegler et al. 2019, TRL's), dead-zone (PPO paper, sec. 4), "
        "fixed, lagrangian (dual ascent) (default adaptive)",
    )
    f.add_argument("--init-beta", type=float, default=1.0, help="initial coefficient")
    f.add_argument("--target", type=float, default=0.1, help="KL target (nats)")
    f.add_argument("--horizon", type=float, default=10.0, help="adaptive controller's horizon")
    f.add_argument("--lr", type=float, default=1.0, help="Lagrangian controller's step size")
    f.add_argument(
        "--steps", type=int, default=100, help="controller updates to simulate (default 100)"
    )
    f.add_argument("--lag", type=float, default=0.0, help="policy lag in [0, 1)")


def _add_kl_budget_plot(figs) -> None:
    f = _figure_parser(
        figs, "kl-budget", _plot_kl_budget, "gold (and proxy) reward against sqrt(KL)"
    )
    f.add_argument("--d", type=float, nargs="+", required=True, help="sqrt(KL) of each point")
    f.add_argument("--gold", type=float, nargs="+", required=True, help="gold reward")
    f.add_argument("--proxy", type=float, nargs="+", help="proxy reward")


def _add_estimator_histograms_plot(figs) -> None:
    f = _figure_parser(
        figs,
        "estimator-histograms",
        _plot_estimator_histograms,
        "k1/k2/k3 per-sample spread",
        ("estimators",),
    )
    f.add_argument("--p", type=float, nargs="+", required=True, help="sampling distribution")
    f.add_argument("--q", type=float, nargs="+", required=True, help="reference distribution")
    f.add_argument("--n", type=int, default=20000, help="samples drawn from p (default 20000)")
    f.add_argument("--seed", type=_seed, default=0, help="seed of the draws (default 0)")


def _add_fixed_points_plot(figs) -> None:
    f = _figure_parser(
        figs,
        "fixed-points",
        _plot_fixed_points,
        "E[r] where each estimator placement converges",
        ("estimators",),
    )
    _problem_args(f)
    _beta_range_arg(f, 0.05, 20.0)


def _add_landing_points_plot(figs) -> None:
    f = _figure_parser(
        figs,
        "landing-points",
        _plot_landing_points,
        "where GRPO (no std) and RLOO land, beside pi*'s frontier",
        ("dynamics",),
    )
    _problem_args(f)
    f.add_argument(
        "--betas", type=float, nargs="+", default=[0.25, 0.5, 1.0, 2.0], help="configured betas"
    )
    f.add_argument(
        "--num-generations", type=int, nargs="+", default=[2, 8], help="GRPO group sizes"
    )


def _add_training_path_plot(figs) -> None:
    f = _figure_parser(
        figs,
        "training-path",
        _plot_training_path,
        "a trainer rule's mean-field path",
        ("dynamics",),
    )
    _problem_args(f)
    f.add_argument("--rule", default="grpo", help="a rule of klpolicy.dynamics.RULES")
    f.add_argument("--beta", type=float, default=0.5, help="the KL coefficient (default 0.5)")
    f.add_argument("--num-generations", type=int, default=2, help="group size (default 2)")
    f.add_argument("--steps", type=int, default=200, help="steps (default 200)")
    f.add_argument("--lr", type=float, default=1.0, help="step size (default 1)")
    f.add_argument("--optimizer", choices=("sgd", "natural"), default="sgd")


def _add_nash_md_plot(figs) -> None:
    f = _figure_parser(
        figs,
        "nash-md",
        _plot_nash_md,
        "a Nash-MD trajectory on the 3-outcome simplex, with the regularised equilibrium",
        ("preference",),
    )
    game = f.add_mutually_exclusive_group(required=True)
    game.add_argument(
        "--preferences",
        nargs="+",
        metavar="ROWS",
        help='preference matrix P[i, j] = P(i preferred to j), P + P^T = 1, rows separated by ";" '
        '(e.g. "0.5 1 0; 0 0.5 1; 1 0 0.5"), or 9 numbers row by row',
    )
    game.add_argument(
        "--game",
        choices=tuple(_GAMES),
        help="a named game: " + "; ".join(f"{k}: {v}" for k, v in _GAMES.items()),
    )
    f.add_argument("--tau", type=float, default=0.2, help="KL coefficient tau > 0 (default 0.2)")
    f.add_argument(
        "--eta", type=float, default=1.0, help="step size, 0 < eta * tau < 1 (default 1)"
    )
    f.add_argument(
        "--steps", type=int, default=60, help="Nash-MD steps drawn, at most 10000 (default 60)"
    )
    f.add_argument("--mu", type=float, nargs="+", help="reference probabilities (default uniform)")
    f.add_argument(
        "--init",
        type=float,
        nargs="+",
        default=[0.8, 0.15, 0.05],
        help="the first policy (default 0.8 0.15 0.05: off the equilibrium, so the path shows)",
    )
    f.add_argument(
        "--labels",
        nargs=3,
        metavar="NAME",
        help="names of the three outcomes (default rock scissors paper for --game rps, else 0 1 2)",
    )


def _add_soft_best_of_n_plot(figs) -> None:
    f = _figure_parser(
        figs,
        "soft-best-of-n",
        _plot_soft_best_of_n,
        "soft best-of-n's E[r] against KL along lam, beside the tilt's frontier and best-of-n",
        ("best_of_n",),
    )
    _problem_args(f)
    f.add_argument(
        "--n",
        type=int,
        default=8,
        help="draws from the reference (default 8); best-of-n points at 1, 2, 4, ..., N",
    )
    f.add_argument(
        "--lam",
        type=float,
        nargs="+",
        help="temperatures of the curve, >= 0 (0: hard best-of-n, inf: the reference; "
        "default 0, 40 log-spaced from 1e-2 to 1e2 times the reward's spread, inf)",
    )


def _add_testbed_parser(sub) -> None:
    """``klpolicy testbed run TRAINER ...``: a real TRL trainer against its landing point."""
    tb = sub.add_parser(
        "testbed", help="train a tiny transformers model with a real trainer (needs klpolicy[trl])"
    )
    tsub = tb.add_subparsers(dest="testbed_command", required=True, metavar="COMMAND")
    r = tsub.add_parser(
        "run",
        help="run TRAINER (trl-grpo, trl-rloo, trl-dpo, or klpolicy's own klpolicy-exact, "
        "klpolicy-reinforce, klpolicy-ppo, klpolicy-grpo) on a built-in task",
    )
    r.add_argument(
        "trainer",
        metavar="TRAINER",
        help="trl-grpo, trl-rloo, trl-dpo (TRL's trainers), klpolicy-exact, klpolicy-reinforce, "
        "klpolicy-ppo or klpolicy-grpo (klpolicy.torch's rules on the same model)",
    )
    r.add_argument(
        "--task",
        default="bandit",
        metavar="TASK",
        help="a built-in task of klpolicy.testbed.TASKS: bandit (default), tree, prompts, "
        "bandit-skewed (the bandit, its reference fitted to a skewed law)",
    )
    r.add_argument("--beta", type=float, help="the trainer's beta (default 0.5)")
    r.add_argument(
        "--num-generations", type=int, help="group size G (default 2; not klpolicy-reinforce)"
    )
    r.add_argument("--scale-rewards", help='GRPO: "group", "batch" or "none" (default "none")')
    r.add_argument("--loss-type", help="GRPO's loss_type (TRL's default dapo)")
    r.add_argument("--learning-rate", type=float, help="the optimiser's lr (default 0.01)")
    r.add_argument("--pairs", type=int, help="DPO: preference pairs drawn per prompt (default 256)")
    r.add_argument(
        "--bt-temperature",
        type=float,
        help="DPO: the Bradley-Terry labels' temperature (default 1)",
    )
    r.add_argument(
        "--batch-size",
        type=int,
        help="klpolicy-reinforce, klpolicy-ppo: samples a step (default 16)",
    )
    r.add_argument(
        "--estimator",
        help='klpolicy-reinforce, klpolicy-ppo: the KL estimator, "k1" (default), "k2" or "k3"',
    )
    r.add_argument(
        "--placement", help='klpolicy-reinforce: the KL "reward" (default, detached) or "loss"'
    )
    r.add_argument("--steps", type=int, default=300, help="optimiser steps (default 300)")
    r.add_argument("--seed", type=_seed, default=0, help="the trainer's seed (default 0)")
    r.add_argument(
        "--device", help='where to train: "cpu" (default) or an accelerator such as "cuda"'
    )
    r.add_argument("--json", action="store_true", help="one JSON object on stdout")
    r.add_argument("--out", metavar="DIR", help="also write the result as DIR/testbed-TRAINER.json")
    r.set_defaults(func=_cmd_testbed_run)


def _cmd_testbed_run(args: argparse.Namespace) -> int:
    from ..testbed import ADAPTERS, TASKS, run

    if args.trainer not in ADAPTERS:
        valid = ", ".join(repr(k) for k in sorted(ADAPTERS))
        raise ValueError(f"`TRAINER` must be one of {valid}; got {args.trainer!r}")
    if args.task not in TASKS:
        valid = ", ".join(repr(k) for k in TASKS)
        raise ValueError(f"`--task` must be one of {valid}; got {args.task!r}")
    names = (
        "beta",
        "num_generations",
        "scale_rewards",
        "loss_type",
        "learning_rate",
        "pairs",
        "bt_temperature",
        "batch_size",
        "estimator",
        "placement",
    )
    options = {k: getattr(args, k) for k in names if getattr(args, k) is not None}
    out = None
    if args.out is not None:
        out = Path(args.out)
        if out.exists() and not out.is_dir():
            raise ValueError(f"`--out` must be a folder; {str(out)!r} is a file")
    # TRL's progress bar on stderr when a person watches (never into a pipe or a log)
    progress = sys.stderr.isatty() and not args.json
    res = run(
        args.trainer,
        TASKS[args.task](),
        steps=args.steps,
        seed=args.seed,
        device=args.device,
        progress=progress,
        **options,
    )
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"testbed-{args.trainer}.json").write_text(res.to_json() + "\n")
    if args.json:
        print(res.to_json())
        return 0
    print(f"{args.trainer} on {res.task} {res.config} steps={res.steps} seed={res.seed}")
    print(f"landing: {res.landing}")
    for key in ("kl_to_predicted", "kl_to_pistar", "kl_ref_to_predicted", "beta_fit", "wall_time"):
        print(f"{key:>20}  {getattr(res, key)}")
    if len(res.prompts) > 1:  # the KLs above are the prompts' mean
        for key in ("kl_to_predicted", "kl_to_pistar"):
            per = getattr(res, f"{key}_by_prompt")
            if per is not None:
                each = ", ".join(f"{p!r} {v:.4g}" for p, v in zip(res.prompts, per, strict=True))
                print(f"{key:>20}  by prompt: {each}")
    return 0


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``klpolicy`` command; returns the exit status.

    0 on success; 2 for bad input (one line ``klpolicy: error: ...`` on
    stderr); 1 for an unexpected failure inside klpolicy (one line
    ``klpolicy: internal error: ...``; please report it). A bare ``klpolicy``
    prints the list of commands and returns 0.

    Returns
    -------
    int
        The exit status: 0 on success, 2 for an invalid argument, 130 when interrupted,
        141 when the reader of the output left.
    """
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["check"]:  # its own parser; imported lazily (it needs hypothesis)
        from ..testing.cli import run_check

        return run_check(argv[1:])
    try:
        parser = _parser()
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return 0
        return args.func(args)
    except (_ArgumentError, ValueError, TypeError) as exc:
        print(f"klpolicy: error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("klpolicy: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `klpolicy solve ... --json | head`: the reader left, as for cat
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 141
    except Exception as exc:  # never a traceback: one line, and a request to report it
        print(
            f"klpolicy: internal error: {type(exc).__name__}: {_one_line(exc)} "
            "(please report this at the klpolicy issue tracker)",
            file=sys.stderr,
        )
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
