"""The README's ten-line example runs and prints what its comments say."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_example_prints_its_comments():
    text = README.read_text()
    block = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, str(README), "exec"), {})
    lines = out.getvalue().splitlines()
    assert lines[0] == "0.5 [0.88 0.12] 0.3278"
    assert lines[1] == "2.0 [0.62 0.38] 0.0303"
    assert lines[2] == "[1. 0.] [0.5 0.5]"
    assert lines[3].startswith("1.0599")
    # the comments in the block state the same numbers
    assert "# 0.5 [0.88 0.12] 0.3278" in block and "# 2.0 [0.62 0.38] 0.0303" in block


def _readme_test_command() -> str:
    section = README.read_text().split("## Run the tests", 1)[1]
    return re.search(r"```bash\n(.*?)\n```", section, re.S).group(1)


def test_ci_runs_the_readme_test_command():
    """`.ci/run` runs the README's pytest call verbatim, before the slow set and the docs."""
    command = _readme_test_command()
    pytest_call = command.split("&&")[-1].strip()
    assert pytest_call.startswith("python -m pytest")
    assert '-m "not slow"' in pytest_call
    ci = (README.parent / ".ci" / "run").read_text().strip().splitlines()
    assert pytest_call in ci
    quick = ci.index(pytest_call)
    slow = next(
        i for i, line in enumerate(ci) if line.startswith("python -m pytest") and "-m slow" in line
    )
    docs = next(i for i, line in enumerate(ci) if line.startswith("python -m sphinx"))
    assert quick < slow and quick < docs, "the quick tests run first, so a failure shows in minutes"
    install = command.split("&&")[1].strip()
    assert any(line.startswith(install.replace("install -e", "install --quiet -e")) for line in ci)


def test_one_ruff_version_in_precommit_and_dev_extra():
    """The pre-commit hook and the `dev` extra pin the same ruff release."""
    root = README.parent
    rev = re.search(
        r"ruff-pre-commit\s*\n\s*rev:\s*v?(\S+)", (root / ".pre-commit-config.yaml").read_text()
    )
    pin = re.search(r'"ruff==([^"]+)"', (root / "pyproject.toml").read_text())
    assert rev is not None and pin is not None, "ruff is pinned in both places"
    assert rev.group(1) == pin.group(1)
