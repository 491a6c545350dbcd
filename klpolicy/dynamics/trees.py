r"""GRPO's loss types on a token tree: the exact expected update, and where it vanishes.

A completion is a token sequence drawn from a tree of next-token softmaxes (the
conditionals of :mod:`klpolicy.sequences`, one row of logits per prefix); it ends at
the first ``eos_token`` (which it includes: TRL 1.16.0's completion mask keeps the EOS,
``grpo_trainer.py`` lines 1881-1885) or, truncated, after ``T`` tokens. Member :math:`i`
of a group of :math:`G` has length :math:`L_i`, reward :math:`v_i` and advantage
:math:`A_i`; TRL's per-token loss is
:math:`\ell_{i,t} = -A_i\rho_{i,t} + \beta\,k3_{i,t}\,[\rho_{i,t}]` (``grpo_trainer.py``
lines 3099-3105, 3119, 3150) and the loss of the group is

.. math::

    L = \sum_i w_i \sum_{t < L_i} \ell_{i,t},\qquad
    w_i = \begin{cases}
      1/(G L_i) & \texttt{grpo}\ \text{(per-sequence token mean, then the mean; line 3154)}\\
      1/\sum_j L_j & \texttt{bnpo}, \texttt{dapo}\ \text{(global token mean; lines 3159, 3169-3173)}\\
      1/(G\,L_{max}) & \texttt{dr\_grpo}\ \text{(line 3164)}
    \end{cases}

(``dapo`` divides by ``num_items_in_batch``, the tokens of the whole generation batch
across processes, line 2498; for one group on one process without accumulation it is the
group's token count, as ``bnpo``'s). On-policy the gradient of token :math:`t` is
:math:`(e_{a_t} - \pi_{h_t})\,c_{i,t}` at its own prefix :math:`h_t` only, with
:math:`c_{i,t} = w_i(-A_i + \beta\kappa(h_t, a_t))` and :math:`\kappa = \log(\pi/\pi_{ref})`
for the ratio-corrected k3 (``use_bias_correction_kl``), :math:`1 - \pi_{ref}/\pi` for the
plain one. By exchangeability only two numbers per completion matter,

.. math::

    W(y) = G\,\mathbb{E}[w_1 \mid y_1 = y],\qquad \bar A(y) = G\,\mathbb{E}[w_1 A_1 \mid y_1 = y],

functions of the completion's (reward level, length) class; the update at prefix :math:`h` is

.. math::

    u_h = P(h)\,\big[\pi_h \odot (D_h - \beta\,\bar W_h\odot\kappa_h)\big]
          - \pi_h\,\big\langle \cdot \big\rangle,\qquad
    D_h(a) = \mathbb{E}[\bar A \mid h a],\ \bar W_h(a) = \mathbb{E}[W \mid h a],

computed by one backward pass over the tree. For ``grpo`` and ``dr_grpo`` the weight is
known given the completion (:math:`W = 1/L` or :math:`1/L_{max}`, :math:`\bar A = a\,W` with
:math:`a` the group advantage of :mod:`klpolicy.dynamics.groups`); for the global token mean
it depends on the others' lengths, which is not separable: :math:`\bar A` and :math:`W` are
sums over the compositions of the other :math:`G-1` members over the reward levels, each
carrying the law of their total length as a polynomial
:math:`\prod_k g_k(z)^{c_k}` (:math:`g_k(z) = \sum_\ell \pi(v_k, \ell) z^\ell`), or, without the
standard-deviation scale, two polynomials :math:`g^{G-1}` and :math:`h\,g^{G-2}` in closed form.

A key fact of the tree: TRL's KL is a per-token term *in the loss*, so its on-policy
gradient at :math:`h` is :math:`P(h)\nabla\mathrm{KL}(\pi_h\|\pi_{ref,h})`, without the KL of
the tokens after :math:`h` (no return-to-go). Its fixed point is therefore not the
sequence-level :math:`\pi^*`, even for a length-neutral aggregation: with ``dr_grpo`` and no
scale it is the *myopic* equilibrium :math:`\pi(a|h) \propto \pi_{ref}(a|h)\exp(\mathbb{E}_\pi[r
\mid ha]/b)`, :math:`b = \beta G/(G-1)`, an expectation where :math:`\pi^*` has the soft value
:math:`b\log\mathbb{E}_{ref}[e^{r/b} \mid ha]`. The derivations are in
``docs/derivations/dynamics.md`` ("Token trees and the length bias").
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from ..core import f_optimal_policy, optimal_policy, soft_value
from ..core.internal import special
from ..core.internal import validation as V
from .groups import MAX_COMPOSITIONS, _compositions, compositions_count, group_advantage
from .results import TreeLanding
from .rules import GRPO_OPTIONS, TRL_STD_EPS, Option

__all__ = ["TREE_OPTIONS", "TREE_RULES", "expected_tree_update", "tree_landing_point"]

#: The rules that have a token-tree form here (GRPO's ``loss_type`` is what varies on a tree;
#: ``"gspo"`` is GRPO with TRL's ``importance_sampling_level="sequence"``).
TREE_RULES = ("grpo", "gspo")
#: The most (compositions x polynomial length^2 x levels) of one global-token-mean sum with
#: the std scale (about 4 ns each here: 5e8 is 2 s).
MAX_TREE_WORK = 500_000_000


def _max_length(name, x):
    if x is None:
        return None
    return V.as_count(name, x, lo=1)


#: GRPO's options on a tree: TRL 1.16.0's, ``max_completion_length`` (grpo_config.py
#: line 494, default 512: ``dr_grpo``'s constant; the tree's depth may not exceed it) and
#: ``mask_truncated_completions`` (line 836, default False: the tokens of a completion that
#: ends without an EOS leave the loss and the token counts, grpo_trainer.py lines 2487-2492;
#: its reward still enters the group's mean and std).
TREE_OPTIONS = {
    **GRPO_OPTIONS,
    "max_completion_length": Option(
        512, _max_length, "the most tokens of a completion (dr_grpo's constant L_max)"
    ),
    "mask_truncated_completions": Option(
        False, V.as_bool, "drop the tokens of completions without an EOS from the loss"
    ),
}


# ----------------------------------------------------------------------------- the tree


@dataclass(frozen=True)
class _Tree:
    """A validated token tree with its EOS: which (prefix, token) cells end a completion."""

    ref: list  # float64 conditionals
    V: int
    T: int
    eos: int | None
    leaf: list  # bool (V,)*(t+1): the token ends the completion (EOS or the last position)
    go_on: list  # bool (V,)*(t+1): the completion continues after this token
    leaf_reward: list  # float64 (V,)*(t+1): the reward of the completion ending there


def _tree(ref, reward, eos_token) -> _Tree:
    q = [np.asarray(c, dtype=np.float64) for c in V.as_token_tree("ref", ref)]
    size, T = q[0].shape[0], len(q)
    r = V.as_sequence_rewards(
        "reward", reward, (size,) * T, "a reward on whole sequences, (V,)*T as ref's tree"
    ).astype(np.float64)
    eos = None
    if eos_token is not None:
        eos = V.as_count("eos_token", eos_token, lo=0)
        if eos >= size:
            raise ValueError(f"`eos_token` must be a token id in [0, {size}); got {eos}")
    leaf, go_on, lr = [], [], []
    tok = np.arange(size)
    for t in range(T):
        shape = (size,) * (t + 1)
        is_eos = np.broadcast_to(tok == eos, shape) if eos is not None else np.zeros(shape, bool)
        end = np.ones(shape, bool) if t == T - 1 else is_eos.copy()
        leaf.append(end)
        go_on.append(~end)
        # the reward of a completion that ends at position t: read EOS-padded
        idx = (slice(None),) * (t + 1) + ((eos,) * (T - 1 - t) if eos is not None else ())
        lr.append(np.array(r[idx]) if t == T - 1 or eos is not None else np.zeros(shape))
    return _Tree(ref=q, V=size, T=T, eos=eos, leaf=leaf, go_on=go_on, leaf_reward=lr)


def _check_logits(tree: _Tree, logits) -> list:
    if isinstance(logits, np.ndarray) or not isinstance(logits, (list, tuple)):
        raise ValueError(
            f"`logits` must be a list of {tree.T} arrays, logits[t] of shape (V,)*(t+1) as "
            f"`ref`'s tree; got {type(logits).__name__}"
        )
    if len(logits) != tree.T:
        raise ValueError(f"`logits` must have {tree.T} levels as `ref`; got {len(logits)}")
    out = []
    for t, (th, q) in enumerate(zip(logits, tree.ref, strict=True)):
        a = V.as_float_array(f"logits[{t}]", th).astype(np.float64)
        if a.shape != q.shape:
            raise ValueError(
                f"`logits[{t}]` must have the shape of `ref[{t}]`, {q.shape}; got {a.shape}"
            )
        bad = np.isnan(a) | (a == np.inf)
        if bad.any():
            i = tuple(int(x) for x in np.argwhere(bad)[0])
            raise ValueError(f"`logits[{t}]` must be finite or -inf; found {a[i]} at index {i}")
        off = (q == 0) & np.isfinite(a)
        if off.any():
            i = tuple(int(x) for x in np.argwhere(off)[0])
            raise ValueError(
                f"`logits[{t}]` give probability to token {i[-1]} after prefix {i[:-1]}, where "
                "`ref` is 0 (its KL is inf): set that logit to -inf"
            )
        if (~np.isfinite(a)).all(axis=-1).any():
            i = tuple(int(x) for x in np.argwhere((~np.isfinite(a)).all(axis=-1))[0])
            raise ValueError(
                f"`logits[{t}]` must have a finite entry in every row; row {i} is all -inf"
            )
        out.append(a)
    return out


def _softmax_levels(th: list) -> list:
    out = []
    for a in th:
        e = np.exp(a - a.max(axis=-1, keepdims=True))
        out.append(e / e.sum(axis=-1, keepdims=True))
    return out


def _prefix(tree: _Tree, pi: list) -> list:
    """P(h) of every prefix at every level (0 below an EOS): shapes (V,)*t."""
    P = [np.ones(())]
    for t in range(tree.T - 1):
        P.append(P[-1][..., None] * pi[t] * tree.go_on[t])
    return P


def _leaf_probs(tree: _Tree, pi: list, P: list) -> list:
    return [P[t][..., None] * pi[t] * tree.leaf[t] for t in range(tree.T)]


def _truncated(tree: _Tree) -> NDArray:
    """The last level's cells that end a completion without an EOS (TRL: truncated)."""
    tok = np.arange(tree.V)
    shape = (tree.V,) * tree.T
    return np.broadcast_to(tok != tree.eos, shape) if tree.eos is not None else np.ones(shape, bool)


