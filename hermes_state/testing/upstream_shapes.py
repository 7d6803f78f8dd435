"""Stores shaped like the ones upstream releases 25 and 31 leave behind, built from the facts.

:func:`hermes_state.testing.build_fixture` builds a store as upstream wrote it at any
version up to 22 (UPSTREAM_API.md §4.1-§4.3: upstream's trigger names, the external-v1 and
inline FTS layouts, NOT NULL usage costs, a v20 usage table with NULL ``billing_base_url``).
This module adds the newer shapes a v23 reader meets (§4.5), each from the same deterministic
data so fresh and upgraded stores can be compared:

============================  ================================================================
shape                         what it is
============================  ================================================================
``v25-fresh``                 a store born on 25: the v23 external layout, ``system_prompts``
                              with the foreign key from ``sessions.system_prompt_hash``
``v25-upgraded``              a v22 store opened by 25: inline layout kept and flagged, update
                              triggers narrowed to ``AFTER UPDATE OF``, prompts moved behind the
                              hash, columns added by the reconciler (no foreign key)
``v25-from-v10``              a v10 store opened by 25: external-v1 tables whose update triggers
                              became inline-style (the *mixed* state)
``v31-fresh``                 the DDL of a store born on 31 (views, gated triggers, display and
                              uid triggers, ``INDEXED BY`` indexes), ``journal_mode=DELETE``
``v31-upgraded``              a v22 store opened by 31 (inline kept, v31 update bodies)
``v31-from-v10``              a v10 store opened by 31 (the mixed state, v31 update bodies)
``v25-cjk``                   ``v25-fresh`` with a ``messages_fts_cjk`` table and triggers whose
                              tokenizer this SQLite cannot load
============================  ================================================================

The v31 DDL is read from the bundled store written by release 0.22.2
(``tests/fixtures/upstream/v31``) -- a fact about that release, never its data.
"""

from __future__ import annotations

import shutil
import sqlite3
import tempfile
from pathlib import Path

from ..api.system_prompts import prompt_hash
from ..schema import history as h
from ..schema import tables as schema
from ..schema.fts_inventory import LEGACY_KINDS, inventory
from .fixtures import build_fixture

#: The stores written by real upstream code that ship with the project (a checkout's
#: ``tests/fixtures/upstream``; absent from an installed package).
FIXTURE_ROOT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "upstream"

def copy_store(src: Path, dest_dir: Path) -> Path:
    """Copy ``src`` with its ``-wal``/``-shm`` (a live WAL included) to ``dest_dir/state.db``.

    The gateway's ``sessions/sessions.json`` beside it (read by the v18 step) is copied too.
    """
    dest_dir.mkdir(parents=True, exist_ok=True)
    dest = dest_dir / "state.db"
    for suffix in ("", "-wal", "-shm", "-journal"):
        side = Path(f"{src}{suffix}")
        if side.is_file():
            shutil.copyfile(side, f"{dest}{suffix}")
    sessions = src.parent / "sessions" / "sessions.json"
    if sessions.is_file():
        (dest_dir / "sessions").mkdir(exist_ok=True)
        shutil.copyfile(sessions, dest_dir / "sessions" / "sessions.json")
    return dest


SHAPES = ("v25-fresh", "v25-upgraded", "v25-from-v10", "v31-fresh", "v31-upgraded",
          "v31-from-v10", "v25-cjk")

_V25_SESSIONS = (
    ("system_prompt_hash", "TEXT"), ("last_activity_at", "REAL"),
    ("last_activity_description", "TEXT"), ("last_activity_provenance", "TEXT"),
    ("compression_ineffective_count", "INTEGER NOT NULL DEFAULT 0"),
    ("pinned", "INTEGER NOT NULL DEFAULT 0"), ("last_read_at", "REAL"))
_V25_MESSAGES = (("display_kind", "TEXT"), ("display_metadata", "TEXT"))
_V25_INDEXES = (
    "CREATE INDEX IF NOT EXISTS idx_messages_session_id ON messages(session_id, id)",
    "CREATE INDEX IF NOT EXISTS idx_messages_assistant_calls_by_session ON messages(session_id) "
    "WHERE role = 'assistant' AND tool_calls IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS idx_sessions_system_prompt_hash ON sessions(system_prompt_hash)",
)
_TEXT = h.INLINE_TEXT.format(r="new")
_TOOL_TEXT = ("CASE WHEN new.role = 'tool' THEN substr(COALESCE(new.content, ''), 1, 8192) "
              "ELSE COALESCE(new.content, '') END || ' ' || COALESCE(new.tool_name, '') || ' ' || "
              "COALESCE(new.tool_calls, '')")


