"""Several real processes on one store: concurrency, jittered retry, contention, cadence (SPEC §4)."""

from __future__ import annotations

import json
import sqlite3
import threading

import pytest

from hermes_state import SessionDB, WriteContentionError
from hermes_state.store.connection import _CHECKPOINT_EVERY_N_WRITES, _WRITE_MAX_RETRIES

HANG_GUARD_S = 90.0


def test_four_processes_append_concurrently_without_loss(tmp_path, spawn):
    path = tmp_path / "state.db"
    SessionDB(path).close()
    n, tags = 150, ["w0", "w1", "w2", "w3"]
    workers = [spawn("append_worker.py", path, "shared", n, tag) for tag in tags]
    for w in workers:
        assert w.readline() == "READY", w.stderr()
    for w in workers:  # release all at once: maximal contention
        w.send("go")
    summaries = []
    for w in workers:
        line = w.readline()
        assert line is not None, w.stderr()
        summaries.append(json.loads(line))
        assert w.wait() == 0
    for s in summaries:
        assert s["errors"] == []
        assert len(s["ids"]) == n
        assert all(0.020 <= x <= 0.150 for x in s["retries"])
    all_ids = [i for s in summaries for i in s["ids"]]
    assert len(set(all_ids)) == 4 * n

    with SessionDB(path) as db:
        msgs = db.get_messages("shared")
        assert sorted(m["id"] for m in msgs) == sorted(all_ids)
        contents = {m["content"] for m in msgs}
        assert contents == {f"{t} payload {i}" for t in tags for i in range(n)}
        session = db.get_session("shared")
        assert session["message_count"] == 4 * n
        assert session["tool_call_count"] == 4 * 2 * ((n + 1) // 2)
        conn = db.connection.conn
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('integrity-check')")
        assert conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH 'payload'"
                            ).fetchone()[0] == 4 * n


def test_concurrent_first_open_of_a_new_store(tmp_path, spawn):
    """Four processes create the same brand-new store at once: all succeed, one token."""
    path = tmp_path / "fresh" / "state.db"
    workers = [spawn("append_worker.py", path, f"s{i}", 5, f"t{i}") for i in range(4)]
    for w in workers:
        assert w.readline() == "READY", w.stderr()
        w.send("go")
    for w in workers:
        assert json.loads(w.readline())["errors"] == []
        assert w.wait() == 0
    with SessionDB(path) as db:
        conn = db.connection.conn
        assert conn.execute("SELECT count(*) FROM state_meta WHERE key='db_file_generation'"
                            ).fetchone()[0] == 1
        assert [tuple(r) for r in conn.execute("SELECT version FROM schema_version")] == [(23,)]
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 20


@pytest.fixture
def store_with_session(tmp_path):
    path = tmp_path / "state.db"
    db = SessionDB(path)
    db.create_session("s", source="cli")
    yield path, db
    db.close()


def test_retry_loop_waits_out_a_real_lock_holder(store_with_session, spawn, event_log):
    path, db = store_with_session
    holder = spawn("lock_holder.py", path)
    assert holder.readline() == "LOCKED", holder.stderr()

    retried = threading.Event()

    def watch():  # events arrive from the appending thread
        while not retried.is_set():
            if any(e["event"] == "retry" for e in list(event_log)):
                retried.set()
            else:
                retried.wait(0.01)

    result: dict = {}

    def append():
        try:
            result["id"] = db.append_message("s", "user", "after the lock")
        except BaseException as exc:  # noqa: BLE001 - reported below
            result["exc"] = exc

    writer = threading.Thread(target=append)
    watcher = threading.Thread(target=watch, daemon=True)
    writer.start()
    watcher.start()
    # Release only once the writer has provably been refused at least once (busy timeout ran
    # out and the jittered retry started): the hold outlasts the 1 s busy timeout by design.
    assert retried.wait(HANG_GUARD_S), "no retry event while the write lock was held"
    holder.send("release")
    assert holder.readline() == "RELEASED"
    writer.join(HANG_GUARD_S)
    assert not writer.is_alive()
    assert "exc" not in result, result.get("exc")
    assert [m["content"] for m in db.get_messages("s")] == ["after the lock"]
    assert db.get_session("s")["message_count"] == 1

    retries = [e for e in event_log if e["event"] == "retry"]
    assert retries
    for i, e in enumerate(retries, start=1):
        assert e["attempt"] == i
        assert 0.020 <= e["sleep_s"] <= 0.150
        assert "locked" in e["error"] or "busy" in e["error"]
    writes = [e for e in event_log if e["event"] == "write"]
    assert writes[-1]["attempts"] == len(retries) + 1
    assert holder.wait() == 0