def _classes(tree: _Tree, leafp: list, masked: bool):
    """(reward levels, per-level level index, per-level length column, pi_kl (K, T + 1)).

    Column ``l`` of ``pi_kl`` holds the completions of length ``l`` that count in the loss;
    column 0 the truncated ones when ``mask_truncated_completions`` masks them (0 tokens).
    """
    vals = np.concatenate([lr[lp > 0] for lr, lp in zip(tree.leaf_reward, leafp, strict=True)])
    levels = np.unique(vals)
    index = [np.clip(np.searchsorted(levels, lr), 0, levels.size - 1) for lr in tree.leaf_reward]
    col = [np.full(lp.shape, t + 1) for t, lp in enumerate(leafp)]
    if masked:
        col[-1] = np.where(_truncated(tree), 0, tree.T)
    pkl = np.zeros((levels.size, tree.T + 1))
    for t in range(tree.T):
        flat = index[t].ravel() * (tree.T + 1) + col[t].ravel()
        pkl += np.bincount(
            flat, weights=leafp[t].ravel(), minlength=levels.size * (tree.T + 1)
        ).reshape(levels.size, tree.T + 1)
    return levels, index, col, pkl


# ----------------------------------------------------------------------------- the weights


def _poly_power(g: NDArray, n: int, N: int) -> NDArray:
    out = np.zeros(N)
    out[0] = 1.0
    for _ in range(n):
        out = np.convolve(out, g)[:N]
    return out


