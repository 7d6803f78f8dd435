"""Where a write waits, and what counts as an attempt (issue 18, SPEC §4, issue 12).

A write that meets a checkpoint holding the checkpoint lock right after its BEGIN IMMEDIATE
first waits for it a moment keeping SQLite's write lock (``HOLD_WAIT_S``, longer than a PASSIVE
checkpoint takes; nothing is written yet); past that it rolls back and waits, holding nothing,
up to the 1 s busy timeout, without spending an attempt; only a lock error (SQLITE_BUSY/LOCKED, or the lock held past the busy timeout) costs
one of the 15 attempts and a 20-150 ms jittered sleep. Each retry event names the statement that
met the lock error. Real SQLite, a real ``flock`` held by another open file description; the
moments are ordered with the store's own events and failpoints, never with sleeps.
"""

from __future__ import annotations

import sqlite3
import time

from hermes_state import SessionDB, events
from hermes_state.processes.checkpoint_lock import CheckpointLock
from hermes_state.store.connection import BUSY_TIMEOUT_S, HOLD_WAIT_S


def _store(path):
    with SessionDB(path) as db:
        db.create_session("s", source="cli")


def _append_releasing_on_retry(path, event_log: list, release) -> None:
    """One append; at its first retry event (the writer holds nothing then) ``release()``."""
    done: list[bool] = []

    def on_retry(e: dict) -> None:
        if e["event"] == "retry" and not done:
            done.append(True)
            release()

    events.add_listener(on_retry)
    try:
        with SessionDB(path) as db:
            event_log.clear()
            db.append_message("s", "user", "x")
    finally:
        events.remove_listener(on_retry)


def test_meeting_checkpoints_is_waiting_inside_one_attempt(tmp_path, armed, event_log):
    """20 checkpoints in a row take the lock right after the write's BEGIN: more than the 15
    attempts a write has, yet it commits on its first attempt, with no retry sleep."""
    path = tmp_path / "state.db"
    _store(path)
    other = CheckpointLock(path)  # another open file description: a checkpointer's
    meetings = 20

    def checkpointer(e: dict) -> None:
        if e["event"] == "failpoint" and e["name"] == "write.before_lock" and \
                sum(1 for x in event_log if x["event"] == "checkpoint_wait") < meetings:
            assert other.acquire_exclusive(0)  # a checkpoint starts right after our BEGIN
        elif e["event"] == "checkpoint_wait":
            other.release()  # ... and ends while the writer waits, holding nothing

    events.add_listener(checkpointer)
    armed("write.before_lock=sleep(0)")
    try:
        with SessionDB(path) as db:
            event_log.clear()
            db.append_message("s", "user", "after twenty checkpoints")
            assert [m["content"] for m in db.get_messages("s")] == ["after twenty checkpoints"]
    finally:
        events.remove_listener(checkpointer)
        other.close()
    waits = [e for e in event_log if e["event"] == "checkpoint_wait"]
    assert [e["met"] for e in waits] == list(range(1, meetings + 1))
    assert {e["attempt"] for e in waits} == {1}
    (w,) = [e for e in event_log if e["event"] == "write" and e["op"] == "append_message"]
    assert w["attempts"] == 1 and w["met"] == meetings
    assert not [e for e in event_log if e["event"] in ("retry", "write_gave_up")]


def test_a_short_checkpoint_is_waited_for_keeping_the_write_lock(tmp_path, armed, event_log):
    """The common case under contention (issue 18): a PASSIVE checkpoint of another process
    holds the lock for a few ms right after our BEGIN. The write keeps its place (SQLite's
    write lock) and goes on when the checkpoint ends: no rollback, no queueing again."""
    path = tmp_path / "state.db"
    _store(path)
    other = CheckpointLock(path)
    released: list[float] = []

    def checkpointer(e: dict) -> None:
        if e["event"] != "failpoint":
            return
        if e["name"] == "write.before_lock":
            assert other.acquire_exclusive(0)  # a checkpoint starts right after our BEGIN
        elif e["name"] == "write.lock_wait" and not released:
            other.release()  # ... and ends while the writer waits, keeping its write lock
            released.append(time.monotonic())

    events.add_listener(checkpointer)
    armed("write.before_lock=sleep(0)@1,write.lock_wait=sleep(0)")
    try:
        with SessionDB(path) as db:
            event_log.clear()
            db.append_message("s", "user", "after a short checkpoint")
            assert [m["content"] for m in db.get_messages("s")] == ["after a short checkpoint"]
    finally:
        events.remove_listener(checkpointer)
        other.close()
    assert released, "the write never waited for the lock: the case was not tested"
    assert not [e for e in event_log if e["event"] in ("checkpoint_wait", "retry")]
    (w,) = [e for e in event_log if e["event"] == "write" and e["op"] == "append_message"]
    assert w["attempts"] == 1 and w["met"] == 0 and w["lock"] == "shared"
    assert w["t_begin"] >= released[0]


