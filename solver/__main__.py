"""``python -m seqpart.solver``: the ``seqpart`` command line."""

import sys

from seqpart.solver.cli import main

sys.exit(main())
