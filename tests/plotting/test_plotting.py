"""klpolicy.plotting and klpolicy.app.demo: the figures hold the exact numbers they claim to show."""

from __future__ import annotations

import re
import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

import klpolicy  # noqa: E402
from klpolicy import plotting  # noqa: E402


def _sigmoid(x: float) -> float:
    return float(np.exp(x) / (np.exp(x) + 1.0))


@pytest.mark.slow
def test_import_klpolicy_does_not_import_matplotlib():
    code = "import sys, klpolicy, klpolicy.app.cli, klpolicy.app.demo; print('matplotlib' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_beta_sweep_marks_the_worked_example():
    ax = plotting.beta_sweep()
    assert ax.get_xscale() == "log"
    curves, marks = ax.lines[:2], ax.lines[2:]
    # the curves are pi*_beta on the default grid, action by action
    grid = np.geomspace(1e-2, 1e2, 400)
    pi = klpolicy.optimal_policy([0.5, 0.5], [1.0, 0.0], grid[:, None])
    for i, line in enumerate(curves):
        np.testing.assert_array_equal(line.get_xdata(), grid)
        np.testing.assert_allclose(line.get_ydata(), pi[:, i], rtol=0, atol=0)
    # the marked points: e^2/(e^2+1) = 0.8808 at beta 0.5 and e^0.5/(e^0.5+1) = 0.6225 at 2
    assert [(float(m.get_xdata()[0]), float(m.get_ydata()[0])) for m in marks] == [
        pytest.approx((0.5, _sigmoid(2.0)), rel=1e-14),
        pytest.approx((2.0, _sigmoid(0.5)), rel=1e-14),
    ]
    assert [t.get_text() for t in ax.texts] == [
        r"0.88 at $\beta$=0.5",
        r"0.62 at $\beta$=2",
        "greedy\n" r"($\beta \to 0$)",  # the two limits, at the two ends of the axis
        "reference\n" r"($\beta \to \infty$)",
    ]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "$y=0$ ($r=1$, best)",
        "$y=1$ ($r=0$)",
    ]


def test_beta_sweep_custom_problem_labels_and_marks():
    ax = plotting.beta_sweep(
        [0.2, 0.3, 0.5], [0.0, 1.0, 2.0], betas=[0.1, 1, 10], labels="abc", mark=[1.0]
    )
    assert len(ax.lines) == 4
    np.testing.assert_allclose(
        ax.lines[2].get_ydata(),
        klpolicy.optimal_policy([0.2, 0.3, 0.5], [0, 1, 2], [[0.1], [1], [10]])[:, 2],
    )
    # the mark follows the best action (y=2), not action 0
    assert float(ax.lines[3].get_ydata()[0]) == pytest.approx(
        klpolicy.optimal_policy([0.2, 0.3, 0.5], [0, 1, 2], 1.0)[2], rel=1e-15
    )
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["a", "b", "c"]


def test_frontier_curve_is_klpolicy_frontier():
    ref, reward = [0.25, 0.25, 0.5], [1.0, 0.5, 0.0]
    betas = np.geomspace(1e-2, 1e2, 50)
    ax = plotting.frontier(ref, reward, betas=betas, best_of_n=None, mark=())
    f = klpolicy.frontier(ref, reward, betas)
    assert len(ax.lines) == 1
    np.testing.assert_array_equal(ax.lines[0].get_xdata(), f.kl)
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), f.expected_reward)


def test_frontier_best_of_n_points_are_exact_and_below_the_curve():
    from klpolicy import best_of_n as bon

    ref, reward = [0.35, 0.3, 0.2, 0.1, 0.05], [0.0, 0.25, 0.5, 0.75, 1.0]
    ns = [1, 2, 4, 8]
    ax = plotting.frontier(ref, reward, best_of_n=ns)
    (points,) = [ln for ln in ax.lines if ln.get_label() == "best-of-n"]
    kl = [float(bon.best_of_n_kl(ref, reward, n)) for n in ns]
    er = [float(bon.best_of_n_expected_reward(ref, reward, n)) for n in ns]
    np.testing.assert_allclose(points.get_xdata(), kl, rtol=1e-12)
    np.testing.assert_allclose(points.get_ydata(), er, rtol=1e-12)
    assert [t.get_text() for t in ax.texts if t.get_text().startswith("$n=")] == [
        "$n=1$",
        "$n=2$",
        "$n=4$",
        "$n=8$",
    ]
    # no policy beats the frontier: E[r] of pi* at best-of-n's KL is at least best-of-n's
    for k, e in zip(kl[1:], er[1:]):
        b = klpolicy.beta_for_kl(ref, reward, k)
        pi = klpolicy.optimal_policy(ref, reward, b)
        assert float(klpolicy.expected_reward(pi, reward)) >= e - 1e-12


