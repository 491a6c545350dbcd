"""The module path ``klpolicy.torch.targets`` of the layout before the re-layout: it is
``klpolicy.estimators.targets`` itself (the same module object), so every name stays where it was."""

import importlib as _importlib
import sys as _sys

_sys.modules[__name__] = _importlib.import_module("klpolicy.estimators.targets")