def _update_trigger(table: str, release: int) -> str:
    """The inline-style update body 25/31 recreate (UPSTREAM_API.md §4.2, §4.5)."""
    cols = "content, tool_name, tool_calls" + (", role" if release >= 31 else "")
    text = _TOOL_TEXT if release >= 31 else _TEXT
    return (f"CREATE TRIGGER {table}_update AFTER UPDATE OF {cols} ON messages BEGIN\n"
            f"    DELETE FROM {table} WHERE rowid = old.id;\n"
            f"    INSERT INTO {table}(rowid, content) VALUES (new.id, {text});\nEND")


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}


def _add_columns(conn: sqlite3.Connection, table: str, cols) -> None:
    """What upstream's reconciler does: ALTER ADD COLUMN for each missing one."""
    live = _columns(conn, table)
    for name, decl in cols:
        if name not in live:
            conn.execute(f'ALTER TABLE "{table}" ADD COLUMN "{name}" {decl}')


def _move_prompts(conn: sqlite3.Connection) -> None:
    """The v25 data step: every non-NULL ``sessions.system_prompt`` moves behind its hash."""
    conn.execute("CREATE TABLE IF NOT EXISTS system_prompts (hash TEXT PRIMARY KEY, "
                 "prompt TEXT NOT NULL)")
    for sid, prompt in conn.execute(
            "SELECT id, system_prompt FROM sessions WHERE system_prompt IS NOT NULL").fetchall():
        digest = prompt_hash(prompt)
        conn.execute("INSERT OR IGNORE INTO system_prompts(hash, prompt) VALUES (?, ?)",
                     (digest, prompt))
        conn.execute("UPDATE sessions SET system_prompt_hash = ?, system_prompt = NULL "
                     "WHERE id = ?", (digest, sid))


def _v31_schema() -> list[tuple[str, str, str, str]]:
    """``(type, name, tbl_name, sql)`` of every object of the release-31 store (read on a copy)."""
    with tempfile.TemporaryDirectory(prefix="v31-ddl-") as tmp:
        path = copy_store(FIXTURE_ROOT / "v31" / "state.db", Path(tmp))
        conn = sqlite3.connect(str(path))
        try:
            return conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master "
                                "WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%' "
                                "ORDER BY rowid").fetchall()
        finally:
            conn.close()


def _v31_columns(objects, table: str) -> list[tuple[str, str]]:
    conn = sqlite3.connect(":memory:")
    try:
        sql = next(s for typ, name, _t, s in objects if typ == "table" and name == table)
        conn.execute(sql)  # foreign keys to absent tables are not checked here
        out = []
        for _cid, name, typ, notnull, default, pk in conn.execute(f"PRAGMA table_info({table})"):
            decl = typ
            if notnull and default is not None and not pk:
                decl += f" NOT NULL DEFAULT {default}"
            elif default is not None:
                decl += f" DEFAULT {default}"
            out.append((name, decl))
        return out
    finally:
        conn.close()


