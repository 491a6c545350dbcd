"""The one-exp fast path of the core and its switch to the careful log-space path.

Rows are routed per row (klpolicy.core._tilt._fast_ok): these tests build rows on
both sides of every condition, check which path each row takes, and compare
both paths with the 400-digit mpmath references of tests/_mpref/closed_form.py (recipe
there). Small block sizes (monkeypatched) make every row its own block, so that
the block-wise validation and routing are exercised on small arrays.
"""

from __future__ import annotations

import re
import tracemalloc

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import klpolicy as kp
from klpolicy.core import _tilt as K
from klpolicy.core import _validation as V

from .. import _mpref as R


@pytest.fixture(params=[1 << 18, 64], ids=["default-blocks", "one-row-blocks"])
def blocks(request, monkeypatch):
    monkeypatch.setattr(K, "_BLOCK_BYTES", request.param)
    return request.param


def _routes(ref, reward, beta, stats=False):
    """Which rows take the fast path (True) for validated 2-D inputs and per-row beta."""
    ref, reward = np.asarray(ref, float), np.asarray(reward, float)
    b = np.asarray(beta, float).reshape(-1, 1)
    with np.errstate(all="ignore"):
        ib = 1 / b[:, 0]
        res = {"value": np.empty((ref.shape[0], 1))} if stats else {}
        sw = K._sweep(ref, reward, ib, frozenset(res), None, res)
        # pi alone: the sweep's routing (float64 rows are first accepted from their
        # weights, _quick_rows); statistics: the general conditions
        return K._fast_ok(ref, reward, ib, sw, stats=stats) if stats else sw.ok


# rows of 4 entries, each with its beta; True where the fast path is provably exact
ROWS = [
    # (name, ref, reward, beta, fast for pi, fast for statistics)
    ("plain", [0.1, 0.2, 0.3, 0.4], [1.0, -0.5, 0.3, 2.0], 0.5, True, True),
    ("big offset", [0.25, 0.25, 0.25, 0.25], [1e6, 1e6 + 1, 1e6 - 2, 1e6 + 0.5], 0.1, True, True),
    ("tiny ref", [1e-300, 0.3, 0.3, 0.4 - 1e-300], [3.0, 0.0, 1.0, -1.0], 1.0, True, True),
    # pi alone: every weight is normal (2e-304), so every digit is kept
    ("tinier ref", [1e-305, 0.3, 0.3, 0.4 - 1e-305], [3.0, 0.0, 1.0, -1.0], 1.0, True, False),
    ("subnormal w", [1e-307, 0.3, 0.3, 0.4 - 1e-307], [-3.0, 0.0, 1.0, -1.0], 1.0, False, False),
    # pi alone: no shift up to the exponent range (|r| / beta = 700 here)
    ("near the range", [0.25, 0.25, 0.25, 0.25], [700.0, 699.0, 1.0, -5.0], 1.0, True, False),
    ("underflow", [0.25, 0.25, 0.25, 0.25], [0.0, 1.0, 2.0, 800.0], 1.0, False, False),
    ("zeros ok", [0.0, 0.5, 0.0, 0.5], [5.0, 1.0, -3.0, 0.2], 0.2, True, True),
    ("zeros, huge off support", [0.5, 0.0, 0.5, 0.0], [0.0, 1e6, 1.0, 0.0], 1e-3, False, False),
    ("greedy", [0.1, 0.2, 0.3, 0.4], [1.0, -0.5, 0.3, 2.0], 0.0, False, False),
    ("reference", [0.1, 0.2, 0.3, 0.4], [1.0, -0.5, 0.3, 2.0], np.inf, False, False),
    ("large beta", [0.1, 0.2, 0.3, 0.4], [1.0, -0.5, 0.3, 2.0], 10.0, True, False),
    ("constant reward", [0.1, 0.2, 0.3, 0.4], [2.0, 2.0, 2.0, 2.0], 1.0, True, False),
]


def test_rows_are_routed_as_documented():
    ref = np.array([r[1] for r in ROWS])
    reward = np.array([r[2] for r in ROWS])
    beta = np.array([r[3] for r in ROWS])
    np.testing.assert_array_equal(_routes(ref, reward, beta), [r[4] for r in ROWS])
    np.testing.assert_array_equal(_routes(ref, reward, beta, stats=True), [r[5] for r in ROWS])


