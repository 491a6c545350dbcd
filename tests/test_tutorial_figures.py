"""Every figure of every tutorial is fit for a slide: a legend in every panel that shows more
than one labelled series, one colour per labelled series of a panel, axis labels and a title,
markers a projector shows, and maths written as mathtext (see tests/_figure_rules.py).

The tutorials' code cells run here in order, as the notebook would run them (without the
folded exercise solutions, which tests/test_exercises.py runs), with matplotlib's Agg
backend; after each cell every open figure is checked and closed.
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

matplotlib = pytest.importorskip("matplotlib")
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from ._figure_rules import figure_problems, plain_math  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.md"))
CELL = re.compile(r"```\{code-cell\} ipython3\n(.*?)```", re.S)


def _run_and_check(path: Path) -> tuple[int, list[str]]:
    """Run the tutorial's cells; return how many figures were drawn and the problems found."""
    cells = CELL.findall(path.read_text(encoding="utf-8"))
    namespace: dict = {"__name__": "__main__"}
    n_figures, problems = 0, []
    with matplotlib.rc_context(), contextlib.redirect_stdout(io.StringIO()):
        for i, code in enumerate(cells, start=1):
            exec(compile(code, f"{path.name}: cell {i}", "exec"), namespace)
            for num in plt.get_fignums():
                n_figures += 1
                problems += figure_problems(plt.figure(num), f"{path.name} cell {i}")
            plt.close("all")
    return n_figures, problems


@pytest.mark.slow
@pytest.mark.parametrize("path", TUTORIALS, ids=[p.stem for p in TUTORIALS])
def test_tutorial_figures_have_a_legend_per_panel_and_math_labels(path, monkeypatch, tmp_path):
    text = path.read_text(encoding="utf-8")
    if re.search(r"^import torch\b", text, re.M):
        pytest.importorskip("torch")
    monkeypatch.setattr(plt, "show", lambda *args, **kwargs: None)
    monkeypatch.chdir(tmp_path)
    n_figures, problems = _run_and_check(path)
    # the check saw the figures the page shows (no figure at all would pass vacuously)
    drawn = len(re.findall(r"\bplt\.(?:subplots|figure)\(|\bplotting\.\w+\(", text))
    assert n_figures >= min(drawn, 1), f"{path.name}: drew {n_figures} figures"
    assert problems == []


def test_the_figure_rules_catch_a_missing_legend_and_plain_maths():
    fig, axes = plt.subplots(1, 2)
    for ax in axes:
        ax.plot([0, 1], label="pi_ref")
        ax.plot([1, 0], label=r"$\pi^*_\beta$")
    problems = figure_problems(fig)
    assert len([p for p in problems if "without a legend" in p]) == 2
    # one figure-wide legend that names the series of both panels serves both
    shared = fig.legend(*axes[0].get_legend_handles_labels())
    assert [p for p in figure_problems(fig) if "legend" in p and "plain" not in p] == []
    shared.remove()
    axes[0].legend()
    axes[1].legend(handles=axes[1].lines[:1])  # a legend that leaves a series out
    problems = figure_problems(fig)
    assert [p for p in problems if "legend" in p and "plain" not in p] == [
        "figure: panel 'panel 2''s legend misses {'$\\\\pi^*_\\\\beta$'}"
    ]
    assert sum("'pi' written as plain text" in p for p in problems) == 2
    plt.close(fig)


def test_the_figure_rules_catch_two_series_of_one_colour():
    fig, axes = plt.subplots(1, 3)
    # tutorial 8's old trainer figure: the same colour, told apart only by the dash pattern
    axes[0].plot([0, 1], color="C2", label="$k_2$ in the loss")
    axes[0].plot([1, 0], color="C2", ls="--", label="trust region")
    axes[1].scatter([0], [1], color="#0072B2", label="best of $n$")
    axes[1].bar([1], [1], color="#0072B2", label="closed form")
    axes[2].plot([0, 1], color="C0", label="one")
    axes[2].plot([1, 0], color="C1", label="two")
    axes[2].plot([1, 1], color="C0")  # unlabelled: a guide line may repeat a colour
    for ax in axes:
        ax.legend()
    problems = [p for p in figure_problems(fig) if "one colour" in p]
    assert problems == [
        "figure: panel 'panel 1' draws '$k_2$ in the loss' and 'trust region' in one colour",
        "figure: panel 'panel 2' draws 'best of $n$' and 'closed form' in one colour",
    ]
    plt.close(fig)


def test_the_figure_rules_ask_for_labels_titles_and_visible_markers():
    fig, axes = plt.subplots(1, 3, sharey=True)
    axes[0].plot([0, 1], "o", ms=3, label="best of $n$")
    axes[0].set(xlabel="KL (nats)", ylabel="reward", title="left")
    axes[1].plot([0, 1])  # shares the y label of the first panel; lacks x label and title
    axes[2].plot([0, 1])
    axes[2].set(xlabel="update", title="right")
    assert figure_problems(fig) == [
        "figure: panel 'left': markers of 'best of $n$' are 3.0 pt",
        "figure: panel 'panel 2' has no x label",
        "figure: panel 'panel 2' has no title",
    ]
    fig.suptitle("a figure title serves every panel")
    axes[0].lines[0].set_markersize(8)
    axes[1].set_xlabel("update")
    assert figure_problems(fig) == []
    blank = plt.figure()
    blank.add_subplot().set_axis_off()  # a diagram drawn on a blank canvas needs no axes
    assert figure_problems(blank) == []
    plt.close("all")


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("ref(a_2 | prefix) fixed", "a_2"),
        ("fixed (beta=1)", "beta"),
        ("Lagrangian 0.5/kappa", "kappa"),
        ("k1 in the reward", "k1"),
        ("β", "β"),
        (r"$\pi_{\mathrm{ref}}(a_2\mid\mathrm{prefix})$ fixed", None),
        (r"exact $\beta^*$ (`beta_for_kl`)", None),
        ("dead zone (RLlib), exo_pair, rare outcomes, alphabet, beta-sweep's", "beta"),
        ("dead zone (RLlib), exo_pair, rare outcomes, alphabet", None),
    ],
)
def test_plain_math_finds_maths_outside_mathtext(text, found):
    assert plain_math(text) == found


@pytest.mark.parametrize("stem", ["15"])
def test_the_lecture_style_does_not_hide_later_figures(stem):
    # leaving a matplotlib.rc_context turns interactive mode off again when the first figure
    # switched it on (Jupyter's inline backend): the notebook's later figures never display.
    # These tutorials set the style once for the notebook instead.
    (path,) = (ROOT / "tutorials").glob(f"{stem}_*.md")
    code = "\n".join(CELL.findall(path.read_text(encoding="utf-8")))
    assert "rc_context(" not in code
    assert "plt.rcParams.update(lecture_style())" in code
