"""Declared schema of every historical version 1-23, as data, and fixture stores (SPEC §3, §16.6).

SPEC §16.6 asks for "fixture stores for every historical schema version (1-22) generated from a
declared per-version DDL, filled with deterministic data". This module is that declaration:
:func:`schema_at` returns which tables (with which columns, in which order), which indexes and
which FTS layout a store of version N had, and :func:`build_fixture` creates such a store with
deterministic content and returns a manifest of everything it wrote.

Version table (SPEC §3 and the seed ``session-storage.ja.md``; "columns" = added by
``_reconcile_columns`` in the current code, "data" = a versioned step of
:mod:`hermes_state.migrations`):

=====  ===========================================================================  ==========
 v     change                                                                       kind
=====  ===========================================================================  ==========
 1     sessions, messages, schema_version, indexes; ``messages_fts(content)``       initial
       INLINE FTS5 table with triggers ``messages_fts_ai/_ad/_au``
 2     ``messages.finish_reason``                                                   columns
 3     ``sessions.title``                                                           columns
 4     ``idx_sessions_title_unique`` (partial unique); duplicates: newest keeps it  data
 5     sessions ``cache_read_tokens, cache_write_tokens, reasoning_tokens,          columns
       billing_provider, billing_base_url, billing_mode, estimated_cost_usd,
       actual_cost_usd, cost_status, cost_source, pricing_version``
 6     messages ``reasoning, reasoning_details, codex_reasoning_items``             columns
 7     ``messages.reasoning_content``                                               columns
 8     ``sessions.api_call_count``                                                  columns
 9     ``messages.codex_message_items``                                             columns
 10    INLINE ``messages_fts_trigram(content, tokenize='trigram')`` without         data
       ``role='tool'`` rows, triggers ``messages_fts_trigram_ai/_ad/_au``; back-fill
 11    both FTS tables rebuilt INLINE over ``content, tool_name, tool_calls``;      data
       old triggers dropped, every row re-indexed
 12    ``state_meta``                                                               table
 13    ``gateway_routing``; sessions ``session_key, chat_id, chat_type, thread_id`` table+cols
 14    ``compression_locks``                                                        table
 15    ``async_delegations``                                                        table
 16    tag delegated sub-agent sessions: ``model_config.$._delegate_from``          data
 17    sessions ``display_name, origin_json, expiry_finalized``                     columns
 18    back-fill those three from ``<HERMES_HOME>/sessions/sessions.json``          data
 19    messages ``effect_disposition, platform_message_id, observed``;              columns
       sessions ``cwd, git_branch, git_repo_root``
 20    ``session_model_usage`` (PRIMARY KEY without ``task``) seeded from the       table+data
       per-session totals
 21    messages ``active, compacted, api_content, display_kind, display_metadata``; columns
       sessions ``handoff_state, handoff_platform, handoff_error,
       compression_failure_cooldown_until, compression_failure_error,
       profile_name, rewind_count, archived, pinned``
 22    ``session_model_usage`` rebuilt with ``task`` in the PRIMARY KEY             data
 23    external-content FTS (``content='messages'``) for FRESH stores; an existing  version
       store only advances the version and keeps its inline FTS until
       ``sessions optimize-storage`` (:mod:`hermes_state.fts_layout`)
=====  ===========================================================================  ==========

Decisions recorded here (the seed leaves them open):

* v5 carries ``sessions.reasoning_tokens`` (the seed's v5 row lists it; v6 is messages only).
* The legacy FTS triggers carry THE SAME NAMES as the v23 ones, so the current
  ``CREATE TRIGGER IF NOT EXISTS`` never adds a second trigger to a legacy table.
* v16 rule: a session is a delegated sub-agent when ``parent_session_id IS NOT NULL`` and
  ``source IN ('subagent', 'delegate')``; it gets ``model_config = json_set(COALESCE(
  model_config, '{}'), '$._delegate_from', parent_session_id)`` unless already tagged. A
  ``model_config`` that is not a JSON object is left untouched (never destroy data) and counted.
* v18 reads ``sessions.json`` (see :mod:`hermes_state.migrations` for the accepted shapes).
"""

from __future__ import annotations

import json
import random
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from . import schema

CURRENT_VERSION = schema.SCHEMA_VERSION

Column = tuple[str, str]  # (name, type and constraints as in CREATE TABLE)


@dataclass(frozen=True)
class TableSpec:
    """One table as declared at some version: ordered columns plus table constraints."""

    name: str
    columns: tuple[Column, ...]
    constraints: tuple[str, ...] = ()

    @property
    def column_names(self) -> tuple[str, ...]:
        """The column names in declaration order."""
        return tuple(c for c, _ in self.columns)

    def create_sql(self) -> str:
        """``CREATE TABLE IF NOT EXISTS`` text of this table."""
        body = [f"    {n} {d}".rstrip() for n, d in self.columns]
        body += [f"    {c}" for c in self.constraints]
        return f"CREATE TABLE IF NOT EXISTS {self.name} (\n" + ",\n".join(body) + "\n)"

    def add(self, cols: tuple[Column, ...]) -> "TableSpec":
        """A copy with ``cols`` appended (what ``ALTER TABLE ADD COLUMN`` produces)."""
        return TableSpec(self.name, self.columns + tuple(cols), self.constraints)


@dataclass(frozen=True)
class FtsLayout:
    """One FTS layout: its virtual tables and the triggers that keep them in sync."""

    name: str
    tables: tuple[tuple[str, str], ...]      # (table name, CREATE VIRTUAL TABLE sql)
    triggers: tuple[tuple[str, str], ...]    # (trigger name, CREATE TRIGGER sql)
    columns: tuple[str, ...]                 # the indexed messages columns
    external: bool

    @property
    def table_names(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.tables)


@dataclass(frozen=True)
class VersionSchema:
    """The declared schema of one version (SPEC §16.6)."""

    version: int
    summary: str
    tables: Mapping[str, TableSpec]
    indexes: tuple[tuple[str, str], ...]      # (index name, CREATE INDEX sql)
    fts_layout: str
    data_step: bool = False
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def fts(self) -> FtsLayout:
        return FTS_LAYOUTS[self.fts_layout]

    def columns(self, table: str) -> tuple[str, ...]:
        """Column names of ``table`` at this version (``()`` when the table did not exist)."""
        spec = self.tables.get(table)
        return spec.column_names if spec else ()


# ---------------------------------------------------------------------------------------------
# FTS layouts
# ---------------------------------------------------------------------------------------------

