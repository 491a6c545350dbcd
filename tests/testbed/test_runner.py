import json
import re

import numpy as np
import pytest

pytest.importorskip("trl")
import torch

from klpolicy import kl_divergence, optimal_policy
from klpolicy.app.cli import main
from klpolicy.dynamics import beta_fit, landing_point
from klpolicy.testbed import ADAPTERS, bandit_task, prompts_task, run, sequence_law

from .._mpref import assert_mp_close
from .._mpref import optimal_policy as mp_optimal_policy
from .._mpref.preference import finite_data_dpo_optimum


def test_bandit_reference_is_the_initial_models_law():
    t = bandit_task()
    (prompt,) = t.prompt_ids()
    law = sequence_law(t.model(), prompt, max_new_tokens=1, eos_token_id=t.eos_token_id)
    assert law.completions == tuple((v,) for v in range(7))
    assert law.probs.sum() == pytest.approx(1.0, rel=1e-6)
    assert [t.reward(0, c) for c in law.completions] == [0, 0, 0, 1.0, 0.5, 0.25, 0]


@pytest.mark.parametrize("trainer", ["trl-grpo", "trl-rloo"])
def test_short_run_reports_consistent_numbers(trainer):
    r = run(trainer, steps=2, seed=0)
    # one prompt: every law has a prompt axis of length 1
    assert r.task == "bandit" and r.prompts == ("q",)
    assert r.laws.shape == (2, 1, 7) and list(r.law_steps) == [1, 2]
    np.testing.assert_array_equal(r.laws[-1], r.final_law)
    land = landing_point(
        ADAPTERS[trainer].rule,
        r.ref_law[0],
        r.reward[0],
        0.5,
        **{k: r.config[k] for k in ADAPTERS[trainer].rule_options},
    )
    np.testing.assert_allclose(r.predicted[0], land.policy, rtol=1e-12)
    np.testing.assert_allclose(r.pistar, optimal_policy(r.ref_law, r.reward, 0.5), rtol=1e-12)
    kl = float(kl_divergence(r.final_law[0], r.pistar[0]))
    assert r.kl_to_pistar == pytest.approx(kl, rel=1e-12)
    assert r.kl_to_pistar_by_prompt.tolist() == [r.kl_to_pistar]
    assert r.beta_fit == pytest.approx(
        beta_fit(r.final_law[0], r.ref_law[0], r.reward[0]), rel=1e-12
    )
    assert r.predicted_beta_eff == pytest.approx(1.0 if trainer == "trl-grpo" else 0.5, rel=1e-9)
    # the policy moved from the reference, toward the reward
    assert r.final_law[0] @ r.reward[0] > r.ref_law[0] @ r.reward[0]
    d = json.loads(r.to_json())
    assert d["versions"]["trl"].startswith("1.16")


def test_dpo_short_run_on_a_drawn_dataset():
    t = bandit_task()
    r = run("trl-dpo", steps=2, seed=3, pairs=128, bt_temperature=2.0)
    # the outcomes are the responses TRL scores: each answer followed by EOS, and EOS alone
    assert r.completions == ((0, 1), (1,), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1))
    assert r.completion_text[3] == "a [EOS]"
    assert r.reward.tolist() == [[0, 0, 0, 1.0, 0.5, 0.25, 0]]
    # the reference law of the responses, from the initial model's own logits:
    # pi(y | q) pi(EOS | q y), normalised over the seven responses
    m = t.model().eval()
    with torch.no_grad():
        first = torch.log_softmax(m(torch.tensor([[2]])).logits[0, -1].double(), -1)
        pairs = torch.tensor([[2, y] for y in range(7) if y != 1])
        then_eos = torch.log_softmax(m(pairs).logits[:, -1].double(), -1)[:, 1]
    lp = np.array([first[0] + then_eos[0], first[1], *(first[2:] + then_eos[1:]).tolist()])
    np.testing.assert_allclose(r.ref_law[0], np.exp(lp) / np.exp(lp).sum(), rtol=1e-6)
    # the dataset: 128 pairs; the prediction is its exact optimum, pi* the population one,
    # pi* = ref e^{r / (T beta)} / Z at T = 2, beta = 0.5
    assert r.preference_counts.shape == (1, 7, 7)
    assert r.preference_counts.sum() == 128 and r.config["pairs"] == 128
    counts = r.preference_counts[0]
    assert_mp_close(r.predicted[0], finite_data_dpo_optimum(r.ref_law[0], counts, 0.5), rtol=1e-9)
    assert_mp_close(r.pistar[0], mp_optimal_policy(r.ref_law[0], r.reward[0], 1.0), rtol=1e-12)
    assert r.predicted_beta_eff is None and "128 pairs" in r.landing
    kl = kl_divergence(r.final_law[0], r.predicted[0])
    assert r.kl_to_predicted == pytest.approx(kl, rel=1e-12)
    assert r.laws.shape == (2, 1, 7) and r.final_law.sum() == pytest.approx(1.0, rel=1e-12)
    # two steps moved the law toward the prediction
    assert r.kl_to_predicted < r.kl_ref_to_predicted
    d = json.loads(r.to_json())
    assert d["preference_counts"] == r.preference_counts.tolist()


