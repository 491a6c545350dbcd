"""Tests of klpolicy.retention: calibration and capability retention under pi*_beta."""

import math
import re

import mpmath as mp
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from klpolicy import max_kl, optimal_kl, optimal_policy
from klpolicy.retention import (
    brier_score,
    calibration_curve,
    calibration_threshold,
    expected_calibration_error,
    retention_curve,
    retention_slope,
    worst_case_drop,
)

# mpmath recipes are in comments next to the tests that use them (dps 50).
mp.mp.dps = 50

# --- calibration: hand computations ---------------------------------------------------


def test_two_answer_question_by_hand():
    # ref (0.8, 0.2) is calibrated (truth = ref); reward 1 on answer 0, beta = 1:
    # pi_0 = 0.8 e / (0.8 e + 0.2)
    e = math.e
    p0 = 0.8 * e / (0.8 * e + 0.2)
    p1 = 1 - p0
    c = calibration_curve([0.8, 0.2], [1.0, 0.0], [np.inf, 1.0])
    # with two answers the two events land in different bins with equal gaps: ECE = |p0 - 0.8|
    np.testing.assert_allclose(c.ece, [0.0, p0 - 0.8], rtol=1e-14, atol=1e-16)
    brier = p0**2 + p1**2 - 2 * (0.8 * p0 + 0.2 * p1) + 1
    np.testing.assert_allclose(c.brier, [1 - 0.68, brier], rtol=1e-14)
    np.testing.assert_allclose(c.confidence, [0.68, p0**2 + p1**2], rtol=1e-14)
    np.testing.assert_allclose(c.accuracy, [0.68, 0.8 * p0 + 0.2 * p1], rtol=1e-14)
    np.testing.assert_allclose(
        c.kl[1], p0 * math.log(p0 / 0.8) + p1 * math.log(p1 / 0.2), rtol=1e-13
    )


def test_ece_bins_and_cancellation_by_hand():
    pi = [[0.55, 0.45], [0.55, 0.45]]
    truth = [[0.45, 0.55], [0.65, 0.35]]
    # bin (0.5, 0.6]: 0.5*0.55*(0.45-0.55) + 0.5*0.55*(0.65-0.55) = 0; bin (0.4, 0.5]: 0 too
    assert expected_calibration_error(pi, truth) == pytest.approx(0.0, abs=1e-16)
    # Brier by hand: per question sum pi^2 - 2 pi.t + 1
    b1 = 0.55**2 + 0.45**2 - 2 * (0.55 * 0.45 + 0.45 * 0.55) + 1
    b2 = 0.55**2 + 0.45**2 - 2 * (0.55 * 0.65 + 0.45 * 0.35) + 1
    assert brier_score(pi, truth) == pytest.approx((b1 + b2) / 2, rel=1e-15)
    assert brier_score(pi, truth, weights=[0.25, 0.75]) == pytest.approx(
        0.25 * b1 + 0.75 * b2, rel=1e-15
    )
    # one bin: |accuracy - confidence| of the whole population
    pi2 = [[0.9, 0.1], [0.6, 0.4]]
    t2 = [[0.7, 0.3], [0.6, 0.4]]
    conf = 0.5 * (0.81 + 0.01) + 0.5 * (0.36 + 0.16)
    acc = 0.5 * (0.63 + 0.03) + 0.5 * (0.36 + 0.16)
    assert expected_calibration_error(pi2, t2, bins=1) == pytest.approx(conf - acc, rel=1e-14)
    # ten bins: events 0.9 -> (0.8, 0.9], 0.1 -> (0, 0.1], 0.6 -> (0.5, 0.6], 0.4 -> (0.3, 0.4]
    want = 0.5 * 0.9 * 0.2 + 0.5 * 0.1 * 0.2 + 0 + 0
    assert expected_calibration_error(pi2, t2) == pytest.approx(want, rel=1e-14)
    # an edge: 0.7 belongs to (0.6, 0.7] although 0.7 * 10 rounds above 7
    assert expected_calibration_error([0.7, 0.3], [0.75, 0.25], bins=10) == pytest.approx(
        0.05, rel=1e-12
    )


def test_calibrated_reference_has_zero_ece_and_sharpening_raises_brier():
    ref = np.array([[0.7, 0.2, 0.1], [0.4, 0.35, 0.25], [0.9, 0.05, 0.05]])
    reward = np.array([1.0, 0.0, 0.0])
    c = calibration_curve(ref, reward, [np.inf, 2.0, 0.5, 0.1, 0.0])
    assert c.ece[0] < 1e-15  # 0 up to the rounding of ref / sum(ref)
    assert np.all(c.ece[1:] > 0)
    np.testing.assert_allclose(c.brier[0], np.mean(1 - np.sum(ref**2, -1)), rtol=1e-15)
    assert np.all(np.diff(c.brier) > 0) and np.all(np.diff(c.kl) > 0)
    assert np.all(c.confidence[1:] > c.accuracy[1:])  # overconfident
    # greedy: all mass on answer 0: Brier = mean(2 - 2 t_0)
    assert c.brier[-1] == pytest.approx(np.mean(2 - 2 * ref[:, 0]), rel=1e-14)
    # the batch KL is the weighted mean of the per-question KLs
    np.testing.assert_allclose(c.kl[2], np.mean(optimal_kl(ref, reward, 0.5)), rtol=1e-14)


