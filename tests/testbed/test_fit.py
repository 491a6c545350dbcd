"""fitted_task: a reference model fitted to a tabular law, exactly, and runs started from it."""

import json

import mpmath as mp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("trl")

from klpolicy import kl_divergence, optimal_policy  # noqa: E402
from klpolicy.dynamics import landing_point  # noqa: E402
from klpolicy.testbed import (  # noqa: E402
    ADAPTERS,
    SKEWED_BANDIT_LAW,
    FittedTask,
    Task,
    bandit_task,
    fitted_task,
    prompts_task,
    reachable_law,
    run,
    sequence_law,
    skewed_bandit_task,
    task_completions,
    tree_task,
)
from klpolicy.testbed import fit as fit_module  # noqa: E402

LAW = [0.3, 0.2, 0.1, 0.05, 0.05, 0.1, 0.2]
#: a tree whose contexts q, q q, q q q are tied: the prompt "q" alone, no start token
TIED_TREE = Task("tied-tree", ("[PAD]", "[EOS]", "q", "a", "b"), ("q",), 3, lambda x, c: 0.0)


def _law(task, model, ids=None):
    ids = task.prompt_ids()[0] if ids is None else ids
    return sequence_law(
        model.eval(), ids, max_new_tokens=task.max_new_tokens, eos_token_id=task.eos_token_id
    )


def test_completions_are_sequence_laws_order():
    for task in (bandit_task(), tree_task()):
        law = _law(task, task.model())
        assert task_completions(task) == law.completions
    assert len(task_completions(tree_task())) == 156  # 1 + 5 + 5 * 5 * 6
    assert len(task_completions(TIED_TREE)) == 85  # 1 + 4 + 4 * 4 * 5


def test_bandit_fit_reaches_the_tolerance_and_reports_its_exact_kl():
    t = fitted_task(bandit_task(), LAW)
    assert isinstance(t, FittedTask) and t.name == "bandit"
    assert t.target.shape == (1, 7) and t.completions == tuple((v,) for v in range(7))
    law = _law(t, t.model())
    kl = float(np.sum(np.array(LAW) * (np.log(LAW) - law.logprobs)))
    assert t.fit_kl < 1e-6 and kl == pytest.approx(t.fit_kl, rel=1e-9)
    assert 0.5 * np.abs(law.probs - LAW).sum() <= np.sqrt(kl / 2)  # Pinsker's inequality
    # the initial (unfitted) model is far from the target
    base = _law(t, t.base_model())
    assert float(kl_divergence(np.array(LAW), base.probs)) > 0.05


def test_fit_is_cached_and_deterministic():
    t = fitted_task(bandit_task(), LAW)
    assert fitted_task(bandit_task(), LAW) is t  # kept: no second fit
    a, b = t.model(), t.model()
    assert a is not b
    for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(x, y), k
    fit_module._CACHE.clear()
    again = fitted_task(bandit_task(), LAW)
    assert again is not t and again.fit_steps == t.fit_steps and again.fit_kl == t.fit_kl
    for k, v in again.state.items():
        assert torch.equal(v, t.state[k]), k  # the same weights, bit for bit


def test_mapping_and_array_give_the_same_fit():
    t = bandit_task()
    by_key = {(v,): p for v, p in reversed(list(enumerate(LAW)))}
    assert fitted_task(t, by_key).fit_kl == fitted_task(t, LAW).fit_kl
    np.testing.assert_array_equal(fitted_task(t, by_key).target, [LAW])


def test_a_model_gives_every_repetition_of_one_token_one_next_token_law():
    # the premise of reachable_law: the contexts q, q q, q q q share one next-token law for
    # any weights (no absolute positions); q a, by contrast, differs
    for seed in (0, 7):
        m = Task(**{**TIED_TREE.__dict__, "model_seed": seed}).model().eval()
        with torch.no_grad():
            rows = [m(torch.tensor([[2] * n])).logits[0, -1].double() for n in (1, 2, 3)]
            other = m(torch.tensor([[2, 3]])).logits[0, -1].double()
        p = [torch.softmax(r, -1).numpy() for r in rows]
        np.testing.assert_allclose(p[1], p[0], rtol=1e-5)
        np.testing.assert_allclose(p[2], p[0], rtol=1e-5)
        assert np.abs(torch.softmax(other, -1).numpy() - p[0]).max() > 1e-3


