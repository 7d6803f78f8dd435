"""Schema migration at open: declarative columns, then one transaction per version (SPEC §3).

Called by :meth:`hermes_state.store.connection.StoreConnection._prepare_schema` when the store is not
settled. The order for an existing store below version 23:

1. one write transaction (``op="open"``): create every missing non-FTS table of v23
   (``CREATE TABLE IF NOT EXISTS``) and add every missing column
   (:func:`hermes_state.schema.tables.reconcile_columns`); normalise ``schema_version`` to one row;
2. every versioned step ``current+1 .. 23``, EACH in its own ``BEGIN IMMEDIATE`` transaction
   (``op="migrate"``) together with ``UPDATE schema_version SET version = N``; the failpoint
   ``migrate.v<N>.before_commit`` is hit at the end of the step, right before the commit. The
   version is re-read inside the transaction, so two processes migrating the same store at once
   run every step exactly once; a crash inside a step rolls it back, a crash between steps
   resumes at the next open;
3. one write transaction (``op="open"``) for the idempotent rest: the FTS layout judged by
   STRUCTURE (:func:`hermes_state.schema.fts_layout.assess`: the v23 layout is completed, upstream's
   intact inline layout kept and flagged ``fts_optimize_available``, anything else -- foreign or
   duplicate trigger sets, external-v1 or mixed layouts -- replaced whole), the unique-title
   index (with the duplicate repair), NULL ``messages.active`` healed, the generation token and
   ``application_id`` (SPEC §10.1).

A fresh store is created whole in ONE transaction at version 23 (external-content FTS). A store
at 23 that merely misses a table or column is completed in one transaction. A store NEWER than
the code is opened without downgrade: only missing tables and columns are added and a warning is
logged once per process (SPEC §3); its FTS layout, title index and ``application_id`` are left
alone (triggers that cannot fire here are dropped, :mod:`hermes_state.schema.shape`). Whether an
open has anything to do at all is :func:`hermes_state.schema.shape.pending_work`.

What each data step does (v4, v11, v16, v18, v20, v22, v23) and why a big store's FTS re-index
is deferred to a background back-fill: docs/decisions/0004-migrations.md.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from .. import events, failpoints
from ..errors import WriteContentionError
from ..files import atomic
from ..files.paths import sessions_json_path
from ..fts.backfill import AUTO_KEY
from ..fts.switch import replace_layout
from ..processes.generation import application_id_for
from ..schema import shape as store_shape
from ..schema.fts_layout import OPTIMIZE_KEY, assess
from ..schema.history import USAGE_V22, infer_version
from ..schema.tables import (
    SCHEMA_VERSION,
    create_fts,
    create_schema,
    create_tables,
    ensure_title_index,
    fts5_available,
    fts_triggers,
    reconcile_columns,
    switch_fts_off,
)

if TYPE_CHECKING:  # pragma: no cover
    from .connection import StoreConnection

log = logging.getLogger("hermes_state.store.migrations")

SESSIONS_JSON_MAX_BYTES = 64 * 1024 * 1024
#: Stores with more messages than this defer the v10/v11 FTS re-index (module docstring);
#: below it the synchronous re-index costs well under a second (~0.25 s at 5 000 rows).
DEFER_FTS_ROWS = 5_000
#: How long an open keeps waiting while ANOTHER process is visibly advancing the migration.
PATIENCE_S = 600.0

_warned_newer: set[str] = set()


@dataclass
class MigrationReport:
    """What one open did to the schema (``StoreConnection.migration_report``).

    Attributes:
        from_version: the version found (None for a fresh store).
        to_version: the version after the open.
        fresh: the store was created by this open.
        steps: the versions whose step THIS process ran (another process may have run others).
        added_columns: ``table.column`` added declaratively.
        created_fts: FTS tables created (and back-filled) by the final transaction.
        stats: per-step figures, e.g. ``{"titles_cleared": 3, "subagents_tagged": 2}``.
        newer: the store is newer than this code.
    """

    from_version: int | None = None
    to_version: int = SCHEMA_VERSION
    fresh: bool = False
    steps: list[int] = field(default_factory=list)
    added_columns: list[str] = field(default_factory=list)
    created_fts: list[str] = field(default_factory=list)
    stats: dict[str, Any] = field(default_factory=dict)
    newer: bool = False


# ------------------------------------------------------------------------------------ helpers

def read_version(conn: sqlite3.Connection) -> int | None:
    """The stored schema version (max over rows), or None without table/row.

    Rows that are not positive numbers (text, blobs, 0, negatives: a damaged or foreign row)
    are ignored: the version is then inferred from the tables, never a crash or a migration
    loop from a version that never existed (issue 11.10)."""
    try:
        row = conn.execute("SELECT MAX(CAST(version AS INTEGER)) FROM schema_version "
                           "WHERE typeof(version) IN ('integer', 'real') "
                           "AND CAST(version AS INTEGER) >= 1").fetchone()
    except sqlite3.OperationalError:
        return None
    return None if row is None or row[0] is None else int(row[0])


def _exists(conn: sqlite3.Connection, name: str) -> bool:
    row = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)).fetchone()
    return row is not None


def _set_version(conn: sqlite3.Connection, version: int) -> None:
    """Exactly one ``schema_version`` row holding ``version`` (writes only when different)."""
    rows = [r[0] for r in conn.execute("SELECT version FROM schema_version")]
    if rows == [version]:
        return
    if len(rows) == 1:
        conn.execute("UPDATE schema_version SET version = ?", (version,))
        return
    conn.execute("DELETE FROM schema_version")
    conn.execute("INSERT INTO schema_version(version) VALUES (?)", (version,))


def _stamp_generation(conn: sqlite3.Connection, newer: bool = False) -> None:
    """The ``db_file_generation`` token (first opener wins) and its ``application_id``.

    A store newer than this code keeps its ``application_id`` (v31 derives its own from the
    token); only a missing token is added.
    """
    conn.execute("INSERT OR IGNORE INTO state_meta(key, value) VALUES ('db_file_generation', ?)",
                 (uuid.uuid4().hex,))
    token = conn.execute(
        "SELECT value FROM state_meta WHERE key = 'db_file_generation'").fetchone()[0]
    if newer:
        return
    want = application_id_for(token)
    if conn.execute("PRAGMA application_id").fetchone()[0] != want:
        conn.execute(f"PRAGMA application_id={want}")


def warn_if_newer(db_path: str | os.PathLike, version: int | None) -> bool:
    """Log once per process and store that ``version`` is newer than this code (SPEC §3).

    Returns:
        True when the store is newer.
    """
    if version is None or version <= SCHEMA_VERSION:
        return False
    key = os.path.realpath(os.fspath(db_path))
    if key not in _warned_newer:
        _warned_newer.add(key)
        log.warning("%s has schema version %s, newer than this code (%s): opened without "
                    "downgrade; only missing tables/columns are added", db_path, version,
                    SCHEMA_VERSION)
    return True


# ------------------------------------------------------------------------------------ steps

@dataclass
class _Ctx:
    db_path: Path


def _step_v4(ctx: _Ctx, conn: sqlite3.Connection) -> dict:
    return {"titles_cleared": ensure_title_index(conn)}


def _big(conn: sqlite3.Connection) -> bool:
    """More than :data:`DEFER_FTS_ROWS` messages: re-index in the background, not in the open."""
    high = conn.execute("SELECT COALESCE(MAX(id), 0) FROM messages").fetchone()[0]
    return high > DEFER_FTS_ROWS and conn.execute(
        "SELECT COUNT(*) FROM messages").fetchone()[0] > DEFER_FTS_ROWS


def switch_fts(conn: sqlite3.Connection) -> dict:
    """Replace the whole FTS layout by the v23 one, in the caller's transaction.

    Small stores are re-indexed here; big ones (:func:`_big`) get the SPEC §2.4 markers and
    ``state_meta['fts_backfill'] = 'auto'``, the legacy tables are renamed (constant time) and
    the background thread of :mod:`hermes_state.fts.backfill` indexes the rows and frees them.

    Returns:
        ``{"fts_reindexed": rows indexed now}`` or ``{"fts_deferred": rows pending}``, plus
        ``{"fts_triggers_replaced": n}`` when triggers were dropped.
    """
    big = _big(conn)
    res = replace_layout(conn, retire=big, backfill=not big)
    out: dict[str, int] = {}
    if res["dropped_triggers"]:
        out["fts_triggers_replaced"] = len(res["dropped_triggers"])
    if big:
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, 'auto')",
                     (AUTO_KEY,))
        low, high = res["markers"] or (0, 0)
        out["fts_deferred"] = high - low
    else:
        out["fts_reindexed"] = res["indexed"]
    return out


def _step_v11(ctx: _Ctx, conn: sqlite3.Connection) -> dict:
    """Upstream v11 rebuilt both FTS tables inline; this code goes to the v23 layout instead.

    A store below 11 has the external-v1 layout (``content`` only, FTS5 'delete'-command
    triggers named ``messages_fts_insert``/``_delete``/``_update``, the v10 trigram beside it):
    every trigger feeding an FTS table is dropped and the v23 layout created in this step's
    transaction, so no legacy trigger fires beside the new ones (UPSTREAM_API.md §4.2, D1).
    """
    if not fts5_available(conn):
        return {"fts_switched_off": len(switch_fts_off(conn))}  # issue 23.3
    if assess(conn) == "ok":
        return {}
    return switch_fts(conn)


def _delegate_json(expr: str, path: str) -> str:
    """``json_extract`` on ``model_config`` that never raises on text that is not JSON."""
    return (f"(CASE WHEN json_valid(COALESCE({expr}, '{{}}')) "
            f"THEN json_extract(COALESCE({expr}, '{{}}'), '{path}') END)")


def _step_v16(ctx: _Ctx, conn: sqlite3.Connection) -> dict:
    """Tag delegate sub-agent sessions as upstream's v16 step does (UPSTREAM_API.md D10).

    (1) every row with a parent, no ``_delegate_from``, that is neither a branch child
    (``_branched_from`` set, or the parent ended ``branched`` no later than the child started)
    nor a compression child (the parent ended ``compression``) gets ``_delegate_from = parent``,
    whatever its source; (2) every parentless row without ``_delegate_from``/``_branched_from``,
    untitled, with ``message_count <= 25``, at least one ``role='tool'`` message and no
    children gets ``_delegate_from = '__orphaned__'``. A ``model_config`` that is not a JSON
    object is never rewritten (counted as untaggable); upstream would abort the open there.
    """
    obj = ("(model_config IS NULL OR (json_valid(model_config) "
           "AND json_type(model_config) = 'object'))")
    delegate = _delegate_json("s.model_config", "$._delegate_from")
    branched = _delegate_json("s.model_config", "$._branched_from")
    child = f"""s.parent_session_id IS NOT NULL AND {delegate} IS NULL
        AND NOT EXISTS (SELECT 1 FROM sessions p WHERE p.id = s.parent_session_id AND (
                p.end_reason = 'compression'
                OR (p.end_reason = 'branched' AND s.started_at >= p.ended_at)))
        AND {branched} IS NULL"""
    has_title = "s.title IS NOT NULL" if _has_column(conn, "sessions", "title") else "0"
    orphan = f"""s.parent_session_id IS NULL AND {delegate} IS NULL AND {branched} IS NULL
        AND NOT ({has_title}) AND s.message_count <= 25
        AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id AND m.role = 'tool')
        AND NOT EXISTS (SELECT 1 FROM sessions c WHERE c.parent_session_id = s.id)"""
    untaggable = conn.execute(
        f"SELECT COUNT(*) FROM sessions s WHERE (({child}) OR ({orphan})) AND NOT "
        f"{obj.replace('model_config', 's.model_config')}").fetchone()[0]
    # Both sets are chosen before either is written: tagging a child must not change whether
    # its parent counts as an orphan (the child keeps its parent link either way).
    ids = conn.execute(
        f"SELECT s.id, CASE WHEN ({child}) THEN s.parent_session_id ELSE '__orphaned__' END "
        f"FROM sessions s WHERE (({child}) OR ({orphan})) AND "
        f"{obj.replace('model_config', 's.model_config')}").fetchall()
    for sid, value in ids:
        conn.execute("UPDATE sessions SET model_config = json_set(COALESCE(model_config, '{}'), "
                     "'$._delegate_from', ?) WHERE id = ?", (value, sid))
    if untaggable:
        log.warning("v16: %d delegate sub-agent session(s) have a model_config that is not a "
                    "JSON object; left untagged", untaggable)
    orphans = sum(1 for _sid, value in ids if value == "__orphaned__")
    return {"subagents_tagged": len(ids) - orphans, "orphans_tagged": orphans,
            "subagents_untaggable": untaggable}


def _has_column(conn: sqlite3.Connection, table: str, column: str) -> bool:
    return any(r[1] == column for r in conn.execute(f"PRAGMA table_info({table})"))


def load_sessions_json(path: Path) -> list[dict]:
    """The entries of the gateway's ``sessions.json`` (shapes in docs/decisions/0004-migrations.md).

    Never raises: a missing file gives ``[]``; an unreadable/garbled/oversized file or an
    unexpected shape is logged as a warning and gives ``[]``; entries that are not objects with
    a string ``session_id`` are dropped, and so are keys starting with ``_`` (upstream skips
    them). An entry of the ``{session_key: entry}`` shape carries its key as ``"_key"``.
    """
    try:  # never through a link, never blocking on a FIFO, never more than the limit
        raw = atomic.read_regular(path, limit=SESSIONS_JSON_MAX_BYTES)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("v18: cannot read %s (%s); gateway metadata not back-filled", path,
                    getattr(exc, "user_message", exc))
        return []
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        log.warning("v18: %s is not valid JSON (%s); gateway metadata not back-filled", path,
                    exc)
        return []
    if isinstance(data, dict) and isinstance(data.get("sessions"), (list, dict)):
        data = data["sessions"]
    if isinstance(data, dict):
        items = [{**e, "_key": k} for k, e in data.items()
                 if isinstance(e, dict) and not str(k).startswith("_")]
    elif isinstance(data, list):
        items = data
    else:
        log.warning("v18: %s holds a %s, not an object or a list; gateway metadata not "
                    "back-filled", path, type(data).__name__)
        return []
    return [e for e in items if isinstance(e, dict) and isinstance(e.get("session_id"), str)]


def _text_value(value: Any) -> str | None:
    """A routing id as text: a non-empty string or an integer; anything else is unknown."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return str(value)
    return value if isinstance(value, str) and value.strip() else None


