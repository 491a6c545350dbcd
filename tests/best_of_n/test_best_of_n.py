"""Tests for klpolicy.best_of_n: exact law, KL, bound, ties, Monte Carlo, re-exports, bad input."""

from __future__ import annotations

import itertools
import math
import re
from fractions import Fraction

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import klpolicy
import klpolicy.best_of_n
import klpolicy.best_of_n.frontier
from klpolicy.best_of_n import (
    best_of_n_expected_reward,
    best_of_n_kl,
    best_of_n_kl_bound,
    best_of_n_policy,
    best_of_n_win_rate,
)
from klpolicy.best_of_n.frontier import best_of_n_curve

from .. import _mpref as R
from ._best_of_n_problems import normalise, problems

# ---------------------------------------------------------------- reference implementations


def brute_force(ref, reward, n):
    """Enumerate all V**n tuples with exact fractions; uniform tie-breaking among the best draws.

    Returns (law of the kept outcome, win rate against one reference draw, ties half).
    """
    size = len(ref)
    law = [Fraction(0)] * size
    for tup in itertools.product(range(size), repeat=n):
        prob = Fraction(1)
        for y in tup:
            prob *= ref[y]
        if prob == 0:
            continue
        best = max(reward[y] for y in tup)
        winners = [y for y in tup if reward[y] == best]
        for y in winners:
            law[y] += prob / len(winners)
    win = Fraction(0)
    for a in range(size):
        for b in range(size):
            w = 1 if reward[a] > reward[b] else Fraction(1, 2) if reward[a] == reward[b] else 0
            win += law[a] * ref[b] * w
    return law, win


def mp_levels(ref, reward, n):
    """Level probabilities P_g = F_g**n - F_{g-1}**n in mpmath.

    Recipe: mp.mp.dps = 50; each float64 input is taken exactly as mp.mpf(x) and divided by the
    exact row sum; levels are the distinct rewards on the support, F_g the sum at or below g.
    """
    levels = sorted({float(r) for p, r in zip(ref, reward, strict=True) if p > 0})
    total = mp.fsum(mp.mpf(float(p)) for p in ref)  # klpolicy reads ref as ref / sum(ref)
    q = [
        mp.fsum(mp.mpf(float(p)) for p, r in zip(ref, reward, strict=True) if r == g) / total
        for g in levels
    ]
    out, acc = [], mp.mpf(0)
    for qg in q:
        lo, acc = acc, acc + qg
        out.append(acc**n - lo**n)
    return levels, q, out


# ---------------------------------------------------------------- hand-computed cases


def test_two_outcomes_by_hand():
    # P(best = 1) = 1 - 0.5**n
    for n in (1, 2, 3, 10):
        pi = best_of_n_policy([0.5, 0.5], [1.0, 0.0], n)
        np.testing.assert_allclose(pi, [1 - 0.5**n, 0.5**n], rtol=1e-15)
    kl = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    assert best_of_n_kl([0.5, 0.5], [1.0, 0.0], 2) == pytest.approx(kl, rel=1e-14)
    assert best_of_n_expected_reward([0.5, 0.5], [1.0, 0.0], 3) == 0.875
    # win: 7/8 * (1/2 + 1/4) + 1/8 * 1/4
    assert best_of_n_win_rate([0.5, 0.5], [1.0, 0.0], 3) == pytest.approx(0.6875, rel=1e-15)


def test_three_levels_by_hand():
    # ref (0.2, 0.3, 0.5) on rewards (0, 1, 2), n = 2: F = 0.2, 0.5, 1
    pi = best_of_n_policy([0.3, 0.5, 0.2], [1.0, 2.0, 0.0], 2)
    np.testing.assert_allclose(pi, [0.25 - 0.04, 1 - 0.25, 0.04], rtol=1e-14)


