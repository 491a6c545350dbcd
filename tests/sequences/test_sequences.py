"""Tests of klpolicy.sequences: soft Bellman, per-token KL, and its re-exports."""

import math
import re

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import klpolicy.sequences
import klpolicy.sequences.ceiling
import klpolicy.sequences.diagnostics
import klpolicy.sequences.trees
from klpolicy import kl_divergence, optimal_kl, optimal_policy, soft_value
from klpolicy.sequences import joint, per_token_kl, soft_bellman, token_kl_map

from ._trees import TREE, random_tree

SIZES = [(2, 1), (2, 3), (3, 2), (3, 4), (5, 3), (4, 4)]


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
    ref = [np.array([0.3, 0.5, 0.2]), np.array([[0.2, 0.3, 0.5], [0.6, 0.4, 0.0], [1 / 3] * 3])]
    reward = np.array([[800.0, 799.5, -3.0], [801.0, 100.0, 900.0], [0.0, 1.0, 2.0]])
    beta = 0.05  # mpmath at 50 digits: the conftest fixture
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


@pytest.mark.slow
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
    ref = [np.array([0.5, 0.5])]  # mpmath at 50 digits: the conftest fixture
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


# ------------------------------------------------------------------ re-exports


def test_every_name_stays_importable_from_sequences():
    # the token-level toolkit was split into modules; klpolicy.sequences re-exports all of it
    homes = [klpolicy.sequences.trees, klpolicy.sequences.diagnostics, klpolicy.sequences.ceiling]
    moved = {name: mod for mod in homes for name in mod.__all__}
    assert set(moved) < set(klpolicy.sequences.__all__)
    for name, mod in moved.items():
        assert getattr(klpolicy.sequences, name) is getattr(mod, name), name
    # the public names of klpolicy.sequences before the split, all still there
    before = {
        "OPENING_SHARE", "STYLE_EVENNESS", "VOCABULARY_TOP_SHARE", "Ceiling", "SoftBellman",
        "TokenKLProfile", "from_joint", "joint", "marginals", "per_token_kl", "reward_ceiling",
        "sample", "sampled_kl", "sequence_kl_moments", "soft_bellman", "token_kl_map",
        "token_kl_profile", "token_logprobs",
    }  # fmt: skip
    assert set(klpolicy.sequences.__all__) == before
    assert all(hasattr(klpolicy.sequences, name) for name in before)


# ------------------------------------------------------------------ bad input

BAD = [
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
]


@pytest.mark.parametrize(("call", "message"), BAD)
def test_bad_input_messages(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
