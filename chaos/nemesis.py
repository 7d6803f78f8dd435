"""Faults (SPEC §16.2): signals to role processes and file operations on the store.

Each fault is a function ``fault(env, params) -> details`` registered in :data:`FAULTS`. The
runner records ``nemesis`` ``start`` before and ``done`` (with the details) or ``error`` after,
so checkers can place a fault in time. A fault acts on real processes and real files: SIGKILL is
a real ``kill -9``, deleting a sidecar is a real ``unlink``.
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol


class NemesisError(Exception):
    """A fault could not be applied (e.g. no live instance of the role)."""


class Instance(Protocol):
    process: str
    role: str
    index: int
    pid: int | None

    def alive(self) -> bool: ...


@dataclass
class NemesisEnv:
    """What faults act on: the store path and the live role instances."""

    db_path: Path
    instances: Callable[[], list]  # -> list[Instance]


def _targets(env: NemesisEnv, params: dict) -> list:
    role = params.get("role")
    index = params.get("index")
    found = [i for i in env.instances() if i.role == role and (index is None or i.index == index)
             and i.alive()]
    if not found:
        raise NemesisError(f"no live instance of role {role!r}"
                           + (f" index {index}" if index is not None else ""))
    return found


def _signal(sig: int) -> Callable[[NemesisEnv, dict], dict]:
    def fault(env: NemesisEnv, params: dict) -> dict:
        targets = _targets(env, params)
        sent = []
        for inst in targets:
            try:
                os.kill(inst.pid, sig)
                sent.append({"process": inst.process, "pid": inst.pid})
            except ProcessLookupError:
                pass
        if not sent:
            raise NemesisError(f"every instance of {params.get('role')!r} exited before the signal")
        return {"signal": signal.Signals(sig).name, "role": params.get("role"),
                "pids": [s["pid"] for s in sent], "processes": [s["process"] for s in sent]}
    return fault


def delete_sidecars(env: NemesisEnv, params: dict) -> dict:
    """``unlink`` the store's ``-wal`` and/or ``-shm`` (the user's ``rm state.db-wal``)."""
    deleted, missing = [], []
    for which in params.get("files", ["wal", "shm"]):
        path = Path(f"{env.db_path}-{which}")
        try:
            os.unlink(path)
            deleted.append(path.name)
        except FileNotFoundError:
            missing.append(path.name)
    if not deleted:
        raise NemesisError(f"nothing to delete: {', '.join(missing)} did not exist")
    return {"files": deleted, "missing": missing}


FAULTS: dict[str, Callable[[NemesisEnv, dict], dict]] = {
    "delete_sidecars": delete_sidecars,
    "kill": _signal(signal.SIGKILL),
    "terminate": _signal(signal.SIGTERM),
    "stop": _signal(signal.SIGSTOP),
    "cont": _signal(signal.SIGCONT),
}