def _composition_advantages(v, G, c, scaled, eps):
    """A(k, c): the advantage of a member of level k with the others' counts c, (K, M)."""
    others = c @ v
    adv = np.empty((v.size, c.shape[0]))
    for k in range(v.size):
        m = (v[k] + others) / G
        num = v[k] - m
        if scaled:
            ss = num**2 + (c * (v[None, :] - m[:, None]) ** 2).sum(1)
            s = np.sqrt(ss / (G - 1)) + eps
            adv[k] = np.divide(num, s, out=np.zeros_like(m), where=s > 0)
        else:
            adv[k] = num
    return adv


def _global_mean_weights(levels, pkl, G, scaled):
    """(Abar (K, T + 1), W (T + 1,)) of the global token mean for a finite group, exactly.

    Column ``l`` is a member of ``l`` counted tokens; a masked one (``l = 0``) weighs 0.
    """
    K, T1 = pkl.shape
    T = T1 - 1
    N = (G - 1) * T + 1  # the others' total length s = 0..(G-1) T (coefficient index)
    ell = np.arange(T1, dtype=np.float64)
    tot = ell[None, :] + np.arange(N, dtype=np.float64)[:, None]
    inv = np.divide(1.0, tot, out=np.zeros_like(tot), where=tot > 0)  # (N, T + 1): 1/(l + s)
    inv[:, 0] = 0.0  # a masked member's own loss is 0
    glen = pkl.sum(0)
    if K == 1 or not scaled:
        E1 = _poly_power(glen, G - 1, N) @ inv  # E[1/(l + S)]
        W = G * E1
        if K == 1:
            return np.zeros((K, T1)), W
        v = levels - pkl.sum(1) @ levels  # centred (the advantage does not see a shift)
        h = v @ pkl
        Es = (G - 1) * (np.convolve(h, _poly_power(glen, G - 2, N))[:N] @ inv)
        return (G - 1) * v[:, None] * E1[None, :] - Es[None, :], W
    M = compositions_count(G - 1, K)
    if M > MAX_COMPOSITIONS or M * N * N * K > MAX_TREE_WORK:
        raise ValueError(
            f"`num_generations` {G} with {K} distinct rewards and lengths up to {T} needs "
            f"{M:,} group compositions with length polynomials of {N} terms, more than one "
            "exact sum takes; use fewer generations or reward levels, another loss_type, or "
            "num_generations=None (the infinite group)"
        )
    unit = float(np.max(np.abs(levels)))
    v, eps = levels / unit, TRL_STD_EPS / unit
    c = _compositions(G - 1, K)
    mult = np.exp(special.gammaln(G) - special.gammaln(c + 1).sum(1))  # (M,)
    # the others' total-length law for each composition: prod_k g_k(z)^{c_k}, batched
    powers = []
    for k in range(K):
        gk = pkl[k]
        rows = np.zeros((G, N))
        rows[0, 0] = 1.0
        for n in range(1, G):
            rows[n] = np.convolve(rows[n - 1], gk)[:N]
        powers.append(rows)
    poly = powers[0][c[:, 0]]
    for k in range(1, K):
        B = powers[k][c[:, k]]
        out = np.zeros_like(poly)
        for j in np.flatnonzero(B.any(axis=0)):
            out[:, j:] += poly[:, : N - j] * B[:, j : j + 1]
        poly = out
    H = (mult[:, None] * poly) @ inv  # (M, T + 1): sum_s P(c, s) / (l + s), multinomial in
    adv = _composition_advantages(v, G, c, True, eps)  # (K, M)
    return G * adv @ H, G * H.sum(0)


def _weights(levels, pkl, o):
    """(Abar (K, T + 1), W (T + 1,)): G E[w_1 A_1 | class], G E[w_1 | class] for o's loss_type."""
    T1 = pkl.shape[1]
    G = o["num_generations"]
    scaled = o["scale_rewards"] != "none"
    ell = np.arange(T1, dtype=np.float64)
    counted = ell > 0
    lt = o["loss_type"]
    if lt in ("bnpo", "dapo") and G is not None:
        return _global_mean_weights(levels, pkl, G, scaled)
    q = pkl.sum(1)
    a = group_advantage(
        q, levels, G, baseline="mean", scale="std" if scaled else "none", eps=TRL_STD_EPS
    )
    if lt == "grpo":
        W = np.divide(1.0, ell, out=np.zeros(T1), where=counted)
    elif lt == "dr_grpo":
        W = np.where(counted, 1.0 / o["max_completion_length"], 0.0)
    else:  # the global token mean of an infinite group: G w_1 -> 1/E[counted tokens]
        mean_tokens = float(pkl.sum(0) @ ell)
        W = np.where(counted, 1.0 / mean_tokens if mean_tokens > 0 else 0.0, 0.0)
    return a[:, None] * W[None, :], W


