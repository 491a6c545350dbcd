"""float32 rows whose weights ``ref * exp((r - max r) / beta)`` fall below float32's normal
range while their exponentials do not: the fast path scales the exponentials by an exact
power of two (klpolicy.core._tilt._pow2) and keeps them in float32, where they were
computed in float64 and rounded once.

The exact answers are the 400-digit mpmath references of tests/_mpref/closed_form.py (recipe there),
at the float32 inputs and at the float32 ``beta`` the kernel uses. The float32 one-exp
result carries three roundings of its exponent ``z = (r - max r) / beta`` (the
difference, the product with ``1 / beta`` and that reciprocal), ``|z|`` half-ulps each,
and a few half-ulps from the exponential, the products and the sum: the bound below.
"""

from __future__ import annotations

import numpy as np
import pytest

import klpolicy as kp
from klpolicy.core import _tilt as K

from .. import _mpref as R

BETA = 0.1  # the benchmark's hard case: standard-normal rewards, r / beta spans about +-40
B32 = float(np.float32(BETA))
HALF_ULP = 2.0**-24


@pytest.fixture(params=[1 << 18, 4 * 256 * 2], ids=["default-blocks", "two-row-blocks"])
def blocks(request, monkeypatch):
    monkeypatch.setattr(K, "_BLOCK_BYTES", request.param)
    return request.param


def _batch(rows: int = 6, n: int = 256, seed: int = 0):
    """The benchmark's problem (Dirichlet(1) reference, standard-normal rewards) with each
    row's reference at its worst reward set to 1e-20: the smallest weight is then about
    e^-100, below float32's normal range (e^-87.3), and the exponentials, down to about
    e^-60, are not."""
    rng = np.random.default_rng(seed)
    ref = rng.dirichlet(np.ones(n), size=rows)
    reward = rng.normal(size=(rows, n))
    ref[np.arange(rows), reward.argmin(-1)] = 1e-20
    ref /= ref.sum(-1, keepdims=True)
    return ref.astype(np.float32), reward.astype(np.float32)


def _routes(ref, reward, beta=BETA):
    """Per row: (fast unscaled, fast scaled) by the sweep's own reductions."""
    ib = np.full(ref.shape[0], 1 / np.float32(beta), np.float32)
    with np.errstate(all="ignore"):
        sw = K._sweep(ref, reward, ib, K._PI, np.empty_like(ref), {})
        plain = K._fast_ok(ref, reward, ib, sw, False)
        scaled = K._fast_ok(ref, reward, ib, sw, False, scale=K._pow2(ref.shape[1])[0])
    return plain, scaled


def _assert_exact(pi, ref, reward, beta=B32):
    """Each row of float32 ``pi`` against mpmath within the rounding of its exponents."""
    for i in range(ref.shape[0]):
        q, r = ref[i].astype(float), reward[i].astype(float)
        want = R.to_float(R.optimal_policy(q, r, beta))
        z = np.abs(r - r[q > 0].max()) / beta
        bound = (3 * z + 8) * HALF_ULP
        # plus half the spacing of float32's subnormals, for results below its normal range
        err = np.abs(pi[i] - want) - 0.75e-45
        assert np.all(err <= bound * want), (i, (err / (bound * want)).max())
        np.testing.assert_array_equal(pi[i][q == 0], 0.0)


def _lean_calls(monkeypatch):
    """Record the dtype of each ``_lean_pi`` call's arithmetic and whether it scaled."""
    seen = []
    real = K._lean_pi

    def spy(q, r, ib, c, out, two=None):
        seen.append((np.result_type(ib), two is not None))
        return real(q, r, ib, c, out, two)

    monkeypatch.setattr(K, "_lean_pi", spy)
    return seen


def test_the_benchmark_rows_stay_in_float32(monkeypatch):
    ref, reward = _batch()
    plain, scaled = _routes(ref, reward)
    assert not plain.any() and scaled.all()  # float64 before; float32, scaled, now
    seen = _lean_calls(monkeypatch)
    pi = kp.optimal_policy(ref, reward, BETA)
    assert pi.dtype == np.float32
    assert seen == [(np.float32, True)]
    _assert_exact(pi, ref, reward)


@pytest.mark.usefixtures("blocks")
def test_scaled_rows_have_the_sweeps_bits(monkeypatch):
    ref, reward = _batch(rows=7)
    lean = kp.optimal_policy(ref, reward, BETA)
    for i in range(ref.shape[0]):  # a row alone: the same bits
        np.testing.assert_array_equal(kp.optimal_policy(ref[i], reward[i], BETA), lean[i])
    monkeypatch.setattr(K, "_LEAN_BYTES", 0)  # the general sweep: optimistic, then routed
    np.testing.assert_array_equal(kp.optimal_policy(ref, reward, BETA), lean)
    monkeypatch.setattr(K, "_MIN_BLOCKS_PER_THREAD", 1)
    np.testing.assert_array_equal(kp.optimal_policy(ref, reward, BETA, workers=2), lean)


