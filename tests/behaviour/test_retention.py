"""Tests of klpolicy.retention: task-B score under pi*_beta and the KL safety margin."""

import math
import re

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from klpolicy.retention import retention_curve, retention_slope, worst_case_drop

from klpolicy import max_kl, optimal_kl, optimal_policy

# mpmath recipes are in comments next to the tests that use them (dps 50).


# --- capability retention ---------------------------------------------------------


def test_worst_case_drop_against_mpmath():
    # ref (1/2, 1/2), score (0, 1): the worst policy (q, 1 - q) has log 2 - H(q) = kl, drop q - 1/2
    # mpmath recipe: findroot of log 2 + q log q + (1 - q) log(1 - q) - kl at dps 50
    for kl in (1e-6, 0.01, 0.1, 0.5):
        q = mp.findroot(
            lambda q, kl=kl: mp.log(2) + q * mp.log(q) + (1 - q) * mp.log(1 - q) - mp.mpf(kl),
            (mp.mpf("0.5") + mp.mpf("1e-20"), mp.mpf(1) - mp.mpf("1e-20")),
            solver="anderson",
        )
        got = float(worst_case_drop([0.5, 0.5], [0.0, 1.0], kl))
        assert got == pytest.approx(float(q - 0.5), rel=1e-9)
    # budgets at or beyond the greedy limit: E_ref s - min s
    np.testing.assert_allclose(
        worst_case_drop([0.5, 0.5], [0.0, 1.0], [np.log(2), 5.0, np.inf]), 0.5, rtol=1e-15
    )
    assert worst_case_drop([0.5, 0.5], [0.0, 1.0], [[0.0]]).shape == (1, 1)
    # a constant score cannot drop
    assert float(worst_case_drop([0.2, 0.8], [3.0, 3.0], 1.0)) == 0.0


@given(
    st.lists(st.floats(0.05, 1.0), min_size=2, max_size=6),
    st.lists(st.floats(-2.0, 2.0), min_size=6, max_size=6),
)
@pytest.mark.slow
def test_worst_case_drop_bounds(w, s):
    ref = np.asarray(w) / np.sum(w)
    score = np.asarray(s[: ref.size])
    kls = np.array([0.0, 1e-4, 0.01, 0.1, 0.3, 1.0])
    d = worst_case_drop(ref, score, kls)
    pinsker = (score.max() - score.min()) * np.sqrt(kls / 2)
    assert np.all(d <= pinsker + 1e-12)
    assert np.all(np.diff(d) >= -1e-12)
    assert d[0] == 0.0
    # any tilt with that KL drops no more than the worst case
    for beta in (0.3, 1.0, 3.0):
        pi = optimal_policy(ref, -score + 0.7 * np.cos(np.arange(ref.size)), beta)
        kl = float(optimal_kl(ref, -score + 0.7 * np.cos(np.arange(ref.size)), beta))
        drop = float(ref @ score - pi @ score)
        assert drop <= float(worst_case_drop(ref, score, kl)) + 1e-10


def test_retention_by_hand_pure_conflict_and_independence():
    # pure conflict: reward = 1 - score, so pi*_beta is the worst case itself
    c = retention_curve([0.5, 0.5], [1.0, 0.0], [0.0, 1.0], beta=[np.inf, 1.0, 0.25, 0.0])
    np.testing.assert_allclose(c.score, [0.5, 1 / (1 + math.e), 1 / (1 + math.e**4), 0.0])
    np.testing.assert_allclose(c.worst_case_score, c.score, rtol=1e-9, atol=1e-15)
    assert np.all(c.pinsker_score <= c.worst_case_score + 1e-15)
    # independent tasks under the reference: task B is untouched at every beta
    pa, pb = np.array([0.6, 0.3, 0.1]), np.array([0.2, 0.8])
    ra, sb = np.array([0.0, 1.0, 3.0]), np.array([1.0, 0.0])
    ref = np.outer(pa, pb).ravel()
    c2 = retention_curve(
        ref, np.repeat(ra, 2), np.tile(sb, 3), beta=np.array([np.inf, 1.0, 0.1, 0.0])
    )
    np.testing.assert_allclose(c2.score, 0.2, rtol=1e-14)
    assert np.all(np.diff(c2.reward) > 0)


