"""File and disk faults (SPEC §16.2) on real stores, real files and real processes."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from chaos import fixtures
from chaos.nemesis import FAULTS, NemesisEnv, NemesisError
from chaos.nemesis.files import wal_pages
from hermes_state import SessionDB
from hermes_state.errors import (
    DeletedWalGenerationError,
    StateDbCorruptError,
    StateDbReplacedError,
)
from hermes_state.testing import utc_stamp

ROOT = Path(__file__).resolve().parents[1]


def store(tmp_path: Path, fixture: str = "empty", **params) -> tuple[Path, NemesisEnv]:
    home = tmp_path / "run" / "home"
    home.mkdir(parents=True)
    db = home / "state.db"
    fixtures.prepare_store({"fixture": fixture, **params}, db, seed=1)
    return db, NemesisEnv(db, lambda: [])


def fire(name: str, env: NemesisEnv, **params) -> dict:
    return FAULTS[name](env, params)


def ident(p: Path) -> list:
    st = os.stat(p)
    return [st.st_dev, st.st_ino]


def test_rename_sidecars_moves_the_wal_aside_and_the_holder_refuses(tmp_path):
    db, env = store(tmp_path)
    with SessionDB(db) as s:
        s.create_session("a", source="cli")
        wal = Path(f"{db}-wal")
        before = ident(wal)
        out = fire("rename_sidecars", env, files=["wal"])
        assert out["renamed"] == {"state.db-wal": "state.db-wal.aside"}
        assert out["inodes"]["state.db-wal"] == before
        assert ident(Path(f"{db}-wal.aside")) == before and not wal.exists()
        with pytest.raises(DeletedWalGenerationError):
            s.append_message("a", "user", "after the rename")
    with pytest.raises(NemesisError, match="nothing to rename"):
        fire("rename_sidecars", env, files=["wal"])


@pytest.mark.parametrize("how", ["mv", "cp"])
def test_replace_db_is_detected_by_the_live_writer(tmp_path, how):
    db, env = store(tmp_path)
    with SessionDB(db) as s:
        s.create_session("a", source="cli")
        s.append_message("a", "user", "before")
        out = fire("replace_db", env, how=how, source="other")
        assert out["same_inode"] is (how == "cp")
        assert (out["inode_before"] == out["inode_after"]) is (how == "cp")
        assert out["inode_after"] == ident(db)
        with pytest.raises(StateDbReplacedError):
            s.append_message("a", "user", "after")
    # the file at the path is the other store, intact, with none of our rows
    assert sqlite3.connect(db).execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    assert sqlite3.connect(db).execute(
        "SELECT count(*) FROM sessions WHERE id = 'a'").fetchone() == (0,)


def test_replace_db_from_the_backup_by_mv(tmp_path):
    db, env = store(tmp_path, "generated", sessions=2, messages=4)
    fixtures.backup_copy(db, fixtures.sources_dir(db) / "backup.db")
    with SessionDB(db) as s:
        s.create_session("new", source="cli")
        out = fire("replace_db", env, how="mv", source="backup")
        assert not out["same_inode"] and out["source_path"].endswith("sources/backup.db")
        with pytest.raises(StateDbReplacedError):
            s.append_message("new", "user", "x")


def test_zero_and_truncate_db_keep_the_inode(tmp_path):
    db, env = store(tmp_path, "generated", sessions=1, messages=20)
    inode, size = ident(db), db.stat().st_size
    out = fire("zero_db", env)
    assert out == {"inode": inode, "bytes": size}
    assert set(db.read_bytes()) == {0} and db.stat().st_size == size
    out = fire("truncate_db", env, bytes=1000)
    assert out["bytes_before"] == size and out["bytes_after"] == 1000 and ident(db) == inode


def _quarantine_verdict(db: Path, records: list[dict]):
    from chaos.checkers import CHECKERS
    from chaos.checkers.base import CheckContext

    ctx = CheckContext(history=records, store_path=db, home=db.parent, run_dir=db.parent.parent,
                       scenario={})
    return CHECKERS["quarantine_evidence"](ctx, {})


def test_planted_quarantine_copies_stand_in_the_quarantines_way(tmp_path):
    """SPEC §12: plant_quarantine_copies fills every name a quarantine of the next minute would
    take (never following nor replacing a file already there); the real quarantine steps over
    all of them and quarantine_evidence passes on the files left. A copy moved beside an earlier
    sidecar, or over an earlier copy (what the quarantine_* mutants do), makes it fail."""
    db, env = store(tmp_path, "generated", sessions=1, messages=20)
    home = db.parent
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    now = time.time()
    links = [home / f"state.db.corrupt.{utc_stamp(now + k)}.bak" for k in range(3)]
    for link in links:
        os.symlink(victim, link)
    out = fire("plant_quarantine_copies", env, seed=3)
    first = out["first_stamp"]
    assert sorted(out["skipped"]) == sorted(p.name for p in links)
    assert len(out["planted"]) == 62 * 8 - 3 and out["last_stamp"] > first
    assert f"state.db.corrupt.{first}-2.bak-shm" in out["planted"]  # whole copies 1 and 2,
    assert f"state.db.corrupt.{first}-3.bak-wal" in out["planted"]  # then a lone -wal
    assert f"state.db.corrupt.{first}-3.bak" not in out["planted"]
    assert f"state.db.corrupt.{first}-4.bak-shm" in out["planted"]  # and a lone -shm
    again = fire("plant_quarantine_copies", env, seed=4)  # a second plant replaces nothing
    assert not set(again["planted"]) & set(out["planted"])
    assert set(out["planted"]) & set(again["skipped"])
    assert victim.read_text() == "precious\n" and all(p.is_symlink() for p in links)

    fire("zero_db", env)
    with SessionDB(db) as s:
        backup = s.quarantined_to
        s.create_session("fresh", source="cli")
    assert backup is not None and backup.name.endswith("-5.bak")
    assert first <= backup.name.split(".")[3].split("-")[0] <= again["last_stamp"]
    records = [{"t": 1.0, "type": "nemesis", "fault": "plant_quarantine_copies", "phase": "done",
                **out},
               {"t": 2.0, "type": "nemesis", "fault": "plant_quarantine_copies", "phase": "done",
                **again},
               {"t": 3.0, "type": "event", "event": "quarantine", "db": str(db),
                "backup": str(backup)}]
    v = _quarantine_verdict(db, records)
    assert v.status == "PASS", v.to_dict()
    assert v.figures["planted"] == len(out["planted"]) + len(again["planted"])
    assert v.figures["met_planted"] == 1

    # a quarantine whose name no planted second had: the copies were never in its way
    elsewhere = home / "state.db.corrupt.20000101T000000Z.bak"
    elsewhere.write_bytes(b"")
    v = _quarantine_verdict(db, records[:2] + [dict(records[2], backup=str(elsewhere))])
    assert v.status == "INCONCLUSIVE" and "never in its way" in v.summary, v.to_dict()
    elsewhere.unlink()

    # the copy beside an earlier copy's lone -wal (-3.bak), then over a whole earlier copy
    stem = backup.name[: -len("-5.bak")]
    os.rename(backup, home / f"{stem}-3.bak")
    v = _quarantine_verdict(db, records)
    assert v.status == "FAIL" and v.figures["violations"] == {
        "quarantine_overwritten": 1, "backup_beside_earlier_sidecar": 1}, v.to_dict()
    os.replace(home / f"{stem}-3.bak", home / f"{stem}-2.bak")
    v = _quarantine_verdict(db, records)
    assert v.status == "FAIL" and v.figures["violations"] == {
        "quarantine_overwritten": 1, "planted_copy_changed": 1}, v.to_dict()
    assert f"{stem}-2.bak was replaced" in v.summary


def test_wal_pages_reads_the_frames_of_the_current_generation(tmp_path):
    db, _ = store(tmp_path)
    s = SessionDB(db)
    try:
        s.create_session("a", source="cli")
        pages = wal_pages(Path(f"{db}-wal"))
        root = sqlite3.connect(f"file:{db}?mode=ro", uri=True).execute(
            "SELECT rootpage FROM sqlite_master WHERE name = 'sessions'").fetchone()[0]
        assert root in pages  # the insert wrote the sessions b-tree
    finally:
        s.close()
    assert wal_pages(tmp_path / "nope-wal") == set()


def test_corrupt_page_breaks_a_btree_and_recover_salvages_the_rest(tmp_path):
    db, env = store(tmp_path, "generated", sessions=10, messages=2000)
    out = fire("corrupt_page", env, table="messages", pick="leaf")
    assert out["table"] == "messages" and out["pagetype"] == "leaf" and not out["in_wal"]
    with pytest.raises(sqlite3.DatabaseError, match="malformed"):
        sqlite3.connect(db).execute(
            "SELECT count(*), sum(length(content)) FROM messages").fetchone()
    s = SessionDB(db)
    with pytest.raises(StateDbCorruptError):
        for sid in [f"fx-s{i:04d}" for i in range(10)]:
            s.get_messages(sid)
    s.close()
    salvaged = tmp_path / "salvaged.db"
    proc = subprocess.run([sys.executable, "-m", "hermes_state", "--home", str(db.parent),
                           "sessions", "recover", str(db), "--allow-partial",
                           "--output", str(salvaged)], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    out = sqlite3.connect(salvaged)
    got = out.execute("SELECT count(*) FROM messages").fetchone()[0]
    assert 0 < got < 2000  # one leaf's rows are gone, the rest came back
    # the salvaged store is consistent: every session's counter equals its recovered rows (a
    # bug found with this fault: recover used to copy the old counters verbatim)
    assert out.execute("SELECT count(*) FROM sessions s WHERE message_count != (SELECT count(*) "
                       "FROM messages m WHERE m.session_id = s.id)").fetchone() == (0,)
    assert json.loads(proc.stdout)["output"]["recounted_sessions"]


def test_corrupt_fts_is_confined_and_search_falls_back(tmp_path):
    """The fault damages FTS5 data only; the store (SPEC §12) keeps writing and searching."""
    db, env = store(tmp_path, "generated", sessions=20, messages=3000)
    out = fire("corrupt_fts", env)
    assert out["pages"] and out["cells"] >= len(out["pages"]) and not out["in_wal"]
    raw = sqlite3.connect(db)
    assert raw.execute("PRAGMA integrity_check").fetchall() == [("ok",)]  # b-trees sound
    with pytest.raises(sqlite3.DatabaseError) as ei:
        raw.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)")
    assert ei.value.sqlite_errorcode == 267  # SQLITE_CORRUPT_VTAB: FTS5 reports it
    raw.close()
    with SessionDB(db) as s:
        s.create_session("x", source="cli")
        # a query that reads the damaged segments falls back to a scan instead of failing the
        # whole handle (a real bug found with this fault: it used to raise StateDbCorruptError)
        hits = s.search_messages("deploy")
        assert hits
        for h in hits:
            content = s._read(lambda c, i=h["id"]: c.execute(
                "SELECT content FROM messages WHERE id = ?", (i,)).fetchone()[0])
            assert "deploy" in content
        s.append_message("x", "user", "still writing after the damage")
        s.rebuild_fts()
        assert [h["session_id"] for h in s.search_messages("still writing")] == ["x"]
    raw = sqlite3.connect(db)
    raw.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES('integrity-check', 1)")


def test_corrupt_fts_refuses_when_every_page_is_in_the_wal(tmp_path):
    db, env = store(tmp_path)
    s = SessionDB(db)
    try:
        s.create_session("a", source="cli")
        s.append_message("a", "user", "only in the wal")
        with pytest.raises(NemesisError, match="WAL"):
            fire("corrupt_fts", env)
    finally:
        s.close()


def _tmpfs_store(tmp_path: Path, size: str = "2M"):
    home = tmp_path / "run" / "home"
    try:
        mount = fixtures.mount_tmpfs(home, fixtures.parse_size(size))
    except fixtures.TmpfsUnavailable as exc:
        pytest.skip(f"cannot mount a tmpfs here: {exc}")
    db = home / "state.db"
    fixtures.prepare_store({"fixture": "empty"}, db)
    return mount, db, NemesisEnv(db, lambda: [])


def test_fill_disk_makes_commits_fail_with_sqlite_full_until_free_disk(tmp_path):
    mount, db, env = _tmpfs_store(tmp_path)
    try:
        with SessionDB(db) as s:
            s.create_session("a", source="cli")
            out = fire("fill_disk", env)
            assert out["free_after"] == 0 and out["balloon_bytes"] > 0
            with pytest.raises(sqlite3.OperationalError) as ei:
                for i in range(200):
                    s.append_message("a", "user", f"{i} " + "x" * 8000)
            assert ei.value.sqlite_errorcode & 0xFF == 13  # SQLITE_FULL
            done = fire("free_disk", env)
            assert done["freed_bytes"] == out["balloon_bytes"] and done["free_after"] > 0
            s.append_message("a", "user", "after free_disk")
            assert s.get_messages("a")[-1]["content"] == "after free_disk"
        with pytest.raises(NemesisError, match="no balloon"):
            fire("free_disk", env)
    finally:
        mount.unmount()


def test_fill_disk_never_fills_a_disk_that_is_not_the_stores_own_mount(tmp_path):
    _, env = store(tmp_path)
    with pytest.raises(NemesisError, match="not a mount point"):
        fire("fill_disk", env)


HOLDER = """
import os, sys, time
from hermes_state import SessionDB
from chaos.nemesis.files import install_foreign_open_close
db = SessionDB(sys.argv[1])
db.create_session("h", source="cli")
db.append_message("h", "user", "first")
# the callback runs in a signal handler: os.write, never print (a print of the main thread
# may be inside the same buffered writer: "reentrant call")
install_foreign_open_close(sys.argv[1], lambda **f: os.write(1, f"EVENT {f}\\n".encode()))
print("READY", flush=True)
sys.stdin.readline()            # wait: the fault fires, another process closes the store
try:
    db.append_message("h", "user", "second")
    print("WROTE", flush=True)
