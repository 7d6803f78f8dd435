"""Maintenance holds the store's write lock across its decision and its action (issue 11 item 1).

``backup restore``, ``sessions optimize``, ``optimize-storage`` and ``prune`` decide "nobody is
writing" from a holder scan, then act. A cron-like writer (a real process: open, append, close)
that starts right after that decision must not commit inside the window: it waits for the
action, and what it acknowledges survives. The writer is started from inside the command, right
after its decision, so the window is hit every time (no timing).
"""

from __future__ import annotations

import json

import pytest

from hermes_state import SessionDB
from hermes_state.cli import commands as cli_module
from hermes_state.cli import main as cli
from hermes_state.operator import snapshots
from hermes_state.processes import checkpoint_lock
from hermes_state.processes.checkpoint_lock import CheckpointLock


def make_store(path):
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "before")


def until_blocked_or_acked(child) -> dict:
    """The cron writer's first line that says it waited (a retry) or that it is done."""
    while (line := child.readline()) is not None:
        rec = json.loads(line)
        if rec.get("event") == "retry" or "ack" in rec or "fail" in rec:
            return rec
    raise AssertionError(f"cron writer {child.pid} ended without a word")


def finish(child) -> list[dict]:
    out = [json.loads(x) for x in child.read_all()]
    assert child.wait() == 0
    return out


def contents(path, sid) -> list[str]:
    with SessionDB(path, read_only=True) as ro:
        return [m["content"] for m in ro.get_messages(sid) or []]


def test_restore_keeps_a_cron_write_that_starts_after_its_holder_check(tmp_path, spawn,
                                                                       monkeypatch, event_log):
    """The reported loss: a writer that opens, commits and closes between the pre-restore
    snapshot and the restore was in neither the restored store nor any snapshot. Now it waits
    (the restore then sees it and refuses, or finishes first), and its write survives."""
    path = tmp_path / "state.db"
    make_store(path)
    snap = snapshots.create_snapshot(path, "manual")["id"]
    real = snapshots.create_snapshot
    seen: dict = {}

    def pre_restore_then_cron(db, reason, **kw):
        result = real(db, reason, **kw)
        if reason == snapshots.PRE_RESTORE_REASON:  # the holder check passed just before
            child = seen["child"] = spawn("cron_writer.py", path, "cron", "cron-write")
            seen["lines"] = []
            while (line := child.readline()) is not None:  # until it waits or is gone
                rec = json.loads(line)
                seen["lines"].append(rec)
                if rec.get("event") == "retry" or rec.get("closed"):
                    break
        return result

    monkeypatch.setattr(snapshots, "create_snapshot", pre_restore_then_cron)
    try:
        snapshots.restore_snapshot(path, snap)
        restored = True
    except snapshots.RestoreRefused as exc:
        assert "another process is using" in str(exc)  # the waiting writer, seen
        restored = False
    recs = seen["lines"] + finish(seen["child"])
    ack = next(r for r in recs if "ack" in r or "fail" in r)
    assert "ack" in ack, ack
    pre = [s["path"] for s in snapshots.list_snapshots(path) if s["reason"] == "pre-restore"]
    where = ["store"] * (contents(path, "cron") == ["cron-write"])
    where += ["pre-restore"] * any(contents(p, "cron") == ["cron-write"] for p in pre)
    assert where, "an acknowledged write is in neither the store nor a pre-restore snapshot"
    # It waited for the restore's write lock instead of committing inside the window.
    assert recs[0].get("event") == "retry", recs[0]
    released = [e for e in event_log if e["event"] == "checkpoint_lock"
                and e.get("purpose") == "backup restore"]
    assert released and ack["t"] > released[-1]["t_released"]
    assert where == ["store"] and not restored


@pytest.mark.parametrize("command", [["sessions", "optimize"],
                                     ["sessions", "optimize-storage"],
                                     ["sessions", "prune", "--older-than", "0", "--yes"]])
def test_a_gated_command_keeps_the_lock_from_its_decision_through_its_action(
        tmp_path, spawn, monkeypatch, event_log, command):
    path = tmp_path / "state.db"
    make_store(path)
    real = cli_module.open_rw
    seen: dict = {}

    def decided_then_cron(args):  # the gate has decided; the rewrite is about to start
        if "child" not in seen:
            seen["child"] = spawn("cron_writer.py", path, "cron", "cron-write")
            seen["first"] = until_blocked_or_acked(seen["child"])
        return real(args)

    monkeypatch.setattr(cli_module, "open_rw", decided_then_cron)
    assert cli(["--home", str(tmp_path), *command]) == 0
    rest = finish(seen["child"])
    assert seen["first"].get("event") == "retry", seen["first"]  # it waited for the action
    ack = next(r for r in rest if "ack" in r)
    released = [e for e in event_log if e["event"] == "checkpoint_lock"
                and e.get("purpose") == f"sessions {command[1]}"]
    assert released and ack["t"] > released[-1]["t_released"]
    assert contents(path, "cron") == ["cron-write"]


def test_a_write_lock_that_stays_busy_refuses_the_command_naming_the_holder(tmp_path,
                                                                           monkeypatch,
                                                                           capsys):
    path = tmp_path / "state.db"
    make_store(path)
    monkeypatch.setattr(checkpoint_lock, "MAINTENANCE_WAIT_S", 0.2)
    writer = CheckpointLock(path)
    assert writer.acquire_shared(0)  # a write transaction in flight that does not end
    try:
        assert cli(["--home", str(tmp_path), "sessions", "optimize"]) == 1
    finally:
        writer.close()
    err = capsys.readouterr().err
    assert "Refusing `sessions optimize`: a write transaction kept the store's write lock" in err
    assert "shared" in err and "Nothing was changed" in err
