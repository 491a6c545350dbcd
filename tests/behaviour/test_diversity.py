"""Tests of klpolicy.diversity: the entropy decomposition, mode collapse, distinct samples."""

import itertools
import re

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from klpolicy.diversity import (
    best_of_n_diversity,
    diversity_curve,
    entropy_slope,
    expected_distinct,
    expected_distinct_sequences,
    kl_decomposition,
    max_entropy_objective,
    optimal_effective_support,
    optimal_entropy,
)
from scipy.special import logsumexp, softmax

from klpolicy import kl_divergence, objective, optimal_kl, optimal_policy, soft_value
from klpolicy.best_of_n import best_of_n_kl, best_of_n_policy
from klpolicy.core.divergences import entropy

from .. import _mpref as R


# mpmath recipe: pi*(y) = ref(y) exp(r(y)/beta) / sum(...) from tests/_mpref (every float
# converted exactly by mp.mpf, 400 digits); H = -sum pi log pi; dH/dbeta by mp.diff at the
# conftest's 50 digits.
def mp_opt_entropy(ref, r, beta):
    return -mp.fsum(x * mp.log(x) for x in R.optimal_policy(ref, r, mp.mpf(beta)) if x > 0)


# --- the decomposition and maximum-entropy RL ---------------------------------


def test_kl_decomposition_identity_and_uniform_reference():
    pi = np.array([[0.9, 0.1, 0.0], [0.2, 0.3, 0.5]])
    ref = np.array([0.5, 0.25, 0.25])
    d = kl_decomposition(pi, ref)
    np.testing.assert_allclose(d.cross_entropy - d.entropy, d.kl, rtol=1e-14)
    np.testing.assert_allclose(d.kl, kl_divergence(pi, ref), rtol=0, atol=0)
    u = kl_decomposition(pi, np.full(3, 1 / 3))
    np.testing.assert_allclose(u.cross_entropy, np.log(3), rtol=1e-15)
    np.testing.assert_allclose(u.kl, np.log(3) - entropy(pi), rtol=1e-14)
    off = kl_decomposition([0.5, 0.5], [1.0, 0.0])
    assert off.kl == np.inf and off.cross_entropy == np.inf
    assert float(off.entropy) == pytest.approx(np.log(2), rel=1e-15)


def test_max_entropy_objective_is_kl_objective_with_uniform_reference(rng):
    r = np.array([1.0, 0.3, -0.5, 2.0])
    beta = 0.7
    n = r.size
    u = np.full(n, 1 / n)
    pis = rng.dirichlet(np.ones(n), size=50)
    got = max_entropy_objective(pis, r, beta)
    np.testing.assert_allclose(got, objective(pis, u, r, beta) + beta * np.log(n), rtol=1e-13)
    # the maximiser is softmax(r / beta) and the maximum beta * logsumexp(r / beta)
    star = optimal_policy(u, r, beta)
    np.testing.assert_allclose(star, softmax(r / beta), rtol=1e-14)
    best = float(max_entropy_objective(star, r, beta))
    assert best == pytest.approx(beta * logsumexp(r / beta), rel=1e-14)
    assert best == pytest.approx(float(soft_value(u, r, beta)) + beta * np.log(n), rel=1e-14)
    assert np.all(got <= best + 1e-14)


# --- entropy of the optimum ------------------------------------------------------

CASES = [
    ([0.25, 0.25, 0.25, 0.25], [1.0, 0.0, 0.0, 0.0], 1.0),
    ([0.98, 0.01, 0.01], [0.0, 1.0, 0.0], 0.22),
    ([0.5, 0.3, 0.2], [2.0, -1.0, 0.5], 0.05),
    ([1e-300, 0.5, 0.5 - 1e-300], [10.0, 0.0, 1.0], 0.01),
    ([0.1, 0.2, 0.7], [1.0, 2.0, 3.0], 1e4),
]


@pytest.mark.parametrize(("ref", "r", "beta"), CASES)
def test_optimal_entropy_matches_mpmath(ref, r, beta):
    want = float(mp_opt_entropy(ref, r, beta))
    assert float(optimal_entropy(ref, r, beta)) == pytest.approx(want, rel=1e-12)
    assert float(optimal_effective_support(ref, r, beta)) == pytest.approx(np.exp(want), rel=1e-12)