def _inline_triggers(table: str, cols: tuple[str, ...], *, exclude_tool: bool,
                     update_of: str) -> tuple[tuple[str, str], ...]:
    names = ", ".join(cols)
    new_vals = ", ".join(f"new.{c}" for c in cols)
    when = " WHEN new.role != 'tool'" if exclude_tool else ""
    guard = " WHERE new.role != 'tool'" if exclude_tool else ""
    return (
        (f"{table}_ai",
         f"CREATE TRIGGER IF NOT EXISTS {table}_ai AFTER INSERT ON messages{when}\nBEGIN\n"
         f"    INSERT INTO {table}(rowid, {names}) VALUES (new.id, {new_vals});\nEND"),
        (f"{table}_ad",
         f"CREATE TRIGGER IF NOT EXISTS {table}_ad AFTER DELETE ON messages\nBEGIN\n"
         f"    DELETE FROM {table} WHERE rowid = old.id;\nEND"),
        (f"{table}_au",
         f"CREATE TRIGGER IF NOT EXISTS {table}_au AFTER UPDATE OF {update_of} ON messages\n"
         f"BEGIN\n    DELETE FROM {table} WHERE rowid = old.id;\n"
         f"    INSERT INTO {table}(rowid, {names}) SELECT new.id, {new_vals}{guard};\nEND"),
    )


_C1 = ("content",)
_C11 = ("content", "tool_name", "tool_calls")

_FTS_V1 = ("messages_fts", "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(content)")
_TRI_V10 = ("messages_fts_trigram", "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram "
            "USING fts5(content, tokenize='trigram')")
_FTS_V11 = ("messages_fts", "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts "
            "USING fts5(content, tool_name, tool_calls)")
_TRI_V11 = ("messages_fts_trigram", "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram "
            "USING fts5(content, tool_name, tool_calls, tokenize='trigram')")


def _external_layout() -> FtsLayout:
    triggers = []
    for sql in schema._split_triggers(schema.FTS_TRIGGERS_SQL + schema.TRIGRAM_TRIGGERS_SQL):
        name = sql.split("IF NOT EXISTS", 1)[1].split()[0]
        triggers.append((name, sql))
    return FtsLayout(
        "external-v23",
        (("messages_fts", schema.FTS_TABLE_SQL.strip().rstrip(";")),
         ("messages_fts_trigram", schema.TRIGRAM_TABLE_SQL.strip().rstrip(";"))),
        tuple(triggers), _C11, external=True)


#: Every FTS layout a store can have. Legacy layouts are INLINE (contentful) FTS5 tables: each
#: keeps its own copy of the text, which is what v23 ("optimize-storage") removes.
FTS_LAYOUTS: dict[str, FtsLayout] = {
    "inline-v1": FtsLayout(
        "inline-v1", (_FTS_V1,),
        _inline_triggers("messages_fts", _C1, exclude_tool=False, update_of="content"),
        _C1, external=False),
    "inline-v10": FtsLayout(
        "inline-v10", (_FTS_V1, _TRI_V10),
        _inline_triggers("messages_fts", _C1, exclude_tool=False, update_of="content")
        + _inline_triggers("messages_fts_trigram", _C1, exclude_tool=True,
                           update_of="content, role"),
        _C1, external=False),
    "inline-v11": FtsLayout(
        "inline-v11", (_FTS_V11, _TRI_V11),
        _inline_triggers("messages_fts", _C11, exclude_tool=False,
                         update_of="content, tool_name, tool_calls")
        + _inline_triggers("messages_fts_trigram", _C11, exclude_tool=True,
                           update_of="content, tool_name, tool_calls, role"),
        _C11, external=False),
    "external-v23": _external_layout(),
}

INLINE_LAYOUTS = frozenset(n for n, lay in FTS_LAYOUTS.items() if not lay.external)
EXTERNAL_LAYOUT = "external-v23"


def live_fts_layout(conn: sqlite3.Connection) -> str:
    """Recognise the FTS layout of a live store (SPEC §2.4, §3).

    Returns:
        ``"none"`` (no ``messages_fts``), ``"external-v23"`` (``content='messages'``),
        ``"inline-v11"`` (inline, three columns), ``"inline-v10"`` (inline ``content`` with an
        inline trigram table) or ``"inline-v1"`` (inline ``content`` only).
    """
    rows = dict(conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE name IN "
        "('messages_fts', 'messages_fts_trigram')").fetchall())
    sql = rows.get("messages_fts")
    if sql is None:
        return "none"
    compact = "".join(sql.split()).lower()
    if "content='messages'" in compact or 'content="messages"' in compact:
        return EXTERNAL_LAYOUT
    cols = [r[1] for r in conn.execute("PRAGMA table_info(messages_fts)")]
    if "tool_name" in cols:
        return "inline-v11"
    return "inline-v10" if "messages_fts_trigram" in rows else "inline-v1"


# ---------------------------------------------------------------------------------------------
# Tables per version
# ---------------------------------------------------------------------------------------------

_SESSIONS_V1 = TableSpec("sessions", (
    ("id", "TEXT PRIMARY KEY"),
    ("source", "TEXT NOT NULL"),
    ("user_id", "TEXT"),
    ("model", "TEXT"),
    ("model_config", "TEXT"),
    ("system_prompt", "TEXT"),
    ("parent_session_id", "TEXT"),
    ("started_at", "REAL NOT NULL"),
    ("ended_at", "REAL"),
    ("end_reason", "TEXT"),
    ("message_count", "INTEGER DEFAULT 0"),
    ("tool_call_count", "INTEGER DEFAULT 0"),
    ("input_tokens", "INTEGER DEFAULT 0"),
    ("output_tokens", "INTEGER DEFAULT 0"),
), ("FOREIGN KEY (parent_session_id) REFERENCES sessions(id)",))

_MESSAGES_V1 = TableSpec("messages", (
    ("id", "INTEGER PRIMARY KEY AUTOINCREMENT"),
    ("session_id", "TEXT NOT NULL REFERENCES sessions(id)"),
    ("role", "TEXT NOT NULL"),
    ("content", "TEXT"),
    ("tool_call_id", "TEXT"),
    ("tool_calls", "TEXT"),
    ("tool_name", "TEXT"),
    ("timestamp", "REAL NOT NULL"),
    ("token_count", "INTEGER"),
))

