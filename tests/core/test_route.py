"""The one router of the fast paths (klpolicy.core._route): each row's route from its
statistics, the same decision for the numpy kernel and the array-API kernel.

Rows are built on both sides of each bound (the exponent range of float64 and float32,
the no-shift bound, the statistics' spread, the power-of-two scaling), and the route is
compared with what the kernel does with the row (which path the sweep takes, and the
bits of its result). No reference values are needed: the router's contract is a
decision, and the kernel's results are checked against mpmath in test_fast_path.py and
test_float32_scaled.py.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import klpolicy as kp
from klpolicy.core import _route as RT
from klpolicy.core import _tilt as K


def _stats(ref, reward):
    """(qpos, r_lo, r_hi, rmin, rmax) of 2-D rows, as columns."""
    ref, reward = np.asarray(ref), np.asarray(reward)
    sup = ref > 0
    return (
        np.min(np.where(sup, ref, np.inf), axis=-1),
        np.min(np.where(sup, reward, np.inf), axis=-1),
        np.max(np.where(sup, reward, -np.inf), axis=-1),
        reward.min(axis=-1),
        reward.max(axis=-1),
    )


def _route(ref, reward, beta, dtype=np.float64, stats=False, wide=False):
    ref, reward = np.asarray(ref, dtype), np.asarray(reward, dtype)
    n, size = ref.shape[-1], np.dtype(dtype).itemsize
    with np.errstate(all="ignore"):
        ib = (1 / np.asarray(beta, np.float64)).astype(dtype) * np.ones(ref.shape[0], dtype)
        ib64 = 1 / np.asarray(beta, np.float64) * np.ones(ref.shape[0]) if wide else None
        return RT.route(np, *_stats(ref, reward), ib, n, size, stats, ib64)


Q4 = [0.1, 0.2, 0.3, 0.4]


@pytest.mark.parametrize(
    ("name", "ref", "reward", "beta", "want"),
    [
        ("plain", Q4, [1.0, -0.5, 0.3, 2.0], 0.5, RT.UNSHIFTED),
        ("at the no-shift bound", Q4, [100.0, 0.0, 1.0, -100.0], 1.0, RT.UNSHIFTED),
        ("past the no-shift bound", Q4, [100.5, 0.0, 1.0, -3.0], 1.0, RT.SHIFTED),
        ("big offset", [0.25] * 4, [1e6, 1e6 + 1, 1e6 - 2, 1e6 + 0.5], 0.1, RT.SHIFTED),
        ("subnormal weight", [1e-307, 0.3, 0.3, 0.4 - 1e-307], [-3.0, 0, 1, -1], 1.0, RT.CAREFUL),
        ("underflow", [0.25] * 4, [0.0, 1.0, 2.0, 800.0], 1.0, RT.CAREFUL),
        ("greedy", Q4, [1.0, -0.5, 0.3, 2.0], 0.0, RT.CAREFUL),
        ("reference", Q4, [1.0, -0.5, 0.3, 2.0], np.inf, RT.CAREFUL),
        ("zeros ok", [0.0, 0.5, 0.0, 0.5], [5.0, 1.0, -3.0, 0.2], 0.2, RT.UNSHIFTED),
        ("zeros, huge off support", [0.5, 0.0, 0.5, 0.0], [0.0, 1e6, 1.0, 0.0], 1e-3, RT.CAREFUL),
        ("NaN reward", Q4, [1.0, np.nan, 0.3, 2.0], 1.0, RT.CAREFUL),
    ],
)
def test_float64_routes(name, ref, reward, beta, want):
    assert _route([ref], [reward], beta)[0] == want, name


def test_statistics_need_a_spread_of_two_betas():
    reward = [[0.0, 1.0, 2.0, 1.0], [0.0, 1.0, 1.999, 1.0]]
    assert _route([Q4, Q4], reward, 1.0, stats=True).tolist() == [RT.UNSHIFTED, RT.CAREFUL]
    assert _route([Q4, Q4], reward, 1.0).tolist() == [RT.UNSHIFTED, RT.UNSHIFTED]


def _scaled_row(n=256, seed=0):
    """A Dirichlet(1) row, standard-normal rewards, its worst entry's reference 1e-20: at
    beta 0.1 in float32 the weights fall below the normal range, the exponentials not."""
    rng = np.random.default_rng(seed)
    ref = rng.dirichlet(np.ones(n))
    reward = rng.normal(size=n)
    ref[reward.argmin()] = 1e-20
    return ref / ref.sum(), reward


def test_float32_routes_scaled_wide_and_careful():
    ref, reward = _scaled_row()
    far = reward.copy()
    far[reward.argmin()] = -30.0  # (min r - max r) / beta past float32's range even scaled
    flat = np.full(256, 1 / 256)
    drop = np.r_[-800.0, np.zeros(255)]  # (min r - max r) / beta = -8000: float64's range too
    rows = np.array([ref, ref, flat, flat])
    rewards = np.array([reward, far, reward, drop])
    got = _route(rows, rewards, 0.1, np.float32, wide=True).tolist()
    assert got == [RT.SCALED, RT.WIDE, RT.SHIFTED, RT.CAREFUL]
    # with statistics there is no scaling: the first row is float64's
    assert _route(rows[:1], rewards[:1], 0.1, np.float32, True, True).tolist() == [RT.WIDE]
    # and without float64's bounds, a row float32 does not hold is the careful path's
    assert _route(rows[1:2], rewards[1:2], 0.1, np.float32).tolist() == [RT.CAREFUL]


def test_pow2_never_overflows_a_row_that_fits_unscaled():
    for n in (1, 2, 17, 256, 4096, 65536, 1 << 24):
        scale, two = RT.pow2(n)
        assert float(two) == 2.0 ** round(scale / math.log(2))
        # the largest unshifted float32 exponent, times the factor, on every entry
        assert RT._NO_SHIFT[4] + math.log(n) + scale < RT._RANGE[4][1] - math.log(2)


def test_fits_bounds_in_each_dtype():
    low64, high64 = RT._RANGE[8]
    assert RT.fits(np, 1.0, low64 + 1, 0.0, 0.0, 8)
    assert not RT.fits(np, 1.0, low64 - 1, 0.0, 0.0, 8)
    assert not RT.fits(np, 1.0, 0.0, high64 - 1, 2.0, 8)  # the sum of e^2 entries overflows
    assert not RT.fits(np, np.float32(1e-30), np.float32(-30.0), 0.0, 0.0, 4)
    assert RT.fits(np, np.float32(1e-30), np.float32(-30.0), 0.0, 0.0, 4, RT.pow2(4)[0])
    assert not RT.fits(np, np.float32(1e-39), np.float32(0.0), 0.0, 0.0, 4, RT.pow2(4)[0])
    assert not RT.fits(np, np.nan, 0.0, 0.0, 0.0, 8)


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from([1e-8, 1e-3, 0.1, 1.0, 30.0, 1e8]),
    st.sampled_from([np.float64, np.float32]),
    st.sampled_from([1.0, 1e3, 1e6]),
)
def test_the_sweep_routes_as_the_router(seed, beta, dtype, scale):
    """The sweep's verdict (statistics asked: no soft value, so no later test) is the
    router's on every row, with tiny and zero reference entries among them."""
    rng = np.random.default_rng(seed)
    ref = rng.dirichlet(np.full(8, 0.3), size=12)
    ref[::4, 0] = 0
    ref[1::4, 1] = 1e-300
    ref /= ref.sum(-1, keepdims=True)
    reward = rng.normal(size=(12, 8)) * scale
    q, r = ref.astype(dtype), reward.astype(dtype)
    ib = np.full(12, 1 / dtype(beta), dtype)
    with np.errstate(all="ignore"):
        res = {"mean": np.empty((12, 1), dtype)}
        sw = K._sweep(q, r, ib, frozenset(res), None, res)
        want = _route(q, r, dtype(beta), dtype, stats=True) <= RT.SHIFTED
    np.testing.assert_array_equal(sw.ok, want)