except Exception as exc:
    print("REFUSED", type(exc).__name__, flush=True)
"""


@dataclass
class _Inst:
    process: str
    role: str
    index: int
    pid: int

    def alive(self) -> bool:
        return True


def _holder_after(db: Path, fire_fault: bool) -> tuple[list[str], bool]:
    """Start a holder, optionally fire foreign_open_close at it, let another process open and
    close the store, then let the holder write. Returns (its last line, WAL still there)."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(db)], cwd=ROOT, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline().strip() == "READY"
        if fire_fault:
            env = NemesisEnv(db, lambda: [_Inst("h-0", "h", 0, holder.pid)])
            out = FAULTS["foreign_open_close"](env, {"role": "h", "index": None})
            assert out == {"signal": "SIGUSR2", "pids": [holder.pid], "processes": ["h-0"]}
            event = holder.stdout.readline()
            assert event.startswith("EVENT") and "'bytes': 4096" in event
        other = sqlite3.connect(str(db))
        other.execute("SELECT count(*) FROM sessions").fetchone()
        other.close()
        wal_left = Path(f"{db}-wal").exists()
        holder.stdin.write("\n")
        holder.stdin.flush()
        return holder.stdout.readline().split(), wal_left
    finally:
        holder.kill()
        holder.wait(10)


