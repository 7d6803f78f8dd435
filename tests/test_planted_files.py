"""Planted symlinks, FIFOs and devices in HERMES_HOME; exclusive 0600/0700 creation (issue 11.3, 11.4).

Every file the store and the CLI create beside the store is created without following links and
exclusively, mode 0600 (directories 0700); nothing ever opens a FIFO or device to read evidence
or a store file. Hang-prone cases run the CLI (or a SessionDB) in a real subprocess with a hang
guard: before the fix they blocked forever on a FIFO.
"""

from __future__ import annotations

import json
import os
import select
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.api.spool import divert_to_spool, replay_spool
from hermes_state.errors import DeletedWalGenerationError, StorePermissionError
from hermes_state.operator.snapshots import (
    SnapshotError,
    create_snapshot,
    list_snapshots,
)
from hermes_state.store.quarantine import quarantine_if_not_sqlite

REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = float(os.environ.get("HERMES_TEST_HANG_GUARD_S", 120))  # hang guard only

KINDS = ("symlink", "dangling-symlink", "fifo", "chardev", "socket", "dir")


def plant(path: Path, kind: str, victim: Path) -> None:
    """Put a file of ``kind`` at ``path``; links point at ``victim``."""
    if kind == "symlink":
        os.symlink(victim, path)
    elif kind == "dangling-symlink":
        os.symlink(victim.with_name("does-not-exist"), path)
    elif kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "chardev":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # what /dev/zero is
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
        sock.close()
    elif kind == "dir":
        os.mkdir(path)


def cli(*args: str, cwd: Path | None = None, timeout: float = HANG_GUARD_S):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "hermes_state", *map(str, args)],
                          capture_output=True, text=True, timeout=timeout, env=env,
                          cwd=str(cwd) if cwd else None)


def run_py(code: str, timeout: float = HANG_GUARD_S) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture
def victim(tmp_path) -> Path:
    out = tmp_path / "outside" / "victim.txt"
    out.parent.mkdir()
    out.write_text("precious\n")
    return out


@pytest.fixture
def home(tmp_path) -> Path:
    h = tmp_path / "home"
    with SessionDB(h / "state.db") as db:
        db.create_session("s1", source="cli")
        db.append_message("s1", "user", "hello")
    return h


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# --------------------------------------------------------------------------- 3: symlinks, modes

def test_quarantine_lock_symlink_never_truncates_its_target(tmp_path, victim):
    """The issue's exploit: a symlink at the quarantine lock path had its target truncated."""
    db = tmp_path / "state.db"
    db.write_bytes(b"\0" * 4096)  # damaged: the open quarantines it under the lock
    os.symlink(victim, f"{db}.quarantine.lock")
    with pytest.raises(StorePermissionError, match="quarantine.lock"):
        quarantine_if_not_sqlite(db)
    assert victim.read_text() == "precious\n"
    assert db.read_bytes() == b"\0" * 4096  # nothing moved either


@pytest.mark.parametrize("kind", ["symlink", "fifo", "dir"])
def test_quarantine_lock_of_another_kind_is_refused_by_name(tmp_path, victim, kind):
    db = tmp_path / "state.db"
    db.write_bytes(b"\0" * 4096)
    plant(Path(f"{db}.quarantine.lock"), kind, victim)
    with pytest.raises(StorePermissionError) as err:
        quarantine_if_not_sqlite(db)
    assert "quarantine.lock" in str(err.value)
    assert victim.read_text() == "precious\n"


def test_quarantine_copy_gets_the_next_free_name(tmp_path, victim, monkeypatch):
    """A name already taken (even by a dangling link) is skipped, never replaced."""
    from hermes_state.store import quarantine

    monkeypatch.setattr(quarantine, "utc_stamp", lambda: "20300101T000000Z")
    db = tmp_path / "state.db"
    db.write_bytes(b"junk" * 100)
    os.symlink(victim, tmp_path / "state.db.corrupt.20300101T000000Z.bak")
    os.symlink(tmp_path / "nowhere", tmp_path / "state.db.corrupt.20300101T000000Z-2.bak")
    (tmp_path / "state.db.corrupt.20300101T000000Z-3.bak-wal").write_text("taken")
    backup = quarantine_if_not_sqlite(db)
    assert backup == tmp_path / "state.db.corrupt.20300101T000000Z-4.bak"
    assert backup.read_bytes() == b"junk" * 100
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("kind", ["symlink", "dangling-symlink", "fifo", "chardev"])
def test_snapshot_dir_that_is_not_a_directory_is_refused(home, victim, kind):
    plant(home / "state-snapshots", kind, victim.parent)
    with pytest.raises(StorePermissionError, match="state-snapshots"):
        create_snapshot(home / "state.db")
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"]
    out = cli("--home", home, "backup")
    assert out.returncode == 1 and "state-snapshots" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


