"""Snapshots: backup / list / restore on real files with real holder processes (SPEC §13, §1).

Holders are real child processes (``tests/helpers/store_child.py`` through the ``spawn``
fixture, or a small writer script started with ``sys.executable``); damage is real bytes
written over a real b-tree page of a quiet store.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.errors import HermesStateError
from hermes_state.operator.snapshots import (
    RestoreRefused,
    SnapshotError,
    SnapshotFailed,
    SnapshotNotFound,
    create_snapshot,
    list_snapshots,
    restore_snapshot,
    sanitize_reason,
)

REPO = Path(__file__).resolve().parent.parent
STAMP = r"\d{8}T\d{6}Z"


# --------------------------------------------------------------------------- helpers

def make_store(path: Path, sessions: int = 2, messages: int = 5, prefix: str = "m") -> None:
    with SessionDB(path) as db:
        for s in range(sessions):
            sid = f"s{s}"
            db.create_session(sid, source="cli")
            for i in range(messages):
                db.append_message(sid, "user", f"{prefix} {s}-{i} " + "x" * 40)


def sha(path: Path) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


def live_bytes(path: Path) -> dict:
    return {suffix: (Path(f"{path}{suffix}").read_bytes() if Path(f"{path}{suffix}").exists()
                     else None) for suffix in ("", "-wal", "-shm")}


def image_rows(image: Path) -> list[tuple]:
    conn = sqlite3.connect(f"file:{image}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT id, session_id, content FROM messages ORDER BY id").fetchall()
    finally:
        conn.close()


def damage_a_messages_page(path: Path) -> int:
    """Overwrite one leaf page of the messages table of a QUIET store with garbage."""
    assert not Path(f"{path}-wal").exists() or Path(f"{path}-wal").stat().st_size == 0
    conn = sqlite3.connect(path)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        pages = [r[0] for r in conn.execute(
            "SELECT pageno FROM dbstat WHERE name='messages' AND pagetype='leaf' ORDER BY pageno")]
    finally:
        conn.close()
    assert len(pages) >= 3, "the store is too small to damage one page in the middle"
    page = pages[len(pages) // 2]
    with open(path, "r+b") as fh:
        fh.seek((page - 1) * page_size)
        fh.write(b"\xde\xad\xbe\xef" * (page_size // 4))
    return page


def snapshot_dirs(path: Path) -> list[str]:
    root = path.parent / "state-snapshots"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


@pytest.fixture
def store(tmp_path) -> Path:
    path = tmp_path / "home" / "state.db"
    make_store(path)
    return path


# --------------------------------------------------------------------------- create / list

def test_sanitize_reason():
    assert sanitize_reason("Pre Update!") == "pre-update"
    assert sanitize_reason("  weekly__backup  ") == "weekly-backup"
    assert sanitize_reason("a" * 100) == "a" * 40
    assert sanitize_reason("../../etc") == "etc"
    with pytest.raises(ValueError):
        sanitize_reason("!!!")


def test_snapshot_layout_manifest_and_standalone_image(store, tmp_path):
    before = live_bytes(store)
    result = create_snapshot(store, reason="Manual Backup!")
    assert re.fullmatch(rf"{STAMP}-manual-backup", result["id"])
    snap_dir = store.parent / "state-snapshots" / result["id"]
    image = snap_dir / "state.db"
    assert result["path"] == str(image) and result["dir"] == str(snap_dir)
    assert sorted(p.name for p in snap_dir.iterdir()) == ["manifest.json", "state.db"]
    manifest = json.loads((snap_dir / "manifest.json").read_text())
    for key in ("source", "source_sizes", "sha256", "schema_version", "sessions", "messages",
                "verified", "created_at", "reason", "sqlite", "bytes", "quick_check"):
        assert manifest[key] == result[key], key
    assert manifest["source"] == str(store)
    assert manifest["source_sizes"]["state.db"] == len(before[""])
    assert manifest["sha256"] == sha(image)
    assert manifest["bytes"] == image.stat().st_size
    assert manifest["schema_version"] == 23
    assert (manifest["sessions"], manifest["messages"]) == (2, 10)
    assert manifest["counts"] == {"sessions": 2, "messages": 10}
    assert manifest["verified"] is True and manifest["quick_check"] == ["ok"]
    assert manifest["reason"] == "manual-backup"
    assert manifest["sqlite"] == sqlite3.sqlite_version
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", manifest["created_at"])
    # One self-contained file: rollback-journal header, opens alone in another directory.
    assert image.read_bytes()[18] == 1
    alone = tmp_path / "alone" / "state.db"
    alone.parent.mkdir()
    shutil.copyfile(image, alone)
    assert image_rows(alone) == image_rows(store)
    # The store's main file was not written by the snapshot.
    assert store.read_bytes() == before[""]
    assert [s["id"] for s in list_snapshots(store)] == [result["id"]]


def test_snapshot_includes_commits_still_in_the_wal(tmp_path):
    """The three files are one image: rows only in the -wal of a live writer are in the snapshot."""
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        for i in range(7):
            db.append_message("s", "user", f"wal row {i}")
        assert Path(f"{path}-wal").stat().st_size > 0
        result = create_snapshot(path)
        assert result["messages"] == 7
        assert [r[2] for r in image_rows(Path(result["path"]))] == [f"wal row {i}"
                                                                    for i in range(7)]


def test_snapshot_of_a_missing_store_is_an_error(tmp_path):
    with pytest.raises(SnapshotError, match="no session store"):
        create_snapshot(tmp_path / "nothing" / "state.db")
    assert not (tmp_path / "nothing").exists()


WRITER = textwrap.dedent("""
    import select, sys
    from hermes_state import SessionDB
    db = SessionDB(sys.argv[1])
    db.create_session("w", source="writer")
    print("READY", flush=True)
    n = 0
    while True:
        db.append_message("w", "user", f"msg {n}")
        n += 1
        if n % 5 == 0 and select.select([sys.stdin], [], [], 0)[0]:
            break
    db.close()
    print(n, flush=True)
