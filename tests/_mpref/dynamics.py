"""The expected update of the group rules (GRPO, REINFORCE with a baseline) by enumeration.

Recipe (the working precision of the test: 50 digits by the conftest's fixture): pi =
softmax(theta) with theta converted exactly; every ordered group (y_1..y_G) in {0..n-1}^G
has probability prod pi(y_i); its rewards give the advantages A_i = (v_i - b_i) / s as the
rule defines them (b the group mean, or the mean of the others; s = 1 or the unbiased std +
eps); the loss is L = (1/G) sum_i [-A_i log pi(y_i) + beta kl_i] with kl_i = k3 of y_i (times
the ratio pi/sg(pi) when corrected); its gradient in theta is written out by hand:
d log pi(y)/d theta = e_y - pi, d k3(y)/d theta = (1 - ref(y)/pi(y)) (e_y - pi), and the
ratio adds k3(y) (e_y - pi). The update is minus the probability-weighted sum.
"""

import itertools

import mpmath as mp

from .closed_form import _norm as normalise


def softmax(th):
    """softmax(theta) of exactly converted logits, at the working precision."""
    e = [mp.exp(mp.mpf(float(t))) for t in th]
    z = mp.fsum(e)
    return [x / z for x in e]


def group_advantages(v, baseline, scale, eps):
    """A_i = (v_i - b_i) / s: b the group mean ("mean"), the others' mean ("loo") or 0;
    s the unbiased std + eps (``scale="std"``) or 1."""
    G = len(v)
    m = mp.fsum(v) / G
    out = []
    for i in range(G):
        if baseline == "mean":
            b = m
        elif baseline == "loo":
            b = (mp.fsum(v) - v[i]) / (G - 1)
        else:
            b = 0
        a = v[i] - b
        if scale == "std":
            s = mp.sqrt(mp.fsum((x - m) ** 2 for x in v) / (G - 1)) + eps
            a = a / s
        out.append(a)
    return out


def expected_group_update(th, ref, r, beta, G, baseline, scale, kl, eps="1e-4", shaped=False):
    """Minus the expected gradient in the logits of the group loss, every group enumerated.

    ``kl`` in {"none", "k3", "k3_corrected"}; ``shaped``: beta k1 folded into the reward
    instead (ref normalised first).
    """
    eps = mp.mpf(eps)
    pi = softmax(th)
    q = normalise(ref)
    rr = [mp.mpf(float(x)) for x in r]
    n = len(pi)
    total = [mp.mpf(0)] * n
    for group in itertools.product(range(n), repeat=G):
        w = mp.fprod(pi[y] for y in group)
        if shaped:
            v = [rr[y] - beta * (mp.log(pi[y]) - mp.log(q[y])) for y in group]
        else:
            v = [rr[y] for y in group]
        adv = group_advantages(v, baseline, scale, eps)
        grad = [mp.mpf(0)] * n
        for y, a in zip(group, adv):
            score = [(1 if j == y else 0) - pi[j] for j in range(n)]
            coef = -a
            if kl != "none" and not shaped:
                k3 = q[y] / pi[y] - 1 - mp.log(q[y] / pi[y])
                coef += beta * (1 - q[y] / pi[y])
                if kl == "k3_corrected":
                    coef += beta * k3
            grad = [g + coef * s / G for g, s in zip(grad, score)]
        total = [t - w * g for t, g in zip(total, grad)]
    return total
