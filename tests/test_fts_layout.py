"""``optimize_storage``: legacy inline FTS -> v23 external content, resumable (SPEC §8, §2.4)."""

from __future__ import annotations

import math
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hermes_state.schema.fts_layout import (
    HIGH_WATER_KEY,
    PROGRESS_KEY,
    verify_fts,
)

from hermes_state import SessionDB
from hermes_state import testing as h
from hermes_state.fts import switch as fts_switch
from hermes_state.fts.switch import StorageSpaceError, optimize_storage
from hermes_state.schema import fts_layout

REPO = Path(__file__).resolve().parent.parent


def raw(path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


def migrated(tmp_path, version: int, **kw) -> dict:
    m = h.build_fixture(tmp_path / "state.db", version, **kw)
    SessionDB(m["path"]).close()
    return m


def test_fresh_store_has_nothing_to_do(tmp_path):
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "hello")
        writes = db.connection.writes
        assert optimize_storage(db) == {"status": "nothing to do", "layout": "external-v23"}
        assert db.connection.writes == writes  # not even a transaction


@pytest.mark.parametrize("version,layout", [(11, "inline"), (15, "inline"), (22, "inline")])
def test_converts_a_migrated_store_and_loses_nothing(tmp_path, version, layout):
    m = migrated(tmp_path, version)
    seen = []
    with SessionDB(m["path"]) as db:
        assert db._read(fts_layout.status) == {
            "layout": layout, "legacy": True, "pending": None, "stale": False, "plan": "legacy",
            "foreign": [], "problems": []}
        assert db.get_meta("fts_optimize_available") == "1"
        res = optimize_storage(db, chunk=10,
                               progress=lambda done, total: seen.append((done, total)))
        n = len(m["messages"])
        assert res["status"] == "done" and not res["resumed"]
        assert (res["layout_before"], res["layout_after"]) == (layout, "external-v23")
        assert res["rows_indexed"] == n and res["chunks"] == math.ceil(n / 10)
        assert res["high_water"] == max(m["messages"])
        assert seen == [(min(10 * k, n), n) for k in range(1, res["chunks"] + 1)]
        assert db.get_meta(HIGH_WATER_KEY) is None and db.get_meta(PROGRESS_KEY) is None
        assert optimize_storage(db) == {"status": "nothing to do", "layout": "external-v23"}
    conn = raw(m["path"])
    try:
        assert h.check_migrated(conn, m) == []  # every row intact, every word findable
        conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)")
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE name='messages_fts'").fetchone()[0]
        assert "content='messages'" in sql
        assert conn.execute("SELECT count(*) FROM messages_fts_docsize").fetchone()[0] == n
    finally:
        conn.close()
    with SessionDB(m["path"]) as db:  # the converted store is settled
        assert db.connection.writes == 0 and db.connection.migration_report is None


def test_empty_legacy_store_converts_without_markers(tmp_path):
    m = migrated(tmp_path, 11, sessions=2, messages_per_session=1)
    with SessionDB(m["path"]) as db:
        db._write(lambda c: c.execute("DELETE FROM messages"))
        res = optimize_storage(db)
        assert res["rows_indexed"] == 0 and res["chunks"] == 0
        assert res["layout_after"] == "external-v23" and db.get_meta(HIGH_WATER_KEY) is None


_KILL_AT_CHUNK_3 = r"""
import os, signal, sys
from hermes_state import SessionDB
from hermes_state.fts.switch import optimize_storage

calls = []

def progress(done, total):
    calls.append(done)
    print("chunk", len(calls), done, total, flush=True)
    if len(calls) == 3:
        os.kill(os.getpid(), signal.SIGKILL)

db = SessionDB(sys.argv[1])
optimize_storage(db, chunk=5, progress=progress)
print("finished")
"""


def test_crash_mid_rebuild_resumes_and_no_row_is_indexed_twice(tmp_path):
    m = migrated(tmp_path, 11, sessions=6, messages_per_session=8)  # 48 messages
    env = {k: v for k, v in os.environ.items() if k != "HERMES_STATE_FAILPOINTS"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    res = subprocess.run([sys.executable, "-c", _KILL_AT_CHUNK_3, m["path"]], env=env,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == -signal.SIGKILL, res.stderr
    assert "finished" not in res.stdout and res.stdout.count("chunk") == 3
    high = max(m["messages"])

    conn = raw(m["path"])
    try:
        st = fts_layout.status(conn)
        assert st["layout"] == "external-v23" and st["pending"] == (15, high)
        assert verify_fts(conn) == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
        # Writers keep going while the rebuild is pending (old-schema style, raw SQL).
        sid = m["session_ids"][0]
        cur = conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                           "VALUES (?, 'user', 'brandnew 新しい会話記録', 99.0)", (sid,))
        new_id = cur.lastrowid
        assert new_id > high
        ids = sorted(m["messages"])
        pending_upd, pending_del, done_upd, done_del = ids[30], ids[31], ids[3], ids[4]
        conn.execute("UPDATE messages SET content = 'pendingedit' WHERE id = ?", (pending_upd,))
        conn.execute("DELETE FROM messages WHERE id = ?", (pending_del,))
        conn.execute("UPDATE messages SET content = 'doneedit' WHERE id = ?", (done_upd,))
        conn.execute("DELETE FROM messages WHERE id = ?", (done_del,))
        assert verify_fts(conn) == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
    finally:
        conn.close()

    with SessionDB(m["path"]) as db:
        out = optimize_storage(db, chunk=5)
        assert out["resumed"] and out["layout_before"] == "external-v23"
        remaining = [i for i in ids if 15 < i <= high and i != pending_del]
        assert out["rows_indexed"] == len(remaining)
        assert db.get_meta(HIGH_WATER_KEY) is None and db.get_meta(PROGRESS_KEY) is None
    conn = raw(m["path"])
    try:
        assert verify_fts(conn) == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
        conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)")
        hits = lambda t, q: [r[0] for r in conn.execute(  # noqa: E731
            f"SELECT rowid FROM {t} WHERE {t} MATCH ?", (q,))]
        assert hits("messages_fts", "pendingedit") == [pending_upd]
        assert hits("messages_fts", "doneedit") == [done_upd]
        assert hits("messages_fts", "brandnew") == [new_id]
        assert hits("messages_fts_trigram", "会話記録") == [new_id]
        assert hits("messages_fts", m["terms"].get(pending_del, "zzznomatch")) == []
        n = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        assert conn.execute("SELECT count(*) FROM messages_fts_docsize").fetchone()[0] == n
    finally:
        conn.close()