def test_a_long_holder_gets_the_write_lock_back_after_the_short_wait(tmp_path, event_log):
    """A holder that keeps the lock past ``HOLD_WAIT_S`` (maintenance, a TRUNCATE checkpoint:
    both may need SQLite's write lock themselves) finds it free: the write rolled back and waits
    holding nothing (no wait-for cycle, docs/decisions/0001-checkpoint-lock.md)."""
    path = tmp_path / "state.db"
    _store(path)
    other = CheckpointLock(path)
    assert other.acquire_exclusive(0)
    maintenance = sqlite3.connect(path, isolation_level=None, timeout=0)
    seen: list[bool] = []

    def on_wait(e: dict) -> None:
        if e["event"] == "checkpoint_wait" and not seen:
            maintenance.execute("BEGIN IMMEDIATE")  # at once: timeout 0, nobody holds it
            maintenance.execute("ROLLBACK")
            seen.append(e["waited_s"] >= HOLD_WAIT_S)
            other.release()

    events.add_listener(on_wait)
    try:
        with SessionDB(path) as db:
            event_log.clear()
            db.append_message("s", "user", "after maintenance")
    finally:
        events.remove_listener(on_wait)
        other.close()
        maintenance.close()
    assert seen == [True]
    (w,) = [e for e in event_log if e["event"] == "write" and e["op"] == "append_message"]
    assert w["attempts"] == 1 and w["met"] == 1


def test_a_checkpoint_lock_held_past_the_busy_timeout_is_one_retry(tmp_path, event_log):
    path = tmp_path / "state.db"
    _store(path)
    other = CheckpointLock(path)
    assert other.acquire_exclusive(0)  # held until the writer gives up waiting for it
    try:
        _append_releasing_on_retry(path, event_log, other.release)
    finally:
        other.close()
    (r,) = [e for e in event_log if e["event"] == "retry"]
    assert (r["stage"], r["code"], r["attempt"]) == ("checkpoint lock", "SQLITE_BUSY", 1)
    assert r["waited_s"] >= BUSY_TIMEOUT_S and 0.020 <= r["sleep_s"] <= 0.150
    (w,) = [e for e in event_log if e["event"] == "write" and e["op"] == "append_message"]
    assert w["attempts"] == 2 and w["met"] >= 1


def test_a_busy_begin_is_a_retry_after_the_busy_timeout_named_begin(tmp_path, event_log):
    """Another connection holds SQLite's write lock: BEGIN IMMEDIATE waits the whole busy
    timeout in SQLite's busy handler, then the retry event says ``begin``."""
    path = tmp_path / "state.db"
    _store(path)
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")
    try:
        _append_releasing_on_retry(path, event_log, lambda: blocker.execute("ROLLBACK"))
    finally:
        blocker.close()
    (r,) = [e for e in event_log if e["event"] == "retry"]
    assert (r["stage"], r["code"]) == ("begin", "SQLITE_BUSY")
    assert r["waited_s"] >= 0.9 * BUSY_TIMEOUT_S


def test_a_lock_error_inside_the_transaction_is_named_statement(tmp_path, armed, event_log):
    path = tmp_path / "state.db"
    _store(path)
    armed("write.before_commit=error(busy)@1")
    with SessionDB(path) as db:
        event_log.clear()
        db.append_message("s", "user", "x")
        assert db.get_session("s")["message_count"] == 1
    (r,) = [e for e in event_log if e["event"] == "retry"]
    assert (r["stage"], r["code"]) == ("statement", "SQLITE_BUSY")
    assert r["waited_s"] < BUSY_TIMEOUT_S  # at once: the failpoint does not wait
