"""Rebuilding a corrupt FTS index from ``messages`` (SPEC §12: ``doctor --fix``, ``rebuild_fts``).

The write path switches a damaged index off (``fts_stale``, :mod:`hermes_state.store.connection`);
:func:`rebuild_fts` brings it back in one write transaction.
"""

from __future__ import annotations

import sqlite3

from ..schema.fts_inventory import EXTERNAL_V23, inventory
from ..schema.tables import create_fts
from .switch import replace_layout
from .write_path import WritePath


def _reset_fts_shadow(conn: sqlite3.Connection, table: str) -> None:
    """Give FTS5 ``table`` the shadow data of an empty table with the same arguments."""
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    args = sql[sql.index("(") + 1: sql.rindex(")")]
    conn.execute("DROP TABLE IF EXISTS temp.hermes_fts_reset")
    conn.execute(f"CREATE VIRTUAL TABLE temp.hermes_fts_reset USING fts5({args})")
    for suffix in ("_data", "_idx", "_docsize", "_content"):  # not _config: it stays valid
        shadow = table + suffix
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (shadow,)).fetchone():
            continue
        conn.execute(f"DELETE FROM main.{shadow}")
        fresh = f"hermes_fts_reset{suffix}"
        if conn.execute("SELECT 1 FROM temp.sqlite_master WHERE name = ?", (fresh,)).fetchone():
            conn.execute(f"INSERT INTO main.{shadow} SELECT * FROM temp.{fresh}")
    conn.execute("DROP TABLE temp.hermes_fts_reset")


def rebuild_fts(sc: WritePath) -> int:
    """Rebuild the FTS index after corruption and clear ``fts_stale`` (SPEC §12).

    A corrupt FTS5 table cannot even be dropped (its constructor fails), so each table's
    shadow data is first reset to that of a freshly created, empty table with the same
    arguments (built in the ``temp`` schema). On the v23 layout the tables are then refilled
    from ``messages`` and the triggers recreated; any other layout (a legacy one kept since
    a migration) is replaced whole by the v23 layout built from ``messages``
    (:func:`hermes_state.fts.switch.replace_layout`), so rows written while the index was
    switched off are indexed too. One write transaction.

    Returns:
        Messages in the store (every one is indexed afterwards).
    """
    def fn(conn: sqlite3.Connection) -> int:
        inv = inventory(conn)
        present = [t for t in ("messages_fts", "messages_fts_trigram") if t in inv.tables]
        for table in present:
            _reset_fts_shadow(conn, table)
        if inv.kind != EXTERNAL_V23:
            replace_layout(conn, backfill=True)
            return conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        conn.execute("DELETE FROM state_meta WHERE key IN ('fts_stale', 'fts_no_fts5', "
                     "'fts_rebuild_high_water', 'fts_rebuild_progress')")
        for table in present:
            extra = "AND role <> 'tool'" if table == "messages_fts_trigram" else ""
            conn.execute(f"INSERT INTO {table}(rowid, content, tool_name, tool_calls) "
                         f"SELECT id, content, tool_name, tool_calls FROM messages "
                         f"WHERE 1 {extra}")
        create_fts(conn)  # recreates the dropped triggers (IF NOT EXISTS)
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0]

    return sc.execute_write(fn, op="rebuild_fts")
