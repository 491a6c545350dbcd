"""The gallery of trainers' KL terms (docs/kl_terms.md): every printed report is a fresh run.

The page's python block defines the terms (our own small functions expressing each
library's formula); each ``<!-- kl-term: NAME OPTIONS -->`` marker is followed by the report
``klpolicy check kl-term`` prints for that term, which must equal ``str(kl_term_report(...))``.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from klpolicy.testing import check_kl_term, kl_term_report  # noqa: E402

PAGE = Path(__file__).resolve().parents[2] / "docs" / "kl_terms.md"
TEXT = PAGE.read_text(encoding="utf-8")
ENTRIES = re.findall(r"<!-- kl-term: (\w+) (\{.*?\}) -->\n```text\n(.*?)\n```", TEXT, re.S)


def _namespace() -> dict:
    code = re.search(r"## The functions.*?```python\n(.*?)```", TEXT, re.S).group(1)
    ns: dict = {}
    exec(compile(code, str(PAGE), "exec"), ns)
    return ns


NS = _namespace()


def _term(name: str, opts: str):
    kw = json.loads(opts)
    return functools.partial(NS[name], **kw) if kw else NS[name]


def test_every_entry_has_a_report():
    assert len(ENTRIES) >= 18
    names = {e[0] for e in ENTRIES}
    assert {
        "trl_grpo_kl",
        "trl_grpo_kl_bias_corrected",
        "verl_kl_penalty",
        "deepseek_v32_kl",
        "rlhf_book_k3",
    } <= names


@pytest.mark.slow  # 18 reports, a few seconds of CPU
@pytest.mark.parametrize(("name", "opts", "printed"), ENTRIES, ids=[e[0] + e[1] for e in ENTRIES])
def test_printed_report_is_a_fresh_run(name, opts, printed):
    assert str(kl_term_report(_term(name, opts))) == printed


def test_the_verdicts_that_matter_for_training():
    t = lambda n, **kw: kl_term_report(functools.partial(NS[n], **kw))  # noqa: E731
    trl = t("trl_grpo_kl")
    assert (trl.on_policy, trl.off_policy, trl.mean) == ("forward_kl", None, "reverse_kl")
    # TRL 1.16.0's default (use_bias_correction_kl=True): k3 times the differentiable ratio
    trl = t("trl_grpo_kl_bias_corrected")
    assert (trl.on_policy, trl.off_policy, trl.mean) == ("reverse_kl",) * 3
    # float32 terms (OpenRLHF's .float()): the means of k1 and k3 are the KL, and k2 in the
    # loss trains to pi* as verl's identical mse does
    for est in ("k1", "k3"):
        assert t("openrlhf_approx_kl", kl_estimator=est).mean == "reverse_kl"
        assert t("areal_pr408", kl_estimator=est).mean == "reverse_kl"
    mse, k2 = t("verl_kl_penalty", kl_penalty="mse"), t("openrlhf_approx_kl", kl_estimator="k2")
    assert k2.fixed_point is not None and k2.dtype == "float32"
    assert float(np.max(np.abs(k2.fixed_point - mse.fixed_point))) < 1e-6
    assert t("verl_kl_penalty", kl_penalty="k3+").on_policy == "reverse_kl"
    assert t("verl_kl_penalty", kl_penalty="mse").on_policy == "reverse_kl"
    assert t("verl_kl_penalty", kl_penalty="k1").on_policy == "zero"
    assert t("deepseek_v32_kl").follows == "reverse_kl"
    book = t("rlhf_book_k3")
    assert (book.on_policy, book.scale, book.mean) == (
        "chi2",
        pytest.approx(0.5),
        "chi2 - reverse_kl",
    )
    assert t("openrlhf_approx_kl", kl_estimator="k3").dtype == "float32"
    # the fall-through: asked for k2, it follows what k3 follows
    with pytest.raises(AssertionError, match=r"follows the gradient of forward_kl, not reverse_kl"):
        check_kl_term(
            functools.partial(NS["fall_through"], kl_estimator="k2"),
            expect="reverse_kl",
            regime="on_policy",
        )