_SCHEMA_VERSION = TableSpec("schema_version", (("version", "INTEGER NOT NULL"),))
_STATE_META = TableSpec("state_meta", (("key", "TEXT PRIMARY KEY"), ("value", "TEXT")))
_GATEWAY_ROUTING = TableSpec("gateway_routing", (
    ("scope", "TEXT NOT NULL DEFAULT ''"),
    ("session_key", "TEXT NOT NULL"),
    ("entry_json", "TEXT NOT NULL"),
    ("updated_at", "REAL NOT NULL"),
), ("PRIMARY KEY (scope, session_key)",))
_COMPRESSION_LOCKS = TableSpec("compression_locks", (
    ("session_id", "TEXT PRIMARY KEY"),
    ("holder", "TEXT NOT NULL"),
    ("acquired_at", "REAL"),
    ("expires_at", "REAL"),
))
_ASYNC_DELEGATIONS = TableSpec("async_delegations", (
    ("delegation_id", "TEXT PRIMARY KEY"),
    ("origin_session", "TEXT"),
    ("parent_session_id", "TEXT"),
    ("state", "TEXT"),
    ("dispatched_at", "REAL"),
    ("completed_at", "REAL"),
    ("updated_at", "REAL"),
    ("event_json", "TEXT"),
    ("result_json", "TEXT"),
    ("delivery_state", "TEXT DEFAULT 'pending'"),
    ("delivery_attempts", "INTEGER DEFAULT 0"),
    ("delivered_at", "REAL"),
    ("owner_pid", "INTEGER"),
))
_USAGE_KEY = (
    ("session_id", "TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE"),
    ("model", "TEXT NOT NULL DEFAULT ''"),
    ("billing_provider", "TEXT NOT NULL DEFAULT ''"),
    ("billing_base_url", "TEXT NOT NULL DEFAULT ''"),
    ("billing_mode", "TEXT NOT NULL DEFAULT ''"),
)
_USAGE_VALUES = (
    ("api_call_count", "INTEGER DEFAULT 0"),
    ("input_tokens", "INTEGER DEFAULT 0"),
    ("output_tokens", "INTEGER DEFAULT 0"),
    ("cache_read_tokens", "INTEGER DEFAULT 0"),
    ("cache_write_tokens", "INTEGER DEFAULT 0"),
    ("reasoning_tokens", "INTEGER DEFAULT 0"),
    ("estimated_cost_usd", "REAL"),
    ("actual_cost_usd", "REAL"),
    ("cost_status", "TEXT"),
    ("cost_source", "TEXT"),
    ("first_seen", "REAL"),
    ("last_seen", "REAL"),
)
#: v20: per-model usage rows, no task dimension yet.
USAGE_V20 = TableSpec("session_model_usage", _USAGE_KEY + _USAGE_VALUES, (
    "PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode)",))
#: v22 (= v23): ``task`` in the primary key.
USAGE_V22 = TableSpec("session_model_usage",
                      _USAGE_KEY + (("task", "TEXT NOT NULL DEFAULT ''"),) + _USAGE_VALUES, (
    "PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task)",))

_IDX_V1 = (
    ("idx_sessions_source", "CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source)"),
    ("idx_sessions_parent",
     "CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id)"),
    ("idx_sessions_started",
     "CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC)"),
    ("idx_messages_session",
     "CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp)"),
    ("idx_messages_session_id",
     "CREATE INDEX IF NOT EXISTS idx_messages_session_id ON messages(session_id, id)"),
)
_IDX_TITLE = (("idx_sessions_title_unique", schema.TITLE_INDEX_SQL),)

# Per-version changes, as data. Keys: summary, add (columns per table), tables (new tables),
# replace (tables rebuilt), indexes, fts (layout name), data (a data step exists).
_CHANGES: dict[int, dict[str, Any]] = {
    1: {"summary": "initial schema: sessions, messages, inline FTS5 messages_fts(content)",
        "tables": (_SCHEMA_VERSION, _SESSIONS_V1, _MESSAGES_V1), "indexes": _IDX_V1,
        "fts": "inline-v1"},
    2: {"summary": "messages.finish_reason", "add": {"messages": (("finish_reason", "TEXT"),)}},
    3: {"summary": "sessions.title", "add": {"sessions": (("title", "TEXT"),)}},
    4: {"summary": "unique title index (NULL allowed); duplicates: newest keeps the title",
        "indexes": _IDX_TITLE, "data": True},
    5: {"summary": "billing/cost columns and cache/reasoning token totals on sessions",
        "add": {"sessions": (
            ("cache_read_tokens", "INTEGER DEFAULT 0"), ("cache_write_tokens", "INTEGER DEFAULT 0"),
            ("reasoning_tokens", "INTEGER DEFAULT 0"), ("billing_provider", "TEXT"),
            ("billing_base_url", "TEXT"), ("billing_mode", "TEXT"),
            ("estimated_cost_usd", "REAL"), ("actual_cost_usd", "REAL"), ("cost_status", "TEXT"),
            ("cost_source", "TEXT"), ("pricing_version", "TEXT"))}},
    6: {"summary": "reasoning columns on messages",
        "add": {"messages": (("reasoning", "TEXT"), ("reasoning_details", "TEXT"),
                             ("codex_reasoning_items", "TEXT"))}},
    7: {"summary": "messages.reasoning_content",
        "add": {"messages": (("reasoning_content", "TEXT"),)}},
    8: {"summary": "sessions.api_call_count",
        "add": {"sessions": (("api_call_count", "INTEGER DEFAULT 0"),)}},
    9: {"summary": "messages.codex_message_items",
        "add": {"messages": (("codex_message_items", "TEXT"),)}},
    10: {"summary": "inline trigram FTS table (no role='tool' rows) + back-fill",
         "fts": "inline-v10", "data": True},
    11: {"summary": "both FTS tables cover content, tool_name, tool_calls (inline) + re-index",
         "fts": "inline-v11", "data": True},
    12: {"summary": "state_meta table", "tables": (_STATE_META,)},
    13: {"summary": "gateway_routing table + sessions routing columns",
         "tables": (_GATEWAY_ROUTING,),
         "add": {"sessions": (("session_key", "TEXT"), ("chat_id", "TEXT"),
                              ("chat_type", "TEXT"), ("thread_id", "TEXT"))}},
    14: {"summary": "compression_locks table", "tables": (_COMPRESSION_LOCKS,)},
    15: {"summary": "async_delegations table", "tables": (_ASYNC_DELEGATIONS,)},
    16: {"summary": "tag delegated sub-agent sessions (model_config.$._delegate_from)",
         "data": True},
    17: {"summary": "sessions display_name, origin_json, expiry_finalized",
         "add": {"sessions": (("display_name", "TEXT"), ("origin_json", "TEXT"),
                              ("expiry_finalized", "INTEGER DEFAULT 0"))}},
    18: {"summary": "back-fill gateway metadata from sessions/sessions.json (NULLs only)",
         "data": True},
    19: {"summary": "message effect/platform/observed; session workspace columns",
         "add": {"messages": (("effect_disposition", "TEXT"), ("platform_message_id", "TEXT"),
                              ("observed", "INTEGER DEFAULT 0")),
                 "sessions": (("cwd", "TEXT"), ("git_branch", "TEXT"),
                              ("git_repo_root", "TEXT"))}},
    20: {"summary": "session_model_usage (key without task) seeded from per-session totals",
         "tables": (USAGE_V20,), "data": True},
    21: {"summary": "display/compaction columns on messages; handoff, compression-failure, "
                    "profile and flags on sessions",
         "add": {"messages": (("active", "INTEGER NOT NULL DEFAULT 1"),
                              ("compacted", "INTEGER NOT NULL DEFAULT 0"),
                              ("api_content", "TEXT"), ("display_kind", "TEXT"),
                              ("display_metadata", "TEXT")),
                 "sessions": (("handoff_state", "TEXT"), ("handoff_platform", "TEXT"),
                              ("handoff_error", "TEXT"),
                              ("compression_failure_cooldown_until", "REAL"),
                              ("compression_failure_error", "TEXT"), ("profile_name", "TEXT"),
                              ("rewind_count", "INTEGER NOT NULL DEFAULT 0"),
                              ("archived", "INTEGER NOT NULL DEFAULT 0"),
                              ("pinned", "INTEGER NOT NULL DEFAULT 0"))}},
    22: {"summary": "session_model_usage rebuilt with task in the primary key",
         "replace": (USAGE_V22,), "data": True},
    23: {"summary": "external-content FTS for fresh stores; existing stores: version advance "
                    "only (optimize-storage converts)", "fts": "external-v23"},
}


