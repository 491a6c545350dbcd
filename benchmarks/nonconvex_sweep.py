"""Accuracy sweep of the non-convex margin optima (exo_pair, discopop) against mpmath.

Not a speed benchmark: it counts, over random problems with the outcomes in random order,
the answers that are not local minimisers (a scaled residual above 1e-8 or a negative
smallest eigenvalue of the scaled gauge-fixed Hessian, both in 60-digit mpmath), the
answers that change with the order (1e-10 relative, entry by entry; and the largest such
change), and the worst entry error against tests/preference/_mp_optima.py: its minimiser
from x = 0 (exo_pair, discopop at tau = 1) and, for discopop at tau = 0.05 (many local
minima), the mpmath local minimum next to the answer (``polish``). An answer that is
another certified local minimum than the one reached from x = 0 is counted apart
("other minimum") and measured against ``polish``. Entries are compared where the
reference is positive; a subnormal entry at its absolute resolution (two steps of 2^-1074),
as in the tests. Problems: 3-5 outcomes, reference entries 10^U(-30, 0), P[i, j] uniform
in (0.05, 0.95), beta 10^U(-1.5, 1); ``--wide``: 2-8 outcomes and P uniform in (0, 1);
``--hard``: 3-6 outcomes, half of the references uniform, P in sixteenths (1/16 .. 15/16),
beta 1/64, 1/32, 0.03 or 0.05 (entries far below 1e-100, exact symmetries).
Run from the repository root; point PYTHONPATH at another checkout to measure its code.

    python benchmarks/nonconvex_sweep.py [--count 200] [--seed 11] [--wide | --hard]
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
from tests.preference.test_order_free_optima import _has_symmetry

CASES = [
    ("exo_pair", {}),
    ("exo_pair", {"epsilon": 0.2}),
    ("discopop", {"tau": 1.0}),
    ("discopop", {}),
]


def hard_problem(rng):
    n = int(rng.integers(3, 7))
    ref = np.full(n, 1.0 / n) if rng.random() < 0.5 else 10.0 ** rng.uniform(-30, 0, n)
    ref /= ref.sum()
    p = np.full((n, n), 0.5)
    for i, j in itertools.combinations(range(n), 2):
        p[i, j] = rng.integers(1, 16) / 16
        p[j, i] = 1 - p[i, j]
    return ref, p, float(rng.choice([1 / 64, 1 / 32, 0.03, 0.05])), rng.permutation(n)


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
    ap.add_argument("--hard", action="store_true")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    stats = {
        f"{n} {o}": dict(nonmin=0, order=0, order_worst=0.0, other=0, worst=0.0) for n, o in CASES
    }
    tiny = 2 * np.finfo(np.float64).smallest_subnormal

    def error(got, want):
        ok = want > 0
        if np.any(got[~ok] != 0):
            return np.inf
        err = np.maximum(np.abs(got[ok] - want[ok]) - tiny, 0.0) / want[ok]
        return float(np.max(err, initial=0.0))

    for it in range(a.count):
        ref, p, beta, perm = hard_problem(rng) if a.hard else problem(rng, a.wide)
        inv = np.argsort(perm)
        for name, o in CASES:
            s = stats[f"{name} {o}"]
            got = population_optimum(ref[perm], p[np.ix_(perm, perm)], beta, loss=name, **o)[inv]
            base = population_optimum(ref, p, beta, loss=name, **o)
            moved = error(got, base)
            s["order_worst"] = max(s["order_worst"], moved)
            if moved > 1e-10:
                s["order"] += 1
            # underflowed or subnormal entries: no float scores (to their digits) there
            if np.all(got >= np.finfo(np.float64).tiny):
                res, lam = M.residual_and_curvature(name, o, ref, p, beta, got)
                if not res < 1e-8 or lam < 0:
                    s["nonmin"] += 1
                    print(f"problem {it} {name} {o}: residual {res:.2e}, curvature {lam:.2e}")
                    continue
            if (name, o) == ("discopop", {}) or _has_symmetry(ref, p):  # as the tests do
                want = M.polish(name, o, ref, p, beta, got)
            else:
                want = M.policy(name, o, ref, p, beta)
                if error(got, want) > 1e-6:  # another local minimum? certify the answer's
                    s["other"] += 1
                    print(f"problem {it} {name} {o}: another local minimum than from x = 0")
                    want = M.polish(name, o, ref, p, beta, got)
            e = error(got, want)
            if e > 1e-10:
                print(f"problem {it} {name} {o}: entry error {e:.3g}")
            s["worst"] = max(s["worst"], e)
    print(f"{a.count} problems, seed {a.seed}{', wide' * a.wide}{', hard' * a.hard}")
    for k, v in stats.items():
        print(
            f"{k}: non-minimisers {v['nonmin']}, order-dependent {v['order']} (largest change "
            f"{v['order_worst']:.2g}), other minimum {v['other']}, worst entry error "
            f"{v['worst']:.2g}"
        )


if __name__ == "__main__":
    main()
