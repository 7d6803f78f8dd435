"""``python -m hermes_state`` = the ``hermes-state`` command (SPEC §15)."""

import sys

from .cli import main

sys.exit(main())
