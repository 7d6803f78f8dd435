"""Shared pieces of the nemesis: the environment faults act on and the error they raise."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol


class NemesisError(Exception):
    """A fault could not be applied (e.g. no live instance of the role)."""


class Instance(Protocol):
    """What a fault needs of a live role instance: its names and pid, and whether it is alive."""
    process: str
    role: str
    index: int
    pid: int | None

    def alive(self) -> bool: ...


@dataclass
class NemesisEnv:
    """What faults act on: the store path and the role instances.

    ``instances()`` lists every instance ever started (dead ones too); ``restart(role, index)``
    starts the next instance of a role's slot and returns it (``None``: restarts unavailable).
    """

    db_path: Path
    instances: Callable[[], list]  # -> list[Instance]
    restart: Callable[[str, int], object] | None = None


def targets(env: NemesisEnv, params: dict) -> list:
    """Live instances named by ``params['role']`` (and ``params['index']`` if given).

    Raises:
        NemesisError: no live instance matches.
    """
    role = params.get("role")
    index = params.get("index")
    found = [i for i in env.instances() if i.role == role and (index is None or i.index == index)
             and i.alive()]
    if not found:
        raise NemesisError(f"no live instance of role {role!r}"
                           + (f" index {index}" if index is not None else ""))
    return found
