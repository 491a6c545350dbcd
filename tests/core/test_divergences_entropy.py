"""Tests of entropy, cross_entropy and effective_support in klpolicy.core.divergences."""

import re

import mpmath as mp
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from klpolicy.core.divergences import cross_entropy, effective_support, entropy, kl_divergence


# mpmath recipe: 50 digits (the conftest fixture); each float entry x is converted exactly
# with mp.mpf(x); H = -sum_{p>0} p log p and CE = -sum_{p>0} p log q, summed in mpmath (no
# renormalisation, unlike tests/_mpref's references: the functions use the entries as given).
def mp_entropy_as_given(p):
    return -mp.fsum(mp.mpf(x) * mp.log(mp.mpf(x)) for x in p if x > 0)


def mp_cross_entropy_as_given(p, q):
    if any(x > 0 and y == 0 for x, y in zip(p, q, strict=True)):
        return mp.inf
    return -mp.fsum(mp.mpf(x) * mp.log(mp.mpf(y)) for x, y in zip(p, q, strict=True) if x > 0)


ROWS = [
    [0.5, 0.5],
    [0.3, 0.0, 0.7],
    [1e-300, 1.0],
    [5e-324, 0.25, 0.75],
    [1e-300, 1e-300, 0.5, 0.5],
    [1.0 - 1e-10, 1e-10],
    [0.1, 0.2, 0.3, 0.4],
    [1.0, 0.0, 0.0],
]


@pytest.mark.parametrize("p", ROWS)
def test_entropy_matches_mpmath(p):
    got = float(entropy(p))
    want = mp_entropy_as_given(p)
    if want == 0:
        assert got == 0.0
    else:
        assert abs(got - float(want)) <= 1e-13 * float(want)


def test_entropy_of_tiny_entry_keeps_its_digits():
    # H([1e-300, 1]) = 1e-300 * 300 log 10, far below the rounding of any O(1) term
    assert float(entropy([1e-300, 1.0])) == pytest.approx(1e-300 * 300 * np.log(10), rel=1e-14)


QPAIRS = [
    ([0.5, 0.5], [0.9, 0.1]),
    ([0.5, 0.5, 0.0], [1e-300, 1.0 - 2e-300, 0.0]),
    ([1e-300, 1.0], [0.5, 0.5]),
    ([0.2, 0.8, 0.0], [0.2, 0.3, 0.5]),
    ([0.25, 0.75], [1e-300, 1.0]),
    ([0.0, 1.0], [0.0, 1.0]),
]


@pytest.mark.parametrize(("p", "q"), QPAIRS)
def test_cross_entropy_matches_mpmath(p, q):
    got = float(cross_entropy(p, q))
    want = mp_cross_entropy_as_given(p, q)
    if want == 0:
        assert got == 0.0
    else:
        assert abs(got - float(want)) <= 1e-13 * float(want)


def test_cross_entropy_infinite_off_support_and_zero_times_log_zero():
    assert float(cross_entropy([0.5, 0.5], [1.0, 0.0])) == np.inf
    # p = 0 where q = 0 contributes 0, not nan
    assert float(cross_entropy([1.0, 0.0], [1.0, 0.0])) == 0.0
    assert float(entropy([0.0, 1.0])) == 0.0


def test_batch_axis_and_dtype():
    p = np.array([[0.5, 0.5], [0.9, 0.1], [1.0, 0.0]])
    h = entropy(p)
    assert h.shape == (3,)
    np.testing.assert_allclose(h, [np.log(2), -0.9 * np.log(0.9) - 0.1 * np.log(0.1), 0.0])
    np.testing.assert_allclose(entropy(p.T, axis=0), h, rtol=0, atol=0)
    h32 = entropy(p.astype(np.float32))
    assert h32.dtype == np.float32
    np.testing.assert_allclose(h32, h, rtol=1e-6)
    # a single q broadcasts against a batch of p
    ce = cross_entropy(p, [0.5, 0.5])
    np.testing.assert_allclose(ce, np.log(2) * np.ones(3), rtol=1e-15)
    assert np.isscalar(entropy([0.5, 0.5])) or np.ndim(entropy([0.5, 0.5])) == 0


