"""The checkpoint lock cannot be split (issue 22 item 3).

Removing or replacing ``state.db.checkpoint.lock`` (by hand, or by a command writing an output
there) used to let a new process take it exclusively while an older writer held it shared on the
old inode. Now every lock operation compares the path's ``(st_dev, st_ino)`` with the locked
descriptor's (as for ``-wal``/``-shm``), a newcomer also locks an old inode another process holds
locked, ``doctor`` reports a split, and no command of ours writes a path the store owns.

Real processes, real lock files, real ``flock``; waits are on the lock table and on the child's
own descriptors, never on wall time.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from hermes_state import SessionDB, events, failpoints
from hermes_state.cli import main as cli
from hermes_state.files.paths import refuse_store_owned, store_owned
from hermes_state.operator.doctor import run_doctor
from hermes_state.processes import checkpoint_lock
from hermes_state.processes.checkpoint_lock import CheckpointLock, lock_path
from hermes_state.processes.lock_files import flock_holders, lock_file_descriptors
from hermes_state.store import connection

EXPOSED = connection.wal_reset_exposure() is not None
pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="lock holders and descriptors are read from /proc")


def _make(path: Path) -> None:
    with SessionDB(path) as db:
        db.create_session("s", source="cli")


def _replace_lock(path: Path) -> None:
    """What `sessions export -o <lock>` used to do: a new file renamed over the lock file."""
    tmp = path.with_name("lock.tmp")
    tmp.write_text("[]\n")
    os.replace(tmp, lock_path(path))


def _arm_file(tmp_path: Path, spec: str) -> Path:
    arm = tmp_path / "failpoints.arm"
    part = tmp_path / "failpoints.arm.new"
    part.write_text(spec)
    os.replace(part, arm)
    return arm


@pytest.mark.parametrize("split", ["removed", "replaced"])
def test_a_newcomer_cannot_lock_exclusively_while_an_old_writer_holds_the_removed_lock(
        tmp_path, spawn, split):
    path = tmp_path / "state.db"
    _make(path)
    arm = tmp_path / "failpoints.arm"
    child = spawn("store_child.py", env_extra={failpoints.FILE_ENV_VAR: str(arm)})
    child.ok("open", path=str(path))
    _arm_file(tmp_path, "write.before_commit=sleep(600000)@1")  # the next write stays open
    child.send(json.dumps({"op": "append", "sid": "s", "n": 1}))
    lock = lock_path(path)
    while not any(h.pid == child.pid and h.mode == "shared" for h in flock_holders(lock)):
        os.sched_yield()  # the child's write transaction holds the lock shared now
    if split == "removed":
        os.unlink(lock)
    else:
        _replace_lock(path)
    newcomer = CheckpointLock(path)
    try:
        assert newcomer.split is not None and f"PID {child.pid}" in newcomer.split
        assert not newcomer.acquire_exclusive(0), "a checkpoint would overlap the write"
        with pytest.raises(checkpoint_lock.LockBusy) as busy:
            with checkpoint_lock.exclusive(path, timeout=0.05):
                pass
        assert f"PID {child.pid}" in str(busy.value)
    finally:
        newcomer.close()
        child.kill()


@pytest.mark.parametrize("split", ["removed", "replaced"])
def test_an_idle_writer_notices_the_split_and_waits_for_maintenance_on_the_new_file(
        tmp_path, spawn, split):
    path = tmp_path / "state.db"
    _make(path)
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("listen")
    child.ok("append", sid="s", n=1)  # the child holds the lock file open, idle now
    (_replace_lock(path) if split == "replaced" else os.unlink(lock_path(path)))
    seen: list[dict] = []
    events.add_listener(seen.append)
    try:
        with checkpoint_lock.exclusive(path):  # maintenance, on the file at the path now
            now = os.stat(lock_path(path)).st_ino
            child.send(json.dumps({"op": "append", "sid": "s", "n": 1, "prefix": "late"}))
            # The child must open the file at the path now (and then wait for us); before the
            # fix it wrote at once through the removed file. Whichever comes first decides.
            while not any(d.pid == child.pid and d.ident[1] == now
                          for d in lock_file_descriptors(lock_path(path))):
                assert child._lines.empty(), (
                    "the child's write committed while maintenance held the lock: "
                    f"{child._lines.queue}")
                os.sched_yield()
    finally:
        events.remove_listener(seen.append)
    reply = json.loads(child.readline())
    assert reply["ok"], reply
    released = [e for e in seen if e["event"] == "checkpoint_lock" and e.get("status") ==
                "released"][-1]["t_released"]
    late = [e for e in child.ok("events")["events"] if e["event"] == "write"][-1]
    assert late["t_begin"] >= released, (late, released)
    splits = [e for e in child.ok("events")["events"]
              if e["event"] == "checkpoint_lock" and e.get("status") == "split"]
    assert splits, "the child must report the split"


@pytest.mark.skipif(not EXPOSED, reason="this SQLite has the WAL-reset fix: no lock to report")
def test_doctor_reports_a_split_lock_as_not_mitigated_until_every_holder_locks_both(
        tmp_path, spawn):
    path = tmp_path / "state.db"
    _make(path)
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    assert run_doctor(path).stats["wal_reset"]["mitigated"] is True
    os.unlink(lock_path(path))
    newcomer = SessionDB(path)  # a process started since: it locks the new file
    try:
        report = run_doctor(path)
        wal_reset = report.stats["wal_reset"]
        assert wal_reset["mitigated"] is False, wal_reset
        assert "split" in wal_reset["line"] and f"PID {child.pid}" in wal_reset["line"]
        child.ok("append", sid="s", n=1)  # the old writer noticed: it locks both files now
        assert run_doctor(path).stats["wal_reset"]["mitigated"] is True
    finally:
        newcomer.close()


STORE_OWNED = ["state.db.checkpoint.lock", "state.db.quarantine.lock", "state.db-journal",
               "state.db-wal", "state.db", "state.db.retired-wal-20300101T000000Z-1/x.json",
               "state-snapshots/x.json", "sessions/x.jsonl", "state.db.capture-pending-1.json"]


@pytest.mark.parametrize("name", STORE_OWNED)
def test_export_never_writes_a_path_the_store_owns(tmp_path, capsys, name):
    home = tmp_path / "home"
    _make(home / "state.db")
    target = home / name
    target.parent.mkdir(parents=True, exist_ok=True)
    before = {p: (p.stat().st_ino, p.read_bytes()) for p in home.rglob("*") if p.is_file()}
    assert cli(["--home", str(home), "sessions", "export", "-o", str(target)]) == 1
    err = capsys.readouterr().err
    assert "store owns" in err and "Traceback" not in err, err
    after = {p: (p.stat().st_ino, p.read_bytes()) for p in home.rglob("*") if p.is_file()
             if p in before}
    assert after == {p: v for p, v in before.items() if p.exists()}


@pytest.mark.parametrize("name", STORE_OWNED)
def test_recover_never_writes_its_report_or_output_to_a_path_the_store_owns(tmp_path, capsys,
                                                                           name):
    home = tmp_path / "home"
    _make(home / "state.db")
    other = tmp_path / "other" / "state.db"
    _make(other)
    target = home / name
    target.parent.mkdir(parents=True, exist_ok=True)
    lock_before = os.stat(lock_path(home / "state.db")).st_ino
    for extra in (["--inspect-only", "--report", str(target)], ["--output", str(target)]):
        code = cli(["--home", str(home), "sessions", "recover", str(other), *extra])
        err = capsys.readouterr().err
        assert code == 1 and "owns" in err and "Traceback" not in err, (extra, err)
    assert os.stat(lock_path(home / "state.db")).st_ino == lock_before


@pytest.mark.parametrize("name", STORE_OWNED)
def test_doctor_bundle_never_writes_a_path_the_store_owns(tmp_path, capsys, name):
    home = tmp_path / "home"
    _make(home / "state.db")
    target = home / name
    target.parent.mkdir(parents=True, exist_ok=True)
    before = {p: (p.stat().st_ino, p.read_bytes()) for p in home.rglob("*") if p.is_file()}
    assert cli(["--home", str(home), "doctor", "--bundle", str(target)]) == 1
    err = capsys.readouterr().err
    assert "store owns" in err and "Traceback" not in err, err
    after = {p: (p.stat().st_ino, p.read_bytes()) for p in home.rglob("*") if p.is_file()}
    assert after == before


@pytest.mark.parametrize("name", ["state.db.checkpoint.lock", "state.db-wal",
                                  "state.db.retired-wal-20300101T000000Z-1/state.db-wal",
                                  "sessions/x.jsonl"])
def test_no_command_writes_a_path_another_profiles_store_owns(tmp_path, capsys, name):
    """The store a command works on is not the only one: another profile's lock file (or any
    store's file found beside the target) is refused by export -o, doctor --bundle and
    recover --report alike."""
    home = tmp_path / "home"
    _make(home / "state.db")
    other = home / "profiles" / "work" / "state.db"
    _make(other)
    target = other.parent / name
    target.parent.mkdir(parents=True, exist_ok=True)
    target.touch()
    before = {p: (p.stat().st_ino, p.read_bytes()) for p in home.rglob("*") if p.is_file()}
    for argv in (["sessions", "export", "-o", str(target)], ["doctor", "--bundle", str(target)],
                 ["sessions", "recover", str(home / "state.db"), "--inspect-only", "--report",
                  str(target)]):
        assert cli(["--home", str(home), *argv]) == 1, argv
        err = capsys.readouterr().err
        assert "owns" in err and str(other) in err and "Traceback" not in err, (argv, err)
    after = {p: (p.stat().st_ino, p.read_bytes()) for p in home.rglob("*") if p.is_file()}
    assert after == before
    # a file that merely looks like one (no store beside it) is an ordinary output path
    stray = tmp_path / "elsewhere" / "notes.db.checkpoint.lock"
    stray.parent.mkdir()
    assert cli(["--home", str(home), "sessions", "export", "-o", str(stray)]) == 0
    capsys.readouterr()


def test_store_owned_resolves_links_and_hard_links(tmp_path):
    home = tmp_path / "home"
    _make(home / "state.db")
    os.symlink(home, tmp_path / "alias")
    assert store_owned(tmp_path / "alias" / "state.db.checkpoint.lock", home / "state.db")
    os.link(lock_path(home / "state.db"), tmp_path / "hardlink")
    assert "checkpoint lock" in store_owned(tmp_path / "hardlink", home / "state.db")
    assert store_owned(tmp_path / "elsewhere.json", home / "state.db") is None
    assert store_owned(home / "state.db.new", home / "state.db") is None  # a new store: fine
    with pytest.raises(PermissionError, match="checkpoint lock"):
        refuse_store_owned(home / "state.db.checkpoint.lock", home / "state.db")
