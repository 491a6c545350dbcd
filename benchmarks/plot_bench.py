"""Speed of the per-action figures at any size a user can type, as ratios to a bare plot.

The figures: ``beta_sweep`` (one curve per action), ``explore`` without ipywidgets
and one ``animate_beta_sweep`` GIF of 3 frames (one bar per action), ``frontier``
(best-of-n points on ``V`` actions) and ``token_kl`` (one bar per position, ``V``
positions). Baseline, measured in the same process before each size (a shared machine's load
drifts): a bare matplotlib figure of the same size,
one ``ax.plot`` of a 400-point line, saved as PNG at the same dpi (the cost of any
figure at all). Each row draws one klpolicy figure for ``V`` actions (Dirichlet
reference, standard-normal rewards, seed 0) and saves it as PNG; the time is the
minimum of ``--repeat`` runs (one run for the largest sizes). Absolute times depend
on the machine; the ratios are what to compare.

    python benchmarks/plot_bench.py [--sizes 2 8 1000 100000] [--repeat 3] [--dpi 100]
"""

from __future__ import annotations

import argparse
import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from _timing import best_time

from klpolicy import plotting


def save(fig, dpi: float) -> None:
    fig.savefig(io.BytesIO(), format="png", dpi=dpi)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2, 8, 1000, 100_000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--dpi", type=float, default=100.0)
    parser.add_argument(
        "--figures",
        nargs="+",
        default=["beta_sweep", "explore", "animation_frame", "frontier", "token_kl"],
    )
    args = parser.parse_args()

    def baseline():
        fig, ax = plt.subplots(figsize=(7.5, 4.8))
        x = np.geomspace(1e-2, 1e2, 400)
        ax.plot(x, 1 / (1 + x))
        save(fig, args.dpi)

    print("baseline: a bare 400-point line plot saved as PNG, re-measured before each size")
    print(f"{'figure':<18} {'V':>8} {'time (s)':>10} {'ratio':>8}   baseline (ms)")
    for v in args.sizes:
        t_base = best_time(baseline, max(args.repeat, 5))  # the machine's load drifts
        rng = np.random.default_rng(0)
        ref = rng.dirichlet(np.ones(v))
        reward = rng.standard_normal(v)
        repeat = args.repeat if v <= 10_000 else 1
        cases = _cases(ref, reward, args.dpi)
        for name in args.figures:
            t = best_time(cases[name], repeat)
            print(
                f"{name:<18} {v:>8} {t:>10.3f} {t / t_base:>7.1f}x   {t_base * 1e3:.0f}",
                flush=True,
            )


def _cases(ref, reward, dpi):
    """One callable per figure, drawing it for this problem and saving it as PNG."""
    return {
        "beta_sweep": lambda: save(plotting.beta_sweep(ref, reward).figure, dpi),
        "explore": lambda: save(_static_explore(ref, reward), dpi),
        "animation_frame": lambda: _one_frame(ref, reward, dpi),
        "frontier": lambda: save(plotting.frontier(ref, reward).figure, dpi),
        "token_kl": lambda: save(plotting.token_kl(ref * ref.size).figure, dpi),
    }


def _static_explore(ref, reward):
    import builtins
    import warnings

    real_import = builtins.__import__

    def no_widgets(name, *a, **k):
        if name == "ipywidgets":
            raise ImportError(name)
        return real_import(name, *a, **k)

    builtins.__import__ = no_widgets
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return plotting.explore(ref, reward)
    finally:
        builtins.__import__ = real_import


def _one_frame(ref, reward, dpi):
    """A 3-frame animation (first, middle, last) written as GIF: the per-frame cost."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        plotting.animate_beta_sweep(ref, reward, frames=3, path=Path(d) / "a.gif", dpi=dpi)


if __name__ == "__main__":
    main()
