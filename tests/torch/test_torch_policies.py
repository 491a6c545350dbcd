"""Learned policies enumerate into the dense tree format; sequence trainers reach the optimum."""

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import klpolicy  # noqa: E402
import klpolicy.torch as kt  # noqa: E402
from klpolicy.torch.policies import all_sequences  # noqa: E402

torch.set_num_threads(1)


def joint_np(conds):
    out = np.ones(())
    for c in conds:
        out = out[..., None] * c
    return out


def tree(rng, v=3, t=2):
    conds = [rng.dirichlet(np.ones(v), size=(v,) * k) for k in range(t)]
    reward = rng.normal(size=(v,) * t)
    return conds, reward


def test_all_sequences_is_c_order():
    seqs = all_sequences(3, 3)
    assert seqs.shape == (27, 3)
    np.testing.assert_array_equal(np.ravel_multi_index(seqs.T.numpy(), (3, 3, 3)), np.arange(27))


def test_tabular_policy_starts_at_the_reference_and_keeps_zeros():
    ref = np.array([[0.2, 0.0, 0.8], [0.1, 0.6, 0.3]])
    pol = kt.TabularPolicy(ref, device="cpu")
    np.testing.assert_allclose(pol.probs(), ref, rtol=1e-15)
    assert pol.probs()[0, 1] == 0.0
    assert pol.log_probs()[0, 1].item() == -np.inf


def test_tabular_conditionals_joint_is_the_product(rng):
    conds, _ = tree(rng, 3, 3)
    pol = kt.TabularConditionals(conds, device="cpu")
    joint = pol.log_probs().exp().detach().numpy().reshape((3, 3, 3))
    np.testing.assert_allclose(joint, joint_np(conds), rtol=1e-13)
    for got, want in zip(pol.conditionals(), conds, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-13)


def test_autoregressive_conditionals_agree_with_its_joint():
    model = kt.AutoregressivePolicy(3, 3, seed=5, device="cpu")
    conds = model.conditionals()
    assert [c.shape for c in conds] == [(3,), (3, 3), (3, 3, 3)]
    for c in conds:
        np.testing.assert_allclose(c.sum(-1), 1.0, rtol=1e-14)
    joint = model.log_probs().exp().detach().numpy().reshape((3, 3, 3))
    np.testing.assert_allclose(joint, joint_np(conds), rtol=1e-12)


@pytest.mark.slow
def test_autoregressive_sampling_follows_the_joint():
    model = kt.AutoregressivePolicy(2, 3, seed=1, device="cpu")
    n = 20000
    seqs = model.sample(n, generator=torch.Generator().manual_seed(0)).numpy()
    counts = np.bincount(np.ravel_multi_index(seqs.T, (2, 2, 2)), minlength=8)
    p = model.log_probs().exp().detach().numpy()[0]
    # each count is Binomial(n, p): within 4.5 standard deviations (all 8 at once: p ~ 5e-5)
    assert np.all(np.abs(counts - n * p) < 4.5 * np.sqrt(n * p * (1 - p)))


def test_exact_sequence_trainer_reaches_the_joint_optimum(rng):
    conds, reward = tree(rng, 3, 2)
    res = kt.fit_sequence_policy(conds, reward, 0.5, method="exact", steps=300, device="cpu")
    target = klpolicy.optimal_policy(joint_np(conds).ravel(), reward.ravel(), 0.5)
    np.testing.assert_allclose(res.target.ravel(), target, rtol=1e-12)
    assert res.history["distance"][-1] < 2e-3
    assert [c.shape for c in res.policy] == [(3,), (3, 3)]


def test_trust_region_on_a_tree_lands_on_the_optimum(rng):
    conds, reward = tree(rng, 2, 3)
    res = kt.fit_sequence_policy(
        conds, reward, 0.5, method="trust_region", delta=0.2, steps=10, device="cpu"
    )
    assert res.history["distance"][-1] < 1e-12


@pytest.mark.slow
def test_sft_then_rl_reaches_the_optimum_of_the_learned_reference(rng):
    conds, reward = tree(rng, 3, 2)
    sft = kt.fit_reference(conds, steps=200, seed=0, device="cpu")
    assert sft.history["kl"][-1] < 2e-3  # KL(ref || model) after maximum likelihood
    learned = sft.policy
    rl = kt.fit_sequence_policy(
        learned, reward, 0.5, method="reinforce", policy=sft.model, steps=300, device="cpu"
    )
    # the exact optimum of the *learned* reference (soft Bellman = joint tilt)
    target = klpolicy.optimal_policy(joint_np(learned).ravel(), reward.ravel(), 0.5)
    assert 0.5 * np.abs(joint_np(rl.policy).ravel() - target).sum() < 0.02
    assert rl.history["distance"][0] > 0.1  # it started far away
    # the caller's SFT model is not modified
    np.testing.assert_allclose(sft.model.conditionals()[1], learned[1], rtol=1e-14)


