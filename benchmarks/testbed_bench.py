"""The testbed's costs: steps per second of each real trainer, and one exact law evaluation
against one forward pass of the same batch.

For each adapter of ``klpolicy.testbed.ADAPTERS`` a short run (``--steps``, default 20) on
the bandit task gives TRL's training steps per second on this device (the law callback
off: ``law_every`` = the number of steps). Then, on the tree task's model (3 tokens with
EOS, 156 completions), one ``sequence_law`` (three batched forward passes, one per depth,
float64 log-softmax) is timed against one forward pass of a batch of the same number of
rows (the baseline, in the same process): the ratio is what enumerating the law costs
over the model's own work. Each time is the best of ``--repeat`` runs.

    python benchmarks/testbed_bench.py [--device cpu|cuda] [--steps 20] [--repeat 5]

Needs the ``trl`` extra (TRL 1.16.x, transformers, datasets, accelerate).
"""

from __future__ import annotations

import argparse
import time

from _timing import best_time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu", choices=("cpu", "cuda"))
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    import torch

    from klpolicy.testbed import ADAPTERS, run, sequence_law, tree_task

    print(f"device {args.device}, torch {torch.__version__}, {torch.get_num_threads()} threads")
    for name in sorted(ADAPTERS):
        extra = {"pairs": 64} if name == "trl-dpo" else {}
        r = run(name, steps=args.steps, seed=0, device=args.device, law_every=args.steps, **extra)
        print(
            f"{name:9s} {args.steps} steps in {r.wall_time:6.2f} s: "
            f"{args.steps / r.wall_time:6.1f} steps/s (batch {r.config['per_device_train_batch_size']})"
        )

    task = tree_task()
    model = task.model().to(args.device).eval()
    (prompt,) = task.prompt_ids()
    law = sequence_law(model, prompt, max_new_tokens=task.max_new_tokens, eos_token_id=1)
    rows = len(law.completions)
    ids = torch.tensor(
        [prompt + list(c) + [1] * (task.max_new_tokens - len(c)) for c in law.completions],
        device=args.device,
    )

    def forward():
        with torch.no_grad():
            model(input_ids=ids, attention_mask=torch.ones_like(ids)).logits.sum().item()

    def enumerate_law():
        sequence_law(model, prompt, max_new_tokens=task.max_new_tokens, eos_token_id=1)

    t_fwd = best_time(forward, args.repeat)
    t_law = best_time(enumerate_law, args.repeat)
    print(
        f"one forward pass, {rows} rows of length {ids.shape[1]}: {t_fwd * 1e3:7.2f} ms (baseline)"
    )
    print(
        f"sequence_law, {rows} completions of the tree task: {t_law * 1e3:7.2f} ms "
        f"({t_law / t_fwd:.1f}x the forward pass)"
    )
    t0 = time.perf_counter()
    enumerate_law()
    print(f"(one more law, unrepeated: {(time.perf_counter() - t0) * 1e3:.2f} ms)")


if __name__ == "__main__":
    main()