def test_write_gives_up_after_15_attempts_and_names_the_lock_owner(store_with_session, spawn,
                                                                   event_log):
    path, db = store_with_session
    holder = spawn("lock_holder.py", path)  # never told to release; SIGKILLed at teardown
    assert holder.readline() == "LOCKED", holder.stderr()
    with pytest.raises(WriteContentionError) as info:
        db.append_message("s", "user", "never written")
    err = info.value
    assert isinstance(err, sqlite3.OperationalError)
    assert _WRITE_MAX_RETRIES == 15
    assert err.attempts == 15
    assert f"PID {holder.pid}" in str(err)
    assert err.lock_owner is not None and f"PID {holder.pid}" in err.lock_owner
    assert "write lock" in err.lock_owner
    assert holder.pid in [h[0] for h in err.holders]
    retries = [e for e in event_log if e["event"] == "retry"]
    assert [e["attempt"] for e in retries] == list(range(1, 15))
    assert all(0.020 <= e["sleep_s"] <= 0.150 for e in retries)
    gave_up = [e for e in event_log if e["event"] == "write_gave_up"]
    assert len(gave_up) == 1 and gave_up[0]["attempts"] == 15
    # Nothing was written and the handle is usable once the holder is gone.
    holder.kill()
    assert db.get_messages("s") == []
    assert db.get_session("s")["message_count"] == 0
    db.append_message("s", "user", "now it works")
    assert db.get_session("s")["message_count"] == 1


def test_checkpoint_cadence_every_50_writes_and_at_close(tmp_path, event_log):
    path = tmp_path / "state.db"
    SessionDB(path).close()  # settle the store so the reopen itself writes nothing
    assert _CHECKPOINT_EVERY_N_WRITES == 50
    db = SessionDB(path)
    event_log.clear()
    db.create_session("s", source="cli")
    for i in range(119):
        db.append_message("s", "user", f"m{i}")
    assert db.connection.writes == 120
    ckpts = [e for e in event_log if e["event"] == "checkpoint"]
    assert [(e["mode"], e["trigger"], e["seq"]) for e in ckpts] == [
        ("PASSIVE", "cadence", 50), ("PASSIVE", "cadence", 100)]
    for e in ckpts:
        assert "error" not in e
        assert e["busy"] == 0 and e["checkpointed"] == e["log"] > 0
    db.close()
    ckpts = [e for e in event_log if e["event"] == "checkpoint"]
    assert [(e["mode"], e["trigger"], e["seq"]) for e in ckpts] == [
        ("PASSIVE", "cadence", 50), ("PASSIVE", "cadence", 100), ("PASSIVE", "close", 120)]
    assert {e["mode"] for e in ckpts} == {"PASSIVE"}


def test_cadence_counts_only_successful_writes(tmp_path, event_log):
    path = tmp_path / "state.db"
    SessionDB(path).close()
    event_log.clear()
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        for i in range(48):
            db.append_message("s", "user", f"m{i}")
        for _ in range(3):  # failing writes (FK) do not advance the counter
            with pytest.raises(sqlite3.IntegrityError):
                db.append_message("missing", "user", "x")
        assert db.connection.writes == 49
        assert not [e for e in event_log if e["event"] == "checkpoint"]
        db.append_message("s", "user", "fiftieth")
        assert [e["seq"] for e in event_log if e["event"] == "checkpoint"] == [50]
