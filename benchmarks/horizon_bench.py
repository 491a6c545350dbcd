"""Soft best-of-n's exact law on 10^5 outcomes at n = 64, as a ratio against hard best-of-n;
the Nash equilibrium of a 50-outcome preference game, as a ratio against scipy's root finder.

Run: ``PYTHONPATH=. python benchmarks/horizon_bench.py``. Prints seconds and the ratio to the
baselines (``best_of_n_policy`` on the same problem; ``scipy.optimize.root``, MINPACK's hybrid
method, on the same fixed-point equation from the same start), same process.
"""

from __future__ import annotations

import time

import numpy as np

from klpolicy.best_of_n import best_of_n_policy, soft_best_of_n_policy
from klpolicy.preference import exploitability, nash_equilibrium


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
    # the nodes of the integral grow like 1/lam; the work per outcome does not
    for lam in (1.0, 0.1, 0.01, 0.001):
        t = _best(lambda lam=lam: soft_best_of_n_policy(q, r, n, lam))
        law = soft_best_of_n_policy(q, r, n, lam)
        print(
            f"soft_best_of_n_policy lam={lam}: {t:.3f} s, ratio {t / base:.1f}x "
            f"(sum - 1 = {law.sum() - 1:.1e})"
        )
    nash()


def _root_baseline(p, tau, mu):
    """scipy.optimize.root (hybr) on z = log mu + A softmax(z) / tau, z[0] pinned to 0."""
    from scipy.optimize import root

    a = 0.5 * (p - p.T)
    lmu = np.log(mu)

    def softmax(z):
        e = np.exp(z - z.max())
        return e / e.sum()

    def res(zr):
        z = np.concatenate([[0.0], zr])
        r = z - lmu - a @ softmax(z) / tau
        return (r - r[0])[1:]

    sol = root(res, (lmu - lmu[0])[1:], method="hybr", options={"xtol": 1e-14})
    return softmax(np.concatenate([[0.0], sol.x]))


def nash() -> None:
    rng = np.random.default_rng(0)
    n = 50
    p = np.full((n, n), 0.5)
    iu = np.triu_indices(n, 1)
    p[iu] = rng.uniform(size=iu[0].size)
    p[(iu[1], iu[0])] = 1.0 - p[iu]
    mu = rng.dirichlet(np.ones(n))
    for tau in (1.0, 0.1, 0.01):
        base = _best(lambda tau=tau: _root_baseline(p, tau, mu))
        t = _best(lambda tau=tau: nash_equilibrium(p, tau, mu=mu))
        eq = nash_equilibrium(p, tau, mu=mu)
        gap_base = 2 * exploitability(_root_baseline(p, tau, mu), p, tau, mu=mu)
        print(
            f"nash_equilibrium n={n} tau={tau}: {t * 1e3:.2f} ms ({eq.iterations} Newton steps, "
            f"gap {eq.gap:.1e}); scipy root (hybr) {base * 1e3:.2f} ms (gap {gap_base:.1e}); "
            f"ratio {t / base:.2f}x"
        )


if __name__ == "__main__":
    main()
