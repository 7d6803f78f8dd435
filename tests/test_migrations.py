"""Migration of every historical version to 23 at open (SPEC §3, §16.6).

Fixture stores come from :mod:`hermes_state.schema.history` (declared per-version DDL +
deterministic data); :func:`hermes_state.testing.check_migrated` is the comparison of the
schema-bump gate (every old row and column intact, documented data steps applied, search finds
pre-migration content, FTS equal to a from-scratch index).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hermes_state.schema.fts_layout import verify_fts

from hermes_state import SessionDB
from hermes_state import testing as h
from hermes_state.schema import tables as schema
from hermes_state.store import migrations

REPO = Path(__file__).resolve().parent.parent
OLD_VERSIONS = list(range(1, 23))


def child_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "HERMES_STATE_FAILPOINTS"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(extra)
    return env


def raw(path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


def wal_size(path) -> int:
    wal = Path(f"{path}-wal")
    return wal.stat().st_size if wal.exists() else 0


@pytest.mark.parametrize("version", OLD_VERSIONS)
def test_every_version_migrates_to_23_intact_and_a_second_open_writes_nothing(tmp_path, version):
    m = h.build_fixture(tmp_path / "state.db", version)
    db = SessionDB(m["path"])
    try:
        rep = db.connection.migration_report
        assert rep.from_version == version and rep.to_version == 23 and not rep.fresh
        assert rep.steps == list(range(version + 1, 24))
        if version < 4:
            assert rep.stats["titles_cleared"] == m["titles_cleared"]
        # Readable through the API.
        sid = m["session_ids"][1]
        got = {r["id"]: r["content"] for r in db.get_messages(sid, include_inactive=True)}
        assert got == {i: c for i, c in m["messages"].items() if i in got} and len(got) == 8
        assert db.get_session(sid)["id"] == sid
        conv = db.get_messages_as_conversation(sid, include_inactive=True)
        assert [c["role"] for c in conv] == [m["roles"][i] for i in sorted(got)]
    finally:
        db.close()
    conn = raw(m["path"])
    try:
        assert h.check_migrated(conn, m) == []
        # Below 11 the whole external-v1 layout is replaced by the v23 one; from 11 upstream's
        # inline layout is kept (SPEC §3) and flagged for optimize-storage (UPSTREAM_API §4.4).
        want = "inline" if version >= 11 else "external-v23"
        assert h.live_fts_layout(conn) == want
        flagged = conn.execute("SELECT value FROM state_meta WHERE key = "
                               "'fts_optimize_available'").fetchone()
        assert flagged == (("1",) if version >= 11 else None)
        triggers = {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='trigger'")}
        assert triggers == {f"{t}_{s}" for t in ("messages_fts", "messages_fts_trigram")
                            for s in ("insert", "delete", "update")}
        # Second open: settled, no write at all.
        conn.execute("SELECT count(*) FROM sessions").fetchone()
        dv0 = conn.execute("PRAGMA data_version").fetchone()[0]
        bytes0, wal0 = Path(m["path"]).read_bytes(), wal_size(m["path"])
        db = SessionDB(m["path"])
        assert db.connection.migration_report is None and db.connection.writes == 0
        db.close()
        assert conn.execute("PRAGMA data_version").fetchone()[0] == dv0
        assert Path(m["path"]).read_bytes() == bytes0 and wal_size(m["path"]) == wal0
    finally:
        conn.close()


def test_current_version_fixture_needs_no_step(tmp_path):
    m = h.build_fixture(tmp_path / "state.db", 23)
    with SessionDB(m["path"]) as db:
        rep = db.connection.migration_report
        assert rep.steps == [] and rep.from_version == 23 and rep.to_version == 23
    conn = raw(m["path"])
    try:
        assert h.check_migrated(conn, m) == []
        assert h.live_fts_layout(conn) == "external-v23"
    finally:
        conn.close()


def test_fresh_store_is_born_on_v23_external_layout(tmp_path):
    with SessionDB(tmp_path / "state.db") as db:
        rep = db.connection.migration_report
        assert rep.fresh and rep.from_version is None and rep.steps == []
        assert db._read(h.live_fts_layout) == "external-v23"


def test_one_migration_event_per_step(tmp_path, event_log):
    m = h.build_fixture(tmp_path / "state.db", 1, sessions=4, messages_per_session=4)
    SessionDB(m["path"]).close()
    mig = [e for e in event_log if e["event"] == "migration"]
    assert [(e["step"], e["from_version"], e["to_version"]) for e in mig] == [
        (n, n - 1, n) for n in range(2, 24)]
    assert mig[9]["step"] == 11 and mig[9]["fts_reindexed"] == 16
    ops = [e["op"] for e in event_log if e["event"] == "write"]
    assert ops == ["open"] + ["migrate"] * 22 + ["open"]  # one transaction per step


def test_duplicate_titles_newest_keeps_it_and_the_count_is_logged(tmp_path, caplog):
    m = h.build_fixture(tmp_path / "state.db", 3)
    with caplog.at_level(logging.WARNING, logger="hermes_state.store.migrations"):
        db = SessionDB(m["path"])
    try:
        msgs = [r.getMessage() for r in caplog.records
                if "duplicate session title" in r.getMessage()]
        assert msgs == ["cleared 3 duplicate session title(s) (the newest session keeps each "
                        "title) to create the unique title index"]
        sids = m["session_ids"]
        assert db.get_session(sids[6])["title"] == "Duplicate title"  # newer of 4 and 6
        assert db.get_session(sids[4])["title"] is None
        assert db.get_session(sids[11])["title"] == "Shared name"
        assert [db.get_session(sids[i])["title"] for i in (9, 10)] == [None, None]
    finally:
        db.close()


def test_subagent_tagging_rule(tmp_path):
    m = h.build_fixture(tmp_path / "state.db", 15)
    sids = m["session_ids"]
    with SessionDB(m["path"]) as db:
        assert db.connection.migration_report.stats["subagents_tagged"] == 2
        assert json.loads(db.get_session(sids[7])["model_config"])["_delegate_from"] == sids[1]
        assert json.loads(db.get_session(sids[8])["model_config"]) == {"_delegate_from": sids[1]}
        # not JSON: left alone; no parent: never tagged; plain compression child: never tagged
        assert db._read(lambda c: c.execute("SELECT model_config FROM sessions WHERE id = ?",
                                            (sids[9],)).fetchone()[0]) == "not json {"
        for i in (10, 3):
            assert "_delegate_from" not in json.loads(db.get_session(sids[i])["model_config"]
                                                      or "{}")


SESSIONS_JSON_VARIANTS = {
    "missing": None,
    "garbled-bytes": b"\xff\xfe\x00garbage",
    "not-json": b"{ this is not json",
    "wrong-top-type": b'"just a string"',
    "empty-object": b"{}",
    "list-shape": "list",
    "sessions-key-shape": "sessions-key",
}


@pytest.mark.parametrize("variant", list(SESSIONS_JSON_VARIANTS))
def test_v18_backfill_tolerates_every_sessions_json(tmp_path, variant):
    m = h.build_fixture(tmp_path / "state.db", 16, sessions=6, messages_per_session=2,
                        write_sessions_json=False)
    path = h.sessions_json_path(m["path"])
    content = SESSIONS_JSON_VARIANTS[variant]
    entries = [{"session_id": sid, "display_name": meta["display_name"],
                "origin": json.loads(meta["origin_json"]),
                "expiry_finalized": bool(meta["expiry_finalized"])}
               for sid, meta in m["gateway_meta"].items()]
    if content == "list":
        content = json.dumps(entries).encode()
    elif content == "sessions-key":
        content = json.dumps({"sessions": entries, "version": 3}).encode()
    if content is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    with SessionDB(m["path"]) as db:
        assert db.connection.migration_report.to_version == 23
        for sid, meta in m["gateway_meta"].items():
            row = db.get_session(sid)
            if variant in ("list-shape", "sessions-key-shape"):
                assert row["display_name"] == meta["display_name"]
                assert json.loads(row["origin_json"]) == json.loads(meta["origin_json"])
                assert row["expiry_finalized"] == meta["expiry_finalized"]
            else:
                assert row["display_name"] is None and row["origin_json"] is None
                assert row["expiry_finalized"] == 0


def test_v18_fills_nulls_only(tmp_path):
    m = h.build_fixture(tmp_path / "state.db", 17)
    sid1 = m["session_ids"][1]
    with SessionDB(m["path"]) as db:
        row = db.get_session(sid1)
        assert row["display_name"] == "Kept by hand"  # set before v18: never replaced
        assert json.loads(row["origin_json"]) == json.loads(m["gateway_meta"][sid1]["origin_json"])
        assert db.get_session("no-such-session") is None


def test_v18_fills_the_routing_columns_as_upstream_so_the_gateway_finds_its_session(tmp_path):
    """Issue 23.2 (UPSTREAM_API.md §4.1 row 18): besides display_name, origin_json and
    expiry_finalized, v18 fills session_key (the entry's, else its key in the file), chat_id
    and thread_id (from origin) and chat_type, NULLs only; a migrated gateway session is then
    found by its session key instead of the gateway starting a new one for the same chat."""
    m = h.build_fixture(tmp_path / "state.db", 16, write_sessions_json=False)
    tg, dc, dc2 = m["gateway_sessions"]  # telegram live, discord compression-ended, discord live
    data = {
        "agent:main:telegram:dm:42": {  # upstream's shape: the key is the session key
            "session_id": tg, "chat_type": "dm", "display_name": "Alice",
            "origin": {"platform": "telegram", "chat_id": 42, "chat_type": "dm",
                       "user_id": "u1", "thread_id": None}, "memory_flushed": True},
        "agent:main:discord:group:7:t9": {
            "session_id": dc2, "session_key": "agent:main:discord:group:7:t9",
            "chat_type": "group", "origin": {"platform": "discord", "chat_id": "7",
                                              "thread_id": "t9"}},
        "_meta": {"session_id": dc, "session_key": "never-used"},  # upstream skips "_" keys
    }
    path = h.sessions_json_path(m["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    with SessionDB(m["path"]) as db:
        row = db.get_session(tg)
        assert (row["session_key"], row["chat_id"], row["chat_type"], row["thread_id"]) == (
            "agent:main:telegram:dm:42", "42", "dm", None)
        assert row["display_name"] == "Alice" and row["expiry_finalized"] == 1
        assert json.loads(row["origin_json"])["user_id"] == "u1"
        row = db.get_session(dc2)
        assert (row["session_key"], row["chat_id"], row["chat_type"], row["thread_id"]) == (
            "agent:main:discord:group:7:t9", "7", "group", "t9")
        assert db.get_session(dc)["session_key"] is None
        found = db.find_latest_gateway_session_for_peer(
            source="telegram", session_key="agent:main:telegram:dm:42")
        assert found is not None and found["id"] == tg
        assert db.find_session_by_origin(platform="discord", chat_id="7", thread_id="t9") == dc2
        keys = {r["session_key"] for r in db.list_gateway_sessions()}
        assert {"agent:main:telegram:dm:42", "agent:main:discord:group:7:t9"} <= keys


def test_v18_never_replaces_routing_columns_already_set(tmp_path):
    m = h.build_fixture(tmp_path / "state.db", 17, write_sessions_json=False)
    sid = m["gateway_sessions"][0]
    conn = raw(m["path"])
    before = conn.execute("SELECT session_key, chat_id, chat_type, thread_id FROM sessions "
                          "WHERE id = ?", (sid,)).fetchone()
    conn.close()
    assert before[0] is not None
    path = h.sessions_json_path(m["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"other:key": {
        "session_id": sid, "chat_type": "group",
        "origin": {"chat_id": "999", "thread_id": "x"}}}), encoding="utf-8")
    with SessionDB(m["path"]) as db:
        row = db.get_session(sid)
        assert (row["session_key"], row["chat_id"], row["chat_type"]) == tuple(before[:3])
        assert row["thread_id"] == (before[3] if before[3] is not None else "x")


def test_v22_rebuild_keeps_every_usage_row_with_task_in_the_key(tmp_path):
    m = h.build_fixture(tmp_path / "state.db", 21)
    SessionDB(m["path"]).close()
    conn = raw(m["path"])
    try:
        pk = [r[1] for r in sorted((r for r in conn.execute(
            "PRAGMA table_info(session_model_usage)") if r[5]), key=lambda r: r[5])]
        assert pk == ["session_id", "model", "billing_provider", "billing_base_url",
                      "billing_mode", "task"]
        fks = conn.execute("PRAGMA foreign_key_list(session_model_usage)").fetchall()
        assert fks and fks[0][2] == "sessions" and fks[0][6].upper() == "CASCADE"
        assert conn.execute("SELECT count(*) FROM session_model_usage").fetchone()[0] == 12
        assert "session_model_usage__v22" not in {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()


@pytest.mark.parametrize("step", sorted(migrations.STEPS))
def test_every_data_step_is_idempotent(tmp_path, step):
    """Run step N twice on a store at N-1 (after the declarative phase): same result."""
    m = h.build_fixture(tmp_path / "state.db", step - 1, sessions=6, messages_per_session=4)
    conn = raw(m["path"])
    try:
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("BEGIN IMMEDIATE")
        schema.create_tables(conn)
        schema.reconcile_columns(conn)
        migrations.run_step(conn, Path(m["path"]), step)
        conn.execute("COMMIT")
        tables = [t for t in h.schema_at(23).tables]

        def dump():
            return {t: conn.execute(f"SELECT * FROM {t} ORDER BY rowid").fetchall()
                    for t in tables}

        first = dump()
        assert set(verify_fts(conn).values()) <= {"ok"}
        conn.execute("BEGIN IMMEDIATE")
        again = migrations.run_step(conn, Path(m["path"]), step)
        conn.execute("COMMIT")
        assert dump() == first
        assert set(verify_fts(conn).values()) <= {"ok"}
        for key in ("titles_cleared", "subagents_tagged", "gateway_sessions_filled",
                    "usage_seeded", "usage_rebuilt"):
            assert again.get(key, 0) == 0, (key, again)
    finally:
        conn.close()


def test_store_newer_than_the_code_opens_without_downgrade(tmp_path, caplog):
    m = h.build_fixture(tmp_path / "state.db", 12)
    conn = raw(m["path"])
    conn.execute("UPDATE schema_version SET version = 30")
    conn.close()
    with caplog.at_level(logging.WARNING, logger="hermes_state.store.migrations"):
        db = SessionDB(m["path"])
        rep = db.connection.migration_report
        assert rep.newer and rep.steps == [] and rep.from_version == 30
        assert "sessions.display_name" in rep.added_columns
        db.append_message(m["session_ids"][0], "user", "written by the older code")
        db.close()
        db = SessionDB(m["path"])  # settled now: no write, no second warning
        assert db.connection.writes == 0 and db.connection.migration_report is None
        db.close()
    warnings = [r for r in caplog.records if "newer than this code" in r.getMessage()]
    assert len(warnings) == 1
    conn = raw(m["path"])
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(30,)]
        for table, cols in schema.declared_columns().items():
            live = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
            assert {c for c, _ in cols} <= live, table
        # Its own FTS and titles are left as found: no title index, layout untouched.
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "idx_sessions_title_unique" in names  # it had one (v4+)
        assert h.live_fts_layout(conn) == "inline"
        old_ids = {r["id"] for r in m["rows"]["messages"]}
        assert old_ids <= {r[0] for r in conn.execute("SELECT id FROM messages")}
        assert set(verify_fts(conn).values()) == {"ok"}
    finally:
        conn.close()


def test_missing_version_row_is_inferred_from_the_structure(tmp_path, caplog):
    m = h.build_fixture(tmp_path / "state.db", 15)
    conn = raw(m["path"])
    conn.execute("DELETE FROM schema_version")
    conn.close()
    with caplog.at_level(logging.WARNING, logger="hermes_state.store.migrations"):
        db = SessionDB(m["path"])
    rep = db.connection.migration_report
    db.close()
    assert rep.steps == list(range(16, 24))  # v15 == v16 structurally: v16 runs (idempotent)
    assert any("no schema_version row" in r.getMessage() for r in caplog.records)
    conn = raw(m["path"])
    try:
        assert h.check_migrated(conn, m) == []
    finally:
        conn.close()


def test_duplicate_version_rows_collapse_to_the_highest(tmp_path):
    m = h.build_fixture(tmp_path / "state.db", 19, sessions=4, messages_per_session=2)
    conn = raw(m["path"])
    conn.execute("INSERT INTO schema_version VALUES (18)")
    conn.close()
    with SessionDB(m["path"]) as db:
        assert db.connection.migration_report.steps == [20, 21, 22, 23]
    conn = raw(m["path"])
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(23,)]
    finally:
        conn.close()


def _v1_writes(conn: sqlite3.Connection, sid: str) -> list[int]:
    """What a version-1 binary does: its own DDL (no-ops now), then v1-style rows."""
    conn.execute(h.FTS_LAYOUTS["external-v1"].tables[0][1])
    for _name, sql in h.FTS_LAYOUTS["external-v1"].triggers:
        conn.execute(sql)
    conn.execute("INSERT INTO sessions(id, source, started_at) VALUES ('oldcode', 'cli', 5.0)")
    ids = []
    for n in range(5):
        cur = conn.execute(
            "INSERT INTO messages(session_id, role, content, tool_call_id, tool_calls, tool_name, "
            "timestamp, token_count) VALUES (?, ?, ?, NULL, NULL, NULL, ?, 3)",
            (sid if n % 2 else "oldcode", "user", f"oldwriter{n} 旧コード書込{n}番", 10.0 + n))
        ids.append(cur.lastrowid)
    conn.execute("UPDATE messages SET content = 'oldwriter edited' WHERE id = ?", (ids[0],))
    conn.execute("DELETE FROM messages WHERE id = ?", (ids[1],))
    return ids


def test_old_schema_writer_keeps_working_after_migration(tmp_path):
    m = h.build_fixture(tmp_path / "state.db", 1)
    SessionDB(m["path"]).close()
    conn = raw(m["path"])
    try:
        ids = _v1_writes(conn, m["session_ids"][0])
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')")
        conn.execute("INSERT INTO messages_fts_trigram(messages_fts_trigram) "
                     "VALUES('integrity-check')")
        assert verify_fts(conn) == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
        hit = lambda q: [r[0] for r in conn.execute(  # noqa: E731
            "SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?", (q,))]
        assert hit("oldwriter3") == [ids[3]] and hit("edited") == [ids[0]]
        assert hit("oldwriter1") == [] and hit("oldwriter0") == []
        new_rows = conn.execute("SELECT active, compacted, observed FROM messages WHERE id = ?",
                                (ids[2],)).fetchone()
        assert new_rows == (1, 0, 0)  # defaults of the columns the old code does not know
    finally:
        conn.close()
    with SessionDB(m["path"]) as db:  # and the current code still finds the store settled
        assert db.connection.writes == 0
        assert [r["content"] for r in db.get_messages("oldcode")][:1] == ["oldwriter edited"]


_CONCURRENT_CHILD = r"""
import json, sys
from hermes_state import SessionDB
path, tag = sys.argv[1], sys.argv[2]
db = SessionDB(path)
db.create_session(f"child-{tag}", source="cli")
for n in range(5):
    db.append_message(f"child-{tag}", "user", f"concurrent {tag}x{n}")
db.close()
rep = db.connection.migration_report
print("ok", json.dumps(rep.steps if rep else []))
"""

_OLD_WRITER_CHILD = r"""
import sqlite3, sys, time
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("INSERT OR IGNORE INTO sessions(id, source, started_at) VALUES (?, 'cli', 1.0)",
             (sys.argv[2],))
for n in range(30):
    conn.execute("BEGIN IMMEDIATE")
    conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                 "VALUES (?, 'user', ?, ?)", (sys.argv[2], f"legacywriter{n}", 100.0 + n))
    conn.execute("COMMIT")
    time.sleep(0.003)