@pytest.mark.parametrize(("ref", "r", "beta"), CASES[:3] + CASES[4:])
def test_entropy_slope_matches_mpmath_derivative(ref, r, beta):
    want = float(mp.diff(lambda b: mp_opt_entropy(ref, r, b), mp.mpf(beta)))
    got = float(entropy_slope(ref, r, beta))
    assert got == pytest.approx(want, rel=1e-9, abs=1e-300)


def test_limits_best_reward_set_and_reference():
    ref = np.array([0.2, 0.3, 0.5])
    r = np.array([1.0, 1.0, 0.0])
    # beta -> 0: ref restricted to the best set, renormalised: (0.4, 0.6)
    h0 = -(0.4 * np.log(0.4) + 0.6 * np.log(0.6))
    assert float(optimal_entropy(ref, r, 0.0)) == pytest.approx(h0, rel=1e-14)
    # approach: the gap to the limit is O(exp(-1/beta))
    assert abs(float(optimal_entropy(ref, r, 0.02)) - h0) < 1e-15
    assert abs(float(optimal_entropy(ref, r, 0.1)) - h0) < 1e-3
    # beta -> inf: the reference
    h_ref = float(entropy(ref))
    assert float(optimal_entropy(ref, r, np.inf)) == pytest.approx(h_ref, rel=1e-15)
    assert abs(float(optimal_entropy(ref, r, 1e6)) - h_ref) < 1e-6
    # unique best reward: the entropy collapses to 0, one effective outcome
    # (to rounding: the greedy point mass is 1 within an ulp)
    assert abs(float(optimal_entropy(ref, [0.0, 1.0, 0.0], 0.0))) < 1e-15
    assert float(optimal_effective_support(ref, [0.0, 1.0, 0.0], 0.0)) == pytest.approx(1.0)
    assert float(entropy_slope(ref, r, 0.0)) == 0.0 and float(entropy_slope(ref, r, np.inf)) == 0.0


@pytest.mark.slow
@given(st.lists(st.floats(-3, 3), min_size=2, max_size=6))
def test_entropy_increases_with_beta_for_uniform_reference(rewards):
    r = np.asarray(rewards)
    n = r.size
    betas = np.concatenate([[0.0], np.geomspace(1e-2, 1e3, 40), [np.inf]])
    c = diversity_curve(np.full(n, 1 / n), r, beta=betas)
    assert np.all(np.diff(c.entropy) >= -1e-12)
    assert np.all(entropy_slope(np.full(n, 1 / n), r, betas[1:-1, None]) >= 0)
    # and with a uniform reference H = log n - KL exactly
    np.testing.assert_allclose(c.entropy, np.log(n) - c.kl, rtol=0, atol=1e-12)


def test_nonmonotone_counterexample():
    """ref far from uniform, reward on a rare outcome: H rises, then falls, as beta grows."""
    ref, r = [0.98, 0.01, 0.01], [0.0, 1.0, 0.0]
    h = lambda b: float(optimal_entropy(ref, r, b))  # noqa: E731
    assert abs(h(0.0)) < 1e-15
    assert h(0.22) == pytest.approx(float(mp_opt_entropy(ref, r, 0.22)), rel=1e-12)
    assert h(0.22) > 0.72
    assert h(np.inf) == pytest.approx(0.11190205689093, rel=1e-12)
    assert h(0.22) > h(1.0) > h(10.0) > h(np.inf)  # decreasing on the right
    assert h(0.05) < h(0.1) < h(0.22)  # increasing on the left
    assert float(entropy_slope(ref, r, 0.1)) > 0 > float(entropy_slope(ref, r, 1.0))
    # the KL still falls monotonically: only the entropy turns
    kls = [float(optimal_kl(ref, r, b)) for b in (0.05, 0.1, 0.22, 1.0, 10.0)]
    assert all(a > b for a, b in itertools.pairwise(kls))


