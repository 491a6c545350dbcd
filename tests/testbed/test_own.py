"""klpolicy's own trainers on the testbed's transformers model (klpolicy.testbed.own).

mpmath recipes: pi* = ref e^{r/beta}/Z from tests/_mpref (400 digits); the forward-KL
optimum pi_j = beta ref_j / (lam - r_j), lam > max r the root of sum_j pi_j = 1, from
tests/_mpref (400-digit bisection, independent of the float answer).
"""

import json

import numpy as np
import pytest

pytest.importorskip("trl")
import torch

from klpolicy import kl_divergence, optimal_policy
from klpolicy.app.cli import main
from klpolicy.dynamics import RULES, beta_fit, landing_point
from klpolicy.estimators import fixed_point
from klpolicy.testbed import ADAPTERS, bandit_task, prompts_task, run, sequence_law, tree_task
from klpolicy.testbed.own import completion_policy

from .._mpref import assert_mp_close, forward_kl_optimum
from .._mpref import optimal_policy as mp_optimal_policy

OWN = ("klpolicy-exact", "klpolicy-reinforce", "klpolicy-ppo", "klpolicy-grpo")


def test_completion_policy_is_the_enumerated_law_and_differentiable():
    t = tree_task()
    m = t.model()
    law = sequence_law(m, t.prompt_ids()[0], max_new_tokens=3, eos_token_id=t.eos_token_id)
    pol = completion_policy(m, t.prompt_ids(), law.completions, pad_token_id=0)
    lp = pol.log_probs()
    assert lp.shape == (1, 156) and lp.dtype == torch.float64
    # the same law as the tree's forward passes, to the rounding of float32 logits
    np.testing.assert_allclose(lp.detach().numpy()[0], law.logprobs, rtol=0, atol=2e-6)
    reward = torch.tensor([t.reward(0, c) for c in law.completions], dtype=torch.float64)
    (lp.exp()[0] @ reward).backward()
    assert list(pol.parameters()) == list(m.parameters())
    assert all(p.grad is not None for p in m.parameters())
    assert max(float(p.grad.abs().max()) for p in m.parameters()) > 0


@pytest.mark.parametrize(
    ("trainer", "options"),
    [
        ("klpolicy-exact", {}),
        ("klpolicy-reinforce", {}),
        ("klpolicy-reinforce", {"estimator": "k3", "placement": "loss"}),
        ("klpolicy-ppo", {"epochs": 2}),
        ("klpolicy-grpo", {"num_generations": 4}),
    ],
)
def test_short_run_reports_consistent_numbers(trainer, options):
    r = run(trainer, steps=3, seed=0, **options)
    assert r.laws.shape == (3, 1, 7) and list(r.law_steps) == [1, 2, 3]
    np.testing.assert_array_equal(r.laws[-1], r.final_law)
    assert not np.array_equal(r.final_law, r.ref_law)  # it trained
    ref0 = sequence_law(bandit_task().model(), [2], max_new_tokens=1).probs
    np.testing.assert_array_equal(r.ref_law[0], ref0)  # the reference: the initial model's law
    rule = r.config["rule"]
    rule_opts = {k: r.config[k] for k in RULES[rule].options if k in r.config}
    land = landing_point(rule, r.ref_law[0], r.reward[0], 0.5, **rule_opts)
    np.testing.assert_allclose(r.predicted[0], land.policy, rtol=1e-12)
    assert r.predicted_beta_eff == land.beta_eff
    np.testing.assert_allclose(r.pistar, optimal_policy(r.ref_law, r.reward, 0.5), rtol=1e-12)
    want = float(kl_divergence(r.final_law[0], r.pistar[0]))
    assert r.kl_to_pistar == pytest.approx(want, rel=1e-12)
    assert r.beta_fit == pytest.approx(beta_fit(r.final_law, r.ref_law, r.reward), rel=1e-12)
    d = json.loads(r.to_json())
    assert d["versions"]["trl"] is None and d["versions"]["torch"] == torch.__version__
    assert d["trainer"] == trainer and d["config"]["beta"] == 0.5


