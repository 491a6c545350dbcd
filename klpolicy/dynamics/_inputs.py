"""The checks of :mod:`klpolicy.dynamics`' arguments (one place for the part's messages)."""

from __future__ import annotations

import numpy as np

from ..core.internal import validation as V
from .rules import RULES, Rule


def rule_and_options(rule, options: dict) -> tuple[Rule, dict]:
    """The row of ``rule`` and its options resolved (defaults filled in, each checked)."""
    if not isinstance(rule, str) or rule not in RULES:
        valid = ", ".join(repr(k) for k in RULES)
        raise ValueError(f"`rule` must be one of {valid}; got {V.describe(rule)}")
    row = RULES[rule]
    return row, row.resolve(options)


def problem(ref, reward, beta, rule: str):
    """(ref, reward, beta) of one prompt: 1-D float64 rows of one size, beta finite >= 0."""
    V.one_problem(("ref", ref), ("reward", reward))
    q = V.as_probabilities("ref", ref).astype(np.float64)
    if reward is None and rule == "distill":
        reward = np.zeros_like(q)
    r = V.as_rewards("reward", reward).astype(np.float64)
    q, r = V.broadcast_pair("ref", q, "reward", r)
    if q.ndim != 1:
        raise ValueError(
            f"`ref` must be one-dimensional (one prompt's outcomes); got shape {q.shape}"
        )
    b = V.as_scalar("beta", beta, "[0, inf)")
    return q / q.sum(), r, b


def logits_on(ref, logits) -> np.ndarray:
    """The policy logits as float64 of ``ref``'s shape; -inf (probability 0) wherever ref is 0."""
    th = V.as_float_array("logits", logits).astype(np.float64)
    if th.shape != ref.shape:
        raise ValueError(f"`logits` must have the shape of `ref`, {ref.shape}; got {th.shape}")
    if np.isnan(th).any() or (th == np.inf).any():
        bad = int(np.flatnonzero(np.isnan(th) | (th == np.inf))[0])
        raise ValueError(f"`logits` must be finite or -inf; found {th[bad]} at index {bad}")
    off = (ref == 0) & np.isfinite(th)
    if off.any():
        i = int(np.flatnonzero(off)[0])
        raise ValueError(
            f"`logits` give probability to outcome {i}, where `ref` is 0 (its KL is inf): "
            "set that logit to -inf"
        )
    if not np.isfinite(th).any():
        raise ValueError("`logits` must have at least one finite entry; all are -inf")
    return th
