"""Tests of klpolicy.sequences.trees: joint law, marginals, from_joint, sampling, log-probs."""

import re

import numpy as np
import pytest

from klpolicy.sequences.trees import from_joint, joint, marginals, sample, token_logprobs

from ._trees import TREE, random_tree

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


# ------------------------------------------------------------------ bad input


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
]


@pytest.mark.parametrize(("call", "message"), BAD)
def test_bad_input_messages(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