@pytest.mark.usefixtures("blocks")
def test_mixed_batch_matches_mpmath_row_by_row():
    ref = np.array([r[1] for r in ROWS])
    reward = np.array([r[2] for r in ROWS])
    beta = np.array([r[3] for r in ROWS])[:, None]
    pi = kp.optimal_policy(ref, reward, beta)
    value = kp.soft_value(ref, reward, beta)
    kl = kp.optimal_kl(ref, reward, beta)
    for i, (name, q, r, b, *_) in enumerate(ROWS):
        np.testing.assert_array_equal(pi[i], kp.optimal_policy(q, r, b), err_msg=name)
        if b == 0 or np.isinf(b):
            continue  # the limits: tested in test_closed_form
        want = R.to_float(R.optimal_policy(q, r, b))
        normal = want > 1e-290
        assert np.all(np.abs(pi[i][normal] / want[normal] - 1) < 2e-12), name
        assert np.all(pi[i][~normal] <= 1e-290), name
        spread = np.ptp(np.asarray(r)[np.asarray(q) > 0])
        v = float(R.soft_value(q, r, b))
        assert abs(value[i] - v) <= 1e-12 * abs(v) + 8 * np.finfo(float).eps * spread, name
        k = float(R.optimal_kl(q, r, b))
        assert abs(kl[i] - k) <= 1e-11 * k + 1e-300, name


@pytest.mark.parametrize("margin", [-2.0, -0.5, 0.5, 2.0])
def test_both_sides_of_the_underflow_threshold(margin):
    # log(min ref) + (min r - max r)/beta = -700 + margin: fast above, careful below
    q = np.array([1e-200, 0.5, 0.5 - 1e-200])
    gap = 700 + margin + np.log(1e-200)  # (max r - min r) / beta
    r = np.array([0.0, gap, gap / 2])
    # the statistics' rule (pi alone is taken unshifted here: every weight is normal)
    assert _routes(q[None], r[None], [1.0], stats=True)[0] == (margin < 0)
    assert _routes(q[None], r[None], [1.0])[0]
    got = kp.optimal_policy(q, r, 1.0)
    want = R.to_float(R.optimal_policy(q, r, 1.0))
    normal = want > 1e-290
    assert np.all(np.abs(got[normal] / want[normal] - 1) < 2e-12)
    assert kp.optimal_kl(q, r, 1.0) == pytest.approx(float(R.optimal_kl(q, r, 1.0)), rel=1e-11)


@pytest.mark.parametrize("scale", [0.5, 1.0, 2.0, 4.0])
@pytest.mark.parametrize("gap", [0.0, 300.0, 700.0])
def test_pi_alone_is_taken_unshifted_while_every_weight_is_normal(scale, gap):
    # a float64 pi-only row is accepted from its weights: the smallest, ref_0 exp(r_0),
    # at or above the smallest normal float (scale >= 1), and a finite sum; below it
    # (a subnormal weight) the general rule routes the row (here, to the careful path:
    # its smallest reference entry is itself below the normal range)
    tiny = np.finfo(float).tiny
    q = np.array([tiny * scale, 0.5, 0.5 - tiny * scale])
    r = np.array([0.0, gap, gap / 2])  # r / beta up to 700, no shift
    assert _routes(q[None], r[None], [1.0])[0] == (scale >= 1)
    got = kp.optimal_policy(q, r, 1.0)
    want = R.to_float(R.optimal_policy(q, r, 1.0))
    normal = want > 1e-300
    # 2 |r / beta| u: the rounding of r / beta, relative (1.6e-13 at 700)
    assert np.all(np.abs(got[normal] / want[normal] - 1) < 2 * 700 * 2**-53 + 4e-16)
    assert np.all(got[~normal] == pytest.approx(want[~normal], abs=4 * 2**-1074))


@pytest.mark.parametrize("top", [30.0, 300.0, 650.0, -650.0])
def test_unshifted_rows_within_the_rounding_bound_of_r_over_beta(top):
    # random rows whose largest |r| / beta is `top`, taken unshifted (every weight is
    # normal): each pi entry within 2 max|r / beta| u of 40-digit mpmath, in any order
    rng = np.random.default_rng(int(abs(top)) + (top < 0))
    beta = 0.126
    ref = rng.dirichlet(np.ones(64), size=3)
    reward = rng.normal(size=(3, 64)) * 2
    reward += (top * beta - reward.max(axis=-1, keepdims=True)) if top > 0 else 0
    reward -= (-top * beta + reward.min(axis=-1, keepdims=True)) if top < 0 else 0
    assert _routes(ref, reward, np.full(3, beta)).all()
    bound = 2 * np.max(np.abs(reward / beta)) * 2**-53 + 8 * 2**-53
    pi = kp.optimal_policy(ref, reward, beta)
    for i in range(3):
        want = R.to_float(R.optimal_policy(ref[i], reward[i], beta))
        assert np.max(np.abs(pi[i] / want - 1)) < bound
        perm = rng.permutation(64)
        permuted = kp.optimal_policy(ref[i][perm], reward[i][perm], beta)
        assert np.max(np.abs(permuted / want[perm] - 1)) < bound


