"""Per-action figures at any size a user can type, and the files they are written to.

The numbers drawn are checked against :func:`klpolicy.optimal_policy` (itself tested
against mpmath); the summaries of the non-highlighted actions against numpy reductions
of the same probabilities.
"""

from __future__ import annotations

import re
import sys
import warnings

import numpy as np
import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.colors as mcolors  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402

import klpolicy  # noqa: E402
from klpolicy import plotting  # noqa: E402


def _problem(v: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return rng.dirichlet(np.ones(v)), rng.standard_normal(v)


def _labelled_colours(ax):
    """(label, colour) of every labelled series of ``ax`` (lines and filled areas)."""
    out = []
    for art in [*ax.lines, *ax.collections, *ax.patches]:
        label = art.get_label()
        if not label or label.startswith("_"):
            continue
        c = art.get_color() if hasattr(art, "get_color") else art.get_facecolor()
        c = np.atleast_2d(mcolors.to_rgba_array(c))[0][:3]
        out.append((label, tuple(np.round(c, 3))))
    return out


# --------------------------------------------------------------------- which actions


def test_highlighted_actions_best_mode_then_next_best():
    ref = [0.1, 0.6, 0.1, 0.1, 0.1]
    reward = [0.0, 0.1, 0.9, 0.3, 0.2]
    assert plotting.highlighted_actions(ref, reward, top=3).tolist() == [2, 3, 1]
    assert plotting.highlighted_actions(ref, reward, top=1).tolist() == [2]
    # up to MAX_SERIES actions: all of them, in decreasing order of reward
    assert plotting.highlighted_actions(ref, reward).tolist() == [2, 3, 4, 1, 0]
    # ties in reward: the likelier under ref first; off the support never "best"
    assert plotting.highlighted_actions([0.0, 0.3, 0.7], [5.0, 1.0, 1.0], top=2).tolist() == [2, 1]
    # permuting the outcomes permutes the answer
    perm = np.array([4, 0, 3, 1, 2])
    got = plotting.highlighted_actions(np.take(ref, perm), np.take(reward, perm), top=3)
    assert perm[got].tolist() == [2, 3, 1]


@pytest.mark.parametrize(
    ("top", "message"),
    [
        (0, "`top` must be an integer >= 1"),
        (7, "`top` must be at most 6, the series one axes tells apart by colour; got 7"),
        (2.5, "`top`"),
    ],
)
def test_highlighted_actions_refuses_a_bad_top(top, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plotting.highlighted_actions([0.5, 0.5], [1.0, 0.0], top=top)


# --------------------------------------------------------------------- beta sweep at scale


def test_beta_sweep_at_1e5_actions_draws_a_few_and_summarises_the_rest():
    ref, reward = _problem(100_000)
    betas = np.geomspace(0.05, 20.0, 12)
    ax = plotting.beta_sweep(ref, reward, betas=betas, mark=[1.0])
    idx = plotting.highlighted_actions(ref, reward)
    assert idx.size == 4 and idx[0] == np.argmax(reward) and np.argmax(ref) in idx
    pi = klpolicy.optimal_policy(ref, reward, betas[:, None])
    labelled = [ln for ln in ax.lines if not ln.get_label().startswith("_")]
    # four actions, then the others' total; one band of the others' single probabilities
    assert len(labelled) == 5 and len(ax.collections) == 1
    for ln, i in zip(labelled[:4], idx):
        np.testing.assert_allclose(ln.get_ydata(), pi[:, i], rtol=1e-12)
        assert ln.get_label().startswith(f"$y={i}$")
    rest = np.delete(pi, idx, axis=1)
    np.testing.assert_allclose(labelled[4].get_ydata(), rest.sum(axis=1), rtol=1e-12)
    assert labelled[4].get_label() == "99,996 others: total"
    band = ax.collections[0].get_paths()[0].vertices
    np.testing.assert_allclose(band[1 : betas.size + 1, 1], rest.min(axis=1), rtol=1e-12)
    np.testing.assert_allclose(band[betas.size + 2 : -1, 1][::-1], rest.max(axis=1), rtol=1e-12)
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert len(legend) == 6 and "(r=" not in legend[0] and "best" in legend[0]
    # the mark follows the best action
    (mark,) = [
        ln for ln in ax.lines if ln.get_label().startswith("_") and ln.get_marker() != "None"
    ]
    best = int(idx[0])
    assert float(mark.get_ydata()[0]) == pytest.approx(
        float(klpolicy.optimal_policy(ref, reward, 1.0)[best]), rel=1e-12
    )


def test_beta_sweep_eight_actions_one_colour_per_series_and_marks_apart():
    ref, reward = _problem(8, seed=3)
    ax = plotting.beta_sweep(ref, reward, betas=np.geomspace(0.01, 100, 50), mark=[0.5, 0.6])
    series = _labelled_colours(ax)
    colours = [c for _, c in series]
    assert len(series) == 6 and len(set(colours)) == len(colours), series
    # the legend sits below the axes, where it covers no curve
    fig = ax.figure
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    legend_box = ax.get_legend().get_window_extent(r)
    assert legend_box.y1 <= ax.get_window_extent(r).y0
    # the two mark labels do not overlap
    marks = [t for t in ax.texts if "at $\\beta$" in t.get_text()]
    a, b = (t.get_window_extent(r) for t in marks)
    assert not a.overlaps(b)
    # and they name the best action, not action 0
    best = int(np.argmax(reward))
    assert all(f"($y={best}$)" in t.get_text() for t in marks)


def test_beta_sweep_up_to_six_actions_draws_every_one():
    ref, reward = _problem(6)
    betas = np.geomspace(0.1, 10, 7)
    ax = plotting.beta_sweep(ref, reward, betas=betas, mark=())
    pi = klpolicy.optimal_policy(ref, reward, betas[:, None])
    assert len(ax.lines) == 6 and not ax.collections
    for ln, i in zip(ax.lines, range(6)):  # all of them, in their own order
        np.testing.assert_allclose(ln.get_ydata(), pi[:, i], rtol=1e-14)


def test_beta_sweep_float32_and_a_two_action_worked_example_unchanged():
    ax = plotting.beta_sweep(
        np.float32([0.5, 0.5]), np.float32([1.0, 0.0]), betas=[0.5, 2.0], mark=()
    )
    np.testing.assert_allclose(
        ax.lines[0].get_ydata(), [np.e**2 / (np.e**2 + 1), np.e**0.5 / (np.e**0.5 + 1)], 1e-6
    )


# --------------------------------------------------------------------- bars at scale


def test_animation_and_explore_bars_summarise_past_12_responses(monkeypatch):
    from klpolicy.plotting import lecture

    ref, reward = _problem(2000)
    anim = plotting.animate_beta_sweep(ref, reward, frames=5)
    bars_ax = anim._fig.axes[0]
    anim._func(2)
    beta = lecture._sweep_betas(ref, reward, 5)[2]
    pi = klpolicy.optimal_policy(ref, reward, beta)
    idx = plotting.highlighted_actions(ref, reward, 4)
    heights = [p.get_height() for p in bars_ax.patches[5:]]
    np.testing.assert_allclose(heights[:4], pi[idx], rtol=1e-12)
    assert heights[4] == pytest.approx(1.0 - pi[idx].sum(), rel=1e-12)
    assert [t.get_text() for t in bars_ax.get_xticklabels()][-1] == "1,996\nothers"
    _render_and_close(anim)
    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    with pytest.warns(UserWarning, match="ipywidgets is not installed"):
        fig = plotting.explore(ref, reward)
    assert len(fig.axes) == 6 and len(fig.axes[0].patches) == 10


# --------------------------------------------------------------------- the animation


def _render_and_close(anim):
    """Draw the animation's figure once (its first frame starts, as on a screen) and close
    it: an animation collected unrendered makes matplotlib warn in whichever test runs then."""
    anim._fig.canvas.draw()
    plt.close(anim._fig)


def test_animation_holds_its_ends_and_shows_a_kl_timeline(tmp_path):
    from PIL import Image

    ref, reward = np.array([0.5, 0.3, 0.2]), np.array([1.0, 0.0, 0.5])
    gif = plotting.animate_beta_sweep(
        ref, reward, frames=4, fps=5.0, hold=1.5, dpi=20, path=tmp_path / "a.gif"
    )
    with Image.open(gif) as im:
        durations = []
        for i in range(im.n_frames):
            im.seek(i)
            durations.append(im.info["duration"])
    # 200 ms a frame; the reference and the greedy frames 1.5 s longer
    assert durations == [1700, 200, 200, 1700]
    anim = plotting.animate_beta_sweep(ref, reward, frames=4, fps=5.0, hold=1.5)
    timeline = anim._fig.axes[1]
    assert "frames evenly spaced in KL" in timeline.get_xlabel()
    kmax = float(klpolicy.max_kl(ref, reward))
    ticks = timeline.get_xticks()
    assert ticks[0] == 0.0 and ticks[-1] == pytest.approx(kmax, rel=1e-12)
    names = [t.get_text() for t in timeline.get_xticklabels()]
    assert names[0] == r"$\beta=\infty$" and names[-1] == "0"
    for tick, name in zip(ticks[1:-1], names[1:-1]):  # a round beta at the KL it spends
        assert float(klpolicy.optimal_kl(ref, reward, float(name))) == pytest.approx(tick)
    (cursor,) = timeline.lines[1:]
    anim._func(3)
    assert float(cursor.get_xdata()[0]) == pytest.approx(kmax, rel=1e-12)
    with pytest.raises(ValueError, match=re.escape("`hold` must be")):
        plotting.animate_beta_sweep(ref, reward, hold=-1.0)
    _render_and_close(anim)


def test_static_explore_fits_a_16_9_slide(monkeypatch):
    monkeypatch.setitem(sys.modules, "ipywidgets", None)
    with pytest.warns(UserWarning, match=r"pip install 'klpolicy\[widgets\]'"):
        fig = plotting.explore([0.5, 0.3, 0.2], [1.0, 0.0, 0.5])
    w, h = fig.get_size_inches()
    assert w <= 13.34 and h <= 7.5 and w / h == pytest.approx(16 / 9, rel=0.01)
    first = [p.get_height() for p in fig.axes[0].patches[3:]]
    last = [p.get_height() for p in fig.axes[-1].patches[3:]]
    np.testing.assert_allclose(first, [0.5, 0.3, 0.2], rtol=1e-15)
    np.testing.assert_array_equal(last, [1.0, 0.0, 0.0])


# --------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: plotting.beta_sweep([[0.5, 0.5], [0.5, 0.5]], [1.0, 0.0]), "`ref` must be one"),
        (lambda: plotting.beta_sweep([0.5, 0.5], [[1.0, 0.0]] * 2), "`reward` must be one"),
        (lambda: plotting.frontier([[0.5, 0.5]], [1.0, 0.0]), "`ref` must be one"),
        (lambda: plotting.frontier([0.5, 0.5], [[1.0, 0.0]]), "`reward` must be one"),
        (lambda: plotting.estimator_histograms([[0.5, 0.5]], [0.5, 0.5]), "`p` must be one"),
        (lambda: plotting.estimator_histograms([0.5, 0.5], [[0.5, 0.5]]), "`q` must be one"),
        (lambda: plotting.estimator_histograms([0.5, 0.5], [0.2, 0.3, 0.5]), "`q` must have"),
        (lambda: plotting.explore([0.5, 0.5], [[1.0, 0.0], [0, 1]]), "`reward` must be one"),
        (lambda: plotting.animate_beta_sweep([0.5, 0.5], [[1.0, 0.0]]), "`reward` must be one"),
        (lambda: plotting.explore([0.5, 0.5], [1.0, 0.0], labels=["a"]), "`labels` must hold"),
        (lambda: plotting.beta_sweep([0.5, 0.5], [1.0, 0.0], labels=["a"]), "`labels` must hold"),
        (lambda: plotting.beta_sweep([0.5, 0.5], [1.0, 0.0], top=0), "`top`"),
        (lambda: plotting.beta_sweep([0.5, 0.5], [1.0, 0.0], mark=[-1.0]), "`mark`"),
    ],
)
def test_bad_input_names_the_argument(call, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        with pytest.raises(ValueError, match=re.escape(message)):
            call()


# --------------------------------------------------------------------- files


def _draw(ax):
    ax.plot([0, 1], [0, 1])


@pytest.mark.parametrize("dpi", [1e-320, 0.5, 1e308, float("nan"), 5000])
def test_save_figure_refuses_a_dpi_by_name(tmp_path, dpi):
    with pytest.raises(ValueError, match=re.escape("`dpi` must be a number in [1, 1200]")):
        plotting.save_figure(_draw, tmp_path / "x.png", dpi=dpi)
    assert not list(tmp_path.iterdir())


def test_save_figure_returns_the_file_it_wrote(tmp_path):
    out = plotting.save_figure(_draw, tmp_path / "x", dpi=20)
    assert out == tmp_path / "x.png" and out.read_bytes()[:4] == b"\x89PNG"
    out = plotting.save_figure(_draw, tmp_path / "slide", format="svg", dpi=20)
    assert out == tmp_path / "slide" and b"<svg" in out.read_bytes()[:400]
    out = plotting.save_figure(_draw, tmp_path / "y.JPG", format="jpeg", dpi=20)
    assert out == tmp_path / "y.JPG" and out.read_bytes()[:2] == b"\xff\xd8"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["slide", "x.png", "y.JPG"]


@pytest.mark.parametrize(
    ("name", "fmt", "message"),
    [
        ("x.png", "svg", "`format` 'svg' does not match the suffix of `path`"),
        ("x.pdf", "png", "`format` 'png' does not match the suffix of `path`"),
        ("x.png", "bmpx", "`format` must be one of"),
        ("x.v2", None, "has the suffix .v2, which names no image format"),
    ],
)
def test_save_figure_refuses_a_format_that_is_not_the_files(tmp_path, name, fmt, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        plotting.save_figure(_draw, tmp_path / name, format=fmt)
    assert not list(tmp_path.iterdir())
