"""Prune, delete, archive and export as upstream's users rely on them (UPSTREAM_API §2.8, D10)."""

from __future__ import annotations

import json
import os
import time

import pytest

from hermes_state.processes.writer_gate import MaintenanceRefused

DAY = 86400.0


def sql(db, statement, *args):
    db._write(lambda c: c.execute(statement, args))


def make(db, sid, *, days=200.0, end="user_exit", parent=None, source="cli", **kw):
    db.create_session(sid, source, parent_session_id=parent, **kw)
    t = time.time() - days * DAY
    if end:
        db.end_session(sid, end)
        sql(db, "UPDATE sessions SET ended_at = ? WHERE id = ?", t + 1, sid)
    sql(db, "UPDATE sessions SET started_at = ? WHERE id = ?", t, sid)


def ids(db):
    return {r[0] for r in db._read(lambda c: c.execute("SELECT id FROM sessions").fetchall())}


# ---------------------------------------------------------------------------- delete
def test_delete_session_removes_delegates_recursively_and_orphans_the_rest(db):
    make(db, "parent", end=None)
    make(db, "sub", parent="parent", end=None, model_config={"_delegate_from": "parent"})
    make(db, "subsub", parent="sub", end=None, model_config={"_delegate_from": "sub"})
    make(db, "stray", end=None, model_config={"_delegate_from": "parent"})  # link already lost
    make(db, "branch", parent="parent", end=None, model_config={"_branched_from": "parent"})
    make(db, "plain", parent="parent", end=None)
    make(db, "grandchild", parent="plain", end=None)
    make(db, "sub_child", parent="sub", end=None)  # not a delegate: survives, orphaned
    for sid in ("parent", "sub", "subsub", "stray"):
        db.append_message(sid, "user", f"kubernetes text of {sid}")
    db.update_token_counts("sub", 5, model="m")
    assert db.delete_session("parent") is True
    assert ids(db) == {"branch", "plain", "grandchild", "sub_child"}
    for sid in ("branch", "plain", "sub_child"):
        assert db.get_session(sid)["parent_session_id"] is None
    assert db.get_session("grandchild")["parent_session_id"] == "plain"
    assert db.search_messages("kubernetes") == []
    assert db.get_model_usage("sub") == []
    assert db.delete_session("parent") is False


def test_delete_session_removes_transcripts_safely(db, tmp_path):
    tdir = tmp_path / "transcripts"
    tdir.mkdir()
    outside = tmp_path / "precious.json"
    outside.write_text("keep")
    for name in ("s1.json", "s1.jsonl", "request_dump_s1_001.json", "request_dump_s1_x.json",
                 "s10.json", "request_dump_s10_1.json"):
        (tdir / name).write_text("{}")
    os.symlink(outside, tdir / "link.json")
    make(db, "s1")
    make(db, "link")
    make(db, "../precious")
    assert db.delete_session("s1", sessions_dir=str(tdir)) is True
    assert sorted(p.name for p in tdir.iterdir()) == ["link.json", "request_dump_s10_1.json",
                                                      "s10.json"]
    db.delete_session("link", sessions_dir=str(tdir))
    db.delete_session("../precious", sessions_dir=str(tdir))
    assert outside.read_text() == "keep"  # the link itself went, never its target
    assert not (tdir / "link.json").exists()


def test_delete_session_if_empty(db):
    make(db, "empty", end=None)
    make(db, "titled", end=None)
    db.set_session_title("titled", "T")
    make(db, "talk", end=None)
    db.append_message("talk", "user", "x")
    make(db, "parent", end=None)
    make(db, "kid", parent="parent", end=None)
    for sid in ("titled", "talk", "parent", "missing"):
        assert db.delete_session_if_empty(sid) is False
    assert db.delete_session_if_empty("empty") is True
    assert ids(db) == {"titled", "talk", "parent", "kid"}