@pytest.mark.parametrize("beta", [0.05, 0.3, 1.0, 3.0])
def test_fast_rows_against_mpmath(beta):
    rng = np.random.default_rng(int(beta * 1000))
    ref = rng.dirichlet(np.full(9, 0.7), size=4)
    reward = rng.normal(size=(4, 9)) * 2
    assert _routes(ref, reward, np.full(4, beta)).all()
    pi = kp.optimal_policy(ref, reward, beta)
    kl = kp.optimal_kl(ref, reward, beta)
    value = kp.soft_value(ref, reward, beta)
    for i in range(4):
        want = R.to_float(R.optimal_policy(ref[i], reward[i], beta))
        normal = want > 1e-290
        assert np.all(np.abs(pi[i][normal] / want[normal] - 1) < 2e-12)
        assert kl[i] == pytest.approx(float(R.optimal_kl(ref[i], reward[i], beta)), rel=1e-12)
        v = float(R.soft_value(ref[i], reward[i], beta))
        assert abs(value[i] - v) <= 1e-12 * abs(v) + 8 * np.finfo(float).eps * np.ptp(reward[i])


def test_small_kl_rows_keep_relative_precision():
    # KL ~ 1e-10: the non-negative series summands are needed (no cancellation allowed)
    ref = np.array([[0.2, 0.3, 0.5], [0.25, 0.25, 0.5]])
    reward = np.array([[0.0, 1e-4, 3e-5], [1.0, 1.00001, 0.99999]])
    kl = kp.optimal_kl(ref, reward, 0.7)
    for i in range(2):
        assert kl[i] == pytest.approx(float(R.optimal_kl(ref[i], reward[i], 0.7)), rel=1e-11)


def test_float32_matches_float64():
    rng = np.random.default_rng(5)
    ref = rng.dirichlet(np.ones(300), size=6)
    reward = rng.normal(size=(6, 300))
    for beta in [0.1, 1.0]:
        p64 = kp.optimal_policy(ref, reward, beta)
        p32 = kp.optimal_policy(ref.astype(np.float32), reward.astype(np.float32), beta)
        assert p32.dtype == np.float32
        np.testing.assert_allclose(p32, p64, rtol=2e-5, atol=1e-30)
        k32 = kp.optimal_kl(ref.astype(np.float32), reward.astype(np.float32), beta)
        assert k32.dtype == np.float32
        np.testing.assert_allclose(k32, kp.optimal_kl(ref, reward, beta), rtol=1e-4)


# --------------------------------------------------------------------------- validation in blocks


def _slow_message(fn):
    with pytest.raises(ValueError) as info:
        fn()
    return str(info.value)


@pytest.mark.usefixtures("blocks")
@pytest.mark.parametrize(
    ("where", "value", "array"),
    [
        ((5, 2), np.nan, "ref"),
        ((5, 2), -0.1, "ref"),
        ((6, 0), np.inf, "ref"),
        ((7, 3), 0.9, "ref"),  # the row no longer sums to one
        ((5, 1), np.nan, "reward"),
        ((6, 2), -np.inf, "reward"),
        ((7, 0), np.inf, "reward"),
    ],
)
def test_a_bad_value_in_a_late_block_gets_the_validators_message(where, value, array):
    rng = np.random.default_rng(0)
    ref = rng.dirichlet(np.ones(4), size=8)
    reward = rng.normal(size=(8, 4))
    (ref if array == "ref" else reward)[where] = value
    if array == "ref":
        msg = _slow_message(lambda: V.as_probabilities("ref", ref))
    else:
        msg = _slow_message(lambda: V.as_rewards("reward", reward))
    for fn in (kp.optimal_policy, kp.soft_value, kp.optimal_kl):
        with pytest.raises(ValueError, match=re.escape(msg)):
            fn(ref, reward, 0.5)


