"""The module path ``klpolicy.token_trees`` of the layout before the re-layout: it is
``klpolicy.sequences.trees`` itself (the same module object), so every name stays where it was."""

import importlib as _importlib
import sys as _sys

_sys.modules[__name__] = _importlib.import_module("klpolicy.sequences.trees")
