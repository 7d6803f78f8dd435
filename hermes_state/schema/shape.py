"""What a writable open still has to do to a store as it is (SPEC §3: a settled store writes nothing).

:func:`pending_work` lists every change the open would make; an empty list means the store is
settled and the open issues no write at all (no write transaction, ``PRAGMA data_version`` and
the bytes of ``state.db``/``-wal`` unchanged), whatever the store's version (2 to 31) and the
names its indexes and triggers carry. Everything is judged by structure
(:mod:`hermes_state.schema.fts_inventory`), never by the names this code would have used.

The small repairs an open makes on any store, newer ones included, live here too:

* ``messages.active`` NULL -> 1 (UPSTREAM_API.md D11: legacy stores added the column without
  NOT NULL/DEFAULT and ``WHERE active = 1`` readers would not see those rows). Checked first
  with a read, so a store without such rows takes no write lock; a column declared NOT NULL
  cannot hold NULL and is not scanned at all.
* the three ``messages_fts_cjk_*`` triggers of a v25+ store are dropped when this SQLite cannot
  load the ``cjk_unicode61`` tokenizer (every INSERT/UPDATE/DELETE on ``messages`` would fail)
  and ``state_meta['fts_cjk_stale']`` records that the CJK index must be rebuilt (what upstream
  does itself, UPSTREAM_API.md §4.2).

A store NEWER than this code keeps its version, its FTS layout, its views and its
``application_id`` (v31 derives it from its own ``db_file_generation`` token); only missing
tables and columns of this code's schema are added.
"""

from __future__ import annotations

import logging
import os
import sqlite3

from ..errors import NewerSchemaWriteError
from ..processes.checkpoint_lock import wal_reset_exposure
from ..processes.generation import application_id_for
from .fts_inventory import inventory
from .fts_layout import OPTIMIZE_KEY, assess
from .history import VERSIONS
from .tables import (
    SCHEMA_VERSION,
    declared_columns,
    equivalent_index,
    fts5_available,
    fts_triggers,
    index_shape,
)

log = logging.getLogger("hermes_state.schema.shape")

CJK_TABLE = "messages_fts_cjk"
_kept_logged: set[str] = set()
CJK_STALE_KEY = "fts_cjk_stale"
TOKEN_KEY = "db_file_generation"


def keeps_journal_mode(conn: sqlite3.Connection, mode: str, db_path: os.PathLike | str) -> bool:
    """True when a rollback-journal store must stay so: a newer release chose it (§4.5).

    Releases from schema 25 refuse WAL on SQLite builds with the WAL-reset race and write
    ``journal_mode=DELETE`` stores there. When this SQLite has the same race, switching such a
    store to WAL would undo the newer release's decision (and it keeps an already-WAL store in
    WAL), so the store keeps its mode; everything else is switched to WAL as usual (SPEC §4).
    """
    if mode.lower() not in ("delete", "truncate", "persist") or wal_reset_exposure() is None:
        return False
    version, _rows = stored_version(conn)  # a lock error propagates: the caller retries it
    if version is None or version <= SCHEMA_VERSION:
        return False
    key = os.path.realpath(os.fspath(db_path))
    if key not in _kept_logged:
        _kept_logged.add(key)
        log.info("%s (schema %s) keeps journal_mode=%s, as its release chose on a SQLite with "
                 "the WAL-reset race", db_path, version, mode.lower())
    return True


def stored_version(conn: sqlite3.Connection) -> tuple[int | None, int]:
    """``(version, rows)`` of ``schema_version`` (version None when the table is absent or
    holds no version).

    Rows that are not numbers (a damaged or foreign row) are ignored for the version but
    counted, so the open normalises the table. Values below 1 are not a version either: a
    migration would otherwise step up from a version that never existed (issue 11.10).

    Raises:
        sqlite3.OperationalError: the table could not be read (a lock held by another process,
            an I/O error): an unreadable version is never taken as "no version" (issue 23),
            the caller retries or names it.
    """
    try:
        rows = conn.execute("SELECT version FROM schema_version").fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" not in str(exc):
            raise
        return None, 0
    values = [int(r[0]) for r in rows if isinstance(r[0], (int, float))
              and not isinstance(r[0], bool) and r[0] >= 1 and r[0] == r[0]]
    return (max(values) if values else None), len(rows)


def active_nulls(conn: sqlite3.Connection) -> bool:
    """True when some ``messages.active`` is NULL (a NOT NULL column is not scanned)."""
    info = {r[1]: r for r in conn.execute("PRAGMA table_info(messages)")}
    col = info.get("active")
    if col is None or col[3]:
        return False
    return conn.execute("SELECT 1 FROM messages WHERE active IS NULL LIMIT 1").fetchone() is not None


def heal_active(conn: sqlite3.Connection) -> int:
    """``UPDATE messages SET active = 1 WHERE active IS NULL`` (in the caller's transaction)."""
    if not active_nulls(conn):
        return 0
    return max(conn.execute("UPDATE messages SET active = 1 WHERE active IS NULL").rowcount, 0)


