"""Speed of klpolicy.torch, as ratios against baselines measured in the same run.

1. The array-API kernel (``klpolicy.optimal_policy`` on tensors, also with
   ``validate=False``) against a bare ``torch.softmax(log(ref) + r / beta)`` on
   the same tensors (the cost of exactness at the extremes, the limits and the
   validation), and against the numpy core on CPU; the peak extra memory of
   each, in input arrays (goal: at most 2; CPU from the profiler's allocation
   events, CUDA from the caching allocator). On CUDA: (4096, 131072) float32 and
   bfloat16 (an LLM vocabulary; goal within 1.5x of the softmax). Also
   ``soft_value`` against ``beta * torch.logsumexp(log(ref) + r / beta)`` and
   ``optimal_kl`` against the softmax.
2. Training steps per second of ``fit_policy`` / ``fit_sequence_policy``.
3. CPU against GPU for the trainers, when a GPU is present.

Run: ``python benchmarks/torch_bench.py [--quick]``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

import klpolicy
import klpolicy.torch as kt


def _best_of(fn, repeat: int, warm: bool = True) -> float:
    """Best wall time of ``repeat`` calls (after one warm-up), synchronising CUDA."""
    if warm:
        fn()
    best = float("inf")
    for _ in range(repeat):
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return best


def _interleaved(fns: dict, repeat: int) -> dict[str, float]:
    """Best wall time of each function, the functions run in turn ``repeat`` times (after one
    warm-up each), so that a slow spell of a shared machine hits them all alike."""
    for fn in fns.values():
        fn()
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            best[name] = min(best[name], _best_of(fn, 1, warm=False))
    return best


def _peak_extra(fn, input_bytes: int) -> float:
    """CUDA: peak memory allocated during ``fn()`` beyond what was live before, in inputs."""
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    out = fn()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - before
    del out
    return peak / input_bytes


def _peak_extra_cpu(fn, input_bytes: int) -> float:
    """CPU: peak bytes held by torch's allocator during ``fn()``, in inputs (profiler events)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        out = fn()
    del out
    events = prof.profiler.kineto_results.events()
    live = peak = 0
    for _, nbytes in sorted((e.start_ns(), e.nbytes()) for e in events if e.name() == "[memory]"):
        live += nbytes
        peak = max(peak, live)
    return peak / input_bytes


def closed_form(device: str, batch: int, vocab: int, dtype, repeat: int) -> dict[str, float]:
    """The kernel (klpolicy.optimal_policy on tensors) against a bare softmax, same tensors."""
    gen = torch.Generator().manual_seed(0)
    # rows normalised in float64, then rounded: they sum to one within the dtype's tolerance
    logits = torch.randn(batch, vocab, generator=gen, dtype=torch.float64)
    ref = torch.softmax(logits, -1).to(device, dtype)
    reward = torch.randn(batch, vocab, generator=gen).to(device, dtype)
    beta = 0.5
    fns = {
        "kernel_s": lambda: klpolicy.optimal_policy(ref, reward, beta),
        "nocheck_s": lambda: klpolicy.optimal_policy(ref, reward, beta, validate=False),
        "softmax_s": lambda: torch.softmax(torch.log(ref) + reward / beta, -1),
        "value_s": lambda: klpolicy.soft_value(ref, reward, beta),
        "logsumexp_s": lambda: beta * torch.logsumexp(torch.log(ref) + reward / beta, -1),
        "kl_s": lambda: klpolicy.optimal_kl(ref, reward, beta),
    }
    if device == "cpu" and dtype != torch.bfloat16:
        ref_np, rew_np = ref.numpy(), reward.numpy()
        fns["numpy_s"] = lambda: klpolicy.optimal_policy(ref_np, rew_np, beta)
    out = _interleaved(fns, repeat)
    peak = _peak_extra if device == "cuda" else _peak_extra_cpu
    nbytes = ref.numel() * ref.element_size()
    out["kernel_mem"] = peak(lambda: klpolicy.optimal_policy(ref, reward, beta), nbytes)
    out["softmax_mem"] = peak(lambda: torch.softmax(torch.log(ref) + reward / beta, -1), nbytes)
    return out


def training(device: str, steps: int) -> dict[str, float]:
    ref, reward = [0.5, 0.3, 0.2], [1.0, 0.0, 0.5]
    out = {}
    for method in ("exact", "reinforce", "ppo", "grpo", "dpo"):
        out[method] = kt.fit_policy(
            ref, reward, 0.5, method=method, steps=steps, device=device
        ).steps_per_second
    rng = np.random.default_rng(0)
    conds = [rng.dirichlet(np.ones(4), size=(4,) * t) for t in range(3)]
    rew = rng.normal(size=(4, 4, 4))
    model = kt.AutoregressivePolicy(4, 3, device=device)
    out["gru reinforce (V=4, T=3)"] = kt.fit_sequence_policy(
        conds, rew, 0.5, method="reinforce", policy=model, steps=steps, device=device
    ).steps_per_second
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, for CI")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--no-training", action="store_true", help="closed form only")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    batch, vocab = (64, 4096) if args.quick else (512, 32768)
    repeat = 3 if args.quick else 10
    steps = 50 if args.quick else 300
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    threads = torch.get_num_threads()
    print(f"torch {torch.__version__}; devices: {', '.join(devices)}; CPU threads {threads}")

    results = {}
    shapes = {"cpu": (batch, vocab), "cuda": (512, 8192) if args.quick else (4096, 131072)}
    dtypes = {
        "cpu": (torch.float32, torch.float64, torch.bfloat16),
        "cuda": (torch.float32, torch.bfloat16),  # an LLM vocabulary
    }
    for dev in devices:
        b, v = shapes[dev]
        for dtype in dtypes[dev]:
            r = closed_form(dev, b, v, dtype, repeat)
            results[(dev, dtype)] = r
            line = (
                f"closed form {dev:4s} {str(dtype)[6:]:8s} ({b}x{v}): "
                f"kernel {r['kernel_s'] * 1e3:8.2f} ms (validate=False {r['nocheck_s'] * 1e3:8.2f}),"
                f" torch.softmax {r['softmax_s'] * 1e3:8.2f} ms, "
                f"ratio kernel/softmax {r['kernel_s'] / r['softmax_s']:5.2f}"
            )
            line += (
                f"; soft_value {r['value_s'] * 1e3:8.2f} ms, ratio to beta * torch.logsumexp "
                f"{r['value_s'] / r['logsumexp_s']:5.2f}; optimal_kl {r['kl_s'] * 1e3:8.2f} ms, "
                f"ratio to torch.softmax {r['kl_s'] / r['softmax_s']:5.2f}"
            )
            if "numpy_s" in r:
                line += f", numpy core/kernel {r['numpy_s'] / r['kernel_s']:5.2f}"
            if "kernel_mem" in r:
                line += (
                    f", peak extra memory: kernel {r['kernel_mem']:.2f}, "
                    f"softmax {r['softmax_mem']:.2f} input arrays"
                )
            print(line)

    if args.no_training:
        return
    speeds = {dev: training(dev, steps) for dev in devices}
    for name in speeds["cpu"]:
        line = f"training {name:28s}: cpu {speeds['cpu'][name]:8.1f} steps/s"
        if "cuda" in speeds:
            gpu = speeds["cuda"][name]
            line += f", cuda {gpu:8.1f} steps/s, ratio cuda/cpu {gpu / speeds['cpu'][name]:5.2f}"
        print(line)


if __name__ == "__main__":
    main()