def test_frontier_default_grid_is_smooth_and_marks_beta_on_the_curve():
    ref, reward = [0.35, 0.3, 0.2, 0.1, 0.05], [0.0, 0.25, 0.5, 0.75, 1.0]
    ax = plotting.frontier(ref, reward, best_of_n=None)
    curve = ax.lines[0]
    kl = curve.get_xdata()
    # KL-uniform: 301 points from 0 to the greedy KL, evenly spaced
    kmax = float(klpolicy.max_kl(ref, reward))
    np.testing.assert_allclose(np.diff(kl), kmax / 300, rtol=1e-6)
    assert kl[0] == pytest.approx(0.0, abs=1e-12) and kl[-1] == pytest.approx(kmax, rel=1e-9)
    # each marked beta is a point of the curve, labelled with its value
    marks = [t for t in ax.texts if t.get_text().startswith(r"$\beta$=")]
    assert 3 <= len(marks) <= 5
    for t in marks:
        b = float(t.get_text().split("=")[1])
        pi = klpolicy.optimal_policy(ref, reward, b)
        assert t.xy == pytest.approx(
            (float(klpolicy.optimal_kl(ref, reward, b)), float(np.dot(pi, reward))), rel=1e-12
        )
    # mathtext labels with real subscripts
    assert ax.get_ylabel() == r"$\mathbb{E}_\pi[r]$ (reward units)"
    assert r"\pi_{\mathrm{ref}}" in ax.get_xlabel()
    assert ax.get_legend().get_texts()[0].get_text().startswith(r"$\pi^*_\beta$")


@pytest.mark.slow
def test_frontier_labels_stay_inside_the_axes():
    ref, reward = [0.35, 0.3, 0.2, 0.1, 0.05], [0.0, 0.25, 0.5, 0.75, 1.0]
    ax = plotting.frontier(ref, reward, best_of_n=(1, 2, 4, 8, 16, 32))
    fig = ax.figure
    fig.canvas.draw()
    box = ax.get_window_extent()
    for t in ax.texts:
        ext = t.get_window_extent()
        assert box.x0 <= ext.x0 and ext.x1 <= box.x1, t.get_text()
        assert box.y0 <= ext.y0 and ext.y1 <= box.y1, t.get_text()


def test_lecture_style_cycle_tells_35_curves_apart():
    cycle = list(plotting.lecture_style()["axes.prop_cycle"])
    pairs = [(c["color"], str(c["linestyle"])) for c in cycle]
    assert len(pairs) == 35 and len(set(pairs)) == 35


def test_lecture_style_text_is_at_least_14_points():
    style = plotting.lecture_style()
    for key in ("font.size", "axes.titlesize", "axes.labelsize", "xtick.labelsize",
                "ytick.labelsize", "legend.fontsize"):  # fmt: skip
        assert style[key] >= 14, key
    for draw in (
        plotting.beta_sweep,
        lambda: plotting.frontier([0.35, 0.3, 0.2, 0.1, 0.05], [0.0, 0.25, 0.5, 0.75, 1.0]),
    ):
        ax = draw()
        texts = [*ax.texts, *ax.get_legend().get_texts(), ax.title, ax.xaxis.label]
        texts += list(ax.get_xticklabels()) + list(ax.get_yticklabels())
        assert min(t.get_fontsize() for t in texts) >= 14
        plt.close(ax.figure)


