"""Tests of klpolicy.sequences: token trees, soft Bellman, per-token KL, estimates, diagnostics."""

import math
import re

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from klpolicy import kl_divergence, max_kl, optimal_kl, optimal_policy, soft_value
from klpolicy.sequences import (
    OPENING_SHARE,
    STYLE_EVENNESS,
    VOCABULARY_TOP_SHARE,
    from_joint,
    joint,
    marginals,
    per_token_kl,
    reward_ceiling,
    sample,
    sampled_kl,
    sequence_kl_moments,
    soft_bellman,
    token_kl_map,
    token_kl_profile,
    token_logprobs,
)

SIZES = [(2, 1), (2, 3), (3, 2), (3, 4), (5, 3), (4, 4)]


def random_tree(rng, V, T, *, zeros=False):
    """Dirichlet conditionals; with ``zeros`` about a quarter of the entries are zero."""
    tree = []
    for t in range(T):
        c = rng.dirichlet(np.ones(V), size=(V,) * t)
        if zeros:
            cut = rng.random(c.shape) < 0.25
            cut[..., 0] &= False  # keep token 0 in every row's support
            c = np.where(cut, 0.0, c)
            c = c / c.sum(axis=-1, keepdims=True)
        tree.append(c)
    return tree


def sequence_return(reward, token_rewards):
    """R = r_0 + (r_1 + (... + (r_{T-1} + reward))) on the full (V,)*T grid."""
    T = reward.ndim
    total = reward
    for t in range(T - 1, -1, -1):
        total = token_rewards[t].reshape(token_rewards[t].shape + (1,) * (T - t - 1)) + total
    return total


# ------------------------------------------------------------------ soft Bellman == closed form


@pytest.mark.parametrize(("V", "T"), SIZES)
@pytest.mark.parametrize("beta", [0.25, 1.0, 4.0, np.inf])
@pytest.mark.parametrize("zeros", [False, True])
def test_product_of_token_policies_is_the_sequence_closed_form(V, T, beta, zeros):
    rng = np.random.default_rng(V * 100 + T + int(zeros))
    ref = random_tree(rng, V, T, zeros=zeros)
    reward = rng.normal(size=(V,) * T)
    res = soft_bellman(ref, reward, beta)
    expected = optimal_policy(joint(ref).ravel(), reward.ravel(), beta)
    np.testing.assert_allclose(joint(res.policy).ravel(), expected, rtol=1e-12, atol=0)
    v0 = soft_value(joint(ref).ravel(), reward.ravel(), beta)
    assert np.ndim(res.value[0]) == 0
    assert res.value[0] == pytest.approx(v0, rel=1e-12, abs=1e-15)
    # structure of the result
    assert [p.shape for p in res.policy] == [(V,) * (t + 1) for t in range(T)]
    assert [np.shape(v) for v in res.value] == [(V,) * t for t in range(T + 1)]
    assert [q.shape for q in res.q] == [(V,) * (t + 1) for t in range(T)]
    np.testing.assert_array_equal(res.value[T], reward)


@pytest.mark.parametrize(("V", "T"), SIZES)
def test_token_rewards_enter_the_return(V, T):
    rng = np.random.default_rng(7 + V + T)
    ref = random_tree(rng, V, T, zeros=True)
    reward = rng.normal(size=(V,) * T)
    tr = [rng.normal(size=(V,) * (t + 1)) for t in range(T)]
    res = soft_bellman(ref, reward, 0.5, token_rewards=tr)
    R = sequence_return(reward, tr).ravel()
    expected = optimal_policy(joint(ref).ravel(), R, 0.5)
    np.testing.assert_allclose(joint(res.policy).ravel(), expected, rtol=1e-12, atol=0)
    assert res.value[0] == pytest.approx(soft_value(joint(ref).ravel(), R, 0.5), rel=1e-12)
    # Q = r_t + V_{t+1}
    for t in range(T):
        np.testing.assert_array_equal(res.q[t], tr[t] + res.value[t + 1])


