"""Tests for population_loss, population_optimum and optimum_set over the LOSSES registry."""

import itertools

import mpmath as mp
import numpy as np
import pytest

from klpolicy import optimal_policy
from klpolicy.preference import (
    LOSSES,
    bradley_terry,
    compare_losses,
    dpo_optimum,
    ipo_optimum,
    optimum_set,
    population_dpo_loss,
    population_ipo_loss,
    population_loss,
    population_optimum,
)

from . import _mp_optima as mpo

PER_PAIR = [n for n, r in LOSSES.items() if not r.batch_dependent]


def _random_problem(rng, n, tiny=False, lo=0.05, hi=0.95):
    ref = rng.dirichlet(np.ones(n))
    if tiny:
        ref[rng.integers(n)] = 1e-12
        ref /= ref.sum()
    p = np.full((n, n), 0.5)
    for i, j in itertools.combinations(range(n), 2):
        p[i, j] = rng.uniform(lo, hi)
        p[j, i] = 1 - p[i, j]
    return ref, p


def _mu(kind, ref, rng):
    n = ref.size
    if kind == "ref":
        return None
    if kind == "vector":
        return rng.dirichlet(np.ones(n))
    j = rng.dirichlet(np.ones(n * n)).reshape(n, n)
    return j


# ---------------------------------------------------------------------------
# population_loss
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("mu_kind", ["ref", "vector", "joint"])
@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_sigmoid_population_loss_is_population_dpo_loss_exactly(rng, mu_kind, eps):
    for n in (2, 3, 6):
        ref, p = _random_problem(rng, n)
        mu = _mu(mu_kind, ref, rng)
        pi = rng.dirichlet(np.ones(n))
        for beta in (0.05, 1.0, 30.0):
            a = population_loss(pi, ref, p, beta, mu=mu, label_smoothing=eps)
            b = population_dpo_loss(pi, ref, p, beta, mu=mu, label_smoothing=eps)
            assert a == b


def test_ipo_population_loss_is_population_ipo_loss(rng):
    for n in (2, 5):
        ref, p = _random_problem(rng, n)
        pi = rng.dirichlet(np.ones(n))
        for tau in (0.1, 2.0):
            assert population_loss(pi, ref, p, tau, loss="ipo") == pytest.approx(
                population_ipo_loss(pi, ref, p, tau), rel=1e-14
            )


@pytest.mark.parametrize("name", PER_PAIR)
def test_population_loss_is_the_weighted_sum_of_the_rows_values(rng, name):
    # independent route: the registry's public per-pair value on every (winner, loser) pair
    row = LOSSES[name]
    for n, mu_kind in ((2, "ref"), (4, "joint"), (5, "vector")):
        ref, p = _random_problem(rng, n)
        mu = _mu(mu_kind, ref, rng)
        joint = np.outer(ref, ref) if mu is None else (np.outer(mu, mu) if mu.ndim == 1 else mu)
        w = (joint + joint.T) * p
        pi = rng.dirichlet(np.ones(n))
        lp, lr = np.log(pi), np.log(ref)
        i, j = np.meshgrid(range(n), range(n), indexing="ij")
        opts = {}
        if name == "sigmoid_norm":  # per-outcome lengths; the pair form takes (L_w, L_l)
            lengths = rng.integers(1, 40, n).astype(float)
            opts = {"lengths": lengths}
            vals = row.value(lp[i], lp[j], lr[i], lr[j], 0.8, lengths=(lengths[i], lengths[j]))
        else:
            vals = row.value(lp[i], lp[j], lr[i], lr[j], 0.8)
        assert population_loss(pi, ref, p, 0.8, loss=name, mu=mu, **opts) == pytest.approx(
            float(np.sum(w * vals)), rel=1e-12
        )


@pytest.mark.parametrize("name", ["aot", "aot_pair"])
@pytest.mark.parametrize("eps", [0.0, 0.25])
def test_sorting_losses_population_value_is_the_replicated_batch_mean(name, eps):
    # with W_ij * N integers, a batch holding each (winner, loser) pair W_ij * N times is the
    # population exactly, and TRL's sorted batch mean equals the quantile integral
    ref = np.array([0.25, 0.5, 0.125, 0.125])
    p = np.array(
        [
            [0.5, 0.75, 0.25, 0.875],
            [0.25, 0.5, 0.625, 0.5],
            [0.75, 0.375, 0.5, 0.125],
            [0.125, 0.5, 0.875, 0.5],
        ]
    )
    pi = np.array([0.1, 0.45, 0.3, 0.15])
    w = 2 * np.outer(ref, ref) * p
    n_batch = 1024
    counts = w * n_batch
    assert np.allclose(counts, np.round(counts))
    lp, lr = np.log(pi), np.log(ref)
    rows = [(i, j) for i in range(4) for j in range(4) for _ in range(round(counts[i, j]))]
    i, j = np.array(rows).T
    batch = LOSSES[name].value(lp[i], lp[j], lr[i], lr[j], 0.7, label_smoothing=eps)
    assert batch.size == n_batch
    assert population_loss(pi, ref, p, 0.7, loss=name, label_smoothing=eps) == pytest.approx(
        float(batch.mean()), rel=1e-13
    )


