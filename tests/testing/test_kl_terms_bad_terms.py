"""kl_term_report / check_kl_term with terms that have no gradient, of the wrong shape or
complex, and options that do not apply (issue 40, items 18 and 19): a clear verdict or a
ValueError naming the argument, never torch's RuntimeError, a KeyError or a traceback."""

from __future__ import annotations

import textwrap

import pytest

torch = pytest.importorskip("torch")

from klpolicy.testing import check_kl_term, kl_term_report  # noqa: E402


def zero(logp, old_logp, ref_logp):
    return torch.zeros_like(logp)


def detached(logp, old_logp, ref_logp):
    return (0.5 * (logp - ref_logp) ** 2).detach()


def k2(logp, old_logp, ref_logp):
    return 0.5 * (logp - ref_logp) ** 2


NO_GRADIENT = "zero: no gradient at all (the term has no gradient path to logp"


@pytest.mark.parametrize("fn", [zero, detached], ids=["zeros_like", "detached"])
def test_a_term_without_gradient_follows_zero_and_says_why(fn):
    # torch.autograd.grad raised "element 0 of tensors does not require grad" here
    report = kl_term_report(fn, outcomes=3, draws=2)
    assert report.on_policy == report.off_policy == report.follows == "zero"
    assert report.constant == ("on_policy", "off_policy")
    assert str(report).count(NO_GRADIENT) == 2
    check_kl_term(fn, expect="zero", draws=2)  # passes
    with pytest.raises(AssertionError, match="follows no gradient at all"):
        check_kl_term(fn, expect="reverse_kl", draws=2)
    # at the sequence level too
    assert kl_term_report(fn, level="sequence", vocab=2, length=2, draws=2).follows == "zero"


def test_a_term_with_a_gradient_is_not_called_constant():
    report = kl_term_report(k2, outcomes=3, draws=2)
    assert report.constant == () and NO_GRADIENT not in str(report)


BAD = [
    (
        lambda: check_kl_term(k2, expect="token:reverse_kl"),  # KeyError: 'token:reverse_kl'
        r"`expect`='token:reverse_kl' is a per-token divergence of a sequence \(level='sequence'\); "
        r"at level='token' \(one position\) it is 'reverse_kl'",
    ),
    (
        lambda: check_kl_term(k2, expect="-token:chi2", level="token"),
        r"`expect`='-token:chi2' .* it is '-chi2'",
    ),
    (
        lambda: kl_term_report(lambda a, b, c: k2(a, b, c)[:, None], outcomes=3, draws=2),
        r"`fn` must return one term per sample, shape \(3,\); got shape \(3, 1\)",
    ),
    (
        lambda: kl_term_report(lambda a, b, c: k2(a, b, c).to(torch.complex128), draws=2),
        r"`fn` must return real terms; got a complex tensor \(torch.complex128\)",
    ),
    (
        lambda: kl_term_report(k2, level="sequence", reduction="none", draws=2),
        r"`reduction` must be one of 'sum', 'mean'; got 'none'",
    ),
]


@pytest.mark.parametrize(("call", "message"), BAD, ids=[m[:40] for _, m in BAD])
def test_bad_terms_and_options_name_the_argument(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_token_expect_at_the_sequence_level_still_runs():
    check_kl_term(k2, expect="token:reverse_kl", level="sequence", regime="on_policy", draws=2)


def _run(tmp_path, monkeypatch, capsys, *args):
    from klpolicy.testing.cli import run_check

    (tmp_path / "found_terms.py").write_text(
        textwrap.dedent(
            """
            import torch
            def zero(logp, old_logp, ref_logp):
                return torch.zeros_like(logp)
            def k2(logp, old_logp, ref_logp):
                return 0.5 * (logp - ref_logp) ** 2
            """
        )
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    code = run_check(["kl-term", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_constant_term_and_reductions(tmp_path, monkeypatch, capsys):
    run = lambda *a: _run(tmp_path, monkeypatch, capsys, *a)  # noqa: E731
    code, out, err = run("found_terms:zero", "--draws", "2")  # a 34-line traceback before
    assert code == 0 and "Traceback" not in out + err, err
    assert (
        out.splitlines()[0]
        == "on-policy:  follows " + NO_GRADIENT + ": a constant or a detached term)"
    )
    code, out, err = run("found_terms:zero", "--expect", "zero", "--draws", "2")
    assert code == 0 and out.splitlines()[-1] == "check_kl_term(zero): follows zero", out + err
    # -h offered --reduction none, which the suite then refused: they agree now
    code, out, err = run("found_terms:k2", "--reduction", "none")
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "invalid choice: 'none' (choose from 'sum', 'mean')" in err
    code, out, err = run("found_terms:k2", "--expect", "token:reverse_kl")
    assert code == 2 and out == "" and "at level='token' (one position) it is 'reverse_kl'" in err
    code, out, err = run(
        "found_terms:k2", "--level", "sequence", "--reduction", "mean", "--draws", "2"
    )
    assert code == 0 and out.splitlines()[0] == "on-policy:  follows token:reverse_kl (times 1/3)"


def test_cli_help_lists_the_suites_reductions(capsys):
    from klpolicy.testing.cli import run_check

    assert run_check(["kl-term", "-h"]) == 0
    out = capsys.readouterr().out
    assert "--reduction {sum,mean}" in out and "none" not in out.split("--reduction")[1][:20]