conn.close()
print("ok")
"""


def test_two_processes_open_the_same_old_store_at_once(tmp_path):
    """Two current-code openers and one old-schema writer on one v1 store, all at once."""
    m = h.build_fixture(tmp_path / "state.db", 1, sessions=12, messages_per_session=20)
    procs = [
        subprocess.Popen([sys.executable, "-c", _CONCURRENT_CHILD, m["path"], "A"],
                         env=child_env(HERMES_STATE_FAILPOINTS=(
                             "write.after_commit=sleep(25),migrate.v11.before_commit=sleep(100)")),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
        subprocess.Popen([sys.executable, "-c", _CONCURRENT_CHILD, m["path"], "B"],
                         env=child_env(HERMES_STATE_FAILPOINTS="write.after_commit=sleep(25)"),
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True),
        subprocess.Popen([sys.executable, "-c", _OLD_WRITER_CHILD, m["path"], "legacy"],
                         env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True),
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err
        assert out.startswith("ok"), (out, err)
    # Each step ran exactly once, in whichever process won its transaction (the sleeps after
    # each commit let the two interleave).
    ran = [json.loads(out.split(" ", 1)[1]) for out, _ in outs[:2]]
    assert sorted(ran[0] + ran[1]) == list(range(2, 24))
    conn = raw(m["path"])
    try:
        assert h.check_migrated(conn, m, extra_messages=True) == []
        contents = [r[0] for r in conn.execute(
            "SELECT content FROM messages WHERE content LIKE 'concurrent %' "
            "OR content LIKE 'legacywriter%'")]
        assert sorted(contents) == sorted(
            [f"concurrent {t}x{n}" for t in "AB" for n in range(5)]
            + [f"legacywriter{n}" for n in range(30)])
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 240 + 40
        for n in range(30):
            assert len(conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?",
                                    (f"legacywriter{n}",)).fetchall()) == 1
    finally:
        conn.close()


def test_settled_detection_is_cheap_and_read_only(tmp_path):
    """settled() on a migrated store answers True without any write (SPEC §3)."""
    m = h.build_fixture(tmp_path / "state.db", 11, sessions=3, messages_per_session=2)
    SessionDB(m["path"]).close()
    with SessionDB(m["path"], read_only=True) as ro:
        from hermes_state.store.opening import settled

        assert settled(ro.connection.conn) == (True, 23)
        assert ro.connection.conn.total_changes == 0


class _FakeStore:
    """Stands in for a StoreConnection: scripted write outcomes and stored versions."""

    def __init__(self, outcomes, versions):
        self.outcomes, self.versions, self.writes = list(outcomes), list(versions), 0
        self.db_path = "fake"

    def read(self, fn):
        return self.versions.pop(0)

    def execute_write(self, fn, *, op, check_generation):
        self.writes += 1
        out = self.outcomes.pop(0)
        if isinstance(out, BaseException):
            raise out
        return out


def test_open_keeps_waiting_only_while_another_process_advances_the_version():
    from hermes_state.errors import WriteContentionError

    busy = WriteContentionError("busy")
    # The version moves between attempts (someone is migrating): keep trying.
    store = _FakeStore([busy, busy, "done"], versions=[3, 5, 7])
    assert migrations._write_patiently(store, lambda c: None, "migrate") == "done"
    assert store.writes == 3
    # The version stands still: the lock is held by something else; give up as the write
    # path does (SPEC §4).
    store = _FakeStore([busy, "never"], versions=[3, 3])
    with pytest.raises(WriteContentionError):
        migrations._write_patiently(store, lambda c: None, "migrate")


@pytest.mark.parametrize("version,seed,sessions,per_session",
                         [(1, 3, 1, 1), (2, 7, 5, 3), (17, 11, 15, 5), (20, 2, 2, 9)])
def test_other_fixture_shapes_migrate_intact(tmp_path, version, seed, sessions, per_session):
    m = h.build_fixture(tmp_path / "state.db", version, seed=seed, sessions=sessions,
                        messages_per_session=per_session)
    SessionDB(m["path"]).close()
    conn = raw(m["path"])
    try:
        assert h.check_migrated(conn, m) == []
    finally:
        conn.close()