def test_effective_support_values():
    assert float(effective_support([0.25] * 4)) == pytest.approx(4.0, rel=1e-15)
    assert float(effective_support([0.5, 0.5, 0.0, 0.0])) == pytest.approx(2.0, rel=1e-15)
    assert float(effective_support([1.0, 0.0])) == 1.0
    # 2**1.5 for (1/4, 1/4, 1/2)
    assert float(effective_support([0.25, 0.25, 0.5])) == pytest.approx(2**1.5, rel=1e-15)


# entries from 0 through 1e-300 to 1, so that p/q can be far below eps
entry = st.one_of(st.just(0.0), st.floats(1e-300, 1e-280), st.floats(1e-20, 1.0))
probs = st.lists(entry, min_size=1, max_size=8).filter(lambda x: sum(x) > 0)


def _norm(x):
    a = np.asarray(x, dtype=float)
    return a / a.sum()


@pytest.mark.slow
@given(probs, probs)
def test_kl_is_cross_entropy_minus_entropy(a, b):
    n = min(len(a), len(b))
    assume(sum(a[:n]) > 0 and sum(b[:n]) > 0)  # truncation can leave an all-zero row
    p, q = _norm(a[:n]), _norm(b[:n])
    if not np.isclose(p.sum(), 1.0, atol=1e-12) or not np.isclose(q.sum(), 1.0, atol=1e-12):
        return
    kl = float(kl_divergence(p, q))
    ce = float(cross_entropy(p, q))
    h = float(entropy(p))
    assert 0.0 <= h <= np.log(n) + 1e-12
    if np.isinf(kl):
        assert np.isinf(ce)
    else:
        assert ce >= h - 1e-12
        assert abs((ce - h) - kl) <= 1e-12 * max(1.0, ce)


@given(probs)
def test_effective_support_between_one_and_support_size(a):
    p = _norm(a)
    n_eff = float(effective_support(p))
    assert 1.0 - 1e-12 <= n_eff <= np.count_nonzero(p) * (1 + 1e-12)


BAD = [
    (lambda: entropy([-0.1, 1.1]), "`p` must be non-negative; found -0.1 at index (0,)"),
    (
        lambda: entropy([0.5, 0.6]),
        "`p` must sum to 1 along axis -1; it sums to 1.1 (tolerance 1.5e-08); "
        "klpolicy never renormalises silently",
    ),
    (lambda: entropy([0.5, np.nan]), "`p` must not contain NaN; found nan at index (1,)"),
    (lambda: entropy([]), "`p` must not be empty; got shape (0,)"),
    (lambda: entropy(0.5), "`p` must have at least one dimension; got a scalar 0.5"),
    (lambda: entropy([1.0], axis=1), "`axis` 1 is out of bounds for `p` with 1 dimension"),
    (
        lambda: cross_entropy([0.5, 0.5], [0.2, 0.3, 0.5]),
        "`q` must have the same size as `p` along the probability axis; got 3 and 2",
    ),
    (
        lambda: cross_entropy([0.5, 0.5], [np.inf, 0.0]),
        "`q` must be finite; found inf at index (0,)",
    ),
    (
        lambda: effective_support([[0.5, 0.5], [0.2, -0.2]]),
        "`p` must be non-negative; found -0.2 at index (1, 1)",
    ),
    (lambda: entropy(["a", "b"]), "`p` must be an array of real numbers; got dtype <U1"),
]


@pytest.mark.parametrize(("call", "msg"), BAD)
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        call()


def test_kl_equals_ce_minus_h_with_tiny_entries():
    p, q = [1e-17, 1.0], [0.5, 0.5]
    want = float(mp_cross_entropy_as_given(p, q) - mp_entropy_as_given(p))
    assert float(kl_divergence(p, q)) == pytest.approx(want, rel=1e-12)