def test_retention_slope_against_small_kl():
    rng = np.random.default_rng(11)
    ref = rng.dirichlet(np.ones(6))
    r, s = rng.normal(size=6), rng.normal(size=6)
    slope = retention_slope(ref, r, s)
    c = retention_curve(ref, r, s, kl=[1e-8])
    base = ref @ s
    assert (c.score[0] - base) / np.sqrt(c.kl[0]) == pytest.approx(slope, rel=1e-3)
    # by hand for the two-point conflict: -1/sqrt(2)
    assert retention_slope([0.5, 0.5], [1.0, 0.0], [0.0, 1.0]) == pytest.approx(
        -1 / math.sqrt(2), rel=1e-15
    )
    assert retention_slope([0.5, 0.5], [1.0, 1.0], [0.0, 1.0]) == 0.0


def test_retention_curve_by_kl():
    ref, r, s = [0.5, 0.3, 0.2], [0.0, 1.0, 2.0], [1.0, 0.5, 0.0]
    c = retention_curve(ref, r, s, kl=[0.0, 0.1, float(max_kl(ref, r))])
    np.testing.assert_allclose(c.kl, [0.0, 0.1, -math.log(0.2)], rtol=1e-12, atol=1e-15)
    assert c.score[0] == pytest.approx(0.65, rel=1e-15) and c.score[-1] == pytest.approx(
        0.0, abs=1e-15
    )


BAD = [
    (
        lambda: worst_case_drop([0.5, 0.5], [0.0, 1.0], -0.1),
        "`kl` must be a non-negative number of nats; got -0.1",
    ),
    (
        lambda: worst_case_drop([0.5, 0.5], [0.0, 1.0], np.nan),
        "`kl` must be a non-negative number of nats; got nan",
    ),
    (
        lambda: worst_case_drop([0.5, 0.5], [0.0, np.inf], 0.1),
        "`score` must be finite; found inf at index (1,)",
    ),
    (
        lambda: worst_case_drop([[0.5, 0.5]], [0.0, 1.0], 0.1),
        "`ref` must be 1-D (one problem); got shape (1, 2)",
    ),
    (
        lambda: retention_slope([0.5, 0.5], [1.0, 0.0], [0.0, 1.0, 2.0]),
        "`score` must have shape (2,), like `ref`; got (3,)",
    ),
    (
        lambda: retention_curve([0.5, 0.5], [1.0, 0.0], [0.0, 1.0]),
        "give exactly one of `beta` and `kl`",
    ),
    (
        lambda: retention_curve([0.5, 0.5], [1.0, 0.0], [0.0, 1.0], kl=[2.0]),
        "`kl` = 2 is above the largest KL reachable",
    ),
]


@pytest.mark.parametrize(("call", "msg"), BAD)
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        call()


def test_retention_slope_does_not_depend_on_the_reward_scale():
    # reward (1e155, 0, -1e155): its variance overflows, and the slope must not be -0.0;
    # the slope sqrt(2) Cov(r, s) / sd(r) is invariant in r's unit and linear in s's
    ref, r, s = [0.5, 0.3, 0.2], np.array([1.0, 0.0, -1.0]), np.array([0.0, 1.0, 0.5])
    with mp.workdps(50):  # sqrt(2) Cov_ref(r, s) / sd_ref(r), exactly
        p, rr, ss = [mp.mpf(x) for x in ref], [mp.mpf(x) for x in r], [mp.mpf(x) for x in s]
        mr, ms = mp.fsum(a * b for a, b in zip(p, rr)), mp.fsum(a * b for a, b in zip(p, ss))
        cov = mp.fsum(a * (b - mr) * (c - ms) for a, b, c in zip(p, rr, ss))
        var = mp.fsum(a * (b - mr) ** 2 for a, b in zip(p, rr))
        want = float(mp.sqrt(2) * cov / mp.sqrt(var))
    for c in (1e-300, 1e-155, 1.0, 1e155, 1e308):
        assert retention_slope(ref, c * r, s) == pytest.approx(want, rel=1e-14)
    assert retention_slope(ref, r, 1e300 * s) == pytest.approx(1e300 * want, rel=1e-14)
