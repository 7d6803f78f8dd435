"""``optimize-storage``: move a legacy store to the v23 external-content FTS layout (SPEC §8, §2.4).

Legacy stores (v1-v22, see :mod:`hermes_state.schema_history`) keep INLINE FTS5 tables: every
message text is stored twice more (``messages_fts`` and ``messages_fts_trigram`` each hold a
copy). Migration to version 23 does not touch them (SPEC §3: "the version advance itself does
not rewrite FTS"); :func:`optimize_storage` does, resumably:

1. **switch** (one write transaction): drop the legacy FTS tables and their triggers, create the
   v23 external-content tables (``content='messages'``) and their gated triggers
   (:mod:`hermes_state.schema`), and record the rebuild markers of SPEC §2.4 in ``state_meta``:
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
import re
import shutil
import sqlite3
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from .fts_inventory import (
    EXTERNAL_V23,
    INLINE,
    LEGACY_KINDS,
    NONE,
    FtsTable,
    Inventory,
    inventory,
    parse_fts5,
)
from .schema import (
    FTS_TABLE_SQL,
    FTS_TRIGGERS_SQL,
    TRIGRAM_TABLE_SQL,
    TRIGRAM_TRIGGERS_SQL,
    TRIGRAM_VIEW,
    TRIGRAM_VIEW_SQL,
    _split_triggers,
    trigram_supported,
)

if TYPE_CHECKING:  # pragma: no cover
    from .db import SessionDB

HIGH_WATER_KEY = "fts_rebuild_high_water"
PROGRESS_KEY = "fts_rebuild_progress"
STALE_KEY = "fts_stale"  # set by the corruption handling (SPEC §12); cleared by the switch
DEFAULT_CHUNK = 500  # SPEC §2.4: rows per write transaction

#: FTS tables this module rebuilds and the row filter of each.
_TABLES = (("messages_fts", ""), ("messages_fts_trigram", "AND role != 'tool'"))


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


def rebuild_markers(conn: sqlite3.Connection) -> tuple[int, int] | None:
    """``(P, H)`` while a rebuild is pending (SPEC §2.4), else None."""
    try:
        rows = dict(conn.execute("SELECT key, value FROM state_meta WHERE key IN (?, ?)",
                                 (HIGH_WATER_KEY, PROGRESS_KEY)).fetchall())
    except sqlite3.OperationalError:
        return None
    if HIGH_WATER_KEY not in rows:
        return None
    return int(rows.get(PROGRESS_KEY) or 0), int(rows[HIGH_WATER_KEY] or 0)


OPTIMIZE_KEY = "fts_optimize_available"  # UPSTREAM_API.md §4.4: a legacy layout is left
#: FTS tables of the layouts this module replaces (``messages_fts_cjk`` is not one of them).
_LAYOUT_TABLES = ("messages_fts", "messages_fts_trigram")
#: Views a legacy or newer layout may have created for its external-content tables.
_LAYOUT_VIEWS = ("messages_fts_src", TRIGRAM_VIEW)


def _norm(sql: str) -> str:
    """DDL compared by meaning of text: no IF NOT EXISTS, one space, lower case, no ``;``."""
    text = " ".join(sql.replace("IF NOT EXISTS", " ").split()).lower()
    return text.rstrip(";").strip()


_CANON_TRIGGERS = {sql.split("IF NOT EXISTS", 1)[1].split()[0]: _norm(sql)
                   for sql in _split_triggers(FTS_TRIGGERS_SQL + TRIGRAM_TRIGGERS_SQL)}
_CANON_TABLES = {t.name: t for t in (parse_fts5("messages_fts", FTS_TABLE_SQL.strip().rstrip(";")),
                                      parse_fts5("messages_fts_trigram",
                                                 TRIGRAM_TABLE_SQL.strip().rstrip(";")))}


def _same_table(live: FtsTable, want: FtsTable) -> bool:
    opts = {k: v.lower() for k, v in live.options.items()}
    wanted = {k: v.lower() for k, v in want.options.items()}
    return tuple(c.lower() for c in live.columns) == want.columns and opts == wanted


def _canonical_external(conn: sqlite3.Connection, inv: Inventory, stale: bool) -> bool:
    """The v23 layout exactly as this code creates it (tables, view, one trigger set each)."""
    for name, table in inv.tables.items():
        if name in _CANON_TABLES and not _same_table(table, _CANON_TABLES[name]):
            return False
    if "messages_fts_trigram" in inv.tables and _norm(inv.views.get(TRIGRAM_VIEW) or "") != \
            _norm(TRIGRAM_VIEW_SQL.strip()):
        return False
    if inv.problems and not (stale and all("no " in p and " trigger" in p for p in inv.problems)):
        return False
    present = {t.name: t for t in inv.fts_triggers}
    for name, trig in present.items():
        if _CANON_TRIGGERS.get(name) != _norm(trig.sql):
            return False
    if stale:
        return True  # switched off after corruption (SPEC §12): rebuild_fts() restores them
    want = {n for n in _CANON_TRIGGERS if n.rsplit("_", 1)[0] in inv.tables}
    return set(present) == want


def _inline_intact(inv: Inventory) -> bool:
    """Upstream's inline layout (v11-v22) with exactly its six triggers and nothing foreign."""
    fts = inv.tables["messages_fts"]
    tri = inv.tables.get("messages_fts_trigram")
    if tri is not None and (tri.external or tuple(c.lower() for c in tri.columns) != ("content",)
                            or tri.tokenize.lower() != "trigram"):
        return False
    if fts.external or inv.problems or inv.foreign:
        return False
    for table in [t for t in _LAYOUT_TABLES if t in inv.tables]:
        if sorted(t.event for t in inv.feeding(table)) != ["delete", "insert", "update"]:
            return False
    return True


