r"""The population loss and the exact population optimum of each kind of pair loss.

The rows of :data:`~klpolicy.preference.LOSSES` carry these functions (their
``population_loss`` and ``optimum`` fields), built here from a row's kernels and
facts; :func:`~klpolicy.preference.population_loss` and
:func:`~klpolicy.preference.population_optimum` validate their inputs, look the row
up and call them. A tabular problem as in :mod:`klpolicy.preference.family`: pair
weights ``W[i, j] = (mu[i, j] + mu[j, i]) P[i, j]`` and log-ratios
:math:`g = \log(\pi/\pi_{ref})`. The derivations are in ``docs/derivations/dpo.md``
(section 6) and ``docs/derivations/pair_solvers.md``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from numpy.typing import NDArray

from ..core.internal import monotone_root, special
from ._inputs import as_pair_law, as_preference_matrix
from .fdpo import (
    _as_clamp,
    check_f_loss,
    f_population_loss,
    f_population_optimum,
    keeps_constants,
    resolve_divergence,
)
from .optima import dpo_optimum, ipo_optimum
from .solvers import _check_connected, _margin_newton, _minimise_margin_loss, laplacian_solve
from .tabular import _dpo_value, _log_ratio, _tilt_scores, _win_weights


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


def _sorting_loss(paired, g, w, ref_a, b, eps) -> float:
    """The sorting losses: the quantile coupling of the chosen and rejected log-ratio laws
    under the pair weights (``paired``: ``aot_pair``, ``aot_unpaired``) or of the policy's and
    the reference's log-odds (``aot``)."""

    def psi(d):
        return (1 - eps) * np.logaddexp(0.0, -b * d) + eps * np.logaddexp(0.0, b * d)

    if paired:
        idx = np.arange(g.size)
        keep = (w.sum(1) + w.sum(0)) > 0
        return _quantile_coupling(g[idx[keep]], w.sum(1)[keep], g[idx[keep]], w.sum(0)[keep], psi)
    i, j = np.nonzero(w > 0)
    with np.errstate(divide="ignore"):
        lref = np.log(ref_a)
    ref_odds = lref[i] - lref[j]
    pol_odds = (g[i] - g[j]) + ref_odds
    return _quantile_coupling(pol_odds, w[i, j], ref_odds, w[i, j], psi)


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


def _margin_solver(kernel, o: dict[str, float]):
    """The Newton solve of one connected part's margins for a :class:`MarginKernel` at the
    options ``o``, started at the least-squares fit of each pair's own minimiser."""

    def phi(d):
        return kernel.phi(d, o)

    def d1(d):
        return kernel.d1(d, o)

    def d2(d):
        return kernel.d2(d, o)

    def solve(sub):
        x0 = _least_squares_start(sub, kernel.pair_margin(_pair_probability(sub), o))
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


class PerOutcome:
    """A per-outcome loss f_i(g) = c_i A(g) + r_i B(g) (``nca_pair``, ``bco_pair``,
    ``sppo_hard``), vectorised over outcomes: values, f', f'', the free minimisers g0
    (f' = 0) and the peaks of f'(g) e^{-g} (closed forms). A row of :data:`LOSSES` names its
    subclass (its ``per_outcome`` field); ``c``, ``r`` are the chosen and rejected marginals
    of the pair weights and ``skew`` their difference c - r formed pair by pair
    (W_ij - W_ji = (mu_ij + mu_ji)(P_ij - P_ji)): for an outcome near its free minimiser c - r
    is far below c, and the difference of the rounded sums would leave x0 off by
    eps c / (c - r) (the mass the others share, 1 - m0 of the heaviest, was then off by eps
    absolute)."""

    def __init__(self, c, r, beta, o, skew=None):
        self.c, self.r, self.beta = c, r, beta
        self.setup(c - r if skew is None else skew, o)


