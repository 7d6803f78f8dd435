"""Faults (SPEC §16.2): signals to role processes (``process.py``), operations on the store's
files (``files.py``), the disk (``disk.py``), maintenance commands (``commands.py``) and the
faulty filesystem's power cuts, torn writes, errno and stalls (``fs.py``).

Each fault is a :class:`~chaos.nemesis.base.Fault` value in :data:`FAULTS`: its parameters
(declared once), ``apply(env, params) -> details`` and its heal. The runner records ``nemesis``
``start`` before and ``done`` (with the details) or ``error`` after, so checkers can place a
fault in time. A fault acts on real processes and real files: SIGKILL is a real ``kill -9``,
deleting a sidecar is a real ``unlink``.
"""

from __future__ import annotations

from typing import Callable

from .base import Fault, Instance, NemesisEnv, NemesisError, RoleTarget, targets
from .commands import RUN
from .disk import DISK_FAULTS, release_balloon
from .files import DELETE_SIDECARS, FILE_FAULTS, FOREIGN_OPEN_CLOSE
from .fs import FS_FAULT_NAMES, FS_FAULTS
from .process import PROCESS_FAULTS

#: Every fault by name, in the order the scenario reference lists them.
FAULTS: dict[str, Fault] = {f.name: f for f in (
    DELETE_SIDECARS, *PROCESS_FAULTS[:4], RUN, *PROCESS_FAULTS[4:], *FILE_FAULTS, *DISK_FAULTS,
    FOREIGN_OPEN_CLOSE, *FS_FAULTS)}

#: Heal-phase actions (SPEC §16.3 "heal: SIGCONT all, free disk"), one per fault family that
#: leaves something to undo, in :data:`FAULTS` order; each ``heal(env) -> details`` is recorded
#: in the ``heal`` phase record.
HEALS: dict[str, Callable[[NemesisEnv], dict]] = dict(f.heal for f in FAULTS.values() if f.heal)

#: Faults aimed at the instances of a role (``role`` required, ``index`` optional).
ROLE_FAULTS = tuple(name for name, f in FAULTS.items() if f.aims_at_role)
#: Faults that damage the store's content (corruption errors after them are injected).
CORRUPTING_FAULTS = frozenset(name for name, f in FAULTS.items() if f.corrupting)

__all__ = ["CORRUPTING_FAULTS", "FAULTS", "FS_FAULT_NAMES", "HEALS", "ROLE_FAULTS", "Fault", "Instance",
           "NemesisEnv", "NemesisError", "RoleTarget", "release_balloon", "targets"]