def test_foreign_open_close_drops_the_holders_locks(tmp_path):
    """SPEC §16.2: a plain open/read/close of state.db in a process with a connection drops
    its POSIX locks; another process's close then believes it is the last connection and
    deletes the WAL under the holder, whose next write refuses (SPEC §10.1)."""
    db, _ = store(tmp_path / "control")
    # control: while the holder keeps its locks, the other process's close is not the last one
    assert _holder_after(db, fire_fault=False) == (["WROTE"], True)
    db, _ = store(tmp_path / "fault")
    assert _holder_after(db, fire_fault=True) == (["REFUSED", "DeletedWalGenerationError"],
                                                  False)


@pytest.mark.slow
def test_zeroed_store_two_starters_scenario_quarantines_once(tmp_path):
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "chaos", "run",
                           str(ROOT / "scenarios" / "zeroed_store_two_starters.yaml"),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = next(d for d in out.iterdir() if d.is_dir())
    assert len(list((run_dir / "home").glob("state.db.corrupt.*.bak"))) == 1
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    assert sum(1 for r in history if r.get("event") == "quarantine") == 1
    opens = [r for r in history if r.get("op") == "open" and r.get("type") in ("ok", "fail")]
    assert len(opens) == 3 and all(r["type"] == "ok" for r in opens)