def assess(conn: sqlite3.Connection, inv: Inventory | None = None) -> str:
    """What a writable open must do to the FTS layout of a store at version <= 23.

    Returns:
        ``"ok"`` (the v23 layout exactly, or switched off after corruption), ``"legacy"``
        (upstream's intact inline layout, kept until optimize-storage with
        ``fts_optimize_available``), ``"create"`` (v23 tables missing: create and back-fill
        them) or ``"replace"`` (anything else: external v1, mixed, foreign or duplicate
        trigger sets, an earlier version's layout -- replaced whole by :func:`replace_layout`).
    """
    inv = inv or inventory(conn)
    stale = _stale(conn)
    if stale:
        return "ok"  # switched off after corruption (SPEC §12): rebuild_fts()/optimize-storage
    if inv.kind == NONE:
        if any(set(t.targets) - {"messages_fts_cjk"} or t.missing_targets
               for t in inv.fts_triggers) or "messages_fts_trigram" in inv.tables:
            return "replace"
        return "ok" if stale else "create"
    if inv.kind == INLINE and _inline_intact(inv):
        return "legacy"
    if inv.kind == EXTERNAL_V23 and _canonical_external(conn, inv, stale):
        if not stale and "messages_fts_trigram" not in inv.tables and trigram_supported(conn):
            return "create"
        return "ok"
    return "replace"


def status(conn: sqlite3.Connection) -> dict:
    """The FTS layout of a store and any pending rebuild (read-only).

    Returns:
        ``{"layout": kind, "legacy": bool, "pending": (P, H) | None, "stale": bool,
        "plan": assess(), "foreign": [trigger names], "problems": [...]}``; layout kinds as
        in :mod:`hermes_state.fts_inventory`; ``stale`` means the index was switched off after
        corruption (SPEC §12) and must be rebuilt.
    """
    inv = inventory(conn)
    return {"layout": inv.kind, "legacy": inv.kind in LEGACY_KINDS or inv.kind == NONE,
            "pending": rebuild_markers(conn), "stale": _stale(conn),
            "plan": assess(conn, inv), "foreign": inv.foreign, "problems": list(inv.problems)}


def _stale(conn: sqlite3.Connection) -> bool:
    """``state_meta['fts_stale']``: the index was switched off after corruption (SPEC §12)."""
    try:
        return conn.execute(
            f"SELECT 1 FROM state_meta WHERE key = '{STALE_KEY}'").fetchone() is not None
    except sqlite3.OperationalError:
        return False


def _retire_or_drop(conn: sqlite3.Connection, table: str, retire: bool) -> None:
    if retire:
        from .fts_backfill import RETIRED_PREFIX

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
    for the chunked back-fill. ``fts_stale`` and ``fts_optimize_available`` are cleared.

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
    for table in _LAYOUT_TABLES:
        if table in inv.tables or conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                (table,)).fetchone():
            _retire_or_drop(conn, table, retire)
    for view in _LAYOUT_VIEWS:
        conn.execute(f'DROP VIEW IF EXISTS "{view}"')
    plan = [(FTS_TABLE_SQL, FTS_TRIGGERS_SQL)]
    if trigram_supported(conn):
        conn.execute(TRIGRAM_VIEW_SQL)
        plan.append((TRIGRAM_TABLE_SQL, TRIGRAM_TRIGGERS_SQL))
    for table_sql, triggers_sql in plan:
        conn.execute(table_sql)
        for stmt in _split_triggers(triggers_sql):
            conn.execute(stmt)
    conn.execute("DELETE FROM state_meta WHERE key IN (?, ?, ?, ?)",
                 (STALE_KEY, HIGH_WATER_KEY, PROGRESS_KEY, OPTIMIZE_KEY))
    high = conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
    markers, indexed = None, 0
    if backfill:
        for table, row_filter in _TABLES:
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
    if assess(conn, inv) == "ok" and not _stale(conn):
        return {"switched": False, "layout": inv.kind, "markers": rebuild_markers(conn)}
    return replace_layout(conn)


