"""A retired WAL is kept until a verified capture exists (issue 22 item 1).

The disk is REALLY full (a small tmpfs, filled by a file) when a writer's WAL is deleted: the
capture fails with ENOSPC. It used to be tried once, the refusal said "Nothing is lost", and all
acknowledged appends of that generation were gone. Now the handle keeps the retired log and the
obligation: every refusal says what is at risk and which process holds the only copy; the capture
is retried on every later call, at close, and by ``doctor`` (through ``/proc/<pid>/fd``); an exit
without a capture is reported as the loss it is. Real processes, a real filesystem.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import uuid
from pathlib import Path

import pytest

from hermes_state import DeletedWalGenerationError, SessionDB, failpoints
from hermes_state.operator.doctor import run_doctor

ACKED = 10


@pytest.fixture
def small_fs(tmp_path):
    """A 4 MiB tmpfs (root only; skipped with the reason elsewhere), unmounted at teardown."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a real full disk needs a tmpfs mount (root and mount(8))")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m,mode=0700", "tmpfs",
                           str(mnt)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def fill(directory: Path) -> Path:
    """Fill the filesystem of ``directory`` until ENOSPC; returns the filler (delete it to
    give the space back)."""
    filler = directory / f"filler-{uuid.uuid4().hex}"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 1 << 12, 1):  # down to the last byte
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
    finally:
        os.close(fd)
    return filler


def read_markers(path: Path) -> list:
    from hermes_state.processes.capture import read_markers as read  # the obligation markers

    return read(path)


def captures(home: Path) -> list[Path]:
    return sorted(p for p in home.iterdir() if p.name.startswith("state.db.retired-wal-")
                  and not p.name.endswith(".partial"))


def captured_messages(capture: Path, tmp: Path) -> list[str]:
    """Open the capture's state.db + state.db-wal as SPEC §10.3 says (a copy elsewhere)."""
    work = tmp / f"open-{uuid.uuid4().hex}"
    work.mkdir()
    for name in ("state.db", "state.db-wal"):
        shutil.copyfile(capture / name, work / name)
    conn = sqlite3.connect(work / "state.db")
    try:
        return [r[0] for r in conn.execute("SELECT content FROM messages ORDER BY id")]
    finally:
        conn.close()


@pytest.fixture
def full_disk_retired(small_fs, spawn):
    """A child acknowledged ACKED appends, the disk filled, its WAL deleted, its next append
    refused: ``(home, child, refusal, filler)``."""
    home = small_fs / "home"
    home.mkdir()
    path = home / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=ACKED, prefix="acked")
    filler = fill(small_fs)
    os.unlink(f"{path}-wal")
    os.unlink(f"{path}-shm")
    refusal = child.call("append", sid="s", n=1, prefix="refused")
    assert refusal["error"] == "DeletedWalGenerationError", refusal
    return home, child, refusal, filler


def test_a_capture_that_cannot_be_written_is_named_never_called_nothing_lost(
        full_disk_retired):
    home, child, refusal, _filler = full_disk_retired
    msg = refusal["msg"]
    assert "Nothing is lost" not in msg and "nothing is lost" not in msg, msg
    assert "NOT saved yet" in msg and f"PID {child.pid}" in msg, msg
    assert "No space left on device" in msg, msg
    assert "if this process exits before it succeeds, those writes are lost" in msg, msg
    assert refusal["capture_dir"] is None and captures(home) == []
    # A process starting now is told the same truth about the holder, not "Nothing is lost".
    with pytest.raises(DeletedWalGenerationError) as other:
        SessionDB(home / "state.db")
    assert "Nothing is lost" not in other.value.user_message
    assert f"PID {child.pid}" in other.value.user_message
    assert "only in the deleted log" in other.value.user_message


def test_the_capture_is_retried_on_the_next_call_once_space_returns(full_disk_retired, tmp_path):
    home, child, _refusal, filler = full_disk_retired
    again = child.call("append", sid="s", n=1, prefix="still-full")
    assert "NOT saved yet" in again["msg"] and captures(home) == []
    os.unlink(filler)
    after = child.call("append", sid="s", n=1, prefix="refused")
    assert after["error"] == "DeletedWalGenerationError"  # still refused: the WAL is retired
    assert "Nothing is lost" in after["msg"], after["msg"]
    (capture,) = captures(home)
    assert after["capture_dir"] == str(capture)
    manifest = json.loads((capture / "manifest.json").read_text())
    assert manifest["verified"] is True and manifest["trigger"] == "retry"
    assert captured_messages(capture, tmp_path)[-ACKED:] == [f"acked-{i}" for i in range(ACKED)]
    assert read_markers(home / "state.db") == []  # fulfilled: the marker is gone


def test_the_capture_is_retried_at_close(full_disk_retired, tmp_path):
    home, child, _refusal, filler = full_disk_retired
    os.unlink(filler)
    child.ok("close")
    (capture,) = captures(home)
    assert json.loads((capture / "manifest.json").read_text())["trigger"] == "close"
    assert captured_messages(capture, tmp_path)[-ACKED:] == [f"acked-{i}" for i in range(ACKED)]


def test_doctor_captures_the_log_another_process_holds_and_the_holder_sees_it(
        full_disk_retired, tmp_path):
    home, child, _refusal, filler = full_disk_retired
    stuck = run_doctor(home / "state.db")
    text = stuck.render()
    assert stuck.exit_code == 1
    assert f"PID {child.pid}" in text and "holds the ONLY copy" in text, text
    assert "do NOT stop" in text and "No space left on device" in text, text
    os.unlink(filler)
    saved = run_doctor(home / "state.db")
    (capture,) = captures(home)
    assert f"captured the deleted state.db-wal PID {child.pid}" in saved.render()
    manifest = json.loads((capture / "manifest.json").read_text())
    assert manifest["trigger"] == "doctor" and manifest["pid"] == child.pid
    assert manifest["captured_by"]["pid"] == os.getpid()
    assert captured_messages(capture, tmp_path)[-ACKED:] == [f"acked-{i}" for i in range(ACKED)]
    # The holder's next call finds doctor's capture: its obligation ends, no second copy.
    after = child.call("append", sid="s", n=1)
    assert "Nothing is lost" in after["msg"] and after["capture_dir"] == str(capture)
    assert captures(home) == [capture]
    assert "captured in" in run_doctor(home / "state.db").render()


def test_an_exit_without_a_capture_is_reported_as_a_loss(tmp_path, spawn):
    """The capture keeps failing (a failpoint stands in for the full disk, so that the marker
    itself can still be written): the exit prints the loss, and doctor reports it after."""
    home = tmp_path / "home"
    path = home / "state.db"
    child = spawn("store_child.py", env_extra={failpoints.ENV_VAR: "capture.mid_copy=error(full)"})
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=ACKED)
    os.unlink(f"{path}-wal")
    os.unlink(f"{path}-shm")
    refusal = child.call("append", sid="s", n=1)
    assert "NOT saved yet" in refusal["msg"], refusal
    ((marker, rec),) = read_markers(path)
    assert rec["pid"] == child.pid and rec["state"] == "pending"
    child.ok("close")  # tries hard, fails, keeps the connection (and the log) open
    child.send(json.dumps({"op": "exit"}))
    assert child.wait() == 0
    err = child.stderr()
    assert "LOST" in err and f"PID {child.pid} is exiting without a capture" in err, err
    ((_, rec),) = read_markers(path)
    assert rec["state"] == "lost"
    report = run_doctor(path)
    assert report.exit_code == 1
    assert f"PID {child.pid} exited without a capture of its retired WAL" in report.render()
    assert "LOST" in report.render()