@pytest.mark.slow
def test_demo_overoptimization_figure_fits_and_is_not_squeezed(tmp_path):
    from klpolicy.app import demo

    o = demo.overoptimization_problem()
    c, fit = o["curve"], o["fit"]
    gao = c.d * (fit.a - fit.b * np.log(c.d))
    span = np.ptp(c.gold_gain)
    # Gao et al.'s form follows the exact gold curve within 6 % of its range everywhere
    assert np.abs(gao - c.gold_gain).max() < 0.06 * span
    # the gold reward rises, peaks and falls below its start
    assert c.gold_gain.argmax() not in (0, c.d.size - 1) and c.gold_gain[-1] < 0
    # the beta grid is uniform in d
    np.testing.assert_allclose(np.diff(c.d), np.diff(c.d)[0], rtol=1e-6)
    # drawn: the proxy has a panel of its own below (no twin axes whose crossing means
    # nothing), so the gold curve fills most of its panel, and both share the d axis
    ax = plt.figure().add_subplot()
    demo.FIGURES["overoptimization"][0](ax)
    lo, hi = ax.get_ylim()
    assert span / (hi - lo) > 0.8
    assert not hasattr(ax, "right_ax")
    np.testing.assert_array_equal(ax.proxy_ax.lines[0].get_ydata(), o["proxy_gain"])
    assert ax.proxy_ax.get_position().y1 < ax.get_position().y0  # below, not on top
    assert ax.proxy_ax.get_shared_x_axes().joined(ax, ax.proxy_ax)
    assert "reward units" in ax.get_ylabel() and "reward units" in ax.proxy_ax.get_ylabel()
    names = [p.name for p in demo.write_figures(tmp_path, ["overoptimization"])]
    assert names == ["overoptimization.png"]


