"""The module path ``klpolicy.best_of_n_frontier`` of the layout before the re-layout: it is
``klpolicy.best_of_n.frontier`` itself (the same module object), so every name stays where it was."""

import importlib as _importlib
import sys as _sys

_sys.modules[__name__] = _importlib.import_module("klpolicy.best_of_n.frontier")
