"""Files, location, pragmas and schema of a store (SPEC §1, §2, §3 "settled store", §4)."""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path

import pytest

from hermes_state import SCHEMA_VERSION, SessionDB


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


# --------------------------------------------------------------------------- location (§1)

def test_default_path_comes_from_hermes_home_at_construction(tmp_path, monkeypatch):
    home_a = tmp_path / "a" / "nested"
    home_b = tmp_path / "b"
    monkeypatch.setenv("HERMES_HOME", str(home_a))
    with SessionDB() as db:
        assert db.db_path == home_a / "state.db"
        assert home_a.is_dir()
        assert (home_a / "state.db").is_file()
    # Resolved per construction, not cached at import or at the first construction.
    monkeypatch.setenv("HERMES_HOME", str(home_b))
    with SessionDB() as db:
        assert db.db_path == home_b / "state.db"
    assert (home_b / "state.db").is_file()


def test_default_path_falls_back_to_dot_hermes_in_home(tmp_path, monkeypatch):
    monkeypatch.delenv("HERMES_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    with SessionDB() as db:
        assert db.db_path == tmp_path / ".hermes" / "state.db"
    assert (tmp_path / ".hermes" / "state.db").is_file()


def test_explicit_db_path_overrides_env_and_creates_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "ignored"))
    target = tmp_path / "x" / "y" / "state.db"
    with SessionDB(db_path=target) as db:
        assert db.db_path == target
    assert target.is_file()
    assert not (tmp_path / "ignored").exists()


def test_new_files_are_mode_0600(tmp_path):
    path = tmp_path / "home" / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        for suffix in ("", "-wal", "-shm"):
            p = Path(f"{path}{suffix}")
            assert p.exists(), p
            assert _mode(p) == 0o600, (p, oct(_mode(p)))


def test_existing_loose_modes_are_tightened(tmp_path):
    path = tmp_path / "state.db"
    SessionDB(path).close()
    os.chmod(path, 0o644)
    with SessionDB(path):
        assert _mode(path) == 0o600


# --------------------------------------------------------------------------- pragmas (§4)

def test_connection_pragmas(tmp_path):
    with SessionDB(tmp_path / "state.db") as db:
        conn = db.connection.conn

        def pragma(name):
            return conn.execute(f"PRAGMA {name}").fetchone()[0]

        assert pragma("journal_mode") == "wal"
        assert db.connection.journal_mode == "wal"
        assert pragma("foreign_keys") == 1
        assert pragma("synchronous") == 1  # NORMAL
        assert pragma("journal_size_limit") == 67108864
        assert pragma("busy_timeout") == 1000
        # Autocommit between calls: no read transaction is left open.
        db.get_meta("x")
        assert not conn.in_transaction


def test_journal_mode_is_persistent_wal_on_disk(tmp_path):
    path = tmp_path / "state.db"
    SessionDB(path).close()
    plain = sqlite3.connect(path)
    try:
        assert plain.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        plain.close()


def test_synchronous_full_is_configurable_and_bad_values_rejected(tmp_path):
    with SessionDB(tmp_path / "state.db", synchronous="FULL") as db:
        assert db.connection.conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    with pytest.raises(ValueError):
        SessionDB(tmp_path / "other.db", synchronous="OFF")


# --------------------------------------------------------------------------- schema (§2)

SESSIONS_COLUMNS = """id source user_id model model_config system_prompt parent_session_id
started_at ended_at end_reason message_count tool_call_count input_tokens output_tokens
cache_read_tokens cache_write_tokens reasoning_tokens billing_provider billing_base_url billing_mode
estimated_cost_usd actual_cost_usd cost_status cost_source pricing_version title api_call_count
session_key chat_id chat_type thread_id display_name origin_json expiry_finalized cwd git_branch
git_repo_root handoff_state handoff_platform handoff_error compression_failure_cooldown_until
compression_failure_error profile_name compression_fallback_streak rewind_count archived
pinned""".split()

MESSAGES_COLUMNS = """id session_id role content tool_call_id tool_calls tool_name timestamp
token_count finish_reason reasoning reasoning_content reasoning_details codex_reasoning_items
codex_message_items effect_disposition platform_message_id observed active compacted api_content
display_kind display_metadata""".split()

