"""A plain, obviously-correct reference of the engines' sampling laws (one row, Python lists).

Each warper is written out as the engine's source reads, one list pass per step, on
Python floats; ties in a sort are ordered by index (a stable sort). Nothing is shared
with klpolicy.sampling.
"""

from __future__ import annotations

import math

NEG = -math.inf


def _probs(z):
    m = max(z)
    w = [0.0 if x == NEG else math.exp(x - m) for x in z]
    total = math.fsum(w)
    return [x / total for x in w]


def _scaled(logits, temperature):
    if temperature == math.inf:
        return [NEG if x == NEG else 0.0 for x in logits]
    return [NEG if x == NEG else x / temperature for x in logits]


def _ascending(z, logits):
    # the sort key is the logit itself (temperature keeps the order; at T = inf the
    # scaled values tie, and the limit T -> inf keeps the order of the logits)
    return sorted(range(len(z)), key=lambda i: (logits[i], i))


def _top_k(z, logits, k, keep):
    k = min(max(k, keep), len(z))
    kth = sorted(logits, reverse=True)[k - 1]
    return [x if logits[i] >= kth else NEG for i, x in enumerate(z)]


def _top_p(z, logits, p, keep):
    pr = _probs(z)
    order = _ascending(z, logits)
    out = list(z)
    csum = 0.0
    for pos, i in enumerate(order):
        csum += pr[i]
        if csum <= 1.0 - p and pos < len(z) - keep:
            out[i] = NEG
    return out


def _min_p(z, logits, mp, keep):
    pr = _probs(z)
    top = max(pr)
    # keep may exceed the row (every token is protected then): clip, not a negative index
    protected = set(_ascending(z, logits)[max(len(z) - keep, 0) :])
    return [NEG if (pr[i] < mp * top and i not in protected) else x for i, x in enumerate(z)]


def reference_law(
    logits, temperature=1.0, top_k=None, top_p=None, min_p=None, order="transformers", keep=1
):
    logits = [float(x) for x in logits]
    greedy = temperature == 0 or (order == "vllm" and temperature < 1e-5)
    if greedy:
        best = logits.index(max(logits))
        return [1.0 if i == best else 0.0 for i in range(len(logits))]
    z = _scaled(logits, temperature)
    steps = ["top_k", "top_p", "min_p"] if order == "transformers" else ["min_p", "top_k", "top_p"]
    for step in steps:
        if step == "top_k" and top_k is not None:
            z = _top_k(z, logits, top_k, keep)
        elif step == "top_p" and top_p is not None and top_p < 1:
            z = _top_p(z, logits, top_p, keep)
        elif step == "min_p" and min_p is not None and min_p > 0:
            z = _min_p(z, logits, min_p, keep)
    if temperature == math.inf:
        n = sum(x != NEG for x in z)
        return [0.0 if x == NEG else 1.0 / n for x in z]
    # the law of the kept tokens from the original logits (shift by the row maximum)
    m = max(logits)
    w = [0.0 if x == NEG else math.exp((logits[i] - m) / temperature) for i, x in enumerate(z)]
    total = math.fsum(w)
    return [x / total for x in w]