def test_diversity_curve_by_kl_matches_by_beta():
    ref, r = np.array([0.5, 0.3, 0.2]), np.array([0.0, 1.0, 2.0])
    by_kl = diversity_curve(ref, r, kl=[0.0, 0.1, 0.5])
    np.testing.assert_allclose(by_kl.kl, [0.0, 0.1, 0.5], rtol=1e-12, atol=1e-15)
    by_beta = diversity_curve(ref, r, beta=by_kl.beta)
    np.testing.assert_allclose(by_beta.entropy, by_kl.entropy, rtol=1e-14)
    np.testing.assert_allclose(by_beta.effective_support, np.exp(by_beta.entropy), rtol=1e-15)
    assert diversity_curve(ref, r, beta=2.0).entropy.shape == ()


# --- best-of-n at equal KL ----------------------------------------------------------


def test_best_of_n_diversity_by_hand():
    # ref (0.5, 0.3, 0.2), rewards (0, 1, 2), n = 2: the best of two draws has law
    # P(2) = 1 - 0.8^2, P(1) = 0.8^2 - 0.5^2, P(0) = 0.5^2
    ref, r = [0.5, 0.3, 0.2], [0.0, 1.0, 2.0]
    law = np.array([0.25, 0.64 - 0.25, 1 - 0.64])
    d = best_of_n_diversity(ref, r, [1, 2])
    h = -np.sum(law * np.log(law))
    kl = float(np.sum(law * np.log(law / np.array(ref))))
    assert d.best_of_n_entropy[1] == pytest.approx(h, rel=1e-14)
    assert d.kl[1] == pytest.approx(kl, rel=1e-13)
    assert float(optimal_kl(ref, r, d.beta[1])) == pytest.approx(kl, rel=1e-12)
    assert d.optimal_entropy[1] == pytest.approx(
        float(mp_opt_entropy(ref, r, d.beta[1])), rel=1e-12
    )
    # n = 1 is the reference for both
    assert d.beta[0] == np.inf
    assert d.best_of_n_entropy[0] == pytest.approx(float(entropy(ref)), rel=1e-15)
    assert d.optimal_entropy[0] == pytest.approx(float(entropy(ref)), rel=1e-15)
    np.testing.assert_allclose(d.best_of_n_effective_support, np.exp(d.best_of_n_entropy))


def test_best_of_n_diversity_equal_for_uniform_reference_and_two_levels(rng):
    ns = np.array([1, 2, 3, 8, 32])
    r = rng.normal(size=6)
    d = best_of_n_diversity(np.full(6, 1 / 6), r, ns)
    np.testing.assert_allclose(d.best_of_n_entropy, d.optimal_entropy, rtol=1e-11)
    np.testing.assert_allclose(d.best_of_n_entropy, np.log(6) - d.kl, rtol=1e-12)
    ref2 = rng.dirichlet(np.ones(5))
    d2 = best_of_n_diversity(ref2, [0.0, 1.0, 1.0, 0.0, 1.0], ns)
    np.testing.assert_allclose(d2.best_of_n_entropy, d2.optimal_entropy, rtol=1e-10)
    # and matches the best-of-n module directly
    for k, n in enumerate(ns):
        assert d2.kl[k] == pytest.approx(float(best_of_n_kl(ref2, [0, 1, 1, 0, 1], n)), rel=1e-15)
        assert d2.best_of_n_entropy[k] == pytest.approx(
            float(entropy(best_of_n_policy(ref2, [0, 1, 1, 0, 1], n))), rel=1e-14
        )


def test_best_of_n_diversity_differs_for_a_general_reference():
    ref = 1 / np.arange(1, 11)
    ref /= ref.sum()
    r = np.random.default_rng(0).normal(size=10)
    d = best_of_n_diversity(ref, r, [2, 4, 16, 64])
    # numbers quoted in docs/derivations/diversity.md, section 4
    assert d.best_of_n_entropy[0] < d.optimal_entropy[0] - 0.1
    assert d.best_of_n_entropy[2] > d.optimal_entropy[2]
    assert d.kl.shape == (4,) and d.n.tolist() == [2, 4, 16, 64]


# --- distinct samples ------------------------------------------------------------


def brute_distinct(p, k):
    """E[#distinct] by enumerating all k-tuples of outcomes."""
    idx = np.flatnonzero(np.asarray(p) > 0)
    total = 0.0
    for tup in itertools.product(idx, repeat=k):
        total += np.prod([p[i] for i in tup]) * len(set(tup))
    return total


