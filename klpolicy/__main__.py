"""``python -m klpolicy`` runs the ``klpolicy`` command."""

import sys

from .app.cli import main

sys.exit(main())