def test_scaling_changes_no_bit_where_the_weights_are_normal():
    # a reference of uniform entries: every weight normal unscaled, so the sweep skips the
    # scaling pass; with it, w, sum(w) and 1 / sum(w) carry 2**k, 2**k and 2**-k exactly
    rng = np.random.default_rng(1)
    n = 512
    ref = np.full((4, n), 1 / n, np.float32)
    reward = rng.normal(size=(4, n)).astype(np.float32)
    plain, scaled = _routes(ref, reward)
    assert plain.all() and scaled.all()
    ib = 1 / np.float32(BETA)
    c = reward.max(-1)
    two = K._pow2(n)[1]
    with np.errstate(all="raise"):
        unscaled = K._lean_pi(ref, reward, ib, c, np.empty_like(ref))
        with_two = K._lean_pi(ref, reward, ib, c, np.empty_like(ref), two)
    np.testing.assert_array_equal(with_two, unscaled)
    np.testing.assert_array_equal(kp.optimal_policy(ref, reward, BETA), unscaled)


def _edge_row(n: int, lo: float, log_q: float, seed: int):
    """A row whose ``(min r - max r) / beta`` is ``lo`` and whose reference at the worst
    reward is ``e^log_q``; the rest Dirichlet(1), rewards uniform in between."""
    rng = np.random.default_rng(seed)
    reward = rng.uniform(lo * BETA, 0, size=n)
    reward[0], reward[1] = lo * BETA, 0.0
    ref = rng.dirichlet(np.ones(n))
    ref[0] = np.exp(log_q)
    ref /= ref.sum()
    return ref, reward


def test_both_edges_of_the_scaled_range():
    n = 256
    scale = K._pow2(n)[0]
    cases = [  # (lo, log q at the worst reward, fast in float32 once scaled)
        (-60.0, -20.0, True),  # the weight e^-80: normal unscaled
        (-80.0, -20.0, True),  # e^-100
        (-85.0, -86.0 - scale + 85.0 + 0.5, True),  # half a nat inside the scaled bound
        (-85.0, -86.0 - scale + 85.0 - 0.5, False),  # half a nat past it
        (-86.5, -5.0, False),  # exp(z) itself past the bound: no scaling helps
    ]
    rows = [_edge_row(n, lo, lq, seed) for seed, (lo, lq, _) in enumerate(cases)]
    ref = np.array([q for q, _ in rows], np.float32)
    reward = np.array([r for _, r in rows], np.float32)
    plain, scaled = _routes(ref, reward)
    np.testing.assert_array_equal(scaled, [c[2] for c in cases])
    np.testing.assert_array_equal(plain, [True, False, False, False, False])
    pi = kp.optimal_policy(ref, reward, BETA)
    pi64 = kp.optimal_policy(ref.astype(float), reward.astype(float), B32)
    wide = ~scaled  # float64's one-exp result rounded once, as before
    np.testing.assert_array_equal(pi[wide], pi64[wide].astype(np.float32))
    _assert_exact(pi, ref, reward)


def test_permuted_outcomes():
    ref, reward = _batch(rows=3, n=300, seed=2)
    perm = np.random.default_rng(3).permutation(300)
    pi = kp.optimal_policy(ref, reward, BETA)
    permuted = kp.optimal_policy(ref[:, perm], reward[:, perm], BETA)
    _assert_exact(permuted, ref[:, perm], reward[:, perm])
    # both within the bound of the same exact answer: twice the bound apart at most
    z = (reward.max(-1, keepdims=True) - reward)[:, perm] / B32
    assert np.all(np.abs(permuted / pi[:, perm] - 1) <= 2 * (3 * z + 8) * HALF_ULP)


def test_zeros_in_the_reference_stay_zero():
    ref, reward = _batch(rows=4, n=200, seed=4)
    ref = ref.astype(float)
    ref[:, ::9] = 0.0  # including, in some rows, the best and the worst rewards
    ref[0, reward[0].argmax()] = 0.0
    ref[1, reward[1].argmin()] = 0.0
    ref[2, reward[2].argmin()] = 1e-22  # the row's worst reward on the support: e^-110 or so
    ref /= ref.sum(-1, keepdims=True)
    ref = ref.astype(np.float32)
    plain, scaled = _routes(ref, reward)
    assert scaled.all() and not plain[2]
    pi = kp.optimal_policy(ref, reward, BETA)
    np.testing.assert_array_equal(pi[ref == 0], 0.0)
    _assert_exact(pi, ref, reward)


def test_statistics_are_not_scaled():
    # the soft value and KL read log(sum w): their float32 rows past the range are still
    # float64's result rounded once
    ref, reward = _batch(rows=3)
    ref64, rew64 = ref.astype(float), reward.astype(float)
    np.testing.assert_array_equal(
        kp.optimal_kl(ref, reward, BETA), kp.optimal_kl(ref64, rew64, B32).astype(np.float32)
    )
    np.testing.assert_array_equal(
        kp.soft_value(ref, reward, BETA), kp.soft_value(ref64, rew64, B32).astype(np.float32)
    )
