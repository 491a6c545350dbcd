"""The module path ``klpolicy.reward_ceiling`` of the layout before the re-layout: it is
``klpolicy.sequences.ceiling`` itself (the same module object), so every name stays where it was."""

import importlib as _importlib
import sys as _sys

_sys.modules[__name__] = _importlib.import_module("klpolicy.sequences.ceiling")
