"""``scipy.special``, imported on first use, so that ``import klpolicy`` costs numpy's import.

``from klpolicy.core.internal import special`` then ``special.expit(x)``: the attribute
access imports :mod:`scipy.special` the first time a function that needs it runs (what
that import costs: ``docs/performance.md``, "Small costs behind two design choices").
"""

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    return getattr(importlib.import_module("scipy.special"), name)
