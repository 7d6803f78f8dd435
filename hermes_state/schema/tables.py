"""The schema of version 23: tables, indexes, FTS5 tables and their triggers (SPEC §2, §3).

All DDL is ``CREATE ... IF NOT EXISTS`` and is re-run on every writable open. Columns added
after a table first shipped are reconciled declaratively by :func:`reconcile_columns`: the live
``PRAGMA table_info`` is compared with what this DDL declares (derived by running it in a
scratch ``:memory:`` database) and every missing column is added with ``ALTER TABLE``.
"""

from __future__ import annotations

import functools
import logging
import re
import sqlite3

from .fts_inventory import EXTERNAL_V23, NONE, inventory

log = logging.getLogger("hermes_state.schema.tables")

SCHEMA_VERSION = 23

TABLES_SQL = """
CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);

CREATE TABLE IF NOT EXISTS sessions (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    user_id TEXT,
    model TEXT,
    model_config TEXT,
    system_prompt TEXT,
    parent_session_id TEXT,
    started_at REAL NOT NULL,
    ended_at REAL,
    end_reason TEXT,
    message_count INTEGER DEFAULT 0,
    tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0,
    output_tokens INTEGER DEFAULT 0,
    cache_read_tokens INTEGER DEFAULT 0,
    cache_write_tokens INTEGER DEFAULT 0,
    reasoning_tokens INTEGER DEFAULT 0,
    billing_provider TEXT,
    billing_base_url TEXT,
    billing_mode TEXT,
    estimated_cost_usd REAL,
    actual_cost_usd REAL,
    cost_status TEXT,
    cost_source TEXT,
    pricing_version TEXT,
    title TEXT,
    api_call_count INTEGER DEFAULT 0,
    session_key TEXT,
    chat_id TEXT,
    chat_type TEXT,
    thread_id TEXT,
    display_name TEXT,
    origin_json TEXT,
    expiry_finalized INTEGER DEFAULT 0,
    cwd TEXT,
    git_branch TEXT,
    git_repo_root TEXT,
    handoff_state TEXT,
    handoff_platform TEXT,
    handoff_error TEXT,
    compression_failure_cooldown_until REAL,
    compression_failure_error TEXT,
    profile_name TEXT,
    compression_fallback_streak INTEGER NOT NULL DEFAULT 0,
    rewind_count INTEGER NOT NULL DEFAULT 0,
    archived INTEGER NOT NULL DEFAULT 0,
    pinned INTEGER NOT NULL DEFAULT 0,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id)
);

CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source);
CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC);

CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL,
    content TEXT,
    tool_call_id TEXT,
    tool_calls TEXT,
    tool_name TEXT,
    timestamp REAL NOT NULL,
    token_count INTEGER,
    finish_reason TEXT,
    reasoning TEXT,
    reasoning_content TEXT,
    reasoning_details TEXT,
    codex_reasoning_items TEXT,
    codex_message_items TEXT,
    effect_disposition TEXT,
    platform_message_id TEXT,
    observed INTEGER DEFAULT 0,
    active INTEGER NOT NULL DEFAULT 1,
    compacted INTEGER NOT NULL DEFAULT 0,
    api_content TEXT,
    display_kind TEXT,
    display_metadata TEXT
);

CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp);
CREATE INDEX IF NOT EXISTS idx_messages_session_id ON messages(session_id, id);

CREATE TABLE IF NOT EXISTS session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model TEXT NOT NULL,
    billing_provider TEXT NOT NULL DEFAULT '',
    billing_base_url TEXT NOT NULL DEFAULT '',
    billing_mode TEXT NOT NULL DEFAULT '',
    task TEXT NOT NULL DEFAULT '',
    api_call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0,
    output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0,
    cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0,
    estimated_cost_usd REAL NOT NULL DEFAULT 0,
    actual_cost_usd REAL NOT NULL DEFAULT 0,
    cost_status TEXT,
    cost_source TEXT,
    first_seen REAL,
    last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task)
);

CREATE TABLE IF NOT EXISTS state_meta (key TEXT PRIMARY KEY, value TEXT);

CREATE TABLE IF NOT EXISTS gateway_routing (
    scope TEXT NOT NULL DEFAULT '',
    session_key TEXT NOT NULL,
    entry_json TEXT NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (scope, session_key)
);

CREATE TABLE IF NOT EXISTS compression_locks (
    session_id TEXT PRIMARY KEY,
    holder TEXT NOT NULL,
    acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL
);

CREATE TABLE IF NOT EXISTS async_delegations (
    delegation_id TEXT PRIMARY KEY,
    origin_session TEXT NOT NULL,
    origin_ui_session_id TEXT NOT NULL DEFAULT '',
    parent_session_id TEXT,
    state TEXT NOT NULL,
    dispatched_at REAL NOT NULL,
    completed_at REAL,
    updated_at REAL NOT NULL,
    event_json TEXT,
    result_json TEXT,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0,
    delivered_at REAL,
    owner_pid INTEGER,
    owner_started_at INTEGER,
    task_json TEXT,
    delivery_claim TEXT,
    delivery_claimed_at REAL
);
"""