def entry_values(entry: dict) -> dict[str, Any]:
    """The columns one ``sessions.json`` entry fills (UPSTREAM_API.md §4.1 row 18), as upstream
    reads them: ``session_key`` (the entry's own, else its key in the file), ``chat_id`` and
    ``thread_id`` from ``origin``, ``chat_type``, ``display_name``, ``origin_json`` (``origin``
    as compact JSON, or an ``origin_json`` string) and ``expiry_finalized`` (1 when
    ``expiry_finalized`` or ``memory_flushed`` is set, 0 when given false, else None).
    Values a column cannot hold are None (not filled)."""
    origin = entry.get("origin")
    origin_json = entry.get("origin_json")
    if isinstance(origin, (dict, list)):
        origin_json = json.dumps(origin, ensure_ascii=False, separators=(",", ":"))
    elif isinstance(origin_json, str) and origin_json.strip():
        try:
            origin = json.loads(origin_json)
        except ValueError:
            origin = None
    else:
        origin_json = None
    where = origin if isinstance(origin, dict) else {}
    name = entry.get("display_name")
    flags = [entry.get(k) for k in ("expiry_finalized", "memory_flushed")]
    if any(f is True or (isinstance(f, int) and f == 1) for f in flags):
        exp: int | None = 1
    elif any(f is False or (isinstance(f, int) and not isinstance(f, bool) and f == 0)
             for f in flags):
        exp = 0
    else:
        exp = None
    return {"session_key": _text_value(entry.get("session_key")) or _text_value(entry.get("_key")),
            "chat_id": _text_value(where.get("chat_id")),
            "chat_type": _text_value(entry.get("chat_type")),
            "thread_id": _text_value(where.get("thread_id")),
            "display_name": name if isinstance(name, str) and name.strip() else None,
            "origin_json": origin_json, "expiry_finalized": exp}


