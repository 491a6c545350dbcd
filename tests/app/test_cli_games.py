"""``klpolicy plot nash-md`` and ``klpolicy plot soft-best-of-n``: the inputs reach the figure."""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest

pytest.importorskip("matplotlib")

from klpolicy import plotting
from klpolicy.app.cli import main

PNG = b"\x89PNG\r\n\x1a\n"
RPS = [[0.5, 1.0, 0.0], [0.0, 0.5, 1.0], [1.0, 0.0, 0.5]]


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def spy(monkeypatch):
    """Record what the CLI hands each figure function (and still draw it)."""
    seen = {}

    def wrap(name):
        original = getattr(plotting, name)

        def record(*args, **kwargs):
            seen[name] = (args, kwargs)
            return original(*args, **kwargs)

        monkeypatch.setattr(plotting, name, record)

    wrap("nash_md_trajectory")
    wrap("soft_best_of_n")
    return seen


@pytest.mark.slow
@pytest.mark.parametrize(
    "argv",
    [
        ["nash-md", "--game", "rps", "--init", "0.8", "0.15", "0.05"],
        ["nash-md", "--game", "transitive", "--tau", "0.5", "--eta", "1.5", "--steps", "10"],
        ["nash-md", "--preferences", "0.5 1 0; 0 0.5 1; 1 0 0.5", "--mu", "0.6", "0.3", "0.1"],
        ["soft-best-of-n", "--ref", "0.2", "0.5", "0.3", "--reward", "1", "0.3", "-2"],
        ["soft-best-of-n", "--ref", "0.5", "0.5", "--reward", "1", "0", "--n", "3", "--lam", "0", "0.5", "inf"],
    ],
)  # fmt: skip
def test_plot_writes_a_png(capsys, tmp_path, argv):
    target = tmp_path / "fig.png"
    code, out, err = run(capsys, "plot", *argv, "-o", str(target))
    assert (code, err) == (0, "")
    assert out.strip() == str(target)
    assert target.read_bytes()[:8] == PNG


@pytest.mark.parametrize(
    "rows",
    [
        ["0.5 1 0; 0 0.5 1; 1 0 0.5"],  # one quoted argument, rows split by ;
        ["0.5,1,0;", "0,0.5,1;", "1,0,0.5;"],  # commas, a trailing ;
        ["0.5", "1", "0", "0", "0.5", "1", "1", "0", "0.5"],  # 9 numbers, row by row
    ],
)
def test_nash_md_reads_the_matrix_by_rows(capsys, tmp_path, spy, rows):
    code, _, err = run(
        capsys, "plot", "nash-md", "--preferences", *rows, "--tau", "0.3", "--eta", "1.5",
        "--steps", "7", "--init", "0.7", "0.2", "0.1", "-o", str(tmp_path / "a.png"),
    )  # fmt: skip
    assert (code, err) == (0, "")
    args, kwargs = spy["nash_md_trajectory"]
    np.testing.assert_array_equal(args[0], RPS)
    assert args[1:] == (0.3, 1.5)
    assert kwargs["steps"] == 7 and kwargs["init"] == [0.7, 0.2, 0.1] and kwargs["mu"] is None
    assert tuple(kwargs["labels"]) == ("0", "1", "2")  # not rock/scissors/paper: any game


def test_nash_md_named_games(capsys, tmp_path, spy):
    out = str(tmp_path / "a.png")
    assert run(capsys, "plot", "nash-md", "--game", "rps", "-o", out)[0] == 0
    args, kwargs = spy["nash_md_trajectory"]
    np.testing.assert_array_equal(args[0], RPS)
    assert tuple(kwargs["labels"]) == ("rock", "scissors", "paper")
    assert args[1:] == (0.2, 1.0) and kwargs["steps"] == 60  # the defaults in -h
    labels = ["--labels", "a", "b", "c"]
    assert run(capsys, "plot", "nash-md", "--game", "transitive", *labels, "-o", out)[0] == 0
    args, kwargs = spy["nash_md_trajectory"]
    # Bradley-Terry of the rewards 1, 0, -1: P[i, j] = 1 / (1 + exp(r_j - r_i))
    r = np.array([1.0, 0.0, -1.0])
    np.testing.assert_allclose(args[0], 1 / (1 + np.exp(r[None, :] - r[:, None])), rtol=1e-15)
    assert tuple(kwargs["labels"]) == ("a", "b", "c")


def test_nash_md_preferences_from_a_file(capsys, tmp_path, spy):
    src = tmp_path / "p.txt"
    src.write_text("# rock-paper-scissors\n0.5 1 0\n0 0.5 1\n1 0 0.5\n")
    code, _, err = run(
        capsys, "plot", "nash-md", "--preferences", f"@{src}", "-o", str(tmp_path / "a.png")
    )
    assert (code, err) == (0, "")
    np.testing.assert_array_equal(spy["nash_md_trajectory"][0][0], RPS)


