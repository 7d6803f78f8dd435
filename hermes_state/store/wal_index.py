"""The wal-index header of a store, read through SQLite's own ``-shm`` descriptor (issue 24).

SQLite keeps the WAL's state in shared memory (``state.db-shm``, wal.c ``WalIndexHdr`` twice
at offsets 0 and 48, ``WalCkptInfo`` at 96, native byte order). The write path reads the first
100 bytes with ``os.pread`` on the descriptor SQLite itself holds (found by identity in
``/proc/self/fd``): nothing is opened or closed, so no POSIX lock of this process is dropped
(SPEC §4). Which write transactions need the checkpoint lock follows from it
(docs/decisions/0001-checkpoint-lock.md, "Amended 2026-12-05").
"""

from __future__ import annotations

import os
from typing import NamedTuple

from ..files import sqlite_format
from ..processes.generation import own_descriptors

WALINDEX_VERSION = sqlite_format.WALINDEX_VERSION


class WalIndex(NamedTuple):
    """What a write transaction needs of the wal-index header.

    Attributes:
        mx_frame: last valid frame of the WAL (``mxFrame``).
        n_backfill: frames already copied into the database (``nBackfill``).
        change: ``iChange``, incremented at every commit.
    """

    mx_frame: int
    n_backfill: int
    change: int

    @property
    def may_restart(self) -> bool:
        """True when a write transaction whose snapshot began now could restart the WAL: the
        whole log is backfilled (``nBackfill == mxFrame``) and not empty (wal.c
        ``walRestartLog`` restarts only for a reader of slot 0, taken by ``walTryBeginRead``
        exactly then, and only when ``nBackfill > 0``)."""
        return self.mx_frame > 0 and self.n_backfill >= self.mx_frame

    def as_list(self) -> list[int]:
        return [self.mx_frame, self.n_backfill]


def parse(data: bytes) -> WalIndex | None:
    """The header from the first bytes of ``-shm``
    (:func:`hermes_state.files.sqlite_format.wal_index_frames`); None when it is not a settled
    one (too short, the two copies differ, not initialised, another version)."""
    frames = sqlite_format.wal_index_frames(data)
    return None if frames is None else WalIndex(*frames)


def read(fd: int) -> WalIndex | None:
    """:func:`parse` of ``pread(fd, 136, 0)``; None on any error."""
    try:
        return parse(os.pread(fd, sqlite_format.WAL_INDEX_HEADER_SIZE, 0))
    except OSError:
        return None


class OwnShm:
    """A descriptor of one store's ``-shm`` in this process (the lowest on its inode, often
    SQLite's), found by identity in ``/proc/self/fd``, kept, and its identity checked at every
    read (another owner may close it and the number be reused)."""

    __slots__ = ("fd",)

    def __init__(self) -> None:
        self.fd: int | None = None

    def read(self, shm: tuple | None) -> WalIndex | None:
        """The header through that descriptor (``shm``: the recorded ``(st_dev, st_ino)``);
        None when none of ours has it or the header is not a settled one (looked for again
        next time)."""
        if self.fd is not None:
            # a descriptor number found earlier may have been closed by its owner and reused
            try:
                st = os.fstat(self.fd)
                if shm is None or (st.st_dev, st.st_ino) != tuple(shm):
                    self.fd = None
            except OSError:
                self.fd = None
        if self.fd is None:
            fds = own_descriptors(shm) if shm is not None else []
            if not fds:
                return None
            self.fd = fds[0]
        seen = read(self.fd)
        if seen is None:
            self.fd = None
        return seen