#: The text columns v18 fills where NULL, in upstream's order.
V18_COLUMNS = ("session_key", "chat_id", "chat_type", "thread_id", "display_name", "origin_json")


def _step_v18(ctx: _Ctx, conn: sqlite3.Connection) -> dict:
    path = sessions_json_path(ctx.db_path)
    entries = load_sessions_json(path)
    sets = ", ".join(f"{c} = COALESCE({c}, :{c})" for c in V18_COLUMNS)
    fills = " OR ".join(f"({c} IS NULL AND :{c} IS NOT NULL)" for c in V18_COLUMNS)
    sql = (f"""UPDATE sessions SET {sets},
                   expiry_finalized = CASE
                       WHEN :exp IS NULL THEN expiry_finalized
                       WHEN expiry_finalized IS NULL OR expiry_finalized = 0 THEN :exp
                       ELSE expiry_finalized END
               WHERE id = :id AND ({fills}
                   OR (:exp IS NOT NULL AND expiry_finalized IS NOT :exp
                       AND (expiry_finalized IS NULL OR expiry_finalized = 0)))""")
    applied = 0
    for entry in entries:
        values = entry_values(entry)
        if all(values[c] is None for c in V18_COLUMNS) and values["expiry_finalized"] is None:
            continue
        params = {c: values[c] for c in V18_COLUMNS}
        params.update(exp=values["expiry_finalized"], id=entry["session_id"])
        applied += max(conn.execute(sql, params).rowcount, 0)
    return {"gateway_entries": len(entries), "gateway_sessions_filled": applied}