def test_tie_by_hand():
    # two tied best outcomes of mass 0.25 each: level mass 1 - 0.5**3 split equally
    pi = best_of_n_policy([0.25, 0.25, 0.5], [1.0, 1.0, 0.0], 3)
    np.testing.assert_allclose(pi, [0.4375, 0.4375, 0.125], rtol=1e-15)
    # unequal tied masses keep their reference odds 1 : 3
    pi = best_of_n_policy([0.1, 0.3, 0.6], [5.0, 5.0, 0.0], 2)
    top = 1 - 0.6**2
    np.testing.assert_allclose(pi, [top / 4, 3 * top / 4, 0.36], rtol=1e-14)


def test_n_one_is_reference_and_zero_kl():
    ref = np.array([0.1, 0.2, 0.3, 0.4])
    r = np.array([3.0, 1.0, 1.0, -2.0])
    np.testing.assert_array_equal(best_of_n_policy(ref, r, 1), ref)
    assert best_of_n_kl(ref, r, 1) == 0.0
    assert best_of_n_win_rate(ref, r, 1) == pytest.approx(0.5, abs=3e-16)
    assert best_of_n_expected_reward(ref, r, 1) == pytest.approx(ref @ r, rel=1e-15)


def test_zero_reference_mass_gets_zero():
    pi = best_of_n_policy([0.0, 0.5, 0.5, 0.0], [9.0, 1.0, 0.0, 0.5], 4)
    np.testing.assert_allclose(pi, [0.0, 1 - 0.5**4, 0.5**4, 0.0], rtol=1e-15)
    assert pi[0] == 0.0 and pi[3] == 0.0
    # the greedy-limit reward is the best on the support, not the off-support 9
    assert best_of_n_expected_reward([0.0, 0.5, 0.5, 0.0], [9.0, 1.0, 0.0, 0.5], 60) == (
        pytest.approx(1.0, rel=1e-15)
    )


# ---------------------------------------------------------------- brute-force enumeration

CASES = [
    ([Fraction(1, 2), Fraction(1, 3), Fraction(1, 6)], [0, 1, 2]),
    ([Fraction(1, 4), Fraction(1, 4), Fraction(1, 2)], [1, 1, 0]),
    ([Fraction(1, 5), Fraction(2, 5), Fraction(1, 10), Fraction(3, 10)], [2, 0, 2, 1]),
    ([Fraction(1, 7), Fraction(2, 7), Fraction(0), Fraction(4, 7)], [1, 1, 5, 1]),
    ([Fraction(1, 8), Fraction(3, 8), Fraction(1, 4), Fraction(1, 4)], [3, -1, 0, 3]),
]


@pytest.mark.parametrize(("ref", "reward"), CASES)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_brute_force_enumeration(ref, reward, n):
    law, win = brute_force(ref, reward, n)
    ref_f = np.array([float(x) for x in ref])
    rew_f = np.array(reward, dtype=float)
    np.testing.assert_allclose(
        best_of_n_policy(ref_f, rew_f, n), [float(x) for x in law], rtol=1e-14, atol=0
    )
    kl = sum(float(p) * math.log(p / q) for p, q in zip(law, ref, strict=True) if p > 0)
    assert best_of_n_kl(ref_f, rew_f, n) == pytest.approx(kl, rel=1e-12, abs=1e-15)
    er = float(sum(p * r for p, r in zip(law, reward, strict=True)))
    assert best_of_n_expected_reward(ref_f, rew_f, n) == pytest.approx(er, rel=1e-14)
    assert best_of_n_win_rate(ref_f, rew_f, n) == pytest.approx(float(win), rel=1e-14)


# ---------------------------------------------------------------- mpmath at large n


@pytest.mark.parametrize("n", [7, 1000, 10**6, 10**9, 2**45])
def test_kl_against_mpmath_large_n(n):
    ref = np.array([1e-12, 0.3, 0.2, 0.1, 0.4 - 1e-12, 0.0])
    reward = np.array([10.0, 1.0, 1.0, -1.0, 0.5, 99.0])
    # reference: tests/_mpref best_of_n_kl (400 digits, exact inputs, per outcome
    # pi_n(y) = ref(y) / q_g (F_g**n - F_{g-1}**n))
    ref_value = float(R.best_of_n_kl(ref, reward, n))
    assert best_of_n_kl(ref, reward, n) == pytest.approx(ref_value, rel=1e-12)
    levels, _, P = mp_levels(ref, reward, n)
    er = float(mp.fsum(p * mp.mpf(g) for p, g in zip(P, levels, strict=True)))
    assert best_of_n_expected_reward(ref, reward, n) == pytest.approx(er, rel=1e-13)
    # the top level's probability 1 - (1 - 1e-12)**n, through the policy
    assert best_of_n_policy(ref, reward, n)[0] == pytest.approx(float(P[-1]), rel=1e-12)


