"""Accuracy sweep of the non-convex margin optima (exo_pair, discopop) against mpmath.

Not a speed benchmark: it counts, over random problems with the outcomes in random order,
the answers that are not local minimisers (a scaled residual above 1e-8 or a negative
smallest eigenvalue of the scaled gauge-fixed Hessian, both in 60-digit mpmath), the
answers that change with the order (1e-10 relative, entry by entry), and the worst entry
error against tests/preference/_mp_optima.py: its minimiser from x = 0 (exo_pair,
discopop at tau = 1) and, for discopop at tau = 0.05 (many local minima), the mpmath
local minimum next to the answer (``polish``). Problems: 3-5 outcomes, reference entries
10^U(-30, 0), P[i, j] uniform in (0.05, 0.95), beta 10^U(-1.5, 1); ``--wide``: 2-8
outcomes and P uniform in (0, 1), without the reference comparison. Run from the
repository root; point PYTHONPATH at another checkout to measure its code.

    python benchmarks/nonconvex_sweep.py [--count 200] [--seed 11] [--wide]
"""

from __future__ import annotations

import argparse
import itertools
import pathlib
import sys

import numpy as np

sys.path.append(str(pathlib.Path(__file__).resolve().parents[1]))  # tests/ helpers

from klpolicy.preference import population_optimum
from tests.preference import _mp_optima as M

CASES = [
    ("exo_pair", {}),
    ("exo_pair", {"epsilon": 0.2}),
    ("discopop", {"tau": 1.0}),
    ("discopop", {}),
]


def problem(rng, wide):
    n = int(rng.integers(2, 9) if wide else rng.integers(3, 6))
    ref = 10.0 ** rng.uniform(-30, 0, n)
    ref /= ref.sum()
    lo, hi = (0.0, 1.0) if wide else (0.05, 0.95)
    p = np.full((n, n), 0.5)
    for i, j in itertools.combinations(range(n), 2):
        p[i, j] = rng.uniform(lo, hi)
        p[j, i] = 1 - p[i, j]
    return ref, p, float(10 ** rng.uniform(-1.5, 1)), rng.permutation(n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--wide", action="store_true")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    stats = {f"{n} {o}": dict(nonmin=0, order=0, worst=0.0) for n, o in CASES}
    for it in range(a.count):
        ref, p, beta, perm = problem(rng, a.wide)
        inv = np.argsort(perm)
        for name, o in CASES:
            s = stats[f"{name} {o}"]
            got = population_optimum(ref[perm], p[np.ix_(perm, perm)], beta, loss=name, **o)[inv]
            base = population_optimum(ref, p, beta, loss=name, **o)
            live = base > 0
            if np.max(np.abs(got[live] - base[live]) / base[live], initial=0.0) > 1e-10:
                s["order"] += 1
            if not np.all(got > 0):  # deterministic limits: no finite scores to check
                continue
            res, lam = M.residual_and_curvature(name, o, ref, p, beta, got)
            if not res < 1e-8 or lam < 0:
                s["nonmin"] += 1
                print(f"problem {it} {name} {o}: residual {res:.2e}, curvature {lam:.2e}")
                continue
            if a.wide:
                continue
            if (name, o) == ("discopop", {}):
                want = M.polish(name, o, ref, p, beta, got)
            else:
                want = M.policy(name, o, ref, p, beta)
            s["worst"] = max(s["worst"], float(np.max(np.abs(got - want) / want)))
    print(f"{a.count} problems, seed {a.seed}{', wide' if a.wide else ''}")
    for k, v in stats.items():
        worst = "" if a.wide else f", worst entry error {v['worst']:.2g}"
        print(f"{k}: non-minimisers {v['nonmin']}, order-dependent {v['order']}{worst}")


if __name__ == "__main__":
    main()
