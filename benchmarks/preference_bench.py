"""Speed of the nca_pair and hinge population optima, against baselines run in the same process.

nca_pair: as a ratio to ``dpo_optimum`` (Newton's method on the dense n x n pair weights,
the library's reference solve of a population loss), measured in the same run on the same
problem. hinge: against the previous method, a plain HiGHS solve of the same problem as two
linear programs (the least loss, then the least weighted spread at that loss; sparse, one
row per drawn pair), with the peak memory of each (the resident set's growth, measured in
a forked child; Linux) and whether the two return the same policy. Problems: ``ref``
Dirichlet(1), preferences P[i, j] uniform in (0.2, 0.8) above the diagonal, beta 0.5;
``--chain-sizes``: hinge on a deterministic chain (P[i, j] = 1 for i < j, ``ref`` uniform,
beta 0.5), whose integral scores span n - 1, so that the descent takes n steps. Each
time is the minimum of ``--repeat`` runs; absolute times are machine-dependent, the ratios
are what to compare.

    python benchmarks/preference_bench.py [--sizes 40 100 1000] [--hinge-sizes 40 100 200]
        [--baseline-max 100] [--chain-sizes 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import sys
import time

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


def chain(n: int):
    """A deterministic chain: outcome i beats every j > i with probability 1."""
    p = np.triu(np.ones((n, n)), 1)
    p += np.tril(1.0 - p.T, -1)
    np.fill_diagonal(p, 0.5)
    return np.full(n, 1.0 / n), p


def hinge_by_highs(ref, p, beta):
    """The previous method: two HiGHS linear programs over real scores x (x[-1] = 0).

    Stage 1: min sum_r w_r s_r with s_r >= 1 - (x_i - x_j), s_r >= 0 for every drawn ordered
    pair r = (i, j). Stage 2: min sum_q (w_ij + w_ji) t_q with t_q >= |x_i - x_j| for every
    unordered pair q, the loss kept at its optimum (1e-12 relative slack). The scores are
    rounded to the integers they approximate (the LP's vertices are integral).
    """
    from scipy.optimize import linprog
    from scipy.sparse import coo_array, vstack

    n = ref.size
    w = 2 * np.outer(ref, ref) * p  # the on-policy pair law's win weights
    np.fill_diagonal(w, 0.0)
    wn = w / w.max()
    pi, pj = np.nonzero(wn > 0)
    sym = wn + wn.T
    ui, uj = np.nonzero(np.triu(sym > 0, 1))
    m, q, nx = pi.size, ui.size, n - 1
    nv = nx + m + q

    def rows(ii, jj, sign, slack_col):  # sign (x_i - x_j) - slack <= rhs, one row per pair
        r = np.arange(ii.size)
        ki, kj = ii < nx, jj < nx
        return coo_array(
            (
                np.concatenate(
                    [np.full(ki.sum(), sign), np.full(kj.sum(), -sign), -np.ones(r.size)]
                ),
                (
                    np.concatenate([r[ki], r[kj], r]),
                    np.concatenate([ii[ki], jj[kj], slack_col + r]),
                ),
            ),
            shape=(r.size, nv),
        )

    hinge_rows = rows(pi, pj, -1.0, nx)
    loss_cost = np.zeros(nv)
    loss_cost[nx : nx + m] = wn[pi, pj]
    free = [(None, None)] * nx + [(0, None)] * (m + q)
    res = linprog(loss_cost, A_ub=hinge_rows.tocsr(), b_ub=-np.ones(m), bounds=free, method="highs")
    best = res.fun
    spread_cost = np.zeros(nv)
    spread_cost[nx + m :] = sym[ui, uj]
    a2 = vstack(
        [hinge_rows, rows(ui, uj, 1.0, nx + m), rows(ui, uj, -1.0, nx + m), loss_cost[None, :]]
    ).tocsr()
    b2 = np.concatenate([-np.ones(m), np.zeros(2 * q), [best + 1e-12 * max(1.0, abs(best))]])
    res2 = linprog(spread_cost, A_ub=a2, b_ub=b2, bounds=free, method="highs")
    x = np.append(np.round(res2.x[:nx]), 0.0)
    pol = ref * np.exp((x - x.max()) / beta)
    return pol / pol.sum()


def _child(fn, conn):
    before = _rss_mib()
    t0 = time.perf_counter()
    out = fn()
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    conn.send((seconds, max(0.0, peak - before), out))


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 2**20


def timed_with_memory(fn):
    """(seconds, peak resident-set growth in MiB, result) of fn() in a forked child."""
    if not sys.platform.startswith("linux"):
        t0 = time.perf_counter()
        out = fn()
        return time.perf_counter() - t0, float("nan"), out
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, send))
    proc.start()
    result = recv.recv()
    proc.join()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[40, 100, 1000])
    parser.add_argument("--hinge-sizes", type=int, nargs="+", default=[40, 100, 200])
    parser.add_argument(
        "--baseline-max",
        type=int,
        default=100,
        help="largest size for the HiGHS baseline (about 15 min at 200 on a 2-core machine)",
    )
    parser.add_argument("--chain-sizes", type=int, nargs="*", default=[])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    print(f"{'n':>6} {'dpo_optimum':>12} {'nca_pair':>10} {'ratio':>7}")
    for n in args.sizes:
        ref, p = problem(n)
        base = best_time(lambda ref=ref, p=p: dpo_optimum(ref, p, 0.5), args.repeat)
        nca = best_time(
            lambda ref=ref, p=p: population_optimum(ref, p, 0.5, loss="nca_pair"), args.repeat
        )
        print(f"{n:>6} {base:>11.4f}s {nca:>9.4f}s {nca / base:>7.2f}")
    print()
    print(
        f"{'n':>6} {'hinge':>9} {'peak':>9} {'HiGHS LPs':>10} {'peak':>9} {'speed-up':>9} "
        f"{'same policy':>12}"
    )
    for n in args.hinge_sizes:
        ref, p = problem(n)
        new = best_time(
            lambda ref=ref, p=p: population_optimum(ref, p, 0.5, loss="hinge"), args.repeat
        )
        _, new_mem, pi = timed_with_memory(
            lambda ref=ref, p=p: population_optimum(ref, p, 0.5, loss="hinge")
        )
        if n > args.baseline_max:
            print(f"{n:>6} {new:>8.3f}s {new_mem:>6.1f}MiB {'skipped':>10}")
            continue
        old, old_mem, pi_old = timed_with_memory(lambda ref=ref, p=p: hinge_by_highs(ref, p, 0.5))
        same = bool(np.allclose(pi, pi_old, rtol=1e-12, atol=0))
        print(
            f"{n:>6} {new:>8.3f}s {new_mem:>6.1f}MiB {old:>9.3f}s {old_mem:>6.1f}MiB "
            f"{old / new:>8.1f}x {same!s:>12}"
        )
    for n in args.chain_sizes:
        ref, p = chain(n)
        t = best_time(
            lambda ref=ref, p=p: population_optimum(ref, p, 0.5, loss="hinge"), args.repeat
        )
        print(f"{n:>6} {t:>8.3f}s  (hinge, deterministic chain)")


if __name__ == "__main__":
    main()