# ----------------------------------------------------------------------------- the update


def _node_terms(tree: _Tree, pi: list, beta: float, o):
    """(P, D - beta Wbar kappa per level): the per-token coefficient of every (prefix, token)."""
    P = _prefix(tree, pi)
    leafp = _leaf_probs(tree, pi, P)
    levels, index, col, pkl = _classes(tree, leafp, o["mask_truncated_completions"])
    Abar, W = _weights(levels, pkl, o)
    corrected = o["use_bias_correction_kl"]
    sequence = o.get("importance_sampling_level") == "sequence" and corrected and beta > 0
    k3 = []
    for t in range(tree.T):
        on = pi[t] > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            x = np.where(on, tree.ref[t] / np.where(on, pi[t], 1.0), 1.0)
        k3.append(np.where(on, x - 1.0 - np.log(np.where(x > 0, x, 1.0)), 0.0))
    if sequence:  # the sequence's k3 sum K(y) up to every cell, for the ratio's share K/L
        K = [k3[0]]
        for t in range(1, tree.T):
            K.append(K[-1][..., None] + k3[t])
    D, Wb, X = [None] * tree.T, [None] * tree.T, [None] * tree.T
    for t in range(tree.T - 1, -1, -1):
        Da = Abar[index[t], col[t]]
        Wa = W[col[t]]
        Xa = Wa * K[t] / (t + 1) if sequence else None
        if t < tree.T - 1:
            Da = np.where(tree.leaf[t], Da, (pi[t + 1] * D[t + 1]).sum(-1))
            Wa = np.where(tree.leaf[t], Wa, (pi[t + 1] * Wb[t + 1]).sum(-1))
            if sequence:
                Xa = np.where(tree.leaf[t], Xa, (pi[t + 1] * X[t + 1]).sum(-1))
        D[t], Wb[t], X[t] = Da, Wa, Xa
    coef = []
    for t in range(tree.T):
        on = pi[t] > 0
        q = tree.ref[t]
        with np.errstate(divide="ignore", invalid="ignore"):
            dk3 = np.where(on, 1.0 - q / np.where(on, pi[t], 1.0), 0.0)  # d k3 / d log pi
        if sequence:  # k3 times the sequence ratio: the sequence's mean k3 on every token
            kl = Wb[t] * dk3 + X[t]
        elif corrected:  # k3 times the token's ratio: d k3 + k3 = log(pi/ref)
            kl = Wb[t] * (dk3 + k3[t])
        else:
            kl = Wb[t] * dk3
        coef.append(np.where(on, D[t] - beta * kl, 0.0))
    return P, coef


def _update(tree: _Tree, th: list, beta: float, o) -> list:
    pi = _softmax_levels(th)
    P, coef = _node_terms(tree, pi, beta, o)
    out = []
    for t in range(tree.T):
        Q = P[t][..., None] * pi[t] * coef[t]
        out.append(Q - pi[t] * Q.sum(-1, keepdims=True))
    return out


def _resolve(rule, options, beta, tree):
    if not isinstance(rule, str) or rule not in TREE_RULES:
        valid = ", ".join(repr(k) for k in TREE_RULES)
        raise ValueError(
            f"`rule` must be one of {valid} on a token tree (its loss_type is what the tree "
            f"changes; other rules: klpolicy.dynamics.expected_update); got {V.describe(rule)}"
        )
    unknown = sorted(set(options) - set(TREE_OPTIONS))
    if unknown:
        listed = ", ".join(f"{k}={v.default!r}" for k, v in TREE_OPTIONS.items())
        raise ValueError(
            f"rule {rule!r} on a tree has no option {unknown[0]!r}; its options are: {listed}"
        )
    o = {
        k: (opt.check(k, options[k]) if k in options else opt.default)
        for k, opt in TREE_OPTIONS.items()
    }
    # TRL's name for what tells the two rules apart (GRPOConfig, grpo_config.py line 760)
    o["importance_sampling_level"] = "sequence" if rule == "gspo" else "token"
    lmax = o["max_completion_length"]
    if lmax is None:
        lmax = o["max_completion_length"] = tree.T
    if lmax < tree.T:
        raise ValueError(
            f"`max_completion_length` {lmax} is shorter than the tree's depth {tree.T}: no "
            "completion may be longer than it; give a max_completion_length >= T"
        )
    b = V.as_scalar("beta", beta, "[0, inf)")
    return o, b


