"""docs/testing.md runs: every python block executes, and every message it quotes is real.

A ```text block right after a ```python block is the message its last statement
produces: an ``AssertionError`` (``AssertionError: ...``) or a ``ClampBiasWarning``.
The controller verdicts quoted without code are the ones tests/testing/test_testing.py
asserts word for word.
"""

from __future__ import annotations

import ast
import re
import warnings
from pathlib import Path

import pytest

pytest.importorskip("torch")

DOC = Path(__file__).resolve().parents[2] / "docs" / "testing.md"


def blocks(text: str) -> list[tuple[str, str, bool]]:
    """The fenced blocks of a page, in order: (language, body, right after the previous one)."""
    out, end = [], None
    for m in re.finditer(r"```(\w+)\n(.*?)```", text, re.S):
        attached = end is not None and not text[end : m.start()].strip()
        out.append((m.group(1), m.group(2), attached))
        end = m.end()
    return out


def _split_last(code: str) -> tuple[str, str]:
    tree = ast.parse(code)
    last = tree.body[-1]
    lines = code.splitlines(keepends=True)
    return "".join(lines[: last.lineno - 1]), "".join(lines[last.lineno - 1 :])


def _run_saying_warns(src: str, name: str, ns: dict, expected) -> None:
    """Run a block; where its comment says "(and warns)", the ``expected`` warning must come
    (and is the page's to show, not the test run's); any other warning is passed on."""
    says = "(and warns)" in src
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(src, name, "exec"), ns)
    if says:
        assert any(issubclass(w.category, expected) for w in caught), (
            f"{name} says it warns, and no {expected.__name__} came"
        )
    for w in caught:
        if not (says and issubclass(w.category, expected)):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


def run_page(text: str) -> list[tuple[str, str]]:
    """Execute the page's python blocks in order; return (quoted, produced) message pairs."""
    from klpolicy.testing import ClampBiasWarning

    ns: dict = {"__name__": "docs_testing"}
    pairs = []
    bl = blocks(text)
    for k, (lang, body, _) in enumerate(bl):
        if lang != "python":
            continue
        nxt = bl[k + 1] if k + 1 < len(bl) else ("", "", False)
        quoted = nxt[1].strip() if nxt[0] == "text" and nxt[2] else None
        if quoted is None or not quoted.startswith(("AssertionError:", "ClampBiasWarning:")):
            _run_saying_warns(body, f"docs/testing.md block {k}", ns, ClampBiasWarning)
            continue
        head, last = _split_last(body)
        _run_saying_warns(head, f"docs/testing.md block {k}", ns, ClampBiasWarning)
        code = compile(last, f"docs/testing.md block {k} (last)", "exec")
        if quoted.startswith("AssertionError:"):
            try:
                exec(code, ns)
            except AssertionError as exc:
                pairs.append((quoted, f"AssertionError: {exc}"))
            else:
                pairs.append((quoted, "(no AssertionError)"))
        else:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                exec(code, ns)
            got = [str(w.message) for w in caught if issubclass(w.category, ClampBiasWarning)]
            pairs.append((quoted, f"ClampBiasWarning: {got[0]}" if got else "(no warning)"))
    return pairs


# A float printed at full precision (16-17 digits): the user code in the page computes
# with torch, whose exp differs in the last ulp between CPUs (AVX2 and AVX-512 kernels:
# 0.14334222045767464 against ...453 for the swapped k3).
_FULL_FLOAT = re.compile(r"-?\d\.\d{14,}(?:e[-+]\d+)?")


def _to_13_digits(message: str) -> str:
    return _FULL_FLOAT.sub(lambda m: f"{float(m.group()):.13g}", message)


@pytest.mark.slow
def test_every_quoted_message_is_what_the_code_above_it_produces():
    """Word for word, every full-precision float compared to 13 significant digits."""
    pairs = run_page(DOC.read_text())
    assert len(pairs) >= 10
    for quoted, produced in pairs:
        assert _to_13_digits(produced) == _to_13_digits(quoted)


def test_controller_verdicts_quoted_without_code_are_the_asserted_ones():
    from tests.testing import test_testing as t

    text = DOC.read_text()
    quoted = (
        t.NEGATIVE_VERDICT,
        t.TARGET_ZERO_VERDICT,
        t.TARGET_ZERO_FLOAT_VERDICT,
        t.ZERO_MULTIPLIER_VERDICT,
        t.FLOAT32_VERDICT,
    )
    for verdict in quoted:
        assert f"AssertionError: {verdict}" in text