def test_policy_against_mpmath_many_levels():
    rng = np.random.default_rng(3)
    ref = rng.dirichlet(np.full(40, 0.3))
    ref[5] = 1e-200
    ref /= ref.sum()
    reward = rng.integers(0, 15, 40).astype(float)
    total = mp.fsum(mp.mpf(float(p)) for p in ref)
    for n in (3, 500, 10**7):
        levels, q, P = mp_levels(ref, reward, n)
        expect = np.array(
            [
                float(P[levels.index(r)] * mp.mpf(float(p)) / total / q[levels.index(r)])
                for p, r in zip(ref, reward, strict=True)
            ]
        )
        got = best_of_n_policy(ref, reward, n)
        np.testing.assert_allclose(got, expect, rtol=1e-12, atol=0)
        assert best_of_n_kl(ref, reward, n) == pytest.approx(
            float(R.best_of_n_kl(ref, reward, n)), rel=1e-12
        )


# ---------------------------------------------------------------- the bound


def test_bound_values():
    np.testing.assert_allclose(
        best_of_n_kl_bound([1, 2, 10, 10**6]),
        [0.0, math.log(2) - 0.5, math.log(10) - 0.9, math.log(10**6) - (10**6 - 1) / 10**6],
        rtol=1e-15,
    )
    assert best_of_n_kl_bound(1) == 0.0


@pytest.mark.slow
@given(problems, st.integers(1, 300))
def test_bound_holds_and_kl_monotone(prob, n):
    ref, reward = normalise(prob[0]), np.array(prob[1], float)
    c = best_of_n_curve(ref, reward, [n, n + 1])
    assert np.all(c.kl <= c.kl_bound + 1e-14)
    assert c.kl[0] <= c.kl[1] + 1e-14  # KL non-decreasing in n
    assert c.expected_reward[0] <= c.expected_reward[1] + 1e-13
    assert c.kl[1] < klpolicy.max_kl(ref, reward) + 1e-12
    # Beirami et al.: the win rate against the reference is at most n / (n + 1)
    assert np.all(c.win_rate <= np.array([n, n + 1]) / np.array([n + 1, n + 2]) + 1e-14)


def test_bound_tight_for_continuous_reference():
    # V equiprobable outcomes with distinct rewards: the gap shrinks like 1/V**2
    gaps = []
    for size in (10, 100, 1000, 10**4):
        ref = np.full(size, 1.0 / size)
        reward = np.arange(size, dtype=float)
        gaps.append(best_of_n_kl_bound(16) - best_of_n_kl(ref, reward, 16))
    assert all(g > 0 for g in gaps)
    assert all(b < a / 50 for a, b in itertools.pairwise(gaps))
    assert gaps[-1] < 2e-7
    # and the win rate tends to n / (n + 1)
    assert best_of_n_win_rate(ref, reward, 16) == pytest.approx(16 / 17, abs=1e-7)


def test_bound_strict_with_ties():
    # merging outcomes into a tie strictly lowers the KL
    ref = np.full(4, 0.25)
    distinct = best_of_n_kl(ref, [0.0, 1.0, 2.0, 3.0], 5)
    tied = best_of_n_kl(ref, [0.0, 1.0, 3.0, 3.0], 5)
    assert tied < distinct < best_of_n_kl_bound(5)


# ---------------------------------------------------------------- ties, batches, axes, dtypes


