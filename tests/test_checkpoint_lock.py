"""The checkpoint lock (issue 12; SPEC §4): no checkpoint of the store overlaps a write
transaction of the store that may restart the WAL, in this process or another, on an SQLite
with the WAL-reset race (issue 24 item 3: the others run beside it).

Real processes, a real lock file, real ``flock``; a checkpoint is held open with the
``checkpoint.locked`` failpoint (after the lock, before ``PRAGMA wal_checkpoint``).
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import sqlite3
import stat
import threading
import time

import pytest

from chaos.checkers.isolation import may_restart
from hermes_state import SessionDB, events, failpoints
from hermes_state.cli import main as cli
from hermes_state.errors import WriteContentionError
from hermes_state.processes import checkpoint_lock
from hermes_state.processes.checkpoint_lock import (
    CheckpointLock,
    lock_holders,
    lock_path,
)
from hermes_state.store import checkpointing, connection
from hermes_state.store.checkpointing import BUSY_TIMEOUT_S

EXPOSED = connection.wal_reset_exposure() is not None
needs_exposed = pytest.mark.skipif(not EXPOSED, reason="this SQLite has the WAL-reset fix")


def make_store(path, log: list | None = None):
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "before")
    if log is not None:
        log.clear()  # the test's own events only


def backfilled(db: SessionDB) -> None:
    """Leave the WAL non-empty and wholly checkpointed: the next write may restart it."""
    db.append_message("s", "user", "frames")
    busy, log_, done = db.connection.checkpoint("PASSIVE")
    assert busy == 0 and log_ == done > 0


def lines(child):
    """The child's JSON lines, one at a time (waits for each: an event, never wall time)."""
    while (line := child.readline()) is not None:
        yield json.loads(line)


def first(child, pred):
    for rec in lines(child):
        if pred(rec):
            return rec
    raise AssertionError(f"child {child.pid} ended without the expected line")


def hold_checkpoint(spawn, path, *, ms: int, lock: str = "auto"):
    """A child process inside a real checkpoint, held open ``ms`` ms by the failpoint
    ``checkpoint.locked``; returns once the child reports it is there."""
    holder = spawn("ckpt_holder.py", path,
                   env_extra={failpoints.ENV_VAR: f"checkpoint.locked=sleep({ms})@1",
                              checkpoint_lock.ENV_VAR: lock})
    first(holder, lambda r: r.get("event") == "failpoint")
    return holder


@pytest.fixture
def armed(monkeypatch):
    """Arm failpoints in this process for the test (restored afterwards)."""
    def arm(spec: str) -> None:
        monkeypatch.setenv(failpoints.ENV_VAR, spec)
        failpoints.reload()
    yield arm
    monkeypatch.delenv(failpoints.ENV_VAR, raising=False)
    failpoints.reload()


