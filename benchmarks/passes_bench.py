"""What float64 ``optimal_policy`` costs pass by pass, against the floor ``np.exp(r) * ref``.

Copies of the fast path's per-row loop (one row per block, as the sweep takes
(256, 65536) float64), each timed against the floor in the same process,
interleaved (floor, candidate, floor, ...), minimum CPU time over ``--repeat``
rounds, and the ratio printed:

* ``bare``: the passes no correct method skips and no check: ``r / beta``,
  ``exp``, the multiplication by ``ref``, the weights' (pairwise) sum and the
  normalisation;
* ``checked``: ``bare`` plus the two reductions that check and route a row in
  ``klpolicy`` (the row sum of ``ref`` by ``einsum``, the minimum of the weights);
* ``exp2``: ``checked`` with ``np.exp2`` and ``log2 e`` folded into ``1/beta``
  (faster on some machines; the exponent's rounding doubles, so not used);
* ``einsum sum``: ``checked`` with ``einsum``'s sequential sum for the weights
  (its error grows with the row length; not used);
* ``optimal_policy``: the library call.

Run from the repository root: ``python benchmarks/passes_bench.py [--beta 0.1]
[--repeat 9]``. The ratios of ``bare`` and ``checked`` bound what any
numpy implementation with the library's checks can reach on the machine.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from klpolicy import optimal_policy

ROWS, N = 256, 65536


def problem(seed: int = 0):
    rng = np.random.default_rng(seed)
    ref = rng.dirichlet(np.ones(N), size=ROWS)
    ref /= ref.sum(-1, keepdims=True)
    return ref, rng.normal(size=(ROWS, N))


def floor(ref, r):
    w = np.exp(r)
    return np.multiply(w, ref, out=w)


def loop(ref, r, beta, checks=True, exp2=False, seq_sum=False):
    """The fast path's row loop, written out (no routing of failing rows)."""
    factor = (1 / beta) * np.log2(np.e) if exp2 else 1 / beta
    exp = np.exp2 if exp2 else np.exp
    out = np.empty_like(r)
    total = np.empty(1)
    for i in range(ROWS):
        w, q, x = out[i : i + 1], ref[i : i + 1], r[i : i + 1]
        np.multiply(x, factor, out=w)
        exp(w, out=w)
        np.multiply(w, q, out=w)
        if checks:
            np.einsum("ij->i", q, out=total)
            w.min(axis=-1)
        s = np.einsum("ij->i", w) if seq_sum else w.sum(axis=-1)
        np.multiply(w, 1 / s[0], out=w)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--beta", type=float, default=0.1)
    ap.add_argument("--repeat", type=int, default=9)
    a = ap.parse_args()
    ref, r = problem()
    cases = {
        "bare": lambda: loop(ref, r, a.beta, checks=False),
        "checked": lambda: loop(ref, r, a.beta),
        "exp2": lambda: loop(ref, r, a.beta, exp2=True),
        "einsum sum": lambda: loop(ref, r, a.beta, seq_sum=True),
        "optimal_policy": lambda: optimal_policy(ref, r, a.beta),
    }
    print(
        f"(256, 65536) float64, beta {a.beta}: CPU time, minimum of {a.repeat} interleaved rounds"
    )
    for name, fn in cases.items():
        best = {"floor": np.inf, name: np.inf}
        for _ in range(a.repeat):
            for key, f in (("floor", lambda: floor(ref, r)), (name, fn)):
                t0 = time.process_time()
                f()
                best[key] = min(best[key], time.process_time() - t0)
        print(
            f"  {name:15s} {best[name] * 1e3:7.1f} ms   floor {best['floor'] * 1e3:6.1f} ms"
            f"   {best[name] / best['floor']:.2f}x"
        )


if __name__ == "__main__":
    main()
