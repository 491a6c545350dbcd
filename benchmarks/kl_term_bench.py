"""Speed of kl_term_report (6-outcome policy; 3-token tree of 3 tokens) against a baseline.

The issue asks for "about a second" per report. Baseline, measured in the same run: one
forward and backward pass of the same term on a batch of 4096 samples (what a trainer
pays for the term each step), so the ratio says how many such steps a report costs.
Each time is the minimum of ``--repeat`` runs (CPU, one torch thread while the report
runs, as it sets itself).

    python benchmarks/kl_term_bench.py [--repeat 5]
"""

from __future__ import annotations

import argparse

import torch
from _timing import best_time

from klpolicy.testing import kl_term_report


def k3(logp, old_logp, ref_logp):
    return torch.exp(ref_logp - logp) - (ref_logp - logp) - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4096, 32, generator=g, dtype=torch.float64, requires_grad=True)
    ref = torch.log_softmax(torch.randn(4096, 32, generator=g, dtype=torch.float64), -1)
    idx = torch.randint(0, 32, (4096, 1), generator=g)

    def step():
        lp = torch.log_softmax(logits, -1).gather(1, idx)[:, 0]
        k3(lp, lp.detach(), ref.gather(1, idx)[:, 0]).mean().backward()

    kl_term_report(k3)  # warm-up: imports, first autograd graph
    base = best_time(step, args.repeat)
    token = best_time(lambda: kl_term_report(k3), args.repeat)
    seq = best_time(lambda: kl_term_report(k3, level="sequence"), args.repeat)
    print(f"baseline: one forward+backward of k3 on 4096 samples  {base * 1e3:8.2f} ms")
    print(
        f"kl_term_report, 6 outcomes       {token * 1e3:8.1f} ms  ({token / base:6.1f} x baseline)"
    )
    print(f"kl_term_report, 3-token tree     {seq * 1e3:8.1f} ms  ({seq / base:6.1f} x baseline)")


if __name__ == "__main__":
    main()