def test_symlinked_sessions_dir_is_refused_not_written_through(home, victim):
    os.symlink(victim.parent, home / "sessions")
    with pytest.raises(StorePermissionError, match="sessions"):
        divert_to_spool(home, "s1", [{"role": "user", "content": "x"}])
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"]
    with SessionDB(home / "state.db") as db, pytest.raises(StorePermissionError):
        replay_spool(db)


@pytest.mark.parametrize("kind", KINDS)
def test_spool_file_of_another_kind_is_refused_without_blocking(home, victim, kind):
    (home / "sessions").mkdir(mode=0o700)
    spool = home / "sessions" / "s1.jsonl"
    plant(spool, kind, victim)
    code = (f"from hermes_state.api.spool import divert_to_spool\n"
            f"try:\n    divert_to_spool({str(home)!r}, 's1', [{{'role': 'user', 'content': 'x'}}])\n"
            f"except OSError as e:\n    print('REFUSED', e)\n")
    out = run_py(code)
    assert out.stdout.startswith("REFUSED") and "s1.jsonl" in out.stdout, out
    assert victim.read_text() == "precious\n"


def test_spool_file_hard_linked_elsewhere_is_refused(home, victim):
    (home / "sessions").mkdir(mode=0o700)
    os.link(victim, home / "sessions" / "s1.jsonl")
    with pytest.raises(StorePermissionError, match="hard links"):
        divert_to_spool(home, "s1", [{"role": "user", "content": "x"}])
    assert victim.read_text() == "precious\n"


def test_capture_name_taken_gets_the_next_free_name(tmp_path, victim, monkeypatch):
    """A capture is never given up: taken names (a dangling link, a file, a dir) are skipped."""
    from hermes_state.processes import capture as generation  # the capture moved (issue 22.1)

    monkeypatch.setattr(generation, "utc_stamp", lambda: "20300101T000000Z")
    db_path = tmp_path / "state.db"
    db = SessionDB(db_path)
    db.create_session("s1", source="cli")
    db.append_message("s1", "user", "before")
    base = tmp_path / f"state.db.retired-wal-20300101T000000Z-{os.getpid()}"
    os.symlink(victim.with_name("gone"), base)          # dangling: the old code renamed onto it
    Path(f"{base}-2").write_text("a file")
    os.symlink(victim.parent, f"{base}-3")
    os.unlink(f"{db_path}-wal")
    with pytest.raises(DeletedWalGenerationError):
        db.append_message("s1", "user", "after")
    capture = Path(db.connection.capture_dir)
    assert capture == Path(f"{base}-4")
    assert mode(capture) == 0o700
    assert all(mode(p) == 0o600 for p in capture.iterdir()), {p.name: oct(mode(p))
                                                              for p in capture.iterdir()}
    manifest = json.loads((capture / "manifest.json").read_text())
    assert manifest["trigger"] == "halt" and manifest["wal"]["bytes"] > 0
    assert sorted(p.name for p in victim.parent.iterdir()) == ["victim.txt"]
    db.close()


