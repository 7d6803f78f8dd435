"""The faulty filesystem on a REAL FUSE mount with REAL SQLite processes (issue 15).

Skipped, with the reason, where FUSE cannot be mounted (not root, no /dev/fuse, no libfuse,
mfusepy missing). Waits are on events (child output lines, the filesystem's state), never on
wall time.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from chaos.fs import (
    FaultyMount,
    FsControlError,
    FsUnavailable,
    fuse_unavailable_reason,
    read_fs_log,
)

REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 90.0


@pytest.fixture
def fsmount(tmp_path):
    """A started FaultyMount over tmp_path/home backed by tmp_path/backing."""
    reason = fuse_unavailable_reason()
    if reason:
        pytest.skip(reason)
    mount = FaultyMount(tmp_path / "backing", tmp_path / "home", tmp_path / "fs.jsonl")
    try:
        mount.start()
    except FsUnavailable as exc:
        pytest.skip(str(exc))
    yield mount
    mount.close()
    assert not os.path.ismount(tmp_path / "home")


def events(mount, ev=None):
    return [r for r in read_fs_log(mount.log_path) if ev is None or r["ev"] == ev]


def cut(mount, *children):
    """The runner's power cut: SIGKILL the writers, reap them, drop unsynced data, power on."""
    for child in children:
        child.kill()
    result = mount.power_cut()
    mount.power_on()
    return result