def test_the_tree_tasks_start_token_unties_its_contexts():
    # after [BOS] q, [BOS] q q, [BOS] q q q the laws differ, at every seed tried (measured:
    # 3.6e-3 and 2.2e-3 apart at seeds 0 and 7 between the first two), so the tree task's
    # model can express each context's conditional; the finder of tied contexts agrees
    t = tree_task()
    assert t.prompt_ids() == ([5, 2],)
    masses = fit_module._edge_masses(task_completions(t), np.ones((1, 156)) / 156, 6)
    assert len(masses) == 31 and fit_module._tied_nodes(t.prompt_ids(), masses) == []
    for seed in (0, 7):
        m = tree_task(model_seed=seed).model().eval()
        with torch.no_grad():
            rows = [m(torch.tensor([[5] + [2] * n])).logits[0, -1].double() for n in (1, 2, 3)]
        p = [torch.softmax(r, -1).numpy() for r in rows]
        assert np.abs(p[1] - p[0]).max() > 1e-3 and np.abs(p[2] - p[1]).max() > 1e-4
    q = np.full(156, 1 / 156)
    np.testing.assert_allclose(reachable_law(t, q), q, rtol=1e-13)


def _mp_uniform_tree_gap():
    # recipe: the uniform law over the tied tree's 85 completions; the edge masses after the
    # tied contexts q, q q, q q q (tokens PAD EOS q a b; EOS ends a completion) are
    # [21, 1, 21, 21, 21]/85, [5, 1, 5, 5, 5]/85, [1, 1, 1, 1, 1]/85; the shared row is
    # their normalised sum m, and the gap is sum_h sum_v W_h(v) log(c_h(v) / m(v))
    with mp.workdps(40):
        W = [[21, 1, 21, 21, 21], [5, 1, 5, 5, 5], [1, 1, 1, 1, 1]]
        tot = [sum(w[v] for w in W) for v in range(5)]
        m = [mp.mpf(t) / sum(tot) for t in tot]
        gap = mp.mpf(0)
        for w in W:
            for v in range(5):
                gap += mp.mpf(w[v]) / 85 * mp.log(mp.mpf(w[v]) / sum(w) / m[v])
        return float(gap)


def test_reachable_law_of_the_uniform_tree():
    t = TIED_TREE
    q = np.full(85, 1 / 85)
    r = reachable_law(t, q)
    assert r.shape == (85,) and r.sum() == pytest.approx(1.0, abs=1e-15)
    gap = float(kl_divergence(q, r))
    assert gap == pytest.approx(_mp_uniform_tree_gap(), rel=1e-12)
    np.testing.assert_allclose(reachable_law(t, r), r, rtol=1e-13)  # a projection
    # the bandit has no tied contexts (one prompt token, one step)
    np.testing.assert_allclose(reachable_law(bandit_task(), LAW), LAW, rtol=1e-15)
    with pytest.raises(ValueError, match=r"no weights come nearer than KL = 0\.0216"):
        fitted_task(t, q)


def test_tree_fit_of_a_reachable_law():
    # the tied tree reaches the law only once its tied rows are made equal
    t = TIED_TREE
    rng = np.random.default_rng(1)
    target = reachable_law(t, rng.dirichlet(np.full(85, 5.0)))
    f = fitted_task(t, target, tol=1e-5)
    law = _law(f, f.model())
    assert f.fit_kl < 1e-5
    assert float(kl_divergence(target, law.probs)) == pytest.approx(f.fit_kl, rel=1e-6)