def test_bad_trainer_and_option():
    with pytest.raises(ValueError, match="`trainer`"):
        run("trl-ppo", steps=1, seed=0)
    with pytest.raises(ValueError, match="`no_such_field`"):
        run("trl-grpo", steps=1, seed=0, no_such_field=1)
    with pytest.raises(ValueError, match="`steps`"):
        run("trl-grpo", steps=0, seed=0)
    with pytest.raises(ValueError, match="`pairs`"):
        run("trl-grpo", steps=1, seed=0, pairs=10)  # a DPO option


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"pairs": 0}, "`pairs` must be an integer >= 1; got 0"),
        ({"pairs": 2.5}, "`pairs` must be an integer >= 1; got 2.5"),
        ({"bt_temperature": 0.0}, "`bt_temperature` must be a positive finite number; got 0.0"),
        (
            {"bt_temperature": float("inf")},
            "`bt_temperature` must be a positive finite number; got inf",
        ),
        ({"num_generations": 2}, "unknown option `num_generations` for trl-dpo"),
    ],
)
def test_dpo_bad_options(options, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        run("trl-dpo", steps=1, seed=0, **options)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"steps": 2**63}, "`steps` must be at most 100,000,000"),
        ({"steps": 1.5}, "`steps`"),
        ({"seed": -1}, "`seed` must be an integer >= 0"),
        ({"seed": 2**32}, r"`seed` must be at most 2\*\*32 - 1 = 4294967295"),
        ({"law_every": 0}, "`law_every`"),
        ({"beta": -1.0}, "`beta` must be a non-negative finite number"),
        ({"beta": float("nan")}, "`beta`"),
        ({"beta": float("inf")}, "`beta`"),
        ({"learning_rate": 0.0}, "`learning_rate` must be a positive finite number"),
        ({"num_generations": 1}, "`num_generations`"),
        ({"num_generations": 2**63}, "`num_generations` must be at most 4,096"),
        ({"scale_rewards": "sometimes"}, "`scale_rewards` must be one of"),
        ({"loss_type": "mean"}, "`loss_type` must be one of"),
    ],
)
def test_bad_numbers_are_refused_before_training(kwargs, match):
    # each is refused before a model or a trainer is built (fast: no training step)
    kwargs = {"steps": 1, "seed": 0} | kwargs
    with pytest.raises(ValueError, match=match):
        run("trl-grpo", **kwargs)