TITLE_INDEX_SQL = (
    "CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique "
    "ON sessions(title) WHERE title IS NOT NULL"
)

# Trigger gating for background rebuilds (SPEC §2.4): rows with id <= P or id > H are indexed by
# triggers; rows in (P, H] belong to the back-fill. Without the keys every row is indexed.
_GATE = """(
    NOT EXISTS (SELECT 1 FROM state_meta WHERE key = 'fts_rebuild_high_water')
    OR {row}.id > (SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_rebuild_high_water')
    OR {row}.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                             WHERE key = 'fts_rebuild_progress'), 0)
)"""

#: The view the trigram index reads its rows from (UPSTREAM_API.md §4.2, v23 layout): every
#: message except ``role='tool'`` rows, so FTS5 ``'rebuild'`` and ``integrity-check`` see
#: exactly the rows the triggers index.
TRIGRAM_VIEW = "messages_fts_trigram_src"

FTS_TABLE_SQL = """
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, tool_name, tool_calls, content='messages', content_rowid='id'
);
"""

TRIGRAM_VIEW_SQL = f"""
CREATE VIEW IF NOT EXISTS {TRIGRAM_VIEW} AS
    SELECT id, content, tool_name, tool_calls FROM messages WHERE role <> 'tool';
"""

TRIGRAM_TABLE_SQL = f"""
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(
    content, tool_name, tool_calls, content='{TRIGRAM_VIEW}', content_rowid='id',
    tokenize='trigram'
);
"""


def _fts_triggers(table: str, extra_new: str = "1", extra_old: str = "1") -> str:
    """The three sync triggers of one external-content FTS table (SPEC §2.4).

    Named ``<table>_insert`` / ``_delete`` / ``_update`` like every upstream release
    (UPSTREAM_API.md §4.2), so an upstream open finds its six triggers and adds none beside
    them. Deletes and updates use the FTS5 ``'delete'`` command with the OLD values.
    """
    new_gate = _GATE.format(row="new")
    old_gate = _GATE.format(row="old")
    return f"""
CREATE TRIGGER IF NOT EXISTS {table}_insert AFTER INSERT ON messages
WHEN ({extra_new}) AND {new_gate}
BEGIN
    INSERT INTO {table}(rowid, content, tool_name, tool_calls)
    VALUES (new.id, new.content, new.tool_name, new.tool_calls);
END;

CREATE TRIGGER IF NOT EXISTS {table}_delete AFTER DELETE ON messages
WHEN ({extra_old}) AND {old_gate}
BEGIN
    INSERT INTO {table}({table}, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, old.content, old.tool_name, old.tool_calls);
END;

CREATE TRIGGER IF NOT EXISTS {table}_update AFTER UPDATE OF content, tool_name, tool_calls, role
ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
      OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role)
     AND {old_gate}
BEGIN
    INSERT INTO {table}({table}, rowid, content, tool_name, tool_calls)
    SELECT 'delete', old.id, old.content, old.tool_name, old.tool_calls
    WHERE ({extra_old});
    INSERT INTO {table}(rowid, content, tool_name, tool_calls)
    SELECT new.id, new.content, new.tool_name, new.tool_calls
    WHERE ({extra_new});
END;
"""


FTS_TRIGGERS_SQL = _fts_triggers("messages_fts")
TRIGRAM_TRIGGERS_SQL = _fts_triggers(
    "messages_fts_trigram", extra_new="new.role <> 'tool'", extra_old="old.role <> 'tool'"
)

FTS_TABLES = ("messages_fts", "messages_fts_trigram", "messages_fts_cjk")