def test_delete_sessions_bulk(db):
    for sid in ("a", "b", "c"):
        make(db, sid, end=None if sid == "a" else "user_exit")
    db.set_session_archived("b", True)
    make(db, "dlg", parent="a", end=None, model_config={"_delegate_from": "a"})
    assert db.delete_sessions([]) == 0
    assert db.delete_sessions(["a", "a", "b", "nope", "", None, 5]) == 2
    assert ids(db) == {"c"}


def test_delete_sessions_refused_under_a_live_writer(db, spawn):
    make(db, "a")
    child = spawn("store_child.py")
    child.ok("open", path=str(db.db_path))
    with pytest.raises(MaintenanceRefused, match="another process is using"):
        db.delete_sessions(["a"])
    assert "a" in ids(db)
    assert db.delete_sessions(["a"], force=True) == 1


def test_count_and_delete_empty_sessions(db):
    make(db, "empty")
    make(db, "live_empty", end=None)
    make(db, "archived_empty")
    db.set_session_archived("archived_empty", True)
    make(db, "talk")
    db.append_message("talk", "user", "x")
    make(db, "child", parent="empty", end=None)
    assert db.count_empty_sessions() == 1
    assert db.delete_empty_sessions() == 1
    assert ids(db) == {"live_empty", "archived_empty", "talk", "child"}
    assert db.get_session("child")["parent_session_id"] is None


# ---------------------------------------------------------------------------- prune
def test_prune_filters(db):
    make(db, "a", source="cli", model="gpt-4o", cwd="/repo/x")
    db.set_session_title("a", "Fix the build")
    make(db, "b", source="telegram", model="claude", user_id="u1", chat_id="c1",
         chat_type="dm", billing_provider="OpenRouter", git_branch="feature/x")
    make(db, "c", days=5, end="compression")
    make(db, "live", end=None)
    sql(db, "UPDATE sessions SET message_count = 7, input_tokens = 100, output_tokens = 50, "
        "estimated_cost_usd = 2.5, tool_call_count = 3 WHERE id = 'a'")
    cands = lambda **kw: [r["id"] for r in db.list_prune_candidates(**kw)]  # noqa: E731
    assert cands() == ["a", "b", "c"]
    assert cands(older_than_days=90) == ["a", "b"]
    assert cands(source="telegram") == ["b"]
    assert cands(title_like="BUILD") == ["a"]
    assert cands(model_like="gpt") == ["a"]
    assert cands(branch_like="feature") == ["b"]
    assert cands(end_reason="compression") == ["c"]
    assert cands(user_id="u1", chat_id="c1", chat_type="dm") == ["b"]
    assert cands(provider="openrouter") == ["b"]
    assert cands(cwd_prefix="/repo") == ["a"]
    assert cands(min_messages=5) == ["a"] and "a" not in cands(max_messages=5)
    assert cands(min_tokens=150) == ["a"] and cands(max_tokens=149) == ["b", "c"]
    assert cands(min_cost=2.5) == ["a"] and cands(max_cost=1) == ["b", "c"]
    assert cands(min_tool_calls=3) == ["a"] and cands(max_tool_calls=2) == ["b", "c"]
    assert cands(started_before=time.time() - 100 * DAY) == ["a", "b"]
    assert cands(started_after=time.time() - 100 * DAY) == ["c"]
    row = db.list_prune_candidates(source="cli")[0]
    assert set(row) == {"id", "source", "title", "model", "started_at", "ended_at",
                        "message_count", "archived"}
    with pytest.raises(TypeError):
        db.list_prune_candidates(bogus=1)
    with pytest.raises(TypeError):
        db.prune_sessions(bogus=1)


def test_prune_with_filters_archived_and_transcripts(db, tmp_path):
    tdir = tmp_path / "t"
    tdir.mkdir()
    (tdir / "a.json").write_text("{}")
    make(db, "a")
    make(db, "b")
    db.set_session_archived("b", True)
    assert db.prune_sessions(archived=False, sessions_dir=str(tdir)) == 1
    assert ids(db) == {"b"} and not (tdir / "a.json").exists()
    assert db.prune_sessions(older_than_days=None, archived=True) == 1
    assert ids(db) == set()


