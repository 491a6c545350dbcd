"""Speed of the nca_pair and hinge population optima, as ratios to dpo_optimum.

Baseline, measured in the same run on the same problem: ``dpo_optimum`` (Newton's method
on the dense n x n pair weights, the library's reference solve of a population loss).
Problems: ``ref`` Dirichlet(1), preferences P[i, j] uniform in (0.2, 0.8) above the
diagonal, beta 0.5. Each time is the minimum of ``--repeat`` runs; absolute times are
machine-dependent, the ratios are what to compare.

    python benchmarks/preference_bench.py [--sizes 40 100 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import best_time

from klpolicy.preference import dpo_optimum, population_optimum


def problem(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    ref = rng.dirichlet(np.ones(n))
    upper = np.triu(rng.uniform(0.2, 0.8, (n, n)), 1)
    p = upper + np.tril(1.0 - upper.T, -1)
    np.fill_diagonal(p, 0.5)
    return ref, p


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[40, 100, 1000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument(
        "--hinge-max", type=int, default=100, help="skip hinge above this size (HiGHS time)"
    )
    args = parser.parse_args()
    print(f"{'n':>6} {'dpo_optimum':>12} {'nca_pair':>10} {'ratio':>7} {'hinge':>10} {'ratio':>7}")
    for n in args.sizes:
        ref, p = problem(n)
        base = best_time(lambda ref=ref, p=p: dpo_optimum(ref, p, 0.5), args.repeat)
        nca = best_time(
            lambda ref=ref, p=p: population_optimum(ref, p, 0.5, loss="nca_pair"), args.repeat
        )
        if n > args.hinge_max:
            print(f"{n:>6} {base:>11.4f}s {nca:>9.4f}s {nca / base:>7.2f} {'skipped':>10}")
            continue
        hinge = best_time(lambda ref=ref, p=p: population_optimum(ref, p, 0.5, loss="hinge"), 1)
        print(
            f"{n:>6} {base:>11.4f}s {nca:>9.4f}s {nca / base:>7.2f} {hinge:>9.4f}s "
            f"{hinge / base:>7.2f}"
        )


if __name__ == "__main__":
    main()
