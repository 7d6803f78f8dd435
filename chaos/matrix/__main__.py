"""``python -m chaos.matrix``: the schema-migration matrix alone (SPEC §16.6)."""

import sys

from .driver import main

sys.exit(main())
