"""Generation identity of a store (SPEC §10.1).

A *generation* is the triple of files a writer opened: ``(st_dev, st_ino)`` of ``state.db``,
``state.db-wal`` and ``state.db-shm``, plus the per-file token ``state_meta['db_file_generation']``
mirrored in the header's ``application_id``. The write path compares the recorded triple with the
paths (three ``stat`` calls: no directory scan on the hot path).

The capture of a retired generation is :mod:`hermes_state.processes.capture`.
"""

from __future__ import annotations

import os
import sys
import time
import zlib
from dataclasses import dataclass

Identity = tuple  # (st_dev, st_ino)


def identity(path: str | os.PathLike) -> Identity | None:
    """``(st_dev, st_ino)`` of ``path`` (not following a final symlink), or None if missing."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def application_id_for(token: object) -> int:
    """The signed 32-bit ``PRAGMA application_id`` that mirrors a generation token (SPEC §10.1).

    A token that is not text (a damaged ``state_meta`` row: NULL, a number, a blob) is mirrored
    through its ``repr``: deterministic, so every opener agrees, never a crash (issue 11.10).
    """
    text = token if isinstance(token, str) else repr(token)
    value = zlib.crc32(text.encode("utf-8", "surrogatepass")) & 0xFFFFFFFF
    value = value or 1  # 0 means "unset"
    return value - (1 << 32) if value >= (1 << 31) else value


@dataclass
class Generation:
    """The identities a writer recorded at open (SPEC §10.1)."""

    db: Identity | None
    wal: Identity | None
    shm: Identity | None
    application_id: int
    token: str

    @classmethod
    def read(cls, db_path: str | os.PathLike, application_id: int, token: str) -> "Generation":
        base = os.fspath(db_path)
        return cls(identity(base), identity(base + "-wal"), identity(base + "-shm"),
                   application_id, token)

    def as_dict(self) -> dict:
        return {"db": list(self.db or ()), "wal": list(self.wal or ()), "shm": list(self.shm or ()),
                "application_id": self.application_id, "token": self.token}


def diff(recorded: Generation, db_path: str | os.PathLike,
         live_application_id: int | None = None) -> tuple[str, str] | None:
    """Compare ``recorded`` with the files at the path now.

    Args:
        recorded: identities taken at open.
        db_path: the store path.
        live_application_id: ``PRAGMA application_id`` read through the connection, or None to skip.
    Returns:
        None when unchanged; else ``(kind, detail)`` where kind is ``"replaced_db"`` (main file has
        another inode or application_id) or ``"retired_wal"`` (``-wal``/``-shm`` missing or another
        inode), detail a one-line operator description.
    """
    base = os.fspath(db_path)
    now_db = identity(base)
    if now_db != recorded.db:
        return "replaced_db", f"state.db identity {_fmt(recorded.db)} -> {_fmt(now_db)}"
    if live_application_id is not None and live_application_id != recorded.application_id:
        return ("replaced_db",
                f"state.db application_id {recorded.application_id} -> {live_application_id} "
                "(same inode, other content: copied over)")
    parts = []
    for name, rec in (("state.db-wal", recorded.wal), ("state.db-shm", recorded.shm)):
        now = identity(f"{base}{name[len('state.db'):]}")
        if rec is not None and now != rec:
            parts.append(f"{name} identity {_fmt(rec)} -> {_fmt(now)}")
    if parts:
        return "retired_wal", "; ".join(parts)
    return None


#: A directory stamp is trusted only when the directory last changed at least this long before
#: the full check that recorded it: an entry change after that check then gets a later stamp,
#: whatever the filesystem's timestamp granularity (coarse clock ticks, 1-2 s on some).
DIR_SETTLE_NS = 2_000_000_000
#: The same margin on Linux for a directory whose timestamps show sub-millisecond digits (the
#: filesystem stores them finely): there a change is stamped from the kernel's coarse clock,
#: at most one tick (10 ms at Linux's lowest HZ, 100) behind the wall clock, so ten ticks
#: suffice (docs/decisions/0023-hot-path.md, "Amended").
FINE_SETTLE_NS = 100_000_000
_FINE_CLOCK = sys.platform.startswith("linux")


def settle_ns(stamp: tuple) -> int:
    """How old a directory stamp ``(dev, ino, mtime_ns, ctime_ns)`` must be to be kept:
    :data:`FINE_SETTLE_NS` for finely stored timestamps on Linux, else :data:`DIR_SETTLE_NS`."""
    if _FINE_CLOCK and (stamp[2] % 1_000_000 or stamp[3] % 1_000_000):
        return min(FINE_SETTLE_NS, DIR_SETTLE_NS)
    return DIR_SETTLE_NS


class DirStamp:
    """The store directory's ``(st_dev, st_ino, st_mtime_ns, st_ctime_ns)``: one ``stat`` that
    stands for the three ``lstat`` of :func:`diff` while it is unchanged (issue 24 item 4).

    Creating, unlinking, renaming or linking an entry updates the directory's mtime and ctime
    (POSIX), and a directory moved or replaced has another identity, so while the stamp equals
    the one taken before a clean full check, the three names still name the inodes that check
    saw. Only a stamp already :data:`DIR_SETTLE_NS` old at that check is kept (a change in the
    same clock tick as the last one could otherwise repeat the stamp; :func:`settle_ns`).
    docs/decisions/0023-hot-path.md gives the argument and its limits.
    """

    __slots__ = ("dir", "kept", "not_before")

    def __init__(self, db_path: str | os.PathLike) -> None:
        self.dir = os.path.dirname(os.fspath(db_path)) or "."
        self.kept: tuple | None = None
        #: wall-clock ns before which no stamp of this directory can be settled (the last one
        #: seen was not): :meth:`take` makes no ``stat`` until then, the caller's full check
        #: is needed anyway
        self.not_before = 0

    def take(self) -> tuple[tuple | None, int]:
        """``(stamp or None, wall-clock ns just before it was taken)``.

        None without a ``stat`` while no stamp could be kept yet: nothing is kept and the last
        stamp seen changed less than :data:`DIR_SETTLE_NS` ago (a later stamp changed later).
        """
        now = time.time_ns()
        if now < self.not_before and self.kept is None:
            return None, now
        try:
            st = os.stat(self.dir)
        except OSError:
            return None, now
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns), now

    def keep(self, stamp: tuple | None, taken_ns: int) -> None:
        """Keep ``stamp`` (taken before a full check that found no change) if it is settled;
        an unsettled one sets :attr:`not_before`."""
        if stamp is None:
            self.kept = None
            return
        changed = max(stamp[2], stamp[3])
        margin = settle_ns(stamp)
        if taken_ns - changed >= margin:
            self.kept = stamp
        else:
            self.kept = None
            self.not_before = changed + margin


def _fmt(ident: Identity | None) -> str:
    return "missing" if ident is None else f"dev={ident[0]} ino={ident[1]}"


def own_descriptors(ident: Identity | None, path_hint: str | os.PathLike | None = None
                    ) -> list[int]:
    """File descriptors of THIS process whose inode is ``ident`` (Linux; else []).

    Identity decides (``fstat`` of each descriptor). Only when a descriptor's identity cannot
    be read at all (a FUSE or network filesystem answers ``fstat`` of an unlinked file with
    ESTALE) does its ``/proc`` link text count: ``path_hint`` or ``path_hint (deleted)``; those
    are returned only when no descriptor matched by identity (fail closed, issue 22.1).
    """
    if ident is None or not os.path.isdir("/proc/self/fd"):
        return []
    hint = os.path.realpath(path_hint) if path_hint is not None else None
    out, by_text = [], []
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.fstat(int(name))
        except ValueError:
            continue
        except OSError:
            if hint is not None:
                try:
                    link = os.readlink(f"/proc/self/fd/{name}")
                except OSError:
                    continue
                if link in (hint, hint + " (deleted)"):
                    by_text.append(int(name))
            continue
        if (st.st_dev, st.st_ino) == tuple(ident):
            out.append(int(name))
    return out or by_text