@pytest.mark.slow
@given(problems, st.integers(1, 50), st.randoms(use_true_random=False))
def test_permutation_equivariance_and_tied_split(prob, n, rnd):
    ref, reward = normalise(prob[0]), np.array(prob[1], float)
    perm = list(range(len(ref)))
    rnd.shuffle(perm)
    pi = best_of_n_policy(ref, reward, n)
    # 1e-12, the library's bar: a permutation reorders the cumulative sums, which moves an
    # entry of 3.5e-227 by 1.1e-13 relative (a drawn case)
    np.testing.assert_allclose(best_of_n_policy(ref[perm], reward[perm], n), pi[perm], rtol=1e-12)
    assert pi.sum() == pytest.approx(1.0, abs=1e-13)
    # within a reward level the law is proportional to the reference
    for g in np.unique(reward):
        lvl = (reward == g) & (pi > 1e-290)  # subnormal probabilities lose digits
        if lvl.sum() > 1:
            ratio = pi[lvl] / ref[lvl]
            np.testing.assert_allclose(ratio, ratio[0], rtol=1e-13)


def test_batch_rows_and_axis():
    rng = np.random.default_rng(0)
    ref = rng.dirichlet(np.ones(6), size=(3, 2))
    reward = rng.integers(0, 3, size=(2, 6)).astype(float)  # broadcasts over the first axis
    pi = best_of_n_policy(ref, reward, 5)
    kl = best_of_n_kl(ref, reward, 5)
    assert pi.shape == (3, 2, 6) and kl.shape == (3, 2)
    for i in range(3):
        for j in range(2):
            np.testing.assert_allclose(
                pi[i, j], best_of_n_policy(ref[i, j], reward[j], 5), rtol=1e-15
            )
            assert kl[i, j] == pytest.approx(best_of_n_kl(ref[i, j], reward[j], 5), rel=1e-14)
    pi0 = best_of_n_policy(np.moveaxis(ref, -1, 0), np.moveaxis(reward, -1, 0), 5, axis=0)
    np.testing.assert_allclose(np.moveaxis(pi0, 0, -1), pi, rtol=1e-15)


def test_float32_in_float32_out():
    ref = np.array([0.25, 0.25, 0.5], np.float32)
    reward = np.array([1.0, 1.0, 0.0], np.float32)
    pi = best_of_n_policy(ref, reward, 3)
    assert pi.dtype == np.float32
    np.testing.assert_allclose(pi, [0.4375, 0.4375, 0.125], rtol=1e-6)
    assert best_of_n_kl(ref, reward, 3).dtype == np.float32


def test_top_level_reexport_matches():
    # the lead re-exports these two at the top level; until then they live in the submodule
    f = getattr(klpolicy, "best_of_n_policy", best_of_n_policy)
    np.testing.assert_array_equal(f([0.5, 0.5], [1.0, 0.0], 2), [0.75, 0.25])


def test_frontier_names_stay_importable_from_best_of_n():
    # the curve/budget/comparison helpers moved to klpolicy.best_of_n.frontier
    before = {
        "BestOfNComparison", "BestOfNCurve", "best_of_n_curve", "best_of_n_expected_reward",
        "best_of_n_for_kl", "best_of_n_kl", "best_of_n_kl_bound", "best_of_n_policy",
        "best_of_n_vs_optimal", "best_of_n_win_rate",
    }  # fmt: skip
    soft = set(klpolicy.best_of_n.soft.__all__)  # klpolicy.best_of_n.soft
    calibrated = set(klpolicy.best_of_n.calibrated.__all__)  # klpolicy.best_of_n.calibrated
    assert {"soft_best_of_n_kl", "soft_best_of_n_policy"} <= soft
    assert set(klpolicy.best_of_n.__all__) == before | soft | calibrated
    for name in soft | calibrated:
        mod = klpolicy.best_of_n.soft if name in soft else klpolicy.best_of_n.calibrated
        assert getattr(klpolicy.best_of_n, name) is getattr(mod, name)
    assert set(klpolicy.best_of_n.frontier.__all__) < before
    for name in klpolicy.best_of_n.frontier.__all__:
        assert getattr(klpolicy.best_of_n, name) is getattr(klpolicy.best_of_n.frontier, name)


# ---------------------------------------------------------------- Monte Carlo


