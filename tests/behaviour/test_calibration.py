"""Tests of klpolicy.calibration: exact ECE and Brier score along pi*_beta."""

import math
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from klpolicy.calibration import (
    brier_score,
    calibration_curve,
    calibration_threshold,
    expected_calibration_error,
)

from klpolicy import optimal_kl, optimal_policy

# --- hand computations ---------------------------------------------------


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


@given(st.integers(0, 2**32 - 1), st.integers(2, 5), st.integers(1, 6))
def test_brier_is_refinement_plus_squared_distance(seed, k, m):
    g = np.random.default_rng(seed)
    pi, t = g.dirichlet(np.ones(k), size=m), g.dirichlet(np.ones(k), size=m)
    w = g.dirichlet(np.ones(m))
    want = brier_score(t, t, weights=w) + float(w @ np.sum((pi - t) ** 2, -1))
    assert brier_score(pi, t, weights=w) == pytest.approx(want, rel=1e-12, abs=1e-15)
    assert brier_score(t, t, weights=w) == pytest.approx(float(w @ (1 - np.sum(t * t, -1))))


@pytest.mark.slow
@given(st.integers(0, 2**32 - 1), st.integers(2, 6))
def test_a_reward_on_the_most_likely_answer_never_doubles_brier(seed, k):
    # derivation page, section 6: ||pi - t||^2 is largest at the greedy limit, 2 - 2 t_max
    g = np.random.default_rng(seed)
    ref = g.dirichlet(np.ones(k), size=5)
    reward = (ref == ref.max(-1, keepdims=True)).astype(float)
    c = calibration_curve(
        ref, reward, np.concatenate([[np.inf], np.geomspace(1e3, 1e-3, 60), [0.0]])
    )
    assert np.all(c.brier <= 2 * c.brier[0] + 1e-12)
    assert np.all(np.diff(c.brier) >= -1e-12)
    with pytest.raises(ValueError, match="never reaches 2 x its reference value"):
        calibration_threshold(ref, reward)


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
]


@pytest.mark.parametrize(("call", "msg"), BAD)
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        call()