def _build_versions() -> dict[int, VersionSchema]:
    out: dict[int, VersionSchema] = {}
    tables: dict[str, TableSpec] = {}
    indexes: tuple[tuple[str, str], ...] = ()
    layout = ""
    for v in range(1, CURRENT_VERSION + 1):
        ch = _CHANGES[v]
        for spec in ch.get("tables", ()):
            tables[spec.name] = spec
        for spec in ch.get("replace", ()):
            tables[spec.name] = spec
        for name, cols in ch.get("add", {}).items():
            tables[name] = tables[name].add(cols)
        indexes = indexes + tuple(ch.get("indexes", ()))
        layout = ch.get("fts", layout)
        out[v] = VersionSchema(v, ch["summary"], dict(tables), indexes, layout,
                               bool(ch.get("data")))
    return out


VERSIONS: dict[int, VersionSchema] = _build_versions()


def schema_at(version: int) -> VersionSchema:
    """The declared schema of ``version`` (1..23).

    Raises:
        KeyError: an unknown version.
    """
    return VERSIONS[version]


def version_table() -> list[tuple[int, str, bool]]:
    """``[(version, summary, has_data_step), ...]`` for reports and docs."""
    return [(v, s.summary, s.data_step) for v, s in VERSIONS.items()]


def create_store_schema(conn: sqlite3.Connection, version: int) -> None:
    """Create the exact schema of ``version`` (tables, indexes, FTS layout) on an empty DB.

    The v10/v11 trigram tables are skipped when this SQLite has no trigram tokenizer.
    """
    vs = schema_at(version)
    for spec in vs.tables.values():
        conn.execute(spec.create_sql())
    for _name, sql in vs.indexes:
        conn.execute(sql)
    tri = schema.trigram_supported(conn)
    for name, sql in vs.fts.tables:
        if name == "messages_fts_trigram" and not tri:
            continue
        conn.execute(sql)
    for name, sql in vs.fts.triggers:
        if name.startswith("messages_fts_trigram") and not tri:
            continue
        conn.execute(sql)


def infer_version(conn: sqlite3.Connection) -> int:
    """The lowest version structurally equal to the highest declared version the live store has.

    "Has" = its tables, columns, indexes and FTS layout are present. Used only when
    ``schema_version`` has no row (a store damaged or written by code that crashed between creating its tables and recording the version): a lower bound that lets
    the (idempotent) versioned steps run from there.
    """
    live_tables = {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")}
    layout = live_fts_layout(conn)
    order = ["none", "inline-v1", "inline-v10", "inline-v11", "external-v23"]
    for v in range(CURRENT_VERSION, 0, -1):
        vs = VERSIONS[v]
        if order.index(layout) < order.index(vs.fts_layout):
            continue
        if not all(name in live_tables for name, _ in vs.indexes):
            continue
        ok = True
        for name, spec in vs.tables.items():
            live = {r[1] for r in conn.execute(f"PRAGMA table_info({name})")}
            if not set(spec.column_names) <= live:
                ok = False
                break
        if ok:
            # Data-only steps leave no structural trace: return the LOWEST version with the same
            # structure so that such steps (idempotent) run again rather than being skipped.
            while v > 1 and _structure(VERSIONS[v - 1]) == _structure(vs):
                v -= 1
            return v
    return 1


def _structure(vs: VersionSchema) -> tuple:
    return (tuple(sorted((n, s.column_names) for n, s in vs.tables.items())),
            tuple(sorted(n for n, _ in vs.indexes)), vs.fts_layout)


# ---------------------------------------------------------------------------------------------
# Fixtures
# ---------------------------------------------------------------------------------------------

_CJK_DIGITS = "零一二三四五六七八九"
BASE_TIME = 1_700_000_000.0

#: Sessions that play a role in the fixture (index -> role), when ``sessions`` is large enough.
#: 2 -> 3 -> 5 is a compression lineage; 7, 8 are delegated sub-agents of 1 (8 without config);
#: 9 is a sub-agent child whose model_config is not JSON (left alone by v16); 10 is a
#: 'subagent' without parent (never tagged).
_ROLES = {3: ("cli", 2), 5: ("cli", 3), 7: ("subagent", 1), 8: ("delegate", 1),
          9: ("subagent", 2), 10: ("subagent", None)}
_SOURCES = ("cli", "telegram", "discord", "cli")
_DUP_TITLES = {4: "Duplicate title", 6: "Duplicate title",
               9: "Shared name", 10: "Shared name", 11: "Shared name"}


def cjk_number(n: int, width: int = 4) -> str:
    """``n`` written with CJK digits, zero-padded (a unique CJK run per message)."""
    return "".join(_CJK_DIGITS[int(d)] for d in str(n).zfill(width))


def _table_dump(conn: sqlite3.Connection, table: str) -> list[dict]:
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(f"SELECT * FROM {table} ORDER BY rowid")]
    finally:
        conn.row_factory = None


def sessions_json_path(db_path: str | Path) -> Path:
    """``<HERMES_HOME>/sessions/sessions.json`` for the store at ``db_path`` (SPEC §3 v18)."""
    return Path(db_path).parent / "sessions" / "sessions.json"


