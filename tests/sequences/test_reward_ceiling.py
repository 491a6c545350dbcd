"""Tests of klpolicy.sequences.ceiling: the best reward within a KL budget of the reference."""

import re

import numpy as np
import pytest

from klpolicy import kl_divergence, max_kl, optimal_kl, optimal_policy
from klpolicy.sequences import soft_bellman
from klpolicy.sequences.ceiling import reward_ceiling
from klpolicy.sequences.trees import joint

# ------------------------------------------------------------------ reference ceiling


def test_ceiling_weak_versus_strong_reference_on_sequences():
    # two-token responses over {bad, ok, great}; the weak reference never writes "great"
    # as the second token and rarely "ok"
    V = 3
    reward = np.add.outer(np.array([0.0, 0.5, 1.0]), np.array([0.0, 0.5, 1.0]))
    weak = [np.array([0.7, 0.25, 0.05]), np.tile([0.8, 0.2, 0.0], (V, 1))]
    strong = [np.array([0.3, 0.4, 0.3]), np.tile([0.3, 0.4, 0.3], (V, 1))]
    cw = reward_ceiling(joint(weak).ravel(), reward.ravel(), 1.0)
    cs = reward_ceiling(joint(strong).ravel(), reward.ravel(), 1.0)
    assert cs.expected_reward > cw.expected_reward + 0.2
    assert float(cw.kl) == pytest.approx(1.0, rel=1e-12)
    assert float(cw.support_max) == 1.5 and float(cw.unreachable_max) == 2.0
    big = reward_ceiling(joint(weak).ravel(), reward.ravel(), np.inf)
    assert float(big.expected_reward) == 1.5 and float(big.beta) == 0.0
    assert float(big.kl) == pytest.approx(max_kl(joint(weak).ravel(), reward.ravel()), rel=1e-15)
    # ruled-out sequences stay at probability zero at every beta, token by token too
    for beta in [0.0, 1e-3, 0.1, 1.0, 10.0]:
        pol = soft_bellman(weak, reward, beta).policy
        assert np.all(pol[1][:, 2] == 0.0)
        assert np.all(optimal_policy(joint(weak).ravel(), reward.ravel(), beta)[2::3] == 0.0)


def test_ceiling_is_the_best_reward_within_the_budget(rng):
    ref = rng.dirichlet(np.ones(6))
    reward = rng.normal(size=6)
    c = reward_ceiling(ref, reward, 0.3)
    # no random policy within the budget does better
    for _ in range(200):
        pi = rng.dirichlet(0.3 * np.ones(6))
        if kl_divergence(pi, ref) <= 0.3:
            assert pi @ reward <= c.expected_reward + 1e-12
    assert optimal_kl(ref, reward, c.beta) == pytest.approx(0.3, rel=1e-10)


# ------------------------------------------------------------------ bad input

BAD = [
    (
        lambda: reward_ceiling([0.5, 0.5], [1.0, 0.0], -0.1),
        "`kl` must be a non-negative number of nats; got -0.1",
    ),
]


@pytest.mark.parametrize(("call", "message"), BAD)
def test_bad_input_messages(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()
