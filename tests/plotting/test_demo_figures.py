"""The demo's figures as a lecturer projects them: nothing off the axes, nothing unexplained."""

from __future__ import annotations

import re

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import klpolicy  # noqa: E402
from klpolicy import plotting  # noqa: E402
from klpolicy.app import demo  # noqa: E402


def _drawn(name):
    with matplotlib.rc_context(plotting.lecture_style()):
        fig, ax = plt.subplots(figsize=(7.5, 4.8), layout="constrained", dpi=50)
        demo.FIGURES[name][0](ax)
        fig.canvas.draw()
    return fig, ax


def test_frontier_has_no_negative_kl_and_its_labels_apart():
    fig, ax = _drawn("frontier")
    assert ax.get_xlim()[0] == 0.0
    r = fig.canvas.get_renderer()
    boxes = {t.get_text(): t.get_window_extent(r) for t in ax.texts}
    assert {r"$\beta$=0.1", "$n=32$"} <= set(boxes)
    names = list(boxes)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            assert not boxes[a].overlaps(boxes[b]), (a, b)
    # every label inside the axes (nothing left of KL = 0)
    inside = ax.get_window_extent(r)
    assert all(b.x0 >= inside.x0 - 1 for b in boxes.values())
    # beta = 0.1 and n = 32 nearly coincide: the best-of-n marker is hollow, the dot shows
    ref, reward = demo.frontier_problem()
    kl01 = float(klpolicy.optimal_kl(ref, reward, 0.1))
    kl32 = float(klpolicy.best_of_n_kl(ref, reward, 32))
    assert abs(kl01 - kl32) < 0.02 * ax.get_xlim()[1]
    (bon,) = [ln for ln in ax.lines if ln.get_label() == "best-of-n"]
    assert bon.get_markerfacecolor() == "none"


def test_controller_trace_says_what_horizon_and_lag_mean():
    _, ax = _drawn("controller_trace")
    c = demo.controller_problem()
    title = ax.get_title()
    assert f"horizon {c['horizon']:g}:" in title and "6.67% a step" in title  # 0.2 / 3
    assert f"lag {c['lag']:g}: the policy moves 30% of the way" in title


def test_token_kl_says_which_problem_and_beta():
    _, ax = _drawn("token_kl")
    title = ax.get_title()
    assert r"$\beta$ = 0.5" in title and "3-token vocabulary, 5 tokens" in title
    total = float(klpolicy.sequences.per_token_kl(*demo.token_problem(0.5)).sum())
    assert f"total {total:.3g} nats" in title


def test_estimator_histograms_legend_fits_the_figure():
    with matplotlib.rc_context(plotting.lecture_style()):
        fig, ax = plt.subplots(figsize=(7.5, 4.8), layout="constrained", dpi=50)
        plotting.estimator_histograms([0.5, 0.5], [1.0, 0.0], n=2000, ax=ax)
        fig.canvas.draw()
    r = fig.canvas.get_renderer()
    legend = ax.get_legend().get_window_extent(r)
    assert legend.x0 >= 0 and legend.x1 <= fig.bbox.x1
    assert ax.get_ylabel() == "count (of 2,000 samples)"


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (
            lambda: plotting.estimator_histograms(
                [0.5, 0.5], [0.5, 0.5], estimators=["k1"] * 7, n=10
            ),
            "`estimators` must hold at most 6 entries, one colour each in one axes; got 7",
        ),
        (
            lambda: plotting.fixed_points([0.5, 0.5], [1.0, 0.0], combos=[("k1", "reward")] * 7),
            "`combos` must hold at most 6 entries",
        ),
        (
            lambda: plotting.kl_budget(
                [0, 1], [0, 1], fits={str(i): (lambda d: d) for i in range(6)}
            ),
            "`fits` must hold at most 5 curves",
        ),
        (
            lambda: plotting.kl_budget([0, 1], [0, 1], [0, 2], proxy_axis="top"),
            "`proxy_axis` must be 'left', 'right' or 'panel'; got 'top'",
        ),
    ],
)
def test_more_series_than_colours_is_refused(call, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        call()


def test_library_figures_one_colour_per_labelled_series_and_units_on_every_axis():
    import matplotlib.colors as mcolors

    ref, reward = np.array([0.4, 0.3, 0.2, 0.1]), np.array([0.0, 1.0, 0.5, 2.0])
    trace = klpolicy.control.simulate(
        klpolicy.control.AdaptiveKLController(1.0, target=0.1, horizon=3.0),
        ref,
        reward,
        steps=10,
    )
    d = np.linspace(0.1, 2, 20)
    axes = [
        plotting.beta_sweep(ref, reward, betas=[0.1, 1.0, 10.0]),
        plotting.frontier(ref, reward, betas=[0.1, 1.0], best_of_n=(2, 4)),
        plotting.kl_budget(d, d - 0.3 * d**2, d, fits={"fit": lambda x: x}),
        plotting.kl_budget(d, d - 0.3 * d**2, d, proxy_axis="panel"),
        plotting.controller_trace(trace, target=0.1),
        plotting.estimator_histograms([0.6, 0.4], [0.5, 0.5], n=200),
        plotting.fixed_points(ref, reward, betas=[0.5, 1.0]),
        plotting.token_kl([0.1, 0.2]),
    ]
    for ax in axes:
        for a in ax.figure.axes:
            colours = {}
            for art in [*a.lines, *a.patches]:
                label = art.get_label()
                if label and not label.startswith("_"):
                    c = art.get_color() if hasattr(art, "get_color") else art.get_edgecolor()
                    colours.setdefault(mcolors.to_hex(c), []).append(label)
            assert all(len(v) == 1 for v in colours.values()), colours
            # units (or "probability", a count, an index) in every axis label
            for label in (a.get_xlabel(), a.get_ylabel()):
                if label:
                    assert "(" in label, label
