"""klpolicy.dynamics.expected_update against an independent mpmath enumeration of every group,
and against TRL 1.16.0's own advantage code differentiated by torch.

mpmath recipe: tests/_mpref/dynamics.py's enumeration of every group at 50 digits (the
conftest's fixture), the loss's gradient in theta written out by hand.
"""

import itertools

import mpmath as mp
import numpy as np
import pytest

from klpolicy.dynamics import expected_update

from .. import _mpref as R

CASES = [
    ([0.4, 0.35, 0.25], [1.0, 0.0, 0.5], [0.3, -0.2, 0.1]),
    ([0.7, 0.2, 0.1], [2.0, 2.0, -1.0], [0.0, 1.5, -0.5]),  # a tie in the rewards
    ([0.5, 0.5], [1.0, 0.0], [4.0, -3.0]),  # a nearly greedy policy
]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("G", [2, 3, 4])
@pytest.mark.parametrize("scale_rewards", ["none", "group"])
@pytest.mark.parametrize("corrected", [True, False])
def test_grpo_update_against_mpmath_enumeration(case, G, scale_rewards, corrected):
    ref, r, th = CASES[case]
    beta = 0.3
    got = expected_update(
        "grpo",
        th,
        ref,
        r,
        beta,
        num_generations=G,
        scale_rewards=scale_rewards,
        use_bias_correction_kl=corrected,
    )
    scale = "none" if scale_rewards == "none" else "std"
    want = R.expected_group_update(
        th, ref, r, beta, G, "mean", scale, "k3_corrected" if corrected else "k3"
    )
    R.assert_mp_close(got, want, rtol=1e-12, atol=1e-15)
    assert abs(got.sum()) < 1e-15


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("G", [2, 3])
@pytest.mark.parametrize("normalize", [False, True])
def test_rloo_update_against_mpmath_enumeration(case, G, normalize):
    ref, r, th = CASES[case]
    beta = 0.3
    got = expected_update(
        "rloo", th, ref, r, beta, num_generations=G, normalize_advantages=normalize
    )
    if normalize:
        # TRL standardises the leave-one-out advantages: (A - mean A)/(std A + 1e-4)
        pi = R.softmax(th)
        q = R.normalise(ref)
        n = len(pi)
        want = [mp.mpf(0)] * n
        for group in itertools.product(range(n), repeat=G):
            w = mp.fprod(pi[y] for y in group)
            v = [mp.mpf(float(r[y])) - beta * (mp.log(pi[y]) - mp.log(q[y])) for y in group]
            loo = R.group_advantages(v, "loo", "none", 0)
            adv = R.group_advantages(loo, "mean", "std", mp.mpf("1e-4"))
            for y, a in zip(group, adv):
                for j in range(n):
                    want[j] += w * a * ((1 if j == y else 0) - pi[j]) / G
    else:
        want = R.expected_group_update(th, ref, r, beta, G, "loo", "none", "none", shaped=True)
    R.assert_mp_close(got, want, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("baseline", ["none", "mean"])
def test_reinforce_update_against_mpmath_enumeration(baseline):
    ref, r, th = CASES[0]
    got = expected_update("reinforce", th, ref, r, 0.3, baseline=baseline, num_generations=3)
    want = R.expected_group_update(th, ref, r, 0.3, 3, baseline, "none", "none", shaped=True)
    R.assert_mp_close(got, want, rtol=1e-12, atol=1e-15)


def test_the_infinite_group_is_the_limit_of_large_groups():
    ref, r, th = CASES[0]
    inf = expected_update("grpo", th, ref, r, 0.3, num_generations=None, scale_rewards="group")
    prev = None
    for G in (16, 64, 256):
        got = expected_update("grpo", th, ref, r, 0.3, num_generations=G, scale_rewards="group")
        err = np.abs(got - inf).max()
        if prev is not None:
            assert err < prev  # converges
        prev = err
    assert prev < 5e-3


def test_ppo_and_distill_are_the_estimators_expected_gradient():
    from klpolicy.estimators import expected_gradient

    ref, r, th = CASES[1]
    for kl in ("k1", "k3"):
        got = expected_update("ppo", th, ref, r, 0.4, kl_estimator=kl)
        want = expected_gradient(th, ref, r, 0.4, estimator=kl, placement="reward")
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-16)
    # distillation with no reward: minus beta times the reverse-KL gradient toward the teacher
    got = expected_update("distill", th, ref, None, 0.4)
    want = expected_gradient(th, ref, np.zeros(3), 0.4, estimator="k1", placement="reward")
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-16)


# --------------------------------------------------------------------------- TRL's own code


