"""``python -m seqpart.solver``: the ``seqpart`` command line."""

import sys

from .cli import main

sys.exit(main())