def test_every_created_file_is_0600_and_every_directory_0700(home, tmp_path):
    """Snapshots, manifests, spool, exports, recover outputs and reports: under umask 022."""
    old = os.umask(0o022)
    try:
        snap = create_snapshot(home / "state.db")
        spool = divert_to_spool(home, "s1", [{"role": "user", "content": "x"}])
        export = tmp_path / "out" / "export.json"
        export.parent.mkdir()
        assert cli("--home", home, "sessions", "export", "-o", export).returncode == 0
        report = tmp_path / "out" / "report.json"
        recovered = tmp_path / "out" / "new.db"
        assert cli("sessions", "recover", home / "state.db", "--output", recovered,
                   "--report", report).returncode == 0
    finally:
        os.umask(old)
    for path in (Path(snap["path"]), Path(snap["dir"]) / "manifest.json", spool, export, report,
                 recovered):
        assert mode(path) == 0o600, (path, oct(mode(path)))
    for path in (home / "state-snapshots", Path(snap["dir"]), home / "sessions"):
        assert mode(path) == 0o700, (path, oct(mode(path)))
    assert json.loads(export.read_text())[0]["messages"][0]["content"] == "hello"


@pytest.mark.parametrize("kind", ["symlink", "dangling-symlink", "chardev", "socket", "dir"])
def test_export_never_writes_through_a_planted_file(home, victim, kind, tmp_path):
    target = tmp_path / "export.json"
    plant(target, kind, victim)
    out = cli("--home", home, "sessions", "export", "-o", target)
    assert out.returncode == 1 and "export.json" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr
    assert victim.read_text() == "precious\n"


def test_export_replaces_an_existing_regular_file_atomically(home, tmp_path):
    target = tmp_path / "export.json"
    target.write_text("old")
    other = tmp_path / "hardlink-to-old"
    os.link(target, other)
    assert cli("--home", home, "sessions", "export", "-o", target).returncode == 0
    assert json.loads(target.read_text())[0]["id"] == "s1"
    assert other.read_text() == "old"  # replaced by a rename, never written through
    assert not list(tmp_path.glob("*.partial"))


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
def test_recover_report_never_written_through_a_planted_file(home, victim, kind, tmp_path):
    report = tmp_path / "r.json"
    plant(report, kind, victim)
    out = cli("sessions", "recover", home / "state.db", "--inspect-only",
              "--report", report)
    assert out.returncode == 1 and "r.json" in out.stderr, out.stderr
    assert victim.read_text() == "precious\n"


# --------------------------------------------------------------------------- 4: FIFOs, devices

@pytest.mark.parametrize("kind", ["fifo", "chardev", "socket", "dir"])
def test_special_file_at_state_db_is_refused_by_every_opener(tmp_path, victim, kind):
    home = tmp_path / "h"
    home.mkdir()
    plant(home / "state.db", kind, victim)
    for args in (("sessions", "list"), ("sessions", "search", "x"), ("doctor",), ("backup",),
                 ("sessions", "export")):
        out = cli("--home", home, *args)
        assert out.returncode == 1, (args, out)
        assert "Traceback" not in out.stderr, (args, out.stderr)
        assert "state.db" in out.stderr + out.stdout, (args, out)
    code = (f"from hermes_state import SessionDB\nimport sys\n"
            f"for ro in (False, True):\n"
            f"    try:\n        SessionDB({str(home / 'state.db')!r}, read_only=ro)\n"
            f"    except OSError as e:\n        print('REFUSED', ro, e)\n")
    out = run_py(code)
    assert out.stdout.count("REFUSED") == 2 and "not a regular file" in out.stdout, out
    assert stat.S_IFMT(os.lstat(home / "state.db").st_mode) != stat.S_IFREG  # left in place


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_fifo_sidecar_is_refused(home, suffix):
    for s in ("-wal", "-shm"):
        if os.path.lexists(f"{home}/state.db{s}"):
            os.unlink(f"{home}/state.db{s}")
    os.mkfifo(f"{home}/state.db{suffix}")
    out = cli("--home", home, "sessions", "list")
    assert out.returncode == 1 and f"state.db{suffix}" in out.stderr, out
    out = run_py(f"from hermes_state import SessionDB\ntry:\n    SessionDB({str(home / 'state.db')!r})"
                 f"\nexcept OSError as e:\n    print('REFUSED', e)\n")
    assert "REFUSED" in out.stdout, out


