"""The hinge population optimum is exact and does not depend on the order of the outcomes.

The answer is the minimiser of the hinge loss with the smallest weighted spread
sum_{i<j} (w_ij + w_ji)|x_i - x_j| among the minimisers (integral scores x = beta
log(pi/ref) + const). References: an exhaustive search over integer scores in exact integer
arithmetic (small n), and a plain HiGHS solve of the same two linear programs over real
scores (moderate n, weights within a few decades, where HiGHS's tolerances hold).
"""

from __future__ import annotations

import itertools
from fractions import Fraction
from math import lcm

import numpy as np
import pytest
from scipy.optimize import linprog
from scipy.sparse import coo_array, vstack

from klpolicy.preference import bradley_terry, optimum_set, population_optimum


def _prefs(rng, n, values=None):
    p = np.full((n, n), 0.5)
    for i, j in itertools.combinations(range(n), 2):
        p[i, j] = rng.uniform(0.2, 0.8) if values is None else rng.choice(values)
        p[j, i] = 1 - p[i, j]
    return p


def _weights(ref, p):
    w = 2 * np.outer(ref, ref) * p  # the on-policy pair law's win weights
    np.fill_diagonal(w, 0.0)
    return w


def _scores(pi, ref, beta):
    x = beta * (np.log(pi) - np.log(ref))
    x -= x[-1]
    r = np.round(x)
    np.testing.assert_allclose(x, r, atol=1e-6)  # integral
    return tuple(int(v) for v in r)


def _exact_objective(w):
    """(loss, spread) of integer scores, in exact integers (the weights at a common scale)."""
    fr = [[Fraction(float(v)) for v in row] for row in w]
    den = lcm(*(f.denominator for row in fr for f in row))
    n = len(fr)
    wi = [[int(f * den) for f in row] for row in fr]

    def value(x):
        loss = sum(
            wi[i][j] * max(0, 1 - (x[i] - x[j])) for i in range(n) for j in range(n) if i != j
        )
        spread = sum(
            (wi[i][j] + wi[j][i]) * abs(x[i] - x[j]) for i, j in itertools.combinations(range(n), 2)
        )
        return loss, spread

    return value


def _brute_force(w):
    """Every lexicographic minimiser (loss, then spread) with x[-1] = 0: the scores of a
    minimiser span at most n - 1 (a larger gap between levels can close at no loss)."""
    n = len(w)
    value = _exact_objective(w)
    best, arg = None, []
    for head in itertools.product(range(-(n - 1), n), repeat=n - 1):
        x = (*head, 0)
        if max(x) - min(x) > n - 1:
            continue
        v = value(x)
        if best is None or v < best:
            best, arg = v, [x]
        elif v == best:
            arg.append(x)
    return best, arg


KINDS = ["random", "ties", "tiny", "deterministic"]


def _small_problems(kind, sizes, seed):
    """Three problems per size: reference entries down to 1e-30 for "tiny" (pair weights
    1e-60 beside 1), preferences with exact ties (0, 1/2, 1) for "ties"."""
    rng = np.random.default_rng(seed + KINDS.index(kind))
    for n in sizes:
        for _ in range(3):
            ref = rng.dirichlet(np.ones(n))
            if kind == "tiny":
                ref = 10.0 ** rng.uniform(-30, 0, n)
                ref /= ref.sum()
            values = {"ties": [0.0, 0.3, 0.5, 0.7, 1.0], "deterministic": [0.0, 1.0]}.get(kind)
            yield ref, _prefs(rng, n, values)


@pytest.mark.parametrize("kind", KINDS)
def test_hinge_optimum_is_the_exhaustive_lexicographic_minimum(kind):
    # the exact loss, then the exact spread, over every integer score vector (HiGHS's
    # tolerances, ~1e-7, could not see the tiny pairs)
    for ref, p in _small_problems(kind, (2, 3, 4, 5), 0):
        w = _weights(ref, p)
        best, arg = _brute_force(w)
        x = _scores(population_optimum(ref, p, 1.0, loss="hinge"), ref, 1.0)
        assert _exact_objective(w)(x) == best
        if len(arg) == 1:
            assert x == arg[0]