def expected_tree_update(
    rule: str, logits, ref, reward, beta: float, *, eos_token: int | None = None, **options
) -> list[NDArray[np.float64]]:
    r"""Minus the expected gradient of GRPO's loss for one group of token sequences, per prefix.

    .. math::

        u_h(a) = P(h)\,\pi(a|h)\big[c_h(a) - \textstyle\sum_b \pi(b|h)\,c_h(b)\big],\qquad
        c_h(a) = \mathbb{E}[\bar A \mid ha] - \beta\,\mathbb{E}[W \mid ha]\,\kappa(h, a)

    with :math:`\bar A(y) = G\,\mathbb{E}[w_1A_1 \mid y_1 = y]`,
    :math:`W(y) = G\,\mathbb{E}[w_1 \mid y_1 = y]` the ``loss_type``'s weight :math:`w_i`
    (``grpo``: :math:`1/(GL_i)`; ``bnpo``/``dapo``: :math:`1/\sum_j L_j`; ``dr_grpo``:
    :math:`1/(G L_{max})`), :math:`\kappa = \log(\pi/\pi_{ref})` for the ratio-corrected k3
    (:math:`1 - \pi_{ref}/\pi` for the plain one). On-policy, exact for a finite group
    (the global token mean sums over the compositions of the other members with the law
    of their total length) and for ``num_generations=None``. An SGD step is
    ``[th + lr * u for th, u in zip(logits, update)]``.

    Parameters
    ----------
    rule : {"grpo", "gspo"}
        The rule (:data:`TREE_RULES`): ``"gspo"`` is TRL's GRPO with
        ``importance_sampling_level="sequence"`` (Zheng et al. 2025, arXiv:2507.18071): the
        ratio is :math:`\exp(\frac1L\sum_t \log\rho_t)`, which on-policy leaves the policy
        term as it is and, on the ratio-corrected k3, gives every token of a sequence the
        sequence's mean k3 (:math:`\kappa_t = 1 - \pi_{ref}/\pi + \frac1L\sum_s k3_s`).
    logits : list of array_like
        The policy's logits per prefix, ``logits[t]`` of shape ``(V,)*(t+1)`` as ``ref``;
        ``-inf`` wherever ``ref`` is 0, a finite entry in every row.
    ref : list of array_like
        The reference's token tree (the conditionals of :mod:`klpolicy.sequences`); rows
        below an EOS are never read but must be distributions, as in every token tree.
    reward : array_like, shape (V,)*T
        The reward on whole sequences. A completion that ends at EOS at position ``t`` has
        the reward ``reward[a_0, ..., a_t, eos, ..., eos]`` (EOS-padded); the other entries
        below an EOS are not read.
    beta : float
        The KL coefficient ``>= 0`` (TRL's ``beta``).
    eos_token : int, optional
        The token that ends a completion (kept in it, counted in its length). ``None``:
        every completion has ``T`` tokens.
    **options
        TRL 1.16.0's GRPO options (:data:`TREE_OPTIONS`): ``num_generations``,
        ``scale_rewards``, ``loss_type``, ``use_bias_correction_kl``, ``epsilon``,
        ``num_iterations``, ``max_completion_length`` (512; ``None``: the tree's depth),
        ``mask_truncated_completions`` (False: a completion without an EOS keeps its tokens
        in the loss; True: they leave the loss and the token counts, its reward stays in the
        group's mean and std).

    Returns
    -------
    list of ndarray
        ``u[t]`` of shape ``(V,)*(t+1)``: the ascent direction in ``logits[t]``; every row
        sums to zero and is 0 at prefixes the policy never reaches (below an EOS).

    Raises
    ------
    ValueError
        For a rule outside :data:`TREE_RULES`, an unknown option (listed with its default), an
        option's bad value, a ``max_completion_length`` shorter than the tree's depth, a
        negative ``beta``, ``ref``/``reward``/``logits`` whose shapes do not match, an
        ``eos_token`` outside the vocabulary, or a finite global-token-mean group whose
        exact sum is too large.

    Notes
    -----
    ``scale_rewards="batch"`` equals ``"group"`` (one group per batch); ``epsilon`` and
    ``num_iterations`` do not enter an on-policy step. ``dapo``'s normaliser is the
    generation batch's token count (TRL 1.16.0 ``grpo_trainer.py`` line 2498, 3169-3173):
    for one group, one process and no accumulation, ``bnpo``'s. Everything here is one
    group per batch: with many prompts' groups in one generation batch (or micro-batch,
    for ``bnpo``) the token count is a sum over many completions, nearly a constant, and
    the global token mean approaches its infinite-group (length-neutral) form.

    References
    ----------
    .. [1] Liu et al., "Understanding R1-Zero-Like Training: A Critical Perspective", 2025,
       arXiv:2503.20783 (the per-sequence mean's length bias; Dr. GRPO).
    .. [2] Yu et al., "DAPO", 2025, arXiv:2503.14476 (the token-level mean).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.dynamics import expected_tree_update
    >>> ref = [np.array([0.5, 0.5]), np.full((2, 2), 0.5)]  # token 1 is EOS
    >>> reward = np.array([[1.0, 1.0], [0.0, 0.0]])          # a "0" first wins
    >>> u = expected_tree_update("grpo", [np.log(r) for r in ref], ref, reward, 0.1,
    ...                          eos_token=1, num_generations=2, loss_type="grpo",
    ...                          scale_rewards="none")
    >>> u[0].round(6)
    array([ 0.09375, -0.09375])
    """
    tree = _tree(ref, reward, eos_token)
    o, b = _resolve(rule, options, beta, tree)
    th = _check_logits(tree, logits)
    return _update(tree, th, b, o)


# ----------------------------------------------------------------------------- landing


def _reach(tree: _Tree) -> list:
    """The prefixes the reference reaches (rows of the free logits), bool (V,)*t per level."""
    return [p > 0 for p in _prefix(tree, tree.ref)]


def _pack(tree, reach):
    """Free coordinates: at each reached prefix, the logits on ref's support less the last one."""
    cells = []
    for t in range(tree.T):
        for h in zip(*np.nonzero(reach[t])) if t else [()]:
            sup = np.flatnonzero(tree.ref[t][h] > 0)
            if sup.size > 1:
                cells.append((t, h, sup))
    return cells


def _unpack(tree, cells, base, z):
    th = [a.copy() for a in base]
    i = 0
    for t, h, sup in cells:
        n = sup.size - 1
        row = th[t][h]
        row[sup[:-1]] = z[i : i + n]
        row[sup[-1]] = 0.0
        th[t][h] = row
        i += n
    return th


def _z_of(cells, th):
    return np.concatenate(
        [th[t][h][sup[:-1]] - th[t][h][sup[-1]] for t, h, sup in cells] or [np.zeros(0)]
    )


