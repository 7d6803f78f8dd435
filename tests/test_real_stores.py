"""Stores written by real upstream code, and stores built to their shape, keep working (issue 10).

Every test works on copies: ``chaos.matrix.real_stores`` never opens a bundled store in place.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hermes_state.schema.fts_inventory import canonical_trigger, inventory
from hermes_state.schema.fts_layout import verify_fts

from chaos.matrix import real_stores as rs
from hermes_state import NewerSchemaWriteError, SessionDB
from hermes_state import testing as h
from hermes_state.schema import shape as store_shape
from hermes_state.store import migrations
from hermes_state.testing import upstream_shapes

REPO = Path(__file__).resolve().parent.parent
FIXTURES = {s.name.split("/")[-1]: s for s in rs.fixture_stores()}


def raw(path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


def copy(name: str, tmp_path: Path, *statements: str) -> Path:
    """A private copy of a bundled store, with ``statements`` run on it by plain sqlite3."""
    path = rs.copy_store(FIXTURES[name].path, tmp_path / name)
    if statements:
        conn = raw(path)
        for sql in statements:
            conn.execute(sql)
        conn.close()
    return path


def test_the_four_upstream_stores_are_bundled():
    assert sorted(FIXTURES) == ["v11", "v2", "v22", "v31"]
    for store in FIXTURES.values():
        assert store.dump()["schema_version"] == int(store.name.split("/v")[-1])


@pytest.mark.parametrize("name", ["v2", "v11", "v22", "v31"])
def test_upstream_store_opens_keeps_every_value_and_takes_writes(tmp_path, name):
    """The whole list: open, dump values, API reads, search in four scripts, writes, integrity,
    a second open that writes nothing (chaos.matrix.real_stores.check_store)."""
    problems, figures = rs.check_store(FIXTURES[name], tmp_path)
    assert problems == [], problems
    assert figures["messages"] == 14


@pytest.mark.parametrize("step", rs.steps_of(FIXTURES["v2"]) if "v2" in FIXTURES else [])
def test_kill_at_every_migration_step_of_the_v2_store(tmp_path, step):
    problems, figures = rs.crash_problems(FIXTURES["v2"], step, tmp_path)
    assert problems == [] and figures["crashed_at"] == f"v{step}", problems


@pytest.mark.parametrize("name,step", [(n, s) for n in ("v11", "v22") if n in FIXTURES
                                       for s in rs.steps_of(FIXTURES[n])])
def test_kill_at_every_migration_step_of_the_v11_and_v22_stores(tmp_path, name, step):
    problems, _figures = rs.crash_problems(FIXTURES[name], step, tmp_path)
    assert problems == [], problems


# ------------------------------------------------------------------ item 1: layouts by structure

def _triggers(conn) -> dict[str, str]:
    return dict(conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"))


def test_v2_external_v1_layout_is_replaced_whole_with_one_trigger_set(tmp_path):
    path = copy("v2", tmp_path)
    with SessionDB(path) as db:
        assert db.connection.migration_report.stats["fts_triggers_replaced"] == 3
        new_id = db.append_message("s_cli", "user", "appendedafterupgrade once")
        assert db.delete_session("s_tg")
    conn = raw(path)
    try:
        inv = inventory(conn)
        assert inv.kind == "external-v23" and inv.foreign == [] and inv.problems == []
        for table in ("messages_fts", "messages_fts_trigram"):
            assert sorted(t.name for t in inv.feeding(table)) == sorted(
                canonical_trigger(table, e) for e in ("insert", "delete", "update"))
        assert conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH "
                            "'appendedafterupgrade'").fetchall() == [(new_id,)]
        assert set(verify_fts(conn).values()) == {"ok"}
        assert conn.execute("SELECT 1 FROM state_meta WHERE key = 'fts_optimize_available'"
                            ).fetchone() is None
    finally:
        conn.close()


@pytest.mark.parametrize("name", ["v11", "v22"])
def test_inline_layout_is_kept_flagged_and_its_triggers_untouched(tmp_path, name):
    path = copy(name, tmp_path)
    conn = raw(path)
    before = _triggers(conn)
    conn.close()
    SessionDB(path).close()
    conn = raw(path)
    try:
        assert _triggers(conn) == before  # upstream's own bodies, byte for byte
        assert inventory(conn).kind == "inline"
        assert conn.execute("SELECT value FROM state_meta WHERE key = 'fts_optimize_available'"
                            ).fetchone() == ("1",)
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(23,)]
    finally:
        conn.close()


def test_foreign_and_duplicate_trigger_sets_are_replaced_by_structure(tmp_path):
    """A second trigger set under names of our own invention feeds the same tables: the open
    recognises it by what it writes into and leaves exactly one set per table."""
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", "cli")
        db.append_message("s", "user", "before the foreign triggers")
    conn = raw(path)
    conn.execute("CREATE TRIGGER zz_feed_fts AFTER INSERT ON messages BEGIN INSERT INTO "
                 "messages_fts(rowid, content) VALUES (new.id, new.content); END")
    conn.execute("CREATE TRIGGER messages_fts_ai AFTER DELETE ON messages BEGIN INSERT INTO "
                 "messages_fts(messages_fts, rowid, content) VALUES ('delete', old.id, "
                 "old.content); END")
    assert len(inventory(conn).foreign) == 2
    conn.close()
    with SessionDB(path) as db:
        assert db.connection.migration_report.stats["fts_triggers_replaced"] >= 2
        mid = db.append_message("s", "user", "indexedexactlyonce")
        assert [h["id"] for h in db.search_messages("indexedexactlyonce")] == [mid]
        assert db.delete_session("s")
    conn = raw(path)
    try:
        inv = inventory(conn)
        assert inv.foreign == [] and inv.problems == []
        assert set(verify_fts(conn).values()) == {"ok"}
    finally:
        conn.close()


def test_a_store_left_by_an_earlier_version_of_this_code_is_repaired_once(tmp_path):
    """Earlier versions of this code named triggers _ai/_ad/_au and, on v2-v10 stores, left
    upstream's triggers beside them (issue 10): every append failed. One open repairs it."""
    path = copy("v2", tmp_path)
    conn = raw(path)
    conn.execute("BEGIN")
    for table in ("messages_fts",):
        conn.execute(f"DROP TABLE {table}")
    conn.execute("CREATE VIRTUAL TABLE messages_fts USING fts5(content, tool_name, tool_calls)")
    conn.execute("INSERT INTO messages_fts(rowid, content, tool_name, tool_calls) "
                 "SELECT id, content, tool_name, tool_calls FROM messages")
    conn.execute("CREATE TRIGGER messages_fts_ai AFTER INSERT ON messages BEGIN INSERT INTO "
                 "messages_fts(rowid, content, tool_name, tool_calls) VALUES (new.id, "
                 "new.content, new.tool_name, new.tool_calls); END")
    conn.execute("UPDATE schema_version SET version = 23")
    conn.execute("COMMIT")
    with pytest.raises(sqlite3.Error):  # the broken state the issue describes
        conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                     "VALUES ('s_cli', 'user', 'x', 1.0)")
    conn.close()
    with SessionDB(path) as db:
        assert db.connection.migration_report is not None
        mid = db.append_message("s_cli", "user", "repairedstore works")
        assert [h["id"] for h in db.search_messages("repairedstore")] == [mid]
        assert db.delete_session("s_tg")
    with SessionDB(path) as db:
        assert db.connection.migration_report is None and db.connection.writes == 0