def build_fixture(db_path: str | Path, version: int, *, seed: int = 0, sessions: int = 12,
                  messages_per_session: int = 8, write_sessions_json: bool = True) -> dict:
    """Create a WAL store at exactly ``version`` with deterministic content (SPEC §16.6).

    Content: ``sessions`` sessions (a compression lineage, delegated sub-agent children, gateway
    sessions), ``messages_per_session`` messages each (user / assistant with ``tool_calls`` /
    ``role='tool'`` rows / CJK text in every third user message), every column the version has
    filled (titles from v3 with a duplicate pair and a triple for versions < 4, billing from v5,
    routing rows from v13, locks v14, delegations v15, tagged sub-agents from v16, gateway
    metadata from v18, usage rows from v20 and with a ``task`` from v22), ``state_meta`` from
    v12, and ``<dir>/sessions/sessions.json`` (read by the v18 step) whatever the version.

    Args:
        db_path: the ``state.db`` to create (must not exist).
        version: 1..23.
        seed: varies the numbers and words; same seed => same store.
        sessions: at least 1 (12 exercises every role).
        messages_per_session: at least 1.
        write_sessions_json: also write the gateway's ``sessions.json``.
    Returns:
        A manifest: ``version``, ``counts`` {table: rows}, ``rows`` {table: [row dicts as
        written]}, ``messages`` {id: content}, ``titles`` {sid: title}, ``expected_titles`` {sid:
        title after the v4 repair}, ``titles_cleared``, ``subagents`` {sid: parent to be tagged
        by v16}, ``gateway_meta`` {sid: {column: value expected after v18}}, ``usage_totals``
        {sid: {...}}, ``terms`` {id: unique unicode61 word}, ``cjk_terms`` {id: CJK run},
        ``tool_terms`` {id: word only inside tool_calls}, ``sessions_json`` (path or None).
    Raises:
        FileExistsError: ``db_path`` exists.
        KeyError: unknown version.
    """
    db_path = Path(db_path)
    if db_path.exists():
        raise FileExistsError(db_path)
    vs = schema_at(version)
    rng = random.Random(seed)
    db_path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    manifest: dict[str, Any] = {"version": version, "seed": seed, "path": str(db_path)}
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("BEGIN")
        create_store_schema(conn, version)
        conn.execute("INSERT INTO schema_version(version) VALUES (?)", (version,))
        _fill(conn, vs, rng, seed, sessions, messages_per_session, manifest)
        conn.execute("COMMIT")
        manifest["rows"] = {t: _table_dump(conn, t) for t in vs.tables}
        manifest["counts"] = {t: len(r) for t, r in manifest["rows"].items()}
    finally:
        conn.close()
    manifest["sessions_json"] = None
    if write_sessions_json:
        manifest["sessions_json"] = str(_write_sessions_json(db_path, manifest, version))
    return manifest


