"""``sessions salvage``: what a retired-WAL capture holds that the store lacks comes back, matched
by content and order (not row id), in one gated transaction, recorded, idempotent (issue 16
item 3).

Real processes and real deletions: a child writes, its WAL and shm are deleted under it, it is
refused and captures; a new generation then writes and reuses the retired rows' ids.
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
from hermes_state.operator.doctor import run_doctor
from hermes_state.operator.salvage import (
    SalvageError,
    apply_captures,
    captures_beside,
    missing_rows,
    plan_capture,
)
from hermes_state.processes.writer_gate import MaintenanceRefused


def _messages(path: Path, sid: str) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT id, role, content FROM messages WHERE session_id = ? "
                            "ORDER BY id", (sid,)).fetchall()
    finally:
        conn.close()


@pytest.fixture
def retired(tmp_path, spawn):
    """A store whose writer lost its WAL after 4 messages of session s (all only in the WAL),
    was refused, captured and exited; then a new generation wrote 'later-*' into s and t."""
    path = tmp_path / "home" / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=4, prefix="captured")
    os.unlink(f"{path}-wal")
    os.unlink(f"{path}-shm")
    assert child.call("append", sid="s", n=1, prefix="refused")["error"] == \
        "DeletedWalGenerationError"
    child.ok("close")
    child.ok("exit")
    assert child.wait() == 0
    [capture] = captures_beside(path)
    with SessionDB(path) as db:  # the new generation: s is gone (it lived in the lost WAL)
        assert db.get_session("s") is None
        db.create_session("s", source="cli")
        db.create_session("t", source="cli")
        for i in range(3):
            db.append_message("s", "user", f"later-{i}")
        db.append_message("t", "user", "other")
    return path, capture


def test_the_plan_lists_capture_only_messages_matched_by_content_not_row_id(retired):
    path, capture = retired
    live = _messages(path, "s")
    # The new generation reused the retired rows' ids: id equality would match wrongly.
    assert [r[0] for r in live] == [1, 2, 3]
    plan = plan_capture(path, capture)
    assert plan.sessions == 1 and plan.messages == 4 and plan.matched == 0
    assert [m["content"] for m in plan.missing["s"]] == [f"captured-{i}" for i in range(4)]
    assert plan.new_sessions == []  # s exists again (re-created by the new generation)
    summary = plan.to_dict()
    assert summary["missing_messages"] == 4 and summary["by_session"][0]["first"]["content"] \
        == "captured-0"


def test_apply_appends_once_records_and_a_second_apply_adds_nothing(retired, capsys):
    path, capture = retired
    before = _messages(path, "s")
    assert main(["--home", str(path.parent), "sessions", "salvage", str(capture)]) == 0
    out = capsys.readouterr().out
    assert "the store lacks 4 message(s) and 0 whole session(s)" in out
    assert "--apply` after stopping every process using the store" in out
    assert _messages(path, "s") == before  # listing changes nothing

    assert main(["--home", str(path.parent), "sessions", "salvage", str(capture), "--apply"]) == 0
    out = capsys.readouterr().out
    assert "appended 4 message(s) and 0 session(s)" in out and "state_meta as salvage:" in out
    after = _messages(path, "s")
    assert after[:3] == before
    assert [r[2] for r in after[3:]] == [f"captured-{i}" for i in range(4)]
    with SessionDB(path, read_only=True) as db:
        assert db.get_session("s")["message_count"] == 7
        hits = db.search_messages("captured")  # the FTS index has the salvaged rows
        assert len(hits) == 4
    conn = sqlite3.connect(path)
    try:
        [(key, value)] = conn.execute(
            "SELECT key, value FROM state_meta WHERE key LIKE 'salvage:%'").fetchall()
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        conn.close()
    record = json.loads(value)
    assert key.startswith(f"salvage:{capture.name}:")
    assert record["messages_added"] == {"s": [r[0] for r in after[3:]]}

    # Idempotent: every captured row now has its partner.
    assert main(["--home", str(path.parent), "sessions", "salvage", "--apply", "--json"]) == 0
    [res] = json.loads(capsys.readouterr().out)
    assert res["messages_added_total"] == 0 and res["record_key"] is None
    assert res["plan"]["matched_messages"] == 4
    assert _messages(path, "s") == after


def test_a_session_the_store_lacks_entirely_comes_back_with_its_messages(tmp_path, spawn):
    path = tmp_path / "home" / "state.db"
    with SessionDB(path) as db:
        db.create_session("root", source="cli")
        db.set_session_title("root", "Root title")
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="gone")
    child.ok("append", sid="gone", n=2, prefix="only-in-capture")
    os.unlink(f"{path}-wal")
    os.unlink(f"{path}-shm")
    assert child.call("create", sid="x")["error"] == "DeletedWalGenerationError"
    child.ok("exit")
    child.wait()
    [res] = apply_captures(path, captures_beside(path))
    assert res["sessions_added"] == ["gone"] and res["messages_added_total"] == 2
    with SessionDB(path, read_only=True) as db:
        assert db.get_session("gone")["message_count"] == 2
        assert [m["content"] for m in db.get_messages("gone")] == \
            ["only-in-capture-0", "only-in-capture-1"]


def test_apply_is_refused_while_another_process_holds_the_store(retired, spawn, capsys):
    path, capture = retired
    holder = spawn("store_child.py")
    holder.ok("open", path=str(path))
    before = _messages(path, "s")
    with pytest.raises(MaintenanceRefused) as info:
        apply_captures(path, [capture])
    assert f"PID {holder.pid}" in str(info.value)
    assert "Refusing `sessions salvage`" in str(info.value)
    assert main(["--home", str(path.parent), "sessions", "salvage", "--apply"]) == 1
    assert "Refusing `sessions salvage`" in capsys.readouterr().err
    assert _messages(path, "s") == before
    # Listing is never refused.
    assert main(["--home", str(path.parent), "sessions", "salvage"]) == 0


def test_doctor_points_to_salvage_when_a_capture_holds_rows_the_store_lacks(retired):
    path, capture = retired
    text = run_doctor(path).render()
    assert "holds 4 message(s) in 1 session(s) that the store lacks" in text, text
    assert f"`sessions salvage {capture} --apply`" in text
    apply_captures(path, [capture])
    text = run_doctor(path).render()
    assert "session(s) that the store lacks" not in text
    assert "the store has every message of this capture" in text


def test_a_capture_whose_wal_is_not_the_manifests_is_refused(retired, tmp_path):
    path, capture = retired
    bad = tmp_path / "bad-capture"
    shutil.copytree(capture, bad)
    with open(bad / "state.db-wal", "r+b") as fh:
        fh.seek(40)
        fh.write(b"\xff")
    with pytest.raises(SalvageError, match="not the WAL its manifest describes"):
        plan_capture(path, bad)
    manifest = json.loads((capture / "manifest.json").read_text())
    manifest["main"]["mode"] = "header_only"
    (bad / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(SalvageError, match="holds only the 100-byte header"):
        plan_capture(path, bad)
    with pytest.raises(SalvageError, match="is not a directory"):
        plan_capture(path, tmp_path / "nope")


def test_missing_rows_pairs_by_content_and_order():
    cols = ("role", "content")
    cap = [{"role": "user", "content": c} for c in ("a", "b", "c", "b")]
    # The store has a, b, then newer rows x, y, then the second b: c and nothing else is missing.
    store = [("user", "a"), ("user", "b"), ("user", "x"), ("user", "y"), ("user", "b")]
    assert [r["content"] for r in missing_rows(cap, store, cols)] == ["c"]
    assert missing_rows(cap, [], cols) == cap
    assert missing_rows([], store, cols) == []