def test_bad_ref_is_reported_before_a_bad_beta():
    with pytest.raises(ValueError, match=re.escape("`ref` must be non-negative")):
        kp.optimal_policy([[0.5, 0.5], [1.5, -0.5]], [1.0, 0.0], -1.0)
    with pytest.raises(ValueError, match=re.escape("`beta` must be non-negative")):
        kp.optimal_policy([[0.5, 0.5], [0.5, 0.5]], [1.0, 0.0], -1.0)


# --------------------------------------------------------------------------- memory


def test_peak_memory_is_about_the_output():
    rng = np.random.default_rng(1)
    ref = rng.dirichlet(np.ones(4096), size=64)
    reward = rng.normal(size=(64, 4096))
    tracemalloc.start()
    tracemalloc.reset_peak()
    kp.optimal_policy(ref, reward, 0.5)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    # the returned array plus block-sized scratch (here a few rows)
    assert peak < 1.25 * ref.nbytes


# --------------------------------------------------------------------------- kl_divergence


@pytest.mark.parametrize(
    ("p", "q"),
    [
        ([0.7, 0.2, 0.1, 0.0], [0.1, 0.2, 0.3, 0.4]),  # p < q/2 and p = 0: log difference
        ([0.1, 0.2, 0.3, 0.4], [0.7, 0.2, 0.1 - 1e-300, 1e-300]),  # q tiny: ratio huge
        ([0.25, 0.25, 0.25, 0.25], [0.25 + 1e-9, 0.25 - 1e-9, 0.25, 0.25]),  # nearly equal
        ([1e-300, 0.5, 0.5 - 1e-300, 0.0], [0.5, 1e-300, 0.5 - 1e-300, 0.0]),
    ],
)
def test_kl_divergence_fast_path_against_mpmath(p, q):
    got = kp.kl_divergence(p, q)
    assert got == pytest.approx(float(R.kl(p, q)), rel=1e-12)
    # the same rows inside a batch, and on the axis 0 layout
    batch = kp.kl_divergence([p, q, p], [q, p, q])
    assert batch[0] == got and batch[2] == got
    assert kp.kl_divergence(np.array([p, p]).T, np.array([q, q]).T, axis=0)[1] == got


def test_kl_divergence_off_support_is_infinite_in_a_batch():
    p = np.array([[0.5, 0.5], [1.0, 0.0], [0.0, 1.0]])
    q = np.array([[1.0, 0.0], [1.0, 0.0], [0.5, 0.5]])
    np.testing.assert_array_equal(kp.kl_divergence(p, q), [np.inf, 0.0, np.log(2)])


def test_kl_divergence_bad_input_keeps_its_message():
    with pytest.raises(ValueError, match=re.escape("`q` must not contain NaN; found nan at")):
        kp.kl_divergence([[0.5, 0.5], [0.5, 0.5]], [[0.5, 0.5], [np.nan, 0.5]])
    with pytest.raises(ValueError, match=re.escape("`p` must be non-negative; found -0.5")):
        kp.kl_divergence([1.5, -0.5], [0.5, 0.5])


# --------------------------------------------------------------------------- beta_for_kl


def test_beta_for_kl_batch_mixing_paths_matches_single_rows():
    ref = np.array([r[1] for r in ROWS[:6]])
    reward = np.array([r[2] for r in ROWS[:6]])
    target = 0.5 * kp.max_kl(ref, reward)
    beta = kp.beta_for_kl(ref, reward, target)
    np.testing.assert_allclose(kp.optimal_kl(ref, reward, beta[:, None]), target, rtol=1e-11)
    for i in range(ref.shape[0]):
        assert kp.beta_for_kl(ref[i], reward[i], target[i]) == pytest.approx(beta[i], rel=1e-11)


# --------------------------------------------------------------------------- fast == careful