# ------------------------------------------------------- stores built to every version's shape

GENERATED = [2, 5, 10, 11, 15, 20, 21, 22]


@pytest.mark.parametrize("version", GENERATED)
def test_generated_upstream_shaped_store_works(tmp_path, version):
    m = h.build_fixture(tmp_path / "src" / "state.db", version, sessions=6,
                        messages_per_session=6)
    problems, _ = rs.check_store(rs.RealStore(f"v{version}", Path(m["path"])), tmp_path / "w")
    assert problems == [], problems


@pytest.mark.parametrize("shape", upstream_shapes.SHAPES)
def test_newer_upstream_shape_works(tmp_path, shape):
    path = upstream_shapes.build(tmp_path / "src", shape, sessions=6, messages_per_session=6)
    problems, figures = rs.check_store(rs.RealStore(shape, path), tmp_path / "w")
    assert problems == [], problems
    assert figures["steps"] == 0


def test_v20_usage_rows_with_null_billing_base_url_migrate(tmp_path):
    """Upstream v22 itself fails on these (UPSTREAM_API.md §4.6); the key parts become ''."""
    m = h.build_fixture(tmp_path / "state.db", 20, sessions=6, messages_per_session=4)
    conn = raw(m["path"])
    nulls = conn.execute("SELECT COUNT(*) FROM session_model_usage WHERE billing_base_url IS "
                         "NULL").fetchone()[0]
    conn.close()
    assert nulls > 0
    with SessionDB(m["path"]) as db:
        assert db.connection.migration_report.stats["usage_rebuilt"] == 6
    conn = raw(m["path"])
    try:
        assert h.check_migrated(conn, m) == []
    finally:
        conn.close()
    with SessionDB(m["path"]) as db:
        db.update_token_counts(m["session_ids"][1], 5, 5, model="x")
    conn = raw(m["path"])
    try:
        assert conn.execute("SELECT COUNT(*) FROM session_model_usage WHERE billing_base_url IS "
                            "NULL OR estimated_cost_usd IS NULL").fetchone()[0] == 0
    finally:
        conn.close()


