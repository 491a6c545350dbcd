"""GRPO's expected update and fixed point at extreme scales (issue 26, item 7)."""

import warnings

import numpy as np
import pytest

from klpolicy.estimators import grpo_expected_update, grpo_fixed_point

REF = np.array([0.5, 0.3, 0.2])
R = np.array([1.0, 0.0, -1.0])


@pytest.mark.parametrize("beta", [1e7, 1e10, 1e15])
def test_fixed_point_found_at_large_beta(beta):
    # was "fixed point not found (residual 2.59e-10)" for every beta >= 1e7: the residual
    # was absolute while the field scales with beta
    p = grpo_fixed_point(REF, R, beta)
    assert np.abs(grpo_expected_update(p, REF, R, beta)).max() <= 1e-10 * (1 + beta)
    # first order in 1/beta: p = ref + F_adv(ref)/beta
    drift = grpo_expected_update(REF, REF, R, beta)  # the beta term is 0 at pi = ref
    np.testing.assert_allclose(p, REF + drift / beta, rtol=1e-6, atol=0)


@pytest.mark.parametrize("group_size", [8, None])
def test_eps_zero_is_the_limit_of_small_eps(group_size):
    # eps = 0 gave a NaN update (0/0 on a group whose rewards are all equal) and a NaN pi
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for pi in (REF, np.array([1.0, 0.0, 0.0])):
            f0 = grpo_expected_update(pi, REF, R, 1.0, group_size=group_size, eps=0.0)
            f1 = grpo_expected_update(pi, REF, R, 1.0, group_size=group_size, eps=1e-14)
            np.testing.assert_allclose(f0, f1, rtol=0, atol=1e-12)
        p0 = grpo_fixed_point(REF, R, 1.0, group_size=group_size, eps=0.0)
    p1 = grpo_fixed_point(REF, R, 1.0, group_size=group_size, eps=1e-14)
    np.testing.assert_allclose(p0, p1, rtol=1e-10)


@pytest.mark.parametrize("group_size", [4, None])
@pytest.mark.parametrize("scale", [1e-300, 1e-150, 1e150, 1e308])
def test_reward_scale_does_not_matter_at_eps_zero(scale, group_size):
    # A = (r - mean)/std does not depend on the reward's unit; a reward of 1e308 gave NaN
    kw = dict(group_size=group_size, eps=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = grpo_expected_update(REF, REF, scale * R, 0.5, **kw)
        p = grpo_fixed_point(REF, scale * R, 0.5, **kw)
    np.testing.assert_allclose(f, grpo_expected_update(REF, REF, R, 0.5, **kw), rtol=1e-13)
    np.testing.assert_allclose(p, grpo_fixed_point(REF, R, 0.5, **kw), rtol=1e-10)


def test_huge_and_tiny_rewards_together():
    # reward (1e308, 0, -1) at eps 1e-6 is (1, 0, -1e-308) at eps 1e-314: the last two
    # outcomes' variance must not underflow (it is their own group's unit)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = grpo_fixed_point(REF, [1e308, 0.0, -1.0], 1.0, group_size=4)
    # groups without outcome 0 see rewards (0, -1), groups with it see (1, 0, 0): as if
    # the rewards were (1, 0, -t) with t -> 0 in the first and t = 1 in the second kind
    assert np.all(np.isfinite(p)) and abs(p.sum() - 1) < 1e-15
    f = grpo_expected_update(p, REF, [1e308, 0.0, -1.0], 1.0, group_size=4)
    assert np.abs(f).max() < 1e-10
    assert p[1] > p[2]