def test_refuses_when_the_disk_is_short_and_changes_nothing(tmp_path, monkeypatch):
    m = migrated(tmp_path, 11, sessions=3, messages_per_session=4)
    monkeypatch.setattr(fts_switch, "_free_bytes", lambda directory: 1024)
    with SessionDB(m["path"]) as db:
        writes = db.connection.writes
        with pytest.raises(StorageSpaceError, match=r"needs about .* MB free .* nothing was "
                                                    r"changed"):
            optimize_storage(db)
        assert db.connection.writes == writes
        assert db._read(fts_layout.status)["layout"] == "inline"


def test_chunk_must_be_positive(tmp_path):
    with SessionDB(tmp_path / "state.db") as db:
        with pytest.raises(ValueError):
            optimize_storage(db, chunk=0)


def test_old_schema_writer_after_conversion(tmp_path):
    m = migrated(tmp_path, 1, sessions=4, messages_per_session=4)
    with SessionDB(m["path"]) as db:
        optimize_storage(db)
    conn = raw(m["path"])
    try:
        # A v1 binary's DDL is a no-op on the v23 names; its rows are indexed by the v23 triggers.
        conn.execute(h.FTS_LAYOUTS["external-v1"].tables[0][1])
        for _name, sql in h.FTS_LAYOUTS["external-v1"].triggers:
            conn.execute(sql)
        sid = m["session_ids"][0]
        cur = conn.execute(
            "INSERT INTO messages(session_id, role, content, tool_call_id, tool_calls, tool_name, "
            "timestamp, token_count) VALUES (?, 'user', 'legacy insert 旧形式の書き込み', NULL, "
            "NULL, NULL, 1.0, 1)", (sid,))
        conn.execute("UPDATE messages SET content = 'legacy update' WHERE id = ?",
                     (min(m["messages"]),))
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES('integrity-check')")
        conn.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)")
        assert verify_fts(conn) == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
        assert [r[0] for r in conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts "
                                           "MATCH 'legacy insert'")] == [cur.lastrowid]
    finally:
        conn.close()


@pytest.mark.parametrize("version", [11, 23])
def test_switched_off_index_is_settled_at_open_and_rebuilt_by_optimize_storage(tmp_path, version):
    """SPEC §12 switches a corrupt index off (triggers dropped, ``fts_stale``): an open must not
    bring the triggers back (and writes nothing), optimize-storage rebuilds and clears it."""
    m = migrated(tmp_path, version, sessions=4, messages_per_session=4)
    conn = raw(m["path"])
    try:
        for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='trigger'").fetchall():
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute("INSERT INTO state_meta(key, value) VALUES ('fts_stale', 'test')")
        sid = m["session_ids"][0]
        unindexed = conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                                 "VALUES (?, 'user', 'whilestale 停止中の書き込み', 1.0)",
                                 (sid,)).lastrowid
    finally:
        conn.close()
    with SessionDB(m["path"]) as db:
        assert db.connection.writes == 0 and db.connection.migration_report is None
        assert db._read(fts_layout.status)["stale"] is True
        res = optimize_storage(db, chunk=7)
        assert res["status"] == "done" and not res["resumed"]
        assert res["rows_indexed"] == len(m["messages"]) + 1
        assert db.get_meta("fts_stale") is None
    conn = raw(m["path"])
    try:
        assert verify_fts(conn) == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
        assert [r[0] for r in conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts "
                                           "MATCH 'whilestale'")] == [unindexed]
        assert len(conn.execute("SELECT name FROM sqlite_master WHERE type='trigger'")
                   .fetchall()) == 6
    finally:
        conn.close()


def test_a_fresh_stores_layout_is_recognised_without_parsing_and_agrees_with_the_parse(
        tmp_path, monkeypatch):
    """Issue 24 item 2: every open asks assess(); the v23 layout exactly as this code creates it
    is recognised by its sqlite_master fingerprint. If this fails after a schema change, put
    the printed fingerprint into fts_layout.CANONICAL_FINGERPRINTS."""
    import sqlite3 as _sqlite3

    from hermes_state import SessionDB as _SessionDB
    from hermes_state.schema import fts_layout as _fl

    path = tmp_path / "state.db"
    _SessionDB(path).close()
    conn = _sqlite3.connect(path)
    has_cjk = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'messages_fts_cjk'"
                           ).fetchone()
    fp = _fl.layout_fingerprint(conn)
    if not has_cjk:
        assert fp in _fl.CANONICAL_FINGERPRINTS, fp
    monkeypatch.setattr(_fl, "CANONICAL_FINGERPRINTS", frozenset())
    assert _fl.assess(conn) == "ok"  # the full parse says the same
    conn.execute("DROP TRIGGER messages_fts_update")
    assert _fl.layout_fingerprint(conn) != fp
    monkeypatch.undo()
    assert _fl.assess(conn) == "replace"  # not recognised: parsed, as before
    conn.close()
