"""The closed-form core against one exp pass: ratios, absolute times and peak memory.

The closed form is exp-bound: an exact method evaluates one exponential per
entry. Each line times a klpolicy call and its named baseline *in the same
process, interleaved* (baseline, candidate, baseline, ...), and reports the
ratio of the two minimum times over ``--repeat`` rounds. The ratios are the
figures to compare across machines; the absolute times are machine-dependent
(and, on a shared machine, noisy: the minimum is the least disturbed run).

Baselines:

* ``np.exp``: one single-threaded ``np.exp`` over an array of the input's shape
  (a new output array, as the klpolicy call also returns one);
* ``softmax``: ``scipy.special.softmax(np.log(ref) + r / beta, axis=-1)``, the
  usual way to write the closed form (three transcendental-or-more passes);
* ``optimal_policy``: one call on the same array (for ``beta_for_kl`` and the
  token tree).

The ``careful path`` lines time inputs that the one-exponential fast path leaves to
the careful method (a large ``beta``, the greedy limit ``beta = 0``).

The ``floor`` line, ``np.exp(r) * ref`` (no shift, no sum, no checks), is the
least any single-threaded numpy implementation reads, computes and writes: both
inputs, one exponential, one output array. The ``workers=-1`` line runs
``optimal_policy`` on a thread pool over row blocks (every core, as many as the
batch's size warrants) and is reported as a ratio to that single-threaded floor.
The threads crossover table times ``workers=-1`` and threads forced on every row
block against ``workers=1`` over batch sizes: "threads" is what ``workers=-1``
uses there.

The goal check (one table per ``--beta``, by default 0.1, 0.5, 1 and 10) times, interleaved:
``optimal_policy`` on (256, 65536) float64 against the floor (goal: at most 1.2x), float32
at that shape against ``softmax`` (goal: at least as fast), and at (16, 4096), where the
per-call work shows, float64 against ``np.exp`` (aim: under 2x) and float32 against
``softmax`` (goal: at least as fast); each line ends in "met" or "not met".

Peak memory is measured with :mod:`tracemalloc` (numpy reports its buffers to
it) as the largest traced allocation during the call, in units of one input
array; the returned array itself counts as 1.

Run from the repository root: ``python benchmarks/core_bench.py [--repeat 7] [--quick]
[--beta 0.1 0.5 1 10] [--goals-only] [--cpu]``. The first ``--beta`` is the full table's.
``--cpu`` times the single-threaded lines by this process's CPU time, which a shared
machine disturbs less than wall time (the ``workers=-1`` line and the threads table stay
on wall time).
"""

from __future__ import annotations

import argparse
import os
import time
import tracemalloc

import numpy as np
import scipy.special

from klpolicy import beta_for_kl, kl_divergence, max_kl, optimal_kl, optimal_policy, soft_value
from klpolicy.core import _tilt
from klpolicy.sequences import joint, soft_bellman

CLOCK = time.perf_counter  # --cpu: time.process_time for the single-threaded lines


def interleaved(fns: dict, repeat: int, clock=None, calls: int = 1) -> dict:
    """Minimum time of each function per call, the functions run in turn ``repeat`` times
    (each ``calls`` times in a row, for calls too short to time one by one)."""
    clock = clock or CLOCK
    best = dict.fromkeys(fns, np.inf)
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = clock()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (clock() - t0) / calls)
    return best


# (shape, dtype, baseline, numerator, goal, at most (True) or at least): the goal check
GOALS = [
    ((256, 65536), np.float64, "floor", "policy", 1.2, True),
    ((256, 65536), np.float32, "softmax", "policy", 1.0, True),
    ((16, 4096), np.float64, "exp", "policy", 2.0, True),
    ((16, 4096), np.float32, "softmax", "policy", 1.0, True),
]