def test_population_loss_validates_loss_and_options():
    ref, p = [0.5, 0.5], [[0.5, 0.7], [0.3, 0.5]]
    with pytest.raises(ValueError, match="`loss` must be one of sigmoid, hinge"):
        population_loss(ref, ref, p, 1.0, loss="dpo")
    with pytest.raises(ValueError, match=r"`tau` must be a number in \(0, inf\); got 0"):
        population_loss(ref, ref, p, 1.0, loss="discopop", tau=0)
    with pytest.raises(ValueError, match="`loss` 'nca_pair' has no option `label_smoothing`"):
        population_optimum(ref, p, 1.0, loss="nca_pair", label_smoothing=0.1)
    with pytest.raises(ValueError, match="`policy` must be positive on every outcome"):
        population_loss([1.0, 0.0], ref, p, 1.0, loss="hinge")


# ---------------------------------------------------------------------------
# population_optimum: agreement with the existing solvers
# ---------------------------------------------------------------------------


@pytest.mark.parametrize("mu_kind", ["ref", "vector", "joint"])
def test_sigmoid_optimum_is_dpo_optimum_and_ipo_is_ipo_optimum(rng, mu_kind):
    for n in (2, 4, 7):
        ref, p = _random_problem(rng, n)
        mu = _mu(mu_kind, ref, rng)
        for beta in (0.1, 2.0):
            for eps in (0.0, 0.3):
                np.testing.assert_array_equal(
                    population_optimum(ref, p, beta, mu=mu, label_smoothing=eps),
                    dpo_optimum(ref, p, beta, mu=mu, label_smoothing=eps),
                )
            np.testing.assert_allclose(
                population_optimum(ref, p, beta, loss="ipo", mu=mu),
                ipo_optimum(ref, p, beta, mu=mu),
                rtol=1e-11,
                atol=1e-15,
            )


# ---------------------------------------------------------------------------
# population_optimum against independent high-precision minimisation
# ---------------------------------------------------------------------------


def _mp_margin_optimum(name, o, ref, p, beta, x_start, joint=None):
    """High-precision reference for a margin loss.

    Recipe: the weights W_ij = (mu_ij + mu_ji) P_ij (mu = ref x ref unless `joint`) in
    50-digit arithmetic;
    the stationarity conditions sum_j W_ij phi'(x_i - x_j) - W_ji phi'(x_j - x_i) = 0 for
    i < n-1 with x_{n-1} = 0, phi' = mp.diff of phi written from the loss's definition
    (tests/preference/_mp_optima.py's ``loss_function``);
    solved by mp.findroot (multidimensional Newton) from the float answer; then
    pi = ref exp(x / beta) / Z.
    """
    n = len(ref)
    refm = [mp.mpf(float(v)) for v in ref]
    if joint is None:
        w = [[2 * refm[i] * refm[j] * mp.mpf(float(p[i, j])) for j in range(n)] for i in range(n)]
    else:
        jm = [[mp.mpf(float(v)) for v in row] for row in joint]
        w = [[(jm[i][j] + jm[j][i]) * mp.mpf(float(p[i, j])) for j in range(n)] for i in range(n)]
    phi = mpo.loss_function(name, o)

    def dphi(x):
        return mp.diff(phi, x)

    def eqs(*xs):
        x = [*xs, mp.mpf(0)]
        out = []
        for i in range(n - 1):
            s = mp.mpf(0)
            for j in range(n):
                if j != i:
                    s += w[i][j] * dphi(x[i] - x[j]) - w[j][i] * dphi(x[j] - x[i])
            # scale each equation by its outcome's total weight (entries span many decades)
            out.append(s / mp.fsum(w[i][j] + w[j][i] for j in range(n) if j != i))
        return out

    sol = mp.findroot(eqs, [mp.mpf(float(v)) for v in x_start[:-1]], tol=mp.mpf(10) ** -40)
    sol = [sol[i] for i in range(n - 1)] if isinstance(sol, mp.matrix) else [sol]
    x = [mp.mpf(s) for s in sol] + [mp.mpf(0)]
    b = mp.mpf(float(beta))
    un = [refm[i] * mp.exp(x[i] / b) for i in range(n)]
    z = mp.fsum(un)
    return np.array([float(u / z) for u in un])