class QuadraticOutcomes(PerOutcome):
    """``sppo_hard``: f_i(g) = c_i (g - k)^2 + r_i (g + k)^2, k = 1 / (2 beta)."""

    def setup(self, skew, o):
        c, r, beta = self.c, self.r, self.beta
        self.k = 0.5 / beta
        s = c + r
        with np.errstate(divide="ignore", invalid="ignore"):
            self.g0 = np.where(s > 0, self.k * skew / s, np.nan)
        self.peak = self.g0 + 1.0  # f' = 2 (c + r) (g - g0) = f'' there

    def value(self, g, rows):
        c, r = self.c[rows], self.r[rows]
        with np.errstate(over="ignore", invalid="ignore"):
            return c * (g - self.k) ** 2 + r * (g + self.k) ** 2

    def d1(self, g, rows):
        c, r = self.c[rows], self.r[rows]
        return 2 * (c + r) * g - 2 * self.k * (c - r)

    def d2(self, g, rows):
        return 2 * (self.c[rows] + self.r[rows]) + 0 * g

    def log_d1(self, g, rows):
        """log f'(g) for g above g0."""
        with np.errstate(divide="ignore"):
            return np.log(2 * (self.c[rows] + self.r[rows])) + np.log(g - self.g0[rows])

    def log_neg_d1(self, g, rows):
        """log(-f'(g)) for g below g0."""
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return np.log(2 * (self.c[rows] + self.r[rows])) + np.log(self.g0[rows] - g)

    def vertex_gain(self, lref):
        """f_k(-log ref_k) - f_k(g0_k) per outcome (see :func:`_underflow_vertex`)."""
        rows = np.arange(lref.size)
        with np.errstate(over="ignore", invalid="ignore"):
            return self.value(-lref, rows) - self.value(self.g0, rows)


class LogisticOutcomes(PerOutcome):
    """f_i = c_i sp(-x) + rho_i sp(x) in x = beta g - delta, rho_i = alpha_i - c_i: the
    subclasses give alpha (``alpha``), rho (``rest``), (c - rho) / (c - r) (``share``),
    delta (``offset``) and f itself (``value_x``, in the row's own rounding)."""

    def setup(self, skew, o):
        c, r, beta = self.c, self.r, self.beta
        self.alpha = self.alpha_of(c, r)
        self.delta = self.offset(o)
        a, b, d = self.alpha, beta, self.delta
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # the free minimiser in x = beta g - delta: log(c / (alpha - c)), as log1p of
            # (c - rho) / rho when that is small, without the logs' cancellation
            rest = self.rest(c, r)
            q = self.share * skew / rest
            self.x0 = np.where(np.abs(q) < 0.5, np.log1p(q), np.log(c) - np.log(rest))
            self.g0 = (d + self.x0) / b
            # h = f' e^{-g} peaks where f'' = f': a b s^2 - a (b - 1) s - c = 0, s = sigma
            # roots without cancellation (and without overflow at extreme beta)
            disc = a * np.hypot(b - 1, 2 * np.sqrt(b * c / a))
            s = np.where(b <= 1, 2 * c / (a * (1 - b) + disc), (a * (b - 1) + disc) / (2 * a * b))
            one_minus = 2 * (a - c) / (a * (b + 1) + disc)  # 1 - s, its own rounding
            self.peak = (np.log(s) - np.log(one_minus) + d) / b

    def value(self, g, rows):
        with np.errstate(over="ignore", invalid="ignore"):
            return self.value_x(self.c[rows], self.r[rows], self.beta, self.delta, g)

    def d1(self, g, rows):
        c, b = self.c[rows], self.beta
        return b * (self.alpha[rows] * special.expit(b * g - self.delta) - c)

    def d2(self, g, rows):
        x = self.beta * g - self.delta
        return self.beta**2 * self.alpha[rows] * special.expit(x) * special.expit(-x)

    def log_d1(self, g, rows):
        """log f'(g) for g above g0, without cancellation near the minimiser."""
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
            # -f' = b a (s(x0) - s(x)) = b a s(x0) s(-x) (1 - e^{-(x0 - x)})
            x, x0 = self.beta * g - self.delta, self.x0[rows]
            return (
                np.log(self.beta * self.alpha[rows])
                + special.log_expit(x0)
                + special.log_expit(-x)
                + np.log(-np.expm1(np.minimum(x - x0, 0.0)))  # -inf at and past g0
            )

    def vertex_gain(self, lref):
        """f_k(-log ref_k) - f_k(g0_k) per outcome, in x where the free minimiser
        x0 = log c - log(alpha - c) is exact at any delta / beta (up to terms equal at both
        ends)."""
        c, a = self.c, self.alpha
        with np.errstate(over="ignore"):
            x1 = -self.beta * lref - self.delta
        x0 = np.log(c) - np.log(a - c)
        return self.vertex_x(x1) - self.vertex_x(x0)