_KILLED_WRITER = """
import os, signal, sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("PRAGMA wal_autocheckpoint=0")
for n in range(int(sys.argv[2])):
    conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                 "VALUES ('s_cli', 'user', ?, 2000000000.0)", (f"killedwriter{n} 東京",))
conn.execute("BEGIN")
conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
             "VALUES ('s_cli', 'user', 'neverscommitted', 2000000001.0)")
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.parametrize("name", ["v22", "v31"])
def test_store_left_by_a_sigkilled_upstream_writer(tmp_path, name):
    """A live WAL (v22) or a hot rollback journal (v31 in DELETE mode) left by kill -9."""
    src = copy(name, tmp_path / "src")
    res = subprocess.run([sys.executable, "-c", _KILLED_WRITER, str(src), "5"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == -signal.SIGKILL, res.stderr
    side = Path(f"{src}-wal") if name == "v22" else Path(f"{src}-journal")
    assert side.exists() and side.stat().st_size > 0
    problems, _ = rs.check_store(rs.RealStore(name, src), tmp_path / "w")
    assert problems == [], problems
    path = rs.copy_store(src, tmp_path / "again")
    with SessionDB(path) as db:
        assert len(db.search_messages("killedwriter3")) == 1
        assert db.search_messages("neverscommitted") == []


# ------------------------------------------------------------- items 2 and 4: newer stores

def test_newer_store_keeps_version_objects_journal_and_application_id(tmp_path):
    path = copy("v31", tmp_path)
    conn = raw(path)
    before = set(conn.execute("SELECT type, name, sql FROM sqlite_master"))
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    conn.close()
    with SessionDB(path) as db:
        assert db.connection.writes == 0  # nothing to do on this store
        db.update_token_counts("s_cli", 10, 20, model="anthropic/claude-opus-4.6")
        db.update_token_counts("s_tg", 1, 1, model="new/model")
        mid = db.append_message("c_tip", "user", "written by v23 into v31 雪")
    conn = raw(path)
    try:
        after = set(conn.execute("SELECT type, name, sql FROM sqlite_master"))
        assert before <= after and after == before  # not one object added, dropped or changed
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(31,)]
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert conn.execute("PRAGMA application_id").fetchone()[0] == app_id
        for index in ("idx_messages_session", "idx_messages_session_id"):  # v31 INDEXED BY
            conn.execute(f"SELECT id FROM messages INDEXED BY {index} WHERE session_id = 'x'")
        assert conn.execute("SELECT message_uid IS NOT NULL, display_order FROM messages "
                            "WHERE id = ?", (mid,)).fetchone() == (1, mid)
        assert conn.execute("SELECT COUNT(*) FROM session_model_usage WHERE estimated_cost_usd "
                            "IS NULL OR actual_cost_usd IS NULL").fetchone()[0] == 0
    finally:
        conn.close()


def test_system_prompt_reads_and_writes_through_the_hash_on_newer_stores(tmp_path):
    path = copy("v31", tmp_path)
    with SessionDB(path) as db:
        assert db.get_session("s_cli")["system_prompt"] == "You are Hermes. 你好"
        assert db.get_session_by_title("Kubernetes rollback 🚀")["system_prompt"] == \
            "You are Hermes. 你好"
        db.create_session("p1", "cli", system_prompt="Brand new prompt 新")
        db.create_session("p2", "cli", system_prompt="You are Hermes. 你好")  # shared row
        assert db.get_session("p1")["system_prompt"] == "Brand new prompt 新"
        assert [s["system_prompt"] for s in db.list_sessions(limit=50) if s["id"] == "p2"] == [
            "You are Hermes. 你好"]
    conn = raw(path)
    try:
        rows = dict(conn.execute("SELECT s.id, p.prompt FROM sessions s JOIN system_prompts p "
                                 "ON p.hash = s.system_prompt_hash WHERE s.id IN ('p1', 'p2')"))
        assert rows == {"p1": "Brand new prompt 新", "p2": "You are Hermes. 你好"}
        assert conn.execute("SELECT COUNT(*) FROM sessions WHERE id IN ('p1', 'p2') AND "
                            "system_prompt IS NOT NULL").fetchone()[0] == 0
        assert conn.execute("SELECT COUNT(*) FROM system_prompts").fetchone()[0] == 2
        conn.execute("PRAGMA foreign_keys = ON")
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()


def test_a_write_a_newer_schema_refuses_raises_a_named_error(tmp_path):
    path = upstream_shapes.build(tmp_path, "v25-fresh", sessions=3, messages_per_session=2)
    conn = raw(path)
    conn.execute("PRAGMA writable_schema = ON")
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'sessions'").fetchone()[0]
    conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'sessions'",
                 (sql.replace("last_read_at REAL", "last_read_at REAL,\n    region TEXT NOT NULL"),))
    conn.execute("PRAGMA writable_schema = OFF")
    conn.execute("UPDATE schema_version SET version = 40")
    conn.close()
    with SessionDB(path) as db:
        with pytest.raises(NewerSchemaWriteError) as err:
            db.create_session("x", "cli")
        assert err.value.schema_version == 40 and err.value.operation == "create_session"
        assert "schema version 40" in str(err.value) and "Nothing was written" in str(err.value)
        assert db.get_session("x") is None
        db.append_message("s00000", "user", "other writes still work")


def test_unloadable_cjk_triggers_are_dropped_and_marked(tmp_path):
    path = upstream_shapes.build(tmp_path, "v25-cjk", sessions=3, messages_per_session=2)
    conn = raw(path)
    with pytest.raises(sqlite3.OperationalError):
        conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                     "VALUES ('s00000', 'user', 'x', 1.0)")
    conn.close()
    with SessionDB(path) as db:
        assert db.connection.migration_report.stats["cjk_triggers_dropped"] == 3
        mid = db.append_message("s00000", "user", "after the drop 漢字テスト")
        assert mid in {h["id"] for h in db.search_messages("漢字テスト")}
        assert db.get_meta("fts_cjk_stale") == "1"
    with SessionDB(path) as db:
        assert db.connection.writes == 0


# ------------------------------------------------------------------- issue 17: D10, D11

def _v15_store(tmp_path) -> Path:
    m = h.build_fixture(tmp_path / "state.db", 15, sessions=2, messages_per_session=4)
    conn = raw(m["path"])
    rows = [  # id, parent, end_reason, started_at, ended_at, model_config, title
        ("live", None, None, 100.0, None, None, "Live"),
        ("delegate", "live", None, 110.0, None, None, None),
        ("cfgless", "live", None, 111.0, None, '{"a": 1}', None),
        ("notjson", "live", None, 112.0, None, "not json {", None),
        ("compressed", None, "compression", 120.0, 130.0, None, "C"),
        ("continuation", "compressed", None, 131.0, None, None, None),
        ("branchpoint", None, "branched", 140.0, 150.0, None, "B"),
        ("branch_late", "branchpoint", None, 151.0, None, None, None),
        ("branch_early", "branchpoint", None, 145.0, None, None, None),
        ("marked_branch", "live", None, 160.0, None, '{"_branched_from": "live"}', None),
        ("orphan", None, None, 170.0, None, None, None),
        ("titled_orphan", None, None, 171.0, None, None, "Has title"),
        ("no_tool", None, None, 172.0, None, None, None),
    ]
    for sid, parent, reason, started, ended, cfg, title in rows:
        conn.execute("INSERT INTO sessions(id, source, parent_session_id, end_reason, "
                     "started_at, ended_at, model_config, title, message_count) VALUES "
                     "(?, 'cli', ?, ?, ?, ?, ?, ?, 1)",
                     (sid, parent, reason, started, ended, cfg, title))
    for sid in ("orphan", "titled_orphan", "live"):
        conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                     "VALUES (?, 'tool', 'out', 1.0)", (sid,))
    conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                 "VALUES ('no_tool', 'user', 'hi', 1.0)")
    conn.close()
    return Path(m["path"])


def test_v16_tags_delegates_as_upstream_does(tmp_path):
    path = _v15_store(tmp_path)
    with SessionDB(path) as db:
        stats = db.connection.migration_report.stats
        tags = {s: (json.loads(db._read(lambda c, s=s: c.execute(
            "SELECT model_config FROM sessions WHERE id = ?", (s,)).fetchone()[0]) or "{}")
            if db._read(lambda c, s=s: json_valid(c, s)) else "raw")
            for s in ("delegate", "cfgless", "notjson", "continuation", "branch_late",
                      "branch_early", "marked_branch", "orphan", "titled_orphan", "no_tool",
                      "live")}
    assert tags["delegate"] == {"_delegate_from": "live"}
    assert tags["cfgless"] == {"a": 1, "_delegate_from": "live"}
    assert tags["notjson"] == "raw"  # never rewritten (upstream would abort the open)
    assert tags["continuation"] == {}  # compression child
    assert tags["branch_late"] == {}  # parent ended 'branched' before the child started
    assert tags["branch_early"] == {"_delegate_from": "branchpoint"}
    assert tags["marked_branch"] == {"_branched_from": "live"}
    assert tags["orphan"] == {"_delegate_from": "__orphaned__"}
    assert tags["titled_orphan"] == {} and tags["no_tool"] == {} and tags["live"] == {}
    assert stats["subagents_untaggable"] == 1


def json_valid(conn, sid) -> bool:
    cfg = conn.execute("SELECT model_config FROM sessions WHERE id = ?", (sid,)).fetchone()[0]
    return cfg is None or bool(conn.execute("SELECT json_valid(?)", (cfg,)).fetchone()[0])


def test_v16_step_is_idempotent(tmp_path):
    path = _v15_store(tmp_path)
    SessionDB(path).close()
    conn = raw(path)
    try:
        before = conn.execute("SELECT id, model_config FROM sessions ORDER BY id").fetchall()
        stats = migrations.run_step(conn, path, 16)
        assert stats["subagents_tagged"] == 0 and stats["orphans_tagged"] == 0
        assert conn.execute("SELECT id, model_config FROM sessions ORDER BY id").fetchall() == \
            before
    finally:
        conn.close()


@pytest.mark.parametrize("version", [11, 23])
def test_null_active_is_healed_on_open_and_written_as_1(tmp_path, version):
    """D11: a legacy ``active`` column added without NOT NULL/DEFAULT; NULL rows become 1."""
    m = h.build_fixture(tmp_path / "state.db", version, sessions=2, messages_per_session=4)
    conn = raw(m["path"])
    conn.execute("BEGIN")
    if version >= 12:
        conn.execute("ALTER TABLE messages RENAME COLUMN active TO active_old")
    conn.execute("ALTER TABLE messages ADD COLUMN active INTEGER")
    conn.execute("UPDATE messages SET active = CASE WHEN id % 2 THEN NULL ELSE 1 END")
    conn.execute("COMMIT")
    conn.close()
    with SessionDB(m["path"]) as db:
        assert db.connection.migration_report.stats["active_healed"] == 4
        mid = db.append_message(m["session_ids"][0], "user", "new row")
        assert db._read(lambda c: c.execute("SELECT active FROM messages WHERE id = ?",
                                            (mid,)).fetchone()[0]) == 1
    conn = raw(m["path"])
    try:
        assert conn.execute("SELECT COUNT(*) FROM messages WHERE active IS NULL").fetchone()[0] == 0
        assert store_shape.pending_work(conn) == []
    finally:
        conn.close()
    with SessionDB(m["path"]) as db:
        assert db.connection.writes == 0


def test_pending_work_names_what_an_open_would_do(tmp_path):
    path = copy("v2", tmp_path)
    conn = raw(path)
    try:
        assert store_shape.pending_work(conn) == ["migrate schema 2 -> 23"]
    finally:
        conn.close()
    SessionDB(path).close()
    conn = raw(path)
    try:
        assert store_shape.pending_work(conn) == []
        conn.execute("DROP TRIGGER messages_fts_update")
        assert store_shape.pending_work(conn) == ["FTS layout: replace (external-v23)"]
    finally:
        conn.close()


def test_no_bundled_store_was_opened_in_place():
    for store in FIXTURES.values():
        for suffix in ("-wal", "-shm", "-journal"):
            assert not os.path.exists(f"{store.path}{suffix}"), f"{store.path}{suffix}"


def test_search_reaches_sessions_a_v31_trigram_index_leaves_out(tmp_path):
    """v31's trigram view skips cron and sub-agent sessions: substring search scans them."""
    path = copy("v31", tmp_path)
    with SessionDB(path) as db:
        db.create_session("cron1", "cron")
        mid = db.append_message("cron1", "user", "定期実行の記録です")
        assert mid in {h["id"] for h in db.search_messages("定期実行")}
        assert {h["session_id"] for h in db.search_messages("記忆断裂")} <= {"s_cli", "s_tg",
                                                                          "c_root", "c_mid",
                                                                          "c_tip"}