_USAGE_NUMBERS = ("api_call_count", "input_tokens", "output_tokens", "cache_read_tokens",
                  "cache_write_tokens", "reasoning_tokens")
_TOKENS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
           "reasoning_tokens")


def _step_v20(ctx: _Ctx, conn: sqlite3.Connection) -> dict:
    """Seed one usage row per session with tokens > 0 from its totals (UPSTREAM_API.md §4.1).

    As upstream's v21+ modules: INSERT OR IGNORE, model ``COALESCE(model, 'unknown')``, every
    billing part ``''`` when unknown, costs 0 when unknown (the usage cost columns are NOT
    NULL); a session that already has a usage row keeps it.
    """
    live = {r[1] for r in conn.execute("PRAGMA table_info(session_model_usage)")}
    scols = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}

    def src(col: str, default: str) -> str:
        return f"COALESCE({col}, {default})" if col in scols else default

    wanted = {
        "session_id": "id", "model": src("model", "'unknown'"),
        "billing_provider": src("billing_provider", "''"),
        "billing_base_url": src("billing_base_url", "''"),
        "billing_mode": src("billing_mode", "''"),
        **{c: src(c, "0") for c in _USAGE_NUMBERS},
        "estimated_cost_usd": src("estimated_cost_usd", "0"),
        "actual_cost_usd": src("actual_cost_usd", "0"),
        "cost_status": "cost_status" if "cost_status" in scols else "NULL",
        "cost_source": "cost_source" if "cost_source" in scols else "NULL",
        "first_seen": "started_at", "last_seen": "COALESCE(ended_at, started_at)",
    }
    cols = [c for c in wanted if c in live]
    tokens = " OR ".join(f"{src(c, '0')} > 0" for c in _TOKENS)
    cur = conn.execute(
        f"""INSERT OR IGNORE INTO session_model_usage({', '.join(cols)})
            SELECT {', '.join(wanted[c] for c in cols)} FROM sessions s
            WHERE ({tokens})
              AND NOT EXISTS (SELECT 1 FROM session_model_usage u WHERE u.session_id = s.id)""")
    return {"usage_seeded": max(cur.rowcount, 0)}