def test_the_tree_task_fits_a_law_whose_conditionals_differ_at_every_context():
    # a random law over the 156 completions: p(. | [BOS] q), p(. | [BOS] q q) and
    # p(. | [BOS] q q q) all differ, and the tree task's model reaches it (measured: KL
    # 4.9e-6 after 340 steps)
    t = tree_task()
    target = np.random.default_rng(1).dirichlet(np.full(156, 5.0))
    np.testing.assert_allclose(reachable_law(t, target), target, rtol=1e-12)
    f = fitted_task(t, target, tol=1e-5)
    law = _law(f, f.model())
    assert f.fit_kl < 1e-5
    assert float(kl_divergence(target, law.probs)) == pytest.approx(f.fit_kl, rel=1e-6)


def test_prompts_task_fits_a_row_per_prompt():
    t = prompts_task()
    rows = [
        [0.1] * 6 + [0.2, 0.2],
        [0.125] * 8,
        [0.05] * 4 + [0.2] * 4,
    ]
    f = fitted_task(t, rows)
    assert f.target.shape == (3, 8) and f.fit_kl < 1e-6
    model = f.model()
    for ids, row in zip(t.prompt_ids(), rows, strict=True):
        assert float(kl_divergence(np.array(row), _law(f, model, ids).probs)) < 1e-6
    with pytest.raises(ValueError, match=r"`law` must have one row per prompt: the task has 3"):
        fitted_task(t, rows[0])
    with pytest.raises(ValueError, match=r"`law\[1\]` must sum to 1"):
        fitted_task(t, [rows[0], [0.1] * 8, rows[2]])


def test_fit_that_does_not_reach_tol_is_an_error():
    with pytest.raises(ValueError, match=r"the fit did not reach `tol` = 1e-06: .* after 2 steps"):
        fitted_task(bandit_task(model_seed=5), LAW, steps=2)


def test_short_grpo_run_from_a_fitted_reference():
    t = skewed_bandit_task()
    r = run("trl-grpo", t, steps=2, seed=0)
    # the run's reference is the fitted model's exact law, within tol of the target
    np.testing.assert_array_equal(r.ref_target, [SKEWED_BANDIT_LAW])
    assert r.kl_target_to_ref == pytest.approx(t.fit_kl, rel=1e-9)
    assert r.kl_target_to_ref == pytest.approx(
        float(kl_divergence(np.array(SKEWED_BANDIT_LAW), r.ref_law[0])), rel=1e-12
    )
    assert r.kl_target_to_ref < 1e-6
    opts = {k: r.config[k] for k in ADAPTERS["trl-grpo"].rule_options}
    land = landing_point("grpo", r.ref_law[0], r.reward[0], 0.5, **opts)
    np.testing.assert_allclose(r.predicted[0], land.policy, rtol=1e-12)
    np.testing.assert_allclose(
        r.pistar[0], optimal_policy(r.ref_law[0], r.reward[0], 0.5), rtol=1e-12
    )
    d = json.loads(r.to_json())
    assert d["kl_target_to_ref"] == r.kl_target_to_ref and d["task"] == "bandit-skewed"
    plain = run("trl-rloo", steps=1, seed=0)
    assert plain.ref_target is None and plain.kl_target_to_ref is None


@pytest.mark.slow
def test_grpo_from_a_skewed_reference_lands_at_twice_beta():
    r = run("trl-grpo", skewed_bandit_task(), steps=300, seed=0)
    assert r.predicted_beta_eff == pytest.approx(1.0, rel=1e-9)
    assert r.kl_to_predicted < r.kl_to_pistar / 10
    assert r.kl_to_predicted < r.kl_ref_to_predicted / 10


@pytest.mark.slow
def test_rloo_from_a_skewed_reference_lands_at_pistar():
    r = run("trl-rloo", skewed_bandit_task(), steps=300, seed=0)
    assert r.kl_to_pistar < 1e-6
    assert r.kl_target_to_ref < 1e-6