def _scores(pi, ref, beta):
    x = beta * (np.log(pi) - np.log(ref))
    return x - x[-1]


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, opts",
    [
        ("robust", {"label_smoothing": 0.1}),
        ("exo_pair", {"epsilon": 1e-3}),
        ("exo_pair", {"epsilon": 0.2}),
        ("discopop", {"tau": 0.05}),
        ("discopop", {"tau": 1.0}),
        ("sigmoid", {"label_smoothing": 0.0}),
    ],
)
def test_margin_optima_against_mpmath(rng, name, opts):
    with mp.workdps(50):
        for n, tiny, beta in ((2, False, 0.5), (3, True, 1.0), (5, False, 0.3), (8, True, 2.0)):
            ref, p = _random_problem(rng, n, tiny=tiny, lo=0.15, hi=0.85)
            pi = population_optimum(ref, p, beta, loss=name, **opts)
            o = LOSSES[name].resolve_options(opts)
            ref_pi = _mp_margin_optimum(name, o, ref, p, beta, _scores(pi, ref, beta))
            tv = 0.5 * np.abs(pi - ref_pi).sum()
            assert tv < 1e-10, (name, n, tv)
        # a joint pair law with entries spanning many decades
        ref, p = _random_problem(rng, 6, lo=0.15, hi=0.85)
        joint = rng.dirichlet(np.ones(36)).reshape(6, 6) * np.exp(rng.uniform(-20, 0, (6, 6)))
        joint /= joint.sum()
        pi = population_optimum(ref, p, 0.7, loss=name, mu=joint, **opts)
        ref_pi = _mp_margin_optimum(name, o, ref, p, 0.7, _scores(pi, ref, 0.7), joint=joint)
        assert 0.5 * np.abs(pi - ref_pi).sum() < 1e-10, name


def _mp_separable_optimum(name, o, ref, w, beta, g_start):
    """High-precision reference for the per-outcome losses (every outcome compared).

    Recipe (50 digits): with c_i = sum_j W_ij, r_i = sum_j W_ji and the loss written as
    A(a) + B(b) from its definition, solve the KKT system
    c_i A'(g_i) + r_i B'(g_i) + lam ref_i e^{g_i} = 0 (i < n), sum_i ref_i e^{g_i} = 1
    for (g, lam) by mp.findroot (A', B' by mp.diff), started from the float answer.
    """
    n = len(ref)
    b = mp.mpf(float(beta))
    refm = [mp.mpf(float(v)) for v in ref]
    wm = [[mp.mpf(float(w[i, j])) for j in range(n)] for i in range(n)]
    c = [mp.fsum(wm[i]) for i in range(n)]
    r = [mp.fsum(wm[j][i] for j in range(n)) for i in range(n)]

    def sp(t):
        return mp.log1p(mp.exp(t))

    if name == "nca_pair":

        def A(a):
            return sp(-b * a) + sp(b * a) / 2

        def B(v):
            return sp(b * v) / 2

    elif name == "bco_pair":
        d = mp.mpf(o["delta"])

        def A(a):
            return sp(d - b * a)

        def B(v):
            return sp(b * v - d)

    else:
        k = 1 / (2 * b)

        def A(a):
            return (a - k) ** 2

        def B(v):
            return (v + k) ** 2

    def eqs(*z):
        g, lam = z[:n], z[n]
        out = [
            c[i] * mp.diff(A, g[i]) + r[i] * mp.diff(B, g[i]) + lam * refm[i] * mp.exp(g[i])
            for i in range(n)
        ]
        out.append(mp.fsum(refm[i] * mp.exp(g[i]) for i in range(n)) - 1)
        return out

    # lam from the first outcome's equation at the float answer
    g0 = [mp.mpf(float(v)) for v in g_start]
    lam0 = -(c[0] * mp.diff(A, g0[0]) + r[0] * mp.diff(B, g0[0])) / (refm[0] * mp.exp(g0[0]))
    sol = mp.findroot(eqs, [*g0, lam0], tol=mp.mpf(10) ** -40)
    g = [sol[i] for i in range(n)]
    return np.array([float(refm[i] * mp.exp(g[i])) for i in range(n)]), float(sol[n])


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, opts, betas",
    [
        ("nca_pair", {}, (0.3, 0.9)),
        ("bco_pair", {"delta": 0.0}, (0.3, 1.5)),
        ("bco_pair", {"delta": 0.4}, (0.5,)),
        ("sppo_hard", {}, (0.2, 1.0, 5.0)),
    ],
)
def test_per_outcome_optima_against_mpmath(rng, name, opts, betas):
    with mp.workdps(50):
        for n, tiny in ((2, False), (4, True), (6, False), (8, True)):
            ref, p = _random_problem(rng, n, tiny=tiny)
            w = 2 * np.outer(ref, ref) * p
            for beta in betas:
                pi = population_optimum(ref, p, beta, loss=name, **opts)
                ref_pi, lam = _mp_separable_optimum(
                    name, opts, ref, w, beta, np.log(pi) - np.log(ref)
                )
                assert lam >= 0  # the normalisation is the active constraint
                tv = 0.5 * np.abs(pi - ref_pi).sum()
                assert tv < 1e-10, (name, n, beta, tv)