def _field(tree, cells, base, beta, o, scaled_by_prefix):
    """The update in the free coordinates; divided by P(h) pi (the per-node natural units)."""

    def f(z):
        if not np.all(np.isfinite(z)):  # a trial step past float64: no residual there
            return np.full(z.shape, np.nan)
        th = _unpack(tree, cells, base, z)
        pi = _softmax_levels(th)
        if scaled_by_prefix:
            _, coef = _node_terms(tree, pi, beta, o)
            parts = [coef[t][h][sup[:-1]] - coef[t][h][sup[-1]] for t, h, sup in cells]
        else:
            u = _update(tree, th, beta, o)
            parts = [u[t][h][sup[:-1]] - u[t][h][sup[-1]] for t, h, sup in cells]
        return np.concatenate(parts or [np.zeros(0)])

    return f


def _log_levels(tree, pol):
    with np.errstate(divide="ignore"):
        return [
            np.where(q > 0, np.log(np.where(p > 0, p, 1e-300)), -np.inf)
            for p, q in zip(pol, tree.ref, strict=True)
        ]


def _myopic(tree: _Tree, b: float, corrected: bool) -> list:
    """pi(a|h) = argmax_pi E_pi[r|h] - b D(pi || ref_h), backwards (the dr_grpo fixed point)."""
    pol = [None] * tree.T
    value = None
    for t in range(tree.T - 1, -1, -1):
        v = tree.leaf_reward[t]
        if t < tree.T - 1:
            v = np.where(tree.leaf[t], v, value)
        q = tree.ref[t]
        if b == 0:
            p = optimal_policy(q, v, 0.0)
        elif corrected:
            p = optimal_policy(q, v, b)
        else:
            p = f_optimal_policy(q, v, b, divergence="forward_kl")
        pol[t] = np.asarray(p, dtype=np.float64)
        value = (pol[t] * v).sum(-1)
    return pol


def _pistar(tree: _Tree, b: float) -> list:
    """The sequence-level pi*: pi(a|h) ∝ ref(a|h) exp(V(ha)/b), V the soft value."""
    pol = [None] * tree.T
    value = None
    for t in range(tree.T - 1, -1, -1):
        v = tree.leaf_reward[t]
        if t < tree.T - 1:
            v = np.where(tree.leaf[t], v, value)
        q = tree.ref[t]
        pol[t] = np.asarray(optimal_policy(q, v, b), dtype=np.float64)
        value = np.asarray(soft_value(q, v, b), dtype=np.float64)  # b log E_ref e^{V/b}
    return pol


def _mean_length(tree, pol) -> float:
    P = _prefix(tree, pol)
    lp = _leaf_probs(tree, pol, P)
    return float(sum((t + 1) * lp[t].sum() for t in range(tree.T)))


def _sequence_kl(tree, pol) -> float:
    P = _prefix(tree, pol)
    total = 0.0
    for t in range(tree.T):
        p, q = pol[t], tree.ref[t]
        on = p > 0
        with np.errstate(divide="ignore", invalid="ignore"):
            term = np.where(
                on, p * (np.log(np.where(on, p, 1.0)) - np.log(np.where(on, q, 1.0))), 0.0
            )
        total += float((P[t] * term.sum(-1)).sum())
    return total


def _jacobian_growth(f, z) -> tuple[float, float]:
    """(largest real part of the Jacobian's eigenvalues, its rounding) of the per-prefix field.

    The field is the update divided by P(h) pi at every prefix (the per-prefix natural
    step), so that a prefix the policy rarely reaches is judged as finely as the root: the
    SGD field's Jacobian is that one's times a positive block-diagonal matrix, of the same
    stability where the coupling is block-triangular (the myopic closed forms), and its
    eigenvalues at rare prefixes are below any rounding of a difference quotient.
    """
    if z.size == 0:
        return -np.inf, 0.0
    h = 1e-5
    jac = np.stack([(f(z + h * e) - f(z - h * e)) / (2 * h) for e in np.eye(z.size)], axis=1)
    return float(np.max(np.linalg.eigvals(jac).real)), 1e-7 * max(1.0, float(np.abs(jac).max()))


def _masked_split(tree) -> bool:
    """Some reached last-level prefix has two truncated tokens on the reference's support."""
    P = _prefix(tree, tree.ref)[-1][..., None]
    n = ((tree.ref[-1] > 0) & _truncated(tree) & (P > 0)).sum(-1)
    return bool((n >= 2).any())


def _closed_form(tree, o, beta):
    """(b, why) when the landing point is the myopic equilibrium at b, else None."""
    if o["scale_rewards"] != "none":
        return None
    if o["importance_sampling_level"] == "sequence" and o["use_bias_correction_kl"]:
        return None  # GSPO's sequence ratio spreads the sequence's k3 over its tokens
    G = o["num_generations"]
    lengths_equal = tree.eos is None or all(
        not (tree.leaf[t] & (tree.ref[t] > 0) & (_prefix(tree, tree.ref)[t][..., None] > 0)).any()
        for t in range(tree.T - 1)
    )
    lt = o["loss_type"]
    neutral = lt == "dr_grpo" or (lt in ("bnpo", "dapo") and G is None) or lengths_equal
    if o["mask_truncated_completions"]:
        P_last = _prefix(tree, tree.ref)[-1][..., None] * tree.ref[-1]
        if (P_last[_truncated(tree)] > 0).any():
            return None  # the truncated completions weigh 0: no longer a constant weight
    if not neutral:
        return None
    b = beta if G is None else beta * G / (G - 1)
    why = (
        {
            "dr_grpo": "dr_grpo divides by the constant G L_max: length-neutral",
            "bnpo": "the infinite group's token count is G E[L], a constant: length-neutral",
            "dapo": "the infinite group's token count is G E[L], a constant: length-neutral",
            "grpo": "every completion has the same length: the per-sequence mean is a constant",
        }[lt]
        if not lengths_equal
        else "every completion has the same length: every loss_type is a constant times the sum"
    )
    return b, why


