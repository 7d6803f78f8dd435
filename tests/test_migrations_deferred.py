"""Big legacy stores defer the v10/v11 FTS re-index to a background back-fill (SPEC §2.4, §3).

``migrations.DEFER_FTS_ROWS`` is lowered so small fixtures take the big-store path: the
migrating open switches to the v23 layout with rebuild markers instead of re-indexing, a
background thread back-fills and frees the renamed legacy tables, search finds every message
meanwhile, and crashes (inside a step, or in the middle of the back-fill) lose nothing.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hermes_state.schema.fts_layout import rebuild_markers, verify_fts

from hermes_state import SessionDB
from hermes_state import testing as h
from hermes_state.fts import backfill as fts_backfill
from hermes_state.store import migrations
from hermes_state.store.connection import StoreConnection

REPO = Path(__file__).resolve().parent.parent


def _raw(path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


def _names(conn) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}


def _wait_backfill(db: SessionDB) -> None:
    thread = db.connection._backfill
    assert thread is not None
    thread.join(60)
    assert thread.finished and thread.error is None


def _assert_complete(path, m) -> None:
    conn = _raw(path)
    try:
        assert h.live_fts_layout(conn) == "external-v23"
        assert rebuild_markers(conn) is None
        assert not {n for n in _names(conn) if n.startswith(fts_backfill.RETIRED_PREFIX)}
        assert conn.execute("SELECT 1 FROM state_meta WHERE key = ?",
                            (fts_backfill.AUTO_KEY,)).fetchone() is None
        assert h.check_migrated(conn, m) == []
    finally:
        conn.close()


@pytest.fixture
def defer_all(monkeypatch):
    monkeypatch.setattr(migrations, "DEFER_FTS_ROWS", 0)
    monkeypatch.setattr(fts_backfill, "CHUNK", 7)


@pytest.mark.parametrize("start", [1, 9, 10])
def test_open_defers_then_background_backfill_completes(tmp_path, defer_all, start):
    m = h.build_fixture(tmp_path / "state.db", start, sessions=6, messages_per_session=8)
    with SessionDB(m["path"]) as db:
        rep = db.connection.migration_report
        assert rep.to_version == 23 and rep.stats["fts_deferred"] == len(m["messages"])
        _wait_backfill(db)
        assert db.connection._backfill.rows == len(m["messages"])
    _assert_complete(m["path"], m)
    with SessionDB(m["path"]) as db:  # settled: no thread any more
        assert db.connection._backfill is None


def test_small_store_is_reindexed_inside_the_open(tmp_path, monkeypatch):
    monkeypatch.setattr(migrations, "DEFER_FTS_ROWS", 10_000)
    m = h.build_fixture(tmp_path / "state.db", 1, sessions=6, messages_per_session=8)
    with SessionDB(m["path"]) as db:
        stats = db.connection.migration_report.stats
        assert "fts_deferred" not in stats and stats["fts_reindexed"] == len(m["messages"])
        assert db.connection._backfill is None
        assert db._read(h.live_fts_layout) == "external-v23"
        assert db._read(rebuild_markers) is None


def test_every_message_is_findable_while_the_backfill_is_pending(tmp_path, defer_all,
                                                                 monkeypatch):
    m = h.build_fixture(tmp_path / "state.db", 1, sessions=4, messages_per_session=6)
    monkeypatch.setattr(StoreConnection, "start_backfill", lambda self: None)
    with SessionDB(m["path"]) as db:
        assert db._read(rebuild_markers) == (0, max(m["messages"]))
        assert db._read(verify_fts) == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
        new_id = db.append_message(m["session_ids"][0], "user", "zyxwvu freshly appended")
        for mid, content in m["messages"].items():
            word = next((w for w in (content or "").split() if w.isascii() and w.isalpha()
                         and len(w) > 3), None)
            if word:
                ids = {hit["id"] for hit in db.search_messages(word, limit=1000)}
                assert mid in ids, (mid, word)
        assert [hit["id"] for hit in db.search_messages("zyxwvu")] == [new_id]
    monkeypatch.undo()
    monkeypatch.setattr(fts_backfill, "CHUNK", 5)
    with SessionDB(m["path"]) as db:  # the next writable open resumes it
        _wait_backfill(db)
    conn = _raw(m["path"])
    try:
        assert conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'zyxwvu'"
                            ).fetchall() == [(new_id,)]
        assert verify_fts(conn) == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
    finally:
        conn.close()


_CHILD = """
import os, signal, sys, time
from hermes_state import SessionDB
from hermes_state.fts import backfill as fts_backfill
from hermes_state.store import migrations
from hermes_state.schema.fts_layout import rebuild_markers
migrations.DEFER_FTS_ROWS = 0
fts_backfill.CHUNK = 3
fts_backfill.PAUSE_S = 0.05
db = SessionDB(sys.argv[1])
if sys.argv[2] == "mid-backfill":
    while (db._read(rebuild_markers) or (0, 0))[0] < 9:
        time.sleep(0.005)
    os.kill(os.getpid(), signal.SIGKILL)
print("survived")
"""


def _child(path, mode: str, failpoints: str = "") -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HERMES_STATE_FAILPOINTS"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if failpoints:
        env["HERMES_STATE_FAILPOINTS"] = failpoints
    return subprocess.run([sys.executable, "-c", _CHILD, str(path), mode], env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("step", [10, 11, 12, 23])
def test_crash_at_a_step_of_a_deferring_migration(tmp_path, defer_all, step):
    m = h.build_fixture(tmp_path / "state.db", 1, sessions=5, messages_per_session=6)
    res = _child(m["path"], "open", f"migrate.v{step}.before_commit=crash")
    assert res.returncode == -signal.SIGKILL, res.stderr
    conn = _raw(m["path"])
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(step - 1,)]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert dict(conn.execute("SELECT id, content FROM messages")) == m["messages"]
        if step <= 11:  # the switch rolled back with its step: the legacy index is whole
            assert h.live_fts_layout(conn) == "external-v1" and rebuild_markers(conn) is None
            assert set(verify_fts(conn).values()) == {"ok"}
        else:
            assert h.live_fts_layout(conn) == "external-v23"
            assert set(verify_fts(conn).values()) == {"ok"}
    finally:
        conn.close()
    with SessionDB(m["path"]) as db:
        assert db.connection.migration_report.steps == list(range(step, 24))
        _wait_backfill(db)
    _assert_complete(m["path"], m)


def test_kill_in_the_middle_of_the_backfill_resumes_without_double_indexing(tmp_path,
                                                                            defer_all):
    m = h.build_fixture(tmp_path / "state.db", 1, sessions=6, messages_per_session=8)
    res = _child(m["path"], "mid-backfill")
    assert res.returncode == -signal.SIGKILL, res.stderr
    conn = _raw(m["path"])
    try:
        low, high = rebuild_markers(conn)
        assert 9 <= low < high == max(m["messages"])
        assert verify_fts(conn) == {"messages_fts": "ok", "messages_fts_trigram": "ok"}
    finally:
        conn.close()
    with SessionDB(m["path"]) as db:
        _wait_backfill(db)
    _assert_complete(m["path"], m)