@pytest.mark.parametrize("k", [1, 2, 3, 5])
def test_expected_distinct_brute_force(k):
    p = np.array([0.5, 0.25, 0.125, 0.125, 0.0])
    assert float(expected_distinct(p, k)) == pytest.approx(brute_distinct(p, k), rel=1e-14)


def test_expected_distinct_tiny_probabilities_against_mpmath():
    # mpmath recipe: sum_y 1 - (1 - mpf(p_y))**k at dps 50
    p = [1e-20, 1e-300, 5e-324, 1.0 - 1e-20]
    for k in (1, 1000, 10**12):
        want = mp.fsum(1 - (1 - mp.mpf(x)) ** k for x in p)
        assert float(expected_distinct(p, k)) == pytest.approx(float(want), rel=1e-14)
    # a thousand outcomes of 1e-17: each is seen with probability ~1e-11 in 1e6 draws,
    # which the naive 1 - (1 - p)**k rounds to 0 (1 - 1e-17 == 1.0)
    q = np.array([1e-17] * 1000 + [1.0 - 1e-14])
    k = 10**6
    want = mp.fsum(1 - (1 - mp.mpf(x)) ** k for x in q)
    got = float(expected_distinct(q, k))
    assert got - 1.0 == pytest.approx(float(want - 1), rel=1e-6)
    assert sum(1 - (1 - x) ** k for x in q) == 1.0


def make_tree(rng, vocab, length):
    return [rng.dirichlet(np.ones(vocab), size=(vocab,) * t) for t in range(length)]


def tree_joint(conds):
    j = conds[0]
    for c in conds[1:]:
        j = j[..., None] * c
    return j


def test_expected_distinct_sequences_brute_force(rng):
    conds = make_tree(rng, 2, 3)
    conds[1][0] = [1.0, 0.0]  # a zero branch
    joint = tree_joint(conds).ravel()
    for k in (1, 2, 4):
        got = expected_distinct_sequences(conds, k)
        assert got == pytest.approx(brute_distinct(joint, k), rel=1e-13)


def distinct_variance(p, k):
    q = -np.expm1(k * np.log1p(-p))
    a = (1 - p) ** k
    both = 1 - a[:, None] - a[None, :] + np.clip(1 - p[:, None] - p[None, :], 0, None) ** k
    cov = both - q[:, None] * q[None, :]
    np.fill_diagonal(cov, q * (1 - q))
    return float(cov.sum())


@pytest.mark.slow
def test_expected_distinct_sequences_monte_carlo(rng):
    conds = make_tree(np.random.default_rng(7), 3, 3)
    joint = tree_joint(conds).ravel()
    k, reps = 6, 4000
    exact = expected_distinct_sequences(conds, k)
    var = distinct_variance(joint, k)
    # brute-force check of the variance formula on a small case
    p_small = np.array([0.5, 0.3, 0.2])
    second = sum(
        np.prod([p_small[i] for i in t]) * len(set(t)) ** 2
        for t in itertools.product(range(3), repeat=3)
    )
    assert distinct_variance(p_small, 3) == pytest.approx(
        second - brute_distinct(p_small, 3) ** 2, rel=1e-12
    )
    gen = np.random.default_rng(20261130)
    counts = np.empty(reps)
    for i in range(reps):
        seqs = set()
        for _ in range(k):
            prefix = ()
            for c in conds:
                prefix = (*prefix, int(gen.choice(3, p=c[prefix])))
            seqs.add(prefix)
        counts[i] = len(seqs)
    assert abs(counts.mean() - exact) < 4.5 * np.sqrt(var / reps)


def test_distinct_under_optimal_policy_collapses():
    conds = make_tree(np.random.default_rng(3), 2, 3)
    joint = tree_joint(conds).ravel()
    reward = np.arange(joint.size, dtype=float)
    k = 8
    d = [float(expected_distinct(optimal_policy(joint, reward, b), k)) for b in (np.inf, 1.0, 0.0)]
    assert d[0] == pytest.approx(expected_distinct_sequences(conds, k), rel=1e-14)
    assert d[0] > d[1] > d[2]
    assert d[2] == pytest.approx(1.0, rel=1e-15)


# --- bad inputs ------------------------------------------------------------------