#: ``state_meta`` key: the FTS triggers were dropped because this SQLite had no FTS5 (set with
#: ``fts_stale``; issue 23.3). The next open on an SQLite with FTS5 replaces the layout and
#: re-indexes every row, as upstream restores its triggers and rebuilds (UPSTREAM_API.md §2.13).
FTS_OFF_KEY = "fts_no_fts5"
#: Keys of a pending back-fill: moot once the triggers are gone (the restore re-indexes all).
_BACKFILL_KEYS = ("fts_backfill", "fts_rebuild_high_water", "fts_rebuild_progress")


def fts5_available(conn: sqlite3.Connection) -> bool:
    """True when this connection's SQLite has the FTS5 module (``PRAGMA module_list``, read
    only; a build without that pragma is probed on a ``temp`` table)."""
    try:
        return conn.execute("SELECT 1 FROM pragma_module_list WHERE name = 'fts5'"
                            ).fetchone() is not None
    except sqlite3.OperationalError:
        pass
    try:
        conn.execute("CREATE VIRTUAL TABLE temp._probe_fts5 USING fts5(x)")
        conn.execute("DROP TABLE temp._probe_fts5")
        return True
    except sqlite3.OperationalError:
        return False


def fts_triggers(conn: sqlite3.Connection) -> list[str]:
    """Names of the triggers on ``messages`` that write into an FTS table (any name, any
    layout, the optional CJK index included)."""
    return [t.name for t in inventory(conn).fts_triggers]


def switch_fts_off(conn: sqlite3.Connection) -> list[str]:
    """Without FTS5 (issue 23.3): drop every trigger on ``messages`` that writes into an FTS
    table (else every INSERT/UPDATE/DELETE of a message fails with "no such module: fts5"),
    mark ``fts_stale`` (search takes the LIKE route, SPEC §6) and :data:`FTS_OFF_KEY`, and
    forget a pending back-fill. The FTS tables stay (they cannot be dropped without the
    module). Caller's transaction; ``state_meta`` must exist. Returns the dropped names."""
    names = fts_triggers(conn)
    for name in names:
        conn.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES ('fts_stale', '1'), "
                 "(?, '1')", (FTS_OFF_KEY,))
    conn.execute(f"DELETE FROM state_meta WHERE key IN ({', '.join('?' * len(_BACKFILL_KEYS))})",
                 _BACKFILL_KEYS)
    if names:
        log.warning("this SQLite has no FTS5: dropped the FTS triggers %s; messages are still "
                    "written and found by substring search; the index is rebuilt at the first "
                    "open on an SQLite with FTS5", ", ".join(names))
    return names


def trigram_supported(conn: sqlite3.Connection) -> bool:
    """True when this SQLite has the FTS5 trigram tokenizer (3.34+)."""
    try:
        conn.execute("CREATE VIRTUAL TABLE temp._probe_trigram USING fts5(x, tokenize='trigram')")
        conn.execute("DROP TABLE temp._probe_trigram")
        return True
    except sqlite3.OperationalError:
        return False


def ensure_title_index(conn: sqlite3.Connection) -> int:
    """Create ``idx_sessions_title_unique``; on duplicates repair first (SPEC §3).

    The newest row of each duplicated title (by ``started_at``, then rowid) keeps it, the older
    ones get NULL; the number cleared is logged. Never raises for duplicates.

    Returns:
        Titles cleared (0 when the index existed or was created directly).
    """
    if _exists(conn, "idx_sessions_title_unique"):
        return 0
    try:
        conn.execute(TITLE_INDEX_SQL)
        return 0
    except sqlite3.IntegrityError:
        pass
    cur = conn.execute(
        """UPDATE sessions SET title = NULL WHERE title IS NOT NULL AND rowid NOT IN (
               SELECT rowid FROM (SELECT rowid, ROW_NUMBER() OVER (
                   PARTITION BY title ORDER BY started_at DESC, rowid DESC) AS rn
               FROM sessions WHERE title IS NOT NULL) WHERE rn = 1)""")
    cleared = max(cur.rowcount, 0)
    log.warning("cleared %d duplicate session title(s) (the newest session keeps each title) "
                "to create the unique title index", cleared)
    conn.execute(TITLE_INDEX_SQL)
    return cleared