def test_array_api_routes_by_the_same_router():
    """torch rows: the array-API fast path is taken exactly where the router sends every
    row one exponential's way (unshifted, or all shifted), and agrees with numpy there."""
    torch = pytest.importorskip("torch")
    from klpolicy.core import _xp

    ref, reward = np.array([Q4, Q4]), np.array([[1.0, -0.5, 0.3, 2.0], [1.0, 0.0, 3.0, 2.0]])
    for beta, fast in [(0.5, True), (0.02, True), (1e-3, False), (0.0, False)]:
        t = _xp.optimal_policy(torch.as_tensor(ref), torch.as_tensor(reward), beta)
        assert (_route(ref, reward, beta) <= RT.SHIFTED).all() == fast
        if fast:
            np.testing.assert_allclose(t.numpy(), kp.optimal_policy(ref, reward, beta), 1e-14)
    sub = np.array([[1e-307, 0.3, 0.3, 0.4 - 1e-307]])
    rew = np.array([[-3.0, 0.0, 1.0, -1.0]])
    assert _route(sub, rew, 1.0)[0] == RT.CAREFUL
    q, r = torch.as_tensor(sub), torch.as_tensor(rew)
    xp = _xp._namespace(q)[0]
    with np.errstate(all="ignore"):
        b = torch.ones(1, 1, dtype=q.dtype)
        pi, valid = _xp._fast_policy(xp, q, r, b, 1e-9, True, torch.float64, torch.float64)
    assert pi is None and valid
