"""``hermes-state doctor --bundle FILE`` (SPEC §9.4, issue 25): one read-only file describing a
store for a bug report, on real stores held by real processes; and the format reader it rests on
(hermes_state/files/sqlite_format.py) checked against what SQLite wrote."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from hermes_state import SessionDB, failpoints
from hermes_state.files import sqlite_format as fmt
from hermes_state.operator import bundle as bundle_mod
from hermes_state.operator.bundle_processes import infer_role, redact_argv



REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 90.0  # as tests/conftest.py: a hang guard only


def wait_for(pred, what: str, guard: float = HANG_GUARD_S):
    """Poll ``pred`` until it returns something true (hang guard only, never a speed claim)."""
    end = time.monotonic() + guard
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"hang guard: {what} did not happen")


def wait_json(child, pred, what: str):
    """Read the child's JSON lines until one satisfies ``pred``; returns it."""
    while True:
        line = child.readline()
        if line is None:
            raise AssertionError(f"child {child.pid} ended before {what}: {child.stderr()}")
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if pred(rec):
            return rec


def stop(pid: int, deadline_s: float = 30.0) -> None:
    """SIGSTOP ``pid`` and return once the kernel shows it stopped (``kill`` returns before
    the target stops: a writer may still finish a frame). Raises AssertionError past the
    deadline."""
    os.kill(pid, signal.SIGSTOP)
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            if fh.read().rsplit(b")", 1)[1].split()[0] in (b"T", b"t"):
                return
        time.sleep(0.005)
    raise AssertionError(f"process {pid} not stopped {deadline_s} s after SIGSTOP")


def run_bundle(home: Path, out: Path, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "hermes_state", "--home", str(home), "doctor",
                           "--bundle", str(out), *extra], capture_output=True, text=True,
                          env=env, timeout=HANG_GUARD_S)


def take(home: Path, tmp_path: Path, name: str = "bundle.json") -> dict:
    out = tmp_path / name
    proc = run_bundle(home, out)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out.read_text())


def snapshot(directory: Path) -> dict:
    """Every name in ``directory`` with its size, mtime and sha256 (files only)."""
    out = {}
    for p in sorted(directory.iterdir()):
        if p.is_file():
            out[p.name] = (p.stat().st_size, p.stat().st_mtime_ns,
                           hashlib.sha256(p.read_bytes()).hexdigest())
        else:
            out[p.name] = "dir"
    return out


def proc_of(b: dict, pid: int) -> dict:
    return next(p for p in b["processes"]["processes"] if p["pid"] == pid)


# ----------------------------------------------------------------------- the format reader

def _wal_store(path: Path, rows: int = 40) -> sqlite3.Connection:
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t(x)")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    for i in range(rows):
        conn.execute("INSERT INTO t VALUES (?)", ("x" * 900 + str(i),))
    return conn


def test_lock_names_decode_sqlite_lock_ranges():
    assert fmt.shm_lock_names(120, 120) == ["WAL write lock"]
    assert fmt.shm_lock_names(124, 127) == [f"read mark {i}" for i in range(1, 5)]
    assert fmt.shm_lock_names(123, None)[-1] == "dead-man switch"
    assert fmt.shm_lock_names(0, 100) == []
    assert fmt.db_lock_names(fmt.PENDING_BYTE, fmt.PENDING_BYTE, True) == ["PENDING"]
    assert fmt.db_lock_names(fmt.RESERVED_BYTE, fmt.RESERVED_BYTE, True) == ["RESERVED"]
    last = fmt.SHARED_FIRST + fmt.SHARED_SIZE - 1
    assert fmt.db_lock_names(fmt.SHARED_FIRST, last, False) == ["SHARED"]
    assert fmt.db_lock_names(fmt.PENDING_BYTE, last, True) == ["PENDING", "RESERVED",
                                                               "EXCLUSIVE"]
    assert fmt.db_lock_names(0, 99, True) == []
    assert fmt.read_mark_index("read mark 3") == 3 and fmt.read_mark_index("WAL write lock") is None


