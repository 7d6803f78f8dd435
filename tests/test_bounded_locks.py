"""No lock the store takes waits without a bound (issue 22 item 2; SPEC §4).

Real processes hold real locks: the util-linux ``flock`` command holding ``HERMES_HOME`` the way
a cron wrapper does (``flock ~/.hermes cron-job``), and a store process stopped with SIGSTOP in
the middle of a quarantine. Every open runs in a child with a hang guard (the guard only turns
a hang into a failure; the product's own deadline is what is asserted).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_state import SessionDB, failpoints
from hermes_state.processes.lock_files import (
    LockTimeout,
    flock_holders,
    flock_wait,
    hold_file_lock,
    open_lock_file,
)

REPO = Path(__file__).resolve().parents[1]
HANG_GUARD_S = 60.0

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="flock holders are read from /proc/locks (Linux)")

OPEN_AND_WRITE = ("import sys; from hermes_state import SessionDB\n"
                  "with SessionDB(sys.argv[1]) as db:\n"
                  "    db.create_session(sys.argv[2], source='cli')\n"
                  "    db.append_message(sys.argv[2], 'user', 'hello')\n"
                  "print('WROTE', flush=True)\n")


def _guarded(argv: list, env: dict) -> subprocess.CompletedProcess:
    """Run ``argv`` in its own process group; a hang is killed whole (no orphan left behind)."""
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=HANG_GUARD_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise AssertionError(f"{argv[:3]} hung past the guard: an unbounded wait") from None
    return subprocess.CompletedProcess(argv, proc.returncode, out, err)


def _run(code: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    full.pop(failpoints.ENV_VAR, None) if env is None else None
    return _guarded([sys.executable, "-c", code, *map(str, args)], full)


def _wait_for_flock(target: Path, pid: int, child: subprocess.Popen) -> None:
    """Wait (on the lock table, not on time) until ``pid`` holds a flock on ``target``."""
    while not any(h.pid == pid and not h.waiting for h in flock_holders(target)):
        assert child.poll() is None, f"the lock holder exited early: {child.returncode}"
        os.sched_yield()


@pytest.fixture
def home_flocked(tmp_path):
    """``flock -x HOME cat``: a real process holds the store's directory exclusively."""
    if shutil.which("flock") is None:
        pytest.skip("util-linux flock(1) is not installed")
    home = tmp_path / "home"
    home.mkdir()
    with SessionDB(home / "state.db") as db:
        db.create_session("before", source="cli")
    holder = subprocess.Popen(["flock", "-x", str(home), "cat"], stdin=subprocess.PIPE)
    try:
        _wait_for_flock(home, holder.pid, holder)
        yield home
    finally:
        holder.stdin.close()
        holder.wait(timeout=HANG_GUARD_S)


def test_a_store_opens_while_another_process_flocks_hermes_home(home_flocked):
    done = _run(OPEN_AND_WRITE, home_flocked / "state.db", "during")
    assert done.returncode == 0 and "WROTE" in done.stdout, done.stderr


def test_a_damaged_store_is_quarantined_while_hermes_home_is_flocked(home_flocked):
    db = home_flocked / "state.db"
    for side in ("-wal", "-shm"):
        Path(f"{db}{side}").unlink(missing_ok=True)
    db.write_bytes(b"\0" * 8192)
    done = _run(OPEN_AND_WRITE, db, "fresh")
    assert done.returncode == 0, done.stderr
    assert len(list(home_flocked.glob("state.db.corrupt.*.bak"))) == 1


def test_the_cron_wrapper_flock_home_job_does_not_deadlock_its_own_job(tmp_path):
    """``flock ~/.hermes cron-job``: the job inherits the wrapper's locked descriptor; its own
    open of the store must not wait for the lock its own wrapper holds."""
    if shutil.which("flock") is None:
        pytest.skip("util-linux flock(1) is not installed")
    home = tmp_path / "home"
    home.mkdir()
    with SessionDB(home / "state.db") as db:  # yesterday's job made the store
        db.create_session("yesterday", source="cron")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop(failpoints.ENV_VAR, None)
    done = _guarded(["flock", str(home), sys.executable, "-c", OPEN_AND_WRITE,
                     str(home / "state.db"), "cron"], env)
    assert done.returncode == 0 and "WROTE" in done.stdout, done.stderr


def test_a_stopped_process_mid_quarantine_is_named_not_waited_for_forever(tmp_path):
    db = tmp_path / "state.db"
    db.write_bytes(b"\0" * 8192)
    env = {**os.environ, "PYTHONPATH": str(REPO),
           failpoints.ENV_VAR: "quarantine.locked=sleep(600000)"}
    stuck = subprocess.Popen([sys.executable, "-c", OPEN_AND_WRITE, str(db), "stuck"],
                             cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
    try:
        _wait_for_flock(Path(f"{db}.quarantine.lock"), stuck.pid, stuck)
        os.kill(stuck.pid, signal.SIGSTOP)
        code = ("import sys\nfrom hermes_state import SessionDB\n"
                "from hermes_state.processes.lock_files import LockTimeout\n"
                "try:\n    SessionDB(sys.argv[1])\n"
                "except LockTimeout as exc:\n"
                "    print('NAMED', exc.user_message, flush=True)\n")
        done = _run(code, db)
        assert done.returncode == 0 and "NAMED" in done.stdout, (done.stdout, done.stderr)
        text = done.stdout
        assert f"PID {stuck.pid}" in text and "stopped" in text, text
        assert "quarantine lock" in text and "kill -CONT" in text, text
        assert "Traceback" not in done.stderr
    finally:
        stuck.kill()
        stuck.wait(timeout=HANG_GUARD_S)
    with SessionDB(db) as fresh:  # the holder is gone: the quarantine goes through
        assert fresh.quarantined_to is not None


def test_flock_wait_names_each_holder_with_its_state(tmp_path):
    """The generic wait: a deadline, then every holder with PID, command and state; a
    descriptor inherited by a child keeps the lock after its locker is gone."""
    path = tmp_path / "x.lock"
    fd = open_lock_file(path)
    try:
        holder = subprocess.Popen(["flock", "-x", str(path), "cat"], stdin=subprocess.PIPE)
        try:
            _wait_for_flock(path, holder.pid, holder)
            with pytest.raises(LockTimeout) as info:
                flock_wait(fd, exclusive=False, timeout=0.05, path=path, what="a test lock")
            msg = info.value.user_message
            assert f"PID {holder.pid} (flock -x " in msg and "): exclusive, sleeping" in msg, msg
            assert info.value.holders[0].pid == holder.pid
        finally:
            holder.stdin.close()
            holder.wait(timeout=HANG_GUARD_S)
        flock_wait(fd, exclusive=True, timeout=HANG_GUARD_S, path=path, what="a test lock")
    finally:
        os.close(fd)


def test_a_lock_file_replaced_while_waiting_is_locked_again_by_its_new_inode(tmp_path):
    path = tmp_path / "q.lock"
    first = hold_file_lock(path, exclusive=True, timeout=1, what="t")
    old = os.fstat(first).st_ino
    os.unlink(path)  # removed by hand while held: the next locker must lock the path's file
    second = hold_file_lock(path, exclusive=True, timeout=1, what="t")
    try:
        assert os.fstat(second).st_ino == os.stat(path).st_ino != old
    finally:
        os.close(first)
        os.close(second)