@pytest.mark.parametrize(("V", "T"), SIZES)
@pytest.mark.parametrize("with_token_rewards", [False, True])
def test_greedy_limit_beta_zero_matches_sequence_greedy_with_ties(V, T, with_token_rewards):
    # integer rewards make ties (and exact sums): the beta = 0 policy must split the mass
    # of the best sequences in proportion to the reference, as optimal_policy does
    rng = np.random.default_rng(3 * V + T)
    ref = random_tree(rng, V, T, zeros=True)
    reward = rng.integers(0, 3, size=(V,) * T).astype(float)
    tr = [rng.integers(0, 2, size=(V,) * (t + 1)).astype(float) for t in range(T)]
    kw = {"token_rewards": tr} if with_token_rewards else {}
    R = sequence_return(reward, tr) if with_token_rewards else reward
    res = soft_bellman(ref, reward, 0.0, **kw)
    expected = optimal_policy(joint(ref).ravel(), R.ravel(), 0.0)
    np.testing.assert_allclose(joint(res.policy).ravel(), expected, rtol=1e-12, atol=1e-300)
    support_max = np.max(np.where(joint(ref) > 0, R, -np.inf))
    assert res.value[0] == support_max
    # and the soft policies converge to it
    near = joint(soft_bellman(ref, reward, 1e-3, **kw).policy).ravel()
    assert np.max(np.abs(near - expected)) < 1e-6


def test_beta_inf_is_the_reference_and_value_is_the_mean_return():
    rng = np.random.default_rng(11)
    ref = random_tree(rng, 3, 3, zeros=True)
    reward = rng.normal(size=(3,) * 3)
    res = soft_bellman(ref, reward, np.inf)
    for p, q in zip(res.policy, ref, strict=True):
        np.testing.assert_allclose(p, q, rtol=1e-15, atol=0)
    assert res.value[0] == pytest.approx(float(np.sum(joint(ref) * reward)), rel=1e-14)


def test_soft_value_against_mpmath_with_large_rewards_and_small_beta():
    # Recipe: mp.mp.dps = 50; V0 = beta * log(sum_y ref(y) exp(R(y)/beta)) over the 9 leaves.
    ref = [np.array([0.3, 0.7]), np.array([[0.2, 0.8], [0.6, 0.4]])]
    ref = [np.array([0.3, 0.5, 0.2]), np.array([[0.2, 0.3, 0.5], [0.6, 0.4, 0.0], [1 / 3] * 3])]
    reward = np.array([[800.0, 799.5, -3.0], [801.0, 100.0, 900.0], [0.0, 1.0, 2.0]])
    beta = 0.05
    mp.mp.dps = 50
    j = joint(ref)
    total = mp.fsum(
        mp.mpf(float(j[i, k])) * mp.exp(mp.mpf(float(reward[i, k])) / mp.mpf(beta))
        for i in range(3)
        for k in range(3)
        if j[i, k] > 0
    )
    v0 = mp.mpf(beta) * mp.log(total)
    res = soft_bellman(ref, reward, beta)
    assert float(res.value[0]) == pytest.approx(float(v0), rel=1e-14)
    # the top sequence (0, 0) carries exp((800 - V0)/beta) * ref
    p00 = mp.mpf(float(j[0, 0])) * mp.exp((mp.mpf(800) - v0) / mp.mpf(beta))
    assert joint(res.policy)[0, 0] == pytest.approx(float(p00), rel=1e-11)
    assert joint(res.policy)[1, 2] == 0.0  # ruled out by the reference


@given(
    seed=st.integers(0, 2**32 - 1),
    V=st.integers(2, 4),
    T=st.integers(1, 4),
    log_beta=st.floats(-1.0, 2.0),
)
def test_property_soft_bellman_equals_closed_form(seed, V, T, log_beta):
    rng = np.random.default_rng(seed)
    ref = random_tree(rng, V, T, zeros=bool(seed % 2))
    reward = rng.normal(size=(V,) * T)
    beta = 10.0**log_beta
    res = soft_bellman(ref, reward, beta)
    expected = optimal_policy(joint(ref).ravel(), reward.ravel(), beta)
    np.testing.assert_allclose(joint(res.policy).ravel(), expected, rtol=1e-12, atol=0)
    for p in res.policy:
        np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=0, atol=1e-14)


def test_float32_in_float32_out():
    rng = np.random.default_rng(5)
    ref = [c.astype(np.float32) for c in random_tree(rng, 3, 2)]
    res = soft_bellman(ref, rng.normal(size=(3, 3)).astype(np.float32), 1.0)
    assert all(p.dtype == np.float32 for p in res.policy)
    assert res.value[0].dtype == np.float32
    assert joint(ref).dtype == np.float32