def cjk_tokenizer_available(conn: sqlite3.Connection) -> bool:
    """True when this SQLite can load ``cjk_unicode61`` (probed on a ``temp`` table)."""
    try:
        conn.execute("CREATE VIRTUAL TABLE temp._probe_cjk USING fts5(x, tokenize='cjk_unicode61')")
        conn.execute("DROP TABLE temp._probe_cjk")
        return True
    except sqlite3.OperationalError:
        return False


def unusable_cjk_triggers(conn: sqlite3.Connection) -> list[str]:
    """Triggers on ``messages`` feeding ``messages_fts_cjk`` while the tokenizer is missing."""
    names = [t.name for t in inventory(conn).triggers if CJK_TABLE in t.targets]
    if not names or cjk_tokenizer_available(conn):
        return []
    return names


def drop_unusable_cjk(conn: sqlite3.Connection) -> int:
    """Drop :func:`unusable_cjk_triggers` and set ``fts_cjk_stale`` (caller's transaction)."""
    names = unusable_cjk_triggers(conn)
    for name in names:
        conn.execute(f'DROP TRIGGER IF EXISTS "{name}"')
    if names:
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, '1')",
                     (CJK_STALE_KEY,))
    return len(names)


def generation_settled(conn: sqlite3.Connection, version: int) -> bool:
    """The generation token exists; up to 23 also its ``application_id`` (SPEC §10.1)."""
    try:
        tok = conn.execute("SELECT value FROM state_meta WHERE key = ?", (TOKEN_KEY,)).fetchone()
    except sqlite3.OperationalError:
        return False
    if tok is None or tok[0] is None:
        return False
    if version > SCHEMA_VERSION:
        return True  # a newer release owns its application_id (v31 derives it from the token)
    return conn.execute("PRAGMA application_id").fetchone()[0] == application_id_for(tok[0])


def pending_work(conn: sqlite3.Connection) -> list[str]:
    """Every change a writable open would make to this store; ``[]`` = settled (read-only).

    Returns:
        Human-readable items, e.g. ``["migrate schema 11 -> 23"]``,
        ``["FTS layout: replace (external-v1)"]``, ``["add column sessions.pinned"]``.
    """
    version, nrows = stored_version(conn)
    if version is None:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        return ["create the store"] if not names & {"sessions", "messages"} else \
            ["infer the schema version (schema_version is empty)"]
    if version < SCHEMA_VERSION:
        return [f"migrate schema {version} -> {SCHEMA_VERSION}"]
    out: list[str] = []
    if nrows != 1:
        out.append(f"normalise schema_version ({nrows} rows)")
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    for table, cols in declared_columns().items():
        if table not in names:
            out.append(f"create table {table}")
            continue
        live = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        out += [f"add column {table}.{c}" for c, _ in cols if c not in live]
    if out:
        return out
    if not fts5_available(conn):
        # No FTS5 here (issue 23.3): the only FTS work is dropping triggers that cannot fire.
        names = fts_triggers(conn)
        if names:
            out.append(f"switch FTS off: this SQLite has no FTS5 (drop {', '.join(names)})")
    elif version == SCHEMA_VERSION:
        plan = assess(conn)
        if plan in ("create", "replace"):
            out.append(f"FTS layout: {plan} ({inventory(conn).kind})")
        elif plan == "legacy" and conn.execute(
                "SELECT 1 FROM state_meta WHERE key = ? AND value = '1'",
                (OPTIMIZE_KEY,)).fetchone() is None:
            out.append(f"flag the legacy FTS layout ({OPTIMIZE_KEY})")
        if "idx_sessions_title_unique" not in names:
            out.append("create the unique title index")
        if not routing_key_ok(conn):
            out.append("key gateway_routing on (scope, session_key)")
    else:
        cjk = unusable_cjk_triggers(conn)
        if cjk:
            out.append(f"drop {', '.join(cjk)} (no cjk_unicode61 tokenizer here)")
    if active_nulls(conn):
        out.append("heal NULL messages.active to 1")
    if not generation_settled(conn, version):
        out.append("stamp the generation token")
    return out


_UNSAFE_MARKERS = ("NOT NULL constraint failed", "CHECK constraint failed", "no such tokenizer",
                   "no such function", "no such module")


def newer_schema_error(conn: sqlite3.Connection, exc: BaseException, op: str):
    """The named error for a write a newer store's schema refused, or None (issue 10 item 2).

    Args:
        conn: a connection to the store (read-only use).
        exc: what the write raised.
        op: the operation (``append_message``, ...).
    Returns:
        :class:`hermes_state.errors.NewerSchemaWriteError` when the store is newer than this
        code and ``exc`` is a constraint/trigger failure its schema caused; else None.
    """
    if not isinstance(exc, (sqlite3.IntegrityError, sqlite3.OperationalError)):
        return None
    text = str(exc)
    if not any(m in text for m in _UNSAFE_MARKERS):
        return None
    try:
        version = stored_version(conn)[0]
    except sqlite3.Error:
        return None
    if version is None or version <= SCHEMA_VERSION:
        return None
    return NewerSchemaWriteError(
        f"{op} cannot be written to this session store: it has schema version {version}, newer "
        f"than this code (schema {SCHEMA_VERSION}), and that release requires something this "
        f"code does not write ({text}). Nothing was written. Run this operation with the release "
        f"that wrote the store (schema {version}) or a newer hermes-state; reading keeps working.",
        f"{type(exc).__name__}: {text}", schema_version=version, operation=op)


