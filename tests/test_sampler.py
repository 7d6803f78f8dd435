"""The sampler reads real processes: held inodes, retired WAL generations, the write-lock owner.

Every test drives real child processes (tests/helpers) on a real store and calls
:meth:`chaos.sampler.Sampler.sample` directly (no timing involved), then reads the records back
from ``history/sampler.jsonl``.
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys

import pytest

from chaos import history as hist
from chaos.checkers import CHECKERS, CheckContext
from chaos.sampler import Sampler, held_files, path_identity
from hermes_state.processes import holders as holders_mod

pytestmark = pytest.mark.skipif(not holders_mod.HAVE_PROC, reason="needs Linux /proc")


@pytest.fixture
def live(tmp_path, spawn):
    path = tmp_path / "home" / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=3, prefix="m")
    return path, child


def _sampler(tmp_path, path, procs):
    hdir = tmp_path / "history"
    hdir.mkdir(exist_ok=True)
    return Sampler(path, hdir, lambda: list(procs)), hdir


def test_sample_names_the_inodes_a_live_writer_holds(tmp_path, live):
    path, child = live
    s, hdir = _sampler(tmp_path, path, [("gateway-0", child.pid)])
    rec = s.sample()
    s.stop()
    at = path_identity(path)
    (entry,) = rec["procs"]
    assert entry["process"] == "gateway-0" and entry["pid"] == child.pid
    for key in ("db", "wal", "shm"):
        assert entry[key]["ino"] == at[key]["ino"]
        assert entry[key]["current"] is True and entry[key]["deleted"] is False
    assert rec["wal_bytes"] == os.path.getsize(f"{path}-wal") > 0
    # the record is in the history file, and history.load merges it
    (loaded,) = [r for r in hist.load(hdir) if r["type"] == "sample"]
    assert loaded["procs"][0]["wal"]["ino"] == at["wal"]["ino"]
    assert loaded["process"] == "sampler"


def test_deleted_wal_shows_as_a_retired_generation(tmp_path, live):
    path, child = live
    old = path_identity(path)["wal"]["ino"]
    os.unlink(f"{path}-wal")
    os.unlink(f"{path}-shm")
    # a foreign writer mints a new generation at the path while the child holds the old one
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("CREATE TABLE chaos_probe(x)")
    s, _ = _sampler(tmp_path, path, [("gateway-0", child.pid)])
    rec = s.sample()
    s.stop()
    conn.close()
    entry = rec["procs"][0]
    assert entry["wal"]["ino"] == old
    assert entry["wal"]["deleted"] is True and entry["wal"]["current"] is False
    assert entry["db"]["current"] is True
    assert rec["path"]["wal"] is not None and rec["path"]["wal"]["ino"] != old
    held = held_files(child.pid, path)
    assert held["wal"]["current"] is False


def test_write_lock_owner_and_waiting_writer(tmp_path, live, spawn):
    path, child = live
    locker = spawn("lock_holder.py", str(path))
    assert locker.readline() == "LOCKED"
    hdir = tmp_path / "history"
    hdir.mkdir()
    # a role history with a write invoked and not completed: it waits on the lock
    w = hist.HistoryWriter(hdir / "gateway-0.jsonl", "gateway-0")
    w.record("invoke", op="append", op_id="gateway-0:1", payload_id="p1")
    s = Sampler(path, hdir, lambda: [("gateway-0", child.pid), ("locker-0", locker.pid)])
    rec = s.sample()
    locker.send("release")
    assert locker.readline() == "RELEASED"
    w.record("ok", op="append", op_id="gateway-0:1", payload_id="p1")
    after = s.sample()
    s.stop()
    w.close()
    assert rec["write_lock"]["pid"] == locker.pid
    assert rec["write_lock"]["process"] == "locker-0"
    assert any(lk["lock"] == "WAL write lock" and lk["pid"] == locker.pid for lk in rec["locks"])
    assert rec["in_flight"] == [{"process": "gateway-0", "op": "append", "op_id": "gateway-0:1",
                                 "since": rec["in_flight"][0]["since"]}]
    assert rec["waiting"] == ["gateway-0"]
    assert after["in_flight"] == [] and after["waiting"] == []
    assert after["seq"] == rec["seq"] + 1


def test_a_process_killed_mid_write_is_not_waiting_on_the_lock(tmp_path, live, spawn):
    """Its last invoke never completes (SIGKILL): it must not show as a waiter ever after (the
    report drew 'waits on a store lock' in a dead process's lane after a power cut)."""
    path, child = live
    locker = spawn("lock_holder.py", str(path))
    assert locker.readline() == "LOCKED"
    hdir = tmp_path / "history"
    hdir.mkdir()
    w = hist.HistoryWriter(hdir / "gateway-0.jsonl", "gateway-0")
    w.record("invoke", op="append", op_id="gateway-0:1", payload_id="p1")
    # gateway-0 is no longer among the role processes (it was killed and reaped)
    s = Sampler(path, hdir, lambda: [("locker-0", locker.pid)])
    rec = s.sample()
    locker.send("release")
    assert locker.readline() == "RELEASED"
    s.stop()
    w.close()
    assert rec["write_lock"]["process"] == "locker-0"
    assert [o["process"] for o in rec["in_flight"]] == ["gateway-0"]
    assert rec["waiting"] == []


def test_exited_process_is_skipped_and_thread_writes_samples(tmp_path, live):
    path, child = live
    child.kill()
    s, hdir = _sampler(tmp_path, path, [("gateway-0", child.pid)])
    rec = s.sample()
    assert rec["procs"] == []
    s.start()
    s.stop()
    lines = [json.loads(x) for x in (hdir / "sampler.jsonl").read_text().splitlines()]
    assert len(lines) >= 2 and all(r["type"] == "sample" for r in lines)


def test_a_wal_created_after_the_path_snapshot_is_still_current(tmp_path, live):
    # The snapshot of the paths predates the -wal (a first writer created it meanwhile): the
    # holder must not look like it holds a retired generation.
    path, child = live
    stale_snapshot = {"db": path_identity(path)["db"], "wal": None, "shm": None}
    held = held_files(child.pid, path, stale_snapshot)
    assert held["wal"]["current"] is True and held["shm"]["current"] is True


RAW_WRITER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
for line in sys.stdin:
    conn.execute("INSERT INTO t(x) VALUES (?)", (line.strip(),))
    print("ok", flush=True)
"""


def test_single_wal_generation_catches_a_real_split_brain(tmp_path):
    # Bare SQLite permits it: a connection whose -wal was deleted keeps committing into the
    # retired inode while a new connection mints a second WAL at the path. The sampler sees the
    # retired inode on both sides of the write and the checker fails the run.
    path = tmp_path / "state.db"
    setup = sqlite3.connect(str(path), isolation_level=None)
    setup.execute("PRAGMA journal_mode=WAL")
    setup.execute("CREATE TABLE t(x)")
    setup.close()
    child = subprocess.Popen([sys.executable, "-c", RAW_WRITER, str(path)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    hdir = tmp_path / "history"
    hdir.mkdir()
    role = hist.HistoryWriter(hdir / "raw-0.jsonl", "raw-0")
    sampler = Sampler(path, hdir, lambda: [("raw-0", child.pid)])
    other = None
    try:
        def write(payload):
            op_id = role.next_op_id()
            role.record("invoke", op="append", op_id=op_id, payload_id=payload)
            child.stdin.write(payload + "\n")
            child.stdin.flush()
            assert child.stdout.readline().strip() == "ok"
            role.record("ok", op="append", op_id=op_id, payload_id=payload)

        write("before")                 # the current generation: fine
        sampler.sample()
        sampler.sample()
        os.unlink(f"{path}-wal")
        os.unlink(f"{path}-shm")
        other = sqlite3.connect(str(path), isolation_level=None)
        other.execute("INSERT INTO t(x) VALUES ('new generation')")
        sampler.sample()
        write("split")                  # committed into the retired WAL
        sampler.sample()
    finally:
        sampler.stop()
        role.close()
        child.stdin.close()
        child.wait(30)
        if other is not None:
            other.close()
    history = hist.complete(hist.load(hdir))
    ctx = CheckContext(history=history, store_path=path, home=tmp_path, run_dir=tmp_path,
                       scenario={"roles": [{"name": "raw", "kind": "gateway"}]})
    v = CHECKERS["single_wal_generation"](ctx, {"min_samples": 1})
    assert v.status == "FAIL", v.to_dict()
    assert [e["record"]["payload_id"] for e in v.evidence] == ["split"]
    assert v.evidence[0]["sample_before"]["entry"]["wal"]["deleted"] is True