# ------------------------------------------------------------------ trees


def test_joint_marginals_and_from_joint_round_trip():
    rng = np.random.default_rng(2)
    tree = random_tree(rng, 3, 4, zeros=True)
    j = joint(tree)
    assert j.shape == (3,) * 4
    assert j.sum() == pytest.approx(1.0, abs=1e-14)
    m = marginals(tree)
    for t in range(4):
        np.testing.assert_allclose(m[t], j.sum(axis=tuple(range(t + 1, 4))), rtol=1e-13, atol=0)
    back = from_joint(j)
    np.testing.assert_allclose(joint(back), j, rtol=1e-13, atol=0)
    # on prefixes of positive probability the conditionals are recovered
    for t in range(4):
        reach = (m[t - 1] > 0) if t else np.ones((), bool)
        np.testing.assert_allclose(back[t][reach], tree[t][reach], rtol=1e-12, atol=1e-15)


def test_from_joint_zero_prefix_gets_uniform_row():
    j = np.zeros((4, 4))
    j[0, 1], j[2, 3] = 0.25, 0.75
    c = from_joint(j)
    np.testing.assert_array_equal(c[0], [0.25, 0, 0.75, 0])
    np.testing.assert_array_equal(c[1][1], [0.25] * 4)
    np.testing.assert_array_equal(c[1][0], [0, 1, 0, 0])


def test_sample_frequencies_match_the_joint(rng):
    tree = random_tree(rng, 3, 3, zeros=True)
    n = 60_000
    seqs = sample(tree, n, rng)
    assert seqs.shape == (n, 3) and seqs.dtype == np.int64
    p = joint(tree).ravel()
    counts = np.bincount(np.ravel_multi_index(tuple(seqs.T), (3, 3, 3)), minlength=27)
    assert np.all(counts[p == 0] == 0)  # never a token of probability zero
    freq = counts / n
    # 4.5 standard errors per cell (binomial variance p(1-p)/n): a false alarm rate ~ 2e-4 over 27
    assert np.all(np.abs(freq - p) <= 4.5 * np.sqrt(p * (1 - p) / n) + 1e-12)
    # seeded: same seed, same draws
    np.testing.assert_array_equal(sample(tree, 10, 42), sample(tree, 10, 42))


def test_token_logprobs_sum_to_the_sequence_logprob(rng):
    tree = random_tree(rng, 4, 3)
    seqs = sample(tree, 50, rng)
    lp = token_logprobs(tree, seqs)
    assert lp.shape == (50, 3)
    np.testing.assert_allclose(lp.sum(-1), np.log(joint(tree)[tuple(seqs.T)]), rtol=1e-13)


# ------------------------------------------------------------------ chain rule, where KL sits


@pytest.mark.parametrize(("V", "T"), SIZES)
def test_chain_rule_per_token_kl_sums_to_the_sequence_kl(V, T):
    rng = np.random.default_rng(17 * V + T)
    pol = random_tree(rng, V, T, zeros=True)
    ref = random_tree(rng, V, T)
    ptk = per_token_kl(pol, ref)
    assert ptk.shape == (T,)
    assert np.all(ptk >= 0)
    exact = kl_divergence(joint(pol).ravel(), joint(ref).ravel())
    assert ptk.sum() == pytest.approx(exact, rel=1e-12)
    maps = token_kl_map(pol, ref, weighted=True)
    np.testing.assert_allclose([m.sum() for m in maps], ptk, rtol=1e-14)
    assert [np.shape(m) for m in token_kl_map(pol, ref)] == [(V,) * t for t in range(T)]


def test_chain_rule_for_the_optimal_policy_is_its_optimal_kl(rng):
    ref = random_tree(rng, 3, 4, zeros=True)
    reward = rng.normal(size=(3,) * 4)
    res = soft_bellman(ref, reward, 0.7)
    kl = optimal_kl(joint(ref).ravel(), reward.ravel(), 0.7)
    assert per_token_kl(res.policy, ref).sum() == pytest.approx(kl, rel=1e-12)