def test_kl_budget_lines_and_fits():
    d = np.linspace(0, 3, 7)
    gold, proxy = d * (1 - 0.3 * d), d

    def fit(x):
        return 0.5 * x

    ax = plotting.kl_budget(d, gold, proxy, fits={"half": fit}, label="toy")
    assert [ln.get_label() for ln in ax.lines] == ["toy gold reward", "toy proxy reward", "half"]
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), gold)
    np.testing.assert_array_equal(ax.lines[1].get_ydata(), proxy)
    xs = ax.lines[2].get_xdata()
    np.testing.assert_allclose(ax.lines[2].get_ydata(), 0.5 * xs)
    assert xs[0] == pytest.approx(1e-6) and xs[-1] == 3.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (([0, 1, 2], [0, 1]), "`gold` must have the shape of `d`; got (2,) and (3,)"),
        (([0, 1], [0, 1], [0, 1, 2]), "`proxy` must have the shape of `d`; got (3,) and (2,)"),
    ],
)
def test_kl_budget_bad_shapes(args, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plotting.kl_budget(*args)


def test_token_kl_bar_chart_and_heatmap():
    kl = [0.5, 0.1, 0.05, 0.02]
    ax = plotting.token_kl(kl)
    assert [p.get_height() for p in ax.patches] == kl
    assert ax.get_title() == "Where the KL sits (total 0.67 nats)"
    batch = np.arange(6.0).reshape(2, 3) / 10
    ax = plotting.token_kl(batch)
    np.testing.assert_array_equal(ax.images[0].get_array(), batch)
    assert ax.get_ylabel() == "sequence (batch row)"
    with pytest.raises(
        ValueError, match=re.escape("`kl` must have shape (T,) or (B, T); got shape (1, 1, 2)")
    ):
        plotting.token_kl(np.zeros((1, 1, 2)))


def test_controller_trace_draws_kl_beta_and_target():
    from klpolicy.control import AdaptiveKLController, simulate

    ref, r = [0.5, 0.3, 0.2], [1.0, 0.0, 0.5]
    tr = simulate(AdaptiveKLController(1.0, target=0.1, horizon=4), ref, r, steps=50)
    ax = plotting.controller_trace(tr)
    np.testing.assert_array_equal(ax.lines[0].get_ydata(), tr.kl)
    assert list(ax.lines[1].get_ydata()) == [0.1, 0.1]  # the target, from trace.target
    np.testing.assert_array_equal(ax.right_ax.lines[0].get_ydata(), tr.beta)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["KL", "target", r"$\beta$"]


@pytest.mark.parametrize(
    ("trace", "message"),
    [
        (object(), "`trace` must have `.kl` and `.beta` arrays; got object"),
        (
            SimpleNamespace(kl=[1.0, 2.0], beta=[1.0]),
            "`trace.kl` and `trace.beta` must have one shape; got (2,) and (1,)",
        ),
    ],
)
def test_controller_trace_bad_trace(trace, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plotting.controller_trace(trace)


def test_estimator_histograms_true_kl_line():
    p, q = [0.6, 0.3, 0.1], [0.3, 0.3, 0.4]
    ax = plotting.estimator_histograms(p, q, n=500, rng=1)
    assert float(ax.lines[-1].get_xdata()[0]) == pytest.approx(
        float(klpolicy.kl_divergence(p, q)), rel=1e-15
    )
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert [lab.split()[0] for lab in labels] == ["$k_1$", "$k_2$", "$k_3$", "true"]


def test_fixed_points_exact_curve_and_k1_in_reward_coincide():
    ref, r = [0.5, 0.3, 0.2], [1.0, 0.0, 0.5]
    betas = [0.5, 1.0, 2.0]
    ax = plotting.fixed_points(ref, r, betas=betas)
    exact = klpolicy.frontier(ref, r, betas).expected_reward
    np.testing.assert_allclose(ax.lines[0].get_ydata(), exact, rtol=1e-15)
    # k1 in the reward converges to pi*_beta
    np.testing.assert_allclose(ax.lines[1].get_ydata(), exact, rtol=1e-9)


def test_own_axes_get_the_lecture_style_and_given_axes_keep_theirs():
    ax = plotting.beta_sweep()
    assert ax.title.get_fontsize() == 16
    assert ax.xaxis.label.get_fontsize() == 16
    with matplotlib.rc_context({"axes.titlesize": 9, "axes.labelsize": 8}):
        _, mine = plt.subplots()
        out = plotting.beta_sweep(ax=mine)
    assert out is mine
    assert mine.title.get_fontsize() == 9 and mine.xaxis.label.get_fontsize() == 8


def test_okabe_ito_palette():
    assert plotting.OKABE_ITO[0] == "#000000" and len(plotting.OKABE_ITO) == 8


# --------------------------------------------------------------------------- demo


@pytest.mark.slow
def test_write_figures_writes_pngs(tmp_path):
    from klpolicy.app import demo

    names = demo.available_figures()
    assert names[:4] == ["beta_sweep", "frontier", "token_kl", "controller_trace"]
    paths = demo.write_figures(tmp_path / "figs")
    assert [p.name for p in paths] == [f"{n}.png" for n in names]
    for p in paths:
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plt.get_fignums() == []  # every figure closed


def test_write_figures_unknown_name(tmp_path):
    from klpolicy.app import demo

    with pytest.raises(
        ValueError, match=re.escape("unknown figure 'nope'; choose from beta_sweep")
    ):
        demo.write_figures(tmp_path, ["nope"])


def test_demo_token_problem_concentrates_kl_at_the_ends():
    from klpolicy.app import demo
    from klpolicy.sequences import per_token_kl

    policy, ref = demo.token_problem()
    kl = per_token_kl(policy, ref)
    # the reward acts on the first two tokens and the last one
    assert kl[0] > kl[2] and kl[-1] > kl[2]
    # chain rule: per-token KLs sum to the KL of the joint
    from klpolicy.sequences import joint

    total = klpolicy.kl_divergence(joint(policy).ravel(), joint(ref).ravel())
    assert float(kl.sum()) == pytest.approx(float(total), rel=1e-12)


def test_interactive_mode_switched_on_while_drawing_survives(monkeypatch):
    """Jupyter's inline backend turns interactive mode on when it loads with the first figure;
    the lecture style's context must not turn it off again (later figures would not show)."""
    real_subplots = plt.subplots

    def loading_backend(*args, **kwargs):
        matplotlib.interactive(True)
        return real_subplots(*args, **kwargs)

    was = matplotlib.is_interactive()
    try:
        matplotlib.interactive(False)
        monkeypatch.setattr(plt, "subplots", loading_backend)
        plotting.token_kl([0.1, 0.2])
        assert matplotlib.is_interactive()
    finally:
        matplotlib.interactive(was)


# --------------------------------------------------------------------------- lecture hall


@pytest.mark.slow
def test_animation_sweeps_beta_from_the_reference_to_greedy(tmp_path):
    from PIL import Image

    from klpolicy.plotting import lecture

    ref, reward = np.array([0.5, 0.3, 0.2]), np.array([1.0, 0.0, 0.5])
    betas = lecture._sweep_betas(ref, reward, 9)
    assert betas[0] == np.inf and betas[-1] == 0.0 and betas.size == 9
    kls = np.array([float(klpolicy.optimal_kl(ref, reward, b)) for b in betas])
    # evenly spaced in KL, from 0 to the greedy KL
    np.testing.assert_allclose(
        kls, np.linspace(0, float(klpolicy.max_kl(ref, reward)), 9), atol=1e-9
    )
    gif = plotting.animate_beta_sweep(ref, reward, frames=9, path=tmp_path / "sweep.gif")
    with Image.open(gif) as im:
        assert im.format == "GIF" and im.n_frames == 9
    # the readout states the exact KL and expected reward of the frame's beta
    anim = plotting.animate_beta_sweep(ref, reward, frames=9)
    fig = anim._fig
    anim._func(4)
    (text,) = [t for t in fig.axes[0].texts if "nats" in t.get_text()]
    pi = klpolicy.optimal_policy(ref, reward, betas[4])
    assert f"= {kls[4]:.3f} nats" in text.get_text()
    assert f"= {float(pi @ reward):.3f}" in text.get_text()
    heights = [p.get_height() for p in fig.axes[0].patches[3:]]
    np.testing.assert_allclose(heights, pi, rtol=1e-15)
    # shown as a notebook shows it: every frame rendered into the page, the first and the
    # last held for 1 s (10 more frames each at 10 fps)
    assert anim.to_jshtml().count("data:image/png;base64") == 9 + 2 * 10
    with pytest.raises(ValueError, match=re.escape("`frames` must be an integer >= 3; got 2")):
        plotting.animate_beta_sweep(ref, reward, frames=2)


@pytest.mark.slow
def test_cli_animates_and_writes_svg_and_pdf(tmp_path, capsys):
    import xml.etree.ElementTree as ET

    from PIL import Image

    from klpolicy.app.cli import main

    gif = tmp_path / "sweep.gif"
    problem = ["--ref", "0.5", "0.5", "--reward", "1", "0"]
    assert main(["plot", "beta-sweep", *problem, "--animate", str(gif), "--frames", "7"]) == 0
    with Image.open(gif) as im:
        assert im.n_frames == 7
    svg = tmp_path / "frontier.svg"
    assert main(["plot", "frontier", *problem, "-o", str(svg)]) == 0
    root = ET.parse(svg).getroot()
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    # --format wins over a missing suffix
    pdf = tmp_path / "sweep_slide"
    assert main(["plot", "beta-sweep", *problem, "-o", str(pdf), "--format", "pdf"]) == 0
    assert pdf.read_bytes()[:5] == b"%PDF-"
    png_too = tmp_path / "both.png"
    gif2 = tmp_path / "both.gif"
    argv = ["plot", "beta-sweep", *problem, "--animate", str(gif2), "-o", str(png_too)]
    assert main([*argv, "--frames", "4"]) == 0
    assert png_too.read_bytes()[:4] == b"\x89PNG" and gif2.exists()
    capsys.readouterr()
    assert main(["plot", "beta-sweep", *problem, "--animate", str(tmp_path / "x.png")]) == 2
    assert "`--animate` writes a GIF; got" in capsys.readouterr().err
    assert main(["plot", "beta-sweep", *problem]) == 2
    assert "needs `-o FILE` (or `--animate FILE.gif`)" in capsys.readouterr().err


def test_explore_is_a_slider_with_ipywidgets():
    pytest.importorskip("ipywidgets")
    ref, reward = [0.5, 0.3, 0.2], [1.0, 0.0, 0.5]
    w = plotting.explore(ref, reward, beta=0.5)
    assert type(w).__name__ == "VBox"
    for beta in (0.5, 2.0, 0.1):
        w.slider.value = beta
        b = float(w.slider.value)
        kl = float(klpolicy.optimal_kl(ref, reward, b))
        assert f"KL = {kl:.4f} nats" in w.readout.value
        bars = w.figure.axes[0].patches[3:]
        np.testing.assert_allclose(
            [p.get_height() for p in bars], klpolicy.optimal_policy(ref, reward, b), rtol=1e-15
        )


def test_explore_without_ipywidgets_is_a_static_figure(monkeypatch):
    import matplotlib.figure

    monkeypatch.setitem(sys.modules, "ipywidgets", None)  # import ipywidgets -> ImportError
    with pytest.warns(UserWarning, match="ipywidgets is not installed"):
        fig = plotting.explore([0.5, 0.3, 0.2], [1.0, 0.0, 0.5])
    assert isinstance(fig, matplotlib.figure.Figure)
    assert len(fig.axes) == 6
    # first panel the reference, last the greedy policy
    first = [p.get_height() for p in fig.axes[0].patches[3:]]
    last = [p.get_height() for p in fig.axes[-1].patches[3:]]
    np.testing.assert_allclose(first, [0.5, 0.3, 0.2], rtol=1e-15)
    np.testing.assert_array_equal(last, [1.0, 0.0, 0.0])


def test_demo_and_plotting_figures_have_a_legend_per_panel_and_math_labels():
    from klpolicy.app import demo

    from .._figure_rules import figure_problems

    problems, checked = [], 0
    for name in demo.available_figures():
        with matplotlib.rc_context(plotting.lecture_style()):
            ax = plt.figure().add_subplot()
            demo.FIGURES[name][0](ax)
        problems += figure_problems(ax.figure, f"demo {name}")
        checked += 1
    trace = SimpleNamespace(kl=[0.3, 0.2, 0.1], beta=[1.0, 1.5, 2.0])
    for name, draw in {
        "beta_sweep": lambda: plotting.beta_sweep([0.5, 0.5], [1.0, 0.0]),
        "frontier": lambda: plotting.frontier([0.4, 0.35, 0.25], [0.0, 0.5, 1.0], best_of_n=[1, 2]),
        "kl_budget": lambda: plotting.kl_budget([0.1, 0.5, 1.0], [0.1, 0.3, 0.2], [0.1, 0.4, 0.9]),
        "token_kl": lambda: plotting.token_kl([[0.1, 0.2], [0.3, 0.0]]),
        "controller_trace": lambda: plotting.controller_trace(trace, target=0.1),
        "estimator_histograms": lambda: plotting.estimator_histograms([0.6, 0.4], [0.3, 0.7], n=50),
        "fixed_points": lambda: plotting.fixed_points([0.5, 0.5], [1.0, 0.0], betas=[0.5, 1.0]),
    }.items():
        problems += figure_problems(draw().figure, name)
        checked += 1
    assert checked == len(demo.available_figures()) + 7
    assert problems == []


def test_estimator_histograms_refuses_an_unknown_estimator_by_name():
    with pytest.raises(ValueError, match=r"`estimators` must be one of 'k1', .*; got 'k4'"):
        plotting.estimator_histograms([0.2, 0.3, 0.5], [0.4, 0.4, 0.2], estimators=("k1", "k4"))
    ax = plotting.estimator_histograms([0.2, 0.3, 0.5], [0.4, 0.4, 0.2], estimators="k3", n=200)
    assert [t.get_text().split()[0] for t in ax.get_legend().get_texts()] == ["$k_3$", "true"]


def test_landing_points_draws_each_rule_where_dynamics_says_it_lands():
    from klpolicy.dynamics import landing_point

    ref, r, betas = [0.5, 0.3, 0.2], [1.0, 0.0, 0.5], [0.5, 1.0]
    ax = plotting.landing_points(ref, r, betas=betas)
    lines = {line.get_label(): line for line in ax.get_lines()}
    grpo = lines["GRPO, G=2, no std"]
    want = [
        landing_point("grpo", ref, r, b, num_generations=2, scale_rewards="none") for b in betas
    ]
    np.testing.assert_allclose(grpo.get_xdata(), [w.kl for w in want], rtol=1e-12)
    # GRPO with G = 2 and no std lands where pi* of twice the configured beta is
    star = klpolicy.frontier(ref, r, [2 * b for b in betas])
    np.testing.assert_allclose(grpo.get_ydata(), star.expected_reward, rtol=1e-12)
    rloo = lines["RLOO, G=2"]
    np.testing.assert_allclose(rloo.get_ydata(), klpolicy.frontier(ref, r, betas).expected_reward)


def test_training_path_draws_the_trajectory_and_refuses_other_objects():
    from klpolicy.dynamics import trajectory

    tr = trajectory("rloo", [0.5, 0.5], [1.0, 0.0], 0.5, steps=10, lr=1.0)
    ax = plotting.training_path(tr)
    np.testing.assert_array_equal(ax.get_lines()[0].get_ydata(), tr.kl_to_ref)
    with pytest.raises(ValueError, match=r"`path` must be a klpolicy\.dynamics\.Trajectory"):
        plotting.training_path([1, 2, 3])


def test_soft_best_of_n_figure_holds_the_exact_curves():
    from klpolicy.best_of_n import soft_best_of_n_frontier

    rng = np.random.default_rng(2)
    ref = rng.dirichlet(np.ones(12))
    reward = rng.normal(size=12)
    lams = [0.0, 0.1, 0.3, 1.0, 3.0, np.inf]
    ax = plotting.soft_best_of_n(ref, reward, 8, lams=lams)
    opt, soft, hard = ax.lines
    f = soft_best_of_n_frontier(ref, reward, 8, lams)
    order = np.argsort(f.kl)
    np.testing.assert_array_equal(soft.get_xdata(), f.kl[order])
    np.testing.assert_array_equal(soft.get_ydata(), f.expected_reward[order])
    np.testing.assert_array_equal(hard.get_xdata(), f.best_of_n.kl)
    # the tilt's curve is klpolicy.frontier and lies above both
    np.testing.assert_allclose(
        opt.get_ydata(),
        klpolicy.frontier(
            ref, reward, klpolicy.beta_for_kl(ref, reward, opt.get_xdata())
        ).expected_reward,
        rtol=1e-10,
    )
    assert (f.expected_reward <= f.optimal_expected_reward + 1e-12).all()
    assert opt.get_xdata().max() >= f.kl.max()  # the tilt's curve spans the soft one
    assert [t.get_text() for t in ax.texts] == ["$n=1$", "$n=2$", "$n=4$", "$n=8$"]
    assert ax.get_xlim()[0] == 0.0
    with pytest.raises(ValueError, match="`ref` must be one"):
        plotting.soft_best_of_n([[0.5, 0.5]], [1.0, 0.0])


def test_nash_md_trajectory_draws_the_path_the_equilibrium_and_the_limit():
    from klpolicy.preference import nash_equilibrium, nash_md_path, nash_md_rate

    from .._figure_rules import figure_problems

    rps = np.array([[0.5, 1.0, 0.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.5]])
    mu = [0.5, 0.3, 0.2]
    ax = plotting.nash_md_trajectory(rps, 0.5, 0.8, mu=mu, init=[0.8, 0.1, 0.1], steps=30)
    lines = {line.get_label(): line for line in ax.get_lines()}
    corners = np.array([[0.0, 0.0], [1.0, 0.0], [0.5, np.sqrt(3) / 2]])
    path = nash_md_path(rps, 0.5, 0.8, 30, mu=mu, init=[0.8, 0.1, 0.1])
    drawn = np.column_stack(
        [lines["Nash-MD, $\\eta$ = 0.8"].get_xdata(), lines["Nash-MD, $\\eta$ = 0.8"].get_ydata()]
    )
    np.testing.assert_allclose(drawn, path @ corners, rtol=1e-14)
    star = lines[r"equilibrium $\pi^*_\tau$"]
    want = nash_equilibrium(rps, 0.5, mu=mu).policy @ corners
    np.testing.assert_allclose([star.get_xdata()[0], star.get_ydata()[0]], want, rtol=1e-14)
    lim = lines[r"Nash-MD's limit $\pi_\eta$"]
    rate = nash_md_rate(rps, 0.5, 0.8, mu=mu)
    np.testing.assert_allclose([lim.get_xdata()[0], lim.get_ydata()[0]], rate.fixed_point @ corners)
    assert f"{rate.rate:.4f}" in ax.get_title()
    assert figure_problems(ax.figure) == []
    with pytest.raises(ValueError, match=r"`preferences` must be a game of 3 outcomes"):
        plotting.nash_md_trajectory([[0.5, 0.6], [0.4, 0.5]], 0.5, 0.5)
    with pytest.raises(ValueError, match=r"`labels` must be three names"):
        plotting.nash_md_trajectory(rps, 0.5, 0.5, labels=("a", "b"))
