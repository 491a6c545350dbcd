"""``klpolicy check SUITE module:function [options]``: exit 0 on pass, 1 on failure, 2 on bad input."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from klpolicy.app.cli import main

pytest.importorskip("torch")
ROOT = Path(__file__).resolve().parents[2]
MUT = "tests.testing.test_testing_estimators"


@pytest.mark.slow
def test_passing_suite_exits_0(capsys):
    assert main(["check", "kl-estimator", "klpolicy.estimators:k3", "--estimator", "k3"]) == 0
    assert capsys.readouterr().out == "check_kl_estimator(k3): passed (100 examples)\n"


def test_failing_suite_prints_the_verdict_and_exits_1(capsys):
    from tests.testing.test_testing_estimators import CLAMP_VERDICT

    assert main(["check", "kl_estimator", f"{MUT}:k3_clamped", "--estimator", "k3"]) == 1
    assert capsys.readouterr().out == CLAMP_VERDICT + "\n"


@pytest.mark.slow
def test_options_reach_the_suite(capsys):
    args = [
        "check",
        "kl-estimator",
        f"{MUT}:k3_clamped",
        "--estimator",
        "k3",
        "--clamp",
        "-10",
        "10",
    ]
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("ClampBiasWarning: check_kl_estimator: the clamp (-10.0, 10.0)")
    assert out[1] == "check_kl_estimator(k3_clamped): passed (100 examples)"
    args = ["check", "kl-estimator", f"{MUT}:k1_float32", "--estimator", "k1", "--dtype", "float32"]
    assert main([*args, "--max-examples", "30"]) == 0
    assert capsys.readouterr().out == "check_kl_estimator(k1_float32): passed (30 examples)\n"


def test_controller_class_and_dotted_attribute(capsys):
    assert main(["check", "kl-controller", "klpolicy.control:AdaptiveKLController"]) == 0
    target = "tests.testing.test_testing:NaNPropagating"
    assert main(["check", "check_kl_controller", target]) == 1
    from tests.testing.test_testing import NAN_VERDICT

    assert capsys.readouterr().out.endswith(NAN_VERDICT + "\n")


@pytest.mark.parametrize(
    ("argv", "msg"),
    [
        (["bogus", "klpolicy:kl_divergence"], "unknown suite 'bogus'; choose one of dpo-loss"),
        (["kl-divergence", "no_such_module_17:f"], "cannot import 'no_such_module_17'"),
        (["kl-divergence", "klpolicy:no_such_name"], "'klpolicy' has no attribute"),
        (["kl-divergence", "klpolicy"], "the target must be module:function"),
        (["kl-estimator", "klpolicy.estimators:k3"], "required: --estimator"),
        (
            ["kl-estimator", "klpolicy.estimators:k3", "--estimator", "k4"],
            "argument --estimator: invalid choice: 'k4' (choose from",
        ),
        (
            ["kl-estimator", "klpolicy.estimators:k3", "--estimator", "k3", "--reduction", "x"],
            "argument --reduction: invalid choice: 'x' (choose from",
        ),
        (["kl-divergence", "klpolicy:kl_divergence", "--max-examples", "x"], "invalid int"),
        (["kl-divergence", "klpolicy:__version__"], "is not callable"),
        ([], "usage: klpolicy check SUITE"),
    ],
)
def test_bad_arguments_exit_2_with_one_line(argv, msg, capsys):
    assert main(["check", *argv]) == 2
    captured = capsys.readouterr()
    text = captured.err or captured.out
    assert msg in text
    if captured.err:
        assert captured.err.startswith("klpolicy check: error: ")
        assert captured.err.count("\n") == 1


def test_help_lists_the_suites_and_options(capsys):
    assert main(["check", "--help"]) == 0
    out = capsys.readouterr().out
    assert "kl-controller" in out
    assert "The suites need hypothesis: pip install klpolicy[testing]" in out
    assert main(["check", "kl-estimator", "-h"]) == 0
    out = capsys.readouterr().out
    for option in ("--estimator", "--dtype", "--reduction", "--clamp", "--max-examples"):
        assert option in out
    # every option has help text, and the names it takes are listed
    assert "--estimator {k1,k2,k3,abs}" in out
    assert "--reduction {none,mean,sum,masked,masked_sum,masked_mean,seq_mean,seq_sum}" in out
    assert "which estimator the function claims to be" in out
    assert "examples:\n  klpolicy check kl-estimator mykl:k3 --estimator k3\n" in out


@pytest.mark.parametrize(
    "suite", ["kl-divergence", "kl-estimator", "kl-controller", "dpo-loss", "pair-loss"]
)
def test_every_suite_help_has_examples_and_help_for_each_option(suite, capsys):
    assert main(["check", suite, "-h"]) == 0
    out = capsys.readouterr().out
    assert f"examples:\n  klpolicy check {suite} " in out
    options = out.split("options:")[1].split("examples:")[0]
    # argparse puts an option's help on its line or the next: no option line is left bare
    lines = [ln for ln in options.splitlines() if ln.strip()]
    for k, line in enumerate(lines):
        if line.lstrip().startswith("--") and len(line.strip().split("  ")) < 2:
            follow = lines[k + 1] if k + 1 < len(lines) else ""
            assert not follow.lstrip().startswith("-"), f"{suite}: no help for {line.strip()}"


@pytest.mark.slow
def test_the_command_line_exit_status():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "klpolicy", "check", "kl-controller"]
    done = subprocess.run(
        [*cmd, "tests.testing.test_testing:NegativeBeta"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr
    assert "multiplier 1 + (-0.2) * 10 = -1" in done.stdout
    done = subprocess.run(
        [*cmd, "nope:X"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 2
    assert (
        done.stderr == "klpolicy check: error: cannot import 'nope': ModuleNotFoundError: "
        "No module named 'nope'\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "kl-estimator", "-h"],
        ["check", "kl-divergence", "klpolicy:kl_divergence"],
        ["check", "kl-estimator", "klpolicy.estimators:k3", "--estimator", "k3"],
    ],
)
def test_without_hypothesis_one_line_names_the_extra_and_exits_2(argv):
    # hypothesis hidden in a fresh interpreter, as a user without the testing extra has it
    code = (
        "import sys; sys.modules['hypothesis'] = None\n"
        "from klpolicy.app.cli import main\n"
        f"sys.exit(main({argv!r}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr == (
        "klpolicy check: error: klpolicy check needs hypothesis, which is not installed; "
        "install it with `pip install klpolicy[testing]`\n"
    )


@pytest.mark.slow
def test_import_klpolicy_app_does_not_import_hypothesis():
    code = "import klpolicy.app.cli, sys; print('hypothesis' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_pair_loss_suite_of_issue_19(capsys):
    target = "klpolicy.preference:dpo_loss"
    assert main(["check", "pair-loss", target, "--max-examples", "20"]) == 0
    assert capsys.readouterr().out == "check_pair_loss(dpo_loss): passed (20 examples)\n"
    assert main(["check", "pair-loss", target, "--loss", "ipo", "--max-examples", "20"]) == 1
    assert capsys.readouterr().out.startswith("check_pair_loss[ipo](dpo_loss): it differs")
    argv = ["check", "pair-loss", target, "--loss-option", "label_smoothing=0.1"]
    assert main([*argv, "--max-examples", "20"]) == 1
    assert "it ignores the option label_smoothing=0.1" in capsys.readouterr().out
    assert main(["check", "pair-loss", target, "--loss-option", "x"]) == 2
    assert "expected NAME=NUMBER, got 'x'" in capsys.readouterr().err


def kl_penalty(logprob, ref_logprob, kl_penalty):
    """verl's per-token KL term, selected by name: ``kl_penalty(logprob, ref_logprob, kl_penalty)``.

    verl/trainer/ppo/core_algos.py, ``kl_penalty`` (volcengine/verl at commit
    012be9d9dcb7c38499f23616142870d2682757fc): "kl"/"k1" the log-ratio, "mse"/"k2" half its
    square, "low_var_kl"/"k3" k3 with the log-ratio clamped to +-20 and the result to +-10.
    """
    x = np.asarray(logprob, float) - np.asarray(ref_logprob, float)
    if kl_penalty in ("kl", "k1"):
        return x
    if kl_penalty in ("mse", "k2"):
        return 0.5 * x**2
    if kl_penalty in ("low_var_kl", "k3"):
        t = np.clip(-x, -20.0, 20.0)
        return np.clip(np.exp(t) - t - 1, -10.0, 10.0)
    raise NotImplementedError(kl_penalty)


def test_option_passes_keyword_arguments_to_the_checked_function(capsys):
    target = f"{__name__}:kl_penalty"
    argv = ["check", "kl-estimator", target, "--max-examples", "20"]
    assert main([*argv, "--estimator", "k2", "--option", "kl_penalty=mse"]) == 0
    assert capsys.readouterr().out == "check_kl_estimator(kl_penalty): passed (20 examples)\n"
    # a quoted literal and a bare word are the same string
    assert main([*argv, "--estimator", "k1", "--option", "kl_penalty='k1'"]) == 0
    assert capsys.readouterr().out == "check_kl_estimator(kl_penalty): passed (20 examples)\n"
    assert main([*argv, "--estimator", "k3", "--option", "kl_penalty=low_var_kl"]) == 1
    out = capsys.readouterr().out
    assert out.startswith(
        "check_kl_estimator(kl_penalty): it clamps k3: its values are capped at 10.0"
    )


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("x=0.1", 0.1),
        ("x=3", 3),
        ("x=True", True),
        ("x=None", None),
        ("x='k3'", "k3"),
        ("x=low_var_kl", "low_var_kl"),
        ("x=(1, 2)", (1, 2)),
        ("x=", ""),
        ("x=a=b", "a=b"),
    ],
)
def test_option_values_are_python_literals_or_strings(text, value):
    from klpolicy.testing.cli import _fn_option

    assert _fn_option(text) == ("x", value)


def test_a_signature_mismatch_is_a_usage_error(capsys):
    target = f"{__name__}:kl_penalty"
    assert main(["check", "kl-estimator", target, "--estimator", "k1"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "klpolicy check: error: kl_penalty(logprob, ref_logprob, kl_penalty) cannot be called as "
        "kl_penalty(logp, logq) by the kl-estimator suite: missing a required argument: "
        "'kl_penalty'; pass it with --option kl_penalty=VALUE\n"
    )
    argv = ["check", "kl-estimator", target, "--estimator", "k1", "--option", "kl_penalty=k1"]
    assert main([*argv, "--option", "eps=1"]) == 2
    assert capsys.readouterr().err == (
        "klpolicy check: error: kl_penalty(logprob, ref_logprob, kl_penalty) cannot be called as "
        "kl_penalty(logp, logq) by the kl-estimator suite with --option kl_penalty, eps: got an "
        "unexpected keyword argument 'eps'\n"
    )
    # a masked reduction passes a third argument, the mask
    argv = ["check", "kl-estimator", "klpolicy.estimators:k1", "--estimator", "k1"]
    assert main([*argv, "--reduction", "masked_mean"]) == 2
    assert "cannot be called as k1(logp, logq, mask)" in capsys.readouterr().err
    assert main(["check", "kl-divergence", "klpolicy:kl_divergence", "--option", "x"]) == 2
    assert "argument --option: expected NAME=VALUE, got 'x'" in capsys.readouterr().err


class TakesAScale:
    """An adaptive controller with an extra constructor argument, given with --option."""

    def __init__(self, init_kl_coef, target, horizon, scale):
        from klpolicy.control import AdaptiveKLController

        self._c = AdaptiveKLController(init_kl_coef * scale, target, horizon)

    @property
    def value(self):
        return self._c.value

    def update(self, current, n_steps):
        self._c.update(current, n_steps)


def test_option_reaches_a_controller_constructor(capsys):
    target = f"{__name__}:TakesAScale"
    argv = ["check", "kl-controller", target, "--max-examples", "10"]
    assert main(argv) == 2
    assert "missing a required argument: 'scale'" in capsys.readouterr().err
    assert main([*argv, "--option", "scale=1.0"]) == 0
    assert capsys.readouterr().out == "check_kl_controller(TakesAScale): passed (10 examples)\n"
    assert main([*argv, "--option", "scale=2.0"]) == 1
    assert "its initial .value is" in capsys.readouterr().out
