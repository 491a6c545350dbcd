"""``python -m klpolicy`` runs the ``klpolicy`` command."""

import sys

from .cli import main

sys.exit(main())
