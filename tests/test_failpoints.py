"""Failpoints: syntax, real crashes at named points, injected errors, names reached (SPEC §4).

The set of names in ``failpoints.NAMES`` is a contract; every name the write path owns must be
reachable by a realistic flow, or a chaos scenario arming it would silently test nothing.
"""

from __future__ import annotations

import os
import signal
import sqlite3

import pytest

from hermes_state import SessionDB, WriteContentionError, failpoints
from hermes_state.failpoints import Action

# --------------------------------------------------------------------------- parse()


@pytest.mark.parametrize("spec, expected", [
    ("", {}),
    ("  ", {}),
    ("write.before_commit=crash", {"write.before_commit": Action("crash")}),
    ("write.before_commit=crash@3", {"write.before_commit": Action("crash", 3)}),
    ("checkpoint.before=sleep(250)", {"checkpoint.before": Action("sleep", None, 250.0)}),
    ("checkpoint.after=sleep(1.5)@2", {"checkpoint.after": Action("sleep", 2, 1.5)}),
    ("write.after_begin=error(busy)", {"write.after_begin": Action("error", None, 0.0, "busy")}),
    ("write.after_commit=error(ioerr)@4",
     {"write.after_commit": Action("error", 4, 0.0, "ioerr")}),
    ("open.before_connect=off", {"open.before_connect": Action("off")}),
    ("migrate.v20.before_commit=crash", {"migrate.v20.before_commit": Action("crash")}),
    (" write.after_begin = error(locked) , capture.mid_copy=crash ,",
     {"write.after_begin": Action("error", None, 0.0, "locked"),
      "capture.mid_copy": Action("crash")}),
])
def test_parse_accepts_documented_syntax(spec, expected):
    assert failpoints.parse(spec) == expected


@pytest.mark.parametrize("kind", ["ioerr", "busy", "locked", "full", "corrupt"])
def test_parse_accepts_every_error_kind(kind):
    assert failpoints.parse(f"write.before_commit=error({kind})")["write.before_commit"].error == kind


@pytest.mark.parametrize("spec", [
    "write.nope=crash",                 # unknown name
    "migrate.vX.before_commit=crash",   # pattern with a non-number
    "WRITE.BEFORE_COMMIT=crash",        # names are case sensitive
    "write.before_commit=explode",      # unknown action
    "write.before_commit=crash@0",      # hits start at 1
    "write.before_commit=crash@",       # missing N
    "write.before_commit=crash@-1",
    "write.before_commit=error(weird)",  # unknown error kind
    "write.before_commit=error()",
    "write.before_commit=sleep()",
    "write.before_commit=sleep(abc)",
    "write.before_commit",              # no '='
    "write.before_commit=",             # empty action
    "=crash",                           # empty name
])
def test_parse_rejects_bad_specs(spec):
    with pytest.raises(ValueError):
        failpoints.parse(spec)


def test_unknown_name_in_env_raises_at_first_hit(tmp_path, spawn):
    """A typo in the env var fails the process at its first failpoint (the open), loudly."""
    path = tmp_path / "home" / "state.db"
    child = spawn("fp_appender.py", path, "s", 1,
                  env_extra={failpoints.ENV_VAR: "write.befor_commit=crash"})
    assert child.read_all() == []
    assert child.wait() == 1
    err = child.stderr()
    assert "ValueError" in err and "unknown failpoint 'write.befor_commit'" in err
    assert not path.exists()


def test_inert_when_unset_and_hits_count_only_armed_names(armed, tmp_path):
    armed("")
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="cli")
    assert all(failpoints.hits(n) == 0 for n in failpoints.NAMES)
    armed("write.before_commit=off")
    with SessionDB(tmp_path / "state.db") as db:
        db.append_message("s", "user", "a")
        db.append_message("s", "user", "b")
    assert failpoints.hits("write.before_commit") == 2
    assert failpoints.hits("write.after_commit") == 0  # not armed: not counted
    armed("write.before_commit=off")  # reload resets the counters
    assert failpoints.hits("write.before_commit") == 0


# --------------------------------------------------------------------------- crash in a child