GOOD = [np.array([0.5, 0.5]), np.array([[1.0, 0.0], [0.5, 0.5]])]
BAD = [
    (lambda: expected_distinct([0.5, 0.5], 0), "`k` must be an integer >= 1; got 0"),
    (lambda: expected_distinct([0.5, 0.5], 1.5), "`k` must be an integer >= 1; got 1.5"),
    (lambda: expected_distinct([0.5, 0.6], 2), "`p` must sum to 1 along axis -1; it sums to 1.1"),
    (
        lambda: expected_distinct_sequences(np.array([0.5, 0.5]), 2),
        "`conditionals` must be a non-empty list of arrays, conditionals[t] of shape (V,)*(t+1); "
        "got ndarray",
    ),
    (
        lambda: expected_distinct_sequences([], 2),
        "`conditionals` must be a non-empty list of arrays; got an empty list",
    ),
    (
        lambda: expected_distinct_sequences([GOOD[0], np.array([[1.0, 0.0]])], 2),
        "`conditionals[1]` must have shape (2, 2) (vocabulary 2, position 1); got shape (1, 2)",
    ),
    (
        lambda: expected_distinct_sequences([GOOD[0], np.array([[1.0, 0.0], [0.7, 0.7]])], 2),
        "`conditionals[1]` must sum to 1 along axis -1; row (1,) sums to 1.4",
    ),
    (lambda: diversity_curve([0.5, 0.5], [1.0, 0.0]), "give exactly one of `beta` and `kl`"),
    (
        lambda: diversity_curve([0.5, 0.5], [1.0, 0.0], beta=[1.0], kl=[0.1]),
        "give exactly one of `beta` and `kl`",
    ),
    (
        lambda: diversity_curve([[0.5, 0.5]], [1.0, 0.0], beta=[1.0]),
        "`ref` must be one problem's 1-D array (shape (V,)); got shape (1, 2)",
    ),
    (
        lambda: diversity_curve([0.5, 0.5], [1.0, 0.0], beta=[1.0, -2.0]),
        "`beta` must be non-negative; found -2 at index (1,)",
    ),
    (
        lambda: diversity_curve([0.5, 0.5], [1.0, 0.0], beta=-1.0),
        "`beta` must be non-negative; found -1",
    ),
    (
        lambda: diversity_curve([0.5, 0.5], [1.0, 0.0], beta=[[1.0, np.nan]]),
        "`beta` must not be NaN; found nan at index (0, 1)",
    ),
    (
        lambda: diversity_curve([0.5, 0.5], [1.0, 0.0], beta="big"),
        "`beta` must be an array of real numbers; got 'big'",
    ),
    (
        lambda: diversity_curve([0.5, 0.5], [1.0, 0.0], beta=[]),
        "`beta` must not be empty; got shape (0,)",
    ),
    (
        lambda: diversity_curve([0.5, 0.5], [1.0, 0.0], kl=[1.0]),
        "`kl` = 1 is above the largest KL reachable",
    ),
    (
        lambda: max_entropy_objective([0.5, 0.5], [1.0, 0.0], np.inf),
        "`beta` must be a non-negative finite number; got inf",
    ),
    (
        lambda: max_entropy_objective([0.5, 0.5], [1.0, 0.0], -1.0),
        "`beta` must be a non-negative finite number; got -1.0",
    ),
    (lambda: optimal_entropy([0.5, 0.5], [1.0, np.nan], 1.0), "`reward` must be finite; found nan"),
    (lambda: entropy_slope([0.5, 0.5], [1.0, 0.0], -1.0), "`beta` must be non-negative; found -1"),
    (
        lambda: best_of_n_diversity([[0.5, 0.5]], [1.0, 0.0], 2),
        "`ref` must be one problem's 1-D array (shape (V,)); got shape (1, 2)",
    ),
    (
        lambda: best_of_n_diversity([0.5, 0.5], [1.0, 0.0], [2, 0]),
        "`ns` must be an integer >= 1; found 0 at index (1,)",
    ),
    (
        lambda: kl_decomposition([0.5, 0.5], [0.2, 0.2, 0.6]),
        "`ref` must have the same size as `pi` along the probability axis; got 3 and 2",
    ),
]


@pytest.mark.parametrize(("call", "msg"), BAD)
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        call()