@pytest.mark.parametrize("beta", [1e-8, 1.0, 1e3, 1e5, 0.0])
def test_chain_rule_with_extreme_rewards_and_tiny_reference_entries(beta):
    # rewards of size 1e6 drive some policy entries to 1e-219 against reference 0.5 and
    # others against a reference entry of 1e-300: the per-token KL must stay exact
    # (a log ratio taken as log1p((p - q)/q) would round to -inf there)
    rng = np.random.default_rng(0)
    ref = random_tree(rng, 3, 3)
    ref[1][0] = [1e-300, 0.5, 0.5 - 1e-300]
    reward = rng.normal(size=(3,) * 3) * 1e6
    ptk = per_token_kl(soft_bellman(ref, reward, beta).policy, ref)
    assert np.all(ptk >= 0)
    kl = optimal_kl(joint(ref).ravel(), reward.ravel(), beta)
    assert ptk.sum() == pytest.approx(kl, rel=1e-12)


def test_per_token_kl_of_a_tiny_but_positive_policy_entry():
    # p = 1e-200 against q = 0.5: the term is 1e-200 log(2e-200) - the exact KL by mpmath
    # Recipe: mp.dps = 50; sum p_i log(p_i / q_i) with p = (1e-200, 1 - 1e-200), q = (0.5, 0.5)
    pol = [np.array([1e-200, 1.0])]
    ref = [np.array([0.5, 0.5])]
    mp.mp.dps = 50
    p0 = mp.mpf("1e-200")
    exact = p0 * mp.log(p0 / mp.mpf("0.5")) + (1 - p0) * mp.log((1 - p0) / mp.mpf("0.5"))
    assert per_token_kl(pol, ref)[0] == pytest.approx(float(exact), rel=1e-14)


def test_per_token_kl_is_infinite_where_the_policy_leaves_the_support():
    ref = [np.array([0.5, 0.5]), np.array([[1.0, 0.0], [0.5, 0.5]])]
    pol = [np.array([0.5, 0.5]), np.array([[0.9, 0.1], [0.5, 0.5]])]
    ptk = per_token_kl(pol, ref)
    assert ptk[0] == 0 and np.isinf(ptk[1])
    # unreachable prefixes carry no weight, even with infinite conditional KL
    pol2 = [np.array([0.0, 1.0]), np.array([[0.0, 1.0], [0.5, 0.5]])]
    ptk2 = per_token_kl(pol2, ref)
    assert ptk2[0] == pytest.approx(math.log(2), rel=1e-15) and ptk2[1] == 0
    assert np.isinf(token_kl_map(pol2, ref)[1][0])


@pytest.mark.parametrize("k", [0, 1, 2, 3])
def test_per_token_kl_sits_where_the_reward_acts(k):
    # the reward looks at token k only: later positions are untouched (V constant below),
    # and when the reference's level k does not depend on the prefix, so are earlier ones
    rng = np.random.default_rng(k)
    V, T = 3, 4
    ref = random_tree(rng, V, T)
    ref[k] = np.broadcast_to(rng.dirichlet(np.ones(V)), (V,) * (k + 1)).copy()
    r_tok = np.array([1.0, -0.5, 2.0])
    reward = np.broadcast_to(r_tok.reshape((1,) * k + (V,) + (1,) * (T - k - 1)), (V,) * T)
    res = soft_bellman(ref, reward, 0.5)
    ptk = per_token_kl(res.policy, ref)
    expected_k = optimal_kl(ref[k].reshape(-1, V)[0], r_tok, 0.5)
    assert ptk[k] == pytest.approx(expected_k, rel=1e-12)
    others = np.delete(ptk, k)
    assert np.all(np.abs(others) <= 1e-15)


def test_reward_at_token_k_with_context_dependent_reference_moves_earlier_tokens():
    # if ref(a_k | prefix) depends on the prefix, the earlier tokens are steered too
    rng = np.random.default_rng(9)
    ref = random_tree(rng, 3, 3)
    reward = np.broadcast_to(np.array([2.0, 0.0, 0.0]), (3, 3, 3))
    ptk = per_token_kl(soft_bellman(ref, reward, 0.5).policy, ref)
    assert ptk[0] > 1e-3 and ptk[1] > 1e-3 and ptk[2] > 1e-3