class Acker:
    """tests/helpers/sqlite_acker.py in a subprocess; ``acks`` are the rows it saw committed."""

    def __init__(self, db: Path, tag: str, sync: str, n: int = 0):
        self.proc = subprocess.Popen(
            [sys.executable, str(REPO / "tests" / "helpers" / "sqlite_acker.py"), str(db), tag,
             sync, str(n)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.tag, self.acks, self.errors = tag, [], []
        assert self.proc.stdout.readline().strip() == "READY"

    def go(self) -> None:
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def read_until(self, acks: int | None = None, errors: int | None = None) -> None:
        """Read output lines until ``acks`` ACKs or ``errors`` ERRs were seen (or EOF)."""
        for line in self.proc.stdout:
            word, _, rest = line.strip().partition(" ")
            if word == "ACK":
                self.acks.append(int(rest))
            elif word == "ERR":
                self.errors.append(rest)
            elif word == "DONE":
                return
            if (acks is not None and len(self.acks) >= acks) or \
                    (errors is not None and len(self.errors) >= errors):
                return

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=HANG_GUARD_S)
        for line in self.proc.stdout:   # acks printed before the kill still count
            word, _, rest = line.strip().partition(" ")
            if word == "ACK":
                self.acks.append(int(rest))
        self.proc.stdout.close()
        self.proc.stdin.close()


def rows(db: Path) -> dict[str, set[int]]:
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
        out: dict[str, set[int]] = {}
        for tag, i in conn.execute("SELECT tag, i FROM t"):
            out.setdefault(tag, set()).add(i)
        return out
    finally:
        conn.close()


# -- plain file semantics ----------------------------------------------------------------------

def test_passthrough_and_log_of_writes_fsyncs_and_renames(fsmount):
    home = fsmount.mountpoint
    fd = os.open(home / "a", os.O_RDWR | os.O_CREAT, 0o600)
    os.pwrite(fd, b"x" * 100, 4000)
    os.fsync(fd)
    os.close(fd)
    os.rename(home / "a", home / "b")
    assert (home / "b").read_bytes() == b"\0" * 4000 + b"x" * 100
    assert sorted(os.listdir(home)) == ["b"]
    write = [r for r in events(fsmount, "write") if r["path"] == "a"]
    assert write[0]["off"] == 4000 and write[0]["len"] == 100 and write[0]["pid"] == os.getpid()
    fsync = events(fsmount, "fsync")[0]
    assert fsync["path"] == "a" and fsync["len"] == 4100
    assert events(fsmount, "rename")[0]["dest"] == "b"


def test_power_cut_drops_unsynced_data_even_for_a_descriptor_held_across_it(fsmount):
    home = fsmount.mountpoint
    (home / "f").write_bytes(b"durable!")
    fd = os.open(home, os.O_RDONLY)
    os.fsync(fd)                                    # the name is durable too
    os.close(fd)
    with open(home / "f", "r+b") as f:
        os.fsync(f.fileno())
        f.write(b"UNSYNCED and longer")
        f.flush()
        f.seek(0)
        assert f.read() == b"UNSYNCED and longer"
        result = fsmount.power_cut()
        fsmount.power_on()
        f.seek(0)
        assert f.read() == b"durable!"              # direct_io: no page cache hides the drop
    assert (home / "f").read_bytes() == b"durable!"
    assert result["dropped"][0]["path"] == "f"


def test_created_file_needs_a_directory_fsync(fsmount):
    home = fsmount.mountpoint
    for name in ("kept", "lost"):
        fd = os.open(home / name, os.O_WRONLY | os.O_CREAT, 0o600)
        os.write(fd, name.encode())
        os.fsync(fd)
        os.close(fd)
        if name == "kept":
            dfd = os.open(home, os.O_RDONLY)
            os.fsync(dfd)
            os.close(dfd)
    os.rename(home / "kept", home / "renamed")      # not followed by a directory fsync
    undone = fsmount.power_cut()["undone"]
    fsmount.power_on()
    assert sorted(os.listdir(home)) == ["kept"]
    assert (home / "kept").read_bytes() == b"kept"
    assert [u["op"] for u in undone] == ["rename", "create"]


def test_writes_while_down_fail_and_control_errors_are_clear(fsmount):
    home = fsmount.mountpoint
    (home / "f").write_bytes(b"x")
    fsmount.power_cut()
    with pytest.raises(OSError) as exc:
        (home / "g").write_bytes(b"y")
    assert exc.value.errno == 5                   # EIO: the machine is off
    fsmount.power_on()
    with pytest.raises(FsControlError, match="errno"):
        fsmount.arm(kind="io_error", errno="EPERM")


def test_io_error_on_open_and_read(fsmount):
    home = fsmount.mountpoint
    (home / "data").write_bytes(b"abc")
    fsmount.arm(kind="io_error", op="read", path="^data$", nth=1)
    with pytest.raises(OSError) as exc:
        (home / "data").read_bytes()
    assert exc.value.errno == 5
    assert (home / "data").read_bytes() == b"abc"   # nth: once
    fsmount.arm(kind="io_error", op="open", path="^data$", errno="EROFS", persistent=True)
    for _ in range(2):
        with pytest.raises(OSError) as exc:
            open(home / "data", "rb")
        assert exc.value.errno == 30
    faults = events(fsmount, "fault")
    assert [f["op"] for f in faults] == ["read", "open", "open"]


def test_mount_disappears_when_its_owner_is_killed(tmp_path):
    reason = fuse_unavailable_reason()
    if reason:
        pytest.skip(reason)
    script = (
        "import sys, time\n"
        "from chaos.fs import FaultyMount\n"
        f"m = FaultyMount({str(tmp_path / 'b')!r}, {str(tmp_path / 'h')!r}, {str(tmp_path / 'l')!r})\n"
        "m.start()\n"
        f"open({str(tmp_path / 'h' / 'f')!r}, 'w').write('evidence')\n"
        "print('MOUNTED', flush=True)\n"
        "time.sleep(600)\n")
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=str(REPO))
    line = owner.stdout.readline().strip()
    if line != "MOUNTED":
        owner.kill()
        pytest.skip(f"could not mount: {(tmp_path / 'l.stderr').read_text(errors='replace')}")
    assert os.path.ismount(tmp_path / "h")
    owner.kill()
    owner.wait(timeout=HANG_GUARD_S)
    owner.stdout.close()
    deadline = time.monotonic() + HANG_GUARD_S      # hang guard: the lifeline unmounts
    while os.path.ismount(tmp_path / "h") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not os.path.ismount(tmp_path / "h")
    recs = list(read_fs_log(tmp_path / "l"))
    assert any(r["ev"] == "lifeline_lost" for r in recs)
    deadline = time.monotonic() + HANG_GUARD_S      # the daemon flushes at unmount
    while not any(r["ev"] == "unmount" for r in read_fs_log(tmp_path / "l")) \
            and time.monotonic() < deadline:
        time.sleep(0.05)
    assert (tmp_path / "b" / "f").read_text() == "evidence"


# -- SQLite on the mount -----------------------------------------------------------------------

def test_wal_index_is_mmapped_and_shared_by_several_processes(fsmount):
    db = fsmount.mountpoint / "t.db"
    writers = [Acker(db, f"w{i}", "NORMAL", 150) for i in range(3)]
    maps = Path(f"/proc/{writers[0].proc.pid}/maps").read_text()
    assert str(db) + "-shm" in maps               # SQLite mapped the -shm through FUSE
    for w in writers:
        w.go()
    for w in writers:
        w.read_until()
        w.kill()
    assert rows(db) == {f"w{i}": set(range(150)) for i in range(3)}
    assert not any(w.errors for w in writers)