@pytest.mark.parametrize("kind", ["fifo", "chardev", "symlink"])
def test_spool_special_files_never_block_replay_or_doctor(home, victim, kind):
    (home / "sessions").mkdir(mode=0o700)
    divert_to_spool(home, "s1", [{"role": "user", "content": "spooled"}])
    plant(home / "sessions" / "odd.jsonl", kind, victim)
    out = cli("--home", home, "sessions", "replay-spool")
    assert out.returncode == 1 and "odd.jsonl" in out.stderr, out
    assert "imported 1 message(s)" in out.stdout
    doc = cli("--home", home, "doctor", "--json")
    assert "Traceback" not in doc.stderr
    report = json.loads(doc.stdout)
    assert any("odd.jsonl" in " ".join(f["detail"]) for f in report["findings"]), report


def test_fifo_manifests_never_block_backup_list_or_doctor(home, victim):
    snap = create_snapshot(home / "state.db")
    Path(snap["dir"], "manifest.json").unlink()
    os.mkfifo(Path(snap["dir"], "manifest.json"))
    capture = home / "state.db.retired-wal-20300101T000000Z-1"
    capture.mkdir()
    os.mkfifo(capture / "manifest.json")
    out = cli("--home", home, "backup", "list", "--json")
    assert out.returncode == 0, out
    items = json.loads(out.stdout)
    assert [i["verified"] for i in items] == [False]
    doc = cli("--home", home, "doctor")
    assert "Traceback" not in doc.stderr and "no readable manifest.json" in doc.stdout, doc
    assert cli("--home", home, "backup").returncode == 0  # retention reads it too


def test_export_to_a_fifo_without_reader_fails_at_once_and_with_one_streams(home, tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    out = cli("--home", home, "sessions", "export", "-o", fifo)  # the old code blocked here
    assert out.returncode == 1 and "no reader" in out.stderr, out
    rfd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader is there before the writer
    env = dict(os.environ, PYTHONPATH=str(REPO))
    writer = subprocess.Popen([sys.executable, "-m", "hermes_state", "--home", str(home),
                               "sessions", "export", "--format", "jsonl", "-o", str(fifo)],
                              stderr=subprocess.PIPE, text=True, env=env)
    data = b""
    try:
        while True:  # until the writer has exited and the pipe is drained
            select.select([rfd], [], [], 0.5)
            try:
                chunk = os.read(rfd, 1 << 16)
            except BlockingIOError:
                continue
            data += chunk
            if not chunk and writer.poll() is not None:
                break
    finally:
        os.close(rfd)
    assert writer.wait(timeout=HANG_GUARD_S) == 0, writer.stderr.read()
    assert json.loads(data.decode().splitlines()[0])["id"] == "s1"


def test_export_dash_o_dash_streams_to_stdout(home, tmp_path):
    out = cli("--home", home, "sessions", "export", "--format", "jsonl", "-o", "-", cwd=tmp_path)
    assert out.returncode == 0, out
    assert json.loads(out.stdout.splitlines()[0])["id"] == "s1"
    assert not (tmp_path / "-").exists()  # the old code created a file named "-"


def test_export_json_is_one_valid_array_streamed_item_by_item(home):
    with SessionDB(home / "state.db") as db:
        for i in range(3):
            db.create_session(f"x{i}", source="cli")
    out = cli("--home", home, "sessions", "export")
    data = json.loads(out.stdout)
    assert sorted(d["id"] for d in data) == ["s1", "x0", "x1", "x2"]


def test_recover_never_opens_a_fifo_sidecar(home, tmp_path):
    src = tmp_path / "copy" / "state.db"
    src.parent.mkdir()
    src.write_bytes((home / "state.db").read_bytes())
    os.mkfifo(f"{src}-wal")
    out = cli("sessions", "recover", src, "--inspect-only")
    assert out.returncode == 1 and "state.db-wal" in out.stderr and "FIFO" in out.stderr, out
    os.unlink(f"{src}-wal")
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    out = cli("sessions", "recover", fifo, "--inspect-only")
    assert out.returncode == 1 and "FIFO" in out.stderr, out


def test_snapshot_of_a_fifo_store_is_refused(tmp_path):
    os.mkfifo(tmp_path / "state.db")
    with pytest.raises(SnapshotError, match="FIFO"):
        create_snapshot(tmp_path / "state.db")
    assert list_snapshots(tmp_path / "state.db") == []