_ROUTING_KEY = ["scope", "session_key"]


def routing_key_ok(conn: sqlite3.Connection) -> bool:
    """``gateway_routing`` is keyed ``(scope, session_key)`` (or absent)."""
    info = conn.execute("PRAGMA table_info(gateway_routing)").fetchall()
    pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
    return not info or pk == _ROUTING_KEY


def fix_routing_key(conn: sqlite3.Connection) -> int:
    """Rebuild a ``gateway_routing`` keyed on ``session_key`` alone (early builds) with the
    ``(scope, session_key)`` key every later release and this code use (UPSTREAM_API.md §4.3;
    upstream 25+ do the same). Rows keep their values, a NULL scope becomes ``''``; on a
    collision the newest ``updated_at`` wins. Returns the rows copied (0: nothing to do)."""
    if routing_key_ok(conn):
        return 0
    live = {r[1] for r in conn.execute("PRAGMA table_info(gateway_routing)")}
    tmp = "gateway_routing__key"
    conn.execute(f"DROP TABLE IF EXISTS {tmp}")
    conn.execute(f"CREATE TABLE {tmp} (scope TEXT NOT NULL DEFAULT '', session_key TEXT NOT "
                 "NULL, entry_json TEXT NOT NULL, updated_at REAL NOT NULL, "
                 "PRIMARY KEY (scope, session_key))")
    scope = "COALESCE(scope, '')" if "scope" in live else "''"
    cur = conn.execute(f"INSERT OR REPLACE INTO {tmp}(scope, session_key, entry_json, "
                       f"updated_at) SELECT {scope}, session_key, entry_json, updated_at FROM "
                       "gateway_routing ORDER BY updated_at")
    conn.execute("DROP TABLE gateway_routing")
    conn.execute(f"ALTER TABLE {tmp} RENAME TO gateway_routing")
    return max(cur.rowcount, 0)


#: Views the releases create for their external-content FTS tables (UPSTREAM_API.md §4.2).
KNOWN_VIEWS = frozenset({"messages_fts_src", "messages_fts_trigram_src", "messages_fts_cjk_src"})


#: Index names upstream releases 25 and 31 add (UPSTREAM_API.md §4.3).
_NEWER_INDEXES = frozenset({
    "idx_messages_session_id", "idx_messages_assistant_calls_by_session",
    "idx_sessions_system_prompt_hash", "idx_messages_display_page",
    "idx_messages_display_backfill", "idx_messages_display_identity", "idx_messages_session_uid",
    "idx_sessions_effective_activity", "idx_sessions_tool_names",
    "idx_session_turn_leases_expires"})


def known_index_names() -> frozenset:
    """Every index name a release (2..31) or this code creates."""
    return _NEWER_INDEXES | {n for vs in VERSIONS.values() for n, _ in vs.indexes}


def describe(conn: sqlite3.Connection) -> dict:
    """What the store is and what a writable open of this code would do to it (read-only).

    Returns:
        ``{"schema_version", "code_version", "newer", "fts_layout", "fts_plan", "fts_tables",
        "fts_triggers", "foreign_triggers", "fts_problems", "duplicate_indexes",
        "other_views", "pending"}``; ``duplicate_indexes`` maps an index under a name no
        release uses to the known index it duplicates; ``pending`` is :func:`pending_work`
        (``[]`` = the next open writes nothing).
    """
    version, _rows = stored_version(conn)
    inv = inventory(conn)
    duplicates = {}
    known = known_index_names()
    for (name, table) in conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type = "
                                      "'index' AND sql IS NOT NULL ORDER BY name").fetchall():
        tbl, cols, unique, partial = index_shape(conn, name)
        if unique or partial or name in known:
            continue
        twin = equivalent_index(conn, name, table, cols)
        if twin is not None:
            duplicates[name] = twin  # a foreign name for an index a release already has
    summary = inv.as_dict()
    return {
        "schema_version": version, "code_version": SCHEMA_VERSION,
        "newer": version is not None and version > SCHEMA_VERSION,
        "fts_layout": inv.kind,
        "fts_plan": assess(conn, inv) if version is not None and version <= SCHEMA_VERSION
        else "keep",
        "fts_tables": summary["tables"], "fts_triggers": summary["triggers"],
        "foreign_triggers": inv.foreign, "fts_problems": list(inv.problems),
        "duplicate_indexes": duplicates,
        "other_views": sorted(set(inv.views) - KNOWN_VIEWS),
        "pending": pending_work(conn),
    }
