"""The declared per-version schema and the fixture stores built from it (SPEC §3, §16.6)."""

from __future__ import annotations

import json
import sqlite3

import pytest
from hermes_state.schema.fts_layout import verify_fts

from hermes_state.schema import history as h
from hermes_state.schema import tables as schema
from hermes_state.store import migrations
from hermes_state.testing import build_fixture, check_migrated

ALL_VERSIONS = list(range(1, h.CURRENT_VERSION + 1))


def _tables(conn):
    """Non-FTS, non-internal tables of a live store."""
    fts_prefixes = ("messages_fts",)
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            if not r[0].startswith("sqlite_") and not r[0].startswith(fts_prefixes)}


def _objects(conn, kind):
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type=? AND sql "
                                       "IS NOT NULL", (kind,))}


def test_every_version_is_declared_and_data_steps_match_the_migrations():
    assert sorted(h.VERSIONS) == ALL_VERSIONS
    assert h.CURRENT_VERSION == schema.SCHEMA_VERSION == 23
    data = {v for v, _summary, is_data in h.version_table() if is_data}
    assert data == set(migrations.STEPS) == {4, 11, 16, 18, 20, 22, 23}
    assert [h.schema_at(v).fts_layout for v in (1, 9, 10, 11, 22, 23)] == [
        "external-v1", "external-v1", "external-v1-trigram", "inline", "inline", "external-v23"]


def test_v23_declaration_equals_the_current_ddl():
    declared = schema.declared_columns()
    v23 = h.schema_at(23)
    assert set(declared) == set(v23.tables)
    scratch = sqlite3.connect(":memory:")
    for spec in v23.tables.values():
        scratch.execute(spec.create_sql())
    for table, cols in declared.items():
        live = {r[1] for r in scratch.execute(f"PRAGMA table_info({table})")}
        assert live == {n for n, _ in cols}, table
    ref = sqlite3.connect(":memory:")
    schema.create_tables(ref)
    for table in declared:
        a = {r[1]: tuple(r[2:]) for r in scratch.execute(f"PRAGMA table_info({table})")}
        b = {r[1]: tuple(r[2:]) for r in ref.execute(f"PRAGMA table_info({table})")}
        assert a == b, table  # same types, NOT NULL, defaults and primary key positions


def test_columns_only_grow_from_version_to_version():
    for v in ALL_VERSIONS[1:]:
        prev, cur = h.schema_at(v - 1), h.schema_at(v)
        for table, spec in prev.tables.items():
            assert set(spec.column_names) <= set(cur.columns(table)), (v, table)


@pytest.mark.parametrize("version", ALL_VERSIONS)
def test_fixture_has_exactly_the_declared_schema(tmp_path, version):
    m = build_fixture(tmp_path / "state.db", version, sessions=6, messages_per_session=4)
    vs = h.schema_at(version)
    conn = sqlite3.connect(m["path"])
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(version,)]
        assert _tables(conn) - {"sqlite_sequence"} == set(vs.tables)
        for table, spec in vs.tables.items():
            assert [r[1] for r in conn.execute(f"PRAGMA table_info({table})")] == list(
                spec.column_names), table
        assert _objects(conn, "index") == {n for n, _ in vs.indexes}
        assert h.history_layout(conn) == vs.fts_layout
        assert _objects(conn, "trigger") == {n for n, _ in vs.fts.triggers}
        assert verify_fts(conn) == {t: "ok" for t in vs.fts.table_names}
        # Without a version row the structure alone gives this version or an earlier one with
        # the same structure (a data-only step then runs again: steps are idempotent).
        inferred = h.infer_version(conn)
        assert inferred <= version
        assert h._structure(h.schema_at(inferred)) == h._structure(vs)
    finally:
        conn.close()


def test_every_layout_uses_the_upstream_trigger_names():
    """UPSTREAM_API.md §4.2: <table>_insert/_delete/_update in every release, ours included."""
    want = {f"{t}_{s}" for t in ("messages_fts", "messages_fts_trigram")
            for s in ("insert", "delete", "update")}
    assert {n for n, _ in h.FTS_LAYOUTS["external-v23"].triggers} == want
    for name, lay in h.FTS_LAYOUTS.items():
        assert {n for n, _ in lay.triggers} <= want, name


