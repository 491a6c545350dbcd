"""TestbedResult.plot: the figure holds the exact distances and laws it claims to show."""

from __future__ import annotations

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from klpolicy import (  # noqa: E402
    kl_divergence,
    optimal_policy,
    testbed,
)

from .._figure_rules import figure_problems  # noqa: E402


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def _result(predicted=True, prompts=("q",)):
    refs = np.array([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]])[: len(prompts)]
    reward = np.array([[1.0, 0.5, 0.0], [0.0, 0.5, 1.0]])[: len(prompts)]
    pistar = optimal_policy(refs, reward, 0.5)
    pred = optimal_policy(refs, reward, 1.0)
    laws = np.array([optimal_policy(refs, reward, b) for b in (4.0, 2.0, 1.2)])
    to_pred = kl_divergence(laws[-1], pred)
    to_star = kl_divergence(laws[-1], pistar)
    ref_pred = kl_divergence(refs, pred)
    return testbed.TestbedResult(
        trainer="trl-grpo",
        task="test",
        config={"beta": 0.5},
        steps=30,
        seed=0,
        prompts=prompts,
        completions=((3,), (4,), (5,)),
        ref_law=refs,
        reward=reward,
        law_steps=np.array([10, 20, 30]),
        laws=laws,
        final_law=laws[-1],
        predicted=pred if predicted else None,
        predicted_beta_eff=1.0 if predicted else None,
        landing="test",
        pistar=pistar,
        kl_to_predicted=float(np.mean(to_pred)) if predicted else None,
        kl_to_pistar=float(np.mean(to_star)),
        kl_ref_to_predicted=float(np.mean(ref_pred)) if predicted else None,
        kl_to_predicted_by_prompt=to_pred if predicted else None,
        kl_to_pistar_by_prompt=to_star,
        kl_ref_to_predicted_by_prompt=ref_pred if predicted else None,
        beta_fit=1.2,
        versions={},
        wall_time=0.0,
        completion_text=("a", "b", "c"),
    )


def _kl(p, q):
    # KL(p || q) = sum p log(p / q), written out here; the mean over the prompts' rows
    p, q = np.asarray(p), np.asarray(q)
    return float(np.mean(np.sum(p * np.log(p / q), axis=-1)))


def test_plot_draws_the_distances_and_the_final_law():
    r = _result()
    fig = r.plot()
    assert figure_problems(fig) == []
    left, right = fig.axes
    assert left.get_yscale() == "log"
    to_pred, to_star = left.lines
    laws = [r.ref_law, *r.laws]
    np.testing.assert_array_equal(to_pred.get_xdata(), [0, 10, 20, 30])
    np.testing.assert_allclose(to_pred.get_ydata(), [_kl(q, r.predicted) for q in laws], rtol=1e-12)
    np.testing.assert_allclose(to_star.get_ydata(), [_kl(q, r.pistar) for q in laws], rtol=1e-12)
    assert [t.get_text() for t in left.get_legend().get_texts()] == [
        r"to predicted ($\beta_{eff}$=1)",
        r"to $\pi^*_\beta$ ($\beta$=0.5)",
    ]
    # three groups of bars: the final law, the prediction, pi*; one bar per completion
    heights = [[p.get_height() for p in c] for c in right.containers]
    np.testing.assert_array_equal(heights, [r.final_law[0], r.predicted[0], r.pistar[0]])
    assert [t.get_text() for t in right.get_xticklabels()] == ["a", "b", "c"]
    # the last distance to the prediction is the one the result reports
    assert to_pred.get_ydata()[-1] == pytest.approx(r.kl_to_predicted, rel=1e-12)


def test_plot_without_a_prediction_and_on_given_axes():
    r = _result(predicted=False)
    fig, axes = plt.subplots(1, 2)
    assert r.plot(axes) is fig
    assert len(axes[0].lines) == 1 and len(axes[1].containers) == 2
    steps, _, to_pred = r.kl_path()
    assert to_pred is None and list(steps) == [0, 10, 20, 30]
    with pytest.raises(ValueError, match="`axes`"):
        r.plot([axes[0]])


def test_plot_of_several_prompts_draws_the_mean_distance_and_every_row():
    r = _result(prompts=("x", "y"))
    fig = r.plot()
    assert figure_problems(fig) == []
    left, right = fig.axes
    to_pred, to_star = left.lines
    laws = [r.ref_law, *r.laws]
    np.testing.assert_allclose(to_pred.get_ydata(), [_kl(q, r.predicted) for q in laws], rtol=1e-12)
    np.testing.assert_allclose(to_star.get_ydata(), [_kl(q, r.pistar) for q in laws], rtol=1e-12)
    assert to_pred.get_ydata()[-1] == pytest.approx(r.kl_to_predicted, rel=1e-12)
    # a bar per prompt and completion, prompt by prompt
    heights = [[p.get_height() for p in c] for c in right.containers]
    np.testing.assert_array_equal(
        heights, [r.final_law.ravel(), r.predicted.ravel(), r.pistar.ravel()]
    )
    labels = [t.get_text() for t in right.get_xticklabels()]
    assert labels == ["x: a", "x: b", "x: c", "y: a", "y: b", "y: c"]