def _trl_update(th, ref, r, beta, G, scale_rewards, corrected):
    """Every ordered group through TRL 1.16.0's advantage lines (grpo_trainer.py 2765-2787,
    with its `nanstd`) and its loss (3099-3105, 3150, `dapo`'s sum over the G tokens / G),
    differentiated by torch in float64, weighted by the group's probability."""
    torch = pytest.importorskip("torch")
    utils = pytest.importorskip("trl.trainer.utils")
    n = len(th)
    theta = torch.tensor(th, dtype=torch.float64, requires_grad=True)
    ref_t = torch.tensor(ref, dtype=torch.float64)
    total = torch.zeros(n, dtype=torch.float64)
    for group in itertools.product(range(n), repeat=G):
        idx = torch.tensor(group)
        logp_all = torch.log_softmax(theta, 0)
        logp = logp_all[idx]
        w = torch.exp(logp.detach().sum())
        rewards = torch.tensor([r[y] for y in group], dtype=torch.float64)
        mean = torch.nanmean(rewards.view(-1, G), dim=1).repeat_interleave(G)
        std = utils.nanstd(rewards.view(-1, G), dim=1).repeat_interleave(G)
        adv = rewards - mean
        if scale_rewards != "none":
            adv = adv / (std + 1e-4)
        coef_1 = torch.exp(logp - logp.detach())
        ref_logp = torch.log(ref_t[idx])
        kl = torch.exp(ref_logp - logp) - (ref_logp - logp) - 1
        if corrected:
            kl = kl * coef_1
        per_token = -torch.min(coef_1 * adv, torch.clamp(coef_1, 0.8, 1.2) * adv) + beta * kl
        loss = per_token.sum() / G
        (grad,) = torch.autograd.grad(loss, theta)
        total -= w * grad
    return total.numpy()


@pytest.mark.parametrize("scale_rewards", ["none", "group"])
@pytest.mark.parametrize("corrected", [True, False])
def test_grpo_update_against_trl_code(scale_rewards, corrected):
    ref, r, th = CASES[0]
    got = expected_update(
        "grpo",
        th,
        ref,
        r,
        0.3,
        num_generations=3,
        scale_rewards=scale_rewards,
        use_bias_correction_kl=corrected,
    )
    want = _trl_update(th, ref, r, 0.3, 3, scale_rewards, corrected)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def _mp_reinforce_update(th, ref, r, beta, G, baseline, estimator, placement):
    """REINFORCE with a KL estimate k(l), l = log(pi/ref) of the sample, by enumeration.

    In the reward: v = r - beta k(l) (detached), loss -A log pi. In the loss: v = r, loss
    -A log pi + beta k(l), with d k / d theta = k'(l) (e_y - pi): k1' = 1, k2' = l,
    k3' = 1 - ref/pi (k3 = ref/pi - 1 + l).
    """
    pi = R.softmax(th)
    q = R.normalise(ref)
    rr = [mp.mpf(float(x)) for x in r]
    n = len(pi)
    ell = [mp.log(pi[y] / q[y]) for y in range(n)]
    value = {"k1": lambda y: ell[y], "k2": lambda y: ell[y] ** 2 / 2}
    value["k3"] = lambda y: q[y] / pi[y] - 1 + ell[y]
    slope = {"k1": lambda y: 1, "k2": lambda y: ell[y], "k3": lambda y: 1 - q[y] / pi[y]}
    total = [mp.mpf(0)] * n
    for group in itertools.product(range(n), repeat=G):
        w = mp.fprod(pi[y] for y in group)
        if placement == "reward":
            v = [rr[y] - beta * value[estimator](y) for y in group]
        else:
            v = [rr[y] for y in group]
        adv = R.group_advantages(v, baseline, "none", 0)
        for y, a in zip(group, adv):
            coef = -a + (beta * slope[estimator](y) if placement == "loss" else 0)
            for j in range(n):
                total[j] -= w * coef * ((1 if j == y else 0) - pi[j]) / G
    return total


@pytest.mark.parametrize("estimator", ["k1", "k2", "k3"])
@pytest.mark.parametrize("placement", ["reward", "loss"])
@pytest.mark.parametrize("baseline", ["none", "mean", "loo"])
def test_reinforce_with_an_estimator_against_mpmath_enumeration(estimator, placement, baseline):
    ref, r, th = CASES[0]
    got = expected_update(
        "reinforce",
        th,
        ref,
        r,
        0.3,
        baseline=baseline,
        num_generations=3,
        kl_estimator=estimator,
        placement=placement,
    )
    want = _mp_reinforce_update(th, ref, r, 0.3, 3, baseline, estimator, placement)
    R.assert_mp_close(got, want, rtol=1e-12, atol=1e-15)
    if estimator == "k1" and placement == "reward":  # the row's defaults: as before
        old = expected_update("reinforce", th, ref, r, 0.3, baseline=baseline, num_generations=3)
        np.testing.assert_array_equal(got, old)
