r"""Population losses and exact population optima for every row of :data:`LOSSES`.

A tabular problem: outcomes ``0..n-1``, a reference ``ref``, a pair law ``mu``
and preferences ``P``; the pair (winner ``i``, loser ``j``) is observed with
probability ``W[i, j] = (mu[i, j] + mu[j, i]) P[i, j]`` (pairs of identical
responses included), exactly as :func:`population_dpo_loss` weighs them. With the
log-ratios :math:`g = \log(\pi/\pi_{ref})`, a per-pair loss
:math:`\ell(a, b)` has the population loss
:math:`\mathcal{L}(\pi) = \sum_{ij} W_{ij}\,\ell(g_i, g_j)`.
Public names are re-exported by :mod:`klpolicy.preference`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray

from ..core.internal import monotone_root, special
from ..core.internal import validation as V
from ._inputs import as_pair_law, as_preference_matrix
from .fdpo import (
    DEFAULT_TRL_VERSION,
    _as_clamp,
    check_f_loss,
    f_population_loss,
    f_population_optimum,
    keeps_constants,
    resolve_divergence,
)
from .optima import dpo_optimum, ipo_optimum
from .registry import LOSSES, get_loss
from .solvers import (
    _check_connected,
    _margin_newton,
    _minimise_margin_loss,
    laplacian_solve,
)
from .tabular import _dpo_value, _log_ratio, _ref_1d, _tilt_scores, _win_weights

__all__ = [
    "LossComparison",
    "OptimumSet",
    "compare_losses",
    "optimum_set",
    "population_loss",
    "population_optimum",
]


# ---------------------------------------------------------------------------
# population losses
# ---------------------------------------------------------------------------


def _quantile_coupling(left_vals, left_w, right_vals, right_w, psi):
    """Integral over u in (0, 1) of psi(Q_left(u) - Q_right(u)) for two discrete laws."""
    ol, orr = np.argsort(left_vals, kind="stable"), np.argsort(right_vals, kind="stable")
    lv, lw = left_vals[ol], left_w[ol]
    rv, rw = right_vals[orr], right_w[orr]
    cl, cr = np.cumsum(lw), np.cumsum(rw)
    total = max(cl[-1], cr[-1])
    cl[-1] = cr[-1] = total
    cuts = np.union1d(cl, cr)
    lo = np.concatenate([[0.0], cuts[:-1]])
    widths = cuts - lo
    keep = widths > 0
    mids_right = cuts[keep]
    # the atom covering the interval (lo, cut]: first index whose cumulative mass reaches cut
    il = np.minimum(np.searchsorted(cl, mids_right, side="left"), lv.size - 1)
    ir = np.minimum(np.searchsorted(cr, mids_right, side="left"), rv.size - 1)
    return float(np.sum(widths[keep] * psi(lv[il] - rv[ir])))


def population_loss(
    policy: ArrayLike,
    ref: ArrayLike,
    preferences: ArrayLike,
    beta: float,
    *,
    loss: str | Sequence[str] = "sigmoid",
    mu: ArrayLike | None = None,
    divergence: str = "reverse_kl",
    alpha: float | None = None,
    alpha_clamp: float | None = None,
    loss_weights: Sequence[float] | None = None,
    trl_version: str = DEFAULT_TRL_VERSION,
    **options: float,
) -> float:
    r"""Expected loss of a tabular policy for any pair loss of :data:`LOSSES`.

    .. math::

        \mathcal{L}(\pi) = \sum_{i,j} W_{ij}\,\ell\big(g_i, g_j\big),\qquad
        W_{ij} = (\mu_{ij} + \mu_{ji})P_{ij},\qquad g = \log\frac{\pi}{\pi_{ref}}

    and for the batch-sorting losses (``aot``, ``aot_pair``) the large-batch limit of
    TRL's batch mean: the quantile coupling of the two laws it sorts,

    .. math::

        \mathcal{L}_{aot\_pair}(\pi) = \int_0^1 \psi\big(\beta\,(Q_a(u) - Q_b(u))\big)\,du,

    with :math:`Q_a`, :math:`Q_b` the quantile functions of the chosen and rejected
    log-ratios under ``W`` and :math:`\psi` the (label-smoothed) sigmoid loss; ``aot``
    sorts the policy's log-odds :math:`\log\pi_i - \log\pi_j` and the reference's
    instead.

    Parameters
    ----------
    policy : array_like
        The policy, shape ``(n,)``; positive on every outcome the pairs involve.
    ref : array_like
        Reference distribution, shape ``(n,)``.
    preferences : array_like
        ``P[i, j]`` = probability that ``i`` is preferred to ``j``, ``(n, n)``.
    beta : float
        Positive, finite coefficient (TRL's ``beta``; IPO's :math:`\tau`).
    loss : str, optional
        A key of :data:`LOSSES` (default ``"sigmoid"``).
    mu : array_like, optional
        Pair law: ``None`` (``ref x ref``), a vector or an ``(n, n)`` joint law.
    divergence : str, optional
        The f-divergence whose score replaces each log-ratio (f-DPO; TRL's
        ``f_divergence_type``: ``"reverse_kl"`` (default, DPO), ``"forward_kl"``,
        ``"js_divergence"``, ``"alpha_divergence"``, or any key of
        :data:`klpolicy.DIVERGENCES` but ``"tv"``); see
        :func:`~klpolicy.preference.f_divergence_score`. Which losses take the scores
        is TRL's choice in ``trl_version`` (the row's ``f_divergence``): from 1.10.0
        only the margin losses, ``sigmoid_norm`` and ``sft`` (a ValueError otherwise,
        as TRL); in 0.29.0-1.9.2 also ``nca_pair``, ``bco_pair`` and ``sppo_hard``,
        while the sorting losses and ``apo_zero`` use the log-ratios whatever the
        divergence.
    alpha, alpha_clamp : float, optional
        TRL's ``f_alpha_divergence_coef`` and its exponent clamp (80 in
        float32/bfloat16, 11 in float16; ``None``: none), for the alpha divergence.
    trl_version : str, optional
        The TRL release whose f-DPO scores and loss choices to follow (default
        ``"1.16.0"``; see :func:`~klpolicy.preference.f_divergence_score`): the scores'
        constants matter where they are divided by lengths (``sigmoid_norm``).
    loss_weights : sequence of float, optional
        With a list of losses (TRL's ``loss_type`` list): the weight of each
        (non-negative; default 1 each, as TRL); the population loss is
        :math:`\sum_k w_k \mathcal{L}_k`, each row taking the options it knows.
    **options
        The loss's options (see ``LOSSES[loss].options``), validated by name.
        ``sigmoid_norm`` takes ``lengths``: one positive, finite response length
        (tokens) per outcome, shape of ``ref``; its loss is
        :math:`\sum W_{ij}\,\mathrm{sp}(-\beta(g_i/L_i - g_j/L_j))`.

    Returns
    -------
    float
        The expected per-pair loss.

    Raises
    ------
    ValueError
        For an unknown ``loss`` or option, an option out of range, or invalid
        ``policy``, ``ref``, ``preferences``, ``mu`` or ``beta``.

    Notes
    -----
    ``loss="sigmoid"`` runs the same computation as :func:`population_dpo_loss`
    (label smoothing folded into the weights) and returns the same float. Only
    log-ratios of outcomes the pairs involve enter. For a batch of ``N`` pairs
    replicated in the proportions ``W`` (``N W`` integers), TRL's batch mean of a
    sorting loss equals the quantile integral above exactly.

    References
    ----------
    .. [1] Rafailov et al., 2023, arXiv:2305.18290; the rows of :data:`LOSSES`.
    .. [2] Melnyk et al., 2024, arXiv:2406.05882 (AOT: sorting as 1-D optimal transport).

    Examples
    --------
    >>> from klpolicy.preference import population_loss
    >>> P = [[0.5, 0.9], [0.1, 0.5]]
    >>> round(population_loss([0.5, 0.5], [0.5, 0.5], P, 1.0), 6)  # log 2
    0.693147
    >>> round(population_loss([0.5, 0.5], [0.5, 0.5], P, 1.0, loss="hinge"), 6)
    1.0
    """
    if not isinstance(loss, str) and isinstance(loss, Sequence) and len(loss) > 0:
        common = dict(
            mu=mu,
            divergence=divergence,
            alpha=alpha,
            alpha_clamp=alpha_clamp,
            trl_version=trl_version,
        )
        problem = (policy, ref, preferences, beta)
        return _weighted_population_loss(problem, loss, loss_weights, common, options)
    if loss_weights is not None:
        raise ValueError(
            f"`loss_weights` go with a list of losses (TRL's loss_type list); got "
            f"loss={loss!r} and loss_weights={loss_weights!r}"
        )
    row = get_loss(loss)
    o = row.resolve_options(options)
    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    if row.name == "sft":  # -log pi(chosen): the chosen marginal's cross-entropy
        w = _win_weights(ref_a, preferences, mu)
        g = _log_ratio(policy, ref_a, w)
        chosen = w.sum(axis=1)
        with np.errstate(divide="ignore", invalid="ignore"):
            lp = np.where(chosen > 0, g + np.log(np.where(chosen > 0, ref_a, 1.0)), 0.0)
        return float(-np.sum(chosen * lp))
    f_dpo = (divergence, alpha, alpha_clamp) != ("reverse_kl", None, None)
    constants = keeps_constants(trl_version)
    if f_dpo:
        frow, a, _ = resolve_divergence(divergence, alpha)
        clamp = _as_clamp(alpha_clamp, frow.name)
        if check_f_loss(row, divergence, trl_version) == "scores":
            w = _win_weights(ref_a, preferences, mu)
            g = _log_ratio(policy, ref_a, w)
            lengths = None
            if "lengths" in o:  # sigmoid_norm: the scores divided by the lengths
                lengths = _outcome_lengths(o["lengths"], ref_a)
            return f_population_loss(
                row,
                o,
                row._kernel[0],
                g,
                w,
                b,
                frow.name,
                a,
                clamp,
                row.margin_only,
                constants,
                lengths,
            )
    if row.name == "sigmoid_norm":
        lengths = _outcome_lengths(o["lengths"], ref_a)
        w = _win_weights(ref_a, preferences, mu)
        g = _log_ratio(policy, ref_a, w)
        return _dpo_value(g / lengths, w, b)
    if row.name == "sigmoid":
        w = _win_weights(ref_a, preferences, mu, o["label_smoothing"])
        return _dpo_value(_log_ratio(policy, ref_a, w), w, b)
    w = _win_weights(ref_a, preferences, mu)
    g = _log_ratio(policy, ref_a, w)
    if row.batch_dependent:
        return _sorting_loss(row.name, g, w, ref_a, b, o["label_smoothing"])
    ell = row._kernel[0]
    mask = w > 0
    with np.errstate(over="ignore"):
        if row.margin_only:
            d = g[:, None] - g[None, :]
            vals = ell(d, np.zeros_like(d), b, o)
        else:
            vals = ell(g[:, None] + 0 * g[None, :], g[None, :] + 0 * g[:, None], b, o)
    return float(np.sum(np.where(mask, w * np.where(mask, vals, 0.0), 0.0)))


def _weighted_population_loss(problem, loss, loss_weights, common, options) -> float:
    """TRL's ``loss_type`` list with ``loss_weights``: the weighted sum of the losses'
    population values, each with its own options (an option no loss has is a ValueError)."""
    names = [get_loss(n).name for n in loss]
    weights = _loss_weights(loss_weights, len(names))
    known = {o.name for n in names for o in LOSSES[n].options}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(
            f"no loss in `loss` {names} has the option `{unknown[0]}`; their options: "
            + (", ".join(f"`{k}`" for k in sorted(known)) or "none")
        )
    total = 0.0
    for n, wk in zip(names, weights):
        own = {k: v for k, v in options.items() if k in {o.name for o in LOSSES[n].options}}
        total += wk * population_loss(*problem, loss=n, **common, **own)
    return total


def _sorting_loss(name, g, w, ref_a, b, eps) -> float:
    """The sorting losses (``aot``, ``aot_pair``, ``aot_unpaired``): the quantile coupling of
    the chosen and rejected log-ratio (or log-odds) laws under the pair weights."""

    def psi(d):
        return (1 - eps) * np.logaddexp(0.0, -b * d) + eps * np.logaddexp(0.0, b * d)

    if name in ("aot_pair", "aot_unpaired"):
        idx = np.arange(g.size)
        keep = (w.sum(1) + w.sum(0)) > 0
        return _quantile_coupling(g[idx[keep]], w.sum(1)[keep], g[idx[keep]], w.sum(0)[keep], psi)
    i, j = np.nonzero(w > 0)
    with np.errstate(divide="ignore"):
        lref = np.log(ref_a)
    ref_odds = lref[i] - lref[j]
    pol_odds = (g[i] - g[j]) + ref_odds
    return _quantile_coupling(pol_odds, w[i, j], ref_odds, w[i, j], psi)


# ---------------------------------------------------------------------------
# population optima
# ---------------------------------------------------------------------------


def _outcome_lengths(lengths: NDArray, ref: NDArray) -> NDArray[np.float64]:
    """``sigmoid_norm``'s per-outcome lengths: validated by the row; one per outcome of ref."""
    if lengths.shape != ref.shape:
        raise ValueError(
            f"`lengths` must have one length per outcome, shape {ref.shape} like `ref`; got "
            f"shape {lengths.shape}"
        )
    return lengths


def _length_normalised_optimum(ref: NDArray, x: NDArray, lengths: NDArray, beta: float):
    """pi_y = ref_y exp(L_y (x_y + c) / beta), c the root of sum pi = 1 (increasing in c).

    ``x``: the sigmoid optimum's implied scores (-inf where it puts no mass). Solved for
    tau = (c + max x) / beta, so that the exponents log ref_y + L_y (x_y - max x) / beta + L_y tau
    are finite or -inf at every beta (beta -> 0: the greedy limit).
    """
    live = np.isfinite(x) & (ref > 0)
    lengths_live = lengths[live]
    with np.errstate(over="ignore"):
        v = np.log(ref[live]) + (lengths_live * (x[live] - np.max(x[live]))) / beta
    big = float(np.max(v))

    def fun(tau, rows):
        t = v[None, :] + lengths_live[None, :] * tau[:, None]
        m = np.max(t, axis=1, keepdims=True)
        e = np.exp(t - m)
        s = e.sum(axis=1)
        return m[:, 0] + np.log(s), (e * lengths_live).sum(axis=1) / s

    lmin = float(np.min(lengths_live))
    lo = min(0.0, -(big + math.log(v.size)) / lmin)
    hi = max(0.0, -big / lmin)
    tau = float(monotone_root(fun, lo, hi, increasing=True).x)
    pi = np.zeros(ref.shape)
    pi[live] = np.exp(v + lengths_live * tau)
    return pi / pi.sum()


def _loss_weights(weights, n: int) -> list[float]:
    """TRL's loss_weights for n losses: default 1 each; finite, non-negative, one per loss."""
    if weights is None:
        return [1.0] * n
    arr = V.as_finite_array("loss_weights", weights).astype(np.float64).reshape(-1)
    if arr.size != n:
        raise ValueError(f"`loss_weights` must have one weight per loss ({n}); got {arr.size}")
    if (arr < 0).any():
        raise ValueError(f"`loss_weights` must be non-negative; got {arr.tolist()}")
    return arr.tolist()


def _robust_denoised(ref, preferences, mu, e: float):
    """The de-noised preferences q = (P - e) / (1 - 2e) of ``robust``, where one is 0 or 1.

    Per drawn pair, ``P l(x) + (1 - P) l(-x) = q sp(-x) + (1 - q) sp(x)`` for the robust
    pair loss ``l``: the population robust loss is the sigmoid one on ``q``. Raises where a
    drawn pair has q outside [0, 1] (P outside [e, 1 - e]: the coefficient of sp(x) or
    sp(-x) is negative and the loss is unbounded below along that pair); returns ``q``
    (exactly 0 or 1 at P = e or 1 - e) when some drawn pair is at an end (the Newton solve
    of the robust kernel needs q strictly inside), else None.
    """
    n = ref.shape[-1]
    p = as_preference_matrix("preferences", preferences, n)
    joint = as_pair_law(mu, ref)
    drawn = ((joint + joint.T) > 0) & ~np.eye(n, dtype=bool) & np.outer(ref > 0, ref > 0)
    bad = drawn & ((p < e) | (p > 1 - e))
    if bad.any():
        i, j = np.argwhere(bad)[0]
        raise ValueError(
            f"`preferences` give the drawn pair ({i}, {j}) the probability {p[i, j]:.6g}, "
            f"outside [{e:g}, {1 - e:g}]: its de-noised probability "
            f"(P - label_smoothing) / (1 - 2 label_smoothing) is not in [0, 1], and the "
            "robust loss is then unbounded below along that pair"
        )
    high, low = drawn & (p == 1 - e), drawn & (p == e)
    if not (high | low).any():
        return None
    q = np.clip((p - e) / (1 - 2 * e), 0.0, 1.0)
    q = np.where(high, 1.0, np.where(low, 0.0, q))
    upper = np.triu(q, 1)
    return upper + np.tril(1.0 - upper.T, -1) + 0.5 * np.eye(n)


def _pair_probability(w: NDArray) -> NDArray:
    """P_ij = W_ij / (W_ij + W_ji) where the pair is drawn (1/2 elsewhere)."""
    s = w + w.T
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(s > 0, w / np.where(s > 0, s, 1.0), 0.5)


def _least_squares_start(sub: NDArray, target: NDArray) -> NDArray:
    """Weighted least-squares fit of x_i - x_j to the antisymmetric per-pair targets."""
    sym = sub + sub.T
    t = np.where(sym > 0, target, 0.0)
    return laplacian_solve(sym, np.sum(sym * t, axis=1), np.ones(sub.shape[0], bool))


# the smallest discopop tau the margin solver takes: 1/tau^2 = 2**1020 is finite
_DISCOPOP_TAU_MIN = 2.0**-510


def _margin_solver(name: str, o: dict[str, float]):
    kern = LOSSES[name]._kernel[2]

    def phi(d):
        return kern.phi(d, o)

    def d1(d):
        return kern.d1(d, o)

    def d2(d):
        return kern.d2(d, o)

    def link(p):
        if name == "robust":
            e = o["label_smoothing"]
            return special.logit(np.clip((p - e) / (1 - 2 * e), 1e-300, 1 - 1e-16))
        if name == "exo_pair":
            e = o["epsilon"]
            return (2 * p - 1) * (math.log1p(-e) - math.log(e))
        return special.logit(np.clip(p, 1e-300, 1 - 1e-16))

    def solve(sub):
        x0 = _least_squares_start(sub, link(_pair_probability(sub)))
        return _margin_newton(sub, phi, d1, d2, x0)

    return solve


def _hinge_scores(sub: NDArray) -> NDArray:
    """The minimiser x of the hinge loss sum_ij w_ij max(0, 1 - (x_i - x_j)) with the smallest
    weighted spread sum_{i<j} (w_ij + w_ji)|x_i - x_j| among the minimisers (x[-1] = 0).

    Exact: the weights become integers at a common power-of-two scale (every float is one),
    the two objectives one integer key (loss * M + spread, M above any spread change), and a
    steepest descent over the moves x + 1_S finds each step's best S by a minimum cut
    (``_hinge_step``). The objective is a sum of convex functions of differences with
    integer breakpoints, so it is L-convex on the integers (Murota, Discrete Convex
    Analysis, 2003, ch. 7): a point no move x + 1_S (S any set) improves is a global
    minimiser, and because it depends on differences only, x - 1_S is the move
    x + 1_{V \\ S}. The descent starts at x = 0 and takes the smallest best S (unique), so
    every step, and the answer, is the same in any order of the outcomes. A step widens the
    range of x by one at most, so there are at least range + 1 steps (the last finds no
    improvement). The derivation: ``docs/derivations/pair_solvers.md``, section 5.
    """
    k = sub.shape[0]
    if k == 1:
        return np.zeros(1)
    pairs = _hinge_pairs(sub)
    m = 1 << (sum(a + b for _, _, a, b in pairs).bit_length() + 2)
    pairs = [(i, j, a * m, b * m, a + b) for i, j, a, b in pairs]
    x = [0] * k
    while True:
        step = _hinge_step(k, pairs, x)
        if not step:
            break
        for v in step:
            x[v] += 1
    return np.array(x, float) - x[-1]


def _hinge_pairs(sub: NDArray) -> list:
    """(i, j, w_ij, w_ji) for i < j with a weight, the weights as exact integers (every float
    is an integer times a power of two: all are scaled by the largest denominator)."""
    k = sub.shape[0]
    ratios = [v.as_integer_ratio() for v in sub.ravel().tolist()]
    den = max(d for _, d in ratios)
    w = [num * (den // d) for num, d in ratios]
    pairs = []
    for i in range(k):
        for j in range(i + 1, k):
            a, b = w[i * k + j], w[j * k + i]
            if a or b:
                pairs.append((i, j, a, b))
    return pairs


def _hinge_step(k: int, pairs: list, x: list) -> list:
    """The smallest S minimising F(x + 1_S) - F(x) (empty where x is optimal): a minimum cut.

    Per pair, with d = x_i - x_j and f its term, the change is A = f(d+1) - f(d) when only i
    moves and B = f(d-1) - f(d) when only j does: -B 1_i + B 1_j plus A + B >= 0 (f convex)
    when i moves without j, an arc i -> j. Source side = S; the smallest minimiser is the
    set the source reaches in the residual graph of a maximum flow.
    """
    src, snk = k, k + 1
    unary = [0] * k
    arcs = []
    for i, j, a, b, s in pairs:
        d = x[i] - x[j]
        up = (-a if d <= 0 else 0) + (b if d >= -1 else 0) + (s if d >= 0 else -s)
        down = (a if d <= 1 else 0) - (b if d >= 0 else 0) + (s if d <= 0 else -s)
        unary[i] -= down
        unary[j] += down
        if up + down:
            arcs.append((i, j, up + down))
    for i, u in enumerate(unary):
        if u > 0:
            arcs.append((i, snk, u))
        elif u < 0:
            arcs.append((src, i, -u))
    return [v for v in _max_flow(k + 2, src, snk, arcs)[0] if v < k]


def _max_flow(nv: int, src: int, snk: int, arcs: list) -> tuple[list, list]:
    """A maximum flow by Dinic's algorithm on integer capacities: the nodes the source reaches
    in the residual graph, and the flow on each arc (a, b, capacity)."""
    head = [0] * (2 * len(arcs))
    cap = [0] * (2 * len(arcs))
    adj: list[list[int]] = [[] for _ in range(nv)]
    for e, (a, b, c) in enumerate(arcs):
        head[2 * e], cap[2 * e] = b, c
        head[2 * e + 1] = a
        adj[a].append(2 * e)
        adj[b].append(2 * e + 1)
    while True:
        level = [-1] * nv
        level[src] = 0
        queue = [src]
        for v in queue:  # breadth first: the levels of the residual graph
            for e in adj[v]:
                if cap[e] > 0 and level[head[e]] < 0:
                    level[head[e]] = level[v] + 1
                    queue.append(head[e])
        if level[snk] < 0:
            return queue, [arcs[e][2] - cap[2 * e] for e in range(len(arcs))]
        nxt = [0] * nv
        while True:  # a blocking flow: shortest augmenting paths, depth first
            path: list[int] = []
            v = src
            while v != snk:
                out, i, up = adj[v], nxt[v], level[v] + 1
                while i < len(out) and (cap[out[i]] == 0 or level[head[out[i]]] != up):
                    i += 1
                nxt[v] = i
                if i < len(out):
                    path.append(out[i])
                    v = head[out[i]]
                elif v == src:
                    break
                else:  # a dead end: retreat
                    level[v] = -1
                    v = head[path.pop() ^ 1]
                    nxt[v] += 1
            if v != snk:
                break
            f = min(cap[e] for e in path)
            for e in path:
                cap[e] -= f
                cap[e ^ 1] += f


class _PerOutcome:
    """The per-outcome losses f_i(g) = c_i A(g) + r_i B(g) (nca_pair, bco_pair, sppo_hard),
    vectorised over outcomes: values, f', f'', the free minimisers g0 (f' = 0) and the peaks
    of f'(g) e^{-g} (closed forms)."""

    def __init__(self, name, c, r, beta, o, skew=None):
        self.name, self.c, self.r, self.beta = name, c, r, beta
        # c - r formed pair by pair (W_ij - W_ji = (mu_ij + mu_ji)(P_ij - P_ji)): for an
        # outcome near its free minimiser c - r is far below c, and the difference of the
        # rounded sums would leave x0 off by eps c / (c - r) (the mass the others share,
        # 1 - m0 of the heaviest, was then off by eps absolute)
        skew = c - r if skew is None else skew
        if name == "sppo_hard":
            self.k = 0.5 / beta
            s = c + r
            with np.errstate(divide="ignore", invalid="ignore"):
                self.g0 = np.where(s > 0, self.k * skew / s, np.nan)
            self.peak = self.g0 + 1.0  # f' = 2 (c + r) (g - g0) = f'' there
            return
        self.alpha = 1.5 * c + 0.5 * r if name == "nca_pair" else c + r
        self.delta = 0.0 if name == "nca_pair" else o["delta"]
        a, b, d = self.alpha, beta, self.delta
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # the free minimiser in x = beta g - delta: log(c / (alpha - c)), alpha - c =
            # (c + r) / 2 (nca_pair) or r (bco_pair); as log1p of (c - r) / (alpha - c)
            # (times 2 for nca_pair) when that is small, without the logs' cancellation
            rest = 0.5 * (c + r) if name == "nca_pair" else r
            q = (0.5 if name == "nca_pair" else 1.0) * skew / rest
            self.x0 = np.where(np.abs(q) < 0.5, np.log1p(q), np.log(c) - np.log(rest))
            self.g0 = (d + self.x0) / b
            # h = f' e^{-g} peaks where f'' = f': a b s^2 - a (b - 1) s - c = 0, s = sigma
            # roots without cancellation (and without overflow at extreme beta)
            disc = a * np.hypot(b - 1, 2 * np.sqrt(b * c / a))
            s = np.where(b <= 1, 2 * c / (a * (1 - b) + disc), (a * (b - 1) + disc) / (2 * a * b))
            one_minus = 2 * (a - c) / (a * (b + 1) + disc)  # 1 - s, its own rounding
            self.peak = (np.log(s) - np.log(one_minus) + d) / b

    def value(self, g, rows):
        c, r, b = self.c[rows], self.r[rows], self.beta
        with np.errstate(over="ignore", invalid="ignore"):
            if self.name == "sppo_hard":
                return c * (g - self.k) ** 2 + r * (g + self.k) ** 2
            if self.name == "nca_pair":
                return c * (_sp(-b * g) + 0.5 * _sp(b * g)) + 0.5 * r * _sp(b * g)
            d = self.delta
            return c * _sp(d - b * g) + r * _sp(b * g - d)

    def d1(self, g, rows):
        c, r, b = self.c[rows], self.r[rows], self.beta
        if self.name == "sppo_hard":
            return 2 * (c + r) * g - 2 * self.k * (c - r)
        return b * (self.alpha[rows] * special.expit(b * g - self.delta) - c)

    def d2(self, g, rows):
        if self.name == "sppo_hard":
            return 2 * (self.c[rows] + self.r[rows]) + 0 * g
        x = self.beta * g - self.delta
        return self.beta**2 * self.alpha[rows] * special.expit(x) * special.expit(-x)

    def log_d1(self, g, rows):
        """log f'(g) for g above g0, without cancellation near the minimiser."""
        if self.name == "sppo_hard":
            with np.errstate(divide="ignore"):
                return np.log(2 * (self.c[rows] + self.r[rows])) + np.log(g - self.g0[rows])
        # f' = b (a s(x) - c) with a s(x0) = c: = b a (s(x) - s(x0))
        b, x = self.beta, self.beta * g - self.delta
        x0 = self.x0[rows]
        with np.errstate(divide="ignore", invalid="ignore"):
            # s(x) - s(x0) = s(x) s(-x0) (1 - e^{-(x - x0)})
            return (
                np.log(b * self.alpha[rows])
                + special.log_expit(x)
                + special.log_expit(-x0)
                + np.log(-np.expm1(-np.maximum(x - x0, 0.0)))  # -inf at and below g0
            )

    def log_neg_d1(self, g, rows):
        """log(-f'(g)) for g below g0, without cancellation near the minimiser."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if self.name == "sppo_hard":
                return np.log(2 * (self.c[rows] + self.r[rows])) + np.log(self.g0[rows] - g)
            # -f' = b a (s(x0) - s(x)) = b a s(x0) s(-x) (1 - e^{-(x0 - x)})
            x, x0 = self.beta * g - self.delta, self.x0[rows]
            return (
                np.log(self.beta * self.alpha[rows])
                + special.log_expit(x0)
                + special.log_expit(-x)
                + np.log(-np.expm1(np.minimum(x - x0, 0.0)))  # -inf at and past g0
            )


def _sp(t):
    with np.errstate(over="ignore", under="ignore"):
        return np.logaddexp(0.0, t)


def _roots(fn, dfn, lo, hi, *, increasing, what, ftol=0.0):
    """Vectorised monotone roots (the core's safeguarded Newton); ValueError if any fails.

    ``fn(x, live)`` / ``dfn(x, live)`` see the indices ``live`` of the rows still iterating.
    The callers have checked the signs at both ends, so a row whose root lies beyond an
    end to float precision (a marginal cost that jumps from -inf) is resolved at that end.
    """
    res = monotone_root(
        lambda x, live: (fn(x, live), dfn(x, live)), lo, hi, increasing=increasing, ftol=ftol
    )
    ok = res.converged | (res.outside != 0)
    if not ok.all():
        raise ValueError(
            f"the population per-outcome loss: a root ({what}) was not resolved; "
            "population_optimum cannot certify this minimiser"
        )
    return res.x


def _bracket(fn, x, direction, sign_wanted):
    """Move x by doubling steps in ``direction`` until ``sign(fn(x)) == sign_wanted``."""
    step = np.ones_like(x)
    live = np.arange(x.size)
    for _ in range(1100):
        with np.errstate(all="ignore"):
            f = fn(x, live)
        bad = ~(np.sign(f) == sign_wanted)
        if not bad.any():
            return x
        with np.errstate(over="ignore"):  # past the largest float: no bracket (below)
            x = np.where(bad, x + direction * step, x)
            step = np.where(bad, 2 * step, step)
        if not np.isfinite(x).all():
            break
    raise ValueError("the population per-outcome loss: no bracket found for a root")


def _lambda_g(fo, lref, rows, t):
    """g_i solving f_i'(g) + e^{t + lref_i + g} = 0 for outcomes ``rows``, each to the best
    float: in logs, log(-f_i'(g)) - g = t + lref_i (decreasing in g below g0_i), with
    log(-f') formed without cancellation near g0 (:meth:`_PerOutcome.log_neg_d1`), so g_i
    carries its own rounding only (an absolute bar on f' + lambda m left g off by
    eps / (beta sigma (1 - sigma)), 3e-12 at beta 0.02)."""

    def u(g, live):
        rr = rows[live]
        return fo.log_neg_d1(g, rr) - g - lref[rr] - t

    def du(g, live):
        rr = rows[live]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return fo.d2(g, rr) / fo.d1(g, rr) - 1.0

    hi = fo.g0[rows].copy()
    far = np.flatnonzero(~np.isfinite(hi))  # bco_pair never rejected: g0 = +inf
    if far.size:
        hi[far] = _bracket(lambda g, live: u(g, far[live]), -lref[rows[far]] - t, 1.0, -1.0)
    lo = _bracket(u, np.minimum(hi, -lref[rows] - t) - 1.0, -1.0, 1.0)
    return _roots(u, du, lo, hi, increasing=False, what="multiplier")


def _nu_g(fo, lref, rows, lognu, *, rising):
    """g with log(f_i'(g)) - lref_i - g = log nu on the rising branch [g0, peak] or the
    falling branch [peak, -lref] (clipped to the branch's ends), one row per entry."""
    gmax = -lref[rows]
    pk = np.minimum(fo.peak[rows], gmax)
    lo, hi = (fo.g0[rows], pk) if rising else (pk, gmax)

    def u(g, live):
        rr = rows[live]
        return fo.log_d1(g, rr) - lref[rr] - g - lognu[live]

    def du(g, live):
        rr = rows[live]
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return fo.d2(g, rr) / fo.d1(g, rr) - 1.0

    with np.errstate(invalid="ignore"):
        f_lo, f_hi = u(lo, np.arange(rows.size)), u(hi, np.arange(rows.size))
    out = np.empty(rows.size)
    # rising: u from -inf (at g0) up to its top; falling: down from the top
    below = f_hi <= 0 if rising else f_lo <= 0  # nu above the top: the peak
    past = np.zeros(rows.size, bool) if rising else f_hi >= 0  # nu below h(gmax): all mass
    out[below] = pk[below]
    out[past & ~below] = gmax[past & ~below]
    todo = ~below & ~past
    if todo.any():
        sel = np.flatnonzero(todo)

        def u2(g, live):
            return u(g, sel[live])

        def du2(g, live):
            return du(g, sel[live])

        tol = 0.0  # the best float g: u is flat near the peak, where an absolute |u| bar
        # leaves g loose (1e-9 relative in a mass was seen)
        out[sel] = _roots(
            u2, du2, lo[sel], hi[sel], increasing=rising, what="marginal cost", ftol=tol
        )
    return out


def _mass_excess(lref, g) -> NDArray:
    """sum_i e^{lref_i + g_i} - 1 along the last axis, accurate to the rounding of the
    smaller masses: the largest mass enters as expm1 (its own distance to 1), so an
    outcome of tiny mass that absorbs the normalisation is not off by eps / its mass."""
    x = np.asarray(lref + g, dtype=float)
    k = np.argmax(x, axis=-1)
    top = np.take_along_axis(x, k[..., None], axis=-1)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        m = np.exp(x)
        np.put_along_axis(m, k[..., None], 0.0, axis=-1)
        rest = np.sort(m, axis=-1).sum(axis=-1)  # sorted: rounding free of the order
        return np.expm1(top[..., 0]) + rest


def _scalar_root(fn, lo, hi, direction):
    """A root of the monotone scalar ``fn`` (sign ``direction`` as t grows), bracket expanded."""
    from scipy.optimize import brentq

    step = 1.0
    while fn(lo) * direction > 0:
        lo, step = lo - step, 2 * step
        if step > 1e6:
            raise ValueError("the population per-outcome loss: no multiplier brackets the mass")
    step = 1.0
    while fn(hi) * direction < 0:
        hi, step = hi + step, 2 * step
        if step > 1e6:
            raise ValueError("the population per-outcome loss: no multiplier brackets the mass")
    return brentq(fn, lo, hi, xtol=1e-15, rtol=4 * np.finfo(float).eps, maxiter=500)


def _fill_mass(name, fo, lref, idx) -> NDArray:
    """Global minimiser of sum_i f_i(g_i) with sum_i e^{lref_i + g_i} = 1 when the free
    minimisers g0 carry less mass than 1 (every compared outcome chosen sometimes).

    In the masses m_i = ref_i e^{g_i} each cost rises on [m0_i, 1] with a marginal cost
    h_i = f_i'(g) e^{-g} / ref_i that rises from 0 to one peak (closed form: f'' = f'
    there) and then falls. At a minimiser every h_i equals one multiplier nu > 0 and at
    most one outcome sits on its falling branch (two would give the descent direction
    e_j - e_k). The candidates: all outcomes rising (mass increasing in nu: one root), or
    outcome k falling (roots located on a grid of nu, for all k at once; every bracket that
    may hold the least loss refined by regula falsi); the least loss is returned, candidates
    compared by :func:`_loss_difference` (resolved below the rounding of the loss, so that
    near ties between outcomes of tiny mass do not fall to the outcomes' order).
    """
    k_n = idx.size
    rows = np.arange(k_n)
    with np.errstate(divide="ignore", invalid="ignore"):
        logtop = fo.log_d1(np.minimum(fo.peak, -lref), rows) - lref - np.minimum(fo.peak, -lref)
    logcap = float(np.min(logtop))

    def rising_g(lognu):
        return _nu_g(fo, lref, rows, np.full(k_n, lognu), rising=True)

    cands = []  # (g, log nu) of each stationary point
    # all outcomes on their rising branch
    if _mass_excess(lref, rising_g(logcap)) >= 0:
        ln = _scalar_root(
            lambda v: float(_mass_excess(lref, rising_g(min(v, logcap)))), logcap - 1.0, logcap, 1
        )
        cands.append((rising_g(min(ln, logcap)), min(ln, logcap)))
    # one outcome on its falling branch: a grid of nu for every k at once
    # down to the smallest marginal cost at full mass (the falling branches' far ends)
    with np.errstate(divide="ignore", invalid="ignore"):
        logend = fo.log_d1(-lref, rows)
    low = min(logcap - 28.0, float(np.min(np.where(np.isfinite(logend), logend, logcap))) - 1.0)
    grid = np.unique(
        np.concatenate(
            [np.linspace(low, logcap - 7.0, 60), logcap + np.log(np.linspace(1e-3, 1.0, 100))]
        )
    )
    n_g = grid.size
    rr = np.repeat(rows, n_g)
    ln = np.tile(grid, k_n)
    gl = _nu_g(fo, lref, rr, ln, rising=True).reshape(k_n, n_g)
    gr = _nu_g(fo, lref, rr, ln, rising=False).reshape(k_n, n_g)
    with np.errstate(over="ignore"):
        ml, mr = np.exp(lref[:, None] + gl), np.exp(lref[:, None] + gr)
    ex = ml.sum(axis=0)[None, :] - ml + mr - 1.0
    vl, vr = fo.value(gl, rr.reshape(k_n, n_g)), fo.value(gr, rr.reshape(k_n, n_g))
    approx = vl.sum(axis=0)[None, :] - vl + vr
    kk, jj = np.nonzero((ex[:, :-1] == 0) | (ex[:, :-1] * ex[:, 1:] < 0))
    if kk.size:
        # which brackets to refine: the loss at a grid point, corrected to first order for
        # its mass excess (the Lagrangian approx - nu * ex), brackets every root's loss up to
        # the curvature between the two grid points; keep every bracket that may hold the
        # least loss (near ties, e.g. outcomes of tiny mass that swap roles, are all kept:
        # a fixed number of the "most promising" depended on the outcomes' order)
        with np.errstate(over="ignore", invalid="ignore"):
            lag = np.where(ex == 0, approx, approx - np.exp(grid)[None, :] * ex)
            a_l, a_r = lag[kk, jj], lag[kk, jj + 1]
            lo_b, hi_b = np.minimum(a_l, a_r), np.maximum(a_l, a_r)
            slack = 0.1 * (hi_b - lo_b) + 1e-9 * np.abs(hi_b)
        sure = np.isfinite(lo_b) & np.isfinite(hi_b)  # (a multiplier past the floats: kept)
        if sure.any():
            keep = ~sure | (lo_b - slack <= np.min((hi_b + slack)[sure]))
            kk, jj = kk[keep], jj[keep]
        cands.extend(_falling_candidates(fo, lref, rows, grid, ex, kk, jj))
    if not cands:  # pragma: no cover - the all-rising branch reaches mass 1 or a falling one does
        raise ValueError(f"the population {name} loss: no stationary point found")
    best = cands[0]
    for cand in cands[1:]:
        if _loss_difference(fo, lref, rows, cand, best) < 0:
            best = cand
    return best[0]


def _falling_candidates(fo, lref, rows, grid, ex, kk, jj):
    """The stationary points with outcome kk[q] on its falling branch and a multiplier in
    [grid[jj[q]], grid[jj[q] + 1]] (a sign change of the mass excess ``ex``): all brackets
    refined together by regula falsi (Illinois) in log nu, vectorised over the brackets."""
    k_n, m = rows.size, kk.size

    def excess(v):
        """Mass excess and log-ratios at multipliers v (one per bracket)."""
        rr = np.tile(rows, m)
        gl = _nu_g(fo, lref, rr, np.repeat(v, k_n), rising=True).reshape(m, k_n)
        gk = _nu_g(fo, lref, rows[kk], v, rising=False)
        gl[np.arange(m), kk] = gk
        return _mass_excess(lref[None, :], gl), gl

    # Illinois regula falsi, vectorised over the brackets
    a, b = grid[jj].copy(), grid[jj + 1].copy()
    fa, fb = ex[kk, jj].copy(), ex[kk, jj + 1].copy()
    for _ in range(100):
        done = (fa == 0) | (fb == 0) | (np.abs(b - a) <= 4 * np.finfo(float).eps * np.abs(b))
        if done.all():
            break
        with np.errstate(invalid="ignore", divide="ignore"):
            x = b - fb * (b - a) / (fb - fa)
        x = np.where(done | ~((x > np.minimum(a, b)) & (x < np.maximum(a, b))), 0.5 * (a + b), x)
        fx, _ = excess(x)
        fx = np.where(done, fb, fx)
        x = np.where(done, b, x)
        flip = np.sign(fx) != np.sign(fb)  # the root lies between b and x: a <- b
        a = np.where(flip, b, a)
        fa = np.where(flip, fb, 0.5 * fa)  # Illinois: halve the end kept again
        b, fb = x, fx
    v = np.where(fa == 0, a, b)
    _, gl = excess(v)
    return [(gl[q], float(v[q])) for q in range(m)]


def _loss_difference(fo, lref, rows, a, b) -> float:
    """L(a) - L(b) for two stationary points ``(g, log nu)`` of the separable problem,
    resolved below the rounding of L itself.

    Two candidates can differ only in outcomes of tiny mass (which outcome takes the
    falling branch), their losses then agreeing to far below float resolution. The
    outcomes whose log-ratios barely move (``near``) are, at both points, at the common
    marginal cost nu: their loss changes by ~ nu_mid * (their mass change), and the
    normalisation makes that mass change minus the others'. So
    ``L(a) - L(b) = sum_far [f_i(a) - f_i(b)] - nu_mid * sum_far [m_i(a) - m_i(b)]``,
    each term accurate relative to itself (second-order error in the near masses' change).
    """
    ga, gb = a[0], b[0]
    far = ~(np.abs(ga - gb) <= 1e-6 * np.maximum(1.0, np.abs(gb)))
    if not far.any():
        return 0.0
    idx = rows[far]
    with np.errstate(over="ignore"):
        dm = np.exp(lref[far] + ga[far]) - np.exp(lref[far] + gb[far])
        df = fo.value(ga[far], idx) - fo.value(gb[far], idx)
    with np.errstate(over="ignore", invalid="ignore"):
        nu = 0.5 * (np.exp(a[1]) + np.exp(b[1]))
        terms = np.concatenate([df, -nu * dm])
    if not np.isfinite(terms).all():  # a multiplier past the floats: the plain difference
        return math.fsum(fo.value(ga, rows).tolist()) - math.fsum(fo.value(gb, rows).tolist())
    return math.fsum(sorted(terms.tolist(), key=abs))


def _underflow_vertex(fo, lref):
    """The non-convex case when every outcome's rising branch holds a mass below the
    smallest float (bco_pair with a large negative ``delta``, or a tiny ``beta``: the
    free minimisers sit at ``g ~ delta / beta``), else None.

    Then all mass but an underflowing remainder sits on one outcome k on its falling branch
    (all rising cannot reach mass 1; two falling is never a minimiser), the others at their
    free minimisers to within e^{-745}, so the loss is
    sum_i f_i(g0_i) + [f_k(-log ref_k) - f_k(g0_k)], least for the k with the least bracket;
    the answer in floats is the vertex e_k. The bracket is evaluated in x = beta g - delta,
    where the free minimiser is x0 = log c - log(alpha - c) (exact at any delta / beta).
    """
    rows = np.arange(lref.size)
    with np.errstate(over="ignore", invalid="ignore"):
        top = lref + np.minimum(fo.peak, -lref)  # log of the largest rising mass
    if not np.all(top < -800.0) or np.any(fo.c == 0):
        return None
    if fo.name == "sppo_hard":
        with np.errstate(over="ignore", invalid="ignore"):
            gain = fo.value(-lref, rows) - fo.value(fo.g0, rows)
    else:
        c, a = fo.c, fo.alpha
        with np.errstate(over="ignore"):
            x1 = -fo.beta * lref - fo.delta
        x0 = np.log(c) - np.log(a - c)

        def vx(x):  # f in x: c sp(-x) + (a - c) sp(x) up to terms equal at x0 and x1
            if fo.name == "nca_pair":
                return c * (_sp(-x) + 0.5 * _sp(x)) + 0.5 * fo.r * _sp(x)
            return c * _sp(-x) + fo.r * _sp(x)

        gain = vx(x1) - vx(x0)
    if not np.isfinite(gain).any():
        return None
    # least bracket; an exact tie goes to the larger reference mass (order-free)
    k = int(np.lexsort((-lref, gain))[0])
    g = np.full(lref.size, -np.inf)
    g[k] = -lref[k]
    return g


def _separable_optimum(name, ref_a, w, beta, o, skew=None) -> NDArray:
    """Minimise sum_i f_i(g_i) over policies pi << ref (pi = ref e^g, sum pi = 1);
    ``skew`` is c - r formed pair by pair (default: from the row and column sums of w)."""
    support = ref_a > 0
    c, r = w.sum(axis=1), w.sum(axis=0)
    compared = (c + r) > 0
    unseen = support & ~compared
    idx = np.flatnonzero(compared)
    fo = _PerOutcome(name, c[idx], r[idx], beta, o, None if skew is None else skew[idx])
    g0 = fo.g0
    # Error analysis (both cases). The masses solve sum_i m_i = 1 with every m_i a monotone
    # function of one multiplier; the root is found from the mass excess, whose top term
    # is expm1(lref_k + g_k) for the heaviest k (:func:`_mass_excess`), so the excess is
    # accurate to eps times (the small masses + |lref_k + g_k|), not to eps. A small mass
    # m_j whose log-ratio moves with the multiplier absorbs the excess's error: relative
    # error (excess error) / m_j. Three float errors reached it (2.7e-10 .. 3.9e-6 seen):
    # - the heaviest outcome near its free minimiser (a tiny multiplier: the others share
    #   1 - m0_k): lref_k + g0_k must be right to eps * |lref_k + g0_k|, but x0 = log c -
    #   log(alpha - c) was a difference of two O(1) logs (eps absolute) -> log1p of c - r
    #   formed pair by pair (_PerOutcome); and sum(ref) = 1 + O(eps) moved 1 - m0_k by eps
    #   -> lref normalised here by the exact distance of the sum to 1;
    # - each g_i of the convex case solved to an absolute bar on f' (eps / (beta s (1 - s))
    #   in g, 3e-12 at beta 0.02) -> in logs, to the best float (_lambda_g).
    # Now each term of the excess carries a few eps of its own size, so an entry m_j is
    # off by ~eps * (|lref_k + g_k| + sum_i m_i |g_i|) / m_j at most, and by less where
    # m_j barely moves with the multiplier; measured: 5e-13 at worst against 60 digits.
    # log of ref / sum(ref), the float sum's distance to 1 exactly (math.fsum)
    lref = np.log(ref_a[idx]) - math.log1p(math.fsum([*ref_a.tolist(), -1.0]))
    with np.errstate(over="ignore"):
        s0 = float(np.sum(np.exp(lref + g0)))
    g = np.full(ref_a.shape, -np.inf)
    if abs(s0 - 1.0) <= 8 * np.finfo(float).eps * idx.size:  # the free minimiser is normalised
        g[idx] = g0
        return g
    if s0 <= 1.0 and unseen.any():
        g[idx] = g0
        if s0 < 1.0:
            g[unseen] = math.log1p(-s0) - math.log(float(ref_a[unseen].sum()))
        return g
    if s0 < 1.0:
        vertex = _underflow_vertex(fo, lref)
        if vertex is not None:
            g[idx] = vertex
            return g
        if np.any(fo.c == 0):
            raise ValueError(
                f"the population {name} loss is minimised outcome by outcome at log-ratios "
                f"whose policy has total mass {s0:.6g} < 1, every outcome of `ref`'s support is "
                "compared and some is never chosen: the minimiser over normalised policies is "
                "then a non-convex problem that population_optimum does not solve"
            )
        g[idx] = _fill_mass(name, fo, lref, idx)
        return g
    # the free minimisers carry mass >= 1: a convex problem (sum ref e^g <= 1 is convex in
    # g and active), solved by one multiplier lambda = e^t; outcomes never chosen (no
    # finite free minimiser below) get mass 0
    live = np.flatnonzero(~(np.isinf(g0) & (g0 < 0)))

    def log_mass(t):
        return float(_mass_excess(lref[live], _lambda_g(fo, lref, live, t)))

    t = _scalar_root(log_mass, -1.0, 1.0, -1)
    g[idx[live]] = _lambda_g(fo, lref, live, t)
    return g


def population_optimum(
    ref: ArrayLike,
    preferences: ArrayLike,
    beta: float,
    *,
    loss: str = "sigmoid",
    mu: ArrayLike | None = None,
    divergence: str = "reverse_kl",
    alpha: float | None = None,
    alpha_clamp: float | None = None,
    trl_version: str = DEFAULT_TRL_VERSION,
    **options: float,
) -> NDArray[np.float64]:
    r"""The exact minimiser of :func:`population_loss` over tabular policies.

    .. math::

        \pi_{loss} = \arg\min_{\pi \ll \pi_{ref}} \sum_{i,j} W_{ij}\,\ell(g_i, g_j),
        \qquad g = \log\frac{\pi}{\pi_{ref}}

    Parameters
    ----------
    ref, preferences, beta, loss, mu, divergence, alpha, alpha_clamp, trl_version, **options
        As in :func:`population_loss` (``sigmoid_norm`` takes ``lengths``, one positive
        length per outcome, shape of ``ref``).

    Returns
    -------
    ndarray
        The policy, shape ``(n,)``; 0 where ``ref`` is 0. With ``divergence`` (f-DPO)
        and a margin loss: ``f_optimal_policy(ref, x*, c * beta, divergence=f)``, with
        ``x* = beta log(pi_DPO/ref)`` the implied reward of the same loss under the
        reverse KL and ``c = 2`` for JS, 1 otherwise (see Notes); with ``sigmoid_norm``
        and lengths :math:`L`, :math:`t_i = (f')^{-1}((L_i(x^*_i + \lambda)/\beta - k)/c)`
        with the score's constant :math:`k` of ``trl_version``.

    Raises
    ------
    ValueError
        For invalid inputs; for ``aot`` / ``aot_pair`` (the sorted coupling has no
        per-pair population minimiser computed here; see Notes); for ``apo_zero`` /
        ``apo_down`` (non-convex in the policy); for a margin loss whose pairs do not
        connect ``ref``'s support (the ratios between the parts are then free: see
        :func:`optimum_set`); for ``robust`` with a drawn pair whose de-noised
        probability :math:`(P_{ij} - \varepsilon)/(1 - 2\varepsilon)` leaves [0, 1]
        (there the loss is unbounded below); for ``discopop`` with ``tau`` below
        ``2**-510`` (its curvature, of order ``1/tau**2``, is beyond float64);
        for a per-outcome loss in the non-convex case (all outcomes compared, the free
        minimisers' mass below 1) with an outcome that is never chosen, and at a
        ``beta`` below ``1 / finfo.max`` (5.6e-309), whose reciprocal overflows. The
        margin losses and ``ipo`` depend on ``beta`` only as a scale: there they return
        the greedy limit of :math:`\pi_{ref}e^{x^*/\beta}`, as
        :func:`klpolicy.optimal_policy` does at ``beta = 0``.

    Notes
    -----
    *Margin-only losses* (``sigmoid``, ``robust``, ``hinge``, ``exo_pair``,
    ``discopop``) depend on :math:`\pi` only through :math:`x = \beta g` up to a
    constant, so the minimiser :math:`x^*` of :math:`\sum_{ij} W_{ij}\phi(x_i - x_j)`
    does not depend on :math:`\beta` and

    .. math::

        \pi_{loss} = \pi_{ref}\,e^{x^*/\beta}/Z,

    the KL-regularised optimum for the *implied reward* :math:`x^*` at the same
    :math:`\beta`. ``ipo`` likewise, with :math:`g^*` solving a Laplacian system
    (:func:`ipo_optimum`); ``sigmoid`` is :func:`dpo_optimum`. ``robust`` is
    ``sigmoid`` on the de-noised :math:`q = (P - \varepsilon)/(1 - 2\varepsilon)`
    (refused where :math:`q \notin [0, 1]`: the loss is unbounded below there).
    ``exo_pair`` and ``discopop`` are not convex in :math:`x`: the point returned is a
    *local minimiser* (the gradient zero to rounding, no eigenvalue of the scaled,
    gauge-fixed Hessian below -1e-9), the same in any order of the outcomes except where
    an exact symmetry of :math:`W` makes minimisers tie; it need not be the global one.
    ``hinge`` is a linear program whose minimisers can form a polyhedron: the point
    returned is the minimiser of least weighted spread
    :math:`\sum_{i<j} (\mu_{ij}+\mu_{ji})|x_i - x_j|`, with integral scores, computed
    exactly and the same in any order of the outcomes (:func:`optimum_set` gives the
    whole set). With deterministic preferences ``sigmoid`` and ``discopop`` return the
    limit of minimising sequences, as :func:`dpo_optimum`.

    *Per-outcome losses* (``nca_pair``, ``bco_pair`` with a fixed ``delta``,
    ``sppo_hard``) split as :math:`\sum_i f_i(g_i)`, coupled by
    :math:`\sum_i \pi_{ref,i}e^{g_i} = 1`. Where the free minimisers carry less than all
    the mass and an outcome of the support is never compared, the rest goes to the
    uncompared outcomes in proportion to ``ref`` (any split is optimal); where all are
    compared the problem is not convex in the masses, and the stationary point of least
    loss is returned. TRL's ``bco_pair`` ``delta`` is a running mean of
    :math:`\beta(a + b)/2`, at population level
    :math:`\delta = \tfrac{\beta}{2}\sum_i (c_i + r_i) g_i` (:math:`c_i, r_i` the chosen
    and rejected marginals of ``W``): a function of the policy, so the trainer's fixed
    point is a stationary point of the loss at its own ``delta``; pass that value.

    *f-DPO* (``divergence``): a margin loss's optimum is
    :func:`klpolicy.f_optimal_policy` for the implied reward at ``c * beta`` wherever that
    optimum is interior (every outcome of the support keeps mass, and with
    ``alpha_clamp`` = C no log-ratio lies beyond :math:`C/(a-1)`); otherwise a ValueError
    says which outcome and why. The per-outcome losses take no f-divergence in TRL
    1.10.0 and later. *Length normalisation* (``sigmoid_norm``): the formula under
    Returns, :math:`\lambda` the root of :math:`\sum_y \pi_{ref,y} t_y = 1`. *Sorting
    losses* (``aot``, ``aot_pair``): no exact minimiser is computed
    (:func:`population_loss` evaluates them).

    The derivations are in ``docs/derivations/dpo.md`` (section 6: each loss's population
    problem), ``docs/derivations/f_divergences.md`` (f-DPO and lengths) and
    ``docs/derivations/pair_solvers.md`` (the solvers: the saddle-free Newton descent and
    its extended-precision polish, the hinge descent over minimum cuts, the per-outcome
    enumeration); the times in ``docs/performance.md``.

    References
    ----------
    .. [1] Azar et al., 2023, arXiv:2310.12036 (a general paradigm; IPO).
    .. [2] The papers of the rows of :data:`LOSSES`.
    .. [3] Dauphin et al., 2014, arXiv:1406.2572 (the saddle-free Newton step).
    .. [4] K. Murota, Discrete Convex Analysis, SIAM, 2003, ch. 7 (the hinge descent).

    Examples
    --------
    >>> import numpy as np
    >>> from klpolicy.preference import bradley_terry, population_optimum
    >>> P = bradley_terry([1.0, 0.0])
    >>> population_optimum([0.5, 0.5], P, 1.0, loss="hinge").round(4)  # e^1 : e^0
    array([0.7311, 0.2689])
    >>> population_optimum([0.5, 0.5], P, 1.0).round(4)  # DPO: pi* = sigma(1)
    array([0.7311, 0.2689])
    """
    if not isinstance(loss, str) and isinstance(loss, Sequence):
        raise ValueError(
            f"`loss` {list(loss)!r}: population_optimum takes one loss; a weighted sum of losses "
            "(TRL's loss_type list with loss_weights, e.g. sigmoid + sft as in RPO) has no "
            "closed-form minimiser here (population_loss evaluates it)"
        )
    row = get_loss(loss)
    o = row.resolve_options(options)
    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    name = row.name
    if name == "discopop" and not o["tau"] >= _DISCOPOP_TAU_MIN:
        raise ValueError(
            f"`tau` = {o['tau']!r} is below {_DISCOPOP_TAU_MIN:.3g} (2**-510), where the "
            "discopop loss's curvature, which grows as 1/tau^2 across its switch at margin 0, "
            f"is beyond float64 and the minimiser cannot be computed: pass tau >= "
            f"{_DISCOPOP_TAU_MIN:.3g}"
        )
    if name == "sft":  # maximum likelihood of the chosen responses: their marginal law
        w = _win_weights(ref_a, preferences, mu)
        chosen = np.where(ref_a > 0, w.sum(axis=1), 0.0)
        return chosen / chosen.sum()
    f_dpo = (divergence, alpha, alpha_clamp) != ("reverse_kl", None, None)
    keeps_constants(trl_version)  # checked first
    if name == "sigmoid_norm":  # sigmoid on the scores g / L: see Notes
        lengths = _outcome_lengths(o["lengths"], ref_a)
        pi_1 = dpo_optimum(ref_a, preferences, 1.0, mu=mu)  # x* = log(pi_1 / ref) + const
        if f_dpo:
            resolve_divergence(divergence, alpha)
            return f_population_optimum(
                pi_1, ref_a, b, name, divergence, alpha, alpha_clamp, lengths, trl_version
            )
        with np.errstate(divide="ignore"):
            x = np.where(pi_1 > 0, np.log(np.where(pi_1 > 0, pi_1, 1.0)), -np.inf) - np.log(
                np.where(ref_a > 0, ref_a, 1.0)
            )
        return _length_normalised_optimum(ref_a, x, lengths, b)
    if f_dpo or name == "chi_po":
        f_options = (divergence, alpha, alpha_clamp, f_dpo)
        return _f_dpo_optimum(row, ref_a, preferences, b, mu, o, f_options, trl_version)
    if name in ("aot", "aot_pair", "aot_unpaired"):
        raise ValueError(
            f"`loss` {name!r} sorts log-ratios across the batch: its population version is "
            "the quantile coupling evaluated by population_loss, piecewise in the ordering "
            "of the log-ratios and without a per-pair minimiser; population_optimum has no "
            "exact minimiser for it"
        )
    if name in ("apo_zero", "apo_down"):
        raise ValueError(
            f"`loss` {name!r} is a sum of sigmoids of the log-ratios, not convex in the policy "
            "(bounded, so mass runs to the net winners); population_optimum has no exact "
            "minimiser for it"
        )
    if name == "sigmoid" or (name == "robust" and o["label_smoothing"] == 0):
        eps = o["label_smoothing"] if name == "sigmoid" else 0.0
        return dpo_optimum(ref_a, preferences, b, mu=mu, label_smoothing=eps)
    w = _win_weights(ref_a, preferences, mu)
    support = ref_a > 0
    if name == "ipo":
        # one code path with ipo_optimum; the loss leaves the mass of outcomes the pairs
        # never connect free, which ipo_optimum's closed form (the objective's maximiser)
        # would fix silently: refuse those here, as for every margin loss
        joint = as_pair_law(mu, ref_a)
        _check_connected(joint + joint.T, np.flatnonzero(support))
        return ipo_optimum(ref_a, preferences, b, mu=mu)
    if not row.margin_only:
        return _per_outcome_optimum(name, ref_a, preferences, mu, w, b, o)
    if name == "robust":
        q = _robust_denoised(ref_a, preferences, mu, o["label_smoothing"])
        if q is not None:  # a drawn pair at P = eps or 1 - eps: sigmoid's loss on q, see Notes
            wq = _win_weights(ref_a, q, mu)
            solve = _margin_solver("sigmoid", {"label_smoothing": 0.0})
            x = _minimise_margin_loss(wq, support, solve, what=name)
            return _tilt_scores(ref_a, x, b)
    if name == "hinge":
        idx = np.flatnonzero(support)
        sub = w[np.ix_(idx, idx)].copy()
        np.fill_diagonal(sub, 0.0)
        _check_connected(w + w.T, idx)
        g = np.zeros(ref_a.shape)
        g[idx] = _hinge_scores(sub)
        return _tilt_scores(ref_a, g, b)
    x = _minimise_margin_loss(
        w, support, _margin_solver(name, o), what=name, runaway=name != "exo_pair"
    )
    return _tilt_scores(ref_a, x, b)


def _f_dpo_optimum(row, ref_a, preferences, b, mu, o, f_options, trl_version):
    """f-DPO (and ``chi_po``) with a margin loss: the f-regularised optimum at ``c * beta``
    for the implied reward of the same loss under the reverse KL (see
    :func:`population_optimum`'s Notes); a ValueError for a loss that is not a function of
    score differences. ``f_options``: ``(divergence, alpha, alpha_clamp, f_dpo)``."""
    divergence, alpha, alpha_clamp, f_dpo = f_options
    name = row.name
    if name == "chi_po":
        if f_dpo:
            raise ValueError(
                "`divergence` is fixed by `loss` 'chi_po' (its link is the chi2_kl score); "
                f"got divergence={divergence!r}"
            )
        divergence, base = "chi2_kl", "sigmoid"
    else:
        resolve_divergence(divergence, alpha)  # the name and alpha, checked first
        check_f_loss(row, divergence, trl_version)  # TRL's refusals
        base = name
    if not LOSSES[base].margin_only or LOSSES[base].batch_dependent:
        raise ValueError(
            f"`loss` {name!r} is not a function of score differences: its f-DPO population "
            "optimum is not the f-regularised optimum, and population_optimum computes it "
            "for the margin losses only (sigmoid, robust, hinge, ipo, exo_pair, discopop)"
        )
    # the margin losses' minimising x* = beta log(pi/ref) does not depend on beta: read
    # it at beta = 1, where pi = ref e^{x*}/Z does not underflow for small beta
    pi_kl = population_optimum(ref_a, preferences, 1.0, loss=base, mu=mu, **o)
    return f_population_optimum(
        pi_kl, ref_a, b, name, divergence, alpha, alpha_clamp, trl_version=trl_version
    )


def _per_outcome_optimum(name, ref_a, preferences, mu, w, b, o):
    """The optimum of a per-outcome loss (``nca_pair``, ``bco_pair``, ``sppo_hard``):
    :func:`_separable_optimum` on the outcomes' skews ``c_i - r_i``, formed pair by pair."""
    support = ref_a > 0
    if not np.isfinite(1.0 / b):
        raise ValueError(
            f"`beta` must be at least {1 / np.finfo(np.float64).max:.4g} for the per-outcome "
            f"loss {name!r} (its population loss depends on beta, not only on a scale, "
            f"and 1 / beta overflows); got {float(b)!r}"
        )
    joint = as_pair_law(mu, ref_a)
    p = as_preference_matrix("preferences", preferences, ref_a.shape[-1])
    with np.errstate(invalid="ignore"):
        terms = (joint + joint.T) * (p - p.T)
    skew = np.array([math.fsum(t) for t in terms.tolist()])
    g = _separable_optimum(name, ref_a, w, b, o, skew)
    with np.errstate(over="ignore"):
        pi = np.where(support, ref_a * np.exp(np.where(support, g, -np.inf)), 0.0)
    return pi / pi.sum()


class OptimumSet(NamedTuple):
    """The set of population minimisers, as ranges of the policy's log-odds.

    ``low[i, j] <= log(pi_i / pi_j) <= high[i, j]`` over every minimiser (and limit of
    minimising sequences); ``low == high`` where the loss fixes the ratio; ``-inf``/``inf``
    where it leaves it free (outcomes never compared, or parts of the support the pairs do
    not connect). ``unique`` says whether the set is one policy.
    """

    low: NDArray
    high: NDArray
    unique: bool


def optimum_set(
    ref: ArrayLike,
    preferences: ArrayLike,
    beta: float,
    *,
    loss: str = "sigmoid",
    mu: ArrayLike | None = None,
    **options: float,
) -> OptimumSet:
    r"""The whole set of minimisers of :func:`population_loss`, for margin-only losses.

    .. math::

        \{\pi : \mathcal{L}(\pi) = \min \mathcal{L}\},\quad\text{described by}\quad
        \mathrm{low}_{ij} \le \log\frac{\pi_i}{\pi_j} \le \mathrm{high}_{ij}

    Parameters
    ----------
    ref, preferences, beta, loss, mu, **options
        As in :func:`population_optimum`; ``loss`` one of ``sigmoid``, ``robust``,
        ``ipo``, ``hinge``, ``exo_pair``, ``discopop``.

    Returns
    -------
    OptimumSet
        ``low``, ``high`` of shape ``(n, n)`` (``nan`` on rows/columns where ``ref`` is
        0) and ``unique``.

    Raises
    ------
    ValueError
        For invalid inputs or a loss that is not margin-only.

    Notes
    -----
    Margin losses see only log-ratio differences between outcomes that are compared,
    so: within each connected part of the comparison graph the smooth losses fix every
    ratio (``low == high``, from :func:`population_optimum` on that part), and across
    parts, or to outcomes of the support that ``mu`` never draws, the ratio is free
    (:math:`\pm\infty`): the offline-support effect, where the loss is blind to mass
    moved onto responses outside the data. For ``hinge`` the ranges within a part are
    exact: an optimal flow of the dual (a maximum flow on the weights as exact integers)
    confines every score difference of a minimiser to an interval with integer ends, and
    the extremes of :math:`x_i - x_j` are shortest-path lengths through those intervals.

    References
    ----------
    .. [1] Azar et al., 2023, arXiv:2310.12036, section 4.2.

    Examples
    --------
    >>> from klpolicy.preference import optimum_set
    >>> s = optimum_set([0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]], 1.0, loss="hinge")
    >>> float(s.low[0, 1]), float(s.high[0, 1]), s.unique  # any log-odds in [-1, 1]
    (-1.0, 1.0, False)
    """
    row = get_loss(loss)
    if not row.margin_only and row.name != "ipo":
        raise ValueError(
            f"`loss` {row.name!r} is not margin-only; optimum_set describes margin-only losses"
        )
    o = row.resolve_options(options)
    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    p = as_preference_matrix("preferences", preferences, ref_a.shape[-1])
    joint = as_pair_law(mu, ref_a)
    n = ref_a.size
    support = ref_a > 0
    sym = joint + joint.T
    np.fill_diagonal(sym, 0.0)
    from scipy.sparse import csr_matrix
    from scipy.sparse.csgraph import connected_components

    idx = np.flatnonzero(support)
    _, labels = connected_components(csr_matrix(sym[np.ix_(idx, idx)] > 0), directed=False)
    low = np.full((n, n), np.nan)
    high = np.full((n, n), np.nan)
    low[np.ix_(idx, idx)], high[np.ix_(idx, idx)] = -np.inf, np.inf
    lref = np.log(np.where(support, ref_a, 1.0))
    for comp in np.unique(labels):
        members = idx[labels == comp]
        if members.size == 1:
            low[members[0], members[0]] = high[members[0], members[0]] = 0.0
            continue
        sub_ref = np.zeros(n)
        sub_ref[members] = ref_a[members]
        sub_ref /= sub_ref.sum()
        sub_mu = np.zeros((n, n))
        sub_mu[np.ix_(members, members)] = joint[np.ix_(members, members)]
        sub_mu /= sub_mu.sum()
        pi = population_optimum(sub_ref, p, b, loss=row.name, mu=sub_mu, **o)
        with np.errstate(divide="ignore", invalid="ignore"):
            lp = np.log(pi[members])
            block = lp[:, None] - lp[None, :]
        block = np.where(np.isnan(block), 0.0, block)
        lo_b, hi_b = block.copy(), block.copy()
        if row.name == "hinge" and members.size > 1:
            w = (sub_mu + sub_mu.T) * p
            sub = w[np.ix_(members, members)].copy()
            np.fill_diagonal(sub, 0.0)
            xl, xh = _hinge_ranges(sub)
            dref = lref[members][:, None] - lref[members][None, :]
            lo_b, hi_b = xl / b + dref, xh / b + dref
        low[np.ix_(members, members)] = lo_b
        high[np.ix_(members, members)] = hi_b
    with np.errstate(invalid="ignore"):
        unique = bool(np.all((low == high)[np.ix_(idx, idx)]))
    return OptimumSet(low, high, unique)


def _hinge_ranges(sub: NDArray) -> tuple[NDArray, NDArray]:
    """min and max of x_i - x_j over the minimisers of the hinge loss (exact, integral).

    With an optimal flow y (one per pair, a subgradient of its term f_e, the flows balanced
    at every outcome), x minimises the loss if and only if y_e is a subgradient of f_e at
    x_i - x_j for every pair (complementary slackness; the same y serves every minimiser).
    That confines each difference to an interval with integer (or infinite) ends, and the
    extremes of x_i - x_j over such difference constraints are shortest-path lengths
    (Floyd-Warshall). y is found exactly: the subgradients at one minimiser x* (the
    integral answer of ``_hinge_scores``) bound a circulation, solved as a maximum flow
    on the weights as exact integers.
    """
    k = sub.shape[0]
    pairs = _hinge_pairs(sub)
    x = [int(v) for v in _hinge_scores(sub)]
    # the subdifferential of a max(0, 1 - d) + b max(0, 1 + d) at d, then a circulation
    # y_e = low_e + z_e, 0 <= z_e <= high_e - low_e, balanced at every outcome
    src, snk = k, k + 1
    lows, arcs, excess = [], [], [0] * k
    for i, j, a, b in pairs:
        d = x[i] - x[j]
        low = -a if d <= -1 else (b - a if d <= 1 else b)
        high = -a if d < -1 else (b - a if d < 1 else b)
        lows.append(low)
        excess[i] -= low  # the fixed part sends `low` from i to j
        excess[j] += low
        arcs.append((i, j, high - low))
    for v, e in enumerate(excess):
        if e > 0:
            arcs.append((src, v, e))
        elif e < 0:
            arcs.append((v, snk, -e))
    flow = _max_flow(k + 2, src, snk, arcs)[1]
    if sum(flow[len(pairs) :]) != sum(max(e, 0) - min(e, 0) for e in excess):  # pragma: no cover
        raise RuntimeError("hinge ranges: the minimiser's subgradients admit no balanced flow")
    # each pair's interval of differences where y_e is a subgradient, as shortest-path arcs
    # (x_v <= x_u + length for the arc u -> v)
    dist = np.full((k, k), np.inf)
    np.fill_diagonal(dist, 0.0)
    for (i, j, a, b), low, z in zip(pairs, lows, flow, strict=False):
        y = low + z
        lo_e = -np.inf if y == -a else (-1.0 if y <= b - a else 1.0)
        hi_e = np.inf if y == b else (1.0 if y >= b - a else -1.0)
        dist[j, i] = min(dist[j, i], hi_e)  # x_i - x_j <= hi_e
        dist[i, j] = min(dist[i, j], -lo_e)  # x_j - x_i <= -lo_e
    for v in range(k):
        dist = np.minimum(dist, dist[:, v, None] + dist[None, v, :])
    return -dist, dist.T.copy()


class LossComparison(NamedTuple):
    """One row of :func:`compare_losses`."""

    loss: str
    options: dict
    policy: NDArray | None  # the population optimum (None where none is computed)
    status: str  # "unique", "set" (a documented choice), "limit", or why there is none
    # ("minimiser (set not resolved)" for hinge when optimum_set refuses)
    tv_to_target: float  # total variation to the target policy (nan without a policy)
    kl_to_ref: float  # KL(policy || ref)
    expected_reward: float  # E_policy[reward] (nan without a reward)
    beta_equivalent: float  # beta' with policy = pi*_{beta'} for `reward`, nan if none


def compare_losses(
    ref: ArrayLike,
    preferences: ArrayLike,
    beta: float,
    *,
    reward: ArrayLike | None = None,
    mu: ArrayLike | None = None,
    losses: dict[str, dict] | None = None,
) -> list[LossComparison]:
    r"""Where each loss's population optimum lands, against the KL-regularised optimum.

    .. math::

        \mathrm{TV}(\pi_{loss}, \pi^*_\beta),\quad \mathrm{KL}(\pi_{loss}\|\pi_{ref}),\quad
        \mathbb{E}_{\pi_{loss}}[r],\quad \beta' : \pi_{loss} = \pi^*_{\beta'}

    Parameters
    ----------
    ref, preferences, beta, mu
        As in :func:`population_optimum`.
    reward : array_like, optional
        The reward the target :math:`\pi^*_\beta = \pi_{ref}e^{r/\beta}/Z` is built from
        (typically the one ``preferences = bradley_terry(reward)`` came from). Without it
        the target is the DPO (``sigmoid``) optimum and the reward columns are ``nan``.
    losses : dict, optional
        ``{name: options}``; default every registry loss with its default options
        (but ``sigmoid_norm``, whose ``lengths`` have no default).

    Returns
    -------
    list of LossComparison
        One row per loss, in the order given.

    Raises
    ------
    ValueError
        For invalid inputs (a loss without an optimum is reported in its row's
        ``status``, not raised).

    Notes
    -----
    ``beta_equivalent``: the policy equals :math:`\pi^*_{\beta'}` for the given reward
    exactly when its log-ratios are an affine function :math:`g = r/\beta' + c` of the
    reward on the support; the fit is exact to ``1e-9`` relative, else ``nan``. For a
    margin-only loss the log-ratios are :math:`x^*/\beta`, so :math:`\beta'` is a fixed
    multiple of :math:`\beta` (when it exists).

    References
    ----------
    .. [1] Azar et al., 2023, arXiv:2310.12036.

    Examples
    --------
    >>> from klpolicy.preference import bradley_terry, compare_losses
    >>> rows = compare_losses([0.5, 0.5], bradley_terry([1.0, 0.0]), 1.0, reward=[1.0, 0.0],
    ...                       losses={"sigmoid": {}, "hinge": {}})
    >>> [(r.loss, round(r.tv_to_target, 12), round(r.beta_equivalent, 12)) for r in rows]
    [('sigmoid', 0.0, 1.0), ('hinge', 0.0, 1.0)]
    """
    from ..core import kl_divergence, optimal_policy

    ref_a = _ref_1d(ref)
    b = V.as_positive_scalar("beta", beta)
    # checked here, not only inside each loss's solve (whose errors become a row's status)
    as_preference_matrix("preferences", preferences, ref_a.shape[-1])
    if mu is not None:
        as_pair_law(mu, ref_a)
    support = ref_a > 0
    if reward is not None:
        r = V.as_rewards("reward", reward)
        if r.shape != ref_a.shape:
            raise ValueError(f"`reward` must have the shape of `ref` {ref_a.shape}; got {r.shape}")
        target = optimal_policy(ref_a, r, b)
    else:
        r = None
        target = population_optimum(ref_a, preferences, b, mu=mu)
    if losses is None:
        losses = {name: {} for name in LOSSES if name != "sigmoid_norm"}  # lengths: no default
    if not isinstance(losses, dict) or not all(isinstance(v, dict) for v in losses.values()):
        raise ValueError(
            "`losses` must be a dict {name: options dict}, e.g. {'sigmoid': {}}; "
            f"got {V.describe(losses)}"
        )
    rows = []
    for name, opts in losses.items():
        row = get_loss(name)
        o = row.resolve_options(opts)
        try:
            pi = population_optimum(ref_a, preferences, b, loss=name, mu=mu, **o)
        except ValueError as e:
            rows.append(LossComparison(name, o, None, str(e), np.nan, np.nan, np.nan, np.nan))
            continue
        status = "unique"
        if np.any(pi[support] == 0):
            status = "limit"
        elif row.margin_only or name == "ipo":
            try:
                s = optimum_set(ref_a, preferences, b, loss=name, mu=mu, **o)
                status = "unique" if s.unique else "set"
            except ValueError:  # a set the solver cannot resolve
                status = "minimiser (set not resolved)"
        tv = 0.5 * float(np.abs(pi - target).sum())
        kl = float(kl_divergence(pi, ref_a))
        er = float(pi @ r) if r is not None else np.nan
        beq = np.nan
        if r is not None and status != "limit" and np.ptp(r[support]) > 0:
            g = np.log(pi[support]) - np.log(ref_a[support])
            rs = r[support]
            a_mat = np.stack([rs, np.ones_like(rs)], axis=1)
            coef = np.linalg.lstsq(a_mat, g, rcond=None)[0]
            resid = float(np.max(np.abs(a_mat @ coef - g)))
            if coef[0] > 0 and resid <= 1e-9 * max(1.0, float(np.max(np.abs(g)))):
                beq = 1.0 / float(coef[0])
        rows.append(LossComparison(name, o, pi, status, tv, kl, er, beq))
    return rows