def test_per_outcome_non_convex_case_raises_and_unseen_outcomes_take_the_rest():
    p = bradley_terry([1.0, 0.0])
    # pairs never identical, outcome 1 never chosen: nca's free minimisers carry mass
    # 0.5 * 2^(1/beta) < 1 for beta > 1 and the never-chosen outcome has no finite one
    with pytest.raises(ValueError, match=r"total mass 0\.629961 < 1.*never chosen.*non-convex"):
        population_optimum(
            [0.5, 0.5], [[0.5, 1.0], [0.0, 0.5]], 3.0, loss="nca_pair", mu=[[0, 0.5], [0.5, 0]]
        )
    # at beta = 1 the free minimisers carry mass E[2 p] = 1 exactly: e^{beta g0} = 2p
    pi = population_optimum([0.5, 0.5], p, 1.0, loss="nca_pair")
    p1 = p[0, 1]
    pw = np.array([0.25 + 0.5 * p1, 0.25 + 0.5 * (1 - p1)])  # p(y > ref) = E_ref P[y, .]
    np.testing.assert_allclose(pi, 0.5 * 2 * pw, rtol=1e-13)
    # an outcome never drawn takes the leftover mass 1 - S0
    ref = np.array([0.4, 0.4, 0.2])
    p3 = bradley_terry([1.0, 0.0, 0.5])
    mu = np.array([0.5, 0.5, 0.0])
    pi3 = population_optimum(ref, p3, 3.0, loss="nca_pair", mu=mu)
    w = (np.outer(mu, mu) * 2) * p3
    c, r = w.sum(1), w.sum(0)
    m0 = ref[:2] * (2 * c[:2] / (c[:2] + r[:2])) ** (1 / 3)  # e^{beta g0} = 2c/(c+r) here
    np.testing.assert_allclose(pi3[:2], m0, rtol=1e-13)
    assert pi3[2] == pytest.approx(1 - m0.sum(), rel=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize(
    "name, opts, beta",
    [("nca_pair", {}, 1.7), ("nca_pair", {}, 6.0), ("bco_pair", {"delta": -0.8}, 1.2)],
)
def test_per_outcome_optima_when_the_free_minimisers_lack_mass_against_mpmath(
    rng, name, opts, beta
):
    # S0 < 1 and every outcome compared: the non-convex case; the KKT point is checked at 50
    # digits (lam < 0 now: mass is pushed up), global optimality below by multi-start search
    with mp.workdps(50):
        for n, tiny in ((2, False), (3, True), (5, False), (8, True)):
            ref, p = _random_problem(rng, n, tiny=tiny)
            w = 2 * np.outer(ref, ref) * p
            pi = population_optimum(ref, p, beta, loss=name, **opts)
            ref_pi, lam = _mp_separable_optimum(name, opts, ref, w, beta, np.log(pi) - np.log(ref))
            assert lam < 0
            assert 0.5 * np.abs(pi - ref_pi).sum() < 1e-10, (name, n)


@pytest.mark.slow
def test_per_outcome_non_convex_optimum_is_global(rng):
    from scipy.optimize import minimize

    for n, beta in ((2, 3.0), (3, 2.0), (3, 8.0), (4, 4.0)):
        ref, p = _random_problem(rng, n)
        pi = population_optimum(ref, p, beta, loss="nca_pair")
        best = population_loss(pi, ref, p, beta, loss="nca_pair")

        def f(z, ref=ref, p=p, beta=beta):
            q = np.exp(z - z.max())
            return population_loss(q / q.sum(), ref, p, beta, loss="nca_pair")

        for _ in range(30):
            res = minimize(
                f,
                rng.normal(size=n) * 3,
                method="Nelder-Mead",
                options={"xatol": 1e-10, "fatol": 1e-14, "maxiter": 20000},
            )
            assert res.fun >= best - 1e-12


# ---------------------------------------------------------------------------
# hinge: linear program, checked by exhaustive integer search
# ---------------------------------------------------------------------------


def _hinge_value(x, w):
    d = x[:, None] - x[None, :]
    off = ~np.eye(len(x), dtype=bool)
    return float(np.sum(np.where(off, w * np.maximum(0.0, 1 - d), 0.0)))


def test_hinge_optimum_attains_the_exhaustive_integer_minimum(rng):
    # the LP's vertices are integral (network matrix), so the minimum over x in Z^n is the
    # minimum over R^n: search all integer scores in [-n, n]
    for n in (2, 3, 4):
        for _ in range(4):
            ref, p = _random_problem(rng, n)
            w = 2 * np.outer(ref, ref) * p
            best = min(
                _hinge_value(np.array([*x, 0.0]), w)
                for x in itertools.product(range(-n, n + 1), repeat=n - 1)
            )
            beta = 0.7
            pi = population_optimum(ref, p, beta, loss="hinge")
            x = _scores(pi, ref, beta)
            assert _hinge_value(x, w) == pytest.approx(best, rel=1e-12)
            np.testing.assert_allclose(x, np.round(x), atol=1e-9)  # integral scores


@pytest.mark.slow
def test_hinge_optimum_is_exact_with_reference_entries_of_1e_12(rng):
    # pairs with the tiny outcome weigh ~1e-13: HiGHS's tolerances cannot see them, the
    # steepest descent over x +- 1_S must; exhaustive integer search, summed in float64,
    # resolves loss differences of 1e-13 on a loss of order 1
    for _ in range(6):
        ref, p = _random_problem(rng, 5, tiny=True)
        w = 2 * np.outer(ref, ref) * p
        best = min(
            _hinge_value(np.array([*x, 0.0]), w) for x in itertools.product(range(-5, 6), repeat=4)
        )
        pi = population_optimum(ref, p, 0.7, loss="hinge")
        x = _scores(pi, ref, 0.7)
        assert _hinge_value(x, w) - best <= 4e-16
        # the set is exact too (it was refused: LP tolerances across 12 decades); it holds
        # the optimum and every exhaustive minimiser of the loss
        s = optimum_set(ref, p, 0.7, loss="hinge")
        lp = np.log(pi)
        odds = lp[:, None] - lp[None, :]
        assert np.all(s.low <= odds + 1e-9) and np.all(odds <= s.high + 1e-9)


def test_hinge_set_on_the_indifferent_pair_and_the_worked_example():
    s = optimum_set([0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]], 2.0, loss="hinge")
    assert (s.low[0, 1], s.high[0, 1], s.unique) == (-0.5, 0.5, False)
    # the documented choice: the smallest spread, here the reference itself
    np.testing.assert_allclose(
        population_optimum([0.5, 0.5], [[0.5, 0.5], [0.5, 0.5]], 2.0, loss="hinge"), [0.5, 0.5]
    )
    s = optimum_set([0.5, 0.5], bradley_terry([1.0, 0.0]), 2.0, loss="hinge")
    assert s.unique and s.low[0, 1] == 0.5


