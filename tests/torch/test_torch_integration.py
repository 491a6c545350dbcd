"""klpolicy.torch against the other exact modules: estimators, sequences, control, preference."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import klpolicy  # noqa: E402
import klpolicy.torch as kt  # noqa: E402
from klpolicy import estimators, preference, sequences  # noqa: E402
from klpolicy.control import AdaptiveKLController  # noqa: E402

torch.set_num_threads(1)

REF = np.array([0.5, 0.3, 0.2])
R = np.array([1.0, 0.0, 0.5])
BETA = 0.5
PI_STAR = klpolicy.optimal_policy(REF, R, BETA)


def tv(p, q):
    return 0.5 * float(np.abs(np.asarray(p) - np.asarray(q)).sum())


@pytest.mark.slow
def test_k3_in_the_loss_lands_on_estimators_fixed_point():
    fixed = estimators.fixed_point(REF, R, BETA, estimator="k3", placement="loss")
    res = kt.fit_policy(
        REF,
        R,
        BETA,
        method="reinforce",
        estimator="k3",
        placement="loss",
        steps=200,
        seed=1,
        device="cpu",
    )
    assert tv(res.policy, fixed) < 0.01  # measured 1e-4
    assert tv(fixed, PI_STAR) > 0.04  # 0.048: measurably away from pi*
    # the torch expected-gradient zero is the same point: the estimators' gradient vanishes there
    g = estimators.expected_gradient(
        np.log(res.policy), REF, R, BETA, estimator="k3", placement="loss"
    )
    assert np.abs(g).max() < 2e-3


@pytest.mark.slow
@pytest.mark.parametrize(("estimator", "placement"), [("k1", "reward"), ("k2", "loss")])
def test_unbiased_placements_agree_with_estimators(estimator, placement):
    fixed = estimators.fixed_point(REF, R, BETA, estimator=estimator, placement=placement)
    np.testing.assert_allclose(fixed, PI_STAR, rtol=1e-10)
    res = kt.fit_policy(
        REF,
        R,
        BETA,
        method="reinforce",
        estimator=estimator,
        placement=placement,
        steps=200,
        seed=1,
        device="cpu",
    )
    assert tv(res.policy, fixed) < 0.01


def test_grpo_large_group_limit_is_k3_fixed_point_at_beta_sigma():
    p = klpolicy.estimators.grpo_fixed_point(REF, R, BETA, group_size=None, eps=0.0)
    sigma = np.sqrt(p @ (R - p @ R) ** 2)
    k3_point = estimators.fixed_point(REF, R, BETA * sigma, estimator="k3", placement="loss")
    np.testing.assert_allclose(p, k3_point, rtol=1e-9)


def test_torch_estimators_equal_numpy_estimators(rng):
    logp = np.log(rng.uniform(0.01, 1, size=100))
    logq = np.log(rng.uniform(0.01, 1, size=100))
    for name in ("k1", "k2", "k3"):
        got = getattr(kt, name)(torch.tensor(logp), torch.tensor(logq)).numpy()
        np.testing.assert_allclose(got, getattr(estimators, name)(logp, logq), rtol=1e-13)


@pytest.mark.slow
def test_sft_then_rl_reaches_the_soft_bellman_optimum_of_the_learned_reference(rng):
    v, t = 3, 2
    true_ref = [rng.dirichlet(np.ones(v), size=(v,) * k) for k in range(t)]
    reward = rng.normal(size=(v,) * t)
    sft = kt.fit_reference(true_ref, steps=200, seed=0, device="cpu")
    learned = sft.policy
    optimum = sequences.soft_bellman(learned, reward, BETA)
    # the trainer's own target is the soft-Bellman optimum (a joint tilt of the learned reference)
    rl = kt.fit_sequence_policy(
        learned, reward, BETA, method="reinforce", policy=sft.model, steps=300, device="cpu"
    )
    np.testing.assert_allclose(rl.target, sequences.joint(optimum.policy), rtol=1e-10, atol=1e-15)
    assert tv(sequences.joint(rl.policy).ravel(), sequences.joint(optimum.policy).ravel()) < 0.02
    # per-token KL of the learned policy matches the optimum's (it is the same policy)
    np.testing.assert_allclose(
        sequences.per_token_kl(rl.policy, learned),
        sequences.per_token_kl(optimum.policy, learned),
        atol=0.02,
    )
    # the value at the root is beta log Z: the RL objective of the trained policy is within reach
    final = rl.history["reward"][-1] - BETA * rl.history["kl"][-1]
    assert final == pytest.approx(float(optimum.value[0]), abs=5e-3)


@pytest.mark.slow
def test_ppo_with_an_adaptive_kl_controller_tracks_its_target():
    target, horizon, batch = 0.05, 2000, 256
    ctrl = AdaptiveKLController(0.05, target, horizon)
    res = kt.fit_policy(
        REF,
        R,
        0.05,
        method="ppo",
        controller=ctrl,
        batch_size=batch,
        steps=300,
        schedule="constant",
        device="cpu",
    )
    beta = res.history["beta"]
    # TRL's rule: each update multiplies beta by 1 + clip(kl/target - 1, -0.2, 0.2) * n_steps/horizon
    step = beta[1:] / beta[:-1]
    assert step.max() <= 1 + 0.2 * batch / horizon + 1e-12
    assert step.min() >= 1 - 0.2 * batch / horizon - 1e-12
    # starting far too loose (KL of pi*_0.05 is 0.69), it tightens towards beta_for_kl(target)
    assert beta[-1] == pytest.approx(float(klpolicy.beta_for_kl(REF, R, target)), rel=0.25)
    assert res.history["kl"][-1] == pytest.approx(target, abs=0.02)


def test_dpo_loss_and_optimum_agree_with_preference_module():
    # the torch DPO/IPO losses equal preference.dpo_loss / ipo_loss on the same numbers
    from klpolicy.torch._steps import _preference_loss

    rng = np.random.default_rng(0)
    pc, pr, rc, rr = (np.log(rng.uniform(0.05, 1, size=20)) for _ in range(4))
    h = torch.tensor((pc - rc) - (pr - rr))
    np.testing.assert_allclose(
        _preference_loss(h, BETA, "dpo").numpy(),
        preference.dpo_loss(pc, pr, rc, rr, BETA),
        rtol=1e-12,
    )
    np.testing.assert_allclose(
        _preference_loss(h, BETA, "ipo").numpy(),
        preference.ipo_loss(pc, pr, rc, rr, BETA),
        rtol=1e-12,
    )
    prefs = preference.bradley_terry(R)
    np.testing.assert_allclose(preference.dpo_optimum(REF, prefs, BETA), PI_STAR, rtol=1e-8)
    ipo = preference.ipo_optimum(REF, prefs, BETA)
    res = kt.fit_policy(
        REF, R, BETA, method="ipo", labels="expected", steps=300, seed=0, device="cpu"
    )
    assert tv(res.policy, ipo) < 0.01


@pytest.mark.slow
def test_per_token_k3_in_the_loss_lands_on_its_backward_induction_fixed_point():
    from klpolicy.estimators import token_k3_fixed_point

    rng = np.random.default_rng(0)
    v, t, beta = 2, 3, 0.5
    conds = [rng.dirichlet(np.full(v, 2.0), size=(v,) * k) for k in range(t)]
    reward = rng.normal(size=(v,) * t)
    joint_ref = sequences.joint(conds).ravel()
    token_point = sequences.joint(token_k3_fixed_point(conds, reward, beta)).ravel()
    seq_point = estimators.fixed_point(
        joint_ref, reward.ravel(), beta, estimator="k3", placement="loss"
    )
    assert (
        tv(token_point, seq_point) > 0.05
    )  # 0.080: summing k3 over tokens is not k3 of the sequence
    kw = dict(method="reinforce", estimator="k3", placement="loss", steps=300, lr=0.1, device="cpu")
    tok = kt.fit_sequence_policy(conds, reward, beta, kl_level="token", **kw)
    seq = kt.fit_sequence_policy(conds, reward, beta, kl_level="sequence", **kw)
    assert tv(sequences.joint(tok.policy).ravel(), token_point) < 0.015  # measured 0.004
    assert tv(sequences.joint(seq.policy).ravel(), seq_point) < 0.015
    # k1 summed over tokens is k1 of the sequence: unbiased at either level
    k1 = kt.fit_sequence_policy(
        conds, reward, beta, method="reinforce", kl_level="token", steps=300, device="cpu"
    )
    assert k1.history["distance"][-1] < 0.01
