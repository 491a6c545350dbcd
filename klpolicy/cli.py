"""The module path ``klpolicy.cli`` of the layout before the re-layout: it is
``klpolicy.app.cli`` itself (the same module object), so every name stays where it was."""

import importlib as _importlib
import sys as _sys

_sys.modules[__name__] = _importlib.import_module("klpolicy.app.cli")