def test_monte_carlo_agreement():
    rng = np.random.default_rng(20261130)
    ref = np.array([0.3, 0.1, 0.15, 0.25, 0.2])
    reward = np.array([0.0, 2.0, 2.0, 1.0, -1.0])  # a tie at the top
    n, trials = 3, 200_000
    draws = rng.choice(5, size=(trials, n), p=ref)
    # uniform tie-breaking: a random key among draws of equal reward
    key = reward[draws] + 1e-3 * rng.random((trials, n))
    kept = draws[np.arange(trials), np.argmax(key, axis=1)]
    freq = np.bincount(kept, minlength=5) / trials
    pi = best_of_n_policy(ref, reward, n)
    sd = np.sqrt(pi * (1 - pi) / trials)  # exact binomial standard deviation
    assert np.all(np.abs(freq - pi) < 5 * sd)
    # mean reward: tolerance from the exact variance under pi
    mean = best_of_n_expected_reward(ref, reward, n)
    var = pi @ (reward - mean) ** 2
    assert abs(reward[kept].mean() - mean) < 5 * np.sqrt(var / trials)
    # win rate against fresh reference draws
    other = rng.choice(5, size=trials, p=ref)
    wins = (reward[kept] > reward[other]) + 0.5 * (reward[kept] == reward[other])
    wr = best_of_n_win_rate(ref, reward, n)
    assert abs(wins.mean() - wr) < 5 * np.sqrt(0.25 / trials)


# ---------------------------------------------------------------- bad input

REF, REW = [0.5, 0.5], [1.0, 0.0]

BAD = [
    (best_of_n_policy, (REF, REW, 0), "`n` must be an integer >= 1; got 0"),
    (best_of_n_policy, (REF, REW, -3), "`n` must be an integer >= 1; got -3"),
    (best_of_n_policy, (REF, REW, 2.5), "`n` must be an integer >= 1; got 2.5"),
    (best_of_n_policy, (REF, REW, True), "`n` must be an integer >= 1; got True"),
    (best_of_n_policy, (REF, REW, float("nan")), "`n` must be an integer >= 1; got nan"),
    (best_of_n_policy, (REF, REW, float("inf")), "`n` must be an integer >= 1; got inf"),
    (best_of_n_policy, (REF, REW, "3"), "`n` must be an integer >= 1; got '3'"),
    (
        best_of_n_policy,
        (REF, REW, 2**60),
        "`n` must be at most 2**53 to be held exactly; got 1152921504606846976",
    ),
    (
        best_of_n_policy,
        (REF, REW, [2, 3]),
        "`n` must be a single integer >= 1; got shape (2,) (use best_of_n_curve for a grid)",
    ),
    (best_of_n_kl, (REF, REW, 0), "`n` must be an integer >= 1; got 0"),
    (best_of_n_win_rate, (REF, REW, 1.5), "`n` must be an integer >= 1; got 1.5"),
    (best_of_n_expected_reward, (REF, REW, None), "`n` must be an integer >= 1; got None"),
    (best_of_n_kl_bound, (0,), "`n` must be an integer >= 1; got 0"),
    (best_of_n_kl_bound, ([1, 2, 0],), "`n` must be an integer >= 1; found 0 at index (2,)"),
    (best_of_n_kl_bound, ([[1, 2.5]],), "`n` must be an integer >= 1; found 2.5 at index (0, 1)"),
    (best_of_n_kl_bound, ([],), "`n` must not be empty; got shape (0,)"),
    (best_of_n_policy, ([0.5, 0.6], REW, 2), "`ref` must sum to 1 along axis -1; it sums to 1.1"),
    (
        best_of_n_policy,
        ([-0.5, 1.5], REW, 2),
        "`ref` must be non-negative; found -0.5 at index (0,)",
    ),
    (best_of_n_policy, (REF, [1.0, np.nan], 2), "`reward` must be finite; found nan at index (1,)"),
    (
        best_of_n_policy,
        (REF, [1.0, 0.0, 2.0], 2),
        "`reward` must have the same size as `ref` along the probability axis; got 3 and 2",
    ),
]


@pytest.mark.parametrize(("fn", "args", "msg"), BAD)
def test_bad_input(fn, args, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        fn(*args)
