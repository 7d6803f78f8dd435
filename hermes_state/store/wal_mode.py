"""Switching a connection to WAL, with the fallback for filesystems that refuse it
(SPEC §4; UPSTREAM_API §2.1 ``apply_wal_with_fallback``).

Network and FUSE filesystems (NFS, SMB, some FUSE mounts) cannot share the ``-shm`` index:
SQLite answers ``PRAGMA journal_mode=WAL`` with "locking protocol" or "not authorized". Then the
store falls back to ``journal_mode=DELETE`` with one warning per database label, unless the file
is already in WAL mode on disk: a live WAL store is never downgraded (its other users would lose
their WAL), the error is raised instead. The on-disk mode is read from the file header (bytes
18-19 = 2 in WAL mode) through a descriptor SQLite already holds (``os.pread``), so no
descriptor is opened or closed beside a live connection of this process (SPEC §4).
"""

from __future__ import annotations

import logging
import os
import sqlite3
import sys
import threading

from ..files import atomic
from ..processes.generation import own_descriptors

log = logging.getLogger("hermes_state")

_REFUSALS = ("locking protocol", "not authorized")
_warned: set[str] = set()
_warned_lock = threading.Lock()


def _disk_is_wal(conn: sqlite3.Connection) -> bool:
    """True when the database file's header says WAL mode (unknown ⇒ True: never downgrade)."""
    try:
        path = next((r[2] for r in conn.execute("PRAGMA database_list") if r[1] == "main"), "")
    except sqlite3.Error:
        return True
    if not path:
        return False  # in-memory / temporary
    try:
        st = os.stat(path)
    except OSError:
        return False  # not created yet
    if st.st_size < 100:
        return False
    fds = own_descriptors((st.st_dev, st.st_ino))
    try:
        if fds:
            header = os.pread(fds[0], 20, 0)
        else:
            # No descriptor of this process on the file: opening and closing one here cannot
            # drop a POSIX lock this process holds (it holds none on this inode).
            with atomic.open_regular(path) as fh:  # never a FIFO or a device
                header = fh.read(20)
    except OSError:
        return True
    return len(header) >= 20 and header[18] == 2 and header[19] == 2


def _darwin_pragmas(conn: sqlite3.Connection) -> None:
    if sys.platform == "darwin":
        conn.execute("PRAGMA checkpoint_fullfsync=1")
        conn.execute("PRAGMA synchronous=FULL")


def apply_wal_with_fallback(conn: sqlite3.Connection, *, db_label: str = "state.db") -> str:
    """Put ``conn``'s database in WAL mode, or DELETE mode where the filesystem refuses WAL.

    Probes ``PRAGMA journal_mode`` first (already ``wal``: nothing is set). On macOS also
    ``checkpoint_fullfsync=1`` and ``synchronous=FULL``.

    Args:
        conn: an open connection.
        db_label: names the database in the once-per-label warning.
    Returns:
        ``"wal"`` or ``"delete"``.
    Raises:
        sqlite3.OperationalError: any other failure, or a refusal on a file already in WAL mode.
    """
    try:
        if str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower() == "wal":
            _darwin_pragmas(conn)
            return "wal"
    except sqlite3.OperationalError:
        pass
    try:
        mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
    except sqlite3.DatabaseError as exc:  # "not authorized" is a plain DatabaseError
        if not any(word in str(exc).lower() for word in _REFUSALS) or _disk_is_wal(conn):
            raise
        conn.execute("PRAGMA journal_mode=DELETE")
        with _warned_lock:
            first = db_label not in _warned
            _warned.add(db_label)
        if first:
            log.warning("%s: this filesystem refused WAL mode (%s); using journal_mode=DELETE "
                        "(one writer at a time). Keep HERMES_HOME on a local disk for WAL.",
                        db_label, exc)
        _darwin_pragmas(conn)
        return "delete"
    _darwin_pragmas(conn)
    return "wal" if mode == "wal" else mode