@pytest.mark.slow
def test_sft_on_a_finite_data_set_fits_the_empirical_law(rng):
    conds, _ = tree(rng, 2, 2)
    sft = kt.fit_reference(conds, steps=200, n_samples=50, seed=0, device="cpu")
    counts = np.random.default_rng(0).multinomial(50, joint_np(conds).ravel())
    got = joint_np(sft.policy).ravel()
    assert 0.5 * np.abs(got - counts / 50).sum() < 0.01


@pytest.mark.parametrize(
    ("args", "msg"),
    [
        (
            ([np.array([0.5, 0.5]), np.ones((2, 3)) / 3], np.zeros((2, 2))),
            "`ref_conditionals[1]` must have shape (2, 2) (vocabulary 2, position 1); got shape (2, 3)",
        ),
        (
            ([np.array([0.5, 0.5]), np.array([[0.5, 0.5], [0.5, 0.6]])], np.zeros((2, 2))),
            "`ref_conditionals[1]` must sum to 1 along axis -1; row (1,) sums to 1.1",
        ),
        (
            ([np.array([0.5, 0.5])], np.zeros((2, 2))),
            "`reward` must have shape (2,) (one reward per sequence); got shape (2, 2)",
        ),
    ],
)
def test_bad_trees(args, msg):
    with pytest.raises(ValueError, match=re.escape(msg)):
        kt.fit_sequence_policy(*args, 1.0, device="cpu")


def test_autoregressive_policy_needs_full_support():
    conds = [np.array([1.0, 0.0]), np.full((2, 2), 0.5)]
    model = kt.AutoregressivePolicy(2, 2, device="cpu")
    with pytest.raises(ValueError, match="needs `ref_conditionals` without zeros"):
        kt.fit_sequence_policy(conds, np.zeros((2, 2)), 1.0, policy=model, device="cpu")


def test_token_log_probs_sum_to_the_sequence_log_probs(rng):
    conds, _ = tree(rng, 3, 3)
    for model in (
        kt.TabularConditionals(conds, device="cpu"),
        kt.AutoregressivePolicy(3, 3, seed=2, device="cpu"),
    ):
        per_token = model.token_log_probs().detach()
        assert per_token.shape == (1, 27, 3)
        np.testing.assert_allclose(
            per_token.sum(-1).numpy(), model.log_probs().detach().numpy(), rtol=1e-13
        )


def test_kl_level_token_only_for_sampled_kl_methods(rng):
    conds, reward = tree(rng, 2, 2)
    with pytest.raises(
        ValueError,
        match=re.escape(
            "`kl_level` 'token' applies to 'reinforce', 'ppo' and 'grpo'; got method 'exact'"
        ),
    ):
        kt.fit_sequence_policy(conds, reward, 1.0, method="exact", kl_level="token", device="cpu")
    with pytest.raises(
        ValueError, match=re.escape("`kl_level` must be 'sequence' or 'token'; got 'word'")
    ):
        kt.fit_sequence_policy(
            conds, reward, 1.0, method="reinforce", kl_level="word", device="cpu"
        )


@pytest.mark.parametrize(
    ("vocab", "length", "msg"),
    [
        # 3**(2**63) was computed exactly: it hung (issue 40, item 18)
        (3, 2**63, r"^`vocab` \*\* `length` = 3\*\*9223372036854775808 \(about 10\^4\.4e\+18\) "),
        (2, 40, r"^`vocab` \*\* `length` = 2\*\*40 \(about 10\^12\) sequences of 40 tokens "),
        (0, 2, r"^`vocab` must be an integer >= 1; got 0"),
        (2, 1.5, r"^`length` must be an integer >= 1; got 1.5"),
        (True, 2, r"^`vocab` must be an integer >= 1; got True"),
    ],
)
def test_all_sequences_refuses_tables_beyond_memory_at_once(vocab, length, msg):
    with pytest.raises(ValueError, match=msg) as info:
        all_sequences(vocab, length)
    if "**" in msg:
        assert "do not fit in this machine's memory" in str(info.value)
    assert all_sequences(1, 4).tolist() == [[0, 0, 0, 0]]