# ------------------------------------------------------------------ item 8: doctor --json

def test_doctor_json_reports_version_layout_foreign_objects_and_the_upgrade(tmp_path, capsys):
    from hermes_state.cli import main

    path = copy("v2", tmp_path,
                "CREATE TRIGGER my_own_fts_feed AFTER INSERT ON messages BEGIN INSERT INTO "
                "messages_fts(rowid, content) VALUES (new.id, new.content); END",
                "CREATE INDEX my_sources ON sessions(source)")
    code = main(["--home", str(path.parent), "doctor", "--json"])
    out = json.loads(capsys.readouterr().out)
    stats = out["stats"]
    assert stats["schema_version"] == 2 and stats["fts_layout"] == "external-v1"
    assert stats["foreign_triggers"] == ["my_own_fts_feed"]
    assert stats["foreign_indexes"] == ["my_sources"]
    assert stats["store"]["duplicate_indexes"] == {"my_sources": "idx_sessions_source"}
    assert stats["upgrade"] == ["migrate schema 2 -> 23"]
    assert stats["store"]["fts_plan"] == "replace" and code in (0, 1)
    with SessionDB(path) as db:  # the upgrade does what doctor announced
        assert db.connection.migration_report.stats["fts_triggers_replaced"] == 4
    conn = raw(path)
    try:
        inv = inventory(conn)
        assert inv.foreign == [] and "my_own_fts_feed" not in _triggers(conn)
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "my_sources" in names  # a user's own index stays
    finally:
        conn.close()
    main(["--home", str(path.parent), "doctor", "--json"])
    after = json.loads(capsys.readouterr().out)["stats"]
    assert after["upgrade"] == [] and after["fts_layout"] == "external-v23"


