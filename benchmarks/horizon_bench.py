"""Soft best-of-n's exact law on 10^5 outcomes at n = 64, as a ratio against hard best-of-n.

Run: ``PYTHONPATH=. python benchmarks/horizon_bench.py``. Prints seconds and the ratio to the
baseline (``best_of_n_policy`` on the same problem, same process).
"""

from __future__ import annotations

import time

import numpy as np

from klpolicy.best_of_n import best_of_n_policy, soft_best_of_n_policy


def _best(fn, repeat=3):
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def main() -> None:
    rng = np.random.default_rng(0)
    k, n = 10**5, 64
    q = rng.dirichlet(np.ones(k))
    r = rng.normal(size=k)
    base = _best(lambda: best_of_n_policy(q, r, n))
    print(f"baseline best_of_n_policy: {base:.4f} s")
    for lam in (1.0, 0.1):
        t = _best(lambda lam=lam: soft_best_of_n_policy(q, r, n, lam))
        print(f"soft_best_of_n_policy lam={lam}: {t:.3f} s, ratio {t / base:.1f}x")


if __name__ == "__main__":
    main()