def test_optimum_set_of_smooth_losses_and_offline_support(rng):
    ref, p = _random_problem(rng, 5)
    pi = population_optimum(ref, p, 0.6, loss="exo_pair")
    s = optimum_set(ref, p, 0.6, loss="exo_pair")
    assert s.unique
    np.testing.assert_allclose(s.low, np.log(pi)[:, None] - np.log(pi)[None, :], atol=1e-12)
    # mu that never draws outcomes 3 and 4: their mass is free for every margin loss
    mu = np.array([0.3, 0.3, 0.4, 0.0, 0.0])
    for name in ("sigmoid", "robust", "ipo", "hinge", "exo_pair", "discopop"):
        s = optimum_set(ref, p, 0.6, loss=name, mu=mu)
        assert not s.unique
        assert np.all(np.isinf(s.low[3, :3])) and np.all(np.isinf(s.high[:3, 4]))
        assert np.all(np.isfinite(s.low[:3, :3]))
        with pytest.raises(ValueError, match="do not connect the support of `ref`"):
            population_optimum(ref, p, 0.6, loss=name, mu=mu)


def test_optimum_equals_optimal_policy_under_bradley_terry_for_sigmoid_only_in_general(rng):
    ref, r = rng.dirichlet(np.ones(4)), rng.normal(size=4)
    p = bradley_terry(r)
    star = optimal_policy(ref, r, 0.5)
    np.testing.assert_allclose(population_optimum(ref, p, 0.5), star, rtol=1e-12)
    for name in ("hinge", "ipo", "exo_pair", "discopop", "robust"):
        opts = {"label_smoothing": 0.1} if name == "robust" else {}
        assert 0.5 * np.abs(population_optimum(ref, p, 0.5, loss=name, **opts) - star).sum() > 1e-3