# ------------------------------------------------------------------ sampled estimates


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
def test_sampled_estimates_converge_to_their_exact_mean(estimator):
    rng = np.random.default_rng(123)
    ref = random_tree(rng, 3, 4)
    res = soft_bellman(ref, rng.normal(size=(3,) * 4), 0.8)
    mean, var = sequence_kl_moments(res.policy, ref, estimator=estimator)
    exact = per_token_kl(res.policy, ref).sum()
    if estimator in ("k1", "k3"):
        assert mean == pytest.approx(exact, rel=1e-12)  # unbiased
    else:
        assert mean != pytest.approx(exact, rel=1e-3)  # k2 is biased
    n = 40_000
    est = sampled_kl(res.policy, ref, n, np.random.default_rng(1), estimator=estimator)
    assert est.shape == (n,)
    # 4.5 standard errors of the mean, from the exact variance
    assert abs(est.mean() - mean) <= 4.5 * math.sqrt(var / n)


def test_k3_has_lower_variance_than_k1_near_the_reference():
    rng = np.random.default_rng(4)
    ref = random_tree(rng, 4, 3)
    pol = soft_bellman(ref, rng.normal(size=(4,) * 3), 5.0).policy
    _, v1 = sequence_kl_moments(pol, ref, estimator="k1")
    _, v3 = sequence_kl_moments(pol, ref, estimator="k3")
    assert v3 < 0.1 * v1


def test_sequence_kl_moments_k1_variance_by_enumeration():
    pol = [np.array([0.8, 0.2]), np.array([[0.6, 0.4], [0.3, 0.7]])]
    ref = [np.array([0.5, 0.5]), np.array([[0.5, 0.5], [0.5, 0.5]])]
    j, q = joint(pol).ravel(), joint(ref).ravel()
    d = np.log(j / q)
    mean, var = sequence_kl_moments(pol, ref)
    assert mean == pytest.approx(np.sum(j * d), rel=1e-14)
    assert var == pytest.approx(np.sum(j * d**2) - np.sum(j * d) ** 2, rel=1e-12)


# ------------------------------------------------------------------ diagnostics


def markov_problem(kind, rng, *, B=300, T=40, V=6):
    """Policy and reference that depend on (position, previous token); returns log-prob arrays.

    ``opening``: the policy differs only at the first two positions; ``vocabulary``: only
    after a rare trigger token (5 at reference probability 0.01), where it picks word 4;
    ``style``: a mild tilt of every next-token distribution.
    """
    q = rng.dirichlet(5 * np.ones(V), size=(T, V))
    q[..., 5] = 0.01
    q[..., :5] *= 0.99 / q[..., :5].sum(-1, keepdims=True)
    p = q.copy()
    if kind == "opening":
        p[:2] = np.array([0.9, 0.02, 0.02, 0.02, 0.02, 0.02])
    elif kind == "vocabulary":
        p[:, 5] = np.array([0.01, 0.01, 0.01, 0.01, 0.95, 0.01])
    elif kind == "style":
        tilt = np.exp(0.6 * np.array([1.0, -1.0, 0.5, -0.5, 0.0, 0.0]))
        p = q * tilt
        p /= p.sum(-1, keepdims=True)
    seqs = np.zeros((B, T), dtype=np.int64)
    prev = np.zeros(B, dtype=np.int64)  # a BOS token shares id 0
    rows_p = np.zeros((B, T, V))
    rows_q = np.zeros((B, T, V))
    for t in range(T):
        rows_p[:, t], rows_q[:, t] = p[t, prev], q[t, prev]
        cum = rows_p[:, t].cumsum(-1)
        seqs[:, t] = np.minimum((cum <= rng.random(B)[:, None] * cum[:, -1:]).sum(-1), V - 1)
        prev = seqs[:, t]
    lp_full, lq_full = np.log(rows_p), np.log(rows_q)
    take = np.take_along_axis
    return (
        take(lp_full, seqs[..., None], -1)[..., 0],
        take(lq_full, seqs[..., None], -1)[..., 0],
        lp_full,
        lq_full,
    )