@pytest.mark.parametrize("version", [1, 10, 11])
def test_current_trigger_ddl_adds_nothing_to_a_legacy_store(tmp_path, version):
    m = build_fixture(tmp_path / "state.db", version, sessions=3, messages_per_session=4)
    conn = sqlite3.connect(m["path"], isolation_level=None)
    try:
        before = conn.execute("SELECT name, sql FROM sqlite_master WHERE type='trigger'").fetchall()
        conn.execute("BEGIN")
        ddl = schema.FTS_TRIGGERS_SQL
        if version >= 10:
            ddl += schema.TRIGRAM_TRIGGERS_SQL
        for stmt in schema.split_triggers(ddl):
            conn.execute(stmt)  # CREATE TRIGGER IF NOT EXISTS: the names exist
        assert schema.create_fts(conn) == []  # layout-aware: leaves the inline layout alone
        conn.execute("COMMIT")
        after = conn.execute("SELECT name, sql FROM sqlite_master WHERE type='trigger'").fetchall()
        assert after == before
        sid = m["session_ids"][0]
        conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                     "VALUES (?, 'user', 'uniqueword qqq', 1.0)", (sid,))
        assert len(conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH "
                                "'uniqueword'").fetchall()) == 1
        assert set(verify_fts(conn).values()) == {"ok"}
    finally:
        conn.close()


def test_fixture_is_deterministic(tmp_path):
    a = build_fixture(tmp_path / "a" / "state.db", 13, seed=5)
    b = build_fixture(tmp_path / "b" / "state.db", 13, seed=5)
    c = build_fixture(tmp_path / "c" / "state.db", 13, seed=6)
    def strip(m):
        return {k: v for k, v in m.items() if k not in ("path", "sessions_json")}

    assert strip(a) == strip(b)
    assert strip(a)["rows"] != strip(c)["rows"]
    assert (tmp_path / "a" / "sessions" / "sessions.json").read_bytes() == (
        tmp_path / "b" / "sessions" / "sessions.json").read_bytes()


def test_fixture_manifest_describes_the_content(tmp_path):
    m = build_fixture(tmp_path / "state.db", 3)
    assert m["counts"]["sessions"] == 12 and m["counts"]["messages"] == 96
    titles = [t for t in m["titles"].values() if t]
    assert titles.count("Duplicate title") == 2 and titles.count("Shared name") == 3
    assert m["titles_cleared"] == 3
    roles = set(m["roles"].values())
    assert roles == {"user", "assistant", "tool"}
    assert m["cjk_terms"] and all(len(t) >= 3 for t in m["cjk_terms"].values())
    assert m["tool_terms"]
    assert set(m["subagents"]) == {m["session_ids"][7], m["session_ids"][8]}
    sessions_json = json.loads((tmp_path / "sessions" / "sessions.json").read_text("utf-8"))
    assert "agent:main:broken" in sessions_json
    lineage = {r["id"]: r["parent_session_id"] for r in m["rows"]["sessions"]}
    sids = m["session_ids"]
    assert lineage[sids[3]] == sids[2] and lineage[sids[5]] == sids[3]
    # message_count / tool_call_count agree with the rows written
    counts = {}
    for r in m["rows"]["messages"]:
        counts[r["session_id"]] = counts.get(r["session_id"], 0) + 1
    assert {r["id"]: r["message_count"] for r in m["rows"]["sessions"]} == counts
    with pytest.raises(FileExistsError):
        build_fixture(tmp_path / "state.db", 3)


def test_fixture_versions_add_their_tables(tmp_path):
    m12 = build_fixture(tmp_path / "12" / "state.db", 12)
    assert {r["key"] for r in m12["rows"]["state_meta"]} == {
        "fixture_seed", "last_auto_prune", "gateway_version"}
    m22 = build_fixture(tmp_path / "22" / "state.db", 22)
    tasks = {r["task"] for r in m22["rows"]["session_model_usage"]}
    assert tasks == {"", "compression"}
    m20 = build_fixture(tmp_path / "20" / "state.db", 20)
    assert "task" not in m20["rows"]["session_model_usage"][0]


def test_check_migrated_detects_damage(tmp_path):
    """The gate is not vacuous: each kind of damage is reported."""
    from hermes_state import SessionDB

    m = build_fixture(tmp_path / "state.db", 9, sessions=6, messages_per_session=6)
    SessionDB(m["path"]).close()
    conn = sqlite3.connect(m["path"], isolation_level=None)
    try:
        assert check_migrated(conn, m) == []
        victim = next(iter(m["terms"]))
        conn.execute("DELETE FROM messages WHERE id = ?", (victim,))
        probs = check_migrated(conn, m)
        assert any("lost" in p for p in probs) and any("misses message" in p for p in probs)
    finally:
        conn.close()

    m2 = build_fixture(tmp_path / "b" / "state.db", 9, sessions=6, messages_per_session=6)
    SessionDB(m2["path"]).close()
    conn = sqlite3.connect(m2["path"], isolation_level=None)
    try:
        sid = m2["session_ids"][0]
        conn.execute("UPDATE sessions SET model = 'changed' WHERE id = ?", (sid,))
        # an FTS row the messages table does not have (a stray/double index entry)
        conn.execute("INSERT INTO messages_fts(rowid, content) VALUES (999999, 'stray words')")
        probs = check_migrated(conn, m2)
        assert any(".model = 'changed'" in p for p in probs)
        assert any(p.startswith("messages_fts: index differs") for p in probs)
    finally:
        conn.close()
