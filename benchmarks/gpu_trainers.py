"""Every trainer on CPU and on CUDA, same problem and seed: distance to pi* and time per step.

Prints one line per (trainer, method): the final total-variation distance to the exact
optimum on each device and the seconds per training step, side by side. Sampled
methods draw their samples from a generator on the device, so the CPU and CUDA runs
see different samples: their distances agree within the seed-to-seed spread, not
to the bit. Run from the repository root: ``python benchmarks/gpu_trainers.py``.
"""

from __future__ import annotations

import numpy as np
import torch

import klpolicy.torch as kt
from klpolicy.torch.trainers import METHODS


def main() -> None:
    if not torch.cuda.is_available():
        raise SystemExit("no CUDA device")
    ref, reward, beta, steps = np.array([0.5, 0.3, 0.2]), np.array([1.0, 0.0, 0.5]), 0.5, 300
    rng = np.random.default_rng(0)
    tree = [rng.dirichlet(np.ones(3), size=(3,) * t) for t in range(3)]
    seq_reward = rng.normal(size=(3, 3, 3))
    print(
        f"{'trainer':22s} {'method':13s} {'TV cpu':>10s} {'TV cuda':>10s} "
        f"{'ms/step cpu':>12s} {'ms/step cuda':>13s}"
    )
    for name, fit, args in (
        ("fit_policy", kt.fit_policy, (ref, reward, beta)),
        ("fit_sequence_policy", kt.fit_sequence_policy, (tree, seq_reward, beta)),
    ):
        for method in METHODS:
            res = {}
            for dev in ("cpu", "cuda"):
                try:
                    res[dev] = fit(*args, method=method, steps=steps, seed=0, device=dev)
                except (ValueError, TypeError) as exc:  # a method this trainer does not take
                    res[dev] = exc
            if isinstance(res["cpu"], Exception):
                print(f"{name:22s} {method:13s} not available: {res['cpu']}")
                continue
            d = {k: v.history["distance"][-1] for k, v in res.items()}
            t = {k: 1e3 / v.steps_per_second for k, v in res.items()}
            print(
                f"{name:22s} {method:13s} {d['cpu']:10.2e} {d['cuda']:10.2e} "
                f"{t['cpu']:12.3f} {t['cuda']:13.3f}"
            )


if __name__ == "__main__":
    main()