def test_sorting_and_apo_losses_refuse_with_a_reason():
    p = bradley_terry([1.0, 0.0])
    for name, msg in (
        ("aot", "quantile coupling"),
        ("aot_pair", "quantile coupling"),
        ("apo_zero", "not convex in the policy"),
        ("apo_down", "not convex in the policy"),
    ):
        with pytest.raises(ValueError, match=msg):
            population_optimum([0.5, 0.5], p, 1.0, loss=name)


def test_robust_refuses_pairs_outside_the_noise_band():
    p = bradley_terry([3.0, 0.0])  # P = 0.9526 > 1 - 0.1
    with pytest.raises(ValueError, match=r"drawn pair \(0, 1\) the probability 0\.952574"):
        population_optimum([0.5, 0.5], p, 1.0, loss="robust", label_smoothing=0.1)
    # inside the band the robust optimum de-noises: sigma(x*) = (P - e) / (1 - 2 e)
    p = bradley_terry([1.0, 0.0])
    e = 0.1
    pi = population_optimum([0.5, 0.5], p, 1.0, loss="robust", label_smoothing=e)
    target = (p[0, 1] - e) / (1 - 2 * e)
    assert pi[0] == pytest.approx(target, rel=1e-13)


def test_robust_at_the_edge_of_the_noise_band_is_solved():
    # At P = 1 - eps the de-noised probability is 1: the pair's population term is
    # sp(-x), bounded below, and where the other pairs hold the ratio (a cycle) the loss
    # has a finite minimiser. Dyadic eps and P, so that P = 1 - eps also in exact arithmetic.
    from scipy.optimize import minimize, root

    e, beta = 0.25, 0.5
    p = np.array([[0.5, 0.75, 0.625], [0.25, 0.5, 0.6875], [0.375, 0.3125, 0.5]])
    ref = np.array([0.5, 0.25, 0.25])
    pi = population_optimum(ref, p, beta, loss="robust", label_smoothing=e)
    assert np.all(np.isfinite(pi)) and pi.min() > 0
    # 1. the stationarity conditions solved by damped Newton in 60-digit mpmath (the robust
    # phi' written from TRL's formula, tests/preference/_mp_optima.py)
    want = mpo.policy("robust", {"label_smoothing": e}, ref, p, beta)
    np.testing.assert_allclose(pi, want, rtol=1e-12)

    # 2. BFGS on the population loss written here from TRL's per-pair robust loss
    # ((1 - e) sp(-x) - e sp(x)) / (1 - 2 e), x = beta (g_w - g_l), W_ij = 2 ref_i ref_j P_ij
    def loss(z):
        g = np.append(z, 0.0) - np.log(np.sum(ref * np.exp(np.append(z, 0.0))))
        x = beta * (g[:, None] - g[None, :])
        ell = ((1 - e) * np.logaddexp(0, -x) - e * np.logaddexp(0, x)) / (1 - 2 * e)
        w = 2 * np.outer(ref, ref) * p
        np.fill_diagonal(w, 0.0)
        return float(np.sum(w * ell))

    def grad(z):  # d loss / d g_k for g = (z, 0) (the loss is shift-invariant in g)
        g = np.append(z, 0.0)
        x = beta * (g[:, None] - g[None, :])
        d = (-(1 - e) / (1 + np.exp(x)) - e / (1 + np.exp(-x))) / (1 - 2 * e)  # ell'(x)
        w = 2 * np.outer(ref, ref) * p
        np.fill_diagonal(w, 0.0)
        return (beta * (np.sum(w * d, axis=1) - np.sum(w.T * d.T, axis=1)))[:-1]

    res = minimize(loss, np.zeros(2), jac=grad, method="BFGS", options={"gtol": 1e-14})
    z = root(grad, res.x, method="hybr", options={"xtol": 1e-15}).x  # polished
    t = ref * np.exp(np.append(z, 0.0))
    np.testing.assert_allclose(pi, t / t.sum(), rtol=1e-11)
    assert loss(np.log(pi[:2] / ref[:2]) - np.log(pi[2] / ref[2])) <= res.fun + 1e-15
    # the same at the lower end (the pair read the other way round)
    pi_t = population_optimum(
        ref[[1, 0, 2]], p[np.ix_([1, 0, 2], [1, 0, 2])], beta, loss="robust", label_smoothing=e
    )
    np.testing.assert_allclose(pi_t, pi[[1, 0, 2]], rtol=1e-12)
    # one pair only, at the edge: no finite minimiser; the limit, as DPO's deterministic one
    two = population_optimum(
        [0.5, 0.5], [[0.5, 0.75], [0.25, 0.5]], 1.0, loss="robust", label_smoothing=e
    )
    np.testing.assert_array_equal(two, [1.0, 0.0])
    # beyond the edge by one rounding: unbounded below, refused
    up = np.nextafter(0.75, 1.0)
    with pytest.raises(ValueError, match="unbounded below"):
        population_optimum(
            [0.5, 0.5], [[0.5, up], [1 - up, 0.5]], 1.0, loss="robust", label_smoothing=e
        )


