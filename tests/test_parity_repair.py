"""repair_state_db_schema (UPSTREAM_API §2.1) under SPEC §12's rules: never in place, refused
while the store is held, a forensic copy kept."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_state import SessionDB, repair_state_db_schema


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        for i in range(20):
            db.append_message("s", "user", f"kubernetes rollout {i}")
    return path


def raw(path, *statements):
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA writable_schema=ON")
        for sql in statements:
            conn.execute(sql)
    finally:
        conn.close()


def test_missing_file(tmp_path):
    out = repair_state_db_schema(tmp_path / "nope.db")
    assert out == {"repaired": False, "strategy": None, "backup_path": None,
                   "error": f"{tmp_path / 'nope.db'} does not exist"}


def test_healthy_store_is_left_alone(store):
    before = store.read_bytes()
    out = repair_state_db_schema(store)
    assert out == {"repaired": False, "strategy": "already_healthy", "backup_path": None,
                   "error": None}
    assert store.read_bytes() == before


def test_duplicate_schema_entry_is_removed(store):
    raw(store, "INSERT INTO sqlite_master SELECT type, name, tbl_name, rootpage, sql "
               "FROM sqlite_master WHERE name = 'idx_sessions_source'")
    with pytest.raises(sqlite3.DatabaseError, match="malformed database schema"):
        SessionDB(store)
    out = repair_state_db_schema(store)
    assert out["repaired"] is True and out["strategy"] == "dedup_schema"
    assert out["backup_path"].endswith(".malformed-backup") and out["error"] is None
    with SessionDB(store) as db:
        assert len(db.get_messages("s")) == 20
        assert len(db.search_messages("kubernetes", limit=50)) == 20
    # the forensic copy still has the damage
    with pytest.raises(sqlite3.DatabaseError):
        sqlite3.connect(out["backup_path"]).execute("SELECT 1 FROM sessions").fetchone()


def test_damaged_fts_index_is_rebuilt(store):
    raw(store, "DELETE FROM messages_fts_data WHERE id > 10")
    out = repair_state_db_schema(store, backup=False)
    assert out["repaired"] is True and out["strategy"] in ("rebuild_fts", "drop_fts_rebuild")
    assert out["backup_path"] is None
    assert not list(store.parent.glob("*.malformed-backup*"))
    with SessionDB(store) as db:
        assert len(db.search_messages("kubernetes", limit=50)) == 20


def test_broken_fts_schema_is_dropped_and_recreated(store):
    raw(store, "UPDATE sqlite_master SET sql = 'CREATE VIRTUAL TABLE messages_fts USING "
               "fts5(' WHERE name = 'messages_fts'")
    out = repair_state_db_schema(store)
    assert out["repaired"] is True and out["strategy"] == "drop_fts_rebuild"
    with SessionDB(store) as db:
        assert len(db.search_messages("kubernetes", limit=50)) == 20
        db.append_message("s", "user", "written after the repair")
        assert db.search_messages("repair")[0]["session_id"] == "s"


def test_refused_while_the_store_is_held(store):
    raw(store, "INSERT INTO sqlite_master SELECT type, name, tbl_name, rootpage, sql "
               "FROM sqlite_master WHERE name = 'idx_sessions_source'")
    holder = sqlite3.connect(store)
    holder.execute("PRAGMA writable_schema=ON")
    holder.execute("SELECT 1 FROM sqlite_master").fetchone()
    try:
        before = store.read_bytes()
        out = repair_state_db_schema(store)
        assert out["repaired"] is False and "refusing to repair" in out["error"]
        assert store.read_bytes() == before
    finally:
        holder.close()
    assert repair_state_db_schema(store)["repaired"] is True