# --------------------------------------------------------------------------- basics
@needs_exposed
def test_lock_file_beside_the_store_shared_by_writes_exclusive_by_checkpoints(tmp_path,
                                                                             event_log):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "x")
        db.checkpoint("PASSIVE")
        assert db.connection.checkpoint_lock_status == checkpoint_lock.MITIGATED
        # SQLite's own automatic checkpoint is off: every checkpoint goes through the lock.
        assert db._read(lambda c: c.execute("PRAGMA wal_autocheckpoint").fetchone()[0]) == 0
    st = os.lstat(lock_path(path))
    assert stat.S_ISREG(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o600 and st.st_size == 0
    writes = [e for e in event_log if e["event"] == "write"]
    ckpts = [e for e in event_log if e["event"] == "checkpoint"]
    assert writes and all(e["lock"] == ("exclusive" if may_restart(e) else "shared")
                          for e in writes)
    assert any(e["lock"] == "shared" for e in writes)
    assert all(e["t_begin"] <= e["t_commit"] for e in writes)
    assert {e["trigger"] for e in ckpts} >= {"manual", "close"}
    assert all(e["lock"] == "shared" for e in ckpts)


@pytest.mark.parametrize("branch", ["exposed", "fixed"])
def test_a_held_checkpoint_excludes_writes_only_on_an_exposed_sqlite(tmp_path, armed,
                                                                    monkeypatch, branch):
    """Both branches of the version check, on this machine, by overriding it (issue 12 item 2):
    exposed, a write of another connection that may restart the WAL waits for the held
    checkpoint; fixed, it does not."""
    if branch == "fixed":
        monkeypatch.setattr(connection, "wal_reset_exposure", lambda version=None: None)
    else:
        monkeypatch.setattr(connection, "wal_reset_exposure",
                            lambda version=None: "exposed (test)")
    path = tmp_path / "state.db"
    make_store(path)
    inside = threading.Event()
    seen: list[dict] = []

    def listen(e: dict) -> None:
        seen.append(e)
        if e["event"] == "failpoint" and e["name"] == "checkpoint.locked":
            inside.set()

    events.add_listener(listen)
    try:
        a, b = SessionDB(path), SessionDB(path)
        autock = b._read(lambda c: c.execute("PRAGMA wal_autocheckpoint").fetchone()[0])
        backfilled(b)
        armed("checkpoint.locked=sleep(700)@1")
        seen.clear()
        t = threading.Thread(target=a.checkpoint, args=("PASSIVE",))
        t.start()
        assert inside.wait(60)
        b.append_message("s", "user", "during")
        t.join(60)
        a.close()
        b.close()
    finally:
        events.remove_listener(listen)
    (ck,) = [e for e in seen if e["event"] == "checkpoint" and e["trigger"] == "manual"]
    (w,) = [e for e in seen if e["event"] == "write" and e["op"] == "append_message"]
    if branch == "exposed":
        assert autock == 0 and ck["lock"] == "shared" and w["lock"] == "exclusive"
        assert w["t_begin"] >= ck["t_end"]  # waited for the whole checkpoint
    else:
        assert autock == 1000 and ck["lock"] == "not needed"
        assert w["t_commit"] < ck["t_end"]  # committed while the checkpoint was held open


@needs_exposed
def test_a_checkpoint_in_another_process_makes_a_write_that_may_restart_the_wal_wait(
        tmp_path, spawn, event_log):
    path = tmp_path / "state.db"
    make_store(path, event_log)
    with SessionDB(path) as db:
        backfilled(db)
        event_log.clear()
        holder = hold_checkpoint(spawn, path, ms=1500)  # the lock is held now
        assert [(h.pid, h.mode) for h in lock_holders(path)] == [(holder.pid, "shared")]
        db.append_message("s", "user", "waits")
        ck = first(holder, lambda r: r.get("event") == "checkpoint")
    (w,) = [e for e in event_log if e["event"] == "write" and e["op"] == "append_message"]
    assert ck["lock"] == "shared" and w["lock"] == "exclusive"
    assert w["t_begin"] >= ck["t_end"]
    assert holder.wait() == 0


@needs_exposed
def test_a_write_that_cannot_restart_the_wal_runs_beside_a_checkpoint(tmp_path, spawn,
                                                                      event_log):
    path = tmp_path / "state.db"
    make_store(path, event_log)
    with SessionDB(path) as db:
        db.append_message("s", "user", "frames not yet checkpointed")
        event_log.clear()
        holder = hold_checkpoint(spawn, path, ms=3000)  # the lock is held now
        db.append_message("s", "user", "beside it")
        ck = first(holder, lambda r: r.get("event") == "checkpoint")
    (w,) = [e for e in event_log if e["event"] == "write" and e["op"] == "append_message"]
    assert w["lock"] == "shared" and w["wal"][1] < w["wal"][0]
    assert w["t_commit"] < ck["t_end"]  # committed while the checkpoint was held open
    assert holder.wait() == 0


def test_with_the_lock_off_the_same_write_overlaps_the_checkpoint(tmp_path, spawn, event_log,
                                                                  monkeypatch, caplog):
    """The negative control: HERMES_STATE_CHECKPOINT_LOCK=off, logged as NOT mitigated."""
    path = tmp_path / "state.db"
    make_store(path, event_log)
    monkeypatch.setenv(checkpoint_lock.ENV_VAR, "off")
    holder = hold_checkpoint(spawn, path, ms=3000, lock="off")  # the lock is held now
    with caplog.at_level(logging.WARNING, logger="hermes_state"), SessionDB(path) as db:
        db.append_message("s", "user", "overlaps")
        status = db.connection.checkpoint_lock_status
    ck = first(holder, lambda r: r.get("event") == "checkpoint")
    (w,) = [e for e in event_log if e["event"] == "write" and e["op"] == "append_message"]
    assert ck["lock"] in ("off", "not needed") and w["t_commit"] < ck["t_end"]
    if EXPOSED:
        assert status == "exposed, NOT mitigated (disabled by HERMES_STATE_CHECKPOINT_LOCK=off)"
        assert "NOT mitigated" in caplog.text


# --------------------------------------------------------------------------- never hang
@needs_exposed
def test_close_never_waits_for_a_busy_lock(tmp_path, event_log):
    path = tmp_path / "state.db"
    make_store(path, event_log)
    db = SessionDB(path)
    db.append_message("s", "user", "x")
    other = CheckpointLock(path)
    assert other.acquire_exclusive(0)
    try:
        db.close()  # returns at once: the close-time checkpoint is skipped, not waited for
    finally:
        other.close()
    (ck,) = [e for e in event_log if e["event"] == "checkpoint" and e["trigger"] == "close"]
    assert ck["skipped"] == "checkpoint lock busy" and ck["lock"] == "busy"
    assert os.path.getsize(f"{path}-wal") > 0  # nothing checkpointed, nothing lost
    with SessionDB(path, read_only=True) as ro:
        assert [m["content"] for m in ro.get_messages("s")] == ["before", "x"]


@needs_exposed
def test_a_cadence_checkpoint_skips_when_the_lock_stays_busy(tmp_path, event_log):
    path = tmp_path / "state.db"
    make_store(path, event_log)
    with SessionDB(path) as db:
        other = CheckpointLock(path)
        assert other.acquire_exclusive(0)  # maintenance that does not end
        try:
            assert db.checkpoint("PASSIVE") is None
        finally:
            other.close()
        assert db.checkpoint("PASSIVE") is not None
    skipped = [e for e in event_log if e["event"] == "checkpoint" and e.get("skipped")]
    assert len(skipped) == 1 and skipped[0]["trigger"] == "manual"


def test_exclusive_elsewhere_sees_only_an_exclusive_holder(tmp_path):
    path = tmp_path / "state.db"
    make_store(path)
    mine, other = CheckpointLock(path), CheckpointLock(path)
    try:
        assert not mine.exclusive_elsewhere()  # nobody holds it
        assert other.acquire_shared(0)
        assert not mine.exclusive_elsewhere()  # a write transaction: shared
        other.release()
        assert other.acquire_exclusive(0)
        assert mine.exclusive_elsewhere()  # a checkpoint or maintenance
        assert mine.mode is None  # the probe holds nothing afterwards
        other.release()
        assert mine.acquire_exclusive(0)  # and left nothing behind
    finally:
        mine.close()
        other.close()


@needs_exposed
def test_a_passive_checkpoint_beside_maintenance_gives_up_at_once(tmp_path, event_log):
    """SQLite's PASSIVE returns busy at once while another connection checkpoints; the store's
    gives up at once while the lock is held exclusively (maintenance, or a write that may
    restart the WAL), instead of queueing for the write lock (issue 18). Other modes still wait
    (here 50 ms)."""
    path = tmp_path / "state.db"
    make_store(path, event_log)
    other = CheckpointLock(path)
    assert other.acquire_exclusive(0)
    try:
        with SessionDB(path) as db:
            event_log.clear()  # the checkpoints below only
            assert db.connection.checkpoint("PASSIVE", trigger="cadence") is None
            assert db.connection.checkpoint("TRUNCATE", wait=0.05) is None
    finally:
        other.close()
    skipped = [e for e in event_log if e["event"] == "checkpoint" and e.get("skipped")]
    assert [(e["mode"], e["skipped"]) for e in skipped][:2] == [  # close: skipped too
        ("PASSIVE", "the checkpoint lock is held exclusively (maintenance, or a write that may "
                    "restart the WAL after a complete checkpoint)"),
        ("TRUNCATE", "checkpoint lock busy")]


@needs_exposed
def test_a_cadence_drain_queues_for_the_write_lock_only_briefly(tmp_path, event_log,
                                                                monkeypatch):
    """A cadence checkpoint runs inside a caller's append: when its drain (the checkpoint lock
    taken exclusively) has to queue for SQLite's write lock behind the other writers, it gives
    way after ``CADENCE_QUEUE_S`` instead of keeping the append waiting in the busy handler up
    to the 1 s busy timeout (issue 24 item 5: 40-340 ms appends under 8 writers); the drain is
    skipped, nothing is lost, and a later cadence drains."""
    monkeypatch.setattr(checkpointing, "DRAIN_FRAMES", 0)  # any log is long
    path = tmp_path / "state.db"
    make_store(path, event_log)
    db = SessionDB(path)
    reader = sqlite3.connect(path, isolation_level=None)
    writer = sqlite3.connect(path, isolation_level=None)
    other = CheckpointLock(path)
    try:
        db.append_message("s", "user", "x")
        reader.execute("BEGIN")  # an old snapshot: the checkpoint beside writes stays short
        reader.execute("SELECT count(*) FROM messages").fetchone()
        db.append_message("s", "user", "y")
        writer.execute("BEGIN IMMEDIATE")  # another writer holds SQLite's write lock ...
        assert other.acquire_shared(0)  # ... inside its write transaction
        event_log.clear()
        t0 = time.monotonic()
        db.connection.checkpoint("PASSIVE", trigger="cadence")
        took = time.monotonic() - t0
        writer.execute("ROLLBACK")
        other.release()
        reader.execute("COMMIT")
        assert took < BUSY_TIMEOUT_S / 2, took  # it waited the whole busy timeout before
        drains = [e for e in event_log if e["event"] == "checkpoint" and e["trigger"] == "drain"]
        assert [e.get("skipped") for e in drains] == ["checkpoint lock busy"]
        db.append_message("s", "user", "z")
        event_log.clear()
        db.connection.checkpoint("PASSIVE", trigger="cadence")  # nobody in the way now
        ran = [e for e in event_log if e["event"] == "checkpoint" and not e.get("skipped")]
        assert ran and ran[-1]["busy"] == 0 and ran[-1]["checkpointed"] == ran[-1]["log"]
    finally:
        other.close()
        writer.close()
        reader.close()
        db.close()
    with SessionDB(path, read_only=True) as ro:
        assert [m["content"] for m in ro.get_messages("s")] == ["before", "x", "y", "z"]


@needs_exposed
def test_a_killed_checkpointer_releases_the_lock(tmp_path, spawn, event_log):
    path = tmp_path / "state.db"
    make_store(path, event_log)
    holder = hold_checkpoint(spawn, path, ms=600000)  # the lock is held now
    assert [h.pid for h in lock_holders(path)] == [holder.pid]
    holder.kill()
    assert lock_holders(path) == []
    with SessionDB(path) as db:
        db.append_message("s", "user", "after the crash")
    (w,) = [e for e in event_log if e["event"] == "write" and e["op"] == "append_message"]
    assert w["attempts"] == 1


@needs_exposed
def test_a_frozen_holder_is_named_by_doctor_and_by_the_writer_that_gives_up(tmp_path, spawn,
                                                                           capsys):
    path = tmp_path / "state.db"
    make_store(path)
    db = SessionDB(path)
    backfilled(db)  # the next write may restart the WAL: it needs the lock alone
    holder = hold_checkpoint(spawn, path, ms=600000)  # the lock is held now
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        assert cli(["--home", str(tmp_path), "doctor", "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        (h,) = report["stats"]["checkpoint_lock_holders"]
        assert (h["pid"], h["mode"], h["status"]) == (holder.pid, "shared", "stopped")
        titles = [f["title"] for f in report["findings"]]
        assert any(f"PID {holder.pid} (" in t and "shared, stopped" in t for t in titles)
        with db, pytest.raises(WriteContentionError) as info:
            db.append_message("s", "user", "blocked")
        assert (f"state.db checkpoint lock held by PID {holder.pid}"
                in info.value.lock_owner)
        assert "stopped" in info.value.lock_owner and info.value.attempts == 15
    finally:
        os.kill(holder.pid, signal.SIGCONT)
        holder.kill()


# --------------------------------------------------------------------------- bad lock files
def _doctor_line(tmp_path, capsys) -> dict:
    capsys.readouterr()
    cli(["--home", str(tmp_path), "doctor", "--json"])
    return json.loads(capsys.readouterr().out)["stats"]["wal_reset"]


@needs_exposed
def test_a_planted_symlink_is_never_followed_and_is_reported(tmp_path, caplog, capsys):
    path = tmp_path / "state.db"
    make_store(path)
    target = tmp_path / "victim.txt"
    target.write_text("precious\n")
    os.chmod(target, 0o644)
    os.unlink(lock_path(path))
    os.symlink(target, lock_path(path))
    before = os.stat(target)
    with caplog.at_level(logging.ERROR, logger="hermes_state"), SessionDB(path) as db:
        db.append_message("s", "user", "still written")
        status = db.connection.checkpoint_lock_status
    assert "symbolic link" in status and status.startswith("exposed, NOT mitigated (")
    assert "NOT mitigated" in caplog.text and "symbolic link" in caplog.text
    after = os.stat(target)
    assert target.read_text() == "precious\n"
    assert (after.st_mtime_ns, after.st_mode) == (before.st_mtime_ns, before.st_mode)
    line = _doctor_line(tmp_path, capsys)
    assert line["mitigated"] is False and "symbolic link" in line["line"]
    assert line["line"].startswith("exposed, NOT mitigated (")
    # Maintenance cannot exclude writers without it: refused, nothing changed.
    assert cli(["--home", str(tmp_path), "sessions", "optimize"]) == 1
    assert "cannot take the store's write lock" in capsys.readouterr().err


@needs_exposed
def test_a_fifo_at_the_lock_path_neither_blocks_nor_is_used(tmp_path, capsys):
    path = tmp_path / "state.db"
    make_store(path)
    os.unlink(lock_path(path))
    os.mkfifo(lock_path(path))
    with SessionDB(path) as db:
        db.append_message("s", "user", "x")
        assert "not a regular file" in db.connection.checkpoint_lock_status
    assert "not a regular file" in _doctor_line(tmp_path, capsys)["line"]


@needs_exposed
def test_a_filesystem_without_flock_runs_degraded_and_says_so(tmp_path, monkeypatch, caplog):
    """No filesystem here lacks flock; the errno such a filesystem returns is injected."""
    path = tmp_path / "state.db"
    make_store(path)

    def no_flock(fd, op):
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setattr(checkpoint_lock.fcntl, "flock", no_flock)
    with caplog.at_level(logging.ERROR, logger="hermes_state"), SessionDB(path) as db:
        db.append_message("s", "user", "x")
        assert "does not support flock" in db.connection.checkpoint_lock_status
    assert "does not support flock" in caplog.text
    assert "does not support flock" in (checkpoint_lock.probe(path) or "")


@needs_exposed
@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a second user")
def test_an_unreadable_lock_file_is_reported_by_another_user(tmp_path, spawn):
    import tempfile

    with tempfile.TemporaryDirectory(prefix="hermes-lock-") as directory:
        os.chmod(directory, 0o777)
        home = os.path.join(directory, "home")
        os.mkdir(home)
        path = os.path.join(home, "state.db")
        make_store(path)  # root's store: lock file 0600 root
        for p in os.listdir(home):
            if not p.endswith(".checkpoint.lock"):
                os.chown(os.path.join(home, p), 65534, 65534)
        os.chown(home, 65534, 65534)
        doc = spawn("drop_uid.py", 65534, "cli", "--home", home, "doctor", "--json")
        doc.proc.stdin.close()
        out = "\n".join(doc.read_all())
        doc.wait()
        line = json.loads(out)["stats"]["wal_reset"]
        assert line["mitigated"] is False and "permission denied" in line["line"]


def test_an_unwritable_but_readable_lock_file_still_works(tmp_path):
    """flock needs only a read descriptor: a read-only lock file is not a degradation."""
    path = tmp_path / "state.db"
    make_store(path)
    os.chmod(lock_path(path), 0o400)
    lock = CheckpointLock(path)
    assert lock.usable and lock.problem is None and lock.acquire_exclusive(0)
    lock.close()


def test_the_version_gate(monkeypatch):
    for version, exposed in (("3.40.1", True), ("3.45.1", True), ("3.51.2", True),
                             ("3.51.3", False), ("3.44.6", False), ("3.44.5", True),
                             ("3.50.7", False), ("3.50.6", True), ("3.52.0", False)):
        assert (connection.wal_reset_exposure(version) is not None) is exposed, version
    line, reason = checkpoint_lock.exposure_line("/nonexistent/state.db", None)
    assert line.startswith("not exposed") and reason is None
    assert sqlite3.sqlite_version  # the machine's own version is what the store uses