def tree_landing_point(
    rule: str, ref, reward, beta: float, *, eos_token: int | None = None, **options
) -> TreeLanding:
    r"""Where on-policy GRPO training on a token tree lands, and its length bias.

    .. math::

        \text{fixed point: } \mathbb{E}[\bar A \mid ha] - \beta\,\mathbb{E}[W \mid ha]\,
        \log\frac{\pi(a|h)}{\pi_{ref}(a|h)} = \lambda_h \quad\text{for every reached prefix } h

    Closed form where the weight is a constant (``dr_grpo``; ``bnpo``/``dapo`` in the
    infinite group; any ``loss_type`` when every completion has the same length) and there
    is no standard-deviation scale: the *myopic* equilibrium
    :math:`\pi(a|h) \propto \pi_{ref}(a|h)\,e^{\mathbb{E}_\pi[r|ha]/b}` at
    :math:`b = \beta G/(G-1)`, built backwards (``kind="myopic"``; with the plain k3 the
    per-node forward-KL optimum, ``kind="myopic_forward_kl"``). Otherwise the exact root of
    :func:`expected_tree_update` in the free logits of every reached prefix, started from
    that closed form (``kind="fixed_point"``), classified by the eigenvalues of the
    update's Jacobian.

    Parameters
    ----------
    rule, ref, reward, beta, eos_token, **options
        As in :func:`expected_tree_update`.

    Returns
    -------
    TreeLanding
        ``.policy`` (conditionals; the reference's rows where the policy never goes),
        ``.mean_length``, ``.pistar_mean_length`` (the sequence-level pi* at ``beta``),
        ``.length_bias`` (their difference, in tokens), ``.neutral_mean_length`` (the
        same options with ``loss_type="dr_grpo"``) and ``.aggregation_bias`` (the
        difference to it: what the aggregation alone does), ``.beta_token``,
        ``.kind``, ``.stable``, ``.kl`` (the sequence KL to the reference), ``.reason``.

    Raises
    ------
    ValueError
        As :func:`expected_tree_update`.

    Notes
    -----
    TRL's KL is a per-token term in the loss: its on-policy gradient at a prefix is the
    gradient of that prefix's own KL only, never of the KL of the tokens after it. So even
    the length-neutral ``dr_grpo`` does not land at the sequence-level pi*: it lands at the
    myopic equilibrium, whose value below a prefix is an expectation where pi*'s is the
    soft maximum. ``length_bias`` mixes that and the aggregation; ``aggregation_bias``
    isolates the aggregation. With ``beta = 0`` there is no KL term: no landing point
    (``kind="greedy"``, ``policy=None``).

    References
    ----------
    .. [1] Liu et al., 2025, arXiv:2503.20783 (Dr. GRPO: the length bias of the
       per-sequence mean).
    .. [2] Zhang et al., "On the Design of KL-Regularized Policy Gradient Algorithms for
       LLM Reasoning", 2025, arXiv:2505.17508 (a per-token KL in the loss and its gradient).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.dynamics import tree_landing_point
    >>> ref = [np.array([0.5, 0.5]), np.full((2, 2), 0.5)]       # token 1 is EOS
    >>> reward = np.array([[0.0, 0.0], [1.0, 1.0]])               # stopping at once wins
    >>> lp = tree_landing_point("grpo", ref, reward, 0.5, eos_token=1, num_generations=4,
    ...                         scale_rewards="none", loss_type="dr_grpo")
    >>> lp.kind, round(lp.beta_token, 6), round(lp.mean_length, 6)
    ('myopic', 0.666667, 1.182426)
    """
    tree = _tree(ref, reward, eos_token)
    o, b = _resolve(rule, options, beta, tree)
    star = _pistar(tree, b) if b > 0 else None
    star_len = _mean_length(tree, star) if star is not None else None
    if b == 0:
        reason = "beta = 0: no KL term, nothing holds the policy (TRL 1.16.0's default)"
        return _no_landing(rule, o, "greedy", None, reason)
    reach = _reach(tree)
    cells = _pack(tree, reach)
    closed = _closed_form(tree, o, b)
    if closed is not None:
        pol, kind, stable, bt, why = _myopic_landing(tree, cells, closed, b, o)
    else:
        th, stable, ok = _root_from_myopic_or_reference(tree, cells, b, o)
        if not ok:
            return _no_landing(rule, o, "run_off", star_len, _run_off_reason(o))
        pol, kind, bt = _softmax_levels(th), "fixed_point", None
        why = _fixed_point_reason(tree, o)
    pol = _reference_where_unreached(tree, reach, pol)
    mean_len = _mean_length(tree, pol)
    if o["loss_type"] == "dr_grpo":
        neutral = mean_len
    else:
        neutral = tree_landing_point(
            rule, ref, reward, beta, eos_token=eos_token, **{**options, "loss_type": "dr_grpo"}
        ).mean_length
    return TreeLanding(
        rule=rule,
        options=o,
        policy=pol,
        kind=kind,
        stable=stable,
        interior=_interior(tree, reach, pol),
        kl=_sequence_kl(tree, pol),
        mean_length=mean_len,
        pistar_mean_length=star_len,
        length_bias=mean_len - star_len,
        neutral_mean_length=neutral,
        aggregation_bias=None if neutral is None else mean_len - neutral,
        beta_token=bt,
        reason=why,
    )