def _step_v22(ctx: _Ctx, conn: sqlite3.Connection) -> dict:
    """Rebuild ``session_model_usage`` with ``task`` in its key (upstream v22 DDL).

    NULL key parts (a v20 table's nullable ``billing_base_url``, a reconciled ``billing_mode``)
    become ``''`` and NULL counts/costs 0 (UPSTREAM_API.md §4.6: upstream v22 itself fails on
    those); rows that collide once healed are kept once (INSERT OR IGNORE).
    """
    info = conn.execute("PRAGMA table_info(session_model_usage)").fetchall()
    pk = [r[1] for r in sorted((r for r in info if r[5]), key=lambda r: r[5])]
    if "task" in pk:
        return {"usage_rebuilt": 0}
    live = {r[1] for r in info}
    indexes = [r[0] for r in conn.execute(
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND tbl_name = 'session_model_usage' "
        "AND sql IS NOT NULL")]
    tmp = "session_model_usage__v22"
    conn.execute(f"DROP TABLE IF EXISTS {tmp}")
    conn.execute(USAGE_V22.create_sql().replace(
        "IF NOT EXISTS session_model_usage", f"IF NOT EXISTS {tmp}", 1))
    keys = ("model", "billing_provider", "billing_base_url", "billing_mode", "task")
    zero = set(_USAGE_NUMBERS) | {"estimated_cost_usd", "actual_cost_usd"}
    cols, exprs = [], []
    for col in USAGE_V22.column_names:
        if col in keys:
            cols.append(col)
            exprs.append(f"COALESCE({col}, '')" if col in live else "''")
        elif col in zero and col in live:
            cols.append(col)
            exprs.append(f"COALESCE({col}, 0)")
        elif col in live:
            cols.append(col)
            exprs.append(col)
    cur = conn.execute(f"INSERT OR IGNORE INTO {tmp} ({', '.join(cols)}) "
                       f"SELECT {', '.join(exprs)} FROM session_model_usage ORDER BY rowid")
    conn.execute("DROP TABLE session_model_usage")
    conn.execute(f"ALTER TABLE {tmp} RENAME TO session_model_usage")
    for sql in indexes:  # the DROP took the old table's indexes with it
        conn.execute(sql)
    return {"usage_rebuilt": max(cur.rowcount, 0)}