def _upgrade(conn: sqlite3.Connection, release: int) -> None:
    """What a 25 (or 31) open does to an older store, per UPSTREAM_API.md §4.1/§4.5."""
    for spec in h.schema_at(22).tables.values():  # CREATE IF NOT EXISTS, then the reconciler
        conn.execute(spec.create_sql())
        _add_columns(conn, spec.name, [(n, d.replace("PRIMARY KEY", "").replace(
            "REFERENCES sessions(id) ON DELETE CASCADE", "")) for n, d in spec.columns
            if "NOT NULL" not in d or "DEFAULT" in d])
    _add_columns(conn, "sessions", _V25_SESSIONS)
    _add_columns(conn, "messages", _V25_MESSAGES)
    _move_prompts(conn)
    for sql in _V25_INDEXES:
        conn.execute(sql)

    inline_or_v1 = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE name IN ('messages_fts', 'messages_fts_trigram')")]
    if inventory(conn).kind not in LEGACY_KINDS:
        inline_or_v1 = []  # an external layout keeps its triggers (only legacy bodies change)
    for table in inline_or_v1:
        conn.execute(f"DROP TRIGGER IF EXISTS {table}_update")
        conn.execute(_update_trigger(table, release))
    if inline_or_v1:
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) "
                     "VALUES ('fts_optimize_available', '1')")
    if release >= 31:
        objects = _v31_schema()
        for table in ("sessions", "messages", "async_delegations"):
            _add_columns(conn, table, _v31_columns(objects, table))
        for typ, name, tbl, sql in sorted(objects, key=lambda o: o[0] != "table"):
            exists = conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?",
                                  (name,)).fetchone()
            if exists or name.startswith("messages_fts") or typ == "view":
                continue
            if typ == "table" or (typ in ("index", "trigger") and tbl != "system_prompts"):
                conn.execute(sql)
        conn.execute("INSERT OR REPLACE INTO state_meta(key, value) "
                     "VALUES ('message_uid_backfill', '1')")
    conn.execute("UPDATE schema_version SET version = ?", (release,))


def _copy_rows(src: sqlite3.Connection, dst: sqlite3.Connection) -> None:
    """Every row of the data tables of ``src`` into the same tables of ``dst`` (common columns)."""
    for table in ("sessions", "messages", "session_model_usage", "state_meta", "gateway_routing",
                  "compression_locks", "async_delegations"):
        cols = sorted(_columns(src, table) & _columns(dst, table))
        if not cols:
            continue
        names = ", ".join(f'"{c}"' for c in cols)
        rows = src.execute(f'SELECT {names} FROM "{table}" ORDER BY rowid').fetchall()
        if table == "sessions":  # parents first (foreign key)
            order = {r[cols.index("id")]: n for n, r in enumerate(rows)}
            rows.sort(key=lambda r: (r[cols.index("parent_session_id")] is not None,
                                     order[r[cols.index("id")]]))
        dst.executemany(f'INSERT OR REPLACE INTO "{table}" ({names}) VALUES '
                        f'({", ".join("?" * len(cols))})', rows)