def test_brier_threshold_doubles_exactly():
    # the reward prefers the confident-sounding answer 1, which the reference finds less likely
    ref, reward = [0.6, 0.4], [0.0, 1.0]
    th = calibration_threshold(ref, reward)
    assert th.reference_value == pytest.approx(0.48, rel=1e-15)
    assert th.value == pytest.approx(0.96, rel=1e-11)
    assert th.kl == pytest.approx(float(optimal_kl(ref, reward, th.beta)), rel=1e-12)
    # by hand: Brier(pi) = 2 p1^2 - 2 p1 + 1 - 2 (0.6 (1 - p1) + 0.4 p1) + 1 ... solve = 0.96
    # 2 p1^2 - 1.6 p1 + 0.8 = 0.96  ->  p1 = (1.6 + sqrt(2.56 + 1.28)) / 4
    p1 = (1.6 + math.sqrt(2.56 + 4 * 2 * 0.16)) / 4
    pi = optimal_policy(ref, reward, th.beta)
    assert pi[1] == pytest.approx(p1, rel=1e-11)
    assert th.beta == pytest.approx(1 / math.log(p1 * 0.6 / ((1 - p1) * 0.4)), rel=1e-10)
    # it is the first crossing: everywhere at larger beta the Brier score is below the target
    c = calibration_curve(ref, reward, th.beta * np.geomspace(1.0001, 1e4, 50))
    assert np.all(c.brier < 0.96)


def test_ece_threshold_with_a_slightly_miscalibrated_reference():
    # ref (0.7, 0.3) but truth (0.75, 0.25): ECE(ref) = 0.05; reward pushes toward answer 1;
    # ECE = |0.75 - pi_0| doubles at pi_0 = 0.65: exp(1/beta) = 0.7 * 0.35 / (0.65 * 0.3)
    th = calibration_threshold([0.7, 0.3], [0.0, 1.0], metric="ece", truth=[0.75, 0.25])
    assert th.reference_value == pytest.approx(0.05, rel=1e-12)
    assert th.value == pytest.approx(0.1, rel=1e-10)
    assert th.beta == pytest.approx(1 / math.log(0.7 * 0.35 / (0.65 * 0.3)), rel=1e-9)


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
        lambda: brier_score([0.5, 0.5], [0.2, 0.3, 0.5]),
        "`truth` must have the same number of answers as `pi`; got 3 and 2",
    ),
    (
        lambda: brier_score([[0.5, 0.5]], [[0.5, 0.5], [0.5, 0.5]]),
        "`truth` must have the shape of `pi`; got (2, 2) and (1, 2)",
    ),
    (
        lambda: brier_score([0.5, 0.5], [0.5, 0.5], weights=[0.5, 0.5]),
        "`weights` must have shape (1,), one per question; got (2,)",
    ),
    (lambda: brier_score([0.5, 0.5], [0.7, 0.7]), "`truth` must sum to 1 along axis -1"),
    (
        lambda: expected_calibration_error([0.5, 0.5], [0.5, 0.5], bins=0),
        "`bins` must be an integer >= 1; got 0",
    ),
    (
        lambda: calibration_curve([0.5, 0.5], [1.0, 0.0], [-1.0]),
        "`beta` must be non-negative; found -1 at index (0,)",
    ),
    (
        lambda: calibration_curve([0.5, 0.5], [1.0, 0.0], [1.0], truth=[[0.5, 0.5]] * 2),
        "`truth` must have the shape of `ref`; got (2, 2) and (1, 2)",
    ),
    (
        lambda: calibration_threshold([0.6, 0.4], [0.0, 1.0], factor=1.0),
        "`factor` must be > 1; got 1.0",
    ),
    (
        lambda: calibration_threshold([0.6, 0.4], [0.0, 1.0], factor=-2),
        "`factor` must be a positive finite number; got -2",
    ),
    (
        lambda: calibration_threshold([0.6, 0.4], [0.0, 1.0], metric="nll"),
        "`metric` must be 'brier' or 'ece'; got 'nll'",
    ),
    (
        lambda: calibration_threshold([0.6, 0.4], [0.0, 1.0], metric="ece"),
        "the reference's ece is 0 (it is calibrated), so no multiple of it is reached; "
        "use metric='brier'",
    ),
    (
        lambda: calibration_threshold([0.8, 0.2], [1.0, 0.0]),
        "the brier of pi*_beta never reaches 2 x its reference value 0.32; "
        "it is 0.4 in the greedy limit beta -> 0",
    ),
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
