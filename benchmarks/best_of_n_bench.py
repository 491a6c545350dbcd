"""Speed of best_of_n_policy on a million outcomes, as ratios to sorting the same array.

Baselines, measured in the same run on the same reward array: one ``np.sort`` (the
issue's yardstick) and one ``np.argsort`` (the sort best_of_n_policy cannot avoid,
since it must map the law back to the caller's order). Each time is the minimum of
``--repeat`` runs. Absolute times are machine-dependent; the ratios are what to
compare across machines.

    python benchmarks/best_of_n_bench.py [--size 1000000] [--repeat 7] [--n 16]
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import best_time

from klpolicy.best_of_n import best_of_n_kl, best_of_n_policy


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1_000_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--n", type=int, default=16)
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    ref = rng.dirichlet(np.ones(args.size))
    reward = rng.standard_normal(args.size)
    tied = np.round(reward, 2)  # about 1000 distinct levels

    t_sort = best_time(lambda: np.sort(reward), args.repeat)
    t_argsort = best_time(lambda: np.argsort(reward), args.repeat)
    rows = [
        ("np.sort (baseline)", t_sort),
        ("np.argsort", t_argsort),
        (
            f"best_of_n_policy, n={args.n}",
            best_time(lambda: best_of_n_policy(ref, reward, args.n), args.repeat),
        ),
        (
            f"best_of_n_policy, n={args.n}, tied rewards",
            best_time(lambda: best_of_n_policy(ref, tied, args.n), args.repeat),
        ),
        (
            f"best_of_n_kl, n={args.n}",
            best_time(lambda: best_of_n_kl(ref, reward, args.n), args.repeat),
        ),
    ]
    print(f"best-of-n on {args.size} outcomes; min of {args.repeat} runs")
    print("absolute times are machine-dependent; compare the ratios")
    print(f"{'what':45s} {'time (ms)':>10s} {'/ np.sort':>10s} {'/ np.argsort':>13s}")
    for name, t in rows:
        print(f"{name:45s} {1e3 * t:10.1f} {t / t_sort:10.2f} {t / t_argsort:13.2f}")


if __name__ == "__main__":
    main()
