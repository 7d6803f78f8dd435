"""Disk faults (SPEC §16.2): ``fill_disk`` / ``free_disk`` on the store's own small tmpfs.

The scenario puts the home on a tmpfs (``store: {tmpfs: 16M}``, mounted by the runner, see
:mod:`chaos.fixtures`). ``fill_disk`` writes a balloon file ``<home>/.chaos-balloon`` until the
filesystem returns ENOSPC, then gives back ``leave`` bytes; SQLite then meets SQLITE_FULL when a
commit must grow the WAL or a checkpoint must grow ``state.db``. ``free_disk`` deletes the balloon.
The heal phase calls :func:`release_balloon` so no run ends with a full disk.
Refuses (``NemesisError``) when the home is not a mount point: filling the machine's real disk
is never an option.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from ..params import param
from ..store import BALLOON_NAME
from .base import Fault, NemesisEnv, NemesisError, NoParams

CHUNK = 64 * 1024


def balloon_path(home: Path) -> Path:
    """``<home>/.chaos-balloon``."""
    return Path(home) / BALLOON_NAME


def _free(home: Path) -> int:
    st = os.statvfs(home)
    return st.f_bavail * st.f_frsize


@dataclass(frozen=True, kw_only=True)
class FillParams:
    """Fill the store's tmpfs with a balloon file."""

    leave: int = param(0, "Bytes left free on the store's tmpfs.", minimum=0)


def fill_disk(env: NemesisEnv, params: FillParams) -> dict:
    """Fill the store's tmpfs with the balloon, leaving ``leave`` bytes (default 0) free.

    Returns: ``{"balloon", "balloon_bytes", "free_before", "free_after", "leave"}`` (bytes).
    Raises:
        NemesisError: the home is not a mount point (no ``store: {tmpfs: ...}``).
    """
    home = Path(env.db_path).parent
    if not os.path.ismount(home):
        raise NemesisError(f"{home} is not a mount point: fill_disk needs the store on its own "
                           "tmpfs (store: {tmpfs: 16M})")
    leave = params.leave
    free_before = _free(home)
    path = balloon_path(home)
    block = b"\0" * CHUNK
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for chunk in (block, b"\0"):  # big writes, then byte by byte into the last page
            while True:
                try:
                    os.write(fd, chunk)  # a short write is followed by one that hits ENOSPC
                except OSError as exc:
                    if exc.errno != errno.ENOSPC:
                        raise
                    break
        size = os.fstat(fd).st_size
        if leave:
            os.ftruncate(fd, max(0, size - leave))
    finally:
        os.close(fd)
    return {"balloon": str(path), "balloon_bytes": path.stat().st_size, "leave": leave,
            "free_before": free_before, "free_after": _free(home)}


def release_balloon(home: Path) -> int | None:
    """Delete the balloon if there is one (heal phase, SPEC §16.3). Returns its bytes or None."""
    path = balloon_path(home)
    try:
        size = path.stat().st_size
        path.unlink()
    except FileNotFoundError:
        return None
    return size


def free_disk(env: NemesisEnv, params: NoParams) -> dict:
    """Delete the balloon. Returns ``{"freed_bytes", "free_after"}``.

    Raises:
        NemesisError: there is no balloon (nothing was filled).
    """
    home = Path(env.db_path).parent
    freed = release_balloon(home)
    if freed is None:
        raise NemesisError(f"no balloon at {balloon_path(home)}: the disk was not filled")
    return {"freed_bytes": freed, "free_after": _free(home)}


def _heal(env: NemesisEnv) -> dict:
    """Heal: delete the balloon if there is one (``freed_bytes``: None if there was none)."""
    return {"freed_bytes": release_balloon(Path(env.db_path).parent)}


DISK_FAULTS = (
    Fault("fill_disk", FillParams, fill_disk, "a balloon file fills the store's tmpfs",
          heal=("free_disk", _heal)),
    Fault("free_disk", NoParams, free_disk, "delete the balloon of fill_disk"),
)
