"""Read-only opens of a store that a writable open would still migrate (SPEC §4; issue 22
item 6).

This code's reads assume schema 23 (``messages.active``, ``state_meta``, ``sessions.pinned``,
the usage table, ...). A ``mode=ro`` connection cannot add a column or run a data step, so a
read-only open of an older store (upstream 2..22, or one missing a table or column) reads a
**private migrated copy** instead:

1. the consistent image is copied with SQLite's online backup API from the ``mode=ro``
   connection (``immutable=1`` beside a retired WAL) into a fresh 0700 directory under the
   temporary directory (``TMPDIR``), after checking there is room for it (twice the store's
   size: the migration may grow it); the gateway's ``sessions/sessions.json`` goes with it (the
   v18 step reads it), read without following a link or blocking on a FIFO;
2. the copy is opened writable by the ordinary open pipeline (the same migration steps, in the
   same order, as a writable open of the store itself would run), then closed;
3. the handle reads the copy through ``mode=ro``; the directory is removed at close (and at
   process exit).

The store itself is never written: its bytes, its sidecars and ``PRAGMA data_version`` stay as
they were. What cannot be done is named: :class:`UnmigratedStoreError` says the version, what
the copy needs and what to do (free space, ``TMPDIR``, or a writable open that migrates the
store in place).
"""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import tempfile
import weakref
from pathlib import Path
from typing import Callable

from ..errors import HermesStateError
from ..files import atomic
from ..files.paths import sessions_json_path, sqlite_uri
from ..schema.shape import stored_version
from ..schema.tables import SCHEMA_VERSION, declared_columns
from .connection import BUSY_TIMEOUT_S, StoreConnection

log = logging.getLogger("hermes_state")

#: Room the copy needs in the temporary directory beyond twice the store's bytes.
COPY_SLACK_BYTES = 16 * 1024 * 1024
#: The gateway's sessions.json is read for the v18 step up to this size (as the step does).
SESSIONS_JSON_LIMIT = 64 * 1024 * 1024
#: ``state_meta`` key of the store's identity token (SPEC §10.1).
TOKEN_KEY = "db_file_generation"


class UnmigratedStoreError(HermesStateError, sqlite3.OperationalError):
    """A read-only open of a store this code would first migrate, where reading a migrated
    private copy is not possible (no room for it, or the migration of the copy failed).

    Attributes:
        schema_version: the store's version (None when unreadable); ``pending``: what a
            writable open would do.
    """

    def __init__(self, user_message: str, operator_detail: str = "", *,
                 schema_version: int | None = None, pending: list[str] | None = None) -> None:
        self.schema_version = schema_version
        self.pending = list(pending or [])
        super().__init__(user_message, operator_detail)


def pending_for_reads(conn: sqlite3.Connection) -> list[str]:
    """What a writable open would change that this code's reads depend on; ``[]`` = the store
    can be read as it is.

    A version below this code's, or a table or column this code declares that the store lacks.
    (Work a writable open does that reads do not see -- the generation token, FTS layout flags,
    NULL ``active`` values, which every reader treats as 1 -- is not listed.)
    """
    version, _rows = stored_version(conn)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    if version is None:
        if not names & {"sessions", "messages"}:
            return ["create the store's tables"]
        return ["infer the schema version (schema_version is empty or unreadable)"]
    if version < SCHEMA_VERSION:
        return [f"migrate schema {version} -> {SCHEMA_VERSION}"]
    out = []
    for table, cols in declared_columns().items():
        if table not in names:
            out.append(f"create table {table}")
            continue
        live = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        out += [f"add column {table}.{c}" for c, _ in cols if c not in live]
    return out


def _store_bytes(db_path: Path) -> int:
    total = 0
    for suffix in ("", "-wal"):
        try:
            total += os.lstat(f"{db_path}{suffix}").st_size
        except OSError:
            pass
    return total


def _copy_sessions_json(db_path: Path, work: Path) -> None:
    """The gateway's ``sessions.json`` beside the copy (never through a link, never a FIFO)."""
    source = sessions_json_path(db_path)
    try:
        data = atomic.read_regular(source, limit=SESSIONS_JSON_LIMIT)
    except FileNotFoundError:
        return
    except (OSError, ValueError) as exc:
        log.warning("read-only copy of %s: %s not used (%s); gateway metadata not back-filled "
                    "in the copy", db_path, source, exc)
        return
    atomic.ensure_dir(work / "sessions")
    atomic.write_file(work / "sessions" / "sessions.json", data)


