"""The help pages of ``klpolicy plot``: examples that run, and help text for every option."""

from __future__ import annotations

import shlex

import pytest

from klpolicy.app.cli import _PLOT_EXAMPLES, main


def _help(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--help"])
    assert exc.value.code == 0
    return capsys.readouterr().out


def test_plot_help_lists_an_example_of_every_figure(capsys):
    out = _help(capsys, "plot")
    assert "examples:" in out
    for name, args in _PLOT_EXAMPLES.items():
        assert f"  klpolicy plot {name} {args}\n" in out


@pytest.mark.parametrize("figure", sorted(_PLOT_EXAMPLES))
def test_each_figure_help_has_its_example(figure, capsys):
    out = _help(capsys, "plot", figure)
    assert f"examples:\n  klpolicy plot {figure} {_PLOT_EXAMPLES[figure]}\n" in out


@pytest.mark.parametrize(
    ("figure", "option", "text"),
    [
        ("controller-trace", "--controller {adaptive,dead-zone,fixed,lagrangian}", "the rule:"),
        ("controller-trace", "--steps STEPS", "controller updates to simulate (default 100)"),
        ("estimator-histograms", "--n N", "samples drawn from p (default 20000)"),
        ("estimator-histograms", "--seed SEED", "seed of the draws (default 0)"),
    ],
)
def test_plot_options_have_help_and_choices(figure, option, text, capsys):
    out = " ".join(_help(capsys, "plot", figure).split())
    assert f"{option} {text}" in out


@pytest.mark.slow
@pytest.mark.parametrize("figure", sorted(_PLOT_EXAMPLES))
def test_every_plot_example_runs(figure, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    argv = shlex.split(_PLOT_EXAMPLES[figure])
    out = tmp_path / argv[argv.index("-o") + 1]
    argv[argv.index("-o") + 1] = str(out)
    assert main(["plot", figure, *argv]) == 0, capsys.readouterr().err
    assert out.stat().st_size > 1000
