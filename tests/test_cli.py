"""The ``klpolicy`` command: tables, JSON, the demo and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from klpolicy.cli import main


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
