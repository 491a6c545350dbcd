"""The built-in tasks: prompts, rewards, and each prompt's exact law against a forward pass."""

import re

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from klpolicy.testbed import TASKS, Task, bandit_task, prompts_task, sequence_law, tree_task  # noqa: E402


def test_tasks_table_names_the_builders():
    assert {k: TASKS[k] for k in ("bandit", "tree", "prompts")} == {
        "bandit": bandit_task,
        "tree": tree_task,
        "prompts": prompts_task,
    }
    assert list(TASKS) == ["bandit", "tree", "prompts", "bandit-skewed"]
    for name, build in TASKS.items():
        assert build(model_seed=3).name == name


def test_prompts_task_rewards_a_different_best_answer_after_each_prompt():
    t = prompts_task()
    assert t.prompts == ("x", "y", "z") and t.max_new_tokens == 1
    words = t.vocabulary
    table = [[t.reward(i, (v,)) for v in range(len(words))] for i in range(3)]
    assert table == [
        [0, 0, 0, 0, 0, 1.0, 0.5, 0.25],
        [0, 0, 0, 0, 0, 0.25, 1.0, 0.5],
        [0, 0, 0, 0, 0, 0.5, 0.25, 1.0],
    ]
    best = [words[int(np.argmax(row))] for row in table]
    assert best == ["a", "b", "c"]
    assert t.reward(0, (5, 1)) == 0.0 and t.reward(0, ()) == 0.0


def test_tree_prompt_ids_survive_the_tokenizer_as_trl_calls_it():
    # TRL 1.16 tokenizes GRPO/RLOO prompts with the defaults and DPO's with
    # add_special_tokens=False; [BOS] is an ordinary word, so both give the ids that
    # sequence_law enumerates after, and decoding a completion keeps it
    t = tree_task()
    tok = t.tokenizer()
    assert t.vocabulary == ("[PAD]", "[EOS]", "q", "a", "b", "[BOS]")
    assert tok.bos_token is None and 5 not in tok.all_special_ids
    for kw in ({}, {"add_special_tokens": False}):
        out = tok(text=list(t.prompts) * 2, padding=True, padding_side="left", **kw)
        assert out["input_ids"] == [[5, 2], [5, 2]] and out["attention_mask"] == [[1, 1]] * 2
    assert tok.decode([5, 3, 1], skip_special_tokens=True) == "[BOS] a"
    assert t.reward(0, (5, 3, 1)) == pytest.approx(1 / 3) and t.reward(0, (4, 5, 1)) == -1 / 3


def test_each_prompts_law_sums_to_one_and_matches_a_forward_pass():
    t = prompts_task()
    m = t.model().eval()
    laws = []
    for ids in t.prompt_ids():
        law = sequence_law(m, ids, max_new_tokens=1, eos_token_id=t.eos_token_id)
        assert law.completions == tuple((v,) for v in range(8))
        assert law.probs.sum() == pytest.approx(1.0, rel=1e-6)
        with torch.no_grad():  # one forward pass of the prompt, softmax in float64
            logits = m(torch.tensor([ids])).logits[0, -1].double()
        np.testing.assert_allclose(law.probs, torch.softmax(logits, -1).numpy(), rtol=1e-6)
        laws.append(law.probs)
    # the initial model's laws differ by prompt: each prompt is its own context
    assert np.max(np.abs(laws[0] - laws[1])) > 1e-3 and np.max(np.abs(laws[1] - laws[2])) > 1e-3


def test_a_task_of_one_prompt_and_a_list_of_prompts():
    vocab = ("[PAD]", "[EOS]", "p", "q", "a")
    one = Task("one", vocab, ("p",), 1, lambda i, c: float(c == (4,)))
    assert one.prompt_ids() == ([2],) and one.reward(0, (4,)) == 1.0
    two = Task("two", vocab, ["p", "q p"], 1, lambda i, c: 0.0)
    assert two.prompts == ("p", "q p") and two.prompt_ids() == ([2], [3, 2])


@pytest.mark.parametrize("bad", ["p", (), ("p", ""), ("p", 3), None, b"p"])
def test_bad_prompts_are_refused(bad):
    with pytest.raises(ValueError, match=re.escape("`prompts` must be a non-empty tuple")):
        Task("t", ("[PAD]", "[EOS]", "p"), bad, 1, lambda i, c: 0.0)


def test_a_prompt_word_outside_the_vocabulary_is_refused():
    t = Task("t", ("[PAD]", "[EOS]", "p"), ("p", "p w"), 1, lambda i, c: 0.0)
    msg = "`prompts[1]` holds the word 'w', which is not in the task's vocabulary"
    with pytest.raises(ValueError, match=re.escape(msg)):
        t.prompt_ids()
