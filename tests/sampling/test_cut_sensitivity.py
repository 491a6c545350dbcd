"""cut_sensitivity (issue 40, item 8): on tied rows top-p's cumulative sum lands on 1 - top_p and
engines keep a different tied block; the report says how much of the law hangs on that."""

from __future__ import annotations

import numpy as np
import pytest

from klpolicy.sampling import cut_sensitivity, sampler_law


def test_hand_computed_tied_row():
    # four equal logits, top_p = 0.5: ascending sums 0.25, 0.5 (= 1 - top_p), 0.75, 1
    res = cut_sensitivity(np.zeros(4), top_p=0.5)
    np.testing.assert_array_equal(res.law, [0, 0, 0.5, 0.5])  # exact: 0.5 <= 0.5 removed
    np.testing.assert_array_equal(res.fewer, [0, 0, 0.5, 0.5])
    np.testing.assert_allclose(res.more, [0, 1 / 3, 1 / 3, 1 / 3], rtol=1e-15)
    np.testing.assert_array_equal(res.reversed_ties, [0.5, 0.5, 0, 0])
    # one token more of a kept block of m = 2 moves 1/(m + 1) of the mass
    assert res.moved == pytest.approx(1 / 3, rel=1e-15)
    assert res.tie_moved == 1.0  # which 2 of the 4 tied tokens: all of the mass
    assert res.kept == 2 and res.kept_range.tolist() == [2, 3]
    # one kept token of two tied: 1/(1 + 1) = 0.5, the largest reported move
    res = cut_sensitivity([0.0, 0.0], top_p=0.5)
    assert res.moved == 0.5 and res.kept_range.tolist() == [1, 2]


def test_no_cut_near_rounding_gives_zero_and_the_law():
    rng = np.random.default_rng(0)
    lg = rng.normal(size=(20, 40)) * 2
    for kw in [{"top_p": 0.8}, {"min_p": 0.1}, {"top_k": 5, "top_p": 0.7, "min_p": 0.05}, {}]:
        res = cut_sensitivity(lg, tolerance=1e-9, **kw)
        np.testing.assert_array_equal(res.law, sampler_law(lg, **kw))
        assert (res.moved == 0).all() and (res.tie_moved == 0).all()
        np.testing.assert_array_equal(res.kept_range[..., 0], res.kept)
        np.testing.assert_array_equal(res.kept_range[..., 1], res.kept)


def test_min_p_exactly_at_its_threshold():
    # p = (0.5, 0.25, 0.25): min_p = 0.5 puts both 0.25 tokens exactly on 0.5 * max p
    lg = np.log([0.5, 0.25, 0.25])
    res = cut_sensitivity(lg, min_p=0.5)
    np.testing.assert_allclose(res.law, [0.5, 0.25, 0.25], rtol=1e-15)  # p >= 0.5 max: kept
    np.testing.assert_array_equal(res.fewer, [1, 0, 0])
    assert res.moved == pytest.approx(0.5, rel=1e-15) and res.tie_moved == 0


def test_batches_axis_dtype_and_bad_tolerance():
    lg = np.zeros((3, 4, 2), dtype=np.float32)
    res = cut_sensitivity(lg, top_p=0.5, axis=1)
    assert res.law.shape == (3, 4, 2) and res.law.dtype == np.float32
    assert res.moved.shape == (3, 2) and res.kept_range.shape == (3, 2, 2)
    for bad in [-0.1, 1.0, np.nan, "x"]:
        with pytest.raises(ValueError, match="`tolerance` must be"):
            cut_sensitivity([0.0, 1.0], top_p=0.5, tolerance=bad)


def _tied_rows(rng, n):
    """Rows with a tied block and top_p chosen so that 1 - top_p is a cumulative sum."""
    for _ in range(n):
        size = int(rng.integers(2, 12))
        ties = int(rng.integers(2, size + 1))
        lg = np.concatenate([np.zeros(ties), rng.integers(-3, 4, size=size - ties) / 2.0])
        lg = lg[rng.permutation(size)]
        p = np.exp(lg - lg.max())
        p /= p.sum()
        top_p = float(1 - np.cumsum(np.sort(p))[int(rng.integers(0, size - 1))])
        if 0 < top_p < 1:
            yield lg, top_p


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_transformers_top_p_lies_within_the_reported_sensitivity(dtype):
    """Against transformers 5.25.0's TopPLogitsWarper (torch.sort, float32 or float64): where
    the report says 0 the engine's law is this law; elsewhere it keeps between the fewest and
    the most tokens reported and moves at most moved + tie_moved of the mass."""
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.generation.logits_process import TopPLogitsWarper

    rng = np.random.default_rng(11)
    differ = 0
    for lg, top_p in _tied_rows(rng, 600):
        scores = torch.tensor(lg[None], dtype=getattr(torch, dtype))
        warped = TopPLogitsWarper(top_p=top_p)(None, scores)
        engine = torch.softmax(warped.double(), dim=-1).numpy()[0]
        res = cut_sensitivity(lg, top_p=top_p)
        tv = 0.5 * np.abs(engine - res.law).sum()
        lo, hi = res.kept_range
        assert lo <= np.count_nonzero(engine) <= hi
        assert tv <= res.moved + res.tie_moved + 1e-12
        if res.moved == 0 and res.tie_moved == 0:
            assert tv < 1e-12
        differ += tv > 1e-12
    assert differ > 30  # the tied cut does move mass on engines (float32 and float64)