def _no_landing(rule, o, kind, star_len, reason) -> TreeLanding:
    """A :class:`TreeLanding` without a policy: ``"greedy"`` (beta = 0) or ``"run_off"``
    (no fixed point found), with pi*'s mean length where there is one."""
    return TreeLanding(
        rule=rule,
        options=o,
        policy=None,
        kind=kind,
        stable=False,
        interior=False,
        kl=math.inf,
        mean_length=None,
        pistar_mean_length=star_len,
        length_bias=None,
        neutral_mean_length=None,
        aggregation_bias=None,
        beta_token=None,
        reason=reason,
    )


def _myopic_landing(tree, cells, closed, b, o):
    """The closed-form landing, the myopic equilibrium at ``closed``'s b, its stability by
    the Jacobian of the per-prefix field: ``(policy, kind, stable, beta_token, reason)``."""
    bt, why = closed
    corrected = o["use_bias_correction_kl"]
    pol = _myopic(tree, bt, corrected)
    th = _log_levels(tree, pol)
    kind = "myopic" if corrected else "myopic_forward_kl"
    growth, tol = _jacobian_growth(_field(tree, cells, th, b, o, True), _z_of(cells, th))
    stable = bool(growth < -tol)
    why += f"; the per-token KL in the loss is myopic: pi(a|h) ∝ ref exp(E_pi[r|ha]/{bt:.6g})"
    return pol, kind, stable, bt, why


def _root_from_myopic_or_reference(tree, cells, b, o):
    """A root of the expected update, ``(logits, stable, converged)``: from the myopic
    equilibrium at ``b G/(G-1)``; where that fails or is unstable, from the reference (where
    training starts), kept if it converged and is stable or the first did not converge."""
    G = o["num_generations"]
    b_start = b if G is None else b * G / (G - 1)
    start = _log_levels(tree, _myopic(tree, b_start, o["use_bias_correction_kl"]))
    th, stable, ok = _solve(tree, cells, start, b, o)
    if not (ok and stable):  # then from the reference, where training starts
        again = _solve(tree, cells, _log_levels(tree, tree.ref), b, o)
        if again[2] and (again[1] or not ok):
            th, stable, ok = again
    return th, stable, ok


def _run_off_reason(o) -> str:
    """Why there is no landing point when no root was found (the std scale's collapse)."""
    return "no fixed point was found from the myopic equilibrium or the reference" + (
        ": the std scale grows the advantage as the policy concentrates, and "
        "training drives tokens' probabilities to 0 (entropy collapse, as for one token)"
        if o["scale_rewards"] != "none"
        else ""
    )


def _fixed_point_reason(tree, o) -> str:
    """Why the landing point is a root of the update and not a closed form: the
    aggregation's weight, the mask, the std scale, GSPO's sequence ratio, and where the
    mask leaves a set of fixed points."""
    why = {
        "grpo": "the per-sequence token mean weights a completion's tokens by 1/L: reward "
        "(r - E r)/L and a per-token KL weighted by E[1/L | prefix]",
        "bnpo": "the global token mean weights every token by 1/(the group's token count), "
        "which depends on the others' lengths",
        "dapo": "the global token mean weights every token by 1/(the group's token count), "
        "which depends on the others' lengths",
        "dr_grpo": "dr_grpo's constant normaliser G L_max",
    }[o["loss_type"]]
    if o["mask_truncated_completions"]:
        why += " (the truncated completions' tokens masked)"
    if o["scale_rewards"] != "none":
        why += ", with the group's std scale"
    if o["importance_sampling_level"] == "sequence" and o["use_bias_correction_kl"]:
        why += (
            "; GSPO's sequence ratio multiplies each token's k3, so every token also "
            "carries its sequence's mean k3 (the later tokens' KL among it)"
        )
    why += "; a root of the exact expected update"
    if o["mask_truncated_completions"] and _masked_split(tree):
        why += (
            "; mask_truncated_completions leaves no loss on the tokens that end a completion "
            "without an EOS, so how a prefix splits its mass among them is held by nothing "
            "but the others' advantages: a set of fixed points, not one (the Jacobian has a "
            "zero eigenvalue; this is the one reached from the myopic start)"
        )
    return why


def _reference_where_unreached(tree, reach, pol) -> list:
    """The policy's conditionals, the reference's rows at the prefixes it never reaches."""
    return [
        np.where(np.broadcast_to(reach[t][..., None], p.shape), p, q)
        for t, (p, q) in enumerate(zip(pol, tree.ref, strict=True))
    ]


def _interior(tree, reach, pol) -> bool:
    """Every token on the reference's support at a reached prefix keeps probability > 0."""
    return all(
        bool(np.all(p[np.broadcast_to(reach[t][..., None], p.shape) & (tree.ref[t] > 0)] > 0))
        for t, p in enumerate(pol)
    )


def _solve(tree, cells, start, beta, o):
    """(logits, stable, converged): Powell's hybrid method on the per-node residual."""
    from scipy.optimize import root

    f_res = _field(tree, cells, start, beta, o, True)
    z = _z_of(cells, start)
    G = o["num_generations"]
    scale = (math.sqrt(G) if G else 1.0) + beta + 1.0
    for _ in range(4):
        sol = root(f_res, z, method="hybr", options={"xtol": 1e-15, "maxfev": 20000})
        z = sol.x
        if np.all(np.isfinite(z)) and np.max(np.abs(f_res(z)), initial=0.0) <= 1e-13 * scale:
            break
    if not np.all(np.isfinite(z)) or np.max(np.abs(f_res(z)), initial=0.0) > 1e-11 * scale:
        return None, False, False
    th = _unpack(tree, cells, start, z)
    growth, tol = _jacobian_growth(f_res, z)
    return th, bool(growth < -tol), True