def create_tables(conn: sqlite3.Connection) -> None:
    """Run the ``CREATE ... IF NOT EXISTS`` of every non-FTS table and index of v23 (SPEC §2).

    Safe on a store of any version: an existing table is left as it is (its missing columns are
    :func:`reconcile_columns`' job, SPEC §3). Must be called inside a write transaction
    (``executescript`` would commit the caller's transaction, so statements go one by one).
    The unique-title index is not here: creating it can fail on duplicates (SPEC §3), see
    :func:`ensure_title_index`.
    """
    for stmt in _split(TABLES_SQL):
        m = _INDEX_RE.match(stmt)
        if m and not _exists(conn, m["name"]) and _exists(conn, m["table"]):
            cols = tuple((c.split()[0], int(c.upper().endswith(" DESC")))
                         for c in (p.strip() for p in m["cols"].split(",")))
            if equivalent_index(conn, m["name"], m["table"], cols):
                continue  # the same index exists under another name (issue 10)
        conn.execute(stmt)


_INDEX_RE = re.compile(r"CREATE INDEX IF NOT EXISTS (?P<name>\w+) ON (?P<table>\w+)\((?P<cols>[^)]*)\)$")


def index_shape(conn: sqlite3.Connection, name: str) -> tuple:
    """``(table, ((column, desc), ...), unique, partial)`` of one index."""
    row = conn.execute("SELECT tbl_name, sql FROM sqlite_master WHERE type = 'index' AND "
                       "name = ?", (name,)).fetchone()
    cols = tuple((r[2], r[3]) for r in conn.execute(f'PRAGMA index_xinfo("{name}")') if r[5])
    sql = (row[1] or "") if row else ""
    return (row[0] if row else None, cols, " UNIQUE " in f" {sql.upper()} ",
            " WHERE " in f" {sql.upper()} ")


def equivalent_index(conn: sqlite3.Connection, name: str, table: str,
                     columns: tuple) -> str | None:
    """An index other than ``name`` on ``table`` with exactly ``columns`` (plain, full), if any.

    ``columns``: ``((column, desc), ...)``. Used so an index a release created under another
    name is not created a second time under ours.
    """
    for (other,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index' AND "
                                 "tbl_name = ? AND name != ? AND sql IS NOT NULL", (table, name)):
        tbl, cols, unique, partial = index_shape(conn, other)
        if cols == columns and not unique and not partial:
            return other
    return None


def create_fts(conn: sqlite3.Connection) -> list[str]:
    """Create the v23 external-content FTS tables, view and triggers where absent (SPEC §2.4).

    Only on a store without ``messages_fts`` or already on the v23 layout: beside any other
    layout nothing is created (a second trigger set would index every row twice); the open
    replaces such layouts whole (:func:`hermes_state.fts.switch.replace_layout`) or keeps
    upstream's inline one until ``sessions optimize-storage`` (SPEC §3, §8). A v23 table that
    is missing on a store that already has messages is created AND back-filled in the same
    transaction, honouring the §2.4 rebuild gate (rows in ``(P, H]`` are left to the pending
    rebuild), so search never silently misses old rows. ``messages_fts_trigram`` is skipped
    when this SQLite lacks the trigram tokenizer. Must run inside a write transaction.
    Idempotent.

    Returns:
        Names of the FTS tables created by this call (``[]`` when everything existed).
    """
    if inventory(conn).kind not in (NONE, EXTERNAL_V23):
        return []
    if not fts5_available(conn):
        if _exists(conn, "state_meta"):
            switch_fts_off(conn)
        return []
    if _exists(conn, "state_meta") and conn.execute(
            "SELECT 1 FROM state_meta WHERE key = 'fts_stale'").fetchone():
        return []  # switched off after corruption (SPEC §12): rebuild_fts() brings it back
    created = []
    plan = [("messages_fts", FTS_TABLE_SQL, FTS_TRIGGERS_SQL, "")]
    if trigram_supported(conn):
        conn.execute(TRIGRAM_VIEW_SQL)
        plan.append(("messages_fts_trigram", TRIGRAM_TABLE_SQL, TRIGRAM_TRIGGERS_SQL,
                     "AND role <> 'tool'"))
    for table, table_sql, triggers_sql, row_filter in plan:
        existed = _exists(conn, table)
        conn.execute(table_sql)
        for stmt in split_triggers(triggers_sql):
            conn.execute(stmt)
        if not existed:
            created.append(table)
            backfill_gated(conn, table, row_filter)
    return created


