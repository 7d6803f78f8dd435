"""Background FTS back-fill after a migration that deferred it (SPEC §2.4, §3, §17).

A big legacy store (more than :data:`hermes_state.store.migrations.DEFER_FTS_ROWS` messages) does not
re-index its FTS tables inside the migrating open: the v10/v11 step switches it to the v23
external-content layout with the §2.4 rebuild markers (P = 0, H = max id) and sets
``state_meta['fts_backfill'] = 'auto'`` (see :mod:`hermes_state.store.migrations`). Every writable open
of such a store then starts one :class:`BackfillThread`, which indexes ``(P, H]`` in chunks of
500 rows, one write transaction per chunk through the normal write path (BEGIN IMMEDIATE,
jittered retry, generation check), P advanced in the same transaction
(:func:`hermes_state.fts.switch.rebuild_chunk`), with a short pause between chunks so application
writes interleave. The transaction that reaches H deletes the markers; then the renamed legacy
tables (``retired_messages_fts*``) are freed 500 shadow rows per transaction and dropped; the
last transaction deletes the ``fts_backfill`` key. Meanwhile search LIKE-scans ``(P, H]``
(SPEC §2.4), so no message is unfindable.

Crash-safe and resumable: a kill at any point leaves P at the last committed chunk; the next
writable open (or ``sessions optimize-storage``) continues from there. ``close()`` stops the
thread between chunks. Any error stops the thread with a warning (the next open resumes).
"""

from __future__ import annotations

import logging
import sqlite3
import threading

from ..schema.fts_layout import DEFAULT_CHUNK, rebuild_markers
from .switch import RETIRED_PREFIX, rebuild_chunk
from .write_path import WritePath

log = logging.getLogger("hermes_state.fts.backfill")

AUTO_KEY = "fts_backfill"
#: Legacy inline FTS tables renamed by the deferring migration step, freed by this thread.
_SHADOWS = ("_content", "_docsize", "_data", "_idx")
#: Rows (and retired shadow rows) per write transaction (SPEC §2.4: 500).
CHUNK = DEFAULT_CHUNK
#: Pause between two chunks (s): lets the application's own writes take the lock.
PAUSE_S = 0.002


def retired_tables(conn: sqlite3.Connection) -> list[str]:
    """Names of the renamed legacy FTS tables still present."""
    return [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
        (RETIRED_PREFIX + "messages_fts", RETIRED_PREFIX + "messages_fts_trigram"))]


def wanted(conn: sqlite3.Connection) -> bool:
    """True when an automatic back-fill is recorded (``state_meta['fts_backfill']``)."""
    try:
        auto = conn.execute("SELECT 1 FROM state_meta WHERE key = ?", (AUTO_KEY,)).fetchone()
    except sqlite3.OperationalError:
        return False
    return auto is not None


def _purge_chunk(conn: sqlite3.Connection, size: int) -> bool:
    """Free part of a retired table: delete up to ``size`` shadow rows, or DROP it when empty.

    Returns:
        True when nothing retired is left.
    """
    for table in retired_tables(conn):
        for suffix in _SHADOWS:
            shadow = table + suffix
            # FTS5 needs its averages (id 1) and structure (id 10) records to be dropped.
            keep = "WHERE id > 10" if suffix == "_data" else ""
            key = "segid, term" if suffix == "_idx" else "rowid"
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (shadow,)).fetchone() \
                    and conn.execute(f"SELECT 1 FROM {shadow} {keep} LIMIT 1").fetchone():
                conn.execute(f"DELETE FROM {shadow} WHERE ({key}) IN "
                             f"(SELECT {key} FROM {shadow} {keep} LIMIT ?)", (size,))
                return False
        conn.execute(f"DROP TABLE {table}")
        return False
    return True


def backfill_chunk(conn: sqlite3.Connection, size: int = DEFAULT_CHUNK) -> dict:
    """One unit of work (inside the caller's write transaction).

    First the pending rebuild (:func:`hermes_state.fts.switch.rebuild_chunk`, ``size`` rows), then the
    retired legacy tables (``size`` shadow rows per transaction, then DROP). When nothing is
    left the ``fts_backfill`` key is deleted in the same transaction.

    Returns:
        ``{"rows": rows indexed, "done": bool}``.
    """
    rows = 0
    if rebuild_markers(conn) is not None:
        rows = rebuild_chunk(conn, size)["rows"]
        return {"rows": rows, "done": False}
    if not _purge_chunk(conn, size):
        return {"rows": 0, "done": False}
    conn.execute("DELETE FROM state_meta WHERE key = ?", (AUTO_KEY,))
    return {"rows": 0, "done": True}


class BackfillThread(threading.Thread):
    """Daemon thread running :func:`backfill_chunk` until done, stopped or failed.

    Args:
        store: the writable :class:`~hermes_state.store.connection.StoreConnection`.
        chunk: rows per write transaction (default :data:`CHUNK`).
    """

    def __init__(self, store: WritePath, chunk: int | None = None) -> None:
        super().__init__(name=f"fts-backfill:{store.db_path}", daemon=True)
        self.store = store
        self.chunk = chunk or CHUNK
        self.stopping = threading.Event()
        self.rows = 0
        self.finished = False
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                res = self.store.execute_write(lambda c: backfill_chunk(c, self.chunk),
                                               op="fts_backfill")
                self.rows += res["rows"]
                if res["done"]:
                    self.finished = True
                    log.info("%s: FTS back-fill finished (%d rows indexed by this process)",
                             self.store.db_path, self.rows)
                    return
                self.stopping.wait(PAUSE_S)
        except BaseException as exc:  # noqa: BLE001 - a background thread must not die loudly
            self.error = exc
            if not self.stopping.is_set():
                log.warning("%s: background FTS back-fill stopped (%s); the next open or "
                            "`sessions optimize-storage` resumes it", self.store.db_path, exc)

    def stop(self, timeout: float = 30.0) -> None:
        """Ask the thread to stop after its current chunk and wait for it (s)."""
        self.stopping.set()
        if self.is_alive() and threading.current_thread() is not self:
            self.join(timeout)
