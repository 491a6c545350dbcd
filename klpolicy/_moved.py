"""Module paths of the layout before the re-layout, kept in one table.

``import klpolicy.cli`` still works, and gives the very module object that lives at the new
home (``klpolicy.app.cli``), with a :class:`DeprecationWarning` that names the new home. The
old paths were never in a release; they stay importable for code written against the
development tree, and go in a later release. A path is one row of :data:`MOVED`, not a file.

>>> import sys, warnings
>>> _ = sys.modules.pop("klpolicy.token_trees", None)  # not yet imported in this session
>>> with warnings.catch_warnings(record=True) as caught:
...     warnings.simplefilter("always")
...     import klpolicy.token_trees as old
>>> import klpolicy.sequences.trees as new
>>> old is new
True
>>> print(caught[0].message)
klpolicy.token_trees moved to klpolicy.sequences.trees; import it from there
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings

#: old module path -> its home (the same module object is returned for both).
MOVED = {
    "klpolicy.best_of_n_frontier": "klpolicy.best_of_n.frontier",
    "klpolicy.cli": "klpolicy.app.cli",
    "klpolicy.closed_form": "klpolicy.core.closed_form",
    "klpolicy.demo": "klpolicy.app.demo",
    "klpolicy.divergences": "klpolicy.core.divergences",
    "klpolicy.reward_ceiling": "klpolicy.sequences.ceiling",
    "klpolicy.token_kl_diagnostics": "klpolicy.sequences.diagnostics",
    "klpolicy.token_trees": "klpolicy.sequences.trees",
    "klpolicy.torch.targets": "klpolicy.estimators.targets",
}


class _MovedLoader(importlib.abc.Loader):
    """Loads an old path as its home module: no second module object, no second file."""

    def create_module(self, spec):
        home = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {home}; import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        module = importlib.import_module(home)
        self._home_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # The home module is already executed. importlib stamped the old path's spec on it:
        # give it back its own, so that the module still knows where it lives.
        module.__spec__ = self._home_spec


class _MovedFinder(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED` (and nothing else)."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.machinery.ModuleSpec(fullname, _MovedLoader())


def install() -> None:
    """Put the finder on ``sys.meta_path`` once (``import klpolicy`` calls it)."""
    if not any(isinstance(f, _MovedFinder) for f in sys.meta_path):
        # first: a stale file of an old path (an older install) must not shadow the table
        sys.meta_path.insert(0, _MovedFinder())
