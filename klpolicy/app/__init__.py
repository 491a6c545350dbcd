"""The command line (``klpolicy solve | demo | plot``) and the demo it runs.

A leaf: it uses the library's public API and nothing in the library imports it.

* :mod:`~klpolicy.app.cli`: argument parsing and the subcommands.
* :mod:`~klpolicy.app.demo`: the worked example and the headline figures
  (matplotlib is imported only when figures are drawn).
* :mod:`~klpolicy.app.tables`: the tables both print.
"""

from . import cli, demo, tables

__all__ = ["cli", "demo", "tables"]
