"""soft_bellman on a million-leaf token tree against one optimal_policy call on its joint.

The soft Bellman recursion makes one vectorised pass per position (T passes over
arrays of V, V^2, ..., V^T entries), so it should cost a small multiple of one
closed-form call on the flattened joint of V^T entries. The ratio is the
machine-independent figure; absolute times are machine-dependent. Each time is
the minimum over several runs.

Run from the repository root (with klpolicy installed, or with ``PYTHONPATH=.``):
``python benchmarks/sequences_bench.py [--repeat 5]``.
"""

from __future__ import annotations

import argparse

import numpy as np
from _timing import best_time

from klpolicy import optimal_policy
from klpolicy.sequences import joint, per_token_kl, soft_bellman


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vocab", type=int, default=32)
    parser.add_argument("--length", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--beta", type=float, default=0.5)
    args = parser.parse_args()
    V, T = args.vocab, args.length
    rng = np.random.default_rng(0)
    ref = [rng.dirichlet(np.ones(V), size=(V,) * t) for t in range(T)]
    reward = rng.normal(size=(V,) * T)
    flat_ref = joint(ref).ravel()
    flat_reward = reward.ravel()

    t_closed = best_time(lambda: optimal_policy(flat_ref, flat_reward, args.beta), args.repeat)
    t_bellman = best_time(lambda: soft_bellman(ref, reward, args.beta), args.repeat)
    res = soft_bellman(ref, reward, args.beta)
    t_joint = best_time(lambda: joint(res.policy), args.repeat)
    t_ptk = best_time(lambda: per_token_kl(res.policy, ref), args.repeat)

    err = np.max(
        np.abs(joint(res.policy).ravel() - optimal_policy(flat_ref, flat_reward, args.beta))
    )
    print(f"token tree V={V}, T={T}: {V**T:,} leaves, beta={args.beta}, min of {args.repeat} runs")
    print(f"max |joint(soft_bellman) - optimal_policy(joint)| = {err:.1e}")
    print(
        "ratio to one optimal_policy call on the flattened joint (compare these across machines):"
    )
    print(f"  soft_bellman          {t_bellman / t_closed:6.2f}x")
    print(f"  joint(policy)         {t_joint / t_closed:6.2f}x")
    print(f"  per_token_kl          {t_ptk / t_closed:6.2f}x")
    print("absolute times (machine-dependent):")
    print(f"  optimal_policy(joint) {t_closed * 1e3:8.1f} ms")
    print(f"  soft_bellman          {t_bellman * 1e3:8.1f} ms")
    print(f"  joint(policy)         {t_joint * 1e3:8.1f} ms")
    print(f"  per_token_kl          {t_ptk * 1e3:8.1f} ms")


if __name__ == "__main__":
    main()
