"""TRPO's step is the closed form with pi_old as reference; PPO's clip is not a trust region."""

import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import klpolicy
from klpolicy.trust_region import ppo_clip_step, trust_region_beta, trust_region_step


def test_step_is_the_closed_form_at_beta_for_kl():
    p_old, adv = np.array([0.2, 0.5, 0.3]), np.array([1.0, -0.5, 0.2])
    new = trust_region_step(p_old, adv, 0.05)
    beta = klpolicy.beta_for_kl(p_old, adv, 0.05)
    np.testing.assert_allclose(new, klpolicy.optimal_policy(p_old, adv, beta), rtol=1e-14)
    assert klpolicy.kl_divergence(new, p_old) == pytest.approx(0.05, rel=1e-12)


def test_worked_example_inverse():
    # the worked example: KL(pi*_0.5 || [.5, .5]) = 0.3499..., so that radius gives beta = 0.5
    kl = float(klpolicy.optimal_kl([0.5, 0.5], [1.0, 0.0], 0.5))
    assert float(trust_region_beta([0.5, 0.5], [1.0, 0.0], kl)) == pytest.approx(0.5, rel=1e-10)
    np.testing.assert_allclose(
        trust_region_step([0.5, 0.5], [1.0, 0.0], kl),
        [0.8807970779778823, 0.1192029220221177],
        rtol=1e-12,
    )


@given(
    st.lists(st.floats(0.05, 1.0), min_size=2, max_size=5),
    st.floats(0.001, 0.5),
    st.integers(0, 2**32 - 1),
)
@pytest.mark.slow
def test_no_policy_in_the_trust_region_has_more_advantage(weights, delta, seed):
    rng = np.random.default_rng(seed)
    p_old = np.array(weights) / np.sum(weights)
    adv = rng.normal(size=p_old.size)
    new = trust_region_step(p_old, adv, delta)
    best = new @ adv
    # random policies near p_old that satisfy the constraint never beat the closed form
    cand = p_old * np.exp(rng.normal(scale=0.5, size=(400, p_old.size)))
    cand /= cand.sum(1, keepdims=True)
    inside = klpolicy.kl_divergence(cand, p_old) <= delta
    assert np.all(cand[inside] @ adv <= best + 1e-12)


def test_radius_beyond_the_greedy_kl_gives_the_greedy_step():
    new = trust_region_step([0.5, 0.25, 0.25], [1.0, 0.0, 0.0], 5.0)
    np.testing.assert_array_equal(new, [1.0, 0.0, 0.0])
    assert float(trust_region_beta([0.5, 0.5], [1.0, 0.0], 0.0)) == np.inf


def test_batched_rows_and_axis():
    p_old = np.array([[0.5, 0.5], [0.2, 0.8]])
    adv = np.array([[1.0, 0.0], [0.0, 1.0]])
    new = trust_region_step(p_old.T, adv.T, np.array([0.01, 0.02]), axis=0)
    np.testing.assert_allclose(
        klpolicy.kl_divergence(new, p_old.T, axis=0), [0.01, 0.02], rtol=1e-11
    )


def test_ppo_clip_step_first_epoch_is_the_policy_gradient():
    p_old, adv = np.array([0.5, 0.5]), np.array([1.0, -1.0])
    new = ppo_clip_step(p_old, adv, 0.2, lr=1.0, epochs=1)
    # logits move by lr * pi (A - E_pi A) = (0.5, -0.5): sigmoid(1)
    np.testing.assert_allclose(new, [1 / (1 + np.exp(-1.0)), 1 / (1 + np.exp(1.0))], rtol=1e-14)


def test_ppo_clip_is_dominated_by_the_trust_region_step_at_equal_kl():
    p_old = np.array([0.4, 0.3, 0.2, 0.1])
    adv = np.array([0.5, -1.0, 1.0, 0.2])
    for lr, epochs in [(0.5, 4), (2.0, 10), (5.0, 20)]:
        ppo = ppo_clip_step(p_old, adv, 0.2, lr=lr, epochs=epochs)
        kl = float(klpolicy.kl_divergence(ppo, p_old))
        trpo = trust_region_step(p_old, adv, kl)
        assert trpo @ adv >= ppo @ adv - 1e-12
    # the clip does not bound the step: ratios leave [0.8, 1.2] (the softmax keeps pushing a
    # clipped outcome through the others) and the KL spent depends on lr, not only on the clip
    far = ppo_clip_step(p_old, adv, 0.2, lr=2.0, epochs=40)
    assert (far / p_old).min() < 0.5
    slow = ppo_clip_step(p_old, adv, 0.2, lr=0.1, epochs=200)
    assert klpolicy.kl_divergence(far, p_old) > 1.5 * klpolicy.kl_divergence(slow, p_old)


@pytest.mark.parametrize(
    ("call", "msg"),
    [
        (
            lambda: trust_region_step([0.5, 0.5], [1.0, 0.0], -0.1),
            "`delta` must be a finite non-negative number of nats; got -0.1",
        ),
        (
            lambda: trust_region_step([0.5, 0.6], [1.0, 0.0], 0.1),
            "`ref` must sum to 1 along axis -1",
        ),
        (
            lambda: ppo_clip_step([0.5, 0.5], [1.0, 0.0], 0.0),
            "`clip` must be a positive finite number; got 0.0",
        ),
        (
            lambda: ppo_clip_step([0.5, 0.5], [1.0, 0.0], 0.2, epochs=0),
            "`epochs` must be an integer >= 1; got 0",
        ),
    ],
)
def test_bad_inputs(call, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        call()
