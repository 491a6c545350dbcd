"""Doctest configuration: doctests of optional submodules run only when their extra is installed.

It lives beside the package, not inside it, so that the installed package carries no pytest
configuration.
"""

import importlib.util

import numpy as np
import pytest

collect_ignore_glob = []
if importlib.util.find_spec("torch") is None:
    collect_ignore_glob.append("klpolicy/torch/*")
if importlib.util.find_spec("matplotlib") is None:
    collect_ignore_glob += ["klpolicy/plotting/*", "klpolicy/app/demo.py"]
if importlib.util.find_spec("hypothesis") is None:
    collect_ignore_glob.append("klpolicy/testing/*")


@pytest.fixture(autouse=True)
def _default_numpy_print_options(request):
    """Doctests print with numpy's default options, whatever ran before them in the worker."""
    if type(request.node).__name__ != "DoctestItem":
        yield
        return
    with np.printoptions(precision=8, suppress=False, threshold=1000, linewidth=75):
        yield