def test_committed_frames_and_the_image_agree_with_sqlite(tmp_path):
    path = tmp_path / "s.db"
    conn = _wal_store(path)
    wal = (tmp_path / "s.db-wal").read_bytes()
    found = fmt.wal_committed_frames(wal)
    idx = fmt.wal_index_header((tmp_path / "s.db-shm").read_bytes()[:136])
    assert found["committed"] == found["valid"] == idx["mx_frame"] == found["frames"]
    assert found["checksums_verified"] and found["header_checksum_ok"]
    image = fmt.wal_image(path.read_bytes(), wal, found["committed"])
    mem = sqlite3.connect(":memory:")
    mem.deserialize(image)
    assert mem.execute("SELECT count(*) FROM t").fetchone()[0] == 40
    assert mem.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    # state.db alone (no frames applied) has none of them: they are only in the WAL
    mem.deserialize(fmt.wal_image(path.read_bytes(), wal, 0))
    assert mem.execute("SELECT count(*) FROM t").fetchone()[0] == 0
    conn.close()


def test_a_torn_or_garbled_tail_ends_the_committed_part(tmp_path):
    path = tmp_path / "s.db"
    conn = _wal_store(path)
    wal = bytearray((tmp_path / "s.db-wal").read_bytes())
    whole = fmt.wal_committed_frames(bytes(wal))["committed"]
    step = 4096 + fmt.WAL_FRAME_HEADER_SIZE
    torn = bytes(wal[:len(wal) - step // 2])  # the last frame half written
    assert fmt.wal_committed_frames(torn)["committed"] == whole - 1
    wal[fmt.WAL_HEADER_SIZE + 5 * step + 100] ^= 0xFF  # a byte of frame 6's page
    garbled = fmt.wal_committed_frames(bytes(wal))
    assert garbled["valid"] == 5 and garbled["committed"] <= 5
    assert fmt.wal_committed_frames(bytes(wal), verify_checksums=False)["committed"] == whole
    assert fmt.wal_committed_frames(b"") is None and fmt.wal_committed_frames(b"x" * 64) is None
    assert fmt.wal_image(path.read_bytes(), b"not a wal", 3) is None
    conn.close()


# ----------------------------------------------------------------------- roles and redaction

@pytest.mark.parametrize("argv, role", [
    (["python", "/srv/repro_gateway.py", "/h/state.db"], "gateway"),
    (["hermes", "gateway", "run"], "gateway"),
    (["python", "cron_job.py"], "cron"),
    (["python", "-m", "hermes_state", "--home", "/h", "sessions", "optimize", "--force"],
     "maintenance"),
    (["sqlite3", "state.db", "VACUUM"], "maintenance"),
    (["hermes", "chat", "-q", "hello"], "cli"),
    (["/opt/Hermes/dashboard"], "desktop"),
    (["python", "-c", "import sqlite3"], "unknown"),
    (["chaos role gateway-0 (gateway)"], "gateway"),
])
def test_roles_come_from_the_command_line(argv, role):
    assert infer_role(argv)[0] == role


def test_command_lines_keep_programs_and_flags_only():
    text = redact_argv(["hermes", "chat", "-q", "tell me about my divorce", "--resume",
                        "20261201_abcdef", "--force"], {})
    assert text == "hermes chat -q <24 chars> --resume <15 chars> --force"
    assert redact_argv(["python", "/x/gateway.py", "/h/state.db"],
                       {"/h/state.db": "<store>"}) == "python gateway.py <store>"


# ----------------------------------------------------------------------- the bundle itself

def test_an_absent_store_is_described_and_nothing_is_created(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    b = take(home, tmp_path)
    assert list(home.iterdir()) == []
    assert b["store"]["exists"] is False and b["contents"] is None
    assert any(n["section"] == "contents" and "creates nothing" in n["why"]
               for n in b["not_collected"])
    assert b["about"][0].startswith("hermes-state diagnostic bundle")
    assert any("NO message text" in line for line in b["about"])


def test_a_live_store_is_read_without_touching_it(tmp_path, spawn):
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    SessionDB(db).close()
    gw = spawn("bundle_gateway.py", db, "s-live", "0", "hello")
    wait_json(gw, lambda r: r.get("ok") == 30, "30 appends")
    stop(gw.pid)  # hold still: the files must be byte-identical around it
    try:
        before = snapshot(home)
        b = take(home, tmp_path)
        assert snapshot(home) == before  # no file created, changed or touched
    finally:
        os.kill(gw.pid, signal.SIGCONT)
    assert b["not_collected"] == []
    me = proc_of(b, gw.pid)
    assert me["role"] == "gateway" and me["state"] == "stopped"
    assert "dead-man switch" in me["holds"] and "SHARED" in me["holds"]
    c = b["contents"]
    # the frames still in the WAL are counted: the image applies them
    assert c["messages"]["count"] >= 30 and c["sessions"]["count"] == 1
    assert c["schema_version"] == 23 and c["fts"]["fts_layout"] == "external-v23"
    assert c["image"]["wal_frames_applied"] > 0 and c["quick_check"] == ["ok"]
    idx = b["sqlite_files"]["wal_index"]
    assert idx["mx_frame"] >= idx["n_backfill"] and idx["salts_match_wal"] is True
    assert b["sqlite_files"]["wal_header"]["page_size"] == 4096


def test_a_stopped_write_lock_owner_is_named_with_its_lock(tmp_path, spawn):
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    SessionDB(db).close()
    holder = spawn("lock_holder.py", db)
    assert holder.readline() == "LOCKED"
    stop(holder.pid)
    try:
        b = take(home, tmp_path)
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    me = proc_of(b, holder.pid)
    assert me["state"] == "stopped" and me["role"] == "unknown"
    assert "WAL write lock" in me["holds"]
    assert me["command"] == "python3 lock_holder.py <store>" or me["command"].endswith(
        "lock_holder.py <store>")
    lock = next(lk for lk in me["locks"] if "WAL write lock" in lk["names"])
    assert (lock["file"], lock["bytes"], lock["mode"]) == ("state.db-shm", [120, 120], "write")
    assert b["writer_gate"]["would_refuse_now"] is True
    assert b["not_collected"] == []


def test_a_damaged_store_and_a_foreign_file_are_described(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    with SessionDB(db) as s:
        s.create_session("s", source="cli")
        for i in range(300):
            s.append_message("s", "user", "x" * 500 + str(i))
    data = bytearray(db.read_bytes())
    data[20 * 4096:30 * 4096] = os.urandom(10 * 4096)  # garbled b-tree pages
    db.write_bytes(bytes(data))
    b = take(home, tmp_path)
    c = b["contents"]
    assert c.get("errors") or c.get("quick_check", ["ok"]) != ["ok"], c
    db.write_text("not a database at all\n" * 10)
    b = take(home, tmp_path, "b2.json")
    assert b["sqlite_files"]["db_header"]["not_sqlite"] is True
    assert b["contents"]["readable"] is False


def test_a_half_migrated_store_shows_the_version_it_stopped_at(tmp_path, spawn):
    from hermes_state.testing import build_fixture

    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    build_fixture(db, 10)
    crashed = spawn("fp_appender.py", db, "s", "1",
                    env_extra={failpoints.ENV_VAR: "migrate.v16.before_commit=crash"})
    assert crashed.wait() == -signal.SIGKILL
    b = take(home, tmp_path)
    assert b["contents"]["schema_version"] == 15
    assert b["contents"]["fts"]["pending"]  # the next writable open still has work to do


def test_a_retired_holder_is_listed_with_its_retired_wal_and_capture(tmp_path, spawn):
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    SessionDB(db).close()
    gw = spawn("bundle_gateway.py", db, "s-retired", "50", "hello")
    wait_json(gw, lambda r: r.get("ok") == 60, "60 appends")
    os.unlink(f"{db}-wal")
    os.unlink(f"{db}-shm")
    wait_json(gw, lambda r: r.get("event") == "capture", "the capture")
    b = take(home, tmp_path)
    assert not Path(f"{db}-wal").exists() and not Path(f"{db}-shm").exists()  # not recreated
    me = proc_of(b, gw.pid)
    assert set(me["retired"]) == {"state.db-wal (deleted)", "state.db-shm (deleted)"}
    (gen,) = b["retired_generations"]
    assert gen["pid"] == gw.pid and gen["wal"]["frames"] > 0
    (cap,) = b["captures"]["captures"]
    assert cap["manifest"]["pid"] == gw.pid and cap["manifest"]["trigger"]
    # the deleted -shm's locks are decoded too (this process holds them on the retired inode)
    assert any(lk["file"] == "state.db-shm (deleted)" for lk in me["locks"])


def test_a_fifo_at_a_sidecar_path_is_named_and_never_blocks(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    SessionDB(db).close()
    for suffix in ("-wal", "-shm"):
        Path(f"{db}{suffix}").unlink(missing_ok=True)
    os.mkfifo(f"{db}-wal")
    b = take(home, tmp_path)
    assert b["store"]["files"]["state.db-wal"]["type"] == "fifo"
    assert any(n["section"] in ("sqlite_files", "contents") for n in b["not_collected"])


def test_a_section_that_hangs_is_left_out_with_the_reason():
    sections = bundle_mod._Sections(budget_s=0.3)
    never = threading.Event()
    assert sections.run("stuck", never.wait) is None
    assert sections.run("fine", lambda: 7) == 7
    (item,) = sections.not_collected
    assert item["section"] == "stuck" and "did not finish" in item["why"]
    assert sections.run("broken", lambda: 1 / 0) is None
    assert sections.not_collected[-1]["why"].startswith("ZeroDivisionError")
    never.set()


def test_the_cli_prints_to_stdout_and_refuses_fix_and_bad_paths(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    SessionDB(home / "state.db").close()
    out = run_bundle(home, Path("-"))
    assert out.returncode == 0 and json.loads(out.stdout)["bundle"]["format"] == 1
    fix = run_bundle(home, tmp_path / "x.json", "--fix")
    assert fix.returncode == 1 and "cannot be combined with --fix" in fix.stderr
    bad = run_bundle(home, tmp_path / "no" / "such" / "dir" / "x.json")
    assert bad.returncode == 1 and "cannot write the bundle" in bad.stderr
    assert "next:" in bad.stderr


# ----------------------------------------------------------------------- no message text

SECRETS = {
    "message": "zebracobaltmessage", "title": "quillmarigoldtitle", "tool": "vortexlanterntool",
    "prompt": "saffronglacierprompt", "sid": "obsidianfalconsid", "spool": "harborjuniperspool",
    "argv": "nebulathistleargv", "source": "platypusorbitsource", "meta": "meadowcipherkey",
    "meta_value": "meadowcipherval", "user": "umbertulipuser", "auto": "gingerpolkaauto",
    "reasoning": "cedarmosaicreason",
}


def test_the_bundle_holds_no_message_text(tmp_path, spawn):
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    s = SECRETS
    with SessionDB(db) as store:
        store.create_session(s["sid"], source=s["source"], system_prompt=s["prompt"] * 3,
                             user_id=s["user"])
        store.append_message(s["sid"], "user", f"please remember {s['message']}")
        store.append_message(s["sid"], "assistant", f"ok {s['message']}",
                             tool_calls=[{"id": "c1", "type": "function", "function": {
                                 "name": s["tool"], "arguments": json.dumps({"q": s["tool"]})}}],
                             reasoning=s["reasoning"])
        store.append_message(s["sid"], "tool", s["message"], tool_name=s["tool"],
                             tool_call_id="c1")
        store.set_session_title(s["sid"], s["title"])
        store.create_session(s["sid"] + "2", source="cli")
        store.set_auto_title(s["sid"] + "2", s["auto"])
        store.set_meta(s["meta"], s["meta_value"])
        store.divert_to_spool(s["sid"] + "3", [{"role": "user", "content": s["spool"]}])
    # a live holder whose command line carries a session id and text
    gw = spawn("bundle_gateway.py", db, s["sid"] + "4", "20", s["argv"])
    wait_json(gw, lambda r: r.get("ok") == 60, "60 appends")
    # and a retired generation with its capture (the capture's copy holds text; the bundle
    # reads only its manifest)
    os.unlink(f"{db}-wal")
    os.unlink(f"{db}-shm")
    wait_json(gw, lambda r: r.get("event") == "capture", "the capture")
    out = tmp_path / "bundle.json"
    assert run_bundle(home, out).returncode == 0
    text = out.read_text().lower()
    b = json.loads(text)
    # the sections that would carry the text were collected (else the grep proves nothing)
    assert b["not_collected"] == []
    assert b["contents"]["messages"]["count"] >= 3 and b["spool"]["files"]
    assert b["captures"]["captures"] and proc_of(b, gw.pid)["role"] == "gateway"
    assert b["contents"]["state_meta"]["other_keys_hashed"]
    for what, secret in s.items():
        assert secret.lower() not in text, f"the {what} secret {secret!r} is in the bundle"