@pytest.mark.parametrize("sync", ["FULL", "NORMAL"])
def test_power_cut_under_several_writers(fsmount, sync):
    db = fsmount.mountpoint / "t.db"
    writers = [Acker(db, f"w{i}", sync) for i in range(3)]
    for w in writers:
        w.go()
    for w in writers:
        w.read_until(acks=60)
    cut(fsmount, *writers)
    found = rows(db)                                # integrity_check is ok
    for w in writers:
        have = found.get(w.tag, set())
        lost = set(w.acks) - have
        if sync == "FULL":
            assert not lost, f"{w.tag} lost acknowledged rows {sorted(lost)} under FULL"
        else:                                      # NORMAL: a lost commit takes every later one
            assert not lost or min(lost) > max(have, default=-1)
    assert events(fsmount, "power_cut")


def test_torn_wal_frame(fsmount):
    db = fsmount.mountpoint / "t.db"
    w = Acker(db, "w", "NORMAL")
    fault = fsmount.arm(kind="torn_write", path="-wal$", nth=40, keep_bytes=1000)
    w.go()
    assert fsmount.wait_down(HANG_GUARD_S)
    w.kill()
    fsmount.power_on()
    found = rows(db).get("w", set())                 # the torn frame fails its checksum
    assert found == set(range(len(found)))           # a prefix of the commits survives
    assert found <= set(w.acks)
    torn = [r for r in events(fsmount, "fault") if r["kind"] == "torn_write"]
    assert torn and torn[0]["id"] == fault["id"] and torn[0]["kept"] == 1000
    assert torn[0]["path"] == "t.db-wal"


def test_eio_on_wal_fsync_reaches_the_caller(fsmount):
    db = fsmount.mountpoint / "t.db"
    w = Acker(db, "w", "FULL", 30)
    fsmount.arm(kind="io_error", op="fsync", path="-wal$", nth=10)
    w.go()
    w.read_until()
    w.kill()
    assert len(w.errors) == 1 and "disk I/O error" in w.errors[0]
    failed = int(w.errors[0].split()[0])
    assert failed not in w.acks and len(w.acks) == 29
    assert rows(db)["w"] == set(w.acks)              # the failed commit is not in the store
    fsyncs = [r for r in events(fsmount, "fsync") if r.get("err")]
    assert fsyncs[0]["path"] == "t.db-wal" and fsyncs[0]["err"] == "EIO"


def test_enospc_while_the_wal_grows(fsmount):
    db = fsmount.mountpoint / "t.db"
    w = Acker(db, "w", "NORMAL", 40)
    fsmount.arm(kind="io_error", op="write", path="-wal$", errno="ENOSPC", extending=True,
                nth=20)
    w.go()
    w.read_until()
    w.kill()
    assert len(w.errors) == 1 and "full" in w.errors[0]
    assert rows(db)["w"] == set(w.acks)


def test_slow_fsync_delays_the_commit_and_is_logged(fsmount):
    db = fsmount.mountpoint / "t.db"
    w = Acker(db, "w", "FULL", 5)
    fsmount.arm(kind="slow_io", op="fsync", path="-wal$", delay=0.3, nth=2, count=1)
    w.go()
    w.read_until()
    w.kill()
    assert w.acks == list(range(5))
    slow = [r for r in events(fsmount, "fault") if r["kind"] == "slow_io"]
    assert len(slow) == 1 and slow[0]["delay"] == 0.3
    done = [r for r in events(fsmount, "fsync") if r["path"] == "t.db-wal" and r["pid"] == slow[0]["pid"]
            and r["mono"] > slow[0]["mono"]][0]
    assert done["mono"] - slow[0]["mono"] >= 0.3      # the fsync returned after the stall
    status = fsmount.status()
    assert status["faults"][0]["fired"] == 1


def test_the_stores_atomic_writes_survive_a_power_cut_and_noreplace_holds(fsmount):
    from hermes_state.files import atomic

    home = fsmount.mountpoint
    atomic.write_file(home / "manifest.json", b'{"ok": 1}')
    with pytest.raises(FileExistsError):
        atomic.rename_noreplace(home / "manifest.json", home / "manifest.json")
    (home / "scratch").write_bytes(b"never synced")
    fsmount.power_cut()
    fsmount.power_on()
    assert (home / "manifest.json").read_bytes() == b'{"ok": 1}'   # file and directory fsynced
    assert not (home / "scratch").exists()
    renames = [r for r in events(fsmount, "rename") if r["dest"] == "manifest.json"]
    assert renames and events(fsmount, "fsyncdir")
