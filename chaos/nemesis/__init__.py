"""Faults (SPEC §16.2): signals to role processes (``process.py``),
operations on the store's files (``files.py``) and maintenance commands (``commands.py``).

Each fault is a function ``fault(env, params) -> details`` registered in :data:`FAULTS`. The
runner records ``nemesis`` ``start`` before and ``done`` (with the details) or ``error`` after,
so checkers can place a fault in time. A fault acts on real processes and real files: SIGKILL is
a real ``kill -9``, deleting a sidecar is a real ``unlink``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .base import Instance, NemesisEnv, NemesisError, targets
from .commands import COMMAND_FAULTS
from .disk import DISK_FAULTS, release_balloon
from .files import FILE_FAULTS
from .process import HEALS as PROCESS_HEALS
from .process import SIGNAL_FAULTS

FAULTS: dict[str, Callable[[NemesisEnv, dict], dict]] = {**SIGNAL_FAULTS, **FILE_FAULTS,
                                                         **DISK_FAULTS, **COMMAND_FAULTS}

def _free_disk(env: NemesisEnv) -> dict:
    """Heal: delete the disk balloon of ``fill_disk`` if there is one (``freed_bytes``: None if
    there was none)."""
    return {"freed_bytes": release_balloon(Path(env.db_path).parent)}


#: Heal-phase actions (SPEC §16.3 "heal: SIGCONT all, free disk"), run in order by the runner;
#: each ``heal(env) -> details`` is recorded in the ``heal`` phase record. A fault module that
#: needs healing adds its own here.
HEALS: dict[str, Callable[[NemesisEnv], dict]] = {**PROCESS_HEALS, "free_disk": _free_disk}

__all__ = ["FAULTS", "HEALS", "release_balloon", "Instance", "NemesisEnv", "NemesisError",
           "targets"]