def _fill(conn: sqlite3.Connection, vs: VersionSchema, rng: random.Random, seed: int,
          n_sessions: int, per_session: int, manifest: dict) -> None:
    v = vs.version
    scols = set(vs.columns("sessions"))
    mcols = set(vs.columns("messages"))
    sids = [f"s{seed:02d}{i:03d}" for i in range(n_sessions)]
    titles: dict[str, str | None] = {}
    subagents: dict[str, str] = {}
    gateway_meta: dict[str, dict] = {}
    usage_totals: dict[str, dict] = {}
    session_rows: list[dict] = []
    for i, sid in enumerate(sids):
        source, parent_idx = _ROLES.get(i, (_SOURCES[i % len(_SOURCES)], None))
        parent = sids[parent_idx] if parent_idx is not None and parent_idx < i else None
        model = rng.choice(["anthropic/claude-sonnet-4.6", "openai/gpt-5", "local/llama"])
        config: str | None = json.dumps({"temperature": round(rng.random(), 2), "top_p": 0.9})
        if i == 8:
            config = None
        if i == 9:
            config = "not json {"
        tagged = parent is not None and source in ("subagent", "delegate") and i != 9
        if tagged:
            subagents[sid] = parent
            if v >= 16:  # the code of v16+ tags sub-agents when it creates them
                cfg = json.loads(config) if config else {}
                cfg["_delegate_from"] = parent
                config = json.dumps(cfg)
        row: dict[str, Any] = {
            "id": sid, "source": source, "user_id": f"user{i % 3}", "model": model,
            "model_config": config, "system_prompt": f"You are helper {i}.",
            "parent_session_id": parent,
            "started_at": BASE_TIME + i * 3600 + round(rng.random(), 3),
            "ended_at": None, "end_reason": None,
            "input_tokens": rng.randint(10, 5000), "output_tokens": rng.randint(10, 3000),
        }
        if i in (2, 3):  # compression split: parent ended with 'compression'
            row["ended_at"] = row["started_at"] + 1800
            row["end_reason"] = "compression"
        elif i % 5 == 4:
            row["ended_at"] = row["started_at"] + 600
            row["end_reason"] = "user_exit"
        if "title" in scols:
            title = _DUP_TITLES.get(i) if v < 4 else None
            if title is None and i % 4 != 1:
                title = f"Session {seed}-{i} " + rng.choice(["docker", "notes", "bugfix", "旅行"])
            row["title"] = title
            titles[sid] = title
        if "cache_read_tokens" in scols:
            row.update(cache_read_tokens=rng.randint(0, 900), cache_write_tokens=rng.randint(0, 90),
                       reasoning_tokens=rng.randint(0, 400), billing_provider="openrouter",
                       billing_base_url="https://openrouter.ai/api/v1", billing_mode="api",
                       estimated_cost_usd=round(rng.random(), 4), actual_cost_usd=None,
                       cost_status="estimated", cost_source="pricing-table",
                       pricing_version="2025-01")
        if "api_call_count" in scols:
            row["api_call_count"] = rng.randint(1, 20)
        gateway = source in ("telegram", "discord")
        if "session_key" in scols and gateway:
            row.update(session_key=f"agent:main:{source}:dm:{i}", chat_id=str(1000 + i),
                       chat_type="dm", thread_id=None if i % 2 else f"t{i}")
        if "display_name" in scols:
            # v17 added the columns (NULL); from v18 on the gateway writes them itself.
            row["display_name"] = f"Chat {i}" if (gateway and v >= 18) else None
            row["origin_json"] = (json.dumps({"platform": source, "chat_id": str(1000 + i)})
                                  if gateway and v >= 18 else None)
            row["expiry_finalized"] = 1 if (gateway and v >= 18 and i % 3 == 0) else 0
            if v == 17 and i == 1:  # set by hand before v18: the back-fill must keep it
                row["display_name"] = "Kept by hand"
        if "cwd" in scols:
            row.update(cwd=f"/home/u/proj{i}", git_branch="main" if i % 2 else None,
                       git_repo_root=f"/home/u/proj{i}" if i % 2 else None)
        if "handoff_state" in scols:
            row.update(handoff_state="done" if i == 1 else None,
                       handoff_platform="telegram" if i == 1 else None, handoff_error=None,
                       compression_failure_cooldown_until=BASE_TIME + 99 if i == 2 else None,
                       compression_failure_error="too long" if i == 2 else None,
                       profile_name="work" if i % 3 == 0 else None, rewind_count=i % 2,
                       archived=1 if i == 6 else 0, pinned=1 if i == 0 else 0)
        session_rows.append(row)
        usage_totals[sid] = {
            k: row.get(k, 0) for k in ("input_tokens", "output_tokens", "cache_read_tokens",
                                       "cache_write_tokens", "reasoning_tokens",
                                       "api_call_count")}
        usage_totals[sid].update(model=model, estimated_cost_usd=row.get("estimated_cost_usd"),
                                 billing_provider=row.get("billing_provider"))
    # messages
    messages: dict[int, str | None] = {}
    terms: dict[int, str] = {}
    cjk_terms: dict[int, str] = {}
    tool_terms: dict[int, str] = {}
    roles: dict[int, str] = {}
    msg_rows: list[tuple[dict, str]] = []
    serial = 0
    for i, sid in enumerate(sids):
        t = session_rows[i]["started_at"]
        for j in range(per_session):
            serial += 1
            word = f"w{seed:02d}x{serial:05d}"
            kind = j % 4
            m: dict[str, Any] = {"session_id": sid, "timestamp": round(t + j * 7.5, 3),
                                 "token_count": rng.randint(1, 400)}
            if kind == 0:
                text = f"user asks {word} about " + rng.choice(["docker", "rust", "sql"])
                if serial % 3 == 0:
                    text += f" 東京会議{cjk_number(serial)}号室の記録"
                m.update(role="user", content=text)
            elif kind == 1:
                call_word = f"arg{seed:02d}x{serial:05d}"
                calls = [{"id": f"call_{serial}", "type": "function",
                          "function": {"name": "terminal",
                                       "arguments": json.dumps({"cmd": f"ls {call_word}"})}}]
                m.update(role="assistant", content=None if serial % 2 else f"running {word}",
                         tool_calls=json.dumps(calls))
                m["_tool_word"] = call_word
                m["_ncalls"] = 1
            elif kind == 2:
                m.update(role="tool", content=f"tool output {word}\nfile_a file_b",
                         tool_call_id=f"call_{serial - 1}", tool_name="terminal")
            else:
                m.update(role="assistant", content=f"answer {word} done "
                         + ("完了しました" if serial % 2 else "ok"))
            if "finish_reason" in mcols and m["role"] == "assistant":
                m["finish_reason"] = "tool_calls" if kind == 1 else "stop"
            if "reasoning" in mcols and m["role"] == "assistant":
                m["reasoning"] = f"thinking about {word}"
                m["reasoning_details"] = json.dumps([{"type": "summary", "text": word}])
                m["codex_reasoning_items"] = None if serial % 2 else json.dumps([{"id": serial}])
            if "reasoning_content" in mcols and m["role"] == "assistant":
                m["reasoning_content"] = "" if serial % 5 == 0 else f"rc {word}"
            if "codex_message_items" in mcols and m["role"] == "assistant":
                m["codex_message_items"] = json.dumps([{"id": f"msg_{serial}", "phase": "final"}])
            if "effect_disposition" in mcols:
                m["effect_disposition"] = "applied" if m["role"] == "tool" else None
                m["platform_message_id"] = f"pm{serial}" if kind == 0 else None
                m["observed"] = serial % 2
            if "active" in mcols:
                m["active"] = 0 if serial % 11 == 0 else 1
                m["compacted"] = 1 if serial % 13 == 0 else 0
                m["api_content"] = f"[sent] {m['content']}" if serial % 7 == 0 else None
                m["display_kind"] = "text" if kind == 0 else None
                m["display_metadata"] = json.dumps({"n": serial}) if kind == 3 else None
            msg_rows.append((m, word))
    # Write sessions (parents first: foreign keys) and messages.
    for row in session_rows:
        row["message_count"] = 0
        row["tool_call_count"] = 0
    sess_by_id = {r["id"]: r for r in session_rows}
    for m, _ in msg_rows:
        sess_by_id[m["session_id"]]["message_count"] += 1
        if m["role"] != "tool":
            sess_by_id[m["session_id"]]["tool_call_count"] += m.get("_ncalls", 0)
    for row in session_rows:
        cols = [c for c in row if c in scols]
        conn.execute(f"INSERT INTO sessions ({', '.join(cols)}) VALUES "
                     f"({', '.join('?' * len(cols))})", [row[c] for c in cols])
    for m, word in msg_rows:
        cols = [c for c in m if c in mcols]
        cur = conn.execute(f"INSERT INTO messages ({', '.join(cols)}) VALUES "
                           f"({', '.join('?' * len(cols))})", [m[c] for c in cols])
        mid = cur.lastrowid
        messages[mid] = m.get("content")
        roles[mid] = m["role"]
        if m.get("content") and word in m["content"]:
            terms[mid] = word
        if m.get("content") and "東京会議" in m["content"]:
            cjk_terms[mid] = "会議" + cjk_number(int(word.split("x")[1])) + "号"
        if "_tool_word" in m:
            tool_terms[mid] = m["_tool_word"]
    # Other tables.
    if "state_meta" in vs.tables:
        conn.executemany("INSERT INTO state_meta(key, value) VALUES (?, ?)", [
            ("fixture_seed", str(seed)), ("last_auto_prune", str(BASE_TIME + 7)),
            ("gateway_version", f"0.{v}")])
    gateway_sids = [r["id"] for r in session_rows if r["source"] in ("telegram", "discord")]
    if "gateway_routing" in vs.tables:
        for k, sid in enumerate(gateway_sids):
            conn.execute("INSERT INTO gateway_routing(scope, session_key, entry_json, updated_at) "
                         "VALUES (?, ?, ?, ?)",
                         ("" if k % 2 else "agent:main", f"key-{sid}",
                          json.dumps({"session_id": sid, "k": k}), BASE_TIME + k))
    if "compression_locks" in vs.tables and sids:
        conn.execute("INSERT INTO compression_locks VALUES (?, ?, ?, ?)",
                     (sids[0], "host:pid=999999", BASE_TIME, BASE_TIME + 300))
    if "async_delegations" in vs.tables and len(sids) > 1:
        conn.execute("INSERT INTO async_delegations(delegation_id, origin_session, "
                     "parent_session_id, state, dispatched_at, event_json, delivery_state, "
                     "delivery_attempts) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                     (f"d{seed}-1", sids[1], sids[1], "running", BASE_TIME + 5,
                      json.dumps({"task": "research"}), "pending", 0))
    if "session_model_usage" in vs.tables:
        has_task = "task" in vs.columns("session_model_usage")
        for r in session_rows:
            tot = usage_totals[r["id"]]
            base = {"session_id": r["id"], "model": r["model"] or "",
                    "billing_provider": r.get("billing_provider") or "",
                    "billing_base_url": r.get("billing_base_url") or "",
                    "billing_mode": r.get("billing_mode") or "",
                    "first_seen": r["started_at"], "last_seen": r["started_at"] + 60,
                    "estimated_cost_usd": r.get("estimated_cost_usd"),
                    "cost_status": r.get("cost_status"), "cost_source": r.get("cost_source")}
            parts = [1.0]
            if has_task and r["id"] == sids[0]:
                parts = [0.75, 0.25]  # a 'compression' task row beside the main one
            for p_idx, share in enumerate(parts):
                row = dict(base)
                for k in ("input_tokens", "output_tokens", "cache_read_tokens",
                          "cache_write_tokens", "reasoning_tokens", "api_call_count"):
                    row[k] = int(tot[k] * share) if p_idx == 0 else tot[k] - int(tot[k] * parts[0])
                if has_task:
                    row["task"] = "" if p_idx == 0 else "compression"
                cols = list(row)
                conn.execute(f"INSERT INTO session_model_usage ({', '.join(cols)}) VALUES "
                             f"({', '.join('?' * len(cols))})", [row[c] for c in cols])
    # Expected effects of the data steps.
    expected_titles = dict(titles)
    cleared = 0
    if titles and v < 4:
        by_title: dict[str, list[tuple[float, str]]] = {}
        for r in session_rows:
            if r.get("title") is not None:
                by_title.setdefault(r["title"], []).append((r["started_at"], r["id"]))
        for members in by_title.values():
            members.sort(reverse=True)
            for _t, sid in members[1:]:
                expected_titles[sid] = None
                cleared += 1
    if v < 3:
        expected_titles = {sid: None for sid in sids}
    for sid in gateway_sids:
        idx = sids.index(sid)
        gateway_meta[sid] = {"display_name": f"Chat {idx}",
                             "origin_json": json.dumps({"platform": sess_by_id[sid]["source"],
                                                        "chat_id": str(1000 + idx)}),
                             "expiry_finalized": 1 if idx % 3 == 0 else 0}
    # What display_name / origin_json / expiry_finalized hold after a migration to v23: from v18
    # on exactly what was written; before, the v18 back-fill fills NULLs (and a 0
    # expiry_finalized the file marks finalized) from sessions.json, never replacing a value.
    expected_gateway: dict[str, dict] = {}
    for r in session_rows:
        cur = {k: r.get(k) for k in ("display_name", "origin_json", "expiry_finalized")}
        if cur["expiry_finalized"] is None:
            cur["expiry_finalized"] = 0
        if v < 18 and r["id"] in gateway_meta:
            src = gateway_meta[r["id"]]
            for k in ("display_name", "origin_json"):
                if cur[k] is None:
                    cur[k] = src[k]
            if src["expiry_finalized"]:
                cur["expiry_finalized"] = 1
        expected_gateway[r["id"]] = cur
    manifest["expected_gateway"] = expected_gateway
    manifest.update(messages=messages, roles=roles, titles=titles,
                    expected_titles=expected_titles, titles_cleared=cleared,
                    subagents=subagents, gateway_meta=gateway_meta, usage_totals=usage_totals,
                    terms=terms, cjk_terms=cjk_terms, tool_terms=tool_terms,
                    gateway_sessions=gateway_sids, session_ids=sids)