def _lp_optimum(w):
    """min loss, then min spread at that loss: two HiGHS LPs over real scores (x[-1] = 0)."""
    n = w.shape[0]
    w = w / w.max()
    ui, uj = np.nonzero(np.triu(np.ones((n, n), bool), 1))
    q = ui.size
    nv = n - 1 + 2 * q  # x, then each pair's loss t, then each pair's |x_i - x_j| u
    rows = np.arange(q)
    keep_i, keep_j = ui < n - 1, uj < n - 1

    def block(slope, col):  # slope (x_i - x_j) - (t or u) <= rhs, one row per pair
        r = np.concatenate([rows[keep_i], rows[keep_j], rows])
        c = np.concatenate([ui[keep_i], uj[keep_j], col + rows])
        v = np.concatenate([slope[keep_i], -slope[keep_j], -np.ones(q)])
        return coo_array((v, (r, c)), shape=(q, nv))

    a, b = w[ui, uj], w[uj, ui]
    # a max(0, 1 - d) + b max(0, 1 + d) is the largest of three lines in d = x_i - x_j
    lines = ((-a, a), (b - a, a + b), (b, b))
    blocks = [block(slope, n - 1) for slope, _ in lines]
    blocks += [block(np.full(q, sign), n - 1 + q) for sign in (1.0, -1.0)]
    a_ub = vstack(blocks).tocsr()
    b_ub = np.concatenate([-icpt for _, icpt in lines] + [np.zeros(2 * q)])
    loss_cost = np.zeros(nv)
    loss_cost[n - 1 : n - 1 + q] = 1.0
    bounds = [(None, None)] * (n - 1) + [(None, None)] * q + [(0, None)] * q
    loss = linprog(loss_cost, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs").fun
    spread_cost = np.zeros(nv)
    spread_cost[n - 1 + q :] = a + b
    res = linprog(
        spread_cost,
        A_ub=vstack([a_ub, coo_array(loss_cost[None, :])]).tocsr(),
        b_ub=np.append(b_ub, loss * (1 + 1e-10)),
        bounds=bounds,
        method="highs",
    )
    return loss, res.fun


def test_hinge_optimum_attains_the_real_linear_programs_optima():
    # the integral answer attains the LP's optimum over real scores (network matrix: the
    # optimal faces have integral vertices), the loss first, then the spread
    rng = np.random.default_rng(3)
    for n, gen in ((12, "random"), (20, "random"), (20, "bt"), (30, "ties")):
        ref = rng.dirichlet(np.ones(n))
        if gen == "bt":
            p = bradley_terry(3 * rng.normal(size=n))
        else:
            p = _prefs(rng, n, [0.0, 0.3, 0.5, 0.7, 1.0] if gen == "ties" else None)
        w = _weights(ref, p)
        x = _scores(population_optimum(ref, p, 1.0, loss="hinge"), ref, 1.0)
        x = np.array(x, float)
        d = x[:, None] - x[None, :]
        wn = w / w.max()
        loss = float(np.sum(wn * np.maximum(0, 1 - d)))
        spread = float(np.sum(np.triu((wn + wn.T) * np.abs(d), 1)))
        lp_loss, lp_spread = _lp_optimum(w)
        assert loss == pytest.approx(lp_loss, rel=1e-9)
        assert spread == pytest.approx(lp_spread, rel=1e-7)


@pytest.mark.parametrize("n", [40, 100])
def test_hinge_optimum_is_the_same_in_any_order_of_the_outcomes(n):
    # was: a HiGHS vertex, one of a polyhedron of minimisers at 1e-7 tolerance, that the
    # order of the outcomes could change; now entry by entry the same
    rng = np.random.default_rng(n)
    cases = [
        (rng.dirichlet(np.ones(n)), _prefs(rng, n)),  # the benchmark's kind of problem
        (rng.dirichlet(np.ones(n)), bradley_terry(2 * rng.normal(size=n))),
    ]
    tiny = 10.0 ** rng.uniform(-30, 0, n)  # reference entries down to 1e-30
    cases.append((tiny / tiny.sum(), _prefs(rng, n, [0.0, 0.3, 0.5, 0.7, 1.0])))
    for ref, p in cases:
        want = population_optimum(ref, p, 0.7, loss="hinge")
        for _ in range(2 if n < 100 else 1):
            perm = rng.permutation(n)
            inv = np.argsort(perm)
            got = population_optimum(ref[perm], p[np.ix_(perm, perm)], 0.7, loss="hinge")[inv]
            np.testing.assert_allclose(got, want, rtol=1e-13, atol=0)


def test_hinge_ties_resolve_the_same_in_every_order():
    # a symmetric problem: a preference cycle over uniform outcomes with indifferent pairs,
    # many minimisers of loss and spread; the answer (the descent's canonical point) is the
    # same under every relabelling
    n = 6
    ref = np.full(n, 1 / n)
    p = np.full((n, n), 0.5)
    for i in range(n):
        p[i, (i + 1) % n], p[(i + 1) % n, i] = 1.0, 0.0
    want = population_optimum(ref, p, 1.0, loss="hinge")
    rng = np.random.default_rng(0)
    for _ in range(20):
        perm = rng.permutation(n)
        got = population_optimum(ref[perm], p[np.ix_(perm, perm)], 1.0, loss="hinge")
        np.testing.assert_allclose(got[np.argsort(perm)], want, rtol=1e-14, atol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_hinge_set_is_the_exhaustive_range_of_the_minimisers(kind):
    # every integer minimiser of the exact loss in a box of +-2n (finite ranges are at most
    # n - 1: shortest paths of steps +-1; a range that reaches n in the box is unbounded);
    # optimum_set's log-odds range is x's range / beta plus log(ref_i / ref_j)
    for ref, p in _small_problems(kind, (2, 3, 4), 10):
        n = ref.size
        value = _exact_objective(_weights(ref, p))
        pts = [(*h, 0) for h in itertools.product(range(-2 * n, 2 * n + 1), repeat=n - 1)]
        losses = [value(x)[0] for x in pts]
        best = min(losses)
        xs = np.array([x for x, v in zip(pts, losses, strict=True) if v == best], float)
        top = (xs[:, :, None] - xs[:, None, :]).max(axis=0)
        want = np.where(top >= n, np.inf, top)
        s = optimum_set(ref, p, 0.5, loss="hinge")
        dref = np.log(ref)[:, None] - np.log(ref)[None, :]
        np.testing.assert_allclose(0.5 * (s.high - dref), want, rtol=0, atol=1e-9)
        np.testing.assert_allclose(0.5 * (s.low - dref), -want.T, rtol=0, atol=1e-9)