@pytest.mark.slow
@given(
    st.integers(1, 4),
    st.integers(1, 12),
    st.floats(-12, 6),
    st.floats(-3, 3),
    st.integers(0, 2**32 - 1),
)
def test_kernel_equals_the_careful_path(rows, n, log10_beta, log10_scale, seed):
    # whatever the routing, every field agrees with the careful log-space path
    rng = np.random.default_rng(seed)
    ref = rng.dirichlet(np.full(n, 0.5), size=rows)
    ref[rng.random((rows, n)) < 0.2] = 0.0
    ref[:, 0] += 1e-3
    ref /= ref.sum(-1, keepdims=True)
    reward = rng.normal(size=(rows, n)) * 10.0**log10_scale
    beta = np.full((rows, 1), 10.0**log10_beta)
    fast = K.tilt(ref, reward, beta, {"pi", "value", "kl", "mean", "var"})
    slow = K._tilt_careful(ref, reward, beta, {"pi", "value", "kl", "mean", "var"})
    np.testing.assert_allclose(fast.pi, slow.pi, rtol=1e-12, atol=1e-290)
    spread = np.ptp(reward, axis=-1, keepdims=True)
    eps = np.finfo(float).eps
    assert np.all(np.abs(fast.value - slow.value) <= 1e-13 * np.abs(slow.value) + 8 * eps * spread)
    np.testing.assert_allclose(fast.kl, slow.kl, rtol=1e-11, atol=1e-300)
    scale = np.abs(reward).max(-1, keepdims=True)
    assert np.all(np.abs(fast.mean - slow.mean) <= 1e-12 * scale)
    # Var_pi(r)/beta^2 is only Newton's slope; both paths centre r on a rounded mean, so
    # the absolute error is about (eps max|r| / beta)^2 when one outcome takes all the mass
    noise = (16 * eps * scale / beta) ** 2
    assert np.all(np.abs(fast.var - slow.var) <= 1e-9 * slow.var + noise)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_soft_values_stay_on_the_fast_path_unless_near_zero(dtype):
    """Typical rows keep their one-exp soft value in either dtype (the test is in the
    dtype's own ulp: a float64-sized tolerance sent every float32 row to the careful
    path, 70x slower); a value far below its best reward and beta is handed over."""
    rng = np.random.default_rng(5)
    ref = rng.dirichlet(np.ones(64), size=32).astype(dtype)
    reward = rng.normal(size=(32, 64)).astype(dtype)
    ib = np.full(32, 2.0, dtype)
    res = {"value": np.empty((32, 1), dtype)}
    with np.errstate(all="ignore"):
        sw = K._sweep(ref, reward, ib, frozenset(res), None, res)
    assert K._value_resolved(res["value"][:, 0], sw.c, ib).all()
    q, r = np.array([[1e-30, 1.0]], dtype), np.array([[1.0, 0.0]], dtype)  # V = 0.1 e^-50
    ib1 = np.array([10.0], dtype)
    res1 = {"value": np.empty((1, 1), dtype)}
    with np.errstate(all="ignore"):
        sw1 = K._sweep(q, r, ib1, frozenset(res1), None, res1)
    assert not K._value_resolved(res1["value"][:, 0], sw1.c, ib1)[0]


# --------------------------------------------------------------------------- float32 routing


def _float32_batch():
    """Rows of 64 alternating ordinary and wide for float32 (a range of r / beta past
    float32's exponent range), in one order and the other (the row before decides how a
    one-row block is taken: optimistically, or routed before its exponentials)."""
    rng = np.random.default_rng(11)
    ref = rng.dirichlet(np.ones(64), size=8)
    reward = rng.normal(size=(8, 64))
    reward[1::2] *= 12.0  # r / beta spans about +-300 at beta 1/8
    reward[5, 3] = 40.0  # one wide row with a far outlier
    return ref.astype(np.float32), reward.astype(np.float32)


