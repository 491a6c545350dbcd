"""The tree rows of docs/testbed.md against the laws the task's Llama can express.

The tree task's model gives its three contexts made of the token ``q`` repeated (the prompt
``q``, then ``q q``, ``q q q``) one next-token law, whatever its weights (no absolute
positions; see :func:`klpolicy.testbed.reachable_law`). So a trained law lives in a *tied*
family, and neither the predicted point nor pi* need be in it. For each tree run saved by
``python benchmarks/testbed_table.py --json-dir DIR`` this prints:

* ``floor_pred``, ``floor_pistar``: the least ``KL(m || predicted)`` and ``KL(m || pi*)`` over
  the tied family (the shared row ``r`` minimises ``KL(r||p_0) + r_q KL(r||p_1) +
  r_q^2 KL(r||p_2)``; every other row is the target's own);
* for GRPO, ``tied``: the root of the exact expected update
  (:func:`klpolicy.dynamics.expected_tree_update`) with the three rows tied (the update of
  the shared row is the sum of the three rows' updates), and ``KL(final || tied)``;
  for RLOO, whose expected update is the gradient of ``E r - beta KL(pi || ref)``, the
  tied optimum is the tied family's nearest law to pi* (``iproj``);
* the same KLs for the mean of the last 100 recorded laws, and ``KL(final || tied)`` and
  ``KL(final || predicted)`` split by depth and at the three tied rows (each row's KL
  weighted by its reach under the final law).

    python benchmarks/testbed_tree_ties.py DIR
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

from klpolicy import kl_divergence
from klpolicy.dynamics import expected_tree_update
from klpolicy.sequences import joint
from klpolicy.testbed import SequenceLaw

V, T, EOS, Q = 5, 3, 1, 2  # the tree task: 5 tokens, depth 3, EOS 1, the prompt token q = 2
TIED = [(), (Q,), (Q, Q)]  # the completion prefixes whose contexts are q, q q, q q q


def _padded(completions):
    return [tuple(c) + (EOS,) * (T - len(c)) for c in completions]


def _conditionals(completions, p):
    law = SequenceLaw(tuple(completions), p, np.log(p), vocab_size=V, eos_token_id=EOS)
    return law.conditionals()


def _on_completions(cond, completions):
    J = joint(cond)
    out = np.array([J[i] for i in _padded(completions)])
    return out / out.sum()


def nearest_tied(p, completions):
    """The tied family's law nearest ``p`` in ``KL(m || p)``, and that KL."""
    cond = _conditionals(completions, p)
    rows = [cond[len(h)][h] for h in TIED]

    def f(z):
        r = np.exp(z - z.max())
        r /= r.sum()
        return sum(r[Q] ** k * np.sum(r * np.log(r / row)) for k, row in enumerate(rows))

    res = minimize(f, np.log(rows[0]), method="BFGS", options={"gtol": 1e-12})
    r = np.exp(res.x - res.x.max())
    for h in TIED:
        cond[len(h)][h] = r / r.sum()
    return _on_completions(cond, completions), float(res.fun)


def _reach(th):
    pi = [np.exp(t - t.max(-1, keepdims=True)) for t in th]
    pi = [p / p.sum(-1, keepdims=True) for p in pi]
    reach = [np.ones(())]
    for t in range(1, T):
        reach.append(reach[-1][..., None] * pi[t - 1])
    return pi, reach


def tied_grpo_fixed_point(d, steps=20000, lr=2.0):
    """GRPO's expected-update root with the rows after q, q q, q q q tied: a damped
    iteration of the update divided by each row's reach (the tied row: the sum of the three
    updates over the sum of their reaches), which keeps the roots and evens the speeds."""
    completions = [tuple(c) for c in d["completions"]]
    ref = _conditionals(completions, np.array(d["ref_law"][0]))
    reward = np.zeros((V,) * T)
    for idx, r in zip(_padded(completions), d["reward"][0], strict=True):
        reward[idx] = r
    cfg = d["config"]
    keys = ("num_generations", "scale_rewards", "loss_type", "use_bias_correction_kl")
    with np.errstate(divide="ignore"):
        th = [np.log(c) for c in ref]
    size = np.inf
    for _ in range(steps):
        u = expected_tree_update(
            "grpo",
            th,
            ref,
            reward,
            cfg["beta"],
            eos_token=EOS,
            max_completion_length=T,
            **{k: cfg[k] for k in keys},
        )
        _, reach = _reach(th)
        step = [u[t] / np.where(reach[t] > 1e-12, reach[t], 1.0)[..., None] for t in range(T)]
        shared = sum(u[len(h)][h] for h in TIED) / sum(reach[len(h)][h] for h in TIED)
        for h in TIED:
            step[len(h)][h] = shared
        th = [x + lr * s for x, s in zip(th, step, strict=True)]
        th = [x - x.max(-1, keepdims=True) for x in th]
        size = max(float(np.abs(s[np.isfinite(s)]).max()) for s in step)
        if size < 1e-13:
            break
    pi, _ = _reach(th)
    return _on_completions(pi, completions), size


def by_depth(completions, p, q) -> tuple[list, float]:
    """``KL(p || q)`` split by depth (each row's KL weighted by its reach under ``p``), and
    the part at the three tied rows."""
    cp, cq = _conditionals(completions, p), _conditionals(completions, q)
    reach = [np.ones(())]
    for t in range(1, T):
        reach.append(reach[-1][..., None] * cp[t - 1])

    def row_kl(t, idx):
        a, b = cp[t][idx], cq[t][idx]
        return float(reach[t][idx] * np.sum(a * np.log(a / b)))

    depths = [
        sum(row_kl(t, idx) for idx in np.ndindex(*reach[t].shape) if EOS not in idx)
        for t in range(T)
    ]
    return depths, sum(row_kl(len(h), h) for h in TIED)


def report(path: Path) -> dict:
    d = json.loads(path.read_text())
    completions = [tuple(c) for c in d["completions"]]
    final = np.array(d["final_law"][0])
    tail = np.array([law[0] for law in d["laws"][-100:]]).mean(axis=0)
    star = np.array(d["pistar"][0])
    out = {"run": path.name, "steps": d["steps"]}
    out["kl_final_pred"], out["kl_final_pistar"] = d["kl_to_predicted"], d["kl_to_pistar"]
    if d["predicted"] is not None:
        out["floor_pred"] = nearest_tied(np.array(d["predicted"][0]), completions)[1]
    iproj, out["floor_pistar"] = nearest_tied(star, completions)
    if d["trainer"] == "trl-grpo":
        tied, out["tied_residual"] = tied_grpo_fixed_point(d)
        out["kl_tied_pred"] = float(kl_divergence(tied, np.array(d["predicted"][0])))
    elif d["trainer"] == "trl-rloo":
        tied = iproj
    else:
        return out
    out["kl_final_tied"] = float(kl_divergence(final, tied))
    out["final_tied_by_depth"], out["final_tied_at_tied_rows"] = by_depth(completions, final, tied)
    pred = np.array(d["predicted"][0])
    out["final_pred_by_depth"], out["final_pred_at_tied_rows"] = by_depth(completions, final, pred)
    out["kl_tail_tied"] = float(kl_divergence(tail, tied))
    out["kl_tail_pred"] = float(kl_divergence(tail, np.array(d["predicted"][0])))
    return out


def main() -> None:
    folder = Path(sys.argv[1])
    for path in sorted(folder.glob("*task_tree*.json")):
        row = report(path)
        print(json.dumps({k: _fmt(v) for k, v in row.items()}))


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, list):
        return [_fmt(x) for x in v]
    return v


if __name__ == "__main__":
    main()