""")


@pytest.fixture
def writer(tmp_path):
    """Start ``WRITER`` on a path; SIGKILLed at teardown if still alive."""
    procs = []

    def start(path: Path) -> subprocess.Popen:
        script = tmp_path / "writer.py"
        script.write_text(WRITER)
        env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        proc = subprocess.Popen([sys.executable, str(script), str(path)], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "READY", proc.stderr.read()
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=60)
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            stream.close()


def test_snapshot_while_another_process_writes_is_a_consistent_point(tmp_path, writer):
    path = tmp_path / "state.db"
    make_store(path, sessions=1, messages=3)
    proc = writer(path)
    results = []
    deadline = time.monotonic() + 60
    while len(results) < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
        results.append(create_snapshot(path, reason="busy", keep=50))
    proc.stdin.write("stop\n")
    proc.stdin.flush()
    total = int(proc.stdout.readline())
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    seen = []
    for result in results:
        assert result["verified"] is True and result["quick_check"] == ["ok"]
        image = Path(result["path"])
        conn = sqlite3.connect(f"file:{image}?mode=ro", uri=True)
        try:
            contents = [r[0] for r in conn.execute(
                "SELECT content FROM messages WHERE session_id='w' ORDER BY id")]
            counter = conn.execute("SELECT message_count FROM sessions WHERE id='w'").fetchone()
            n_all = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        finally:
            conn.close()
        k = len(contents)
        # One point in time: a gap-free prefix of the writer's rows, and the session counter
        # written in the same transaction as each row agrees with it.
        assert contents == [f"msg {i}" for i in range(k)]
        assert counter == (k,)
        assert result["messages"] == n_all == k + 3
        assert result["sessions"] == 2
        seen.append(k)
    assert seen == sorted(seen)
    assert any(0 < k < total for k in seen), (seen, total)


# --------------------------------------------------------------------------- retention

def test_retention_keeps_newest_verified_and_a_failed_snapshot_never_pushes_one_out(tmp_path):
    path = tmp_path / "state.db"
    make_store(path, sessions=1, messages=300)
    good = [create_snapshot(path, keep=3)["id"] for _ in range(4)]
    assert snapshot_dirs(path) == sorted(good[1:])
    assert [s["id"] for s in list_snapshots(path)] == list(reversed(good[1:]))

    pristine = path.read_bytes()
    damage_a_messages_page(path)
    failed = []
    for _ in range(3):
        with pytest.raises(SnapshotFailed) as info:
            create_snapshot(path, keep=3)
        err = info.value
        assert isinstance(err, HermesStateError)
        assert "failed verification" in str(err) and "recover" in str(err)
        assert err.result["verified"] is False and err.result["quick_check"] != ["ok"]
        assert err.result["pruned"] == []
        failed.append(err.result["id"])
        manifest = json.loads((Path(err.result["dir"]) / "manifest.json").read_text())
        assert manifest["verified"] is False
        assert Path(err.result["path"]).exists()  # kept as evidence
    # Three failures later, the three good snapshots are all still there.
    assert snapshot_dirs(path) == sorted(good[1:] + failed)

    path.write_bytes(pristine)  # the store is quiet: put the good bytes back
    newest = create_snapshot(path, keep=3)
    assert newest["pruned"] == [good[1]]
    assert snapshot_dirs(path) == sorted(good[2:] + [newest["id"]] + failed)
    listed = list_snapshots(path)
    assert [s["id"] for s in listed if s["verified"]] == [newest["id"], good[3], good[2]]
    assert sorted(s["id"] for s in listed if not s["verified"]) == sorted(failed)


def test_retention_ignores_foreign_directories_and_backup_cleans_dead_partials(store):
    """A ``.partial`` nobody is building (a killed backup's leftover) is removed by the next
    backup; one whose builder still holds its flock, and foreign directories, are left alone."""
    import fcntl

    root = store.parent / "state-snapshots"
    root.mkdir()
    (root / "20000101T000000Z-manual.partial").mkdir()
    (root / "20000101T000001Z-manual.partial").mkdir()
    (root / "my-notes").mkdir()
    busy = os.open(root / "20000101T000001Z-manual.partial", os.O_RDONLY)
    fcntl.flock(busy, fcntl.LOCK_EX)  # a builder in progress (this test plays it)
    try:
        ids = [create_snapshot(store, keep=1)["id"] for _ in range(2)]
    finally:
        os.close(busy)
    assert snapshot_dirs(store) == sorted(["20000101T000001Z-manual.partial", "my-notes", ids[1]])
    assert [s["id"] for s in list_snapshots(store)] == [ids[1]]


# --------------------------------------------------------------------------- pre-update

BAK = re.compile(rf"^state\.db\.pre-update-emergency-{STAMP}(-\d+)?\.bak$")


def baks(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if BAK.match(p.name))


def test_pre_update_writes_a_bak_beside_the_store_and_keeps_two(tmp_path):
    path = tmp_path / "state.db"
    make_store(path, sessions=1, messages=300)
    made = []
    for _ in range(3):
        result = create_snapshot(path, reason="pre-update")
        assert result["kind"] == "pre-update" and result["verified"] is True
        assert BAK.match(result["id"]) and result["path"] == str(path.parent / result["id"])
        assert result["dir"] is None
        assert sha(Path(result["path"])) == result["sha256"]
        made.append(result["id"])
    assert baks(path) == sorted(made[1:])
    assert not (path.parent / "state-snapshots").exists() or snapshot_dirs(path) == []
    listed = [s for s in list_snapshots(path) if s["kind"] == "pre-update"]
    assert [s["id"] for s in listed] == list(reversed(made[1:]))
    assert image_rows(Path(listed[0]["path"])) == image_rows(path)

    # A pre-update image that fails verification is not a .bak: it is kept as a failed
    # snapshot and never pushes the two good .bak files out.
    damage_a_messages_page(path)
    with pytest.raises(SnapshotFailed) as info:
        create_snapshot(path, reason="pre-update")
    assert baks(path) == sorted(made[1:])
    failed_dir = Path(info.value.result["dir"])
    assert failed_dir.parent.name == "state-snapshots"
    assert re.fullmatch(rf"{STAMP}-pre-update", failed_dir.name)
    assert json.loads((failed_dir / "manifest.json").read_text())["verified"] is False


# --------------------------------------------------------------------------- restore

def test_restore_is_refused_while_a_holder_lives(store, spawn):
    snap = create_snapshot(store)
    child = spawn("store_child.py")
    child.ok("open", path=str(store))
    child.ok("create", sid="extra")
    child.ok("append", sid="extra", n=3)
    before = live_bytes(store)
    assert before["-wal"] is not None
    dirs_before = snapshot_dirs(store)
    with pytest.raises(RestoreRefused) as info:
        restore_snapshot(store, snap["id"])
    err = info.value
    text = str(err)
    assert "not restored" in text
    assert f"PID {child.pid} (" in text
    line = next(ln.strip() for ln in text.splitlines() if ln.strip().startswith(f"PID {child.pid}"))
    assert line.endswith("state.db, state.db-shm, state.db-wal")
    assert child.pid in [h[0] for h in err.holders]
    assert isinstance(err, HermesStateError)
    # Nothing was touched: the live files are byte-identical and no pre-restore snapshot exists.
    assert live_bytes(store) == before
    assert snapshot_dirs(store) == dirs_before
    child.ok("close")
    child.ok("exit")
    assert child.wait() == 0
    # Once the holder is gone the same restore goes through.
    assert restore_snapshot(store, snap["id"])["verified"] is True


def test_restore_is_refused_while_this_process_holds_the_store(store):
    snap = create_snapshot(store)
    with SessionDB(store):
        before = live_bytes(store)
        with pytest.raises(RestoreRefused) as info:
            restore_snapshot(store, snap["id"])
        assert f"PID {os.getpid()} (" in str(info.value)
        assert "this process" in str(info.value)
        assert live_bytes(store) == before


def test_restore_replaces_content_and_no_stale_wal_survives(tmp_path, spawn):
    path = tmp_path / "home" / "state.db"
    make_store(path, sessions=1, messages=4, prefix="A")
    snap = create_snapshot(path)
    expected = image_rows(Path(snap["path"]))
    # A writer commits more rows and is killed: its frames stay in a -wal beside the store.
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="late")
    child.ok("append", sid="late", n=6, prefix="B")
    child.kill()
    assert Path(f"{path}-wal").stat().st_size > 0

    result = restore_snapshot(path, snap["id"])
    assert result["restored"] is True and result["verified"] is True
    assert result["quick_check"] == ["ok"]
    assert (result["sessions"], result["messages"]) == (1, 4)
    assert result["sidecars"] == {"state.db-wal": False, "state.db-shm": False}
    assert not Path(f"{path}-wal").exists() and not Path(f"{path}-shm").exists()
    # The store as it was (with the killed writer's committed rows) was kept first.
    pre = result["pre_restore"]
    assert pre["verified"] is True and re.fullmatch(rf"{STAMP}-pre-restore(-\d+)?", pre["id"])
    kept = image_rows(Path(pre["path"]))
    assert [r[2] for r in kept if r[1] == "late"] == [f"B-{i}" for i in range(6)]

    assert image_rows(path) == expected
    with SessionDB(path) as db:
        assert db.get_session("late") is None
        assert [m["content"] for m in db.get_messages("s0")] == [r[2] for r in expected]
        assert db.connection.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        db.append_message("s0", "user", "after restore")
    with SessionDB(path) as db:
        assert db.get_messages("s0")[-1]["content"] == "after restore"


def test_restore_keeps_the_restored_snapshot_out_of_retention(store):
    ids = [create_snapshot(store, keep=2)["id"] for _ in range(2)]
    oldest = ids[0]
    result = restore_snapshot(store, oldest, keep=2)
    assert result["verified"] is True
    remaining = snapshot_dirs(store)
    assert oldest in remaining and result["pre_restore"]["id"] in remaining


def test_restore_refuses_unknown_failed_or_changed_snapshots(store):
    with pytest.raises(SnapshotNotFound):
        restore_snapshot(store, "20000101T000000Z-manual")
    with pytest.raises(SnapshotNotFound):
        restore_snapshot(store, "../home")
    snap = create_snapshot(store)
    image = Path(snap["path"])
    before = live_bytes(store)
    data = bytearray(image.read_bytes())
    data[-100] ^= 0xFF
    image.write_bytes(bytes(data))
    with pytest.raises(RestoreRefused, match="changed since it was taken"):
        restore_snapshot(store, snap["id"])
    assert live_bytes(store) == before


def test_restore_a_pre_update_bak(store):
    bak = create_snapshot(store, reason="pre-update")
    with SessionDB(store) as db:
        db.append_message("s0", "user", "written after the update")
    result = restore_snapshot(store, bak["id"])
    assert result["verified"] is True and result["messages"] == 10
    with SessionDB(store) as db:
        assert "written after the update" not in [m["content"] for m in db.get_messages("s0")]


def test_pre_update_images_of_one_second_list_newest_first_when_one_ends_in_the_next(tmp_path):
    """Found under load (test_pre_update_writes_a_bak_beside_the_store_and_keeps_two): an image
    named in second S but finished in S+1 sorted as S.0, before the earlier image of S."""
    import os
    import time

    path = tmp_path / "state.db"
    make_store(path, sessions=1, messages=1)
    base = int(time.time())
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(base))
    for n, finished in ((2, 0.5), (3, 1.3)):
        image = tmp_path / f"state.db.pre-update-emergency-{stamp}-{n}.bak"
        image.write_bytes(b"image")
        os.utime(image, (base + finished, base + finished))
    listed = [s["id"] for s in list_snapshots(path) if s["kind"] == "pre-update"]
    assert [i[-6:] for i in listed] == ["-3.bak", "-2.bak"]


def test_a_backup_beside_an_exclusive_mode_holder_gives_up_instead_of_hanging(tmp_path, spawn):
    """Python's Connection.backup retries a locked source forever; ours stops after the bound
    with a lock error (a holder in locking_mode=EXCLUSIVE: any SQLite program may be one)."""
    from hermes_state.operator.snapshot_images import backup_bounded

    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
    holder = spawn("exclusive_holder.py", path)
    assert holder.readline() == "LOCKED"
    src = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=0.05)
    dst = sqlite3.connect(tmp_path / "copy.db")
    try:
        with pytest.raises(sqlite3.OperationalError, match="stayed locked for 0.2 s") as info:
            backup_bounded(src, dst, busy_for_s=0.2)
        assert info.value.sqlite_errorcode == 5  # SQLITE_BUSY: a lock error, retryable
    finally:
        src.close()
        dst.close()
    with pytest.raises(SnapshotFailed) as failed:  # the command's wording: a lock, not damage
        create_snapshot(path)
    assert "could not be taken" in str(failed.value) and "locked" in str(failed.value)
    assert "damaged" not in str(failed.value) and "recover" not in str(failed.value)
    holder.send("release")
    assert holder.readline() == "RELEASED"
    result = create_snapshot(path)  # once released, the same store copies as usual
    assert result["sessions"] == 1
