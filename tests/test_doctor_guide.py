"""The recovery guide, step by step, through the CLI (SPEC §9, §10, §12, §13, §14).

Each test follows one passage of the guide (docs/RECOVERY.md) with real processes and files:
a writer whose WAL was deleted under it, a transaction killed mid-way, a spool of refused
messages, evidence files beside the store.
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.cli import main as cli


def tree_digest(directory: Path) -> dict:
    """sha256 of every file under ``directory`` (names relative), to prove nothing changed."""
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


@pytest.fixture
def retired(tmp_path, spawn):
    """A writer refused after its -wal/-shm were deleted: ``(store, child, capture dir)``."""
    path = tmp_path / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=6, prefix="committed")
    os.unlink(f"{path}-wal")
    os.unlink(f"{path}-shm")
    assert child.call("append", sid="s", n=1, prefix="refused")["error"] == \
        "DeletedWalGenerationError"
    capture = Path(child.ok("capture_dir")["capture_dir"])
    return path, child, capture


def test_three_steps_doctor_names_the_holder_until_it_is_stopped(retired, capsys):
    path, child, capture = retired
    before = tree_digest(path.parent)
    assert cli(["--home", str(path.parent), "doctor"]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1] == "[issue] 1 process(es) still hold a retired WAL generation"
    assert lines[2].strip().startswith(f"PID {child.pid} (")
    assert "do NOT delete the WAL yourself" in out
    assert "quick_check" not in out and "sessions," not in out  # stopped: no health check
    assert tree_digest(path.parent) == before  # doctor opened nothing: no new -wal/-shm

    assert cli(["--home", str(path.parent), "doctor", "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert report["stopped_early"] is True and report["exit_code"] == 1
    [held] = report["stats"]["retired_holders"]
    assert held["pid"] == child.pid and held["retired"]
    assert all(name.endswith("(deleted)") for name in held["retired"])

    assert cli(["--home", str(path.parent), "doctor", "--fix"]) == 1  # --fix does nothing
    assert "--fix" not in capsys.readouterr().out.split("doctor stops here")[1]
    assert tree_digest(path.parent) == before

    child.kill()  # step 1: stop it
    child.wait()
    # step 2: the holder line is gone; what only the capture holds needs action, first
    assert cli(["--home", str(path.parent), "doctor"]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "retired WAL generation" not in out
    assert lines[1].startswith("[issue] ") and f"exist only in the capture {capture.name}" in lines[1]
    assert f"`sessions salvage {capture}`" in lines[2]
    assert f"[warn] evidence file {capture.name}" in out
    assert f"by PID {child.pid} (halt): WAL " in out and " frames, " in out
    assert "attach this directory to a bug report" in out
    assert f"`sessions recover {capture}/state.db --inspect-only`" in out
    # step 3: bring them back, then doctor is clean, then one process starts again and writes
    assert cli(["--home", str(path.parent), "sessions", "salvage", str(capture), "--apply"]) == 0
    capsys.readouterr()
    assert cli(["--home", str(path.parent), "doctor"]) == 0
    assert "nothing to salvage" in capsys.readouterr().out
    with SessionDB(path) as db:
        db.create_session("again", source="gateway")
        db.append_message("again", "user", "works")


def test_inspect_only_on_the_capture_changes_no_byte_and_reports(retired, capsys):
    path, child, capture = retired
    child.kill()
    before = tree_digest(path.parent)
    assert cli(["sessions", "recover", str(capture / "state.db"),
                "--inspect-only"]) == 0
    captured = capsys.readouterr()
    report = json.loads(captured.out)
    assert report["operation"] == "inspect" and report["recoverable"] is True
    assert report["source_unchanged"] is True
    assert report["tables"]["messages"]["rows"] == 6
    assert report["capture"]["pid"] == child.pid
    assert tree_digest(path.parent) == before
    err = captured.err.splitlines()
    assert err[0] == ("inspect: recoverable: sessions 1 rows, messages 6 rows; "
                      "source unchanged: True")
    assert err[1].startswith("next: `sessions recover ") and "--output NEW.db" in err[1]


def test_recover_output_and_report_from_the_capture(retired, tmp_path, capsys):
    path, child, capture = retired
    child.kill()
    before = tree_digest(capture)
    out, rep = tmp_path / "salvaged.db", tmp_path / "r.json"
    assert cli(["sessions", "recover", str(capture / "state.db"), "--output",
                str(out), "--allow-partial", "--report", str(rep)]) == 0
    assert json.loads(rep.read_text())["output"]["written"] is True
    assert "move it into place yourself" in capsys.readouterr().err
    with SessionDB(out, read_only=True) as db:
        assert [m["content"] for m in db.get_messages("s")] == [f"committed-{i}"
                                                                for i in range(6)]
    assert tree_digest(capture) == before


def test_spooled_messages_are_an_issue_until_replayed_exactly_once(retired, capsys):
    path, child, capture = retired
    child.kill()
    child.wait()
    assert cli(["--home", str(path.parent), "sessions", "salvage", str(capture), "--apply"]) == 0
    with SessionDB(path) as db:
        db.divert_to_spool("s", [{"role": "user", "content": "kept aside"},
                                 {"role": "assistant", "content": "also kept"}])
    assert cli(["--home", str(path.parent), "doctor"]) == 1
    out = capsys.readouterr().out
    assert "[issue] 2 spooled message(s) in " in out and "`sessions replay-spool`" in out
    assert cli(["--home", str(path.parent), "sessions", "replay-spool"]) == 0
    assert capsys.readouterr().out.startswith("imported 2 message(s), 0 already imported")
    assert cli(["--home", str(path.parent), "sessions", "replay-spool"]) == 0
    assert capsys.readouterr().out.startswith("imported 0 message(s), 2 already imported")
    assert cli(["--home", str(path.parent), "doctor"]) == 0
    assert "2 spooled message(s) in " in capsys.readouterr().out
    with SessionDB(path, read_only=True) as db:
        contents = [m["content"] for m in db.get_messages("s")]
    assert contents.count("kept aside") == 1 and contents.count("also kept") == 1


def _killed_mid_transaction(path: Path) -> None:
    """A real process in DELETE journal mode SIGKILLed inside a write: a hot -journal."""
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "committed before the crash")
    code = (
        "import os, signal, sqlite3, sys\n"
        "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
        "c.execute('PRAGMA journal_mode=DELETE'); c.execute('PRAGMA cache_size=1')\n"
        "c.execute('BEGIN IMMEDIATE')\n"
        "c.execute('UPDATE messages SET content = hex(randomblob(20000))')\n"
        "c.execute(\"INSERT INTO state_meta VALUES ('x', hex(randomblob(50000)))\")\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n")
    proc = subprocess.run([sys.executable, "-c", code, str(path)], timeout=60)
    assert proc.returncode == -9
    assert Path(f"{path}-journal").stat().st_size > 0


def test_hot_journal_is_reported_untouched_and_rolled_back_by_fix(tmp_path, capsys):
    path = tmp_path / "state.db"
    _killed_mid_transaction(path)
    before = tree_digest(tmp_path)
    assert cli(["--home", str(tmp_path), "doctor"]) == 1
    out = capsys.readouterr().out
    assert "[issue] the store has an interrupted transaction in state.db-journal" in out
    assert "never delete state.db-journal" in out
    assert "[warn] rollback journal state.db-journal" in out
    assert tree_digest(tmp_path) == before  # a read-only doctor changed nothing
    assert cli(["--home", str(tmp_path), "doctor", "--fix"]) == 0
    out = capsys.readouterr().out
    assert "--fix: the interrupted transaction was rolled back (state.db-journal gone)" in out
    assert not Path(f"{path}-journal").exists()
    with SessionDB(path, read_only=True) as db:
        assert [m["content"] for m in db.get_messages("s")] == ["committed before the crash"]
    assert cli(["--home", str(tmp_path), "doctor"]) == 0


def test_every_kind_of_evidence_file_comes_with_what_to_do(tmp_path, capsys):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
    assert cli(["--home", str(tmp_path), "backup", "--reason", "pre-update"]) == 0
    assert cli(["--home", str(tmp_path), "backup"]) == 0
    capsys.readouterr()
    bak = next(tmp_path.glob("state.db.pre-update-emergency-*.bak"))
    # A damaged store of another profile moved aside by the quarantine (SPEC §12).
    other = tmp_path / "p" / "state.db"
    other.parent.mkdir()
    other.write_bytes(b"not a database at all" * 100)
    SessionDB(other).close()
    corrupt = next(other.parent.glob("state.db.corrupt.*.bak"))
    os.replace(corrupt, tmp_path / corrupt.name)
    assert cli(["--home", str(tmp_path), "doctor"]) == 0  # warnings only
    out = capsys.readouterr().out
    assert f"[warn] evidence file {bak.name}" in out
    assert f"`sessions recover {bak} --inspect-only` first, then `backup restore " \
           f"{bak.name}`" in out
    assert f"[warn] evidence file {corrupt.name}" in out
    assert "Do NOT copy it back over state.db: it has the same damage" in out
    assert "1 snapshot(s) in " in out and "`backup restore ID`" in out
    assert "never delete them, never copy state.db alone" in out
    assert cli(["--home", str(tmp_path), "backup", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert f"{bak.name}  pre-update  verified=True" in listed
    assert any(line.endswith("  snapshot  verified=True  sessions=1  messages=0")
               for line in listed)
    assert listed[-1].startswith("restore one with `backup restore ID` after stopping")
    # The guide's way back from the pre-update copy: inspect it first, then restore it.
    assert cli(["sessions", "recover", str(bak), "--inspect-only"]) == 0
    assert cli(["--home", str(tmp_path), "backup", "restore", bak.name]) == 0


def test_backup_restore_is_refused_under_a_holder_and_names_it(tmp_path, spawn, capsys):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
    assert cli(["--home", str(tmp_path), "backup", "--json"]) == 0
    sid = json.loads(capsys.readouterr().out)["id"]
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    before = tree_digest(tmp_path)
    assert cli(["--home", str(tmp_path), "backup", "restore", sid]) == 1
    err = capsys.readouterr().err
    assert f"Refusing `backup restore {sid}`: another process is using {path}; not restored." \
        in err
    assert f"PID {child.pid} (" in err and "state.db-wal" in err
    assert tree_digest(tmp_path) == before


def test_doctor_reads_a_store_without_creating_it(tmp_path, capsys):
    assert cli(["--home", str(tmp_path), "doctor"]) == 0
    assert list(tmp_path.iterdir()) == []
    assert "SQLite " in capsys.readouterr().out  # the WAL-reset exposure line is always there


def test_exposure_line_names_the_remedy_when_exposed(tmp_path, capsys):
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="cli")
    assert cli(["--home", str(tmp_path), "doctor", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    exposure = [f for f in report["findings"] if f["title"].startswith(f"SQLite "
                                                                         f"{sqlite3.sqlite_version}")]
    assert len(exposure) == 1
    if exposure[0]["level"] == "warn":
        assert "fixed in 3.51.3" in exposure[0]["detail"][0]
        assert "Python linked against a fixed SQLite" in exposure[0]["detail"][0]
    else:
        assert "has the WAL-reset fix" in exposure[0]["title"]


def test_damaged_store_points_to_inspect_only_then_snapshots(tmp_path, capsys):
    """'When the three steps do not work': doctor says the file is damaged and what to run."""
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        for i in range(300):
            db.append_message("s", "user", f"row {i} " + "x" * 300)
    raw = sqlite3.connect(str(path))
    pages = [r[0] for r in raw.execute("SELECT pageno FROM dbstat WHERE name = 'messages' "
                                       "AND pagetype = 'leaf' ORDER BY pageno")]
    page_size = raw.execute("PRAGMA page_size").fetchone()[0]
    raw.close()
    with open(path, "r+b") as fh:
        fh.seek((pages[len(pages) // 2] - 1) * page_size)
        fh.write(b"\xa5" * page_size)
    assert cli(["--home", str(tmp_path), "doctor"]) == 1
    out = capsys.readouterr().out
    assert "[issue] the store is damaged: database disk image is malformed" in out
    assert f"`sessions recover {path} --inspect-only` (it changes no file)" in out
    assert "`backup restore ID`" in out
    before = tree_digest(tmp_path)
    assert cli(["sessions", "recover", str(path), "--inspect-only"]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["errors"][0].startswith("messages: ")
    assert "--allow-partial` keeps every readable row" in captured.err
    assert tree_digest(tmp_path) == before


def test_fix_is_skipped_while_another_process_holds_the_store(tmp_path, capsys):
    """'Do not run doctor --fix while processes run': it reports and repairs nothing."""
    path = tmp_path / "state.db"
    _killed_mid_transaction(path)
    # A raw reader holding the files (a SessionDB writer would roll the journal back itself).
    reader = subprocess.Popen([sys.executable, "-c", "import sys; f = open(sys.argv[1], 'rb'); "
                               "print('open', flush=True); sys.stdin.read()", str(path)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "open"
        before = tree_digest(tmp_path)
        assert cli(["--home", str(tmp_path), "doctor", "--fix"]) == 1
        out = capsys.readouterr().out
        assert f"PID {reader.pid} (" in out
        assert "[warn] --fix skipped: another process holds the store" in out
        assert tree_digest(tmp_path) == before
    finally:
        reader.stdin.close()
        reader.wait(timeout=60)


def test_doctor_names_the_write_lock_owner(tmp_path, spawn, capsys):
    """The write give-up error says "run `doctor` to see who holds the store": doctor does."""
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
    assert cli(["--home", str(tmp_path), "doctor", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stats"]["write_lock_owner"] is None
    holder = spawn("lock_holder.py", path)
    assert holder.readline() == "LOCKED", holder.stderr()
    assert cli(["--home", str(tmp_path), "doctor"]) == 0
    out = capsys.readouterr().out
    assert f"[ok] state.db write lock held by PID {holder.pid} (" in out
    assert cli(["--home", str(tmp_path), "doctor", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["stats"]["write_lock_owner"]["pid"] == holder.pid


def test_read_commands_work_under_a_retired_holder_but_warn(retired, capsys):
    """SPEC §10.4: read-only listing still works; the CLI says what it cannot show."""
    path, child, _ = retired
    assert cli(["--home", str(path.parent), "sessions", "list"]) == 0
    err = capsys.readouterr().err
    assert f"warning: PID {child.pid} (" in err
    assert "still hold(s) a retired WAL generation" in err and "`hermes-state doctor`" in err
    child.kill()
    assert cli(["--home", str(path.parent), "sessions", "list"]) == 0
    assert capsys.readouterr().err == ""


def test_quick_check_lines_come_with_the_guides_next_steps(tmp_path, capsys):
    """A damaged freelist: quick_check answers with lines instead of an error."""
    import struct

    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        for i in range(200):
            db.append_message("s", "user", f"row {i} " + f"word{i} " * 40)
        db._write(lambda c: c.execute("DELETE FROM messages WHERE id > 50"))
    header = path.read_bytes()[:100]
    page_size, trunk = struct.unpack(">H", header[16:18])[0], struct.unpack(">I", header[32:36])[0]
    assert trunk > 0
    with open(path, "r+b") as fh:  # the first freelist trunk page claims 0xFFFFFF leaves
        fh.seek((trunk - 1) * page_size + 4)
        fh.write(struct.pack(">I", 0xFFFFFF))
    assert cli(["--home", str(tmp_path), "doctor"]) == 1
    out = capsys.readouterr().out
    assert "[issue] quick_check found damage" in out
    assert f"`sessions recover {path} --inspect-only` (it changes no file)" in out
    assert "STATE.DB" not in out