@pytest.fixture
def settled_store(tmp_path):
    """A store with session 's' and no messages, closed: a child's open writes nothing, so its
    Nth write is its Nth append."""
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
    return path


def _contents(path):
    with SessionDB(path) as db:
        return ([m["content"] for m in db.get_messages("s")],
                db.get_session("s")["message_count"])


def test_crash_before_commit_on_third_write_loses_only_that_write(settled_store, spawn):
    child = spawn("fp_appender.py", settled_store, "s", 5,
                  env_extra={failpoints.ENV_VAR: "write.before_commit=crash@3"})
    lines = child.read_all()
    assert child.wait() == -signal.SIGKILL
    assert lines == ["ok 1", "ok 2"]
    assert _contents(settled_store) == (["fp-1", "fp-2"], 2)


def test_crash_after_commit_on_third_write_keeps_that_write(settled_store, spawn):
    child = spawn("fp_appender.py", settled_store, "s", 5,
                  env_extra={failpoints.ENV_VAR: "write.after_commit=crash@3"})
    lines = child.read_all()
    assert child.wait() == -signal.SIGKILL
    assert lines == ["ok 1", "ok 2"]  # the caller was never told about the 3rd
    assert _contents(settled_store) == (["fp-1", "fp-2", "fp-3"], 3)


def test_crash_before_connect_creates_nothing(tmp_path, spawn):
    path = tmp_path / "home" / "state.db"
    child = spawn("fp_appender.py", path, "s", 1,
                  env_extra={failpoints.ENV_VAR: "open.before_connect=crash"})
    assert child.read_all() == []
    assert child.wait() == -signal.SIGKILL
    assert not path.exists()
    assert path.parent.is_dir()  # the home is made before the connect


def test_crash_after_schema_leaves_a_complete_store(tmp_path, spawn):
    path = tmp_path / "state.db"
    child = spawn("fp_appender.py", path, "s", 1,
                  env_extra={failpoints.ENV_VAR: "open.after_schema=crash"})
    assert child.read_all() == []
    assert child.wait() == -signal.SIGKILL
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(23,)]
    finally:
        conn.close()
    with SessionDB(path) as db:
        assert db.connection.writes == 0  # the crashed open had committed everything
        db.create_session("s", source="cli")


def test_crash_mid_capture_leaves_partial_dir_and_store_reopens(tmp_path, spawn):
    path = tmp_path / "state.db"
    child = spawn("store_child.py", env_extra={failpoints.ENV_VAR: "capture.mid_copy=crash"})
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    os.unlink(f"{path}-wal")
    os.unlink(f"{path}-shm")
    child.send('{"op": "append", "sid": "s", "n": 1}')
    assert child.read_all() == []
    assert child.wait() == -signal.SIGKILL
    names = sorted(p.name for p in tmp_path.iterdir())
    assert [n for n in names if n.endswith(".partial")], names
    assert not [n for n in names if "retired-wal" in n and not n.endswith(".partial")]
    with SessionDB(path) as db:  # the holder is gone: a new generation may start
        db.create_session("s2", source="cli")


# --------------------------------------------------------------------------- injected errors


@pytest.fixture
def db(tmp_path):
    store = SessionDB(tmp_path / "state.db")
    store.create_session("s", source="cli")
    yield store
    store.close()


def test_injected_busy_after_begin_is_retried(db, armed, event_log):
    armed("write.after_begin=error(busy)@1")
    mid = db.append_message("s", "user", "retried")
    assert failpoints.hits("write.after_begin") == 2
    retries = [e for e in event_log if e["event"] == "retry"]
    assert len(retries) == 1 and retries[0]["attempt"] == 1
    assert 0.020 <= retries[0]["sleep_s"] <= 0.150
    assert "failpoint write.after_begin" in retries[0]["error"]
    assert [m["id"] for m in db.get_messages("s")] == [mid]
    assert db.get_session("s")["message_count"] == 1


def test_injected_locked_inside_the_transaction_is_retried_without_duplicate(db, armed):
    armed("write.before_commit=error(locked)@1")
    db.append_message("s", "user", "once")
    assert [m["content"] for m in db.get_messages("s")] == ["once"]
    assert db.get_session("s")["message_count"] == 1