def test_the_rule_of_each_configuration():
    rules = {
        "klpolicy-exact": ("reinforce", {"baseline": "none"}),
        "klpolicy-reinforce": (
            "reinforce",
            {"baseline": "loo", "num_generations": 16, "kl_estimator": "k1", "placement": "reward"},
        ),
        "klpolicy-ppo": ("ppo", {"kl_estimator": "k1"}),
        "klpolicy-grpo": (
            "grpo",
            {"num_generations": 2, "scale_rewards": "group", "use_bias_correction_kl": False},
        ),
    }
    for name, (rule, ro) in rules.items():
        assert ADAPTERS[name].rule == rule and ADAPTERS[name].train is not None
        o = ADAPTERS[name].train.check(name, {}, ADAPTERS[name].defaults)
        got_rule, got_ro, _ = ADAPTERS[name].train.prediction([0.5, 0.5], [1.0, 0.0], o)
        assert (got_rule, got_ro) == (rule, ro)
    assert ADAPTERS["trl-grpo"].train is None and ADAPTERS["trl-grpo"].trainer == "GRPOTrainer"


def test_the_landing_of_each_kl_estimator_and_placement():
    ref, r, beta = np.array([0.4, 0.3, 0.2, 0.1]), np.array([1.0, 0.0, 0.5, 2.0]), 0.5
    own = ADAPTERS["klpolicy-reinforce"]

    def land(estimator, placement):
        o = own.train.check(
            "klpolicy-reinforce", {"estimator": estimator, "placement": placement}, own.defaults
        )
        rule, ro, (pi, b, whys) = own.train.prediction(ref, r, o)
        return rule, ro, (pi, b, whys[0])  # one context: one description

    star = mp_optimal_policy(ref, r, beta)
    for est, place in [("k1", "reward"), ("k2", "loss")]:  # the reverse KL: pi* at beta
        rule, ro, (pi, b, why) = land(est, place)
        assert rule == "reinforce" and ro["baseline"] == "loo" and ro["kl_estimator"] == est
        assert b == beta and "reverse KL" in why
        assert_mp_close(pi, star, rtol=1e-12)
    rule, _, (pi, b, why) = land("k1", "loss")
    assert b == 0.0 and "no expected gradient" in why
    np.testing.assert_array_equal(pi, fixed_point(ref, r, beta, estimator="k1", placement="loss"))
    rule, _, (pi, b, why) = land("k3", "loss")
    assert b is None and "forward KL" in why
    assert_mp_close(pi, forward_kl_optimum(ref, r, beta), rtol=1e-12)
    for est in ("k2", "k3"):  # no interior fixed point in the reward
        rule, _, (pi, b, why) = land(est, "reward")
        assert pi is None and b is None and "runs off" in why


def test_same_seed_same_run():
    a = run("klpolicy-reinforce", steps=2, seed=4)
    b = run("klpolicy-reinforce", steps=2, seed=4)
    c = run("klpolicy-reinforce", steps=2, seed=5)
    np.testing.assert_array_equal(a.laws, b.laws)
    assert not np.array_equal(a.laws, c.laws)


def test_law_every_and_a_token_tree():
    r = run("klpolicy-exact", tree_task(), steps=3, seed=0, law_every=2)
    assert list(r.law_steps) == [2, 3] and r.laws.shape == (2, 1, 156)
    # whole completions are the outcomes: the exact objective's landing is pi* over them
    np.testing.assert_allclose(r.predicted, r.pistar, rtol=1e-12)
    assert r.final_law[0] @ r.reward[0] > r.ref_law[0] @ r.reward[0]


def test_several_prompts_are_contexts_each_with_its_prediction():
    t = prompts_task()
    r = run("klpolicy-reinforce", t, steps=2, seed=0, estimator="k3", placement="loss")
    P = len(t.prompts)
    assert r.laws.shape == (2, P, r.ref_law.shape[1]) and r.final_law.shape == r.ref_law.shape
    for x in range(P):  # each prompt's row: its own reference and rewards, its own landing
        own = ADAPTERS["klpolicy-reinforce"]
        o = own.train.check(
            "klpolicy-reinforce", {"estimator": "k3", "placement": "loss"}, own.defaults
        )
        _, _, (pi, _, _) = own.train.prediction(r.ref_law[x], r.reward[x], o)
        np.testing.assert_allclose(r.predicted[x], pi, rtol=1e-12)
        assert r.kl_to_pistar_by_prompt[x] == pytest.approx(
            float(kl_divergence(r.final_law[x], r.pistar[x])), rel=1e-12
        )
    assert r.kl_to_pistar == pytest.approx(float(np.mean(r.kl_to_pistar_by_prompt)), rel=1e-12)
    assert r.predicted_beta_eff is None and "forward KL" in r.landing


