"""Speed of klpolicy.dynamics on the issue's sizes: a group of 64 on 8 outcomes.

The issue asks for a finite group of up to 64 generations on 8 outcomes in under a
second. The exact sum runs over the group compositions of the distinct reward values,
C(G + K - 2, K - 1) of them: 5 levels at G = 64 are 766,480 compositions; 8 distinct
rewards at G = 64 would be 1.2e9 and are refused with a message (use
num_generations=None). Baseline, measured in the same run: klpolicy.optimal_policy on a
(4096, 8) batch. Each time is the best of ``--repeat`` runs; the first call of a size
also builds its composition table (cached), timed separately.

The issue's tree goal: one expected update on a tree of at least 100 leaves with at most
5 distinct rewards in under a second. The tree here: 3 tokens + EOS, depth 4 (121
completions, lengths 1-4), rewards in {0, 1/4, ..., 1}, a group of G = 8, every
``loss_type`` with TRL's default std scale and without it.

    python benchmarks/dynamics_bench.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from _timing import best_time

import klpolicy
from klpolicy.dynamics import expected_tree_update, expected_update, landing_point
from klpolicy.dynamics.groups import _compositions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    ref = rng.dirichlet(np.ones(8))
    base = best_time(
        lambda: klpolicy.optimal_policy(np.tile(ref, (4096, 1)), rng.normal(size=(4096, 8)), 0.5),
        args.repeat,
    )
    print(f"baseline: optimal_policy on (4096, 8): {base * 1e3:.2f} ms")
    for levels in (2, 3, 5):
        reward = np.arange(8) % levels / (levels - 1)
        th = np.log(ref)
        _compositions.cache_clear()
        t0 = time.perf_counter()
        expected_update("grpo", th, ref, reward, 0.1, num_generations=64)
        first = time.perf_counter() - t0
        t = best_time(
            lambda th=th, reward=reward: expected_update(
                "grpo", th, ref, reward, 0.1, num_generations=64
            ),
            args.repeat,
        )
        print(
            f"expected_update grpo G=64, 8 outcomes, {levels} reward levels: "
            f"{t * 1e3:.1f} ms ({t / base:.1f}x baseline; first call {first * 1e3:.1f} ms)"
        )
    for levels in (2, 3):
        reward = np.arange(8) % levels / (levels - 1)
        t = best_time(
            lambda reward=reward: landing_point("grpo", ref, reward, 0.1, num_generations=64), 1
        )
        print(f"landing_point grpo G=64, {levels} levels: {t:.2f} s ({t / base:.0f}x baseline)")
    t = best_time(
        lambda: landing_point("grpo", ref, np.linspace(0, 1, 8), 0.1, num_generations=None),
        args.repeat,
    )
    print(f"landing_point grpo infinite group, 8 distinct rewards: {t * 1e3:.1f} ms")
    tree_case(base, args.repeat)


def tree_case(base: float, repeat: int) -> None:
    """One expected update on a 121-leaf token tree with 5 reward levels, G = 8."""
    rng = np.random.default_rng(1)
    size, depth, eos = 4, 4, 3
    ref = [rng.dirichlet(np.ones(size), size=(size,) * t) for t in range(depth)]
    reward = rng.integers(0, 5, size=(size,) * depth) / 4.0
    th = [np.log(q) + 0.1 * rng.normal(size=q.shape) for q in ref]
    leaves = 1 + 3 + 9 + 27 * 4
    for scale in ("group", "none"):
        for loss_type in ("grpo", "bnpo", "dapo", "dr_grpo"):

            def call(scale=scale, loss_type=loss_type):
                return expected_tree_update(
                    "grpo",
                    th,
                    ref,
                    reward,
                    0.1,
                    eos_token=eos,
                    num_generations=8,
                    loss_type=loss_type,
                    scale_rewards=scale,
                )

            t0 = time.perf_counter()
            call()
            first = time.perf_counter() - t0
            t = best_time(call, repeat)
            print(
                f"expected_tree_update {loss_type:7s} scale_rewards={scale!r:7s} G=8, "
                f"{leaves} leaves, 5 reward levels: {t * 1e3:.2f} ms "
                f"({t / base:.1f}x baseline; first call {first * 1e3:.1f} ms)"
            )


if __name__ == "__main__":
    main()
