"""Every repository path that the docs, tutorials, README and source name exists.

A path such as ``klpolicy/core/_tilt.py`` or ``tests/core/test_fast_path.py`` in prose
goes stale when a file moves; a reader who follows it finds nothing. The scan looks for
``klpolicy/...py``, ``tests/...py``, ``benchmarks/...``, ``docs/...md`` and
``tutorials/...md`` tokens in ``docs/``, ``tutorials/``, ``README.md`` and the source
of ``klpolicy/`` and ``benchmarks/`` (docstrings and comments alike); CHANGELOG.md is
history and may name old paths.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# A token starts at a word boundary that is not part of a longer path or URL.
PATH = re.compile(
    r"(?<![\w./-])("
    r"(?:klpolicy|tests)/[\w./-]*\.py"
    r"|benchmarks/[\w.-][\w./-]*"
    r"|(?:docs|tutorials)/[\w./-]*\.md"
    r")"
)


# Paths of other projects that the docs cite (each with the project it belongs to): they
# look like this repository's paths and are not.
EXTERNAL = {
    "docs/source/how_to_train.md": "TRL's documentation (cited on negative KL and samplers)",
}


def _sources() -> list[Path]:
    files = [ROOT / "README.md"]
    for folder, pattern in (
        ("docs", "**/*.md"),
        ("tutorials", "*.md"),
        ("klpolicy", "**/*.py"),
        ("benchmarks", "*.py"),
    ):
        files += sorted((ROOT / folder).glob(pattern))
    return [f for f in files if f.is_file() and "_build" not in f.parts]


def named_paths(text: str) -> list[str]:
    """The repository paths named in ``text`` (a trailing full stop is not part of one)."""
    return [m.group(1).rstrip(".") for m in PATH.finditer(text)]


def test_the_scan_finds_paths_and_ignores_urls():
    text = (
        "see `klpolicy/core/_tilt.py`, tests/core/test_fast_path.py. Run "
        "benchmarks/core_bench.py and read docs/performance.md or tutorials/01_x.md; "
        "not https://example.org/docs/other.md nor klpolicy/core/ (a folder)"
    )
    assert named_paths(text) == [
        "klpolicy/core/_tilt.py",
        "tests/core/test_fast_path.py",
        "benchmarks/core_bench.py",
        "docs/performance.md",
        "tutorials/01_x.md",
    ]


@pytest.mark.parametrize("source", _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_named_path_exists(source):
    named = set(named_paths(source.read_text(encoding="utf-8"))) - set(EXTERNAL)
    missing = sorted(p for p in named if not (ROOT / p).exists())
    assert missing == [], f"{source.relative_to(ROOT)} names paths that do not exist: {missing}"
