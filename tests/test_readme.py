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


def test_ci_runs_the_readme_test_command():
    """`.ci/run` ends with the pytest call of the README's test command, verbatim."""
    text = README.read_text()
    section = text.split("## Run the tests", 1)[1]
    command = re.search(r"```bash\n(.*?)\n```", section, re.S).group(1)
    pytest_call = command.split("&&")[-1].strip()
    assert pytest_call.startswith("python -m pytest")
    ci = (README.parent / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == pytest_call
    install = command.split("&&")[1].strip()
    assert any(line.startswith(install.replace("install -e", "install --quiet -e")) for line in ci)
