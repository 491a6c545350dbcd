"""Every public name importable from the flat package is importable where it was.

``tests/data/public_names.json`` was written from the flat package (commit ea69a4a): each
module's ``__all__`` plus its public submodules. Moving code must never break an import
path a user has; a name that leaves must leave through a deprecation, not a failure.
"""

from __future__ import annotations

import importlib
import json
import warnings
from pathlib import Path

import pytest

NAMES = json.loads((Path(__file__).parent / "data" / "public_names.json").read_text())
OPTIONAL = {"klpolicy.plotting": "matplotlib", "klpolicy.torch": "torch"}
OPTIONAL |= {m: "hypothesis" for m in ("klpolicy.testing", "klpolicy.testing.strategies")}


@pytest.mark.parametrize("module", sorted(NAMES))
def test_every_name_is_still_importable_there(module):
    if module in OPTIONAL:
        pytest.importorskip(OPTIONAL[module])
    mod = importlib.import_module(module)
    missing = []
    for name in NAMES[module]:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            if not hasattr(mod, name):
                missing.append(name)
    assert missing == [], f"{module} lost {missing}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        exec(f"from {module} import {', '.join(NAMES[module])}", {})


def test_short_module_paths_are_the_area_modules():
    import klpolicy.calibration
    import klpolicy.diversity
    import klpolicy.overoptimization
    import klpolicy.retention

    from klpolicy.behaviour import calibration, diversity, retention
    from klpolicy.best_of_n import overoptimization

    assert klpolicy.diversity is diversity and klpolicy.calibration is calibration
    assert klpolicy.retention is retention and klpolicy.overoptimization is overoptimization


def test_moved_torch_names_warn_and_point_home():
    pytest.importorskip("torch")
    import klpolicy.estimators
    import klpolicy.torch
    import klpolicy.trust_region

    for name, home in [
        ("grpo_fixed_point", klpolicy.estimators),
        ("token_k3_fixed_point", klpolicy.estimators),
        ("trust_region_step", klpolicy.trust_region),
        ("ppo_clip_step", klpolicy.trust_region),
    ]:
        with pytest.warns(DeprecationWarning, match=f"import it from {home.__name__}"):
            assert getattr(klpolicy.torch, name) is getattr(home, name)


def test_every_module_path_of_the_old_layout_still_imports():
    # `import klpolicy.cli` failed after the re-layout. The list is the
    # public module paths of the tree before the re-layout commit (3a199fe~1):
    # git ls-tree -r --name-only 3a199fe~1 klpolicy (*.py, no private names), less
    # klpolicy.conftest (pytest's doctest configuration, never an import path; it now
    # lives beside the package). A path whose module moved warns, naming the new home.
    import importlib
    import pathlib
    import sys
    import warnings

    from klpolicy._moved import MOVED

    paths = (pathlib.Path(__file__).parent / "data" / "old_module_paths.txt").read_text().split()
    assert "klpolicy.cli" in paths and len(paths) > 20
    assert set(MOVED) <= set(paths)
    for name in paths:
        if name.startswith(("klpolicy.torch", "klpolicy.plotting", "klpolicy.testing")):
            pytest.importorskip(
                {"klpolicy.torch": "torch", "klpolicy.plotting": "matplotlib"}.get(
                    ".".join(name.split(".")[:2]), "hypothesis"
                )
            )
        if name in MOVED:
            sys.modules.pop(name, None)  # an earlier test of this worker may have imported it
            with pytest.warns(DeprecationWarning, match=f"{name} moved to {MOVED[name]}; "):
                module = importlib.import_module(name)
            assert module is importlib.import_module(MOVED[name])
            assert module.__spec__.name == MOVED[name]  # the home module keeps its own spec
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("error", DeprecationWarning)
                importlib.import_module(name)
    import klpolicy.app.cli

    with pytest.warns(DeprecationWarning, match="klpolicy.app.cli"):
        sys.modules.pop("klpolicy.cli", None)
        import klpolicy.cli

    assert klpolicy.cli is klpolicy.app.cli


def test_the_top_level_is_short():
    # one folder per part, the package's three files and the table of moved paths
    import pathlib

    import klpolicy

    top = sorted(p.name for p in pathlib.Path(klpolicy.__file__).parent.iterdir())
    top = [n for n in top if n != "__pycache__"]
    files = [n for n in top if "." in n]
    assert files == ["__init__.py", "__main__.py", "_moved.py", "py.typed"], files