def _fresh(path: Path, source: Path, release: int) -> None:
    """A store born on ``release``: its DDL first, then the rows (the triggers index them)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    src = sqlite3.connect(str(source))
    try:
        conn.execute("PRAGMA journal_mode=" + ("DELETE" if release >= 31 else "WAL"))
        conn.execute("BEGIN")
        if release >= 31:
            objects = _v31_schema()
            fts = [n for typ, n, _t, sql in objects if "VIRTUAL TABLE" in sql.upper()]
            for typ, name, _tbl, sql in objects:
                shadow = any(name.startswith(f + "_") for f in fts) and typ == "table" \
                    and "VIRTUAL" not in sql.upper()
                if typ in ("table", "view", "index") and not shadow:
                    conn.execute(sql)
            for typ, _name, _tbl, sql in objects:
                if typ == "trigger":
                    conn.execute(sql)
            conn.execute("DELETE FROM state_meta")
        else:
            for spec in h.schema_at(22).tables.values():
                sql = spec.create_sql()
                if spec.name == "sessions":  # fresh v25: the prompt hash is a foreign key
                    cols = ",\n".join(f"    {n} {d}" for n, d in spec.columns + _V25_SESSIONS)
                    sql = ("CREATE TABLE sessions (\n" + cols + ",\n    FOREIGN KEY "
                           "(parent_session_id) REFERENCES sessions(id),\n    FOREIGN KEY "
                           "(system_prompt_hash) REFERENCES system_prompts(hash)\n)")
                elif spec.name == "messages":
                    sql = spec.add(_V25_MESSAGES).create_sql()
                conn.execute(sql)
            conn.execute("CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, "
                         "prompt TEXT NOT NULL)")
            for _name, sql in h.schema_at(22).indexes:
                conn.execute(sql)
            for sql in _V25_INDEXES:
                conn.execute(sql)
            schema.create_fts(conn)
        conn.execute("INSERT INTO schema_version(version) SELECT ? WHERE NOT EXISTS "
                     "(SELECT 1 FROM schema_version)", (release,))
        conn.execute("UPDATE schema_version SET version = ?", (release,))
        _copy_rows(src, conn)
        prompts = conn.execute("SELECT id, system_prompt FROM sessions WHERE system_prompt "
                               "IS NOT NULL").fetchall()
        for sid, prompt in prompts:
            digest = prompt_hash(prompt)
            conn.execute("INSERT OR IGNORE INTO system_prompts VALUES (?, ?)", (digest, prompt))
            conn.execute("UPDATE sessions SET system_prompt_hash = ?, system_prompt = NULL "
                         "WHERE id = ?", (digest, sid))
        conn.execute("COMMIT")
    finally:
        src.close()
        conn.close()


def _add_unloadable_cjk(path: Path) -> None:
    """A ``messages_fts_cjk`` table and triggers for a tokenizer this SQLite cannot load."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("CREATE VIEW messages_fts_cjk_src AS SELECT id, content, tool_name, "
                     "tool_calls FROM messages WHERE role <> 'tool'")
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("INSERT INTO sqlite_master(type, name, tbl_name, rootpage, sql) VALUES "
                     "('table', 'messages_fts_cjk', 'messages_fts_cjk', 0, 'CREATE VIRTUAL TABLE "
                     "messages_fts_cjk USING fts5(content, tool_name, tool_calls, "
                     "content=''messages_fts_cjk_src'', content_rowid=''id'', "
                     "tokenize=''cjk_unicode61'')')")
        conn.execute("PRAGMA writable_schema = OFF")
    finally:
        conn.close()
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        for event, body in (
                ("INSERT", "INSERT INTO messages_fts_cjk(rowid, content, tool_name, tool_calls) "
                           "VALUES (new.id, new.content, new.tool_name, new.tool_calls);"),
                ("DELETE", "INSERT INTO messages_fts_cjk(messages_fts_cjk, rowid, content, "
                           "tool_name, tool_calls) VALUES ('delete', old.id, old.content, "
                           "old.tool_name, old.tool_calls);"),
                ("UPDATE", "INSERT INTO messages_fts_cjk(messages_fts_cjk, rowid, content, "
                           "tool_name, tool_calls) VALUES ('delete', old.id, old.content, "
                           "old.tool_name, old.tool_calls);")):
            conn.execute(f"CREATE TRIGGER messages_fts_cjk_{event.lower()} AFTER {event} ON "
                         f"messages BEGIN {body} END")
    finally:
        conn.close()


def upgrade_in_place(path: Path | str, release: int) -> None:
    """Apply what an open by release ``release`` (25 or 31) does to the store at ``path``.

    Used to check that a store this code migrated still takes a newer release's upgrade.
    """
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("BEGIN")
        _upgrade(conn, release)
        conn.execute("COMMIT")
    finally:
        conn.close()


def build(dest_dir: Path | str, shape: str, *, seed: int = 0, sessions: int = 12,
          messages_per_session: int = 8) -> Path:
    """Build the store ``shape`` (:data:`SHAPES`) as ``dest_dir/state.db``; returns its path.

    Raises:
        ValueError: an unknown shape.
    """
    if shape not in SHAPES:
        raise ValueError(f"unknown shape {shape!r} (shapes: {', '.join(SHAPES)})")
    dest_dir = Path(dest_dir)
    dest_dir.mkdir(parents=True, exist_ok=True)
    path = dest_dir / "state.db"
    release = 31 if shape.startswith("v31") else 25
    base_version = 10 if shape.endswith("from-v10") else 22
    with tempfile.TemporaryDirectory(prefix="shape-") as tmp:
        m = build_fixture(Path(tmp) / "state.db", base_version, seed=seed, sessions=sessions,
                            messages_per_session=messages_per_session, write_sessions_json=False)
        if shape in ("v25-fresh", "v31-fresh", "v25-cjk"):
            _fresh(path, Path(m["path"]), release)
        else:
            src = sqlite3.connect(m["path"], isolation_level=None)
            src.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            src.close()
            shutil.copyfile(m["path"], path)
            conn = sqlite3.connect(str(path), isolation_level=None)
            try:
                conn.execute("BEGIN")
                _upgrade(conn, release)
                conn.execute("COMMIT")
                if release >= 31:
                    conn.execute("PRAGMA journal_mode=DELETE")
            finally:
                conn.close()
    if shape == "v25-cjk":
        _add_unloadable_cjk(path)
    return path