def _token(conn: sqlite3.Connection) -> str | None:
    try:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (TOKEN_KEY,)).fetchone()
    except sqlite3.OperationalError:  # no state_meta yet (schema < 12)
        return None
    return None if row is None else row[0]


def _keep_identity(copy: Path, token: str | None) -> None:
    """The copy shows the store's own identity token (or none), never the one its private
    migration minted: a read-only view must not invent ``state_meta['db_file_generation']``."""
    conn = sqlite3.connect(str(copy), isolation_level=None)
    try:
        if token is None:
            conn.execute("DELETE FROM state_meta WHERE key = ?", (TOKEN_KEY,))
        else:
            conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                         (TOKEN_KEY, token))
    finally:
        conn.close()


def _fail(db_path: Path, version: int | None, pending: list[str], why: str,
          fix: str) -> UnmigratedStoreError:
    return UnmigratedStoreError(
        f"cannot read {db_path} read-only: it is at schema {version} and this code reads schema "
        f"{SCHEMA_VERSION}, so a read-only command reads a migrated private copy of it, and "
        f"{why}. The store itself was not changed.",
        f"{fix}; or let a writable open migrate the store in place (the agent, or any writing "
        f"command such as `hermes-state sessions replay-spool`): pending: {'; '.join(pending)}",
        schema_version=version, pending=pending)


def open_copy(db_path: Path, source: sqlite3.Connection, pending: list[str], *,
              open_writable: Callable[[Path], StoreConnection]) -> StoreConnection:
    """Copy, migrate and open read-only (module docstring); ``source`` is closed here.

    Args:
        db_path: the store (never written).
        source: its ``mode=ro`` connection (closed here).
        pending: :func:`pending_for_reads` of it, for the handle and the messages.
        open_writable: the writable open pipeline (``opening.open_connection``), run on the copy.
    Returns:
        A read-only :class:`~hermes_state.store.connection.StoreConnection` on the copy whose
        ``db_path`` is the store's and whose ``migrated_copy`` names what was migrated.
    Raises:
        UnmigratedStoreError: no room for the copy, or migrating the copy failed.
    """
    version = stored_version(source)[0]
    need = 2 * _store_bytes(db_path) + COPY_SLACK_BYTES
    work = Path(tempfile.mkdtemp(prefix="hermes-state-ro-"))
    try:
        os.chmod(work, 0o700)
        free = shutil.disk_usage(work).free
        if free < need:
            raise _fail(db_path, version, pending,
                        f"the temporary directory {work.parent} has {free // (1 << 20)} MiB free "
                        f"of the {need // (1 << 20)} MiB the copy needs",
                        "free space there or point TMPDIR at a directory with room")
        token = _token(source)
        copy = work / "state.db"
        dest = sqlite3.connect(str(copy), isolation_level=None)
        try:
            source.backup(dest)
        finally:
            dest.close()
            source.close()
        _copy_sessions_json(db_path, work)
        try:
            open_writable(copy).close()  # the ordinary pipeline: the same steps, in order
        except (HermesStateError, sqlite3.Error, OSError) as exc:
            raise _fail(db_path, version, pending,
                        f"migrating that copy failed ({type(exc).__name__}: "
                        f"{str(exc).splitlines()[0] if str(exc) else exc})",
                        f"`hermes-state sessions recover {db_path} --inspect-only` shows what "
                        "is readable") from None
        _keep_identity(copy, token)
        conn = sqlite3.connect(sqlite_uri(copy, mode="ro"), uri=True, timeout=BUSY_TIMEOUT_S,
                               isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
    except BaseException:
        source.close()
        shutil.rmtree(work, ignore_errors=True)
        raise
    sc = StoreConnection(db_path, conn, read_only=True)
    sc.migrated_copy = {"schema_version": version, "pending": pending, "directory": str(work)}
    # Removed at close, or at process exit for a handle never closed.
    sc.on_close(weakref.finalize(sc, shutil.rmtree, str(work), True))
    log.info("%s is at schema %s: read-only reads go to a migrated private copy in %s",
             db_path, version, work)
    return sc