@pytest.mark.parametrize("kind", ["opening", "vocabulary", "style"])
@pytest.mark.parametrize("full", [False, True])
def test_profile_tells_the_three_shapes_apart(kind, full):
    lp, lq, lp_full, lq_full = markov_problem(kind, np.random.default_rng(31))
    prof = token_kl_profile(lp_full, lq_full) if full else token_kl_profile(lp, lq)
    assert prof.shape == kind, prof
    if kind == "opening":
        assert prof.first_k_share >= OPENING_SHARE
    elif kind == "vocabulary":
        assert prof.first_k_share < OPENING_SHARE and prof.top_share >= VOCABULARY_TOP_SHARE
    else:
        assert prof.top_share < VOCABULARY_TOP_SHARE and prof.evenness >= STYLE_EVENNESS


def test_profile_full_vocabulary_is_the_exact_row_kl_and_contributions_sum():
    *_, lp_full, lq_full = markov_problem("style", np.random.default_rng(2), B=20, T=8)
    mask = np.ones((20, 8), bool)
    mask[:5, 6:] = False
    prof = token_kl_profile(lp_full, lq_full, mask)
    exact = kl_divergence(np.exp(lp_full), np.exp(lq_full))
    np.testing.assert_allclose(prof.per_token, np.where(mask, exact, 0), rtol=1e-13, atol=0)
    assert prof.contribution.sum() == pytest.approx(prof.sequence_kl.mean(), rel=1e-13)
    np.testing.assert_allclose(
        prof.per_position, np.where(mask, exact, 0).sum(0) / mask.sum(0), rtol=1e-13
    )
    assert prof.first_k == 1


def test_sampled_profile_estimates_the_exact_per_token_kl_of_a_tree():
    # k1 per position over sequences sampled from a tree converges to per_token_kl;
    # the per-position variance is computed exactly by enumeration
    rng = np.random.default_rng(8)
    ref = random_tree(rng, 3, 3)
    pol = soft_bellman(ref, rng.normal(size=(3,) * 3), 0.6).policy
    n = 30_000
    seqs = sample(pol, n, rng)
    prof = token_kl_profile(token_logprobs(pol, seqs), token_logprobs(ref, seqs))
    exact = per_token_kl(pol, ref)
    m = marginals(pol)
    for t in range(3):
        d = np.log(pol[t]) - np.log(ref[t])
        second = np.sum(m[t] * d**2)
        sd = math.sqrt((second - exact[t] ** 2) / n)
        assert abs(prof.per_position[t] - exact[t]) <= 4.5 * sd


def test_profile_of_identical_models_is_none_and_off_support_tokens_take_all():
    lq = np.log(np.full((3, 5), 0.5))
    prof = token_kl_profile(lq, lq)
    assert prof.shape == "none" and prof.sequence_kl.tolist() == [0.0, 0.0, 0.0]
    lq2 = lq.copy()
    lq2[1, 3] = -np.inf
    prof2 = token_kl_profile(lq, lq2, estimator="k3")
    assert np.isinf(prof2.per_token[1, 3]) and prof2.top_share == 1.0


def test_profile_mask_hides_padding_even_if_it_is_garbage():
    lp = np.log(np.full((2, 4), 0.5))
    lq = np.log(np.full((2, 4), 0.25))
    lp[1, 3] = np.nan
    lq[1, 3] = 7.0
    prof = token_kl_profile(lp, lq, [[1, 1, 1, 1], [1, 1, 1, 0]])
    assert prof.per_token[1, 3] == 0
    np.testing.assert_allclose(prof.sequence_kl, [4 * math.log(2), 3 * math.log(2)], rtol=1e-15)


# ------------------------------------------------------------------ reference ceiling


def test_ceiling_weak_versus_strong_reference_on_sequences():
    # two-token responses over {bad, ok, great}; the weak reference never writes "great"
    # as the second token and rarely "ok"
    V = 3
    reward = np.add.outer(np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.5, 1.0]))
    weak = [np.array([0.7, 0.25, 0.05]), np.tile([0.8, 0.2, 0.0], (V, 1))]
    strong = [np.array([0.3, 0.4, 0.3]), np.tile([0.3, 0.4, 0.3], (V, 1))]
    cw = reward_ceiling(joint(weak).ravel(), reward.ravel(), 1.0)
    cs = reward_ceiling(joint(strong).ravel(), reward.ravel(), 1.0)
    assert cs.expected_reward > cw.expected_reward + 0.2
    assert float(cw.kl) == pytest.approx(1.0, rel=1e-12)
    assert float(cw.support_max) == 1.5 and float(cw.unreachable_max) == 2.0
    big = reward_ceiling(joint(weak).ravel(), reward.ravel(), np.inf)
    assert float(big.expected_reward) == 1.5 and float(big.beta) == 0.0
    assert float(big.kl) == pytest.approx(max_kl(joint(weak).ravel(), reward.ravel()), rel=1e-15)
    # ruled-out sequences stay at probability zero at every beta, token by token too
    for beta in [0.0, 1e-3, 0.1, 1.0, 10.0]:
        pol = soft_bellman(weak, reward, beta).policy
        assert np.all(pol[1][:, 2] == 0.0)
        assert np.all(optimal_policy(joint(weak).ravel(), reward.ravel(), beta)[2::3] == 0.0)