# ---------------------------------------------------------------------------
# where each loss lands: Bradley-Terry, non-BT, deterministic, offline support
# ---------------------------------------------------------------------------

MARGIN = {
    "sigmoid": {},
    "hinge": {},
    "ipo": {},
    "robust": {"label_smoothing": 0.05},
    "exo_pair": {},
    "discopop": {},
}


def _pair_minimiser(name, opts, p):
    """The per-pair minimiser x* of P phi(x) + (1 - P) phi(-x), from the papers' formulas
    (discopop, not convex: the best point of a fine grid of the registry's values, refined by
    bisection on the registry's gradient)."""
    if name == "sigmoid":
        return np.log(p / (1 - p))
    if name == "hinge":
        return 1.0
    if name == "robust":
        e = opts["label_smoothing"]
        q = (p - e) / (1 - 2 * e)
        return np.log(q / (1 - q))
    if name == "exo_pair":
        e = 1e-3
        return (2 * p - 1) * np.log((1 - e) / e)
    row = LOSSES[name]

    def dl(x):
        return (
            p * row.gradient(x, 0.0, 0.0, 0.0, 1.0)[0]
            - (1 - p) * row.gradient(-x, 0.0, 0.0, 0.0, 1.0)[0]
        )

    grid = np.linspace(-20, 20, 40001)
    vals = p * row.value(grid, 0.0, 0.0, 0.0, 1.0) + (1 - p) * row.value(-grid, 0.0, 0.0, 0.0, 1.0)
    k = int(np.argmin(vals))
    lo, hi = grid[k - 1], grid[k + 1]
    assert dl(lo) < 0 < dl(hi)
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if dl(mid) < 0 else (lo, mid)
    return 0.5 * (lo + hi)


@pytest.mark.parametrize("beta", [0.2, 1.0, 4.0])
def test_two_outcomes_every_margin_loss_is_pi_star_at_a_rescaled_beta(beta):
    # margin losses fix x* = beta (g1 - g2) per pair, independent of beta: on two outcomes the
    # optimum is pi*_{beta'} with beta' = beta * (r1 - r2) / x*, (IPO: x* = (P - 1/2) beta / tau)
    r = np.array([1.3, 0.0])
    p = bradley_terry(r)[0, 1]
    rows = compare_losses([0.5, 0.5], bradley_terry(r), beta, reward=r, losses=MARGIN)
    for row in rows:
        if row.loss == "ipo":
            expected = beta * r[0] / (p - 0.5)
        else:
            expected = beta * r[0] / _pair_minimiser(row.loss, row.options, p)
        assert row.status == "unique"
        assert row.beta_equivalent == pytest.approx(expected, rel=1e-9), row.loss
    sig = rows[0]
    assert sig.beta_equivalent == pytest.approx(beta, rel=1e-12) and sig.tv_to_target < 1e-15


def test_more_outcomes_only_dpo_lands_on_pi_star_under_bradley_terry():
    ref = np.array([0.2, 0.3, 0.1, 0.4])
    r = np.array([1.7, 0.0, -0.6, 0.4])
    losses = {**MARGIN, "nca_pair": {}, "bco_pair": {}, "sppo_hard": {}}
    rows = {
        row.loss: row for row in compare_losses(ref, bradley_terry(r), 0.5, reward=r, losses=losses)
    }
    assert rows["sigmoid"].beta_equivalent == pytest.approx(0.5, rel=1e-12)
    assert rows["sigmoid"].tv_to_target < 1e-14
    for name in losses:
        if name != "sigmoid":
            assert np.isnan(rows[name].beta_equivalent), name
            assert rows[name].tv_to_target > 1e-3, name
    # hinge's implied reward is integral: the rewards' order, not their gaps
    x = _scores(rows["hinge"].policy, ref, 0.5)
    np.testing.assert_allclose(x - x.min(), np.round(x - x.min()), atol=1e-12)


