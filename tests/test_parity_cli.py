"""The CLI for the parity methods (issue 17 item 4): archive/unarchive, import, search by
session id, the prune candidates preview. Real store files, real holder processes."""

from __future__ import annotations

import json
import time

import pytest

from hermes_state import SessionDB
from hermes_state.cli import main as cli

DAY = 86400.0


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        for sid, days in (("alpha-old", 200), ("beta-new", 1)):
            t = time.time() - days * DAY
            db.create_session(sid, "cli")
            db.append_message(sid, "user", f"hello from {sid}", timestamp=t)
            db.end_session(sid, "user_exit")
            db._write(lambda c, sid=sid, t=t: c.execute(
                "UPDATE sessions SET started_at = ?, ended_at = ? WHERE id = ?", (t, t, sid)))
        db.set_session_title("alpha-old", "Old work")
        db.create_session("root", "cli")
        db.end_session("root", "compression")
        db.create_session("root-tip", "cli", parent_session_id="root")
    return path


def run(store, *argv):
    return cli(["--home", str(store.parent), *argv])


def archived(store, sid):
    with SessionDB(store, read_only=True) as db:
        return db.get_session(sid)["archived"]


def test_archive_and_unarchive_by_prefix_with_the_lineage(store, capsys):
    assert run(store, "sessions", "archive", "root-t") == 0
    assert "archived root-tip" in capsys.readouterr().out
    assert archived(store, "root") == archived(store, "root-tip") == 1
    assert run(store, "sessions", "unarchive", "root", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"id": "root", "unarchived": True}
    assert archived(store, "root-tip") == 0


def test_archive_errors(store, capsys):
    assert run(store, "sessions", "archive", "nothing-like-this") == 1
    assert "no single session matches" in capsys.readouterr().err
    assert run(store, "sessions", "archive") == 1
    assert "--older-than" in capsys.readouterr().err
    assert run(store, "sessions", "unarchive") == 1


def test_archive_older_than_with_preview(store, capsys):
    assert run(store, "sessions", "archive", "--older-than", "90", "--dry-run", "--json") == 0
    assert json.loads(capsys.readouterr().out) == {"would_archive": ["alpha-old"]}
    assert archived(store, "alpha-old") == 0
    assert run(store, "sessions", "archive", "--older-than", "90") == 0
    assert "archived 1 session(s)" in capsys.readouterr().out
    assert archived(store, "alpha-old") == 1 and archived(store, "beta-new") == 0


def test_search_by_session_id(store, capsys):
    assert run(store, "sessions", "search", "--id", "ROOT", "--json") == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["id"], r.get("_lineage_root_id")) for r in rows] == [("root-tip", "root")]
    assert run(store, "sessions", "search", "--id", "alpha") == 0
    assert "alpha-old" in capsys.readouterr().out
    assert run(store, "sessions", "search", "--id", "zzz") == 0
    assert "no matching session id" in capsys.readouterr().out


def test_prune_preview_shows_the_candidates(store, capsys):
    assert run(store, "sessions", "prune", "--dry-run") == 0
    out = capsys.readouterr().out
    assert "1 ended session(s) older than 90 days would be pruned" in out
    assert "alpha-old" in out and "Old work" in out and "beta-new" not in out
    assert run(store, "sessions", "prune", "--dry-run", "--json") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["candidates"] == ["alpha-old"]
    assert result["candidate_rows"][0]["title"] == "Old work"


def test_import_round_trip_json_and_jsonl(store, tmp_path, capsys):
    for fmt in ("json", "jsonl"):
        out = tmp_path / f"export.{fmt}"
        assert run(store, "sessions", "export", "--format", fmt, "--output", str(out)) == 0
        target = tmp_path / fmt / "state.db"
        target.parent.mkdir()
        SessionDB(target).close()
        assert cli(["--home", str(target.parent), "sessions", "import", str(out)]) == 0
        assert "imported 4 session(s), skipped 0" in capsys.readouterr().out
        with SessionDB(target, read_only=True) as db:
            assert db.get_session("alpha-old")["title"] == "Old work"
            assert db.get_session("root-tip")["parent_session_id"] == "root"
            assert [m["content"] for m in db.get_messages("beta-new")] == ["hello from beta-new"]
    assert run(store, "sessions", "import", str(tmp_path / "export.json"), "--json") == 0
    assert json.loads(capsys.readouterr().out)["skipped"] == 4


def test_import_invalid_file_writes_nothing(store, tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"id": "ok"}, {"id": "x", "messages": "nope"}]))
    assert run(store, "sessions", "import", str(bad)) == 1
    err = capsys.readouterr().err
    assert "entry 1 (x): messages must be a list" in err and "nothing imported" in err
    with SessionDB(store, read_only=True) as db:
        assert db.get_session("ok") is None
    garbage = tmp_path / "garbage.txt"
    garbage.write_text("{not json")
    assert run(store, "sessions", "import", str(garbage)) == 1
    assert "neither JSON nor JSON lines" in capsys.readouterr().err
    assert run(store, "sessions", "import", str(tmp_path / "missing.json")) == 1


def test_import_is_refused_under_a_live_writer(store, tmp_path, spawn, capsys):
    data = tmp_path / "one.json"
    data.write_text(json.dumps({"id": "imported"}))
    child = spawn("store_child.py")
    pid = child.ok("open", path=str(store))["pid"]
    assert run(store, "sessions", "import", str(data)) == 1
    err = capsys.readouterr().err
    assert "Refusing `sessions import`" in err and f"PID {pid}" in err
    assert run(store, "sessions", "import", str(data), "--force") == 0
