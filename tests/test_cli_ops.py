"""Operator CLI: doctor, the live-writer gate (SPEC §9, §11, §15). Real holder processes."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.cli import main as cli


def digest(path: Path) -> dict:
    out = {}
    for suffix in ("", "-wal", "-shm"):
        p = Path(f"{path}{suffix}")
        out[suffix] = hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None
    return out


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("old", source="cli")
        db.append_message("old", "user", "hello there")
        db.end_session("old", "done")
    return path


def test_doctor_never_creates_a_store(tmp_path, capsys):
    code = cli(["--home", str(tmp_path / "nowhere"), "doctor"])
    assert code == 0
    assert not (tmp_path / "nowhere" / "state.db").exists()
    assert "no session store" in capsys.readouterr().out


def test_doctor_healthy_store_reports_counts_and_exposure(store, capsys):
    assert cli(["--home", str(store.parent), "doctor"]) == 0
    out = capsys.readouterr().out
    assert "[ok] 1 sessions, 1 messages" in out
    assert "quick_check ok" in out
    assert "schema version 23" in out
    assert "SQLite" in out


def test_doctor_names_a_retired_holder_first_and_stops(store, spawn, capsys):
    child = spawn("store_child.py")
    pid = child.ok("open", path=str(store))["pid"]
    os.unlink(f"{store}-wal")
    os.unlink(f"{store}-shm")
    code = cli(["--home", str(store.parent), "doctor"])
    out = capsys.readouterr().out
    assert code == 1
    assert "1 process(es) still hold a retired WAL generation" in out
    assert f"PID {pid} (" in out
    assert "quick_check" not in out  # it stopped before any open
    assert not Path(f"{store}-wal").exists()  # doctor did not mint a new generation


def test_doctor_lists_holders_with_their_files(store, spawn, capsys):
    child = spawn("store_child.py")
    pid = child.ok("open", path=str(store))["pid"]
    assert cli(["--home", str(store.parent), "doctor", "--json"]) == 0
    out = capsys.readouterr().out
    assert f"PID {pid} (" in out and "state.db, state.db-shm, state.db-wal" in out


@pytest.mark.parametrize("command", [["optimize"], ["optimize-storage"],
                                     ["prune", "--older-than", "0", "--yes"]])
def test_gate_refuses_under_a_live_writer_and_changes_nothing(store, spawn, capsys, command):
    child = spawn("store_child.py")
    pid = child.ok("open", path=str(store))["pid"]
    before = digest(store)
    code = cli(["--home", str(store.parent), "sessions", *command])
    err = capsys.readouterr().err
    assert code == 1
    assert f"Refusing `sessions {command[0]}`: another process is using {store}." in err
    assert f"PID {pid} (" in err and "state.db-wal" in err
    assert "Nothing is lost." in err and "--force" in err
    assert digest(store) == before


def test_dry_run_is_never_refused(store, spawn, capsys):
    child = spawn("store_child.py")
    child.ok("open", path=str(store))
    assert cli(["--home", str(store.parent), "sessions", "optimize", "--dry-run"]) == 0
    assert "would optimize" in capsys.readouterr().out


def test_optimize_runs_when_quiet_and_reports_sizes(store, capsys):
    assert cli(["--home", str(store.parent), "sessions", "optimize"]) == 0
    assert "optimized" in capsys.readouterr().out
    with SessionDB(store) as db:
        assert [m["content"] for m in db.get_messages("old")] == ["hello there"]


def test_force_skips_the_gate(store, spawn, capsys):
    child = spawn("store_child.py")
    child.ok("open", path=str(store))
    assert cli(["--home", str(store.parent), "sessions", "optimize", "--force"]) == 0


def test_errors_are_short_and_name_the_next_step(tmp_path, capsys):
    code = cli(["--home", str(tmp_path), "sessions", "show", "nope"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 1
    assert len(err) == 2 and err[0].startswith("error:") and err[1].startswith("next:")


def test_prune_under_the_owning_gateway_is_handed_to_it(store, spawn, capsys):
    """SPEC §11: the only holder is the gateway that owns the store: preview, then hand off."""
    with SessionDB(store) as db:  # an ended session old enough to prune
        db._write(lambda c: c.execute("UPDATE sessions SET started_at = 0, ended_at = 1"))
        db._write(lambda c: c.execute("UPDATE messages SET timestamp = 1"))
    gw = spawn("gateway_owner.py", str(store))
    ready = gw.readline()
    assert ready.startswith("ready ")
    code = cli(["--home", str(store.parent), "sessions", "prune", "--older-than", "1", "--yes"])
    out = capsys.readouterr().out
    assert code == 0
    assert f"the gateway (PID {ready.split()[1]}) owns the store: prune handed to it" in out
    ran = gw.readline()
    assert ran.startswith("ran ") and json.loads(ran[4:])[0]["pruned"] == 1
    gw.send("")  # EOF is not sent by an empty line; close stdin instead
    gw.proc.stdin.close()
    assert gw.wait() == 0
    with SessionDB(store) as db:
        assert db.get_session("old") is None
        assert db.get_session("live") is not None


def test_prune_under_another_holder_is_refused(store, spawn, capsys):
    child = spawn("store_child.py")
    child.ok("open", path=str(store))
    assert cli(["--home", str(store.parent), "sessions", "prune", "--older-than", "0",
                "--yes"]) == 1
    assert "Refusing `sessions prune`" in capsys.readouterr().err


def test_profile_and_home_are_accepted_after_the_subcommand_too(tmp_path, capsys):
    """The guide writes `doctor -p <profile>`: the option works on either side."""
    path = tmp_path / "profiles" / "work" / "state.db"
    path.parent.mkdir(parents=True)
    with SessionDB(path) as db:
        db.create_session("w", source="cli")
    for argv in (["--home", str(tmp_path), "doctor", "-p", "work"],
                 ["-p", "work", "doctor", "--home", str(tmp_path)],
                 ["--home", str(tmp_path), "-p", "work", "doctor"]):
        assert cli(argv) == 0
        assert capsys.readouterr().out.startswith(f"doctor: {path}\n")
    assert cli(["--home", str(tmp_path), "sessions", "list", "--profile", "work"]) == 0
    assert capsys.readouterr().out.startswith("w ")
    assert cli(["--home", str(tmp_path), "doctor", "-p", "nope"]) == 0
    assert not (tmp_path / "profiles" / "nope").exists()  # doctor creates nothing


def test_a_closed_pipe_is_not_reported_as_a_store_error(store):
    """`hermes-state sessions export | head -1`: no 'run doctor' advice for a closed pipe."""
    import subprocess
    import sys

    with SessionDB(store) as db:
        db._write(lambda c: c.executemany(  # ~600 KB of JSON lines: far over a pipe buffer
            "INSERT INTO sessions(id, source, started_at, system_prompt) VALUES (?, 'cli', 1, ?)",
            [(f"s{i}", "x" * 200) for i in range(3000)]))
    proc = subprocess.Popen([sys.executable, "-m", "hermes_state", "--home", str(store.parent),
                             "sessions", "export", "--format", "jsonl"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith(b"{")
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 1
    assert "Broken pipe" not in err and "doctor" not in err, err


@pytest.mark.parametrize("command", [["optimize"], ["optimize-storage"],
                                     ["prune", "--older-than", "0", "--yes"]])
def test_gate_refusal_in_json_names_the_holders(store, spawn, capsys, command):
    child = spawn("store_child.py")
    pid = child.ok("open", path=str(store))["pid"]
    assert cli(["--home", str(store.parent), "sessions", *command, "--json"]) == 1
    captured = capsys.readouterr()
    assert f"Refusing `sessions {command[0]}`" in captured.err  # the text stays on stderr
    refusal = json.loads(captured.out)
    assert refusal["refused"] is True and refusal["error"] == "MaintenanceRefused"
    assert refusal["scan_complete"] is True
    [holder] = refusal["holders"]
    assert holder["pid"] == pid and "state.db-wal" in holder["files"]


def test_backup_restore_refusal_in_json(store, spawn, capsys):
    assert cli(["--home", str(store.parent), "backup", "--json"]) == 0
    sid = json.loads(capsys.readouterr().out)["id"]
    child = spawn("store_child.py")
    pid = child.ok("open", path=str(store))["pid"]
    assert cli(["--home", str(store.parent), "backup", "restore", sid, "--json"]) == 1
    refusal = json.loads(capsys.readouterr().out)
    assert refusal["error"] == "RestoreRefused" and refusal["scan_complete"] is True
    assert [h["pid"] for h in refusal["holders"]] == [pid]


def test_prune_json_reports_candidates_and_what_was_done(store, capsys):
    with SessionDB(store) as db:
        db._write(lambda c: c.execute("UPDATE sessions SET started_at = 0, ended_at = 1"))
        db._write(lambda c: c.execute("UPDATE messages SET timestamp = 1"))
    assert cli(["--home", str(store.parent), "sessions", "prune", "--older-than", "1",
                "--dry-run", "--json"]) == 0
    preview = json.loads(capsys.readouterr().out)
    assert preview["candidates"] == ["old"] and preview["action"] == "dry_run"
    assert cli(["--home", str(store.parent), "sessions", "prune", "--older-than", "1",
                "--yes", "--json"]) == 0
    done = json.loads(capsys.readouterr().out)
    assert done["action"] == "run" and done["pruned"] == 1


@pytest.mark.parametrize("command", [["optimize"], ["optimize-storage"], ["optimize", "--force"],
                                     ["prune", "--yes"], ["replay-spool"]])
def test_store_rewriting_commands_never_create_a_store(tmp_path, capsys, command):
    assert cli(["--home", str(tmp_path / "typo"), "sessions", *command]) == 1
    assert "no session store at" in capsys.readouterr().err
    assert not (tmp_path / "typo").exists()


def test_version_and_subcommand_help_name_every_command_and_home():
    import subprocess
    import sys

    ver = subprocess.run([sys.executable, "-m", "hermes_state", "--version"],
                         capture_output=True, text=True, timeout=60)
    assert ver.returncode == 0 and ver.stdout.startswith("hermes-state ")
    helptext = subprocess.run([sys.executable, "-m", "hermes_state", "sessions", "--help"],
                              capture_output=True, text=True, timeout=60).stdout
    assert "--home" in helptext
    for name in ("list", "show", "search", "export", "prune", "optimize-storage", "recover"):
        line = next(ln for ln in helptext.splitlines() if ln.strip().startswith(name + " "))
        assert len(line.split()) > 1, f"{name} has no description in `sessions --help`"


@pytest.mark.parametrize("target", ["state.db", "state.db-wal", "state.db-shm", "other.db"])
def test_export_refuses_to_overwrite_the_store_or_any_sqlite_file(tmp_path, target):
    import hashlib
    import sqlite3 as sq
    import subprocess
    import sys

    from hermes_state import SessionDB

    db = SessionDB(tmp_path / "state.db")
    db.create_session("a", source="cli")
    db.append_message("a", "user", "precious")
    sq.connect(tmp_path / "other.db").execute("CREATE TABLE t(x)").connection.commit()
    files = sorted(p for p in tmp_path.iterdir() if p.is_file())
    before = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    proc = subprocess.run([sys.executable, "-m", "hermes_state", "--home", str(tmp_path),
                           "sessions", "export", "a", "--output", str(tmp_path / target)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "--output" in proc.stderr, proc.stderr
    after = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in files}
    assert after == before
    db.append_message("a", "user", "still writable")
    assert [m["content"] for m in db.get_messages("a")] == ["precious", "still writable"]
    db.close()
    ok = subprocess.run([sys.executable, "-m", "hermes_state", "--home", str(tmp_path),
                         "sessions", "export", "a", "--output", str(tmp_path / "a.json")],
                        capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and "still writable" in (tmp_path / "a.json").read_text()


@pytest.mark.parametrize("argv", [
    ["sessions", "prune", "--older-than", "-1", "--yes"],
    ["sessions", "prune", "--older-than", "nan", "--yes"],
    ["sessions", "prune", "--older-than", "inf", "--yes"],
    ["sessions", "search", "hello", "--limit", "-1"],
    ["sessions", "list", "--offset", "-5"],
])
def test_nonsense_numbers_are_usage_errors_and_touch_nothing(tmp_path, argv):
    import subprocess
    import sys

    from hermes_state import SessionDB

    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("old", source="cli")
        db.append_message("old", "user", "hello")
        db.end_session("old", "done")
    proc = subprocess.run([sys.executable, "-m", "hermes_state", "--home", str(tmp_path), *argv],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "expected" in proc.stderr, proc.stderr
    with SessionDB(tmp_path / "state.db") as db:
        assert db.get_session("old") is not None