class NCAOutcomes(LogisticOutcomes):
    """``nca_pair``: f_i = c_i (sp(-beta g) + sp(beta g) / 2) + r_i sp(beta g) / 2."""

    share = 0.5  # c - rho = (c - r) / 2

    @staticmethod
    def alpha_of(c, r):
        return 1.5 * c + 0.5 * r

    @staticmethod
    def rest(c, r):
        return 0.5 * (c + r)

    @staticmethod
    def offset(o):
        return 0.0

    @staticmethod
    def value_x(c, r, b, d, g):
        return c * (_sp(-b * g) + 0.5 * _sp(b * g)) + 0.5 * r * _sp(b * g)

    def vertex_x(self, x):
        c = self.c
        return c * (_sp(-x) + 0.5 * _sp(x)) + 0.5 * self.r * _sp(x)


class BCOOutcomes(LogisticOutcomes):
    """``bco_pair`` at a fixed ``delta``: f_i = c_i sp(delta - beta g) + r_i sp(beta g - delta)."""

    share = 1.0  # c - rho = c - r

    @staticmethod
    def alpha_of(c, r):
        return c + r

    @staticmethod
    def rest(c, r):
        return r

    @staticmethod
    def offset(o):
        return o["delta"]

    @staticmethod
    def value_x(c, r, b, d, g):
        return c * _sp(d - b * g) + r * _sp(b * g - d)

    def vertex_x(self, x):
        return self.c * _sp(-x) + self.r * _sp(x)


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
    log(-f') formed without cancellation near g0 (:meth:`LogisticOutcomes.log_neg_d1`), so g_i
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
    with np.errstate(over="ignore", invalid="ignore"):
        top = lref + np.minimum(fo.peak, -lref)  # log of the largest rising mass
    if not np.all(top < -800.0) or np.any(fo.c == 0):
        return None
    gain = fo.vertex_gain(lref)
    if not np.isfinite(gain).any():
        return None
    # least bracket; an exact tie goes to the larger reference mass (order-free)
    k = int(np.lexsort((-lref, gain))[0])
    g = np.full(lref.size, -np.inf)
    g[k] = -lref[k]
    return g


def _separable_optimum(name, outcomes, ref_a, w, beta, o, skew=None) -> NDArray:
    """Minimise sum_i f_i(g_i) over policies pi << ref (pi = ref e^g, sum pi = 1), f_i of the
    :class:`PerOutcome` subclass ``outcomes`` (``name``: the loss, for messages); ``skew`` is
    c - r formed pair by pair (default: from the row and column sums of w)."""
    support = ref_a > 0
    c, r = w.sum(axis=1), w.sum(axis=0)
    compared = (c + r) > 0
    unseen = support & ~compared
    idx = np.flatnonzero(compared)
    fo = outcomes(c[idx], r[idx], beta, o, None if skew is None else skew[idx])
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
    #   formed pair by pair (LogisticOutcomes); and sum(ref) = 1 + O(eps) moved 1 - m0_k by eps
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


def hinge_ranges(sub: NDArray) -> tuple[NDArray, NDArray]:
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


# ---------------------------------------------------------------------------
# what a row carries: its kernels, and the problem its functions are called on
# ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PairKernel:
    """A per-pair loss on the log-ratios: ``ell(a, b, beta, o)`` and its derivatives
    ``grad(a, b, beta, o) -> (d ell/da, d ell/db)``, float64 arrays, ``o`` the resolved
    options. A margin-only row takes ``a = h`` (the margin) and ``b = 0``."""

    ell: Callable[..., NDArray]
    grad: Callable[..., tuple[NDArray, NDArray]]


@dataclass(frozen=True)
class MarginKernel:
    r"""A margin loss :math:`\phi(x)` in :math:`x = \beta h`: ``phi(x, o)``, its first and
    second derivatives ``d1``, ``d2``, and ``pair_margin(p, o)``, the margin that minimises
    one pair's expected loss :math:`p\,\phi(x) + (1 - p)\,\phi(-x)` at preference ``p``
    (exact, or the start of the population solver's Newton descent)."""

    phi: Callable[..., NDArray]
    d1: Callable[..., NDArray]
    d2: Callable[..., NDArray]
    pair_margin: Callable[..., NDArray]


class PairProblem(NamedTuple):
    """A population problem as a row's ``population_loss`` and ``optimum`` receive it:
    ``ref`` (1-D) and ``beta`` validated, ``options`` resolved by the row, the rest as the
    caller gave them (each function validates what it uses); ``policy`` for the loss only."""

    row: Any
    ref: NDArray
    preferences: Any
    beta: float
    mu: Any
    options: dict
    divergence: str
    alpha: float | None
    alpha_clamp: float | None
    trl_version: str
    f_dpo: bool
    policy: Any = None


# ---------------------------------------------------------------------------
# population losses: fn(problem) -> float
# ---------------------------------------------------------------------------


def chosen_cross_entropy(p: PairProblem) -> float:
    """``sft``: -sum_i c_i log pi(i), c the chosen marginal of the pair weights (no divergence
    enters)."""
    w = _win_weights(p.ref, p.preferences, p.mu)
    g = _log_ratio(p.policy, p.ref, w)
    chosen = w.sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        lp = np.where(chosen > 0, g + np.log(np.where(chosen > 0, p.ref, 1.0)), 0.0)
    return float(-np.sum(chosen * lp))


def on_scores(plain: Callable[[PairProblem], float]) -> Callable[[PairProblem], float]:
    """The population loss ``plain`` of the log-ratios, on TRL's f-DPO scores where the row
    takes them (its ``f_divergence`` for ``trl_version``): sum_ij W_ij ell(S_i, S_j)."""

    def population_loss(p: PairProblem) -> float:
        row, o = p.row, p.options
        constants = keeps_constants(p.trl_version)
        if p.f_dpo:
            frow, a, _ = resolve_divergence(p.divergence, p.alpha)
            clamp = _as_clamp(p.alpha_clamp, frow.name)
            if check_f_loss(row, p.divergence, p.trl_version) == "scores":
                w = _win_weights(p.ref, p.preferences, p.mu)
                g = _log_ratio(p.policy, p.ref, w)
                lengths = None
                if row.length_normalised:  # the scores divided by the lengths
                    lengths = _outcome_lengths(o["lengths"], p.ref)
                return f_population_loss(
                    row,
                    o,
                    row.pair.ell,
                    g,
                    w,
                    p.beta,
                    frow.name,
                    a,
                    clamp,
                    row.margin_only,
                    constants,
                    lengths,
                )
        return plain(p)

    population_loss.__name__ = plain.__name__
    return population_loss


def pair_sum(p: PairProblem) -> float:
    """sum_ij W_ij ell(g_i, g_j) (margin rows: ell(g_i - g_j, 0)), terms of weight 0 dropped."""
    row, o = p.row, p.options
    w = _win_weights(p.ref, p.preferences, p.mu)
    g = _log_ratio(p.policy, p.ref, w)
    ell = row.pair.ell
    mask = w > 0
    with np.errstate(over="ignore"):
        if row.margin_only:
            d = g[:, None] - g[None, :]
            vals = ell(d, np.zeros_like(d), p.beta, o)
        else:
            vals = ell(g[:, None] + 0 * g[None, :], g[None, :] + 0 * g[:, None], p.beta, o)
    return float(np.sum(np.where(mask, w * np.where(mask, vals, 0.0), 0.0)))


def smoothed_dpo_sum(p: PairProblem) -> float:
    """``sigmoid``: :func:`population_dpo_loss`'s computation, the label smoothing folded into
    the weights (the same float)."""
    w = _win_weights(p.ref, p.preferences, p.mu, p.options["label_smoothing"])
    return _dpo_value(_log_ratio(p.policy, p.ref, w), w, p.beta)


def length_normalised_sum(p: PairProblem) -> float:
    """``sigmoid_norm``: sum_ij W_ij sp(-beta (g_i / L_i - g_j / L_j))."""
    lengths = _outcome_lengths(p.options["lengths"], p.ref)
    w = _win_weights(p.ref, p.preferences, p.mu)
    g = _log_ratio(p.policy, p.ref, w)
    return _dpo_value(g / lengths, w, p.beta)


def sorted_coupling(paired: bool) -> Callable[[PairProblem], float]:
    """The sorting losses' large-batch limit: the quantile coupling of the log-ratio laws
    (``paired``) or of the policy's and the reference's log-odds."""

    def sorted_coupling_sum(p: PairProblem) -> float:
        w = _win_weights(p.ref, p.preferences, p.mu)
        g = _log_ratio(p.policy, p.ref, w)
        return _sorting_loss(paired, g, w, p.ref, p.beta, p.options["label_smoothing"])

    return sorted_coupling_sum


# ---------------------------------------------------------------------------
# population optima: fn(problem) -> policy
# ---------------------------------------------------------------------------


def chosen_marginal(p: PairProblem) -> NDArray:
    """``sft``: maximum likelihood of the chosen responses, their marginal law (no divergence
    enters)."""
    w = _win_weights(p.ref, p.preferences, p.mu)
    chosen = np.where(p.ref > 0, w.sum(axis=1), 0.0)
    return chosen / chosen.sum()


def _not_on_score_differences(p: PairProblem):
    """f-DPO with a loss that is not a function of score differences: TRL's refusals first."""
    resolve_divergence(p.divergence, p.alpha)  # the name and alpha, checked first
    check_f_loss(p.row, p.divergence, p.trl_version)  # TRL's refusals
    raise ValueError(
        f"`loss` {p.row.name!r} is not a function of score differences: its f-DPO population "
        "optimum is not the f-regularised optimum, and population_optimum computes it "
        "for the margin losses only (sigmoid, robust, hinge, ipo, exo_pair, discopop)"
    )


def margin_optimum(
    solve: Callable[[PairProblem], NDArray],
    check: Callable[[dict], None] | None = None,
) -> Callable[[PairProblem], NDArray]:
    """A margin loss's optimum: ``solve`` under the reverse KL; with f-DPO, the f-regularised
    optimum at ``c * beta`` for the implied reward of ``solve`` (see
    :func:`~klpolicy.preference.population_optimum`'s Notes). ``check(options)`` runs first
    (limits of the solver)."""

    def optimum(p: PairProblem) -> NDArray:
        if check is not None:
            check(p.options)
        keeps_constants(p.trl_version)  # checked first
        if not p.f_dpo:
            return solve(p)
        resolve_divergence(p.divergence, p.alpha)  # the name and alpha, checked first
        check_f_loss(p.row, p.divergence, p.trl_version)  # TRL's refusals
        # the margin losses' minimising x* = beta log(pi/ref) does not depend on beta: read
        # it at beta = 1, where pi = ref e^{x*}/Z does not underflow for small beta
        pi_kl = solve(p._replace(beta=1.0))
        return f_population_optimum(
            pi_kl,
            p.ref,
            p.beta,
            p.row.name,
            p.divergence,
            p.alpha,
            p.alpha_clamp,
            trl_version=p.trl_version,
        )

    optimum.__name__ = getattr(solve, "__name__", "margin_optimum")
    return optimum


def refused_optimum(p: PairProblem) -> NDArray:
    """A loss without a computed optimum: the ValueError says why (the row's ``no_optimum``)."""
    keeps_constants(p.trl_version)  # checked first
    if p.f_dpo:
        _not_on_score_differences(p)
    raise ValueError(f"`loss` {p.row.name!r} {p.row.no_optimum}")


def per_outcome_optimum(p: PairProblem) -> NDArray:
    """A per-outcome loss (the row's ``per_outcome`` class): :func:`_separable_optimum` on the
    outcomes' skews ``c_i - r_i``, formed pair by pair; no f-DPO optimum."""
    keeps_constants(p.trl_version)  # checked first
    if p.f_dpo:
        _not_on_score_differences(p)
    ref_a, b, name = p.ref, p.beta, p.row.name
    w = _win_weights(ref_a, p.preferences, p.mu)
    support = ref_a > 0
    if not np.isfinite(1.0 / b):
        raise ValueError(
            f"`beta` must be at least {1 / np.finfo(np.float64).max:.4g} for the per-outcome "
            f"loss {name!r} (its population loss depends on beta, not only on a scale, "
            f"and 1 / beta overflows); got {float(b)!r}"
        )
    joint = as_pair_law(p.mu, ref_a)
    pm = as_preference_matrix("preferences", p.preferences, ref_a.shape[-1])
    with np.errstate(invalid="ignore"):
        terms = (joint + joint.T) * (pm - pm.T)
    skew = np.array([math.fsum(t) for t in terms.tolist()])
    g = _separable_optimum(name, p.row.per_outcome, ref_a, w, b, p.options, skew)
    with np.errstate(over="ignore"):
        pi = np.where(support, ref_a * np.exp(np.where(support, g, -np.inf)), 0.0)
    return pi / pi.sum()


def length_normalised_optimum(p: PairProblem) -> NDArray:
    """``sigmoid_norm``: the sigmoid optimum's implied scores x*, then pi_y = ref_y
    exp(L_y (x*_y + c) / beta) normalised (or the f-DPO form with the scores' constants)."""
    keeps_constants(p.trl_version)  # checked first
    ref_a = p.ref
    lengths = _outcome_lengths(p.options["lengths"], ref_a)
    pi_1 = dpo_optimum(ref_a, p.preferences, 1.0, mu=p.mu)  # x* = log(pi_1 / ref) + const
    if p.f_dpo:
        resolve_divergence(p.divergence, p.alpha)
        return f_population_optimum(
            pi_1,
            ref_a,
            p.beta,
            p.row.name,
            p.divergence,
            p.alpha,
            p.alpha_clamp,
            lengths,
            p.trl_version,
        )
    with np.errstate(divide="ignore"):
        x = np.where(pi_1 > 0, np.log(np.where(pi_1 > 0, pi_1, 1.0)), -np.inf) - np.log(
            np.where(ref_a > 0, ref_a, 1.0)
        )
    return _length_normalised_optimum(ref_a, x, lengths, p.beta)


def fixed_link_optimum(p: PairProblem) -> NDArray:
    """A loss that is DPO's sigmoid on the scores of one divergence (the row's
    ``score_divergence``; ``chi_po``): the f-regularised optimum for DPO's implied reward."""
    keeps_constants(p.trl_version)  # checked first
    row = p.row
    if p.f_dpo:
        raise ValueError(
            f"`divergence` is fixed by `loss` {row.name!r} (its link is the "
            f"{row.score_divergence} score); got divergence={p.divergence!r}"
        )
    pi_kl = dpo_optimum(p.ref, p.preferences, 1.0, mu=p.mu, label_smoothing=0.0)
    return f_population_optimum(
        pi_kl,
        p.ref,
        p.beta,
        row.name,
        row.score_divergence,
        p.alpha,
        p.alpha_clamp,
        trl_version=p.trl_version,
    )


# the reverse-KL solves of the margin losses: fn(problem) -> policy


def dpo_solve(p: PairProblem) -> NDArray:
    """``sigmoid`` (with cDPO's label smoothing): :func:`dpo_optimum`."""
    eps = p.options["label_smoothing"]
    return dpo_optimum(p.ref, p.preferences, p.beta, mu=p.mu, label_smoothing=eps)


def ipo_solve(p: PairProblem) -> NDArray:
    """``ipo``: :func:`ipo_optimum`, refused where the pairs do not connect the support."""
    ref_a = p.ref
    _win_weights(ref_a, p.preferences, p.mu)  # the inputs, checked in the margin losses' order
    # one code path with ipo_optimum; the loss leaves the mass of outcomes the pairs
    # never connect free, which ipo_optimum's closed form (the objective's maximiser)
    # would fix silently: refuse those here, as for every margin loss
    joint = as_pair_law(p.mu, ref_a)
    _check_connected(joint + joint.T, np.flatnonzero(ref_a > 0))
    return ipo_optimum(ref_a, p.preferences, p.beta, mu=p.mu)


def hinge_solve(p: PairProblem) -> NDArray:
    """``hinge``: the minimiser of least weighted spread, exact (:func:`_hinge_scores`)."""
    ref_a = p.ref
    w = _win_weights(ref_a, p.preferences, p.mu)
    idx = np.flatnonzero(ref_a > 0)
    sub = w[np.ix_(idx, idx)].copy()
    np.fill_diagonal(sub, 0.0)
    _check_connected(w + w.T, idx)
    g = np.zeros(ref_a.shape)
    g[idx] = _hinge_scores(sub)
    return _tilt_scores(ref_a, g, p.beta)


def newton_solve(*, runaway: bool = True) -> Callable[[PairProblem], NDArray]:
    """A smooth margin loss (the row's ``margin`` kernel): the saddle-free Newton descent of
    :func:`_minimise_margin_loss`; ``runaway``: whether scores may run off to infinity
    (a loss whose infimum is a limit)."""

    def solve(p: PairProblem) -> NDArray:
        w = _win_weights(p.ref, p.preferences, p.mu)
        support = p.ref > 0
        margins = _margin_solver(p.row.margin, p.options)
        x = _minimise_margin_loss(w, support, margins, what=p.row.name, runaway=runaway)
        return _tilt_scores(p.ref, x, p.beta)

    return solve


def robust_solve(sigmoid: MarginKernel) -> Callable[[PairProblem], NDArray]:
    """``robust``: DPO at label_smoothing 0; the ``sigmoid`` kernel's solve on the de-noised
    preferences where a drawn pair sits at P = eps or 1 - eps (see
    :func:`_robust_denoised`); the Newton descent of the row's own kernel otherwise."""

    def solve(p: PairProblem) -> NDArray:
        e = p.options["label_smoothing"]
        if e == 0:
            return dpo_optimum(p.ref, p.preferences, p.beta, mu=p.mu, label_smoothing=0.0)
        w = _win_weights(p.ref, p.preferences, p.mu)
        support = p.ref > 0
        q = _robust_denoised(p.ref, p.preferences, p.mu, e)
        if q is not None:  # a drawn pair at P = eps or 1 - eps: sigmoid's loss on q
            wq = _win_weights(p.ref, q, p.mu)
            margins = _margin_solver(sigmoid, {"label_smoothing": 0.0})
            x = _minimise_margin_loss(wq, support, margins, what=p.row.name)
            return _tilt_scores(p.ref, x, p.beta)
        margins = _margin_solver(p.row.margin, p.options)
        x = _minimise_margin_loss(w, support, margins, what=p.row.name)
        return _tilt_scores(p.ref, x, p.beta)

    return solve


def discopop_tau_check(o: dict) -> None:
    """discopop's solver limit: ``tau`` at least 2**-510 (its curvature ~ 1/tau^2 is finite)."""
    if not o["tau"] >= _DISCOPOP_TAU_MIN:
        raise ValueError(
            f"`tau` = {o['tau']!r} is below {_DISCOPOP_TAU_MIN:.3g} (2**-510), where the "
            "discopop loss's curvature, which grows as 1/tau^2 across its switch at margin 0, "
            f"is beyond float64 and the minimiser cannot be computed: pass tau >= "
            f"{_DISCOPOP_TAU_MIN:.3g}"
        )