def test_exact_lands_at_pistar():
    # measured (CPU, seed 0, lr 0.01): KL(final || pi*) 1.7e-7 after 100 steps, 2.4e-12 after
    # 200 (beta_fit 0.5000003), 2.1e-15 after 300
    r = run("klpolicy-exact", steps=200, seed=0)
    assert_mp_close(r.pistar[0], mp_optimal_policy(r.ref_law[0], r.reward[0], 0.5), rtol=1e-12)
    assert r.kl_to_pistar < 1e-10 and r.kl_to_predicted == r.kl_to_pistar
    assert r.beta_fit == pytest.approx(0.5, rel=1e-5)


@pytest.mark.slow
def test_k3_in_the_loss_lands_at_the_forward_kl_optimum_not_pistar():
    # measured (CPU, seed 0, batch 16, lr 0.01, 300 steps): KL to the forward-KL optimum
    # 9.7e-5, to pi*(beta) 0.027, the two points 0.027 apart
    r = run("klpolicy-reinforce", steps=300, seed=0, estimator="k3", placement="loss")
    assert r.kl_to_predicted < r.kl_to_pistar / 10
    k1 = run("klpolicy-reinforce", steps=300, seed=0)
    assert k1.kl_to_pistar < 1e-8


@pytest.mark.parametrize(
    ("trainer", "options", "message"),
    [
        (
            "klpolicy-exact",
            {"num_generations": 4},
            "unknown option `num_generations` for klpolicy-exact (its options are beta, "
            "learning_rate)",
        ),
        ("klpolicy-exact", {"beta": 0.0}, "`beta` must be a positive finite number; got 0.0"),
        (
            "klpolicy-exact",
            {"learning_rate": -1.0},
            "`learning_rate` must be a positive finite number; got -1.0",
        ),
        (
            "klpolicy-reinforce",
            {"estimator": "k4"},
            "`estimator` must be one of 'k1', 'k2', 'k3'; got 'k4'",
        ),
        (
            "klpolicy-reinforce",
            {"placement": "both"},
            "`placement` must be one of 'reward', 'loss'; got 'both'",
        ),
        ("klpolicy-reinforce", {"batch_size": 1}, "`batch_size` must be an integer >= 2; got 1"),
        ("klpolicy-grpo", {"n_groups": 0}, "`n_groups` must be an integer >= 1; got 0"),
        ("klpolicy-ppo", {"epochs": 0}, "`epochs` must be an integer >= 1; got 0"),
        ("klpolicy-ppo", {"clip": 0.0}, "`clip` must be a positive finite number; got 0.0"),
        (
            "klpolicy-grpo",
            {"num_generations": 1},
            "`num_generations` must be an integer >= 2; got 1",
        ),
    ],
)
def test_bad_options_are_refused_before_training(trainer, options, message):
    with pytest.raises(ValueError) as info:
        run(trainer, steps=1, seed=0, **options)
    assert str(info.value) == message


def test_cli_runs_klpolicy_trainers(capsys):
    args = ["testbed", "run", "klpolicy-reinforce", "--steps", "2", "--json"]
    assert main([*args, "--estimator", "k3", "--placement", "loss", "--batch-size", "8"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["config"]["rule"] == "reinforce" and d["config"]["num_generations"] == 8
    assert d["config"]["kl_estimator"] == "k3" and d["config"]["placement"] == "loss"
    assert len(d["final_law"][0]) == len(d["predicted"][0]) == len(d["completions"]) == 7
    assert main(["testbed", "run", "klpolicy-reinforce", "--estimator", "k4"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "`estimator`" in err
    assert main(["testbed", "run", "klpolicy-exact", "--num-generations", "2"]) == 2
    assert "unknown option `num_generations`" in capsys.readouterr().err


@pytest.mark.gpu
def test_runs_on_cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    for trainer in OWN:
        r = run(trainer, steps=2, seed=0, device="cuda")
        assert r.final_law.sum() == pytest.approx(1.0, rel=1e-6)
        assert not np.array_equal(r.final_law, r.ref_law)


def test_cuda_without_a_gpu_is_refused_and_a_result_plots(tmp_path):
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"`device` is \"cuda\" but torch .* sees no CUDA"):
            run("klpolicy-exact", steps=1, seed=0, device="cuda")
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    fig = run("klpolicy-grpo", steps=2, seed=0).plot()
    assert [ax.get_title() for ax in fig.axes] == ["Distance to the targets", "The final law"]
    fig.savefig(tmp_path / "run.png")
    import matplotlib.pyplot as plt

    plt.close(fig)
