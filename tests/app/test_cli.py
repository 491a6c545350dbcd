"""The ``klpolicy`` command: tables, JSON, the demo and one-line errors."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys

import numpy as np
import pytest

from klpolicy.app.cli import main


def run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_solve_prints_the_worked_example(capsys):
    code, out, err = run(
        capsys, "solve", "--ref", "0.5", "0.5", "--reward", "1", "0", "--beta", "0.5"
    )
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0].split() == ["action", "ref", "reward", "pi*(b=0.5)", "log", "ratio"]
    assert lines[1].split() == ["0", "0.500000", "1.000000", "0.880797", "0.566219"]
    assert "KL(pi*||ref)    0.327813" in out
    assert "soft value    0.716890" in out


def test_solve_several_betas_give_one_column_each(capsys):
    code, out, _ = run(
        capsys, "solve", "--ref", "0.5", "0.5", "--reward", "1", "0", "--beta", "0.5", "2"
    )
    assert code == 0
    assert out.splitlines()[1].split() == ["0", "0.500000", "1.000000", "0.880797", "0.622459"]


def test_solve_json(capsys):
    code, out, _ = run(
        capsys,
        "solve",
        "--ref",
        "0.5",
        "0.5",
        "--reward",
        "1",
        "0",
        "--beta",
        "0.5",
        "inf",
        "--json",
    )
    data = json.loads(out)
    assert code == 0
    assert data["columns"][0]["policy"][0] == pytest.approx(np.exp(2) / (np.exp(2) + 1), rel=1e-15)
    assert data["columns"][1]["beta"] == "inf"
    assert data["columns"][1]["kl"] == 0.0


def test_solve_for_a_kl_target(capsys):
    code, out, _ = run(
        capsys, "solve", "--ref", "0.5", "0.5", "--reward", "1", "0", "--kl", "0.1", "--json"
    )
    data = json.loads(out)
    assert code == 0
    assert data["columns"][0]["kl"] == pytest.approx(0.1, rel=1e-12)
    assert data["beta_for_kl"] == pytest.approx(1.059947316, rel=1e-9)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["solve", "--ref", "0.5", "0.6", "--reward", "1", "0", "--beta", "1"],
            "klpolicy: error: `ref` must sum to 1 along axis -1; it sums to 1.1 (tolerance 1.5e-08); "
            "klpolicy never renormalises silently",
        ),
        (
            ["solve", "--ref", "0.5", "0.5", "--reward", "1", "0", "--beta", "x"],
            "klpolicy: error: argument --beta: invalid float value: 'x'",
        ),
        (
            ["solve", "--ref", "0.5", "0.5", "--reward", "1", "0"],
            "klpolicy: error: give at least one `--beta` or a `--kl` target",
        ),
        (
            ["solve", "--ref", "0.5", "0.5", "--reward", "1", "0", "--beta", "-1"],
            "klpolicy: error: `beta` must be non-negative; found -1",
        ),
        (
            ["solve", "--ref", "0.5", "0.5", "--reward", "1", "0", "--kl", "5"],
            "klpolicy: error: `kl` = 5 is above the largest KL reachable: 0.693147 nats (the greedy limit beta -> 0)",
        ),
        # argparse quotes the choices differently across Python versions: compare the prefix
        (["frobnicate"], "klpolicy: error: argument command: invalid choice: 'frobnicate'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(capsys, argv, message):
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert err.strip() == message or err.startswith(message + " (choose from")


def test_demo_prints_the_worked_example(capsys):
    code, out, _ = run(capsys, "demo")
    assert code == 0
    assert "beta = 0.5 : 0.8808" in out
    assert "beta = 2   : 0.6225" in out


def test_python_dash_m_runs_the_command():
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "klpolicy",
            "solve",
            "--ref",
            "0.5",
            "0.5",
            "--reward",
            "1",
            "0",
            "--beta",
            "2",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert "0.622459" in out.stdout


# --------------------------------------------------------------------------- figures

PNG = b"\x89PNG\r\n\x1a\n"


def test_import_cli_stays_light():
    code = (
        "import sys, klpolicy.app.cli; "
        "print(sorted(m for m in ('matplotlib', 'torch', 'hypothesis') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.slow
def test_demo_out_writes_the_headline_figures(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    from klpolicy.app.demo import available_figures

    code, out, err = run(capsys, "demo", "--out", str(tmp_path))
    assert code == 0 and err == ""
    assert "beta = 0.5 : 0.8808" in out
    names = available_figures()
    assert f"Wrote {len(names)} figures:" in out
    for name in names:
        path = tmp_path / f"{name}.png"
        assert f"  {path}" in out.splitlines()
        assert path.read_bytes()[:8] == PNG


@pytest.mark.parametrize(
    "argv",
    [
        ["beta-sweep", "--ref", "0.5", "0.5", "--reward", "1", "0"],
        ["beta-sweep", "--ref", "0.2", "0.8", "--reward", "0", "1", "--mark", "--beta-range", "0.1", "10"],
        ["frontier", "--ref", "0.25", "0.25", "0.5", "--reward", "1", "0.5", "0"],
        ["token-kl", "--kl", "0.5", "0.1", "0.05"],
        ["token-kl", "--kl", "0.5", "0.1", "0.05", "0.2", "--rows", "2", "--title", "batch"],
        ["controller-trace", "--ref", "0.5", "0.3", "0.2", "--reward", "1", "0", "0.5", "--steps", "20"],
        [
            "controller-trace",
            "--ref", "0.5", "0.5", "--reward", "1", "0",
            "--controller", "lagrangian", "--lr", "2", "--steps", "10",
        ],
        ["controller-trace", "--ref", "0.5", "0.5", "--reward", "1", "0", "--controller", "dead-zone"],
        ["controller-trace", "--ref", "0.5", "0.5", "--reward", "1", "0", "--controller", "fixed"],
        ["kl-budget", "--d", "0", "1", "2", "--gold", "0", "0.8", "0.5", "--proxy", "0", "1", "2"],
    ],
)  # fmt: skip
def test_plot_writes_a_png(capsys, tmp_path, argv):
    pytest.importorskip("matplotlib")
    target = tmp_path / "fig.png"
    code, out, err = run(capsys, "plot", *argv, "-o", str(target))
    assert (code, err) == (0, "")
    assert out.strip() == str(target)
    assert target.read_bytes()[:8] == PNG


def test_plot_draws_the_numbers_given(capsys, tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from klpolicy import plotting

    seen = {}
    original = plotting.token_kl

    def spy(kl, *, ax=None):
        seen["kl"] = kl
        return original(kl, ax=ax)

    monkeypatch.setattr(plotting, "token_kl", spy)
    code, _, _ = run(
        capsys,
        "plot",
        "token-kl",
        "--kl",
        "1",
        "2",
        "3",
        "4",
        "5",
        "6",
        "--rows",
        "3",
        "-o",
        str(tmp_path / "a.png"),
    )
    assert code == 0
    np.testing.assert_array_equal(seen["kl"], [[1, 2], [3, 4], [5, 6]])
    assert plt.get_fignums() == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["token-kl", "--kl", "1", "2", "3", "--rows", "2", "-o", "OUT"],
            "klpolicy: error: `--rows` = 2 must be positive and divide the 3 `--kl` values",
        ),
        (
            ["beta-sweep", "--ref", "0.5", "0.6", "--reward", "1", "0", "-o", "OUT"],
            "klpolicy: error: `ref` must sum to 1 along axis -1; it sums to 1.1 (tolerance 1.5e-08); "
            "klpolicy never renormalises silently",
        ),
        (
            ["kl-budget", "--d", "0", "1", "--gold", "0", "-o", "OUT"],
            "klpolicy: error: `gold` must have the shape of `d`; got (1,) and (2,)",
        ),
        (  # beta-sweep alone may write only `--animate GIF`, so take a figure that needs -o
            ["frontier", "--ref", "1"],
            "klpolicy: error: the following arguments are required: -o/--output, --reward",
        ),
    ],
)
def test_plot_bad_input_is_one_line_and_exit_2(capsys, tmp_path, argv, message):
    pytest.importorskip("matplotlib")
    target = tmp_path / "x.png"
    code, out, err = run(capsys, "plot", *[str(target) if a == "OUT" else a for a in argv])
    assert code == 2 and out == ""
    assert err == message + "\n"
    assert not target.exists()


def test_plot_unwritable_output(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    bad = tmp_path / "missing-dir" / "x.png"
    code, _, err = run(capsys, "plot", "token-kl", "--kl", "1", "-o", str(bad))
    assert code == 2
    assert err == f"klpolicy: error: cannot write `-o` {str(bad)!r}: No such file or directory\n"


@pytest.mark.parametrize(
    "argv", [["plot", "token-kl", "--kl", "1", "-o", "x.png"], ["demo", "--out", "figs"]]
)
def test_missing_matplotlib_is_one_line_and_exit_2(capsys, monkeypatch, tmp_path, argv):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now fails
    code, out, err = run(capsys, *argv)
    what = "klpolicy plot" if argv[0] == "plot" else "klpolicy demo --out"
    assert code == 2 and out == ""
    assert err == (
        f"klpolicy: error: {what} needs matplotlib; install it with `pip install 'klpolicy[plot]'`\n"
    )
    assert list(tmp_path.iterdir()) == []


def test_plot_needs_estimators(capsys, monkeypatch):
    pytest.importorskip("matplotlib")
    # simulate an installation without klpolicy.estimators
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "klpolicy.estimators" else real(name, *a),
    )
    code, _, err = run(
        capsys, "plot", "fixed-points", "--ref", "0.5", "0.5", "--reward", "1", "0", "-o", "x.png"
    )
    assert code == 2
    assert (
        err
        == "klpolicy: error: `klpolicy plot fixed-points` needs klpolicy.estimators, which this installation lacks\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["fixed-points", "--ref", "0.5", "0.3", "0.2", "--reward", "1", "0", "0.5"],
        [
            "estimator-histograms",
            "--p",
            "0.6",
            "0.3",
            "0.1",
            "--q",
            "0.3",
            "0.3",
            "0.4",
            "--n",
            "500",
        ],
    ],
)
@pytest.mark.slow
def test_plot_estimator_figures(capsys, tmp_path, argv):
    pytest.importorskip("matplotlib")
    code, _, err = run(capsys, "plot", *argv, "-o", str(tmp_path / "e.png"))
    assert (code, err) == (0, "")
    assert (tmp_path / "e.png").read_bytes()[:8] == PNG