def _step_v23(ctx: _Ctx, conn: sqlite3.Connection) -> dict:
    """Upstream's v23: existing stores keep a legacy FTS layout, flagged for optimize-storage."""
    return {"fts_optimize_flagged": _flag_legacy(conn)}


def _flag_legacy(conn: sqlite3.Connection) -> int:
    """``state_meta['fts_optimize_available'] = '1'`` on a kept legacy layout (1 when written)."""
    if assess(conn) != "legacy" or conn.execute(
            "SELECT 1 FROM state_meta WHERE key = ? AND value = '1'", (OPTIMIZE_KEY,)).fetchone():
        return 0
    conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, '1')", (OPTIMIZE_KEY,))
    return 1


#: The data steps; every other version's step is the version bump alone (SPEC §3).
STEPS: dict[int, Callable[[_Ctx, sqlite3.Connection], dict]] = {
    4: _step_v4, 11: _step_v11, 16: _step_v16, 18: _step_v18, 20: _step_v20, 22: _step_v22,
    23: _step_v23,
}


def run_step(conn: sqlite3.Connection, db_path: Path, version: int) -> dict:
    """Run the data step of ``version`` (no version bump, no transaction handling).

    Exposed for tests of idempotency: running a step twice changes nothing the second time.
    """
    fn = STEPS.get(version)
    return fn(_Ctx(Path(db_path)), conn) if fn else {}


# ------------------------------------------------------------------------------------ driver

def _has_store_tables(conn: sqlite3.Connection) -> bool:
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name IN "
                        "('sessions', 'messages')").fetchone() is not None


def _add_stats(report: MigrationReport, stats: dict) -> None:
    for key, val in stats.items():
        report.stats[key] = report.stats.get(key, 0) + val


def _finish(conn: sqlite3.Connection, version: int, report: MigrationReport) -> None:
    """The idempotent rest (step 3 of the module docstring), inside the caller's transaction.

    Up to 23 the FTS layout is judged by structure (:func:`hermes_state.schema.fts_layout.assess`):
    the v23 layout is completed where a table is missing, upstream's intact inline layout is
    kept and flagged ``fts_optimize_available``, anything else (foreign or duplicate trigger
    sets, an external-v1 or mixed layout, an earlier version's layout) is replaced whole. A
    newer store keeps its layout; only triggers that cannot fire here are dropped
    (:mod:`hermes_state.schema.shape`). Every store gets NULL ``messages.active`` healed.
    """
    create_tables(conn)
    for col in reconcile_columns(conn):
        if col not in report.added_columns:
            report.added_columns.append(col)
    no_fts5 = not fts5_available(conn)
    if no_fts5 and fts_triggers(conn):  # issue 23.3: writes must not need the module
        _add_stats(report, {"fts_switched_off": len(switch_fts_off(conn))})
    if version <= SCHEMA_VERSION:
        plan = "ok" if no_fts5 else assess(conn)
        if plan == "replace":
            _add_stats(report, switch_fts(conn))
        elif plan == "create":
            report.created_fts = create_fts(conn)
        elif plan == "legacy":
            _add_stats(report, {"fts_optimize_flagged": _flag_legacy(conn)})
        cleared = ensure_title_index(conn)
        if cleared:
            report.stats["titles_cleared"] = report.stats.get("titles_cleared", 0) + cleared
        rekeyed = store_shape.fix_routing_key(conn)
        if rekeyed:
            _add_stats(report, {"routing_rekeyed": rekeyed})
    elif not no_fts5:
        dropped = store_shape.drop_unusable_cjk(conn)
        if dropped:
            _add_stats(report, {"cjk_triggers_dropped": dropped})
    healed = store_shape.heal_active(conn)
    if healed:
        _add_stats(report, {"active_healed": healed})
    _stamp_generation(conn, newer=version > SCHEMA_VERSION)