def test_persistent_busy_gives_up_after_15_attempts(db, armed, event_log):
    armed("write.after_begin=error(busy)")
    with pytest.raises(WriteContentionError) as info:
        db.append_message("s", "user", "never")
    assert info.value.attempts == 15
    assert failpoints.hits("write.after_begin") == 15
    assert [e["attempt"] for e in event_log if e["event"] == "retry"] == list(range(1, 15))
    armed("")
    assert db.get_messages("s") == []
    assert not db.connection.conn.in_transaction


@pytest.mark.parametrize("point", ["write.after_begin", "write.before_commit"])
def test_injected_ioerr_propagates_and_rolls_back(db, armed, event_log, point):
    before = db.connection.writes
    armed(f"{point}=error(ioerr)")
    with pytest.raises(sqlite3.OperationalError) as info:
        db.append_message("s", "user", "lost")
    assert info.value.sqlite_errorcode == 10
    assert failpoints.hits(point) == 1  # not retried
    assert not [e for e in event_log if e["event"] == "retry"]
    assert not db.connection.conn.in_transaction
    armed("")
    assert db.get_messages("s") == []
    assert db.get_session("s")["message_count"] == 0
    assert db.connection.writes == before
    db.append_message("s", "user", "fine")  # the handle is still usable
    assert db.get_session("s")["message_count"] == 1


def test_error_after_commit_reaches_caller_but_row_is_committed(db, armed):
    armed("write.after_commit=error(ioerr)")
    with pytest.raises(sqlite3.OperationalError):
        db.append_message("s", "user", "committed anyway")
    armed("")
    assert [m["content"] for m in db.get_messages("s")] == ["committed anyway"]


def test_sleep_action_only_on_nth_hit_counts(db, armed):
    armed("write.before_commit=sleep(1)@2")
    for i in range(3):
        db.append_message("s", "user", f"m{i}")
    assert failpoints.hits("write.before_commit") == 3
    assert db.get_session("s")["message_count"] == 3


# --------------------------------------------------------------------------- every name reached


def test_every_write_path_failpoint_is_reached_in_a_realistic_flow(tmp_path, spawn):
    # write.lock_wait is reached only while another connection checkpoints: its own test is
    # tests/test_write_waits.py::test_a_short_checkpoint_is_waited_for_keeping_the_write_lock
    # wal_sync.before is reached by the WAL sync thread a second after a commit: its own test is
    # tests/test_wal_sync.py::test_a_commit_at_normal_is_synced_soon_through_sqlites_own_wal_descriptor
    # quarantine.locked: tests/test_bounded_locks.py (a quarantine needs a damaged store)
    names = [n for n in failpoints.NAMES if not n.startswith(("migrate.", "cmd."))
             and n not in ("write.lock_wait", "wal_sync.before", "quarantine.locked")]
    spec = ",".join(f"{n}=off" for n in names)  # 'off' counts hits without acting
    a = tmp_path / "a" / "state.db"
    b = tmp_path / "b" / "state.db"
    child = spawn("store_child.py", env_extra={failpoints.ENV_VAR: spec})
    child.ok("open", path=str(a))                 # open.*, write.* (schema)
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=60)             # cadence checkpoint at the 50th write
    child.ok("close")                             # close.before_checkpoint
    child.ok("open", path=str(b))
    child.ok("create", sid="s")
    os.unlink(f"{b}-wal")
    os.unlink(f"{b}-shm")
    refused = child.call("append", sid="s", n=1)  # retire: capture.mid_copy
    assert refused["error"] == "DeletedWalGenerationError"
    hits = child.ok("hits")["hits"]
    missing = [n for n in names if hits.get(n, 0) == 0]
    assert missing == [], hits
    assert hits["write.after_commit"] == 1 + 1 + 60 + 1 + 1
    # one per fresh store at open (page 1 with the application_id goes to disk, SPEC §10.1),
    # the cadence checkpoint of a, the close of a
    assert hits["checkpoint.before"] == hits["checkpoint.after"] == 4
    assert hits["close.before_checkpoint"] == 1
    assert hits["capture.mid_copy"] == 1
    assert hits["open.before_connect"] == hits["open.after_schema"] == 2
