"""Where real trainers (TRL's and klpolicy's own) land on the built-in tasks (docs/testbed.md).

Each row is one ``klpolicy testbed run ... --json`` command, run here in-process through
the CLI's own entry point (so the row is exactly what the command prints), and summarised
as a markdown row: the configured beta, the predicted beta_eff, the fitted beta
(:func:`klpolicy.dynamics.beta_fit` of the final law), KL(final || predicted),
KL(final || pi*(beta)), KL(ref || predicted) (each the mean over the task's prompts), the
final law's mass on the best answer (its mean over the prompts), the steps, the seed, the
training time and the command. Needs the extra ``klpolicy[trl]``; a few minutes a row on a
2-core CPU.

    python benchmarks/testbed_table.py [--only N [N ...]] [--json-dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import sys
import time
from pathlib import Path

from klpolicy.app.cli import main as cli

#: (what the row shows, the command's arguments after ``klpolicy testbed run``)
ROWS = [
    ("GRPO, G=2, no scaling", "trl-grpo --num-generations 2 --scale-rewards none"),
    ("GRPO, G=4, no scaling", "trl-grpo --num-generations 4 --scale-rewards none"),
    ("GRPO, G=2, group std", "trl-grpo --num-generations 2 --scale-rewards group"),
    ("GRPO, G=4, group std", "trl-grpo --num-generations 4 --scale-rewards group"),
    (
        "GRPO, G=4, no scaling, loss grpo",
        "trl-grpo --num-generations 4 --scale-rewards none --loss-type grpo",
    ),
    (
        "GRPO, G=4, no scaling, loss dr_grpo",
        "trl-grpo --num-generations 4 --scale-rewards none --loss-type dr_grpo",
    ),
    ("GRPO, TRL's default beta = 0", "trl-grpo --beta 0 --num-generations 2 --scale-rewards none"),
    ("RLOO, G=2", "trl-rloo --num-generations 2"),
    ("DPO, 256 pairs", "trl-dpo --pairs 256"),
    ("DPO, 2048 pairs", "trl-dpo --pairs 2048 --steps 200"),
    (
        "3 prompts: GRPO, G=2, no scaling",
        "trl-grpo --task prompts --num-generations 2 --scale-rewards none",
    ),
    ("3 prompts: RLOO, G=2", "trl-rloo --task prompts --num-generations 2"),
    ("3 prompts: DPO, 256 pairs each", "trl-dpo --task prompts --pairs 256"),
    (
        "tree: GRPO, G=2, no scaling",
        "trl-grpo --task tree --num-generations 2 --scale-rewards none",
    ),
    (
        "tree: GRPO, G=4, no scaling, loss dapo",
        "trl-grpo --task tree --num-generations 4 --scale-rewards none --loss-type dapo",
    ),
    (
        "tree: GRPO, G=4, no scaling, loss grpo",
        "trl-grpo --task tree --num-generations 4 --scale-rewards none --loss-type grpo",
    ),
    (
        "tree: GRPO, G=4, no scaling, loss dr_grpo",
        "trl-grpo --task tree --num-generations 4 --scale-rewards none --loss-type dr_grpo",
    ),
    ("tree: RLOO, G=2", "trl-rloo --task tree --num-generations 2"),
    ("tree: DPO, 4096 pairs", "trl-dpo --task tree --pairs 4096 --steps 200"),
    (
        "skewed reference: GRPO, G=2, no scaling",
        "trl-grpo --task bandit-skewed --num-generations 2 --scale-rewards none",
    ),
    ("skewed reference: RLOO, G=2", "trl-rloo --task bandit-skewed --num-generations 2"),
    (
        "tree: GRPO, G=2, no scaling, 1000 steps",
        "trl-grpo --task tree --num-generations 2 --scale-rewards none --steps 1000",
    ),
    ("tree: RLOO, G=2, 1000 steps", "trl-rloo --task tree --num-generations 2 --steps 1000"),
    (
        "tree: GRPO, G=2, no scaling, 3000 steps",
        "trl-grpo --task tree --num-generations 2 --scale-rewards none --steps 3000",
    ),
    ("tree: RLOO, G=2, 3000 steps", "trl-rloo --task tree --num-generations 2 --steps 3000"),
    # klpolicy's own update rules (klpolicy.torch) on the same model
    ("klpolicy exact gradient", "klpolicy-exact"),
    (
        "klpolicy REINFORCE, k1 in the reward",
        "klpolicy-reinforce --estimator k1 --placement reward",
    ),
    ("klpolicy REINFORCE, k2 in the loss", "klpolicy-reinforce --estimator k2 --placement loss"),
    ("klpolicy REINFORCE, k3 in the loss", "klpolicy-reinforce --estimator k3 --placement loss"),
    (
        "klpolicy REINFORCE, k3 in the reward",
        "klpolicy-reinforce --estimator k3 --placement reward",
    ),
    ("klpolicy GRPO, G=4, group std", "klpolicy-grpo --num-generations 4"),
    ("klpolicy PPO, k1 in the reward, 4 epochs", "klpolicy-ppo --estimator k1"),
    ("3 prompts: klpolicy exact gradient", "klpolicy-exact --task prompts"),
    (
        "3 prompts: klpolicy REINFORCE, k3 in the loss",
        "klpolicy-reinforce --task prompts --estimator k3 --placement loss",
    ),
]


def _fmt(x, spec=".3g"):
    if x is None:
        return "-"
    if isinstance(x, str):  # to_json writes non-finite floats as strings
        return x
    if math.isinf(x):
        return "inf"
    return format(x, spec)


def _row(label: str, args: str, seed: int, json_dir: Path | None) -> str:
    argv = ["testbed", "run", *args.split(), "--seed", str(seed), "--json"]
    out = io.StringIO()
    t0 = time.perf_counter()
    with contextlib.redirect_stdout(out):
        rc = cli(argv)
    total = time.perf_counter() - t0
    if rc != 0:
        raise SystemExit(f"`klpolicy {' '.join(argv)}` exited {rc}")
    d = json.loads(out.getvalue())
    if json_dir is not None:
        name = "_".join(args.replace("--", "").split()) + f"_seed{seed}.json"
        (json_dir / name).write_text(out.getvalue())
    cfg = d["config"]
    best = 0.0  # the mass on each prompt's best answers, averaged over the prompts
    for law, rew in zip(d["final_law"], d["reward"], strict=True):
        top = max(rew)
        best += sum(p for p, r in zip(law, rew, strict=True) if r == top) / len(d["reward"])
    beta_eff = d["predicted_beta_eff"]
    if beta_eff is None and d["trainer"] == "trl-dpo":
        pred = "dataset's optimum"
    elif d["predicted"] is None:
        pred = "none (runs off)"
    elif beta_eff is None:
        pred = "outside pi*"
    else:
        pred = _fmt(beta_eff)
    print(
        f"# {label}: {d['landing']} (train {d['wall_time']:.0f} s, total {total:.0f} s)",
        file=sys.stderr,
    )
    return (
        f"| {label} | {_fmt(cfg['beta'])} | {pred} | {_fmt(d['beta_fit'])} "
        f"| {_fmt(d['kl_to_predicted'], '.2e')} | {_fmt(d['kl_to_pistar'], '.2e')} "
        f"| {_fmt(d['kl_ref_to_predicted'], '.2e')} | {best:.3f} | {d['steps']} | {d['seed']} "
        f"| {d['wall_time']:.0f} | `klpolicy {' '.join(argv)}` |"
    )


HEADER = (
    "| run | beta | predicted beta_eff | fitted beta | KL to predicted | KL to pi*(beta) "
    "| KL ref to predicted | P(best) | steps | seed | train s | command |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|---|"
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", type=int, nargs="*", help="row numbers (from 0) to run")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json-dir", type=Path, help="also keep each run's JSON here")
    args = parser.parse_args()
    if args.json_dir is not None:
        args.json_dir.mkdir(parents=True, exist_ok=True)
    picked = range(len(ROWS)) if args.only is None else args.only
    print(HEADER)
    for i in picked:
        label, cmd = ROWS[i]
        print(_row(label, cmd, args.seed, args.json_dir), flush=True)


if __name__ == "__main__":
    main()