USAGE_COLUMNS = """session_id model billing_provider billing_base_url billing_mode task
api_call_count input_tokens output_tokens cache_read_tokens cache_write_tokens reasoning_tokens
estimated_cost_usd actual_cost_usd cost_status cost_source first_seen last_seen""".split()

OTHER_TABLES = {
    "state_meta": ["key", "value"],
    "gateway_routing": ["scope", "session_key", "entry_json", "updated_at"],
    "compression_locks": ["session_id", "holder", "acquired_at", "expires_at"],
    "async_delegations": ["delegation_id", "origin_session", "origin_ui_session_id",
                          "parent_session_id", "state", "dispatched_at", "completed_at",
                          "updated_at", "event_json", "result_json", "delivery_state",
                          "delivery_attempts", "delivered_at", "owner_pid", "owner_started_at",
                          "task_json", "delivery_claim", "delivery_claimed_at"],
    "schema_version": ["version"],
}


@pytest.fixture
def schema_conn(tmp_path):
    path = tmp_path / "state.db"
    SessionDB(path).close()
    conn = sqlite3.connect(path)
    yield conn
    conn.close()


def _columns(conn, table):
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


def _pk(conn, table):
    return [r[1] for r in sorted((r for r in conn.execute(f"PRAGMA table_info({table})") if r[5]),
                                 key=lambda r: r[5])]


def test_schema_version_is_23_single_row(schema_conn):
    assert SCHEMA_VERSION == 23
    assert schema_conn.execute("SELECT version FROM schema_version").fetchall() == [(23,)]


def test_every_table_has_the_spec_columns(schema_conn):
    assert _columns(schema_conn, "sessions") == SESSIONS_COLUMNS
    assert _columns(schema_conn, "messages") == MESSAGES_COLUMNS
    assert _columns(schema_conn, "session_model_usage") == USAGE_COLUMNS
    for table, cols in OTHER_TABLES.items():
        assert _columns(schema_conn, table) == cols, table
    assert _pk(schema_conn, "session_model_usage") == [
        "session_id", "model", "billing_provider", "billing_base_url", "billing_mode", "task"]
    assert _pk(schema_conn, "gateway_routing") == ["scope", "session_key"]
    assert _pk(schema_conn, "state_meta") == ["key"]
    assert _pk(schema_conn, "compression_locks") == ["session_id"]
    assert _pk(schema_conn, "async_delegations") == ["delegation_id"]
    # messages.id is AUTOINCREMENT (ids are never reused).
    sql = schema_conn.execute(
        "SELECT sql FROM sqlite_master WHERE name='messages'").fetchone()[0]
    assert "AUTOINCREMENT" in sql.upper()
    fks = {(r[2], r[3], r[4]) for r in schema_conn.execute("PRAGMA foreign_key_list(messages)")}
    assert ("sessions", "session_id", "id") in fks
    fks = {(r[2], r[3], r[4]) for r in schema_conn.execute("PRAGMA foreign_key_list(sessions)")}
    assert ("sessions", "parent_session_id", "id") in fks
    fks = [r for r in schema_conn.execute("PRAGMA foreign_key_list(session_model_usage)")]
    assert fks and fks[0][2] == "sessions" and fks[0][6].upper() == "CASCADE"


def test_indexes(schema_conn):
    def index_cols(name):
        return [r[2] for r in schema_conn.execute(f"PRAGMA index_info({name})")]

    assert index_cols("idx_sessions_source") == ["source"]
    assert index_cols("idx_sessions_parent") == ["parent_session_id"]
    assert index_cols("idx_sessions_started") == ["started_at"]
    desc = [r[3] for r in schema_conn.execute("PRAGMA index_xinfo(idx_sessions_started)")][0]
    assert desc == 1
    assert index_cols("idx_messages_session") == ["session_id", "timestamp"]
    assert index_cols("idx_messages_session_id") == ["session_id", "id"]
    title = {r[1]: r for r in schema_conn.execute("PRAGMA index_list(sessions)")}[
        "idx_sessions_title_unique"]
    assert title[2] == 1 and title[4] == 1  # unique, partial
    assert index_cols("idx_sessions_title_unique") == ["title"]
    sql = schema_conn.execute(
        "SELECT sql FROM sqlite_master WHERE name='idx_sessions_title_unique'").fetchone()[0]
    assert "WHERE title IS NOT NULL" in sql