def backfill_gated(conn: sqlite3.Connection, table: str, row_filter: str = "") -> int:
    """Index into the external-content ``table`` every message the §2.4 triggers would index.

    Rows with ``id <= P`` or ``id > H`` (every row when no rebuild is pending) are inserted;
    rows in ``(P, H]`` belong to the pending chunked rebuild and are left to it, so no row is
    indexed twice. Only for a table that was just created (empty).

    Args:
        table: ``messages_fts`` or ``messages_fts_trigram``.
        row_filter: extra ``AND ...`` condition on ``messages`` (e.g. ``AND role != 'tool'``).
    Returns:
        Rows inserted.
    """
    if not _exists(conn, "messages"):
        return 0
    gate = "1"
    if _exists(conn, "state_meta"):
        meta = dict(conn.execute(
            "SELECT key, CAST(value AS INTEGER) FROM state_meta WHERE key IN "
            "('fts_rebuild_high_water', 'fts_rebuild_progress')").fetchall())
        if "fts_rebuild_high_water" in meta:
            high = int(meta["fts_rebuild_high_water"] or 0)
            low = int(meta.get("fts_rebuild_progress") or 0)
            gate = f"(id > {high} OR id <= {low})"
    cur = conn.execute(
        f"INSERT INTO {table}(rowid, content, tool_name, tool_calls) "
        f"SELECT id, content, tool_name, tool_calls FROM messages WHERE {gate} {row_filter}")
    return max(cur.rowcount, 0)


def create_schema(conn: sqlite3.Connection) -> None:
    """Run every ``CREATE ... IF NOT EXISTS`` of version 23 on ``conn`` (SPEC §2).

    :func:`create_tables` then :func:`create_fts`: a fresh store is born on the v23 external
    content FTS layout. Must be called inside a write transaction. The unique-title index is
    created separately by the migration code (its creation can fail on duplicates, SPEC §3).
    Idempotent.
    """
    create_tables(conn)
    create_fts(conn)


def _exists(conn: sqlite3.Connection, name: str) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone() is not None


def _split(sql: str) -> list[str]:
    """Split plain DDL (no trigger bodies) into statements."""
    return [s.strip() for s in sql.split(";") if s.strip()]


def split_triggers(sql: str) -> list[str]:
    """Split trigger DDL on ``END;`` boundaries."""
    parts = [p.strip() for p in sql.split("END;") if p.strip()]
    return [p + "\nEND" for p in parts]


def declared_columns() -> dict[str, list[tuple[str, str]]]:
    """``{table: [(column, column_definition_for_ALTER), ...]}`` declared by the current DDL.

    Derived by running the DDL in a scratch ``:memory:`` database (SPEC §3), so the DDL text
    stays the single source of truth. Computed once per process (the DDL is a constant); every
    call returns a fresh copy the caller may modify.
    """
    return {table: list(cols) for table, cols in _declared_columns_cached().items()}


@functools.lru_cache(maxsize=1)
def _declared_columns_cached() -> dict[str, tuple[tuple[str, str], ...]]:
    scratch = sqlite3.connect(":memory:")
    try:
        for stmt in _split(TABLES_SQL):
            scratch.execute(stmt)
        out: dict[str, tuple[tuple[str, str], ...]] = {}
        tables = [r[0] for r in scratch.execute(
            "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'")]
        for table in tables:
            cols = []
            for _cid, name, ctype, notnull, default, _pk in scratch.execute(
                f"PRAGMA table_info({table})"
            ):
                definition = f"{name} {ctype}".strip()
                if notnull and default is not None:
                    definition += f" NOT NULL DEFAULT {default}"
                elif default is not None:
                    definition += f" DEFAULT {default}"
                cols.append((name, definition))
            out[table] = tuple(cols)
        return out
    finally:
        scratch.close()


def reconcile_columns(conn: sqlite3.Connection) -> list[str]:
    """Add every column the DDL declares but the live tables lack (SPEC §3 ``_reconcile_columns``).

    Runs inside the caller's write transaction. "duplicate column" means another process won the
    race: continue. A lock/busy error is re-raised so the open retries. Any other failure is logged
    as a warning and skipped. Running it twice changes nothing.

    Returns:
        ``["table.column", ...]`` actually added.
    """
    added = []
    for table, cols in declared_columns().items():
        live = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        if not live:
            continue  # table absent: CREATE TABLE IF NOT EXISTS makes it whole
        for name, definition in cols:
            if name in live:
                continue
            try:
                conn.execute(f"ALTER TABLE {table} ADD COLUMN {definition}")
                added.append(f"{table}.{name}")
            except sqlite3.OperationalError as exc:
                code = getattr(exc, "sqlite_errorcode", 0) & 0xFF
                if "duplicate column" in str(exc).lower():
                    continue
                if code in (5, 6):
                    raise
                log.warning("could not add column %s.%s: %s", table, name, exc)
    return added
