"""Where the tree rows of docs/testbed.md miss their predicted point: by depth, and by noise.

KL between two laws of completions is a sum over the token tree,
``KL(P || Q) = sum_h P(h) KL(P(. | h) || Q(. | h))`` over the prefixes ``h`` that continue
(not ended by EOS, shorter than ``max_new_tokens``), each row weighted by its reach under
``P``. For each run saved by ``python benchmarks/testbed_table.py --json-dir DIR`` this
prints ``KL(final || predicted)`` split by the depth of ``h`` (0: the first token, after
the prompt alone), the reach of the least-reached row at each depth, and the same KL for
the mean of the last ``--tail`` recorded laws (the noise of one law averaged out; what
is left is the bias of where the run stopped), and the total at a quarter, a half and
three quarters of the run.

    python benchmarks/testbed_tree_depths.py DIR [--tail N]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np


def _rows(completions, p, eos: int) -> dict:
    """``{prefix: masses of its next tokens}`` of the law ``p`` over ``completions``."""
    V = 1 + max(t for c in completions for t in c)
    out: dict = {}
    for c, m in zip(completions, p, strict=True):
        for t in range(len(c)):
            out.setdefault(c[:t], np.zeros(V))[c[t]] += m
    return out


def by_depth(completions, p, q, eos: int = 1) -> tuple[list, list]:
    """``KL(p || q)`` split by the depth of the row, and each depth's least reach under ``p``."""
    rp, rq = _rows(completions, p, eos), _rows(completions, q, eos)
    depth = 1 + max(len(h) for h in rp)
    kl, reach = [0.0] * depth, [1.0] * depth
    for h, w in rp.items():
        s, cp, cq = w.sum(), w / w.sum(), rq[h] / rq[h].sum()
        keep = cp > 0
        kl[len(h)] += float(s * np.sum(cp[keep] * np.log(cp[keep] / cq[keep])))
        reach[len(h)] = min(reach[len(h)], float(s))
    return kl, reach


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir", type=Path)
    ap.add_argument("--tail", type=int, default=100)
    a = ap.parse_args()
    for f in sorted(a.dir.glob("*tree*.json")):
        d = json.loads(f.read_text())
        if d["predicted"] is None or not isinstance(d["kl_to_predicted"], float):
            print(f"{f.name}: no finite predicted point")
            continue
        comps = [tuple(c) for c in d["completions"]]
        pred = np.array(d["predicted"][0])
        final = np.array(d["final_law"][0])
        mean = np.mean([np.array(law[0]) for law in d["laws"][-a.tail :]], axis=0)
        kl, reach = by_depth(comps, final, pred)
        klm, _ = by_depth(comps, mean, pred)
        fmt = ", ".join
        quarters = [len(d["laws"]) * k // 4 - 1 for k in (1, 2, 3)]
        path = ", ".join(
            f"step {d['law_steps'][i]} {sum(by_depth(comps, np.array(d['laws'][i][0]), pred)[0]):.3g}"
            for i in quarters
        )
        print(
            f"{f.name}: {path}; KL(final||pred) {sum(kl):.3g} by depth [{fmt(f'{k:.2g}' for k in kl)}]"
            f" (least reach [{fmt(f'{r:.2g}' for r in reach)}]); mean of last {a.tail} laws"
            f" {sum(klm):.3g} [{fmt(f'{k:.2g}' for k in klm)}]"
        )


if __name__ == "__main__":
    main()
