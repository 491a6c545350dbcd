"""Tests of klpolicy.sequences.diagnostics: sampled sequence-KL estimates and the log-prob profile."""

import math
import re

import numpy as np
import pytest

from klpolicy import kl_divergence
from klpolicy.sequences import per_token_kl, soft_bellman
from klpolicy.sequences.diagnostics import (
    OPENING_SHARE,
    STYLE_EVENNESS,
    VOCABULARY_TOP_SHARE,
    sampled_kl,
    sequence_kl_moments,
    token_kl_profile,
)
from klpolicy.sequences.trees import joint, marginals, sample, token_logprobs

from ._trees import TREE, random_tree

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


@pytest.mark.slow
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


# ------------------------------------------------------------------ bad input

BAD = [
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
]


@pytest.mark.parametrize(("call", "message"), BAD)
def test_bad_input_messages(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