def test_fts_tables_and_triggers(schema_conn):
    master = {r[0]: (r[1], r[2] or "") for r in schema_conn.execute(
        "SELECT name, type, sql FROM sqlite_master")}
    fts = master["messages_fts"][1]
    assert "fts5" in fts and "content='messages'" in fts and "content_rowid='id'" in fts
    assert "content, tool_name, tool_calls" in fts
    # SQLite >= 3.34 has the trigram tokenizer: the table must exist.
    assert sqlite3.sqlite_version_info >= (3, 34)
    tri = master["messages_fts_trigram"][1]
    # UPSTREAM_API.md §4.2 (v23 layout): the trigram table reads its rows from a view without
    # tool rows, so FTS5 'rebuild' and integrity-check see exactly what the triggers index.
    assert "tokenize='trigram'" in tri and "content='messages_fts_trigram_src'" in tri
    assert master["messages_fts_trigram_src"][0] == "view"
    assert "role <> 'tool'" in master["messages_fts_trigram_src"][1]
    schema_conn.execute("INSERT INTO messages_fts_trigram(messages_fts_trigram, rank) "
                        "VALUES('integrity-check', 1)")
    # No cjk tokenizer is loadable here: neither the table nor a trigger naming it may exist.
    assert not [n for n in master if "cjk" in n]
    for table in ("messages_fts", "messages_fts_trigram"):
        # The trigger names of every upstream release (UPSTREAM_API.md §4.2).
        kinds = {"insert": "AFTER INSERT ON messages", "delete": "AFTER DELETE ON messages",
                 "update": "AFTER UPDATE OF content, tool_name, tool_calls"}
        for suffix, head in kinds.items():
            typ, sql = master[f"{table}_{suffix}"]
            assert typ == "trigger"
            assert head in sql, (table, suffix)
            if suffix in ("delete", "update"):
                assert "'delete'" in sql and "old.content" in sql
    assert "new.role <> 'tool'" in master["messages_fts_trigram_insert"][1]
    assert not [n for n in master if n.endswith(("_ai", "_ad", "_au"))]


def test_context_manager_closes(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.set_meta("k", "v")
    with pytest.raises(sqlite3.ProgrammingError):
        db.get_meta("k")
    with pytest.raises(sqlite3.ProgrammingError):
        db.set_meta("k", "w")
    db.close()  # idempotent
    # The last connection closed: its data is in the main file and the WAL is gone.
    assert not Path(f"{path}-wal").exists()
    plain = sqlite3.connect(path)
    try:
        assert plain.execute("SELECT value FROM state_meta WHERE key='k'").fetchone() == ("v",)
    finally:
        plain.close()


def test_second_open_of_settled_store_writes_nothing(tmp_path):
    path = tmp_path / "state.db"
    wal = Path(f"{path}-wal")
    SessionDB(path).close()
    observer = sqlite3.connect(path)
    try:
        observer.execute("SELECT count(*) FROM sessions").fetchone()
        version0 = observer.execute("PRAGMA data_version").fetchone()[0]
        bytes0 = path.read_bytes()
        mtime0 = os.stat(path).st_mtime_ns
        wal_size0 = wal.stat().st_size if wal.exists() else 0
        db = SessionDB(path)
        assert db.connection.writes == 0
        assert (wal.stat().st_size if wal.exists() else 0) == wal_size0
        assert observer.execute("PRAGMA data_version").fetchone()[0] == version0
        db.close()
        assert observer.execute("PRAGMA data_version").fetchone()[0] == version0
        assert (wal.stat().st_size if wal.exists() else 0) == wal_size0
        assert path.read_bytes() == bytes0
        assert os.stat(path).st_mtime_ns == mtime0
    finally:
        observer.close()


def test_first_open_records_generation_token_and_application_id(tmp_path):
    from hermes_state.processes.generation import application_id_for

    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        token = db.get_meta("db_file_generation")
        assert token and len(token) == 32
        app_id = db.connection.conn.execute("PRAGMA application_id").fetchone()[0]
        assert app_id == application_id_for(token) != 0
    with SessionDB(path) as db:  # first opener wins: the token never changes
        assert db.get_meta("db_file_generation") == token
