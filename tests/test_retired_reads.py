"""Reads beside a retired WAL, identity over link text, damaged stores held open (issue 11.5-11.7).

Real child processes hold the store (tests/helpers/store_child.py); files are really removed,
renamed, replaced, re-linked or zeroed under them.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.errors import DeletedWalGenerationError, StateDbCorruptError
from hermes_state.operator.doctor import run_doctor
from hermes_state.processes import holders

REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 120


def cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "hermes_state", *map(str, args)],
                          capture_output=True, text=True, timeout=HANG_GUARD_S, env=env)


@pytest.fixture
def held(tmp_path, spawn):
    """A store with a checkpointed session ``old`` and a child holding it that wrote ``new``
    (still only in its WAL)."""
    path = tmp_path / "home" / "state.db"
    with SessionDB(path) as db:
        db.create_session("old", source="cli")
        db.append_message("old", "user", "checkpointed hello")
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="new")
    child.ok("append", sid="new", n=3, prefix="in-wal")
    return path, child


def ident(path) -> tuple | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


# --------------------------------------------------------------------------- 5: reads go on

WAL_FATES = ("removed", "renamed", "replaced-empty", "replaced-other")


def retire_wal(path: Path, fate: str, tmp_path: Path) -> None:
    wal = Path(f"{path}-wal")
    if fate == "removed":
        os.unlink(wal)
    elif fate == "renamed":
        os.rename(wal, f"{wal}.bak")
    elif fate == "replaced-empty":
        os.unlink(wal)
        wal.write_bytes(b"")
    elif fate == "replaced-other":
        other = tmp_path / "other" / "state.db"
        db = SessionDB(other)
        db.create_session("elsewhere", source="cli")
        os.unlink(wal)
        wal.write_bytes(Path(f"{other}-wal").read_bytes())
        db.close()


@pytest.mark.parametrize("fate", WAL_FATES)
def test_reads_keep_working_while_a_holder_keeps_a_retired_wal(held, tmp_path, fate):
    """SPEC §10.4: read-only opens and list/show/search/export work; only writes refuse; no
    reader mints a new -wal/-shm beside the store."""
    path, child = held
    retire_wal(path, fate, tmp_path)
    before = {s: ident(f"{path}{s}") for s in ("-wal", "-shm")}
    with SessionDB(path, read_only=True) as ro:
        assert [s["id"] for s in ro.list_sessions()] == ["old"]
        assert ro.get_messages("old")[0]["content"] == "checkpointed hello"
        assert [h["session_id"] for h in ro.search_messages("checkpointed")] == ["old"]
        assert [h.pid for h in ro.connection.retired_holders] == [child.pid]
    for args in (("sessions", "list"), ("sessions", "show", "old"),
                 ("sessions", "search", "checkpointed"), ("sessions", "export", "old")):
        out = cli("--home", path.parent, *args)
        assert out.returncode == 0, (args, out.stderr)
        assert "old" in out.stdout and "disk I/O error" not in out.stderr, (args, out)
        assert f"PID {child.pid}" in out.stderr  # the warning names the holder
    assert {s: ident(f"{path}{s}") for s in ("-wal", "-shm")} == before  # nothing minted
    with pytest.raises(DeletedWalGenerationError):
        SessionDB(path)  # writers still refuse (SPEC §10.4)
    reply = child.call("append", sid="new", n=1)
    assert not reply["ok"] and reply["error"] == "DeletedWalGenerationError"


def test_read_only_handle_in_the_holding_process_itself_works(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("old", source="cli")
    db = SessionDB(path)
    db.create_session("new", source="cli")
    os.unlink(f"{path}-wal")
    with SessionDB(path, read_only=True) as ro:
        assert [s["id"] for s in ro.list_sessions()] == ["old"]
    assert not os.path.exists(f"{path}-wal")
    with pytest.raises(DeletedWalGenerationError):
        db.create_session("x", source="cli")
    db.close()


# --------------------------------------------------------------------------- 6: identity decides

def relink_same_inode(path: Path) -> None:
    """Make the holder's descriptors read ``... (deleted)`` while the SAME inode stays at the
    path (what ZFS shows): link aside, unlink the name the holder opened, link it back."""
    for suffix in ("-wal", "-shm"):
        name = f"{path}{suffix}"
        os.link(name, f"{name}.relink")
        os.unlink(name)
        os.link(f"{name}.relink", name)
        os.unlink(f"{name}.relink")


def test_sidecars_relinked_to_the_same_inode_are_not_retired(tmp_path, spawn):
    path = tmp_path / "home" / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=2)
    relink_same_inode(path)
    links = [os.readlink(f"/proc/{child.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{child.pid}/fd")]
    assert any(t.endswith("state.db-wal (deleted)") for t in links), links  # the link text lies
    scan = holders.scan(path)
    assert [h.pid for h in scan.holders] == [child.pid]
    assert scan.retired_holders == []
    assert not any("(deleted)" in f for f in scan.holders[0].files)
    with SessionDB(path) as db:  # the open-time refusal does not fire
        db.append_message("s", "user", "from a second writer")
    report = run_doctor(path)
    assert not report.stopped_early
    assert not any("retired" in f.title for f in report.findings), report.render()
    child.ok("append", sid="s", n=1)  # the holder's generation is untouched: it still writes
    with SessionDB(path, read_only=True) as ro:
        assert len(ro.get_messages("s")) == 4


def test_a_really_deleted_wal_is_still_retired_after_the_identity_check(tmp_path, spawn):
    path = tmp_path / "home" / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    os.unlink(f"{path}-wal")
    Path(f"{path}-wal").write_bytes(b"")  # another inode at the path now
    assert [h.pid for h in holders.scan(path).retired_holders] == [child.pid]


# --------------------------------------------------------------------------- 7: damaged + held

@pytest.mark.parametrize("damage", ["zeroed", "garbage"])
def test_damaged_store_held_by_another_process_is_a_named_refusal(tmp_path, spawn, damage):
    path = tmp_path / "home" / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=2)
    size = path.stat().st_size
    with open(path, "r+b") as fh:  # damage the main file under the holder (same inode)
        fh.write(b"\0" * size if damage == "zeroed" else b"not a database at all" * 50)
    for ro in (False, True):
        with pytest.raises(StateDbCorruptError) as err:
            db = SessionDB(path, read_only=ro)
            db.list_sessions()
        text = str(err.value)
        assert str(path) in text and "recover" in text, text
        if not ro:
            assert f"PID {child.pid}" in text and err.value.holders
    assert not list(path.parent.glob("state.db.corrupt.*"))  # never moved under the holder
    out = cli("--home", path.parent, "sessions", "list")
    assert out.returncode == 1 and "damaged" in out.stderr and "Traceback" not in out.stderr


def _start_together(n: int, path: Path) -> list[subprocess.CompletedProcess]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    code = ("import sys\nfrom hermes_state import SessionDB\nsys.stdin.readline()\n"
            "try:\n    db = SessionDB(sys.argv[1])\n    db.create_session(f'x{sys.argv[2]}', "
            "source='cli')\n    db.close()\n    print('OK')\n"
            "except Exception as e:\n    print('ERR', type(e).__name__, str(e).splitlines()[0])\n")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), str(i)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env) for i in range(n)]
    for p in procs:  # every process is started and waiting: release them at once
        p.stdin.write("go\n")
    for p in procs:
        p.stdin.flush()
    results = []
    for p in procs:
        out, err = p.communicate(timeout=HANG_GUARD_S)
        results.append(subprocess.CompletedProcess(p.args, p.returncode, out, err))
    return results


@pytest.mark.parametrize("round_", range(3))
def test_processes_starting_at_once_on_a_zeroed_store_all_succeed_or_name_it(tmp_path, round_):
    path = tmp_path / "state.db"
    path.write_bytes(b"\0" * 8192)
    results = _start_together(4, path)
    outs = [r.stdout.strip() for r in results]
    for r in results:
        assert r.returncode == 0 and "Traceback" not in r.stderr, r
    for line in outs:
        assert line == "OK" or (line.startswith("ERR StateDbCorruptError") and str(path) in line), outs
    assert "file is not a database" not in " ".join(outs)
    assert outs.count("OK") >= 1
    backups = list(tmp_path.glob("state.db.corrupt.*.bak"))
    assert len(backups) == 1 and backups[0].read_bytes() == b"\0" * 8192
    with SessionDB(path, read_only=True) as ro:
        assert len(ro.list_sessions()) == outs.count("OK")


def _has_open(pid: int, path: str) -> bool:
    """True when ``pid`` has a descriptor of ``path`` (it polls a lock on it)."""
    try:
        return any(os.readlink(f"/proc/{pid}/fd/{fd}") == path
                   for fd in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return False


def test_a_starting_process_reading_the_header_is_not_taken_for_a_holder(tmp_path):
    """The race behind "two processes starting at once on a zeroed store": the quarantining
    process's holder scan saw the other one's brief header read and refused to move the file.
    A reader that is mid-read (it holds the quarantine lock shared, as every starting process
    does while its descriptor is open; issue 22 item 2: no longer the directory's lock) makes
    the quarantiner wait, not give up."""
    path = tmp_path / "state.db"
    path.write_bytes(b"\0" * 8192)
    qlock = f"{path}.quarantine.lock"
    env = dict(os.environ, PYTHONPATH=str(REPO))
    reader = subprocess.Popen(
        [sys.executable, "-c",
         "import fcntl, os, sys\n"
         f"d = os.open({qlock!r}, os.O_RDWR | os.O_CREAT, 0o600)\nfcntl.flock(d, fcntl.LOCK_SH)\n"
         f"f = os.open({str(path)!r}, os.O_RDONLY)\nprint('READING', flush=True)\n"
         "sys.stdin.readline()\nos.close(f)\nos.close(d)\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert reader.stdout.readline().strip() == "READING"
        opener = subprocess.Popen(
            [sys.executable, "-c", "import sys\nfrom hermes_state import SessionDB\n"
             "try:\n    SessionDB(sys.argv[1]).close()\n    print('OK')\n"
             "except Exception as e:\n    print('ERR', type(e).__name__, e)\n", str(path)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        while opener.poll() is None and not _has_open(opener.pid, qlock):
            threading.Event().wait(0.01)  # until it waits for the lock (polling), or is done
        reader.stdin.write("go\n")
        reader.stdin.flush()
        out, err = opener.communicate(timeout=HANG_GUARD_S)
    finally:
        reader.kill()
        reader.wait(timeout=HANG_GUARD_S)
    assert out.strip() == "OK", (out, err)
    assert len(list(tmp_path.glob("state.db.corrupt.*.bak"))) == 1


def test_a_store_being_created_during_the_holder_scan_is_not_called_damaged(tmp_path, monkeypatch):
    """Found by zeroed_store_two_starters under load: the empty file another starter had just
    created was judged damaged, then that starter wrote page 1 while the scan ran; the size
    check after the scan saw a non-empty file and refused as if it were damage."""
    from hermes_state.store import quarantine

    path = tmp_path / "state.db"
    path.write_bytes(b"")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    creator = subprocess.Popen(  # holds the empty file, as a starting SQLite connection does
        [sys.executable, "-c", f"import sys\nf = open({str(path)!r}, 'rb')\n"
         "print('HOLDING', flush=True)\nsys.stdin.readline()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
    other = tmp_path / "other.db"
    SessionDB(other).close()
    real_scan = holders.scan

    def scan_while_page_one_lands(db_path, **kw):
        found = real_scan(db_path, **kw)
        with open(path, "r+b") as fh:  # the creator's first page arrives meanwhile
            fh.write(other.read_bytes())
        return found

    try:
        assert creator.stdout.readline().strip() == "HOLDING"
        monkeypatch.setattr(quarantine.holders, "scan", scan_while_page_one_lands)
        assert quarantine.quarantine_if_not_sqlite(path) is None
    finally:
        creator.kill()
        creator.wait(timeout=HANG_GUARD_S)
    assert not list(tmp_path.glob("state.db.corrupt.*"))