@pytest.mark.usefixtures("blocks")
@pytest.mark.parametrize("order", ["wide second", "wide first"])
def test_float32_wide_rows_are_float64_rounded_once(order):
    ref, reward = _float32_batch()
    if order == "wide first":
        ref, reward = ref[::-1].copy(), reward[::-1].copy()
    beta = 0.125  # exact in float32: the float64 reference sees the same beta
    with np.errstate(all="ignore"):
        ib = np.full(8, 8.0, np.float32)
        sw = K._sweep(ref, reward, ib, frozenset({"pi"}), None, {})
        wide = ~K._fast_ok(ref, reward, ib, sw, stats=False)
    assert wide.sum() == 4  # the scaled rows, and only they
    pi = kp.optimal_policy(ref, reward, beta)
    value = kp.soft_value(ref, reward, beta)
    kl = kp.optimal_kl(ref, reward, beta)
    assert pi.dtype == value.dtype == kl.dtype == np.float32
    ref64, rew64 = ref.astype(np.float64), reward.astype(np.float64)
    pi64 = kp.optimal_policy(ref64, rew64, beta)
    # wide rows: float64's one-exp result rounded once, to the bit
    np.testing.assert_array_equal(pi[wide], pi64[wide].astype(np.float32))
    np.testing.assert_array_equal(
        value[wide], kp.soft_value(ref64, rew64, beta)[wide].astype(np.float32)
    )
    np.testing.assert_array_equal(
        kl[wide], kp.optimal_kl(ref64, rew64, beta)[wide].astype(np.float32)
    )
    np.testing.assert_allclose(pi[~wide], pi64[~wide], rtol=1e-5, atol=1e-37)
    for i in range(8):  # every row as in a batch of its own, and against mpmath
        np.testing.assert_array_equal(kp.optimal_policy(ref[i], reward[i], beta), pi[i])
        want = R.to_float(R.optimal_policy(ref64[i], rew64[i], beta))
        normal = want > 1e-36
        assert np.all(np.abs(pi[i][normal] / want[normal] - 1) < 4e-6)
        assert np.all(np.abs(pi[i][~normal] - want[~normal]) <= 1.5e-45 + 1e-6 * want[~normal])
    with np.errstate(all="raise"):  # no floating-point warning escapes the kernel
        kp.optimal_policy(ref, reward, beta, workers=2)


def test_float32_threads_give_the_same_bits(monkeypatch):
    ref, reward = _float32_batch()
    ref, reward = np.tile(ref, (40, 1)), np.tile(reward, (40, 1))
    one = kp.optimal_kl(ref, reward, 0.125)
    monkeypatch.setattr(K, "_MIN_BLOCKS_PER_THREAD", 1)
    monkeypatch.setattr(K, "_BLOCK_BYTES", 64 * 4 * 3)
    np.testing.assert_array_equal(kp.optimal_kl(ref, reward, 0.125, workers=2), one)


# --------------------------------------------------------------------------- small batches


def _lean_taken(monkeypatch):
    """Record whether each call's batch was finished by the small-batch (lean) path."""
    seen = []
    real = K._lean

    def spy(*args):
        out = real(*args)
        seen.append(out is not None)
        return out

    monkeypatch.setattr(K, "_lean", spy)
    return seen


def _sweep_only(monkeypatch):
    """Every batch through the general sweep (the lean path's size limit set to 0)."""
    monkeypatch.setattr(K, "_LEAN_BYTES", 0)


def _lean_cases():
    """(name, ref, reward, beta): batches that exercise each branch of the lean path."""
    rng = np.random.default_rng(21)
    ref = rng.dirichlet(np.ones(48), size=5)
    reward = rng.normal(size=(5, 48))
    zero = ref.copy()
    zero[:, ::7] = 0.0
    zero /= zero.sum(-1, keepdims=True)
    far = reward * 30.0 + 1e4  # |r| / beta far past the no-shift bound: every row shifts
    return [
        ("plain", ref, reward, 0.7),
        ("rows needing a shift", ref, far, 0.5),
        ("a zero in ref", zero, reward, 0.3),
        ("float32", ref.astype(np.float32), reward.astype(np.float32), 0.5),
        ("float32, shifted", ref.astype(np.float32), (reward * 9).astype(np.float32), 0.5),
    ]