def test_an_index_a_store_has_under_another_name_is_not_created_twice(tmp_path):
    path = copy("v22", tmp_path, "CREATE INDEX msgs_by_session_and_id ON messages(session_id, id)")
    with SessionDB(path) as db:
        assert db.connection.migration_report.to_version == 23
    conn = raw(path)
    try:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "msgs_by_session_and_id" in names and "idx_messages_session_id" not in names
    finally:
        conn.close()
    with SessionDB(path) as db:
        assert db.connection.writes == 0


# ------------------------------------------------------------- item 7: matrix and gate

def _matrix(*args, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chaos.matrix", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def test_matrix_runs_every_mode_over_the_bundled_real_stores():
    proc = _matrix("--no-generated", "--quick", "--jsonl")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    names = {r["name"] for r in rows}
    for v in ("v2", "v11", "v22", "v31"):
        assert {f"real.upstream.{v}/plain", f"real.upstream.{v}/writer"} <= names
    assert {"real.upstream.v2/crash@v3", "real.upstream.v2/crash@v11",
            "real.upstream.v11/crash@v12", "real.upstream.v22/crash@v23"} <= names
    assert {r["status"] for r in rows} == {"PASS"}
    assert not any(n.startswith("v") for n in names)  # --no-generated


def test_matrix_checks_a_directory_of_user_stores_and_fails_a_broken_promise(tmp_path):
    """``--stores DIR``: each store in every mode, on copies; a dump.json is the ground truth,
    so a store that does not hold what its dump says fails (the check can fail)."""
    mine = tmp_path / "mine"
    rs.copy_store(FIXTURES["v22"].path, mine / "laptop")
    (mine / "laptop" / "dump.json").write_text(FIXTURES["v22"].dump_path.read_text("utf-8"))
    h.build_fixture(mine / "server" / "state.db", 15, sessions=3, messages_per_session=4,
                    write_sessions_json=False)
    bad = json.loads(FIXTURES["v11"].dump_path.read_text("utf-8"))
    bad["tables"]["sessions"]["rows"][0]["title"] = "a title the store never had"
    rs.copy_store(FIXTURES["v11"].path, mine / "broken")
    (mine / "broken" / "dump.json").write_text(json.dumps(bad))
    before = {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()}
    proc = _matrix("--no-generated", "--no-real", "--stores", mine, "--modes", "plain,crash",
                   "--quick", "--jsonl")
    rows = {r["name"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert proc.returncode == 1
    assert rows["real.stores.mine.laptop/plain"]["status"] == "PASS"
    assert rows["real.stores.mine.laptop/crash@v23"]["status"] == "PASS"
    assert rows["real.stores.mine.server/plain"]["status"] == "PASS"
    assert rows["real.stores.mine.server/crash@v16"]["status"] == "PASS"
    broken = rows["real.stores.mine.broken/plain"]
    assert broken["status"] == "FAIL" and any("a title the store never had" in p
                                              for p in broken["problems"])
    assert {p: p.read_bytes() for p in mine.rglob("*") if p.is_file()} == before  # copies only
    missing = _matrix("--no-generated", "--stores", tmp_path / "nowhere", timeout=60)
    assert missing.returncode == 2 and "no such store directory" in missing.stderr


def test_gate_runs_the_real_stores_and_a_user_directory(tmp_path):
    mine = tmp_path / "mine"
    rs.copy_store(FIXTURES["v22"].path, mine / "desk")
    proc = subprocess.run([sys.executable, "-m", "chaos", "gate", "--no-scenarios",
                           "--no-generated", "--stores", mine, "--modes", "plain", "--jobs", "2",
                           "--out", tmp_path / "out"], cwd=REPO, capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "real stores plain (5 cells, 5 stores)" in proc.stdout
    bad = subprocess.run([sys.executable, "-m", "chaos", "gate", "--no-scenarios",
                          "--stores", tmp_path / "nowhere"], cwd=REPO, capture_output=True,
                         text=True, timeout=120)
    assert bad.returncode == 2 and "no such store directory" in bad.stderr


def test_rebuilding_a_switched_off_legacy_index_indexes_what_was_written_meanwhile(tmp_path):
    """SPEC §12 on a store that kept upstream's inline layout: rows written while the index was
    off are found after ``rebuild_fts`` (the layout becomes v23, built from messages)."""
    path = copy("v22", tmp_path)
    SessionDB(path).close()
    conn = raw(path)
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'").fetchall():
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("INSERT INTO state_meta(key, value) VALUES ('fts_stale', 'test')")
    conn.close()
    with SessionDB(path) as db:
        mid = db.append_message("s_cli", "user", "writtenwhilestale 停止中")
        assert db.rebuild_fts() == 2
        assert mid in {h["id"] for h in db.search_messages("writtenwhilestale")}
        assert mid in {h["id"] for h in db.search_messages("停止中")}
        assert db.get_meta("fts_stale") is None
    conn = raw(path)
    try:
        assert inventory(conn).kind == "external-v23" and inventory(conn).problems == []
        assert set(verify_fts(conn).values()) == {"ok"}
    finally:
        conn.close()


@pytest.mark.parametrize("name,release", [("v2", 25), ("v2", 31), ("v22", 31)])
def test_a_store_this_code_migrated_takes_a_newer_upstream_upgrade(tmp_path, name, release):
    """Item 5: what we leave is a v23 store a newer release upgrades as its own (the facts'
    v25/v31 open applied to it), and this code then reads and writes it as a newer store."""
    path = copy(name, tmp_path / "a")
    SessionDB(path).close()
    upstream_shapes.upgrade_in_place(path, release)
    conn = raw(path)
    try:
        inv = inventory(conn)
        assert inv.problems == [] and inv.foreign == []  # one trigger set, upstream's names
        assert set(verify_fts(conn).values()) == {"ok"}
        conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                     "VALUES ('s_cli', 'user', 'upstreamwrote this', 3.0)")
        assert len(conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH "
                                "'upstreamwrote'").fetchall()) == 1
    finally:
        conn.close()
    problems, _ = rs.check_store(rs.RealStore(f"{name}-then-{release}", path), tmp_path / "w")
    assert problems == [], problems


def test_an_early_gateway_routing_keyed_on_session_key_alone_is_rekeyed(tmp_path):
    path = copy("v11", tmp_path,
                "CREATE TABLE gateway_routing (session_key TEXT PRIMARY KEY, entry_json TEXT "
                "NOT NULL, updated_at REAL NOT NULL)",
                "INSERT INTO gateway_routing VALUES ('k1', '{\"a\": 1}', 5.0)")
    with SessionDB(path) as db:
        assert db.connection.migration_report.stats["routing_rekeyed"] == 1
        db.save_gateway_routing_entry("k1", '{"a": 2}', scope="agent:main")
        db.save_gateway_routing_entry("k1", '{"a": 3}')
        assert db.load_gateway_routing_entries() == {"k1": '{"a": 3}'}
        assert db.load_gateway_routing_entries(scope="agent:main") == {"k1": '{"a": 2}'}
    with SessionDB(path) as db:
        assert db.connection.writes == 0