def test_holder_scan_judges_a_descriptor_against_the_path_now(tmp_path):
    """Found by zeroed_store_two_starters: a starter scanned /proc while the other starter
    quarantined the zeroed file and opened the fresh one; the scan compared that descriptor
    with the inode it had stat'ed at its start, called it "(replaced)" and refused to open
    (SPEC §10.4 is about files no longer at the path, §12 says both starters work)."""
    from hermes_state.processes import holders

    db = tmp_path / "state.db"
    db.write_bytes(b"\0" * 4096)
    real, stale = holders._watched(db)  # the scan starts: state.db is the zeroed file
    os.rename(db, tmp_path / "state.db.corrupt.bak")  # the other starter moves it aside...
    db.write_bytes(b"")  # ...and creates the fresh store, which it holds open
    with open(db, "rb") as fh:
        st = os.fstat(fh.fileno())
        hit = holders._classify(real, str(db), (st.st_dev, st.st_ino), stale)
    assert hit == ("state.db", False)
    gone = holders._classify(real, str(db), (st.st_dev, st.st_ino + 1), stale)
    assert gone == ("state.db (replaced)", True)  # a descriptor of another file still is


@pytest.mark.slow
def test_disk_full_checkpoint_scenario_reaches_its_state_and_heals(tmp_path):
    """The scenario's checkers cannot tell a failed checkpoint from a healthy one; this test
    does: SQLITE_FULL met a checkpoint and commits while the disk was full, and both work again
    after free_disk (SPEC §16.2)."""
    if os.geteuid() != 0:
        pytest.skip("the scenario mounts a tmpfs (root only)")
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "chaos", "run",
                           str(ROOT / "scenarios" / "disk_full_checkpoint.yaml"),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = next(d for d in out.iterdir() if d.is_dir())
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    done = {r["fault"]: r["t"] for r in history
            if r.get("type") == "nemesis" and r.get("phase") == "done"}
    full, freed = done["fill_disk"], done["free_disk"]
    ckpt_full = [r for r in history if r.get("event") == "checkpoint"
                 and full < r["t"] < freed and "full" in r.get("error", "")]
    commit_full = [r for r in history if r.get("op") == "append" and r.get("type") == "info"
                   and "full" in r.get("message", "")]
    healed = [r for r in history if r.get("event") == "checkpoint" and r["t"] > freed
              and "error" not in r]
    ok_after = [r for r in history if r.get("op") == "append" and r.get("type") == "ok"
                and r["t"] > freed]
    assert ckpt_full and commit_full and healed and ok_after
    assert not os.path.ismount(run_dir / "home")  # the runner unmounted its tmpfs
    assert (run_dir / "home" / "state.db").is_file()


def test_corrupt_page_by_number_and_interior_pick(tmp_path):
    db, env = store(tmp_path, "generated", sessions=5, messages=1500)
    out = fire("corrupt_page", env, table="messages", pick="interior", seed=3)
    assert out["pagetype"] == "internal" and out["page"] > 1
    out2 = fire("corrupt_page", env, page=out["page"], seed=3)
    assert out2["page"] == out["page"] and out2["table"] is None
    with open(db, "rb") as fh:  # the same seed writes the same bytes: deterministic damage
        fh.seek(out["offset"])
        first = fh.read(out["page_size"])
    fire("corrupt_page", env, page=out["page"], seed=4)
    with open(db, "rb") as fh:
        fh.seek(out["offset"])
        assert fh.read(out["page_size"]) != first
    with pytest.raises(NemesisError, match="page 1 holds the file header"):
        fire("corrupt_page", env, page=1)
    small, env_small = store(tmp_path / "small")
    with pytest.raises(NemesisError, match="no internal page"):
        fire("corrupt_page", env_small, table="sessions", pick="interior")
