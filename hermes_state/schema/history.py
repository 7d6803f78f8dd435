"""Declared schema of every historical version 1-23, as data (SPEC §3, §16.6).

SPEC §16.6 asks for "fixture stores for every historical schema version (1-22) generated from a
declared per-version DDL". This module is that declaration, taken from the storage-format facts
of the upstream releases (UPSTREAM_API.md §4.1-§4.3), not from our own reconstruction:
:func:`schema_at` returns which tables (with which columns, in which order, with which NOT NULL
constraints), which indexes and which FTS layout a store of version N had.
:func:`hermes_state.testing.build_fixture` (not part of the store) fills such a store with
deterministic content.

The layouts use upstream's trigger names (``<table>_insert`` / ``_delete`` / ``_update``, never
changed from v2 to v31) and bodies:

* ``external-v1`` (v1-v9; ``external-v1-trigram`` at v10): ``fts5(content, content=messages,
  content_rowid=id)``, every role, FTS5 'delete' command, a plain ``AFTER UPDATE ON``;
* ``inline`` (v11-v22): ``fts5(content)`` fed with ``content || ' ' || tool_name || ' ' ||
  tool_calls`` of every row (the trigram table too), plain ``DELETE ... WHERE rowid = old.id``;
* ``external-v23`` (fresh v23 stores, :mod:`hermes_state.schema.tables`).

Versions the facts give only as "<= N" (columns that appeared somewhere up to N) are placed at
one version up to N (see ``_CHANGES``); v23 adds what this code has beyond upstream 22
(``sessions.pinned``, ``messages.display_kind``/``display_metadata``,
``idx_messages_session_id``, the external layout). Data steps are those of
:mod:`hermes_state.store.migrations` (v4, v11, v16, v18, v20, v22, v23).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from typing import Any, Mapping

from . import tables as schema
from .fts_inventory import EXTERNAL_V23, LEGACY_KINDS, inventory, layout_kind

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
        """The FTS5 tables of the layout (views it needs are not listed)."""
        return tuple(n for n, sql in self.tables if "VIRTUAL TABLE" in sql)


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
# FTS layouts (UPSTREAM_API.md §4.2: the DDL upstream wrote, with upstream's trigger names)
# ---------------------------------------------------------------------------------------------

def _external_v1_triggers(table: str) -> tuple[tuple[str, str], ...]:
    """Upstream v2-v10: content only, FTS5 'delete' command, plain ``AFTER UPDATE ON``."""
    return (
        (f"{table}_insert",
         f"CREATE TRIGGER IF NOT EXISTS {table}_insert AFTER INSERT ON messages BEGIN\n"
         f"    INSERT INTO {table}(rowid, content) VALUES (new.id, new.content);\nEND"),
        (f"{table}_delete",
         f"CREATE TRIGGER IF NOT EXISTS {table}_delete AFTER DELETE ON messages BEGIN\n"
         f"    INSERT INTO {table}({table}, rowid, content) "
         "VALUES('delete', old.id, old.content);\nEND"),
        (f"{table}_update",
         f"CREATE TRIGGER IF NOT EXISTS {table}_update AFTER UPDATE ON messages BEGIN\n"
         f"    INSERT INTO {table}({table}, rowid, content) "
         "VALUES('delete', old.id, old.content);\n"
         f"    INSERT INTO {table}(rowid, content) VALUES (new.id, new.content);\nEND"),
    )


#: The text upstream's inline tables index (v11-v22): every role, one column.
INLINE_TEXT = ("COALESCE({r}.content, '') || ' ' || COALESCE({r}.tool_name, '') || ' ' || "
               "COALESCE({r}.tool_calls, '')")


def _inline_triggers(table: str) -> tuple[tuple[str, str], ...]:
    """Upstream v11-v22: the concatenated text, plain ``DELETE ... WHERE rowid = old.id``."""
    new_text = INLINE_TEXT.format(r="new")
    return (
        (f"{table}_insert",
         f"CREATE TRIGGER IF NOT EXISTS {table}_insert AFTER INSERT ON messages BEGIN\n"
         f"    INSERT INTO {table}(rowid, content) VALUES (\n        new.id,\n"
         f"        {new_text}\n    );\nEND"),
        (f"{table}_delete",
         f"CREATE TRIGGER IF NOT EXISTS {table}_delete AFTER DELETE ON messages BEGIN\n"
         f"    DELETE FROM {table} WHERE rowid = old.id;\nEND"),
        (f"{table}_update",
         f"CREATE TRIGGER IF NOT EXISTS {table}_update AFTER UPDATE ON messages BEGIN\n"
         f"    DELETE FROM {table} WHERE rowid = old.id;\n"
         f"    INSERT INTO {table}(rowid, content) VALUES (\n        new.id,\n"
         f"        {new_text}\n    );\nEND"),
    )


_FTS_V1 = ("messages_fts", "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(\n"
           "    content,\n    content=messages,\n    content_rowid=id\n)")
_TRI_V10 = ("messages_fts_trigram", "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram "
            "USING fts5(\n    content,\n    content=messages,\n    content_rowid=id,\n"
            "    tokenize='trigram'\n)")
_FTS_V11 = ("messages_fts", "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(\n"
            "    content\n)")
_TRI_V11 = ("messages_fts_trigram", "CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram "
            "USING fts5(\n    content,\n    tokenize='trigram'\n)")


def _external_layout() -> FtsLayout:
    triggers = []
    for sql in schema.split_triggers(schema.FTS_TRIGGERS_SQL + schema.TRIGRAM_TRIGGERS_SQL):
        name = sql.split("IF NOT EXISTS", 1)[1].split()[0]
        triggers.append((name, sql))
    return FtsLayout(
        "external-v23",
        (("messages_fts", schema.FTS_TABLE_SQL.strip().rstrip(";")),
         (schema.TRIGRAM_VIEW, schema.TRIGRAM_VIEW_SQL.strip().rstrip(";")),
         ("messages_fts_trigram", schema.TRIGRAM_TABLE_SQL.strip().rstrip(";"))),
        tuple(triggers), ("content", "tool_name", "tool_calls"), external=True)


#: Every FTS layout a store below or at 23 can have, named as
#: :func:`hermes_state.schema.fts_inventory.layout_kind` names them (``external-v1-trigram`` is the
#: external-v1 kind plus the v10 trigram table).
FTS_LAYOUTS: dict[str, FtsLayout] = {
    "external-v1": FtsLayout("external-v1", (_FTS_V1,), _external_v1_triggers("messages_fts"),
                             ("content",), external=True),
    "external-v1-trigram": FtsLayout(
        "external-v1-trigram", (_FTS_V1, _TRI_V10),
        _external_v1_triggers("messages_fts") + _external_v1_triggers("messages_fts_trigram"),
        ("content",), external=True),
    "inline": FtsLayout("inline", (_FTS_V11, _TRI_V11),
                        _inline_triggers("messages_fts") + _inline_triggers("messages_fts_trigram"),
                        ("content",), external=False),
    "external-v23": _external_layout(),
}

#: Layout kinds an earlier release wrote; optimize-storage converts them (SPEC §8).
INLINE_LAYOUTS = LEGACY_KINDS
EXTERNAL_LAYOUT = EXTERNAL_V23


def live_fts_layout(conn: sqlite3.Connection) -> str:
    """The layout kind of ``messages_fts`` read from its DDL (:mod:`hermes_state.schema.fts_inventory`).

    Returns:
        ``"none"``, ``"external-v1"``, ``"inline"``, ``"inline-3col"``, ``"external-v23"``,
        ``"external-v31"`` or ``"other"``.
    """
    return layout_kind(inventory(conn).tables.get("messages_fts"))


# ---------------------------------------------------------------------------------------------
# Tables per version (UPSTREAM_API.md §4.1, §4.3)
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
    ("acquired_at", "REAL NOT NULL"),
    ("expires_at", "REAL NOT NULL"),
))
_ASYNC_DELEGATIONS = TableSpec("async_delegations", (
    ("delegation_id", "TEXT PRIMARY KEY"),
    ("origin_session", "TEXT NOT NULL"),
    ("origin_ui_session_id", "TEXT NOT NULL DEFAULT ''"),
    ("parent_session_id", "TEXT"),
    ("state", "TEXT NOT NULL"),
    ("dispatched_at", "REAL NOT NULL"),
    ("completed_at", "REAL"),
    ("updated_at", "REAL NOT NULL"),
    ("event_json", "TEXT"),
    ("result_json", "TEXT"),
    ("delivery_state", "TEXT NOT NULL DEFAULT 'pending'"),
    ("delivery_attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("delivered_at", "REAL"),
    ("owner_pid", "INTEGER"),
))
_USAGE_COUNTS = (
    ("api_call_count", "INTEGER NOT NULL DEFAULT 0"),
    ("input_tokens", "INTEGER NOT NULL DEFAULT 0"),
    ("output_tokens", "INTEGER NOT NULL DEFAULT 0"),
    ("cache_read_tokens", "INTEGER NOT NULL DEFAULT 0"),
    ("cache_write_tokens", "INTEGER NOT NULL DEFAULT 0"),
    ("reasoning_tokens", "INTEGER NOT NULL DEFAULT 0"),
)
#: v20: three-column key, ``billing_base_url`` nullable, one cost, no cascade.
USAGE_V20 = TableSpec("session_model_usage", (
    ("session_id", "TEXT NOT NULL REFERENCES sessions(id)"),
    ("model", "TEXT NOT NULL"),
    ("billing_provider", "TEXT NOT NULL DEFAULT ''"),
    ("billing_base_url", "TEXT"),
) + _USAGE_COUNTS + (
    ("estimated_cost_usd", "REAL NOT NULL DEFAULT 0"),
    ("first_seen", "REAL"),
    ("last_seen", "REAL"),
), ("PRIMARY KEY (session_id, model, billing_provider)",))
_USAGE_KEY_V21 = (
    ("session_id", "TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE"),
    ("model", "TEXT NOT NULL"),
    ("billing_provider", "TEXT NOT NULL DEFAULT ''"),
    ("billing_base_url", "TEXT NOT NULL DEFAULT ''"),
    ("billing_mode", "TEXT NOT NULL DEFAULT ''"),
)
_USAGE_VALUES_V21 = _USAGE_COUNTS + (
    ("estimated_cost_usd", "REAL NOT NULL DEFAULT 0"),
    ("actual_cost_usd", "REAL NOT NULL DEFAULT 0"),
    ("cost_status", "TEXT"),
    ("cost_source", "TEXT"),
    ("first_seen", "REAL"),
    ("last_seen", "REAL"),
)
#: v21 (fresh DDL): five-column key, both costs NOT NULL, cascade.
USAGE_V21 = TableSpec("session_model_usage", _USAGE_KEY_V21 + _USAGE_VALUES_V21, (
    "PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode)",))
#: v22-v31: ``task`` in the primary key (what the v22 step rebuilds the table into).
USAGE_V22 = TableSpec("session_model_usage",
                      _USAGE_KEY_V21 + (("task", "TEXT NOT NULL DEFAULT ''"),) + _USAGE_VALUES_V21,
                      ("PRIMARY KEY (session_id, model, billing_provider, billing_base_url, "
                       "billing_mode, task)",))


def _idx(name: str, body: str) -> tuple[str, str]:
    return name, f"CREATE INDEX IF NOT EXISTS {name} ON {body}"


_IDX_V1 = (
    _idx("idx_sessions_source", "sessions(source)"),
    _idx("idx_sessions_parent", "sessions(parent_session_id)"),
    _idx("idx_sessions_started", "sessions(started_at DESC)"),
    _idx("idx_messages_session", "messages(session_id, timestamp)"),
)
_IDX_TITLE = (("idx_sessions_title_unique", schema.TITLE_INDEX_SQL),)

# Per-version changes, as data. Keys: summary, add (columns per table), tables (new tables),
# replace (tables rebuilt), indexes, fts (layout name), data (a data step exists). Versions the
# facts sheet gives as "<= N" (UPSTREAM_API.md §5) are placed at one version up to N.
_CHANGES: dict[int, dict[str, Any]] = {
    1: {"summary": "initial schema: sessions, messages, external-content messages_fts(content)",
        "tables": (_SCHEMA_VERSION, _SESSIONS_V1, _MESSAGES_V1), "indexes": _IDX_V1,
        "fts": "external-v1"},
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
    10: {"summary": "external-content trigram table (content only, every role) + back-fill; "
                    "state_meta (no step here: the v11 step replaces the whole layout)",
         "tables": (_STATE_META,), "fts": "external-v1-trigram"},
    11: {"summary": "both FTS tables inline over content || tool_name || tool_calls + re-index",
         "fts": "inline", "data": True},
    12: {"summary": "messages.active (NULL healed to 1)",
         "add": {"messages": (("active", "INTEGER NOT NULL DEFAULT 1"),)}},
    13: {"summary": "messages platform_message_id, observed",
         "add": {"messages": (("platform_message_id", "TEXT"),
                              ("observed", "INTEGER DEFAULT 0"))},
         "indexes": (("idx_messages_platform_msg_id",
                      "CREATE INDEX IF NOT EXISTS idx_messages_platform_msg_id ON "
                      "messages(session_id, platform_message_id) WHERE platform_message_id IS "
                      "NOT NULL"),)},
    14: {"summary": "sessions cwd and handoff columns",
         "add": {"sessions": (("cwd", "TEXT"), ("handoff_state", "TEXT"),
                              ("handoff_platform", "TEXT"), ("handoff_error", "TEXT"))}},
    15: {"summary": "sessions rewind_count, archived; compression_locks",
         "tables": (_COMPRESSION_LOCKS,),
         "add": {"sessions": (("rewind_count", "INTEGER NOT NULL DEFAULT 0"),
                              ("archived", "INTEGER NOT NULL DEFAULT 0"))},
         "indexes": (_idx("idx_sessions_source_id", "sessions(source, id)"),
                     _idx("idx_compression_locks_expires", "compression_locks(expires_at)"),
                     _idx("idx_messages_session_active",
                          "messages(session_id, active, timestamp)"))},
    16: {"summary": "tag delegate sub-agent sessions (model_config.$._delegate_from)",
         "data": True},
    17: {"summary": "sessions gateway routing and display metadata columns",
         "add": {"sessions": (("session_key", "TEXT"), ("chat_id", "TEXT"),
                              ("chat_type", "TEXT"), ("thread_id", "TEXT"),
                              ("display_name", "TEXT"), ("origin_json", "TEXT"),
                              ("expiry_finalized", "INTEGER DEFAULT 0"))},
         "indexes": (_idx("idx_sessions_session_key", "sessions(session_key, started_at DESC)"),
                     _idx("idx_sessions_gateway_peer", "sessions(source, user_id, chat_id, "
                                                       "chat_type, thread_id, started_at DESC)"))},
    18: {"summary": "back-fill gateway metadata from sessions/sessions.json (NULLs only)",
         "data": True},
    19: {"summary": "git columns, compression-failure columns, effect/compaction on messages; "
                    "gateway_routing",
         "tables": (_GATEWAY_ROUTING,),
         "add": {"messages": (("effect_disposition", "TEXT"),
                              ("compacted", "INTEGER NOT NULL DEFAULT 0")),
                 "sessions": (("git_branch", "TEXT"), ("git_repo_root", "TEXT"),
                              ("compression_failure_cooldown_until", "REAL"),
                              ("compression_failure_error", "TEXT"))},
         "indexes": (("idx_messages_active_null",
                      "CREATE INDEX IF NOT EXISTS idx_messages_active_null ON messages(active) "
                      "WHERE active IS NULL"),
                     _idx("idx_sessions_handoff_state", "sessions(handoff_state, started_at)"))},
    20: {"summary": "session_model_usage (three-column key) seeded from per-session totals",
         "tables": (USAGE_V20,), "data": True,
         "indexes": (_idx("idx_session_model_usage_session", "session_model_usage(session_id)"),
                     _idx("idx_session_model_usage_model", "session_model_usage(model)"))},
    21: {"summary": "session_model_usage with billing_mode, actual cost and a five-column key "
                    "(fresh stores); async_delegations",
         "replace": (USAGE_V21,), "tables": (_ASYNC_DELEGATIONS,),
         "indexes": (_idx("idx_async_delegations_delivery",
                          "async_delegations(delivery_state, completed_at)"),)},
    22: {"summary": "session_model_usage rebuilt with task in the primary key; api_content, "
                    "compression_fallback_streak, profile_name; delegation ownership columns",
         "replace": (USAGE_V22,), "data": True,
         "add": {"messages": (("api_content", "TEXT"),),
                 "sessions": (("compression_fallback_streak", "INTEGER NOT NULL DEFAULT 0"),
                              ("profile_name", "TEXT")),
                 "async_delegations": (("owner_started_at", "INTEGER"), ("task_json", "TEXT"),
                                       ("delivery_claim", "TEXT"),
                                       ("delivery_claimed_at", "REAL"))}},
    23: {"summary": "external-content FTS for fresh stores (existing stores keep a legacy "
                    "layout, flagged fts_optimize_available); pinned, display columns",
         "fts": "external-v23", "data": True,
         "add": {"messages": (("display_kind", "TEXT"), ("display_metadata", "TEXT")),
                 "sessions": (("pinned", "INTEGER NOT NULL DEFAULT 0"),)},
         "indexes": (_idx("idx_messages_session_id", "messages(session_id, id)"),)},
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


def infer_version(conn: sqlite3.Connection) -> int:
    """The lowest version structurally equal to the highest declared version the live store has.

    "Has" = its tables, columns, indexes and FTS layout are present. Used only when
    ``schema_version`` has no row (a store damaged or written by code that crashed between creating its tables and recording the version): a lower bound that lets
    the (idempotent) versioned steps run from there.
    """
    live_tables = {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'index')")}
    layout = history_layout(conn)
    order = ["none", "external-v1", "external-v1-trigram", "inline", "external-v23"]
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


def history_layout(conn: sqlite3.Connection) -> str:
    """The live layout named as a key of :data:`FTS_LAYOUTS` (``"none"`` when it is none of them).

    ``external-v1`` with a trigram table is ``external-v1-trigram``; the inline kinds are
    ``inline``.
    """
    inv = inventory(conn)
    kind = inv.kind
    if kind == "external-v1":
        return "external-v1-trigram" if "messages_fts_trigram" in inv.tables else kind
    if kind in ("inline", "inline-3col"):
        return "inline"
    return kind if kind in FTS_LAYOUTS else "none"


def _structure(vs: VersionSchema) -> tuple:
    return (tuple(sorted((n, s.column_names) for n, s in vs.tables.items())),
            tuple(sorted(n for n, _ in vs.indexes)), vs.fts_layout)