def test_cli_bad_trainer_exits_2(capsys):
    assert main(["testbed", "run", "trl-ppo"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`TRAINER`" in err


def test_cli_json(capsys):
    assert main(["testbed", "run", "trl-rloo", "--steps", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    for key in (
        "ref_law",
        "final_law",
        "reward",
        "predicted",
        "pistar",
        "kl_to_predicted",
        "kl_to_pistar",
        "beta_fit",
        "completions",
    ):
        assert key in d
    assert d["config"]["beta"] == 0.5


@pytest.mark.slow
def test_grpo_no_scale_lands_at_twice_beta():
    # measured: KL to predicted 2.7e-4, to pi*(beta) 0.088, ref to predicted 0.070
    r = run("trl-grpo", steps=300, seed=0, beta=0.5, num_generations=2, scale_rewards="none")
    assert r.kl_to_predicted < r.kl_to_pistar / 10
    assert r.kl_to_predicted < r.kl_ref_to_predicted / 2
    assert r.beta_fit == pytest.approx(1.0, rel=0.1)


@pytest.mark.slow
def test_rloo_lands_at_pistar():
    r = run("trl-rloo", steps=300, seed=0, beta=0.5, num_generations=2)
    assert r.kl_to_pistar < 1e-6
    assert r.beta_fit == pytest.approx(0.5, rel=1e-3)


def test_device_is_checked_before_training():
    with pytest.raises(ValueError, match='`device` must be None, "cpu" or "cuda"'):
        run("trl-rloo", steps=1, seed=0, device="tpu")


def test_cuda_without_a_gpu_is_refused_by_name():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(ValueError, match=r"`device` is \"cuda\" but torch .* sees no CUDA"):
        run("trl-rloo", steps=1, seed=0, device="cuda")


def test_cli_out_writes_the_json(capsys, tmp_path):
    assert main(["testbed", "run", "trl-rloo", "--steps", "1", "--out", str(tmp_path)]) == 0
    text = (tmp_path / "testbed-trl-rloo.json").read_text()
    assert json.loads(text)["steps"] == 1
    assert "kl_to_pistar" in capsys.readouterr().out  # the table on stdout as well
    a_file = tmp_path / "f"
    a_file.write_text("")
    assert main(["testbed", "run", "trl-rloo", "--steps", "1", "--out", str(a_file)]) == 2
    assert "`--out` must be a folder" in capsys.readouterr().err


@pytest.mark.gpu
def test_runs_on_cuda():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    r = run("trl-grpo", steps=2, seed=0, device="cuda")
    assert r.final_law.sum() == pytest.approx(1.0, rel=1e-6)
    assert np.sum(r.final_law * r.reward) > np.sum(r.ref_law * r.reward)


@pytest.mark.slow
def test_dpo_lands_at_the_finite_data_optimum():
    # measured (CPU, seed 0, 256 pairs, beta 0.5, T 1, lr 0.01): KL to the dataset's optimum
    # 1.3e-4 at step 25, 3.0e-7 at 100 (1.1e-14 at 300); to pi* 0.639; ref to optimum 1.76
    r = run("trl-dpo", steps=100, seed=0)
    assert r.kl_to_predicted < 1e-5
    assert r.kl_to_pistar > 0.5
    assert r.kl_ref_to_predicted > 1.0


def test_grpo_on_a_token_tree_is_predicted_on_the_tree():
    # several tokens: TRL's per-token k3 and loss_type land on the tree
    # (dynamics.tree_landing_point), not at the tabular optimum over completions
    from klpolicy.dynamics import tree_landing_point
    from klpolicy.sequences import joint
    from klpolicy.testbed import SequenceLaw, tree_task

    task = tree_task()
    r = run("trl-grpo", task, steps=1, seed=0, loss_type="dr_grpo")
    assert len(r.completions) == 156 and "myopic equilibrium" in r.landing
    V, T, eos = len(task.vocabulary), 3, task.eos_token_id
    ref = r.ref_law[0]
    law = SequenceLaw(r.completions, ref, np.log(ref), vocab_size=V, eos_token_id=eos)
    rt = np.zeros((V,) * T)
    pad = [c + (eos,) * (T - len(c)) for c in r.completions]
    for idx, v in zip(pad, r.reward[0], strict=True):
        rt[idx] = v
    land = tree_landing_point(
        "grpo", law.conditionals(), rt, 0.5, eos_token=eos, max_completion_length=T,
        num_generations=2, scale_rewards="none", loss_type="dr_grpo",
    )  # fmt: skip
    J = joint(land.policy)
    np.testing.assert_allclose(r.predicted[0], [J[i] for i in pad], rtol=1e-12, atol=1e-300)
    assert r.predicted_beta_eff is None  # the myopic point is not pi* at any beta
    tabular = landing_point("grpo", ref, r.reward[0], 0.5, num_generations=2,
                            scale_rewards="none", loss_type="dr_grpo")  # fmt: skip
    # measured: 4.6e-5 nats between the tree's myopic point and pi* at 2 beta over completions
    assert float(kl_divergence(r.predicted[0], tabular.policy)) > 1e-5


def test_the_callers_torch_threads_are_restored():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    run("trl-rloo", steps=1, seed=0, num_threads=1)
    assert torch.get_num_threads() == before


# --------------------------------------------------------------------------- several prompts


def test_grpo_on_several_prompts_reports_each_prompts_law_and_the_mean_distances():
    task = prompts_task()
    r = run("trl-grpo", task, steps=3, seed=0)
    assert r.task == "prompts" and r.prompts == ("x", "y", "z")
    assert r.laws.shape == (3, 3, 8) and r.final_law.shape == (3, 8)
    np.testing.assert_allclose(r.final_law.sum(-1), 1.0, rtol=1e-12)
    # the reference after each prompt is the initial model's own law there
    m = task.model().eval()
    with torch.no_grad():
        logits = m(torch.tensor([[2], [3], [4]])).logits[:, -1].double()
    np.testing.assert_allclose(r.ref_law, torch.softmax(logits, -1).numpy(), rtol=1e-6)
    assert r.reward[:, 5:].tolist() == [[1.0, 0.5, 0.25], [0.25, 1.0, 0.5], [0.5, 0.25, 1.0]]
    # each prompt is its own context: its own landing point and pi*, row by row
    for x in range(3):
        land = landing_point("grpo", r.ref_law[x], r.reward[x], 0.5, num_generations=2,
                             scale_rewards="none", loss_type="dapo")  # fmt: skip
        np.testing.assert_allclose(r.predicted[x], land.policy, rtol=1e-12)
        star = optimal_policy(r.ref_law[x], r.reward[x], 0.5)
        np.testing.assert_allclose(r.pistar[x], star, rtol=1e-12)
        kl = float(kl_divergence(r.final_law[x], r.predicted[x]))
        assert r.kl_to_predicted_by_prompt[x] == pytest.approx(kl, rel=1e-12)
    assert r.predicted_beta_eff == pytest.approx(1.0, rel=1e-12)
    assert r.landing.startswith("after each prompt, grpo lands at pi* at beta_eff = 1: ")
    kls = ", ".join(f"{p!r} {float(kl_divergence(q, r.ref_law[x])):.4g}"
                    for x, (p, q) in enumerate(zip(r.prompts, r.predicted)))  # fmt: skip
    assert r.landing.endswith(f"(KL to the reference: {kls} nats)")
    # the distances reported are the prompts' mean (uniform weights)
    assert r.kl_to_predicted == pytest.approx(np.mean(r.kl_to_predicted_by_prompt), rel=1e-12)
    assert r.kl_to_pistar == pytest.approx(np.mean(r.kl_to_pistar_by_prompt), rel=1e-12)
    ref_pred = np.mean(kl_divergence(r.ref_law, r.predicted))
    assert r.kl_ref_to_predicted == pytest.approx(ref_pred, rel=1e-12)
    steps, to_star, to_pred = r.kl_path()
    assert steps.tolist() == [0, 1, 2, 3]
    assert to_star[-1] == pytest.approx(r.kl_to_pistar, rel=1e-12)
    assert to_pred[-1] == pytest.approx(r.kl_to_predicted, rel=1e-12)
    assert to_pred[0] == pytest.approx(r.kl_ref_to_predicted, rel=1e-12)
    # one beta for the three prompts
    assert r.beta_fit == pytest.approx(beta_fit(r.final_law, r.ref_law, r.reward), rel=1e-12)
    # measured (seed 0): each prompt's expected reward up by 0.017-0.029 in three steps
    gain = np.sum(r.final_law * r.reward, -1) - np.sum(r.ref_law * r.reward, -1)
    assert np.all(gain > 0)
    d = json.loads(r.to_json())
    assert np.array(d["final_law"]).shape == (3, 8) and d["prompts"] == ["x", "y", "z"]
    assert len(d["kl_to_pistar_by_prompt"]) == 3


@pytest.mark.slow
def test_grpo_on_the_tree_lands_at_its_predicted_point():
    # the tree's contexts are untied ([BOS] q), so the landing point is within reach;
    # measured (seed 0): KL to predicted 1.57e-3, to pi*(beta) 1.12e-2, ref to predicted
    # 8.94e-3; beta_fit 1.02 (the predicted point's own 0.951)
    from klpolicy.testbed import tree_task

    r = run("trl-grpo", tree_task(), steps=300, seed=0, num_generations=2,
            scale_rewards="none")  # fmt: skip
    assert r.kl_to_predicted < r.kl_to_pistar / 4
    assert r.kl_to_predicted < r.kl_ref_to_predicted / 3


def test_grpo_on_a_token_tree_after_two_prompts_is_predicted_per_prompt():
    from klpolicy.dynamics import tree_landing_point
    from klpolicy.sequences import joint
    from klpolicy.testbed import SequenceLaw, Task, tree_task

    tree = tree_task()
    # the tree task's reward after "[BOS] q", its opposite after "[BOS] a": a different best
    task = Task(
        "two-trees",
        tree.vocabulary,
        ("[BOS] q", "[BOS] a"),
        3,
        lambda x, ids: tree.reward(0, ids) * (1 if x == 0 else -1),
    )
    r = run("trl-grpo", task, steps=1, seed=0, loss_type="dr_grpo")
    assert r.final_law.shape == (2, 156) and r.predicted.shape == (2, 156)
    V, T, eos = 6, 3, 1
    pad = [c + (eos,) * (T - len(c)) for c in r.completions]
    for x in range(2):
        ref = r.ref_law[x]
        law = SequenceLaw(r.completions, ref, np.log(ref), vocab_size=V, eos_token_id=eos)
        rt = np.zeros((V,) * T)
        for idx, v in zip(pad, r.reward[x], strict=True):
            rt[idx] = v
        land = tree_landing_point(
            "grpo", law.conditionals(), rt, 0.5, eos_token=eos, max_completion_length=T,
            num_generations=2, scale_rewards="none", loss_type="dr_grpo",
        )  # fmt: skip
        J = joint(land.policy)
        want = np.array([J[i] for i in pad])
        np.testing.assert_allclose(r.predicted[x], want / want.sum(), rtol=1e-12, atol=1e-300)
    # each prompt's predicted law moves toward its own reward (opposite ones)
    # (measured: an expected-reward gain of 0.0167 and 0.0156 after the two prompts)
    gain = np.sum(r.predicted * r.reward, -1) - np.sum(r.ref_law * r.reward, -1)
    assert np.all(gain > 0.01)


def test_batch_scaling_couples_the_prompts_and_has_no_per_prompt_prediction():
    r = run("trl-grpo", prompts_task(), steps=1, seed=0, scale_rewards="batch")
    assert r.predicted is None and r.kl_to_predicted is None
    assert r.kl_to_predicted_by_prompt is None
    assert "scale_rewards='batch' couples the prompts" in r.landing
    assert r.kl_to_pistar == pytest.approx(np.mean(r.kl_to_pistar_by_prompt), rel=1e-12)


def test_dpo_on_several_prompts_draws_each_prompts_pairs_and_its_optimum():
    r = run("trl-dpo", prompts_task(), steps=1, seed=0, pairs=256)
    assert r.preference_counts.shape == (3, 8, 8)
    assert r.preference_counts.sum(axis=(1, 2)).tolist() == [256, 256, 256]
    assert r.config["per_device_train_batch_size"] == 768  # the whole dataset a step
    assert "each prompt's 256 pairs' mean DPO loss" in r.landing
    for x in range(3):
        want = finite_data_dpo_optimum(r.ref_law[x], r.preference_counts[x], 0.5)
        assert_mp_close(r.predicted[x], want, rtol=1e-9)
        assert_mp_close(r.pistar[x], mp_optimal_policy(r.ref_law[x], r.reward[x], 0.5), rtol=1e-12)
    # the prompts' datasets differ (each drawn from its own reference law and labels)
    assert not np.array_equal(r.preference_counts[0], r.preference_counts[1])
    assert r.kl_to_predicted == pytest.approx(np.mean(r.kl_to_predicted_by_prompt), rel=1e-12)


def test_cli_task_choice(capsys):
    assert main(["testbed", "run", "trl-rloo", "--task", "prompts", "--steps", "1", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["task"] == "prompts" and d["prompts"] == ["x", "y", "z"]
    for key in ("ref_law", "final_law", "reward", "predicted", "pistar"):
        assert np.array(d[key]).shape == (3, 8)
    for key in ("kl_to_predicted", "kl_to_pistar", "beta_fit"):
        assert isinstance(d[key], float)
    assert main(["testbed", "run", "trl-rloo", "--task", "nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "`--task` must be one of 'bandit', 'tree', 'prompts', 'bandit-skewed'; got 'nope'" in err


@pytest.mark.slow
def test_grpo_on_several_prompts_lands_at_twice_beta():
    # issue 38 item 5's criterion, prompt-averaged: nearer the predicted point (pi* at
    # 2 beta after each prompt) than pi*(beta), and under half the reference's distance.
    # measured (seed 0): KL to predicted 8.8e-4 (9.5e-4, 8.4e-4, 8.4e-4 by prompt), to
    # pi*(beta) 0.089, reference to predicted 0.072; beta_fit 0.973
    r = run("trl-grpo", prompts_task(), steps=300, seed=0, num_generations=2,
            scale_rewards="none")  # fmt: skip
    assert r.kl_to_predicted < r.kl_to_pistar
    assert r.kl_to_predicted < r.kl_ref_to_predicted / 2
    assert np.all(r.kl_to_predicted_by_prompt < r.kl_to_pistar_by_prompt / 10)
    assert r.beta_fit == pytest.approx(1.0, rel=0.1)
