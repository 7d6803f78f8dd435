"""Opening a store's files through SQLite without blocking (SPEC §1, §4; issue 22 item 9).

SQLite opens ``state.db`` (and its ``-wal``/``-shm``) itself, with a plain ``open(2)``: a FIFO
there blocks that open for ever (``mode=ro`` opens ``O_RDONLY``), a device is read as a
database, a symlink sends the store's sidecars elsewhere. So every ``sqlite3.connect`` of a path
the user or another process controls goes through this module, which checks the three files
first with ``lstat`` (never an ``open``: closing a descriptor of a store this process holds would
drop its POSIX locks, SPEC §4) and refuses anything but a regular file or nothing, by name.

Files the store reads or writes itself (manifests, spool lines, locks, exports, reports) go
through :mod:`hermes_state.files.atomic` (``open_regular``, ``read_regular``, ``open_lock``,
``open_append``, ``create_file``): ``O_NONBLOCK | O_NOFOLLOW`` and ``fstat`` on the descriptor.
``tests/test_raw_opens.py`` walks the code and fails on any other open of a path.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

from .atomic import UnsafePathError, checked, describe_mode
from .paths import sqlite_uri

__all__ = ["STORE_SUFFIXES", "refuse_special_store_files", "connect_ro"]

#: The files SQLite may open for one store (``-journal`` in rollback mode).
STORE_SUFFIXES = ("", "-wal", "-shm", "-journal")


def refuse_special_store_files(db_path: str | os.PathLike, *,
                               what: str = "open the session store") -> None:
    """Refuse a link, FIFO, socket, device or directory at the store's paths (absent is fine).

    Checked with ``lstat`` only (nothing is opened).

    Args:
        db_path: the ``state.db`` path (its sidecars are derived).
        what: the action refused, for the message (``"open the session store"``).
    Raises:
        UnsafePathError: naming the file, what it is, and the fix.
    """
    for suffix in STORE_SUFFIXES:
        p = Path(f"{os.fspath(db_path)}{suffix}")
        try:
            st = os.lstat(p)
        except (FileNotFoundError, NotADirectoryError):
            continue
        except OSError as exc:  # ENAMETOOLONG, EACCES on a parent: named, never a traceback
            raise UnsafePathError(f"refusing to {what}: cannot inspect {p} ({exc.strerror}).",
                                  "check the path and the permissions of its directories",
                                  path=str(p)) from None
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(
                f"refusing to {what}: {p} is {describe_mode(st.st_mode)}, not a regular file.",
                "the files state.db, state.db-wal and state.db-shm must be plain files in one "
                "directory (SPEC §1); replace it with the real file or move it away.",
                path=str(p))
        if suffix and st.st_nlink > 1:
            # SQLite rewrites a WAL, a wal-index and a journal in place: through a hard link it
            # would write into another file (the main file may be hard-linked: rsnapshot-style
            # backups do that, and it is the same database).
            raise UnsafePathError(
                f"refusing to {what}: {p} has {st.st_nlink} hard links, so SQLite would write "
                "into another file through it.",
                f"stop every process using the store, then remove the other links (find "
                f"{p.parent} -samefile {p}) or move {p} away; never delete a -wal that holds "
                "data: copy it first",
                path=str(p))
        checked(p)


def connect_ro(db_path: str | os.PathLike, *, timeout: float = 1.0, immutable: bool = False,
               row_factory=None, check_same_thread: bool = True) -> sqlite3.Connection:
    """A ``mode=ro`` connection to an existing store, after :func:`refuse_special_store_files`.

    Never creates the store, never blocks on a FIFO planted at any of its files.

    Args:
        timeout: busy timeout in seconds.
        immutable: ``immutable=1`` (read the main file alone; touch neither sidecar).
        row_factory: set on the connection (``sqlite3.Row``) when given.
        check_same_thread: as ``sqlite3.connect``.
    Raises:
        UnsafePathError: a special file at a store path.
        sqlite3.Error: SQLite could not open it (absent: ``unable to open database file``).
    """
    refuse_special_store_files(db_path, what="read the session store")
    params = {"mode": "ro"}
    if immutable:
        params["immutable"] = "1"
    conn = sqlite3.connect(sqlite_uri(db_path, **params), uri=True, timeout=timeout,
                           isolation_level=None, check_same_thread=check_same_thread)
    if row_factory is not None:
        conn.row_factory = row_factory
    return conn
