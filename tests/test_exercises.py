"""Every tutorial is a lesson: objectives at the top, takeaways at the end, and 2-3 exercises
(among them one to derive by hand and one to predict before running)
whose folded-away solutions run and give the answer the page states.

The solutions are plain ``python`` blocks inside a MyST ``{admonition} Solution`` with
``:class: dropdown`` (folded in the rendered page), so the notebook does not run them; this
test does, and compares the ``answer`` each one computes with the numbers after ``**Answer:**``
to the precision they are written with.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.md"))

SOLUTION = re.compile(
    r"^:::\{admonition\} Solution\n(?P<options>(?::\w+:[^\n]*\n)*)\n"
    r"```python\n(?P<code>.*?)```\n\n\*\*Answer:\*\* (?P<answer>[^\n]*)\n:::$",
    re.S | re.M,
)
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def _solutions(path: Path) -> list[re.Match]:
    return list(SOLUTION.finditer(path.read_text(encoding="utf-8")))


def _ids(paths):
    return [p.stem for p in paths]


def _tolerance(written: str) -> float:
    """Half a unit in the last written digit (plus a hair for binary rounding)."""
    mant, _, exp = written.lower().partition("e")
    decimals = len(mant.split(".")[1]) if "." in mant else 0
    return 0.5 * 10.0 ** (-decimals + (int(exp) if exp else 0)) * (1 + 1e-9)


# tutorials whose exercises include a "derive" (pen and paper, checked by the library) and a
# "predict" one (say what a number or figure will show before running it); a new tutorial
# joins this list once it has both
THINKING = {f"{i:02d}" for i in range(1, 21)}

# the exercises of tutorials that need an optional dependency run only where it is installed
_ALL = [(p, i) for p in TUTORIALS for i in range(len(_solutions(p)))]


@pytest.mark.parametrize("path", TUTORIALS, ids=_ids(TUTORIALS))
def test_each_tutorial_is_a_lesson(path):
    text = path.read_text(encoding="utf-8")
    body = text.split("---\n", 2)[2]
    title = re.search(r"^# .*$", body, re.M)
    after_title = body[title.end() :].lstrip("\n")
    assert after_title.startswith(":::{admonition} Learning objectives"), (
        f"{path.name}: the learning objectives must open the tutorial"
    )
    objectives = after_title.split("\n:::\n", 1)[0]
    assert len(re.findall(r"^- ", objectives, re.M)) >= 3
    assert "\n## Takeaways\n" in text and "\n## Exercises\n" in text
    assert text.index("\n## Takeaways\n") < text.index("\n## Exercises\n")
    takeaways = text.split("\n## Takeaways\n", 1)[1].split("\n## ", 1)[0]
    assert len(re.findall(r"^- ", takeaways, re.M)) >= 3
    exercises = text.split("\n## Exercises\n", 1)[1]
    kinds = re.findall(r"^\*\*Exercise \d(?: \((derive|predict)\))?\.\*\*", exercises, re.M)
    n = len(kinds)
    assert 2 <= n <= 3, f"{path.name} has {n} exercises"
    assert len(_solutions(path)) == n, f"{path.name}: every exercise needs one solution block"
    if path.stem[:2] in THINKING:
        # pen and paper first, and a prediction before running: not only library calls
        assert "derive" in kinds and "predict" in kinds, f"{path.name}: {kinds}"


@pytest.mark.parametrize("path", TUTORIALS, ids=_ids(TUTORIALS))
def test_solutions_are_folded_away(path):
    for m in _solutions(path):
        assert ":class: dropdown" in m.group("options")


@pytest.mark.slow
@pytest.mark.parametrize(("path", "index"), _ALL, ids=[f"{p.stem}-{i + 1}" for p, i in _ALL])
def test_solution_gives_the_stated_answer(path, index):
    m = _solutions(path)[index]
    namespace: dict = {}
    exec(compile(m.group("code"), f"{path.name}:solution {index + 1}", "exec"), namespace)
    got = np.atleast_1d(np.asarray(namespace["answer"], dtype=float)).ravel()
    written = NUMBER.findall(m.group("answer"))
    assert len(written) == got.size, f"{path.name} solution {index + 1}: {written} vs {got}"
    for w, g in zip(written, got):
        assert abs(g - float(w)) <= _tolerance(w), f"{path.name} solution {index + 1}: {w} vs {g}"


def test_the_tolerance_reads_the_written_precision():
    assert _tolerance("0.73106") == pytest.approx(5e-6)
    assert _tolerance("4.54e-05") == pytest.approx(5e-8)
    assert _tolerance("0") == pytest.approx(0.5)
    # a wrong stated answer fails: 0.7311 is not 0.7321
    assert abs(0.7311 - 0.7321) > _tolerance("0.7321")
