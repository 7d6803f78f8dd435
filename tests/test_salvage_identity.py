"""``sessions salvage`` checks whose capture it is and salvages what it can (issue 22 item 5).

A capture is a real retired-WAL capture (a child process loses its WAL and captures it). A
capture of another store (another profile) must not be merged into this store's unrelated
session with the same id; one row the store cannot take must not cost the other sessions their
acknowledged messages.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.cli import main
from hermes_state.operator import salvage
from hermes_state.operator.salvage import apply_captures, captures_beside, plan_capture


def make_capture(home: Path, spawn, sid: str = "s", n: int = 3) -> tuple[Path, Path]:
    """A store in ``home`` whose writer lost a WAL holding ``n`` messages of ``sid``; the store
    is reopened (a new generation) without them. Returns ``(db path, capture dir)``."""
    path = home / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid=sid)
    child.ok("append", sid=sid, n=n, prefix=f"{home.name}-captured")
    os.unlink(f"{path}-wal")
    os.unlink(f"{path}-shm")
    assert child.call("append", sid=sid, n=1, prefix="refused")["error"] == \
        "DeletedWalGenerationError"
    child.ok("exit")
    assert child.wait() == 0
    [capture] = captures_beside(path)
    SessionDB(path).close()
    return path, capture


def contents(path: Path, sid: str) -> list[str]:
    with SessionDB(path, read_only=True) as db:
        return [m["content"] for m in db.get_messages(sid)]


def test_a_capture_of_another_profile_is_refused_by_name_and_forced_by_name(tmp_path, spawn,
                                                                           capsys):
    _, capture = make_capture(tmp_path / "work", spawn)
    other = tmp_path / "personal" / "state.db"
    with SessionDB(other) as db:  # an unrelated conversation that happens to be called "s"
        db.create_session("s", source="cli")
        db.append_message("s", "user", "my own conversation")
    home = str(other.parent)
    # Before the fix: exit 0 and the work profile's messages merged into this "s".
    assert main(["--home", home, "sessions", "salvage", str(capture), "--apply"]) == 1
    err = capsys.readouterr().err
    assert "refusing to salvage" in err and "another store" in err
    assert contents(other, "s") == ["my own conversation"]  # untouched
    with pytest.raises(salvage.ForeignCaptureError) as info:
        apply_captures(other, [capture])
    text = str(info.value)
    assert "another store" in text and info.value.capture_token in text
    assert info.value.store_token in text and "--allow-foreign" in info.value.operator_detail
    with pytest.raises(salvage.ForeignCaptureError):
        plan_capture(other, capture)  # listing names it too, never a silent comparison

    # Forced by its own name (not by --force, which is the live-writer gate's).
    assert main(["--home", home, "sessions", "salvage", str(capture), "--apply",
                 "--allow-foreign", "--json"]) == 0
    [res] = json.loads(capsys.readouterr().out)
    assert res["identity"]["allowed_foreign"] and not res["identity"]["same_store"]
    assert contents(other, "s") == ["my own conversation"] + [f"work-captured-{i}"
                                                              for i in range(3)]


def test_a_capture_of_this_store_is_recognised_by_its_token(tmp_path, spawn):
    path, capture = make_capture(tmp_path / "home", spawn)
    plan = plan_capture(path, capture)
    assert plan.missing_messages == 3
    assert plan.identity["same_store"] and plan.identity["capture_token"]
    assert plan.missing_messages == 3


def test_a_replaced_store_at_the_same_path_is_named_as_replaced(tmp_path, spawn):
    path, capture = make_capture(tmp_path / "home", spawn)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(f"{path}{suffix}"):
            os.unlink(f"{path}{suffix}")
    SessionDB(path).close()  # a new store (new token) at the same path
    with pytest.raises(salvage.ForeignCaptureError, match="replaced since"):
        apply_captures(path, [capture])


def doctored_capture(capture: Path, dest: Path, edit) -> Path:
    """A copy of ``capture`` whose database ``edit(conn)`` changed (foreign keys off), with
    the WAL folded in (the manifest's token, hence the store identity, is kept)."""
    shutil.copytree(capture, dest)
    conn = sqlite3.connect(dest / "state.db", isolation_level=None)
    try:
        conn.execute("PRAGMA foreign_keys=OFF")
        edit(conn)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        conn.close()
    for side in ("state.db-wal", "state.db-shm"):
        if (dest / side).exists():
            os.unlink(dest / side)
    manifest = json.loads((dest / "manifest.json").read_text())
    manifest["wal"]["sha256"] = None
    (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def test_an_orphan_row_costs_nothing_else_and_is_named(tmp_path, spawn, capsys):
    path, capture = make_capture(tmp_path / "home", spawn)

    def edit(conn):
        conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                     "VALUES ('ghost', 'user', 'orphan row', 1.0)")
        conn.execute("INSERT INTO sessions(id, source, started_at) VALUES ('extra', 'cli', 1.0)")
        conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                     "VALUES ('extra', 'user', 'extra message', 2.0)")

    bad = doctored_capture(capture, tmp_path / "capture-with-orphan", edit)
    # Before the fix the whole --apply failed with FOREIGN KEY and salvaged nothing.
    assert main(["--home", str(path.parent), "sessions", "salvage", str(bad), "--apply"]) == 1
    captured = capsys.readouterr()
    assert "appended 4 message(s) and 2 session(s)" in captured.out, captured
    assert "not salvaged: message #" in captured.err and "'ghost'" in captured.err
    assert contents(path, "s") == [f"home-captured-{i}" for i in range(3)]
    assert contents(path, "extra") == ["extra message"]
    with SessionDB(path, read_only=True) as db:
        assert db.get_session("ghost") is None
        [record] = [json.loads(v) for k, v in db.connection.read(lambda c: c.execute(
            "SELECT key, value FROM state_meta WHERE key LIKE 'salvage:%'").fetchall())]
    assert [r["session_id"] for r in record["not_salvaged"]] == ["ghost"]
    plan = plan_capture(path, bad)
    assert [r["session_id"] for r in plan.not_salvageable] == ["ghost"]
    assert "neither the capture nor the store" in plan.not_salvageable[0]["why"]


def test_a_row_the_live_schema_refuses_is_skipped_with_its_reason(tmp_path, spawn):
    """A session the live schema refuses (NULL source: NOT NULL) is named with SQLite's reason;
    its messages are named too; every other row still comes back in the same transaction."""
    path, capture = make_capture(tmp_path / "home", spawn)

    def edit(conn):
        conn.execute("PRAGMA writable_schema=ON")  # a foreign client's laxer sessions table
        conn.execute("UPDATE sqlite_master SET sql = replace(sql, 'source TEXT NOT NULL', "
                     "'source TEXT') WHERE name = 'sessions'")
        conn.execute("PRAGMA writable_schema=OFF")
    bad = doctored_capture(capture, tmp_path / "lax", edit)
    conn = sqlite3.connect(bad / "state.db", isolation_level=None)
    conn.execute("INSERT INTO sessions(id, source, started_at) VALUES ('nosource', NULL, 1.0)")
    conn.execute("INSERT INTO messages(session_id, role, content, timestamp) "
                 "VALUES ('nosource', 'user', 'lost cause', 1.0)")
    conn.close()
    [res] = apply_captures(path, [bad])
    assert res["messages_added_total"] == 3
    whys = {(r["table"], r["session_id"]): r["why"] for r in res["not_salvaged"]}
    assert "NOT NULL" in whys[("sessions", "nosource")]
    assert "could not be added" in whys[("messages", "nosource")]
    assert contents(path, "s") == [f"home-captured-{i}" for i in range(3)]
