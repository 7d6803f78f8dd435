"""``optimize-storage`` and the open's layout replacement: move a legacy store to the v23 external-content FTS layout (SPEC §8, §2.4).

Legacy stores (v1-v22, see :mod:`hermes_state.schema.history`) keep INLINE FTS5 tables: every
message text is stored twice more (``messages_fts`` and ``messages_fts_trigram`` each hold a
copy). Migration to version 23 does not touch them (SPEC §3: "the version advance itself does
not rewrite FTS"); :func:`optimize_storage` does, resumably:

1. **switch** (one write transaction): drop the legacy FTS tables and their triggers, create the
   v23 external-content tables (``content='messages'``) and their gated triggers
   (:mod:`hermes_state.schema.tables`), and record the rebuild markers of SPEC §2.4 in ``state_meta``:
   ``fts_rebuild_high_water`` H = ``MAX(messages.id)`` and ``fts_rebuild_progress`` P = 0.
   From this commit on, triggers index every row with ``id <= P`` or ``id > H``;
2. **back-fill** (one write transaction per chunk of ``chunk`` rows, 500 by default): index the
   next rows of ``(P, H]`` into every v23 FTS table (the trigram one without ``role='tool'``
   rows) and advance P in the SAME transaction; the transaction that reaches H deletes both keys.

A crash anywhere loses nothing: the switch is atomic (the old index or the new layout, never
half), each chunk commits together with its P, and a re-run resumes from P. A row is never
indexed twice: the trigger gate and the back-fill range are disjoint, and a row updated or
deleted inside ``(P, H]`` meanwhile is simply read (or not) by its chunk later. While markers
exist, search must LIKE-scan ``(P, H]`` (SPEC §2.4, the search module's job).

A store whose index was switched off after corruption (``state_meta['fts_stale']``, SPEC §12) is
rebuilt the same way whatever its layout; the switch transaction clears the mark (from then on the
triggers and the chunked back-fill keep the index whole, and search scans ``(P, H]``).

The optional ``messages_fts_cjk`` table (SPEC §2.4) is not part of any legacy layout and is left
alone. Freed pages stay in the file until ``optimize`` (VACUUM) runs (SPEC §8).
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import time
from pathlib import Path
from typing import Any, Callable, Protocol

from ..schema.fts_inventory import inventory
from ..schema.fts_layout import (
    DEFAULT_CHUNK,
    FTS_LAYOUT_TABLES,
    HIGH_WATER_KEY,
    LAYOUT_TABLES,
    LAYOUT_VIEWS,
    OPTIMIZE_KEY,
    PROGRESS_KEY,
    STALE_KEY,
    assess,
    rebuild_markers,
    stale_tables,
    status,
)
from ..schema.tables import (
    FTS_OFF_KEY,
    FTS_TABLE_SQL,
    FTS_TRIGGERS_SQL,
    TRIGRAM_TABLE_SQL,
    TRIGRAM_TRIGGERS_SQL,
    TRIGRAM_VIEW_SQL,
    split_triggers,
    trigram_supported,
)


class _Store(Protocol):
    """What :func:`optimize_storage` uses of a :class:`~hermes_state.db.SessionDB`."""

    db_path: Path

    def _read(self, fn: Callable[[sqlite3.Connection], Any]) -> Any: ...

    def _write(self, fn: Callable[[sqlite3.Connection], Any], *, op: str) -> Any: ...

#: Prefix of FTS tables renamed aside by a switch; :mod:`hermes_state.fts.backfill` frees them.
RETIRED_PREFIX = "retired_"


class StorageSpaceError(OSError):
    """Not enough free disk for ``optimize-storage`` (checked before anything is written)."""


def _free_bytes(directory: Path) -> int:
    """Free bytes for an unprivileged writer in ``directory`` (tests replace this)."""
    return shutil.disk_usage(directory).free


def store_bytes(db_path: Path) -> int:
    """``state.db`` + ``-wal`` sizes (0 for a missing file)."""
    total = 0
    for suffix in ("", "-wal"):
        try:
            total += os.stat(f"{db_path}{suffix}").st_size
        except OSError:
            pass
    return total


def _retire_or_drop(conn: sqlite3.Connection, table: str, retire: bool) -> None:
    if retire:
        # DROP TABLE frees every page now (~0.5 s per 100 k rows); a rename is constant time
        # and the background thread frees the pages in small chunks (fts_backfill).
        try:
            conn.execute(f'DROP TABLE IF EXISTS "{RETIRED_PREFIX}{table}"')
            conn.execute(f'ALTER TABLE "{table}" RENAME TO "{RETIRED_PREFIX}{table}"')
            return
        except sqlite3.OperationalError:
            pass  # a schema the rename cannot re-parse: drop it instead
    conn.execute(f'DROP TABLE IF EXISTS "{table}"')


def replace_layout(conn: sqlite3.Connection, *, retire: bool = False,
                   backfill: bool = False) -> dict:
    """Replace whatever FTS layout the store has by the v23 one, in the caller's transaction.

    Every trigger on ``messages`` that writes into an FTS table (whatever its name, except the
    optional ``messages_fts_cjk``) or into a vanished ``messages_fts*`` table is dropped, the
    ``messages_fts`` / ``messages_fts_trigram`` tables and their views go (renamed to
    ``retired_*`` when ``retire``), the v23 tables, view and triggers are created, and either
    every row is indexed now (``backfill``) or the SPEC §2.4 markers P = 0, H = MAX(id) are set
    for the chunked back-fill. ``fts_stale``, ``fts_no_fts5`` and ``fts_optimize_available``
    are cleared.

    Returns:
        ``{"switched": True, "layout": the kind before, "markers": (0, H) | None,
        "indexed": rows indexed now, "dropped_triggers": [names]}``.
    """
    inv = inventory(conn)
    dropped = []
    for trig in inv.fts_triggers:
        if set(trig.targets) <= {"messages_fts_cjk"} and not trig.missing_targets:
            continue
        conn.execute(f'DROP TRIGGER IF EXISTS "{trig.name}"')
        dropped.append(trig.name)
    for table in LAYOUT_TABLES:
        if table in inv.tables or conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                (table,)).fetchone():
            _retire_or_drop(conn, table, retire)
    for view in LAYOUT_VIEWS:
        conn.execute(f'DROP VIEW IF EXISTS "{view}"')
    plan = [(FTS_TABLE_SQL, FTS_TRIGGERS_SQL)]
    if trigram_supported(conn):
        conn.execute(TRIGRAM_VIEW_SQL)
        plan.append((TRIGRAM_TABLE_SQL, TRIGRAM_TRIGGERS_SQL))
    for table_sql, triggers_sql in plan:
        conn.execute(table_sql)
        for stmt in split_triggers(triggers_sql):
            conn.execute(stmt)
    conn.execute("DELETE FROM state_meta WHERE key IN (?, ?, ?, ?, ?)",
                 (STALE_KEY, FTS_OFF_KEY, HIGH_WATER_KEY, PROGRESS_KEY, OPTIMIZE_KEY))
    high = conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
    markers, indexed = None, 0
    if backfill:
        for table, row_filter in FTS_LAYOUT_TABLES:
            if conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
                cur = conn.execute(
                    f"INSERT INTO {table}(rowid, content, tool_name, tool_calls) "
                    f"SELECT id, content, tool_name, tool_calls FROM messages WHERE 1 {row_filter}")
                indexed = indexed or max(cur.rowcount, 0)
    elif high > 0:
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?), (?, ?)",
                     (HIGH_WATER_KEY, str(high), PROGRESS_KEY, "0"))
        markers = (0, high)
    return {"switched": True, "layout": inv.kind, "markers": markers, "indexed": indexed,
            "dropped_triggers": dropped}


def _switch(conn: sqlite3.Connection) -> dict:
    """Step 1 of optimize-storage: the v23 layout with markers, unless already there.

    Idempotent: a store already on the v23 layout (not stale, no foreign trigger) is left as it
    is.
    """
    inv = inventory(conn)
    if assess(conn, inv) == "ok" and not stale_tables(conn):
        return {"switched": False, "layout": inv.kind, "markers": rebuild_markers(conn)}
    return replace_layout(conn)


def _pending_rows(conn: sqlite3.Connection) -> int:
    """Messages in the back-fill range ``(P, H]`` (0 without a pending rebuild)."""
    markers = rebuild_markers(conn)
    if markers is None:
        return 0
    return conn.execute("SELECT COUNT(*) FROM messages WHERE id > ? AND id <= ?",
                        markers).fetchone()[0]


def rebuild_chunk(conn: sqlite3.Connection, size: int) -> dict:
    """Step 2: index the next ``size`` rows of ``(P, H]``; advance P; clear the keys at H."""
    markers = rebuild_markers(conn)
    if markers is None:
        return {"rows": 0, "done": True, "progress": None, "high_water": None}
    low, high = markers
    ids = [r[0] for r in conn.execute(
        "SELECT id FROM messages WHERE id > ? AND id <= ? ORDER BY id LIMIT ?",
        (low, high, size))]
    top = ids[-1] if ids else high
    existing = {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE name IN ('messages_fts', 'messages_fts_trigram')")}
    if ids:
        for table, row_filter in FTS_LAYOUT_TABLES:
            if table in existing:
                conn.execute(
                    f"INSERT INTO {table}(rowid, content, tool_name, tool_calls) "
                    f"SELECT id, content, tool_name, tool_calls FROM messages "
                    f"WHERE id > ? AND id <= ? {row_filter}", (low, top))
    more = len(ids) == size and conn.execute(
        "SELECT 1 FROM messages WHERE id > ? AND id <= ? LIMIT 1", (top, high)).fetchone()
    if more:
        conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) "
                     "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                     (PROGRESS_KEY, str(top)))
    else:
        conn.execute("DELETE FROM state_meta WHERE key IN (?, ?)", (HIGH_WATER_KEY, PROGRESS_KEY))
    return {"rows": len(ids), "done": not more, "progress": top, "high_water": high}


def optimize_storage(db: _Store, *, chunk: int = DEFAULT_CHUNK,
                     progress: Callable[[dict], None] | None = None) -> dict:
    """Move ``db`` to the v23 external-content FTS layout and rebuild FTS resumably (SPEC §8).

    Checks free disk first (about the store's size; proportionally less when resuming).
    Safe to run while other processes write (each step is a normal write transaction); the
    CLI applies the live-writer gate of SPEC §11 before calling this.

    Args:
        db: an open writable :class:`~hermes_state.db.SessionDB`.
        chunk: rows per back-fill write transaction (SPEC §2.4: 500).
        progress: ``progress(done, total)`` after every committed chunk: rows indexed so far by
            this call and rows that were pending when the back-fill started (``done`` reaches
            ``total`` unless rows are deleted meanwhile). May raise to abort: what was committed
            stays and a re-run resumes.
    Returns:
        ``{"status": "nothing to do", "layout": ...}`` when the store is on the v23 layout with
        no pending rebuild; else ``{"status": "done", "layout_before", "layout_after",
        "resumed": bool, "rows_indexed", "chunks", "high_water", "bytes_before", "bytes_after",
        "seconds"}``.
    Raises:
        ValueError: ``chunk`` < 1.
        StorageSpaceError: less free disk than needed; nothing was changed.
        sqlite3.Error / store errors: from the write path; committed chunks stay, re-run resumes.
    """
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1, not {chunk}")
    t0 = time.monotonic()
    before = db._read(status)
    if before["plan"] == "ok" and before["pending"] is None and not before["stale"]:
        return {"status": "nothing to do", "layout": before["layout"]}
    db_path = Path(db.db_path)
    size = store_bytes(db_path)
    need = size
    if before["pending"] is not None and not before["stale"]:
        low, high = before["pending"]
        need = int(size * max(high - low, 0) / max(high, 1))
    free = _free_bytes(db_path.parent)
    if free < need:
        raise StorageSpaceError(
            f"optimize-storage needs about {need / 1e6:.1f} MB free beside {db_path} "
            f"(the size of the store) but only {free / 1e6:.1f} MB are free; nothing was "
            f"changed. Free some space (or move the profile) and run it again.")
    resumed = before["plan"] == "ok" and not before["stale"]
    switched = db._write(_switch, op="optimize_storage")
    rows = chunks = 0
    high = switched["markers"][1] if switched["markers"] else None
    total = db._read(_pending_rows)
    while True:
        res = db._write(lambda c: rebuild_chunk(c, chunk), op="optimize_storage")
        if res["high_water"] is None and res["rows"] == 0:
            break
        high = res["high_water"]
        chunks += 1
        rows += res["rows"]
        if progress is not None:
            progress(rows, max(total, rows))
        if res["done"]:
            break
    after = db._read(status)
    return {"status": "done", "layout_before": before["layout"], "layout_after": after["layout"],
            "resumed": resumed, "rows_indexed": rows, "chunks": chunks, "high_water": high,
            "bytes_before": size, "bytes_after": store_bytes(db_path),
            "seconds": round(time.monotonic() - t0, 3)}