@pytest.mark.parametrize("case", _lean_cases(), ids=lambda c: c[0])
def test_small_batches_take_the_lean_path_with_the_sweeps_bits(case, monkeypatch):
    name, ref, reward, beta = case
    seen = _lean_taken(monkeypatch)
    lean = kp.optimal_policy(ref, reward, beta)
    assert seen == [True], name
    assert lean.dtype == ref.dtype
    one = kp.optimal_policy(ref[2], reward[2], beta)  # a row alone: the same bits
    np.testing.assert_array_equal(one, lean[2])
    _sweep_only(monkeypatch)
    np.testing.assert_array_equal(kp.optimal_policy(ref, reward, beta), lean)
    np.testing.assert_array_equal(lean[ref == 0], 0.0)  # support preserved
    for i in range(ref.shape[0]):  # and against the 400-digit reference
        want = R.to_float(R.optimal_policy(ref[i].astype(float), reward[i].astype(float), beta))
        normal = want > (1e-36 if ref.dtype == np.float32 else 1e-290)
        bound = 4e-6 if ref.dtype == np.float32 else 2e-12
        assert np.all(np.abs(lean[i][normal] / want[normal] - 1) < bound), name


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_lean_path_hands_over_above_its_size(dtype, monkeypatch):
    rng = np.random.default_rng(22)
    n = 256
    rows = K._LEAN_BYTES // (n * np.dtype(dtype).itemsize)  # exactly at the limit
    ref = rng.dirichlet(np.ones(n), size=rows + 1).astype(dtype)
    reward = rng.normal(size=(rows + 1, n)).astype(dtype)
    seen = _lean_taken(monkeypatch)
    at = kp.optimal_policy(ref[:rows], reward[:rows], 0.5)
    above = kp.optimal_policy(ref, reward, 0.5)
    assert seen == [True]  # the batch one row above the limit never asked
    np.testing.assert_array_equal(above[:rows], at)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_lean_path_is_equivariant_under_permutations(dtype):
    rng = np.random.default_rng(23)
    ref = rng.dirichlet(np.ones(40), size=3).astype(dtype)
    reward = (rng.normal(size=(3, 40)) * 5).astype(dtype)
    perm = rng.permutation(40)
    for beta in (0.05, 0.5, 20.0):
        pi = kp.optimal_policy(ref, reward, beta)
        permuted = kp.optimal_policy(ref[:, perm], reward[:, perm], beta)
        rtol = 1e-6 if dtype == np.float32 else 1e-14
        np.testing.assert_allclose(permuted, pi[:, perm], rtol=rtol, atol=0)


def test_float32_rows_past_float32s_range_are_float64_rounded_once_in_a_small_batch():
    ref, reward = _float32_batch()  # four ordinary rows and four wide ones, interleaved
    pi = kp.optimal_policy(ref, reward, 0.125)
    pi64 = kp.optimal_policy(ref.astype(np.float64), reward.astype(np.float64), 0.125)
    ib = np.full(8, 8.0, np.float32)
    with np.errstate(all="ignore"):
        sw = K._sweep(ref, reward, ib, frozenset({"pi"}), None, {})
        wide = ~K._fast_ok(ref, reward, ib, sw, stats=False)
    np.testing.assert_array_equal(pi[wide], pi64[wide].astype(np.float32))
    every = kp.optimal_policy(ref[wide], reward[wide], 0.125)  # a batch of wide rows only
    np.testing.assert_array_equal(every, pi[wide])


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize(
    ("value", "array"),
    [(np.nan, "ref"), (np.inf, "ref"), (-0.25, "ref"), (np.nan, "reward"), (np.inf, "reward")],
)
def test_a_bad_value_in_a_small_batch_gets_the_validators_message(value, array, dtype):
    rng = np.random.default_rng(24)
    ref = rng.dirichlet(np.ones(16), size=3).astype(dtype)
    reward = rng.normal(size=(3, 16)).astype(dtype)
    (ref if array == "ref" else reward)[1, 5] = value
    if array == "ref":
        msg = _slow_message(lambda: V.as_probabilities("ref", ref))
    else:
        msg = _slow_message(lambda: V.as_rewards("reward", reward))
    with pytest.raises(ValueError, match=re.escape(msg)):
        kp.optimal_policy(ref, reward, 0.5)


def test_a_borderline_row_sum_gets_the_validators_verdict():
    # the lean path checks sums by a matrix-vector product; rows near the tolerance are
    # summed again in float64, as the validators do
    n = 64
    tol = V.row_sum_tolerance(np.dtype(np.float64), n)
    for off, accepted in ((0.99 * tol, True), (1.01 * tol, False)):
        ref = np.full((2, n), 1.0 / n)
        ref[1] *= 1 + off
        reward = np.linspace(0, 1, n)[None].repeat(2, 0)
        if accepted:
            kp.optimal_policy(ref, reward, 0.5)
        else:
            with pytest.raises(ValueError, match="must sum to 1"):
                kp.optimal_policy(ref, reward, 0.5)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_huge_reference_entries_are_refused_without_a_warning(dtype):
    # their row sum overflows (to inf in the check, and in the validators' float64 re-sum)
    big = np.finfo(dtype).max / 2
    ref = np.array([[0.5, 0.5, 0.0], [big, big, big]], dtype)
    reward = np.zeros((2, 3), dtype)
    msg = _slow_message(lambda: V.as_probabilities("ref", ref))
    with np.errstate(all="raise"), pytest.raises(ValueError, match=re.escape(msg)):
        kp.optimal_policy(ref, reward, 0.5)