def _write_sessions_json(db_path: Path, manifest: dict, version: int) -> Path:
    """The gateway's ``sessions.json``: ``{session_key: entry}`` (shape read by v18).

    Entries carry ``session_id``, ``display_name``, ``origin`` (an object) and
    ``expiry_finalized``; one entry names an unknown session and one is not an object, both of
    which the v18 step must ignore. Session 1 (non-gateway) gets a display name that must NOT
    replace the one set by hand at v17.
    """
    path = sessions_json_path(db_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data: dict[str, Any] = {}
    for sid, meta in manifest["gateway_meta"].items():
        data[f"agent:main:{sid}"] = {
            "session_id": sid, "session_key": f"agent:main:{sid}",
            "display_name": meta["display_name"], "origin": json.loads(meta["origin_json"]),
            "expiry_finalized": bool(meta["expiry_finalized"]), "updated_at": "2025-01-01",
        }
    sids = manifest["session_ids"]
    if len(sids) > 1 and version == 17:
        data["agent:main:handset"] = {"session_id": sids[1], "display_name": "From JSON"}
    data["agent:main:ghost"] = {"session_id": "no-such-session", "display_name": "Ghost"}
    data["agent:main:broken"] = "not an object"
    path.write_text(json.dumps(data, ensure_ascii=False, indent=2), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# The schema-bump gate's comparison (SPEC §16.6)
# ---------------------------------------------------------------------------------------------

#: How rows of each table are matched between the fixture manifest and the migrated store.
ROW_KEYS: dict[str, tuple[str, ...]] = {
    "sessions": ("id",), "messages": ("id",), "state_meta": ("key",),
    "gateway_routing": ("scope", "session_key"), "compression_locks": ("session_id",),
    "async_delegations": ("delegation_id",),
    "session_model_usage": ("session_id", "model", "billing_provider", "billing_base_url",
                            "billing_mode", "task"),
}
#: state_meta keys the current code adds itself.
OWN_META_KEYS = frozenset({"db_file_generation"})


def _rows(conn: sqlite3.Connection, sql: str, args: tuple = ()) -> list[dict]:
    cur = conn.execute(sql, args)
    names = [d[0] for d in cur.description]
    return [dict(zip(names, r)) for r in cur.fetchall()]


def _json_equal(a: Any, b: Any) -> bool:
    try:
        return json.loads(a) == json.loads(b) if a is not None and b is not None else a == b
    except (TypeError, ValueError):
        return a == b


def check_migrated(conn: sqlite3.Connection, manifest: dict, *,
                   extra_messages: bool = False) -> list[str]:
    """Compare a store migrated to v23 with the manifest of its fixture (SPEC §16.6).

    Checks: one ``schema_version`` row = 23; every row of every table the old version had is
    present with every old column value unchanged, except the documented data steps (titles
    repaired by v4, sub-agents tagged by v16, gateway metadata back-filled by v18, usage rows
    rebuilt by v22); no row lost or duplicated; columns added later hold their defaults; usage
    rows seeded by v20 equal the per-session totals; every word of every message is found by a
    direct ``MATCH`` on ``messages_fts`` (``tool_calls`` words too), every CJK run by
    ``messages_fts_trigram`` when that table exists; the FTS tables equal an index rebuilt from
    ``messages`` (:func:`hermes_state.fts_layout.verify_fts`); ``integrity_check`` ok and no
    foreign-key violation.

    Args:
        conn: a plain connection to the migrated store.
        manifest: what :func:`build_fixture` returned.
        extra_messages: tolerate messages/sessions written after the migration.
    Returns:
        Problems found (``[]`` when the gate passes).
    """
    from .fts_layout import verify_fts

    problems: list[str] = []
    old_v = manifest["version"]
    versions = [r[0] for r in conn.execute("SELECT version FROM schema_version")]
    if versions != [CURRENT_VERSION]:
        problems.append(f"schema_version rows {versions}, expected [{CURRENT_VERSION}]")
    for table, old_rows in manifest["rows"].items():
        if table == "schema_version":
            continue
        key = ROW_KEYS[table]
        live_rows = _rows(conn, f"SELECT * FROM {table}")
        live = {}
        for r in live_rows:
            k = tuple(r.get(c, "") for c in key)
            if k in live:
                problems.append(f"{table}: duplicate row {k}")
            live[k] = r
        for old in old_rows:
            k = tuple(old.get(c, "") for c in key)
            new = live.get(k)
            if new is None:
                problems.append(f"{table}: row {k} lost")
                continue
            for col, val in old.items():
                problems.extend(_compare_cell(table, k, col, val, new, manifest))
        expected_n = len(old_rows)
        if table == "state_meta":
            live_n = len([k for k in live if k[0] not in OWN_META_KEYS])
        else:
            live_n = len(live)
        if live_n != expected_n and not (extra_messages and table in ("messages", "sessions")):
            problems.append(f"{table}: {live_n} rows, expected {expected_n}")
    problems.extend(_check_new_columns(conn, manifest))
    problems.extend(_check_usage(conn, manifest))
    problems.extend(_check_search(conn, manifest))
    for table, verdict in verify_fts(conn).items():
        if verdict != "ok":
            problems.append(f"{table}: {verdict}")
    ic = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    if ic != ["ok"]:
        problems.append(f"integrity_check: {ic[:3]}")
    fk = conn.execute("PRAGMA foreign_key_check").fetchall()
    if fk:
        problems.append(f"foreign_key_check: {len(fk)} violation(s)")
    if old_v < CURRENT_VERSION and live_fts_layout(conn) not in INLINE_LAYOUTS | {EXTERNAL_LAYOUT}:
        problems.append(f"FTS layout {live_fts_layout(conn)}")
    return problems


def _compare_cell(table: str, k: tuple, col: str, val: Any, new: dict, manifest: dict) -> list[str]:
    old_v = manifest["version"]
    got = new.get(col, "<missing column>")
    if table == "sessions":
        sid = k[0]
        if col == "title":
            want = manifest["expected_titles"].get(sid)
            return [] if got == want else [f"sessions {sid}.title {got!r}, expected {want!r}"]
        if col == "model_config" and sid in manifest["subagents"] and old_v < 16:
            want = json.loads(val) if val else {}
            want["_delegate_from"] = manifest["subagents"][sid]
            try:
                ok = json.loads(got) == want
            except (TypeError, ValueError):
                ok = False
            return [] if ok else [f"sessions {sid}.model_config {got!r}, expected {want!r}"]
        if col in ("display_name", "origin_json", "expiry_finalized"):
            want = manifest["expected_gateway"][sid][col]
            ok = _json_equal(got, want) if col == "origin_json" else got == want
            return [] if ok else [f"sessions {sid}.{col} {got!r}, expected {want!r}"]
    if table == "session_model_usage" and col == "task":
        return [] if got == (val or "") else [f"usage {k}.task {got!r}"]
    if got != val or type(got) is not type(val):
        return [f"{table} {k}.{col} = {got!r}, expected {val!r}"]
    return []


#: Columns added after v1 whose value for an old row is the declared default.
_DEFAULTS = {
    "messages": {"observed": 0, "active": 1, "compacted": 0},
    "sessions": {"rewind_count": 0, "archived": 0, "pinned": 0, "api_call_count": 0,
                 "cache_read_tokens": 0, "cache_write_tokens": 0, "reasoning_tokens": 0},
}


def _check_new_columns(conn: sqlite3.Connection, manifest: dict) -> list[str]:
    out = []
    vs = schema_at(manifest["version"])
    for table, defaults in _DEFAULTS.items():
        old_cols = set(vs.columns(table))
        for col, want in defaults.items():
            if col in old_cols:
                continue
            ids = [r["id"] for r in manifest["rows"][table]]
            bad = [i for i, v in conn.execute(f"SELECT id, {col} FROM {table}")
                   if i in set(ids) and v != want]
            if bad:
                out.append(f"{table}.{col}: old rows {bad[:5]} do not hold the default {want!r}")
    return out


def _check_usage(conn: sqlite3.Connection, manifest: dict) -> list[str]:
    if manifest["version"] >= 20:
        return []  # compared row by row above
    out = []
    rows = _rows(conn, "SELECT * FROM session_model_usage")
    by_sid: dict[str, list[dict]] = {}
    for r in rows:
        by_sid.setdefault(r["session_id"], []).append(r)
    for sid, tot in manifest["usage_totals"].items():
        got = by_sid.get(sid, [])
        if len(got) != 1:
            out.append(f"usage of {sid}: {len(got)} seeded rows, expected 1")
            continue
        r = got[0]
        for k in ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
                  "reasoning_tokens", "api_call_count"):
            if r[k] != tot[k]:
                out.append(f"usage of {sid}.{k} = {r[k]}, expected {tot[k]}")
        if r["model"] != (tot["model"] or "") or r["task"] != "":
            out.append(f"usage of {sid}: key {r['model']!r}/{r['task']!r}")
        if r["estimated_cost_usd"] != tot["estimated_cost_usd"]:
            out.append(f"usage of {sid}.estimated_cost_usd = {r['estimated_cost_usd']}")
    return out


def _check_search(conn: sqlite3.Connection, manifest: dict) -> list[str]:
    out = []
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}

    def match(table: str, term: str) -> set[int]:
        q = '"' + term.replace('"', '""') + '"'
        return {r[0] for r in conn.execute(
            f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (q,))}

    for mid, term in manifest["terms"].items():
        if int(mid) not in match("messages_fts", term):
            out.append(f"messages_fts MATCH {term!r} misses message {mid}")
    for mid, term in manifest["tool_terms"].items():
        if int(mid) not in match("messages_fts", term):
            out.append(f"messages_fts MATCH {term!r} (tool_calls) misses message {mid}")
    if "messages_fts_trigram" in names:
        for mid, term in manifest["cjk_terms"].items():
            if match("messages_fts_trigram", term) != {int(mid)}:
                out.append(f"messages_fts_trigram MATCH {term!r} != {{{mid}}}")
        tool_ids = {int(i) for i, role in manifest["roles"].items() if role == "tool"}
        leaked = tool_ids & {r[0] for r in conn.execute(
            "SELECT rowid FROM messages_fts_trigram WHERE messages_fts_trigram MATCH 'tool output'")}
        if leaked:
            out.append(f"messages_fts_trigram indexes role='tool' rows {sorted(leaked)[:5]}")
    return out