def test_ceiling_is_the_best_reward_within_the_budget(rng):
    ref = rng.dirichlet(np.ones(6))
    reward = rng.normal(size=6)
    c = reward_ceiling(ref, reward, 0.3)
    # no random policy within the budget does better
    for _ in range(200):
        pi = rng.dirichlet(0.3 * np.ones(6))
        if kl_divergence(pi, ref) <= 0.3:
            assert pi @ reward <= c.expected_reward + 1e-12
    assert optimal_kl(ref, reward, c.beta) == pytest.approx(0.3, rel=1e-10)


# ------------------------------------------------------------------ bad input

TREE = [np.array([0.5, 0.5]), np.array([[0.5, 0.5], [0.2, 0.8]])]


def _bad_tree_level():
    return [np.array([0.5, 0.5]), np.array([[0.5, 0.5, 0.0], [0.2, 0.8, 0.0]])]


BAD = [
    (
        lambda: joint(np.array([0.5, 0.5])),
        "`conditionals` must be a non-empty list of arrays, conditionals[t] of shape (V,)*(t+1); "
        "got ndarray",
    ),
    (lambda: joint([]), "`conditionals` must be a non-empty list of arrays; got an empty list"),
    (
        lambda: joint([np.ones((2, 2)) / 2]),
        "`conditionals[0]` must have shape (V,) (the first token's distribution); got shape (2, 2)",
    ),
    (
        lambda: joint(_bad_tree_level()),
        "`conditionals[1]` must have shape (2, 2) (vocabulary 2, position 1); got shape (2, 3)",
    ),
    (
        lambda: joint([np.array([0.5, 0.5]), np.array([[0.5, 0.5], [0.2, 0.7]])]),
        "`conditionals[1]` must sum to 1 along axis -1; row (1,) sums to 0.9 "
        "(tolerance 1.5e-08); klpolicy never renormalises silently",
    ),
    (
        lambda: joint([np.array([1.2, -0.2])]),
        "`conditionals[0]` must be non-negative; found -0.2 at index (1,)",
    ),
    (
        lambda: soft_bellman(TREE, np.zeros(2), 1.0),
        "`reward` must have shape (2, 2) (one reward per sequence, (V,)*T); got shape (2,)",
    ),
    (
        lambda: soft_bellman(TREE, [[0.0, np.nan], [0.0, 0.0]], 1.0),
        "`reward` must be finite; found nan at index (0, 1)",
    ),
    (lambda: soft_bellman(TREE, np.zeros((2, 2)), -1.0), "`beta` must be non-negative; found -1"),
    (
        lambda: soft_bellman(TREE, np.zeros((2, 2)), [1.0, 2.0]),
        "`beta` must be a scalar for soft_bellman; got shape (2,)",
    ),
    (
        lambda: soft_bellman(TREE, np.zeros((2, 2)), 1.0, token_rewards=[np.zeros(2)]),
        "`token_rewards` must be a list of T = 2 arrays, [t] of shape (V,)*(t+1); got 1",
    ),
    (
        lambda: soft_bellman(TREE, np.zeros((2, 2)), 1.0, token_rewards=[np.zeros(2)] * 2),
        "`token_rewards[1]` must have shape (2, 2) ((V,)*(t+1)); got shape (2,)",
    ),
    (
        lambda: per_token_kl(TREE, [np.array([1.0, 0.0])]),
        "`ref_conditionals` must have the same vocabulary and length as `policy_conditionals`; "
        "got V=2, T=1 and V=2, T=2",
    ),
    (
        lambda: per_token_kl(TREE, [np.array([0.5, 0.5]), np.array([[0.5, 0.6], [0.2, 0.8]])]),
        "`ref_conditionals[1]` must sum to 1 along axis -1; row (0,) sums to 1.1 "
        "(tolerance 1.5e-08); klpolicy never renormalises silently",
    ),
    (
        lambda: from_joint(np.ones((2, 3)) / 6),
        "`joint` must have shape (V,)*T (all axes of one length); got shape (2, 3)",
    ),
    (
        lambda: from_joint(np.ones((2, 2)) / 5),
        "`joint` must sum to 1 over all entries; it sums to 0.8 (tolerance 1.5e-08); "
        "klpolicy never renormalises silently",
    ),
    (
        lambda: from_joint([[0.5, 0.6], [-0.1, 0.0]]),
        "`joint` must be non-negative; found -0.1 at index (1, 0)",
    ),
    (lambda: sample(TREE, 0, 1), "`n` must be an integer >= 1; got 0"),
    (
        lambda: token_logprobs(TREE, [[0, 2]]),
        "`sequences` must hold token ids in [0, 2); found 2 at index (0, 1)",
    ),
    (
        lambda: token_logprobs(TREE, [0, 1]),
        "`sequences` must be an integer array of shape (n, T) with T = 2; "
        "got dtype int64 and shape (2,)",
    ),
    (
        lambda: sampled_kl(TREE, TREE, 10, 0, estimator="k4"),
        "`estimator` must be one of 'k1', 'k2', 'k3'; got 'k4'",
    ),
    (
        lambda: token_kl_profile(np.zeros(3), np.zeros(3)),
        "`policy_logprobs` must have shape (batch, T) or (batch, T, V); got shape (3,)",
    ),
    (
        lambda: token_kl_profile(np.zeros((2, 3)), np.zeros((2, 4))),
        "`ref_logprobs` must have the same shape as `policy_logprobs` (2, 3); got (2, 4)",
    ),
    (
        lambda: token_kl_profile(np.zeros((2, 3)), np.zeros((2, 3)), np.ones((2, 4))),
        "`mask` must have shape (batch, T) = (2, 3); got shape (2, 4)",
    ),
    (
        lambda: token_kl_profile(np.zeros((2, 3)), np.zeros((2, 3)), np.ones(3)),
        "`mask` must have shape (batch, T) = (2, 3); got shape (3,)",
    ),
    (
        lambda: token_kl_profile(np.zeros((2, 3)), np.zeros((2, 3)), [[1, 0.5, 1], [1, 1, 1]]),
        "`mask` must hold only booleans or 0/1; found 0.5 at index (0, 1)",
    ),
    (
        lambda: token_kl_profile(np.zeros((2, 3)), np.zeros((2, 3)), np.zeros((2, 3))),
        "`mask` must keep at least one token; it masks every token",
    ),
    (
        lambda: token_kl_profile([[0.0, 0.3]], [[0.0, 0.0]]),
        "`policy_logprobs` must hold log-probabilities (<= 0); found 0.3 at index (0, 1)",
    ),
    (
        lambda: token_kl_profile([[0.0, np.nan]], [[0.0, 0.0]]),
        "`policy_logprobs` must not contain NaN; found nan at index (0, 1)",
    ),
    (
        lambda: token_kl_profile([[-np.inf, 0.0]], [[0.0, 0.0]]),
        "`policy_logprobs` must be finite at sampled tokens (they had positive probability); "
        "found -inf at index (0, 0)",
    ),
    (
        lambda: token_kl_profile(np.log(np.full((1, 2, 2), 0.4)), np.log(np.full((1, 2, 2), 0.5))),
        "`policy_logprobs` must be normalised along the vocabulary axis (log-sum-exp 0); row "
        "(0, 0) has log-sum-exp -0.223144 (tolerance 1.5e-08); "
        "klpolicy never renormalises silently",
    ),
    (
        lambda: token_kl_profile(np.zeros((2, 3)), np.zeros((2, 3)), first_k=4),
        "`first_k` must be an integer in [1, T = 3]; got 4",
    ),
    (
        lambda: reward_ceiling([0.5, 0.5], [1.0, 0.0], -0.1),
        "`kl` must be a non-negative number of nats; got -0.1",
    ),
]


@pytest.mark.parametrize(("call", "message"), BAD)
def test_bad_input_messages(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