def _write_patiently(store: "StoreConnection", fn: Callable[[sqlite3.Connection], Any],
                     op: str) -> Any:
    """``store.execute_write(fn)``, retried while another process visibly advances the schema.

    A long data step (re-indexing a big store) can hold the write lock longer than the write
    path's retry budget (SPEC §4). When that budget runs out but the stored version moved in the
    meantime, someone is migrating: try again (up to :data:`PATIENCE_S`). Otherwise re-raise.
    """
    deadline = time.monotonic() + PATIENCE_S
    seen = store.read(read_version)
    while True:
        try:
            return store.execute_write(fn, op=op, check_generation=False)
        except WriteContentionError:
            now = store.read(read_version)
            if now == seen or time.monotonic() > deadline:
                raise
            seen = now


def prepare_store(store: "StoreConnection") -> MigrationReport:
    """Create, migrate or complete the schema of ``store`` (SPEC §2, §3).

    Args:
        store: a writable :class:`~hermes_state.store.connection.StoreConnection` whose generation is
            not yet recorded (every transaction runs with ``check_generation=False``).
    Returns:
        A :class:`MigrationReport`.
    Raises:
        WriteContentionError: the write lock could not be had (SPEC §4).
        sqlite3.Error: anything else the DDL raised (the open fails; nothing half-done stays:
            each transaction is atomic).
    """
    report = MigrationReport()
    ctx = _Ctx(Path(store.db_path))

    def base(conn: sqlite3.Connection) -> int | None:
        report.added_columns = []
        version = read_version(conn)
        report.from_version = version
        if version is None and not _has_store_tables(conn):
            create_schema(conn)
            _set_version(conn, SCHEMA_VERSION)
            ensure_title_index(conn)
            _stamp_generation(conn)
            report.fresh = True
            return None
        if version is None:
            version = infer_version(conn)  # before create_tables: judge the store as found
            log.warning("%s has no schema_version row; its tables match version %d: "
                        "migrating from there", store.db_path, version)
        create_tables(conn)
        report.added_columns = reconcile_columns(conn)
        _set_version(conn, version)
        if version >= SCHEMA_VERSION:
            _finish(conn, version, report)
            return None
        return version

    pending = _write_patiently(store, base, op="open")
    if report.from_version is not None and report.from_version > SCHEMA_VERSION:
        report.newer = warn_if_newer(store.db_path, report.from_version)
    if pending is None:
        report.to_version = max(report.from_version or SCHEMA_VERSION, SCHEMA_VERSION)
        return report

    def step(conn: sqlite3.Connection) -> tuple[int, int, dict] | None:
        current = read_version(conn)
        if current is None or current >= SCHEMA_VERSION:
            return None
        target = current + 1
        stats = run_step(conn, ctx.db_path, target)
        conn.execute("UPDATE schema_version SET version = ?", (target,))
        failpoints.hit(f"migrate.v{target}.before_commit")
        return target, current, stats

    while True:
        t0 = time.monotonic()
        done = _write_patiently(store, step, op="migrate")
        if done is None:
            break
        target, current, stats = done
        report.steps.append(target)
        last = target >= SCHEMA_VERSION
        for key, val in stats.items():
            report.stats[key] = report.stats.get(key, 0) + val
        seconds = time.monotonic() - t0
        log.debug("%s: schema version %d -> %d in %.3fs %s", store.db_path, current, target,
                  seconds, stats or "")
        events.enabled() and events.emit("migration", step=target, from_version=current,
                                         to_version=target, seconds=seconds, **stats)
        if last:
            break

    def finish(conn: sqlite3.Connection) -> int:
        version = read_version(conn) or SCHEMA_VERSION
        _finish(conn, version, report)
        return version

    report.to_version = _write_patiently(store, finish, op="open")
    if report.steps:
        log.info("migrated %s from schema version %s to %s (steps %d..%d run here) %s",
                 store.db_path, report.from_version, report.to_version, report.steps[0],
                 report.steps[-1], report.stats or "")
    return report