def _pending_rows(conn: sqlite3.Connection) -> int:
    """Messages in the back-fill range ``(P, H]`` (0 without a pending rebuild)."""
    markers = rebuild_markers(conn)
    if markers is None:
        return 0
    return conn.execute("SELECT COUNT(*) FROM messages WHERE id > ? AND id <= ?",
                        markers).fetchone()[0]


def _chunk(conn: sqlite3.Connection, size: int) -> dict:
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
        for table, row_filter in _TABLES:
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


def optimize_storage(db: "SessionDB", *, chunk: int = DEFAULT_CHUNK,
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
        res = db._write(lambda c: _chunk(c, chunk), op="optimize_storage")
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


def _vocab_instances(conn: sqlite3.Connection, schema_name: str, table: str) -> list[tuple]:
    vocab = f"temp._vocab_{schema_name}_{table}"
    conn.execute(f"DROP TABLE IF EXISTS {vocab}")
    conn.execute(f"CREATE VIRTUAL TABLE {vocab} USING fts5vocab('{schema_name}', '{table}', "
                 "'instance')")
    try:
        return sorted(tuple(r) for r in conn.execute(f"SELECT term, doc, col, offset FROM {vocab}"))
    finally:
        conn.execute(f"DROP TABLE {vocab}")


def _expected_rows_sql(table: FtsTable, kind: str, gate: str) -> str:
    """``SELECT rowid, <columns>`` of the rows ``table`` should index, whatever its layout.

    External-content tables index exactly the rows of their content table or view; upstream's
    inline tables index ``content || ' ' || tool_name || ' ' || tool_calls`` of every row; the
    three-column inline tables of earlier versions of this code indexed the columns (the trigram
    one without ``role='tool'`` rows).
    """
    from .schema_history import INLINE_TEXT

    cols = ", ".join(f'"{c}"' for c in table.columns)
    if table.external:
        rowid = table.options.get("content_rowid", "rowid")
        row_gate = re.sub(r"\bid\b", rowid, gate)
        return f'SELECT "{rowid}", {cols} FROM "{table.content}" WHERE 1 {row_gate}'
    if table.columns == ("content",):
        return f"SELECT id, {INLINE_TEXT.format(r='messages')} FROM messages WHERE 1 {gate}"
    tool = "AND role != 'tool'" if table.tokenize.lower() == "trigram" else ""
    return f"SELECT id, {cols} FROM messages WHERE 1 {tool} {gate}"


def verify_fts(conn: sqlite3.Connection) -> dict[str, str]:
    """Compare every FTS table with an index built from scratch out of its source rows.

    For each of ``messages_fts`` / ``messages_fts_trigram`` present: FTS5 ``integrity-check``,
    then the full list of (term, rowid, column, offset) instances is compared with that of a
    fresh inline index over the rows the layout indexes (:func:`_expected_rows_sql`: an
    external table's content table or view, upstream's concatenated text for its inline
    tables), built in a ``temp`` table with the same tokenizer. Equal lists prove the index
    holds every row exactly once with its current text (no row missing, stale or indexed
    twice), whatever the layout. While a rebuild is pending, rows in ``(P, H]`` are expected to
    be absent. Cost: proportional to the store (meant for tests, ``doctor --deep`` and
    benchmarks on small stores).

    Args:
        conn: any connection to the store (writes only to ``temp``).
    Returns:
        ``{table: "ok" | problem}``.
    """
    out: dict[str, str] = {}
    inv = inventory(conn)
    markers = rebuild_markers(conn)
    gate = ""
    if markers is not None:
        gate = f"AND (id <= {markers[0]} OR id > {markers[1]})"
    for name in _LAYOUT_TABLES:
        table = inv.tables.get(name)
        if table is None:
            continue
        try:
            conn.execute(f"INSERT INTO {name}({name}) VALUES('integrity-check')")
        except sqlite3.DatabaseError as exc:
            out[name] = f"integrity-check: {exc}"
            continue
        tokenize = table.options.get("tokenize")
        tok = f", tokenize='{tokenize}'" if tokenize else ""
        cols = ", ".join(f'"{c}"' for c in table.columns)
        ref = f"_ref_{name}"
        conn.execute(f"DROP TABLE IF EXISTS temp.{ref}")
        conn.execute(f"CREATE VIRTUAL TABLE temp.{ref} USING fts5({cols}{tok})")
        try:
            conn.execute(f"INSERT INTO temp.{ref}(rowid, {cols}) "
                         + _expected_rows_sql(table, inv.kind, gate))
            live = _vocab_instances(conn, "main", name)
            want = _vocab_instances(conn, "temp", ref)
        finally:
            conn.execute(f"DROP TABLE IF EXISTS temp.{ref}")
        if live == want:
            out[name] = "ok"
        else:
            live_docs = {r[1] for r in live}
            want_docs = {r[1] for r in want}
            dup = len(live) - len(set(live))
            out[name] = (f"index differs from messages: {len(live)} vs {len(want)} instances, "
                         f"missing rows {sorted(want_docs - live_docs)[:10]}, extra rows "
                         f"{sorted(live_docs - want_docs)[:10]}, duplicated instances {dup}")
    return out