def test_prune_orphans_survivors_and_has_no_delegate_cascade(db):
    make(db, "old")
    make(db, "newer", parent="old", days=1)
    make(db, "dlg", parent="old", end=None, model_config={"_delegate_from": "old"})
    assert db.prune_sessions(older_than_days=90) == 1
    assert ids(db) == {"newer", "dlg"}
    assert db.get_session("newer")["parent_session_id"] is None


# ---------------------------------------------------------------------------- archive
def test_set_session_archived_follows_the_compression_lineage(db):
    make(db, "root", end="compression")
    make(db, "mid", parent="root", end="compression")
    make(db, "tip", parent="mid", end=None)
    make(db, "other", end=None)
    make(db, "sub", parent="tip", end=None)  # tip is live: not a compression edge
    assert db.set_session_archived("mid", True) is True
    arch = {sid for sid in ids(db) if db.get_session(sid)["archived"] == 1}
    assert arch == {"root", "mid", "tip"}
    assert [r["id"] for r in db.list_sessions_rich()] == ["other"]
    assert db.session_count() == 2  # other + sub
    assert db.set_session_archived("tip", False) is True
    assert all(db.get_session(s)["archived"] == 0 for s in ("root", "mid", "tip"))
    assert db.set_session_archived("missing", True) is False
    assert len(db.get_messages("tip")) == 0


def test_archive_sessions(db):
    make(db, "old")
    make(db, "young", days=1)
    make(db, "live", end=None)
    make(db, "cont", parent="old", end=None)
    sql(db, "UPDATE sessions SET end_reason = 'compression' WHERE id = 'old'")
    assert db.archive_sessions(older_than_days=90) == 1
    assert db.get_session("old")["archived"] == 1
    assert db.get_session("cont")["archived"] == 1  # its lineage
    assert db.get_session("live")["archived"] == 0
    assert db.archive_sessions(older_than_days=90) == 0


# ---------------------------------------------------------------------------- export
def test_export_session_is_raw_with_active_messages(db):
    make(db, "s", end=None, model_config={"k": 1})
    db.append_message("s", "user", "visible", tool_calls=[{"id": "c"}],
                      reasoning_details=[{"r": 1}])
    gone = db.append_message("s", "user", "rewound")
    db.rewind_to_message("s", gone)
    out = db.export_session("s")
    assert out["model_config"] == '{"k": 1}'
    assert [m["content"] for m in out["messages"]] == ["visible"]
    assert out["messages"][0]["tool_calls"] == [{"id": "c"}]
    assert out["messages"][0]["reasoning_details"] == '[{"r": 1}]'


def test_export_all_rows_have_last_active(db):
    make(db, "a", end=None)
    make(db, "b", end=None)
    db.append_message("a", "user", "x")
    rows = db.export_all()
    assert [r["id"] for r in rows] == ["a", "b"]
    assert rows[0]["last_active"] >= rows[1]["last_active"]
    assert all("messages" in r for r in rows)


def test_export_session_lineage(db):
    make(db, "r", end="compression")
    make(db, "t", parent="r", end=None)
    db.append_message("r", "user", "one")
    db.append_message("r", "assistant", "two")
    db.append_message("t", "user", "three")
    out = db.export_session_lineage("t")
    assert out["id"] == "t" and out["lineage_session_ids"] == ["r", "t"]
    assert [s["id"] for s in out["segments"]] == ["r", "t"]
    assert [m["content"] for m in out["messages"]] == ["one", "two", "three"]
    assert out["message_count"] == 3
    assert db.export_session_lineage("missing") is None
    assert db.export_session_lineage("r")["lineage_session_ids"] == ["r", "t"]


def test_export_json_serialisable(db):
    make(db, "s", end=None)
    db.append_message("s", "user", [{"type": "text", "text": "x"}])
    json.dumps(db.export_session("s"))