def test_deterministic_preferences_dpo_ignores_beta_ipo_does_not():
    # Azar et al. (2023), section 4.2: with P in {0, 1} the DPO optimum is the deterministic
    # limit for every beta, while IPO's stays regularised: pi_1 = sigma((p1 - p2) / tau)
    ref, p = [0.5, 0.5], [[0.5, 1.0], [0.0, 0.5]]
    for beta in (0.1, 1.0, 10.0):
        np.testing.assert_array_equal(population_optimum(ref, p, beta), [1.0, 0.0])
        np.testing.assert_array_equal(population_optimum(ref, p, beta, loss="discopop"), [1.0, 0.0])
        ipo = population_optimum(ref, p, beta, loss="ipo")
        assert ipo[0] == pytest.approx(1 / (1 + np.exp(-0.5 / beta)), rel=1e-14)
        # hinge: any margin >= 1 is optimal; the documented choice is the smallest
        s = optimum_set(ref, p, beta, loss="hinge")
        assert s.low[0, 1] == pytest.approx(1 / beta) and s.high[0, 1] == np.inf
        hinge = population_optimum(ref, p, beta, loss="hinge")
        assert hinge[0] == pytest.approx(1 / (1 + np.exp(-1 / beta)), rel=1e-14)
        exo = population_optimum(ref, p, beta, loss="exo_pair")
        assert exo[0] == pytest.approx(1 / (1 + np.exp(-np.log(999) / beta)), rel=1e-12)
    with pytest.raises(ValueError, match="de-noised probability"):
        population_optimum(ref, p, 1.0, loss="robust", label_smoothing=0.1)
    ipo_tv = [population_optimum(ref, p, b, loss="ipo")[0] for b in (0.1, 1.0, 10.0)]
    assert ipo_tv[0] > ipo_tv[1] > ipo_tv[2] > 0.5


def test_non_bradley_terry_preferences_give_different_optima_per_loss():
    cycle = np.array([[0.5, 0.9, 0.2], [0.1, 0.5, 0.7], [0.8, 0.3, 0.5]])
    ref = np.array([0.3, 0.3, 0.4])
    rows = compare_losses(ref, cycle, 1.0, losses={**MARGIN, "sppo_hard": {}})
    by = {row.loss: row for row in rows}
    assert by["sigmoid"].tv_to_target == 0.0  # the target is the DPO optimum itself
    for name in ("ipo", "robust", "exo_pair", "discopop", "sppo_hard"):
        assert by[name].tv_to_target > 1e-3, name
        assert np.isnan(by[name].expected_reward) and by[name].kl_to_ref > 0


def test_offline_support_rows():
    ref = np.array([0.3, 0.3, 0.2, 0.2])
    r = np.array([1.0, 0.0, 0.5, 2.0])
    mu = np.array([0.5, 0.5, 0.0, 0.0])
    rows = {
        row.loss: row
        for row in compare_losses(
            ref,
            bradley_terry(r),
            0.5,
            reward=r,
            mu=mu,
            losses={"sigmoid": {}, "hinge": {}, "nca_pair": {}, "sppo_hard": {}},
        )
    }
    assert rows["sigmoid"].policy is None and "do not connect" in rows["sigmoid"].status
    assert rows["hinge"].policy is None
    # nca: the compared outcomes keep their free minimisers e^{beta g0} = 2c / (c + r) and the
    # never-drawn outcomes share the rest, in proportion to ref (any split is optimal)
    w = 2 * np.outer(mu, mu) * bradley_terry(r)
    c, rj = w.sum(1)[:2], w.sum(0)[:2]
    m0 = ref[:2] * (2 * c / (c + rj)) ** (1 / 0.5)
    assert m0.sum() < 1
    np.testing.assert_allclose(rows["nca_pair"].policy[:2], m0, rtol=1e-13)
    np.testing.assert_allclose(rows["nca_pair"].policy[2:], (1 - m0.sum()) / 2, rtol=1e-12)
    # the best response (outcome 3) is never drawn: every finite-data optimum misses it
    assert rows["sppo_hard"].expected_reward < optimal_policy(ref, r, 0.5) @ r