def test_soft_best_of_n_passes_n_and_lam(capsys, tmp_path, spy):
    code, _, err = run(
        capsys, "plot", "soft-best-of-n", "--ref", "0.2", "0.8", "--reward", "1", "0",
        "--n", "5", "--lam", "0", "0.25", "inf", "-o", str(tmp_path / "a.png"),
    )  # fmt: skip
    assert (code, err) == (0, "")
    args, kwargs = spy["soft_best_of_n"]
    assert args == ([0.2, 0.8], [1.0, 0.0], 5)
    assert kwargs["lams"] == [0.0, 0.25, np.inf]
    code, _, _ = run(
        capsys, "plot", "soft-best-of-n", "--ref", "0.2", "0.8", "--reward", "1", "0",
        "-o", str(tmp_path / "b.png"),
    )  # fmt: skip
    args, kwargs = spy["soft_best_of_n"]
    assert code == 0 and args[2] == 8 and kwargs["lams"] is None  # the library's default grid


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["nash-md", "--preferences", "0.5 1; 0 0.5 1; 1 0 0.5"],
            "`--preferences` rows must have the same length; row 0 has 2 numbers, row 1 has 3",
        ),
        (
            ["nash-md", "--preferences", "0.5 x; 0 0.5"],
            "`--preferences` must hold numbers; found 'x'",
        ),
        (
            ["nash-md", "--preferences", "0.5", "1", "0", "0.5", "1"],
            "`--preferences` takes the matrix's rows separated by `;` (\"0.5 1 0; 0 0.5 1; "
            '1 0 0.5") or k*k numbers row by row; got 5 numbers and no `;`',
        ),
        (
            ["nash-md", "--preferences", "0.5 1 0; 0 0.5 1; 1 0 0.4"],
            "`preferences` must satisfy P[i, j] + P[j, i] = 1 (tolerance 1.5e-08); "
            "found P[2, 2] + P[2, 2] = 0.8",
        ),
        (
            ["nash-md", "--preferences", "0.5 0.5; 0.5 0.5"],
            "`preferences` must be a game of 3 outcomes for the simplex figure; got 2",
        ),
        (["nash-md"], "one of the arguments --preferences --game is required"),
        (
            ["nash-md", "--game", "rps", "--preferences", "0.5"],
            "argument --preferences: not allowed with argument --game",
        ),
        (["nash-md", "--game", "chess"], "argument --game: invalid choice: 'chess'"),
        (
            ["nash-md", "--game", "rps", "--tau", "1", "--eta", "2"],
            "`eta` * `tau` must be at most 1 (the mixture weight of the reference); "
            "got eta = 2 with tau = 1 at step 0",
        ),
        (["nash-md", "--game", "rps", "--labels", "a", "b"], "argument --labels: expected 3"),
        (
            ["soft-best-of-n", "--ref", "0.5", "0.5", "--reward", "1", "0", "--lam", "1", "-1"],
            "`--lam` must be non-negative; found -1 at index (1,)",
        ),
        (
            ["soft-best-of-n", "--ref", "0.5", "0.5", "--reward", "1", "0", "--n", "0"],
            "`n` must be an integer >= 1; got 0",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, tmp_path, argv, message):
    target = tmp_path / "x.png"
    code, out, err = run(capsys, "plot", *argv, "-o", str(target))
    assert (code, out) == (2, "")
    assert err.startswith("klpolicy: error: " + message), err
    assert err.count("\n") == 1
    assert not target.exists()


@pytest.mark.parametrize(
    ("figure", "module"), [("nash-md", "preference"), ("soft-best-of-n", "best_of_n")]
)
def test_a_missing_subpackage_is_named(capsys, monkeypatch, figure, module):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == f"klpolicy.{module}" else real(name, *a),
    )
    argv = ["--game", "rps"] if figure == "nash-md" else ["--ref", "1", "--reward", "0"]
    code, _, err = run(capsys, "plot", figure, *argv, "-o", "x.png")
    assert code == 2
    assert err == (
        f"klpolicy: error: `klpolicy plot {figure}` needs klpolicy.{module}, "
        "which this installation lacks\n"
    )


@pytest.mark.parametrize(
    ("figure", "option", "text"),
    [
        ("nash-md", "--tau TAU", "KL coefficient tau > 0 (default 0.2)"),
        ("nash-md", "--eta ETA", "step size, 0 < eta * tau < 1 (default 1)"),
        ("nash-md", "--steps STEPS", "Nash-MD steps drawn, at most 10000 (default 60)"),
        ("nash-md", "--game {rps,transitive}", "a named game: rps: rock-paper-scissors"),
        ("nash-md", "--preferences ROWS [ROWS ...]", "preference matrix P[i, j] = P(i preferred"),
        ("soft-best-of-n", "--n N", "draws from the reference (default 8)"),
        ("soft-best-of-n", "--lam LAM [LAM ...]", "temperatures of the curve, >= 0"),
    ],
)
def test_options_have_help(capsys, figure, option, text):
    with pytest.raises(SystemExit) as exc:
        main(["plot", figure, "--help"])
    assert exc.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{option} {text}" in out
