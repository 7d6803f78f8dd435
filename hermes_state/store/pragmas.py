"""The connection's settings: pragmas at open, file modes, no checkpoint at close (SPEC §4, §10.5).

Owns what is set on a ``sqlite3`` connection of a store and nothing else: the write path that
uses it is :mod:`hermes_state.store.connection`, the open sequence :mod:`hermes_state.store.opening`.
"""

from __future__ import annotations

import ctypes
import logging
import os
import sqlite3
from pathlib import Path
from typing import Any, Callable

from .. import failpoints
from ..schema.shape import keeps_journal_mode

log = logging.getLogger("hermes_state")

JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024  # bytes
SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE = 1006


def apply_pragmas(conn: sqlite3.Connection, synchronous: str, db_path: Path, *, exposed: bool,
                  retry: Callable[[Callable[[], Any]], Any]) -> str:
    """journal_mode=WAL (unless a newer release chose otherwise), foreign keys, synchronous,
    journal_size_limit; no automatic checkpoint on an SQLite exposed to the WAL-reset race
    (SPEC §4, issue 12). ``retry`` runs a statement again on lock errors. Returns the journal
    mode in lower case. Raises ValueError for a ``synchronous`` other than NORMAL/FULL, and the
    last lock error when the store stayed locked through every retry (the caller names it)."""
    if synchronous.upper() not in ("NORMAL", "FULL"):
        raise ValueError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")

    def decide() -> tuple[str, bool]:
        # The probe and the stored version are read as one retried unit: a lock error on
        # either is retried, never read as "no version" (issue 23: that switched a newer
        # release's rollback-journal store to WAL under the WAL-reset race).
        found = conn.execute("PRAGMA journal_mode").fetchone()[0]
        failpoints.hit("open.journal_probed")
        return found, found.lower() == "wal" or keeps_journal_mode(conn, found, db_path)

    mode, keep = retry(decide)
    if not keep:
        mode = retry(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
        if mode.lower() != "wal":
            log.warning("this filesystem refused WAL mode for %s; using journal_mode=%s "
                        "(one writer at a time, readers block during commits)",
                        db_path, mode)
    conn.execute("PRAGMA foreign_keys=ON")
    if exposed:
        # Every checkpoint goes through checkpoint() and its lock: none from SQLite's
        # automatic checkpoint inside a COMMIT (issue 12).
        conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
    conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")
    return mode.lower()


def tighten_modes(db_path: Path) -> None:
    """chmod 0600 on the path (never open+close a descriptor of a live store, SPEC §1)."""
    for suffix in ("", "-wal", "-shm"):
        p = f"{db_path}{suffix}"
        try:
            if os.stat(p).st_mode & 0o077:
                os.chmod(p, 0o600)
        except OSError:
            pass


def disable_checkpoint_on_close(conn: sqlite3.Connection, db_path: str) -> bool:
    """Make ``conn.close()`` skip SQLite's close-time checkpoint (SPEC §10.5).

    Python >= 3.12: ``Connection.setconfig``. Python 3.11: ``sqlite3_db_config`` through ctypes on
    the ``sqlite3*`` the connection object carries right after its object header, verified by
    asking SQLite for the database filename of that pointer first.

    Returns:
        True when the option is set and read back as set.
    """
    if hasattr(conn, "setconfig"):
        try:
            conn.setconfig(SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, True)  # type: ignore[attr-defined]
            return bool(conn.getconfig(SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE))  # type: ignore[attr-defined]
        except (sqlite3.Error, AttributeError):
            return False
    try:
        import _sqlite3

        lib = ctypes.CDLL(_sqlite3.__file__)
        ptr = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
        if not ptr:
            return False
        lib.sqlite3_db_filename.restype = ctypes.c_char_p
        lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        name = lib.sqlite3_db_filename(ptr, b"main")
        if name is None or os.path.realpath(name.decode()) != os.path.realpath(db_path):
            return False
        out = ctypes.c_int(0)
        lib.sqlite3_db_config(ctypes.c_void_p(ptr), ctypes.c_int(SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE),
                              ctypes.c_int(1), ctypes.byref(out))
        return out.value == 1
    except (OSError, AttributeError, ValueError):
        return False