def goal_check(beta: float, rep: int) -> list:
    """The goal lines at one ``beta``: (case, ratio, baseline, goal, met)."""
    out = []
    for (rows, n), dtype, base, num, goal, at_most in GOALS:
        ref, reward = problem(rows, n, dtype)
        fns = {
            "exp": lambda b=reward: np.exp(b),
            "floor": lambda a=ref, b=reward: exp_times(b, a),
            "policy": lambda a=ref, b=reward: optimal_policy(a, b, beta),
            "softmax": lambda a=ref, b=reward: scipy.special.softmax(np.log(a) + b / beta, axis=-1),
        }
        calls = max(1, (1 << 20) // (rows * n))
        t = interleaved({k: fns[k] for k in (base, num)}, rep, calls=calls)
        ratio = t[num] / t[base]
        label = f"optimal_policy ({rows}, {n}) {np.dtype(dtype).name}"
        out.append((label, ratio, base, goal, ratio <= goal if at_most else ratio >= goal))
    return out


def peak_memory(fn, nbytes: int) -> float:
    """Peak traced allocation during ``fn()`` in units of ``nbytes``."""
    tracemalloc.start()
    tracemalloc.reset_peak()
    fn()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return peak / nbytes


def exp_times(r, ref):
    """The floor: ``exp(r) * ref`` into one new array (no shift, no sum, no checks)."""
    w = np.exp(r)
    return np.multiply(w, ref, out=w)


def problem(rows: int, n: int, dtype, seed: int = 0):
    rng = np.random.default_rng(seed)
    ref = rng.dirichlet(np.ones(n), size=rows).astype(dtype)
    ref /= ref.sum(-1, keepdims=True, dtype=np.float64).astype(dtype)
    reward = rng.normal(size=(rows, n)).astype(dtype)
    return ref, reward


def threads_crossover(rows_list, n: int, beta: float, rep: int) -> list:
    """``workers=-1`` (threads chosen by size) and threads forced from one row block each,
    as ratios to ``workers=1``, over batch sizes: where threads start to pay off."""
    out = []
    for dtype in (np.float64, np.float32):
        for rows in rows_list:
            ref, reward = problem(rows, n, dtype, seed=4)

            def forced(a=ref, b=reward):
                saved = _tilt._MIN_BLOCKS_PER_THREAD
                _tilt._MIN_BLOCKS_PER_THREAD = 1
                try:
                    return optimal_policy(a, b, beta, workers=-1)
                finally:
                    _tilt._MIN_BLOCKS_PER_THREAD = saved

            t = interleaved(
                {
                    "one": lambda a=ref, b=reward: optimal_policy(a, b, beta),
                    "auto": lambda a=ref, b=reward: optimal_policy(a, b, beta, workers=-1),
                    "forced": forced,
                },
                rep,
                clock=time.perf_counter,  # threads: wall time, whatever --cpu says
            )
            blocks = -(-rows // _tilt._rows_per_block(n, np.dtype(dtype).itemsize))
            used = _tilt._threads(os.cpu_count() or 1, blocks)
            out.append((np.dtype(dtype).name, rows, n, blocks, used, t))
    return out


def print_goals(goals: list, rep: int) -> None:
    print(f"goal check: minimum of {rep} interleaved runs, one thread")
    print(f"{'beta':>6s}  {'case':40s} {'ratio':>8s}  {'of':18s} goal")
    for beta, lines in goals:
        for label, ratio, base, goal, met in lines:
            sign = "<=" if base != "softmax" else ">="
            shown = ratio if base != "softmax" else 1 / ratio
            name = "softmax / policy" if base == "softmax" else f"policy / {base}"
            print(
                f"{beta:6g}  {label:40s} {shown:7.2f}x  {name:18s} goal {sign} {goal:.2f}x: "
                + ("met" if met else "not met")
            )
    print()


def row(table: list, name: str, ratio: float, baseline: str, t: float, extra: str = "") -> None:
    table.append((name, ratio, baseline, t, extra))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--beta",
        type=float,
        nargs="+",
        default=[0.1, 0.5, 1.0, 10.0],
        help="the goal check's betas (the full table uses the first)",
    )
    parser.add_argument("--quick", action="store_true", help="small shapes, a smoke test")
    parser.add_argument("--goals-only", action="store_true", help="only the goal check")
    parser.add_argument(
        "--cpu", action="store_true", help="single-threaded lines by process CPU time"
    )
    args = parser.parse_args()
    global CLOCK
    if args.cpu:
        CLOCK = time.process_time
    goals = [(b, goal_check(b, args.repeat)) for b in args.beta]
    print_goals(goals, args.repeat)
    if args.goals_only:
        return
    rows, n = (16, 4096) if args.quick else (256, 65536)
    small = (64, 256) if args.quick else (1024, 1024)
    vocab, length = (8, 3) if args.quick else (32, 4)
    beta = args.beta[0]
    rep = args.repeat
    table: list = []

    for dtype in (np.float64, np.float32):
        ref, reward = problem(rows, n, dtype)
        label = f"({rows}, {n}) {np.dtype(dtype).name}"
        t = interleaved(
            {
                "exp": lambda r=reward: np.exp(r),
                "floor": lambda a=ref, b=reward: exp_times(b, a),
                "policy": lambda a=ref, b=reward: optimal_policy(a, b, beta),
                "softmax": lambda a=ref, b=reward: scipy.special.softmax(
                    np.log(a) + b / beta, axis=-1
                ),
                "value": lambda a=ref, b=reward: soft_value(a, b, beta),
                "kl": lambda a=ref, b=reward: optimal_kl(a, b, beta),
            },
            rep,
        )
        t_threads = interleaved(
            {
                "floor": lambda a=ref, b=reward: exp_times(b, a),
                "threads": lambda a=ref, b=reward: optimal_policy(a, b, beta, workers=-1),
            },
            rep,
            clock=time.perf_counter,
        )
        pi = optimal_policy(ref, reward, beta)
        t_div = interleaved(
            {"exp": lambda r=reward: np.exp(r), "kl_div": lambda p=pi, q=ref: kl_divergence(p, q)},
            rep,
        )
        mem = peak_memory(lambda a=ref, b=reward: optimal_policy(a, b, beta), ref.nbytes)
        row(table, f"optimal_policy {label}", t["policy"] / t["exp"], "np.exp", t["policy"])
        row(table, f"  np.exp {label}", 1.0, "np.exp", t["exp"])
        row(table, f"  floor: exp(r) * ref {label}", t["floor"] / t["exp"], "np.exp", t["floor"])
        row(
            table,
            f"  optimal_policy workers=-1 ({os.cpu_count()} cores) {label}",
            t_threads["threads"] / t_threads["floor"],
            "floor",
            t_threads["threads"],
        )
        row(
            table,
            f"  softmax / optimal_policy {label}",
            t["softmax"] / t["policy"],
            "optimal_policy",
            t["softmax"],
        )
        row(table, f"  peak memory of optimal_policy {label}", mem, "input arrays", np.nan)
        row(table, f"soft_value {label}", t["value"] / t["exp"], "np.exp", t["value"])
        row(table, f"optimal_kl {label}", t["kl"] / t["exp"], "np.exp", t["kl"])
        row(
            table,
            f"kl_divergence {label}",
            t_div["kl_div"] / t_div["exp"],
            "np.exp",
            t_div["kl_div"],
        )

    # the careful path (the array-API kernel of klpolicy.core._careful with numpy's
    # namespace): a large beta (the soft value's mean-centred form), the greedy limit
    ref, reward = problem(*small, np.float64, seed=3)
    t = interleaved(
        {
            "exp": lambda: np.exp(reward),
            "value": lambda: soft_value(ref, reward, 50.0),
            "kl": lambda: optimal_kl(ref, reward, 50.0),
            "greedy": lambda: optimal_policy(ref, reward, 0.0),
        },
        rep,
    )
    for key, name in (
        ("value", "soft_value beta=50"),
        ("kl", "optimal_kl beta=50"),
        ("greedy", "optimal_policy beta=0"),
    ):
        row(table, f"careful path: {name} {small} float64", t[key] / t["exp"], "np.exp", t[key])

    # beta_for_kl: a KL budget per row, half of the largest reachable
    ref, reward = problem(*small, np.float64, seed=1)
    target = 0.5 * max_kl(ref, reward)
    t = interleaved(
        {
            "policy": lambda: optimal_policy(ref, reward, beta),
            "solve": lambda: beta_for_kl(ref, reward, target),
        },
        rep,
    )
    b = beta_for_kl(ref, reward, target)
    err = np.max(np.abs(optimal_kl(ref, reward, b[:, None]) / target - 1))
    row(
        table,
        f"beta_for_kl {small} float64",
        t["solve"] / t["policy"],
        "optimal_policy",
        t["solve"],
        f"max rel. KL error {err:.1e}",
    )

    # soft_bellman on a token tree against one optimal_policy call on its flattened joint
    rng = np.random.default_rng(2)
    tree = [rng.dirichlet(np.ones(vocab), size=(vocab,) * k) for k in range(length)]
    seq_reward = rng.normal(size=(vocab,) * length)
    flat_ref, flat_reward = joint(tree).ravel(), seq_reward.ravel()
    t = interleaved(
        {
            "policy": lambda: optimal_policy(flat_ref, flat_reward, beta),
            "bellman": lambda: soft_bellman(tree, seq_reward, beta),
        },
        rep,
    )
    row(
        table,
        f"soft_bellman V={vocab} T={length} ({vocab**length:,} leaves)",
        t["bellman"] / t["policy"],
        "optimal_policy",
        t["bellman"],
    )

    cross = threads_crossover(
        (8, 16, 64, 256) if args.quick else (16, 64, 128, 256, 512, 1024), 4096, beta, rep
    )

    clock = "process CPU time" if args.cpu else "wall time"
    print(f"klpolicy core benchmark, beta={beta}, minimum of {rep} interleaved runs ({clock})")
    print(f"{'case':58s} {'ratio':>8s}  {'to':16s} {'time (machine-dependent)':>24s}")
    for name, ratio, base, secs, extra in table:
        when = "" if np.isnan(secs) else f"{secs * 1e3:10.1f} ms"
        print(f"{name:58s} {ratio:8.2f}x {base:16s} {when:>24s}  {extra}")

    print()
    print(f"threads crossover: optimal_policy time / workers=1 ({os.cpu_count()} cores)")
    print(f"{'batch':24s} {'blocks':>6s} {'threads':>7s} {'workers=-1':>11s} {'forced':>8s}")
    for name, rows, n, blocks, used, t in cross:
        print(
            f"{f'({rows}, {n}) {name}':24s} {blocks:6d} {used:7d} "
            f"{t['auto'] / t['one']:10.2f}x {t['forced'] / t['one']:7.2f}x"
        )


if __name__ == "__main__":
    main()
