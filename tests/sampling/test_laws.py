"""sampler_law: the exact law of transformers' and vLLM's sampling, against a plain reference."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from klpolicy.sampling import sampler_law

from ._reference import reference_law

ORDERS = ["transformers", "vllm"]


def _law(logits, **kw):
    return sampler_law(np.asarray(logits, dtype=np.float64), **kw)


# logits on a coarse grid give ties; -inf marks tokens that cannot be drawn
logit_rows = st.lists(
    st.one_of(st.integers(-6, 6).map(lambda i: i / 2), st.just(-math.inf)), min_size=1, max_size=9
).filter(lambda v: any(x > -math.inf for x in v))
setting = st.fixed_dictionaries(
    {
        "temperature": st.sampled_from([0.0, 1e-6, 0.3, 0.7, 1.0, 1.7, math.inf]),
        "top_k": st.one_of(st.none(), st.integers(1, 10)),
        "top_p": st.one_of(st.none(), st.sampled_from([0.05, 0.3, 0.62, 0.9, 0.999, 1.0])),
        "min_p": st.one_of(st.none(), st.sampled_from([0.0, 0.05, 0.3, 0.7, 1.0])),
        "order": st.sampled_from(ORDERS),
    }
)


@settings(max_examples=150, deadline=None)
@given(logits=logit_rows, kw=setting, keep=st.integers(1, 3))
def test_matches_the_plain_reference_to_1e_15(logits, kw, keep):
    if kw["order"] == "vllm":
        keep = 1
    got = _law(logits, min_tokens_to_keep=keep, **kw)
    want = reference_law(logits, keep=keep, **kw)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-15)
    assert got.sum() == pytest.approx(1.0, abs=1e-15)


@pytest.mark.parametrize("order", ORDERS)
def test_random_rows_against_the_reference(order):
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(20, 50)) * 3
    for kw in [
        {"top_k": 7},
        {"top_p": 0.8},
        {"min_p": 0.1},
        {"temperature": 0.6, "top_k": 20, "top_p": 0.9, "min_p": 0.05},
        {"temperature": 1.4, "top_p": 0.5, "min_p": 0.2},
    ]:
        got = sampler_law(logits, order=order, **kw)
        for row, g in zip(logits, got):
            np.testing.assert_allclose(g, reference_law(row, order=order, **kw), rtol=0, atol=1e-15)


def test_hand_computed_laws():
    lg = np.log([0.5, 0.3, 0.15, 0.05])
    np.testing.assert_allclose(_law(lg, top_k=2), [0.625, 0.375, 0, 0], atol=1e-15)
    np.testing.assert_allclose(_law(lg, top_p=0.75), [0.625, 0.375, 0, 0], atol=1e-15)
    np.testing.assert_allclose(_law(lg, min_p=0.5), [0.625, 0.375, 0, 0], atol=1e-15)
    np.testing.assert_allclose(_law(lg, temperature=0.5), np.array([25, 9, 2.25, 0.25]) / 36.5)
    # min-p after top-p (transformers) and before it (vLLM): different kept sets
    lg = np.log([0.48, 0.22, 0.2, 0.1])
    np.testing.assert_allclose(_law(lg, top_p=0.5, min_p=0.25), [0.48 / 0.7, 0.22 / 0.7, 0, 0])
    np.testing.assert_array_equal(_law(lg, top_p=0.5, min_p=0.25, order="vllm"), [1, 0, 0, 0])


def test_top_k_keeps_every_tie_and_top_p_splits_ties_by_index():
    # the 2nd largest logit is tied three ways: top-k=2 keeps all four tokens >= it
    lg = [2.0, 1.0, 1.0, 1.0, 0.0]
    assert np.count_nonzero(_law(lg, top_k=2)) == 4
    # four equal tokens, top_p = 0.5: ascending cumsum .25, .5 <= .5 are removed:
    # the two lowest indices go, the kept set is {2, 3} (smallest set of mass >= 0.5)
    np.testing.assert_array_equal(_law([0.0] * 4, top_p=0.5), [0, 0, 0.5, 0.5])
    np.testing.assert_array_equal(_law([0.0] * 4, top_p=0.5, order="vllm"), [0, 0, 0.5, 0.5])
    # min-p = 1 keeps every token tied with the most probable
    np.testing.assert_array_equal(_law([1.0, 0.0, 1.0], min_p=1.0), [0.5, 0, 0.5])


def test_min_tokens_to_keep_is_transformers_only():
    lg = np.log([0.7, 0.2, 0.1])
    np.testing.assert_array_equal(_law(lg, top_p=0.1), [1, 0, 0])
    np.testing.assert_allclose(_law(lg, top_p=0.1, min_tokens_to_keep=2), [7 / 9, 2 / 9, 0])
    np.testing.assert_allclose(_law(lg, top_k=1, min_tokens_to_keep=2), [7 / 9, 2 / 9, 0])
    np.testing.assert_allclose(_law(lg, min_p=0.9, min_tokens_to_keep=2), [7 / 9, 2 / 9, 0])
    with pytest.raises(ValueError, match=r"`min_tokens_to_keep` must be 1 with order='vllm'"):
        _law(lg, top_p=0.1, min_tokens_to_keep=2, order="vllm")


def test_greedy_and_the_limits():
    lg = [0.3, 2.0, -1.0, 2.0, -math.inf]
    # argmax picks the first maximal index; filters are ignored
    np.testing.assert_array_equal(_law(lg, temperature=0), [0, 1, 0, 0, 0])
    np.testing.assert_array_equal(_law(lg, temperature=0, top_p=0.1, top_k=3), [0, 1, 0, 0, 0])
    # vLLM: greedy below 1e-5; transformers samples (the T -> 0 limit splits the tie)
    np.testing.assert_array_equal(_law(lg, temperature=1e-6, order="vllm"), [0, 1, 0, 0, 0])
    np.testing.assert_array_equal(_law(lg, temperature=1e-6), [0, 0.5, 0, 0.5, 0])
    # unique maximum: small T is exactly greedy (the rest underflows)
    np.testing.assert_array_equal(_law([0.0, 1.0, 0.5], temperature=1e-4), [0, 1, 0])
    # T = inf: uniform over the finite logits, top-k chosen by the logits' order
    np.testing.assert_array_equal(_law(lg, temperature=math.inf), [0.25, 0.25, 0.25, 0.25, 0])
    np.testing.assert_array_equal(
        _law([0.0, 3.0, 1.0, 2.0], temperature=math.inf, top_k=2), [0, 0.5, 0, 0.5]
    )
    # T = 1 and no filter: the softmax; top_p = 1, min_p = 0, top_k >= V change nothing
    soft = np.exp([0.3, 2.0, -1.0, 2.0, -np.inf] - np.logaddexp.reduce([0.3, 2.0, -1.0, 2.0]))
    for kw in [{}, {"top_p": 1.0}, {"min_p": 0.0}, {"top_k": 5}, {"top_k": 10**9}]:
        np.testing.assert_allclose(_law(lg, **kw), soft, rtol=1e-15, atol=0)


def test_zeros_stay_zero_and_batches_axes_dtypes():
    rng = np.random.default_rng(1)
    lg = rng.normal(size=(3, 4, 6))
    lg[0, 0, 2] = -np.inf
    kw = {"temperature": 0.8, "top_k": 4, "top_p": 0.9}
    s = sampler_law(lg, **kw)
    assert s[0, 0, 2] == 0 and np.allclose(s.sum(-1), 1, atol=1e-15)
    np.testing.assert_array_equal(
        np.moveaxis(sampler_law(lg, axis=1, **kw), 1, -1), sampler_law(np.moveaxis(lg, 1, -1), **kw)
    )
    s32 = sampler_law(lg.astype(np.float32), **kw)
    assert s32.dtype == np.float32
    np.testing.assert_allclose(
        s32, sampler_law(lg.astype(np.float32).astype(np.float64), **kw), atol=1e-7
    )
    # a shift of the logits changes nothing
    np.testing.assert_allclose(sampler_law(lg + 100.0, **kw), s, atol=1e-15)


@settings(max_examples=100, deadline=None)
@given(logits=logit_rows, kw=setting, seed=st.integers(0, 2**16))
def test_permutation_equivariance_without_ties(logits, kw, seed):
    """Permuting the tokens permutes the law (rows without ties: the tie order is by index)."""
    finite = [x for x in logits if x > -math.inf]
    if len(set(finite)) != len(finite):
        logits = [x + 1e-3 * i if x > -math.inf else x for i, x in enumerate(logits)]
    perm = np.random.default_rng(seed).permutation(len(logits))
    lg = np.asarray(logits)
    np.testing.assert_allclose(_law(lg[perm], **kw), _law(lg, **kw)[perm], atol=1e-15)


@pytest.mark.parametrize("size", [pytest.param(131072, marks=pytest.mark.slow), 8192])
def test_large_vocabulary_batch(size):
    """Long rows take the binary-search path (rows of 4096 and more): same law as the
    plain reference."""
    rng = np.random.default_rng(2)
    lg = rng.normal(size=(2, size)) * 4
    kw = {"temperature": 0.7, "top_k": 50, "top_p": 0.95, "min_p": 0.01}
    for order in ORDERS:
        s = sampler_law(lg, order=order, **kw)
        assert np.allclose(s.sum(-1), 1, atol=1e-14)
        assert 1 <= np.count_nonzero(s[0]) <= 50
        np.testing.assert_allclose(s[1], reference_law(lg[1], order=order, **kw), atol=1e-15)
    # ties in a long row: top-p splits them by index on the binary-search path too
    flat = np.zeros(size)
    s = sampler_law(flat, top_p=0.5)
    assert np.count_nonzero(s) == size // 2 and s[-1] > 0 and s[0] == 0


BAD = [
    ({"temperature": -0.1}, "`temperature` must be"),
    ({"temperature": np.nan}, "`temperature` must be"),
    ({"top_k": -1}, "`top_k` must be an integer >= 0"),
    ({"top_k": 2.5}, "`top_k` must be an integer >= 0"),
    ({"defaults": "vllm"}, "`defaults` must be one of 'transformers'; got 'vllm'"),
    ({"defaults": 3}, "`defaults` must be None, one of 'transformers', a mapping or a Gener"),
    ({"defaults": {"top_k": -2}}, r"`defaults\['top_k'\]` must be an integer >= 0; got -2"),
    ({"defaults": {"top_p": 1.5}}, r"`defaults\['top_p'\]` must be a number in \(0, 1\]"),
    ({"top_p": 0.0}, r"`top_p` must be"),
    ({"top_p": 1.5}, r"`top_p` must be"),
    ({"min_p": -0.1}, r"`min_p` must be"),
    ({"min_p": 1.01}, r"`min_p` must be"),
    ({"order": "sglang"}, "`order` must be one of 'transformers', 'vllm'"),
    ({"logits": [0.0, np.nan]}, "`logits` must not contain NaN"),
    ({"logits": [0.0, np.inf]}, r"`logits` must not be \+inf"),
    (
        {"logits": [[0.0, 1.0], [-np.inf, -np.inf]]},
        r"`logits` must have a finite entry in every row",
    ),
]


@pytest.mark.parametrize(("kw", "msg"), BAD)
def test_bad_input_names_the_argument(kw, msg):
    kw = {"logits": [0.0, 1.0], **kw}
    with pytest.raises(ValueError, match=msg):
        sampler_law(**kw)


def test_interval_messages_show_the_interval():
    with pytest.raises(ValueError, match=r"`top_p` must be a number in \(0, 1\]"):
        sampler_law([0.0, 1.0], top_p=0)
    with pytest.raises(ValueError, match=r"`min_p` must be a number in \[0, 1\]"):
        sampler_law([0.0, 1.0], min_p=2)
