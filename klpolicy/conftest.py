"""Doctest configuration: doctests of optional submodules run only when their extra is installed."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

collect_ignore_glob = []
# module paths of the old layout: each file makes its path the new module itself, whose
# doctests run where that module lives (collected here, pytest would see a second file)
collect_ignore = [
    str(path.relative_to(Path(__file__).parent))
    for path in Path(__file__).parent.rglob("*.py")
    if "sys.modules[__name__] = " in path.read_text(encoding="utf-8")
]
if importlib.util.find_spec("torch") is None:
    collect_ignore_glob.append("torch/*")
if importlib.util.find_spec("matplotlib") is None:
    collect_ignore_glob += ["plotting/*", "app/demo.py"]
if importlib.util.find_spec("hypothesis") is None:
    collect_ignore_glob.append("testing/*")


@pytest.fixture(autouse=True)
def _default_numpy_print_options():
    """Doctests print with numpy's default options, whatever ran before them in the worker."""
    with np.printoptions(precision=8, suppress=False, threshold=1000, linewidth=75):
        yield
