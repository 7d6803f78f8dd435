"""Session rows as upstream's users rely on them (UPSTREAM_API §2.1, §2.2, D5, D7)."""

from __future__ import annotations

import json
import sqlite3
import time

import pytest

from hermes_state.api.workspace import workspace_key

DAY = 86400.0


def sql(db, statement, *args):
    return db._write(lambda c: c.execute(statement, args).rowcount)


# ---------------------------------------------------------------------------- create (D5)
def test_create_session_fills_null_metadata_of_an_existing_row(db):
    db.create_session("g", "telegram", user_id="u1", chat_id="c1")
    before = db.get_session("g")
    assert db.create_session("g", "cli", model="gpt", model_config={"temperature": 0.2},
                             system_prompt="SYS", user_id="u2", cwd="/w") == "g"
    row = db.get_session("g")
    assert (row["source"], row["user_id"], row["chat_id"]) == ("telegram", "u1", "c1")
    assert (row["model"], row["system_prompt"], row["cwd"]) == ("gpt", "SYS", "/w")
    assert json.loads(row["model_config"]) == {"temperature": 0.2}
    assert row["started_at"] == before["started_at"]


def test_create_session_never_overwrites_set_metadata(db):
    db.create_session("s", "cli", model="a", system_prompt="one", chat_id="c1")
    db.create_session("s", "cli", model="b", system_prompt="two", chat_id="c2",
                      model_config={"x": 1})
    row = db.get_session("s")
    assert (row["model"], row["system_prompt"], row["chat_id"]) == ("a", "one", "c1")
    assert row["model_config"] == '{"x": 1}'


def test_create_session_parent_is_filled_and_checked(db):
    db.create_session("p", "cli")
    db.create_session("c", "cli")
    db.create_session("c", "cli", parent_session_id="p")
    assert db.get_session("c")["parent_session_id"] == "p"
    with pytest.raises(sqlite3.IntegrityError):
        db.create_session("x", "cli", parent_session_id="missing")


def test_model_config_is_json_text_and_empty_is_null(db):
    db.create_session("a", "cli", model_config={})
    db.create_session("b", "cli", model_config={"k": [1, 2]})
    assert db.get_session("a")["model_config"] is None
    assert db.get_session("b")["model_config"] == '{"k": [1, 2]}'
    db.set_session_title("b", "titled")
    assert db.get_session_by_title("titled")["model_config"] == '{"k": [1, 2]}'


def test_create_session_rejects_unknown_keywords(db):
    with pytest.raises(TypeError):
        db.create_session("s", "cli", bogus=1)


def test_ensure_session_creates_minimal_row_and_never_overwrites(db):
    assert db.ensure_session("e") == "e"
    row = db.get_session("e")
    assert (row["source"], row["model"]) == ("unknown", None)
    db.ensure_session("e", source="cli", model="m")
    row = db.get_session("e")
    assert (row["source"], row["model"]) == ("unknown", "m")
    db.ensure_session("e", model="other")
    assert db.get_session("e")["model"] == "m"


def test_get_session_raw_flags_and_missing(db):
    db.create_session("s", "cli")
    row = db.get_session("s")
    assert row["archived"] == 0 and row["rewind_count"] == 0
    assert db.get_session("missing") is None


# ---------------------------------------------------------------------------- end, reset
def test_end_session_first_reason_wins_and_unknown_is_noop(db):
    db.create_session("s", "cli")
    db.end_session("s", "user_exit")
    first = db.get_session("s")
    db.end_session("s", "compression")
    assert db.get_session("s")["end_reason"] == "user_exit"
    assert db.get_session("s")["ended_at"] == first["ended_at"]
    assert not db.end_session("nope", "x")


@pytest.mark.parametrize("reason,changes", [
    (None, True), ("agent_close", True), ("ws_orphan_reap", True), ("user_exit", False),
    ("compression", False)])
def test_promote_to_session_reset(db, reason, changes):
    db.create_session("s", "telegram")
    if reason:
        db.end_session("s", reason)
    assert db.promote_to_session_reset("s") is changes
    row = db.get_session("s")
    assert row["end_reason"] == ("session_reset" if changes else reason)


def test_promote_to_session_reset_guards(db):
    assert db.promote_to_session_reset("") is False
    assert db.promote_to_session_reset("missing") is False
    db.create_session("s", "cli")
    assert db.promote_to_session_reset("s", reason="custom") is True
    assert db.get_session("s")["end_reason"] == "custom"
    db.close()
    assert db.promote_to_session_reset("s") is False  # an SQLite error → False


# ---------------------------------------------------------------------------- small updates
def test_update_system_prompt_verbatim(db):
    db.create_session("s", "cli", system_prompt="old")
    db.update_system_prompt("s", "  new\nprompt \ud800")
    assert db.get_session("s")["system_prompt"] == "  new\nprompt \ufffd"
    db.update_system_prompt("missing", "x")  # no-op, no error
    assert db.get_session("missing") is None


def test_update_session_meta(db):
    db.create_session("s", "cli", model="m1", model_config={"a": 1})
    db.update_session_meta("s", '{"b": 2}')
    row = db.get_session("s")
    assert (row["model_config"], row["model"]) == ('{"b": 2}', "m1")
    db.update_session_meta("s", '{"c":3}', model="m2")
    row = db.get_session("s")
    assert (row["model_config"], row["model"]) == ('{"c":3}', "m2")


def test_resolve_session_id(db):
    for sid in ("abc123", "abd999", "x_1", "x%2", "xa_3"):
        db.create_session(sid, "cli")
    assert db.resolve_session_id("abc123") == "abc123"
    assert db.resolve_session_id("abc") == "abc123"
    assert db.resolve_session_id("ab") is None  # ambiguous
    assert db.resolve_session_id("zz") is None
    assert db.resolve_session_id("") is None
    assert db.resolve_session_id("x_") == "x_1"  # _ is literal
    assert db.resolve_session_id("x%") == "x%2"  # % is literal


def test_get_conversation_root(db):
    db.create_session("r", "cli")
    db.create_session("m", "cli", parent_session_id="r")
    db.create_session("t", "cli", parent_session_id="m")
    assert db.get_conversation_root("t") == "r"
    assert db.get_conversation_root("r") == "r"
    assert db.get_conversation_root("unknown") == "unknown"
    sql(db, "UPDATE sessions SET parent_session_id = 't' WHERE id = 'r'")  # a corrupt cycle
    assert db.get_conversation_root("t") in {"r", "m", "t"}


# ---------------------------------------------------------------------------- workspace
def test_update_session_cwd_never_clobbers_with_empty(db):
    db.create_session("s", "cli")
    db.update_session_cwd("s", "/repo/sub")
    row = db.get_session("s")
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == ("/repo/sub", None, None)
    db.update_session_cwd("s", "/repo/sub", git_branch=" main ", git_repo_root=" /repo ")
    db.update_session_cwd("s", "/repo/other", git_branch="  ", git_repo_root="")
    row = db.get_session("s")
    assert (row["cwd"], row["git_branch"], row["git_repo_root"]) == ("/repo/other", "main",
                                                                    "/repo")


def test_update_session_cwd_guards(db):
    db.create_session("s", "cli", cwd="/keep")
    db.update_session_cwd("s", "")
    db.update_session_cwd("", "/x")
    assert db.get_session("s")["cwd"] == "/keep"


def test_backfill_repo_roots(db):
    for sid, cwd, root in (("a", "/w", None), ("b", "/w", ""), ("c", "/w", "/kept"),
                           ("d", "/other", None)):
        db.create_session(sid, "cli", cwd=cwd, git_repo_root=root)
    db.backfill_repo_roots({"/w": "/repo", "/other": "", "": "/x"})
    roots = {sid: db.get_session(sid)["git_repo_root"] for sid in "abcd"}
    assert roots == {"a": "/repo", "b": "/repo", "c": "/kept", "d": None}


def test_distinct_session_cwds(db):
    db.create_session("a", "cli", cwd="/w")
    db.create_session("b", "cli", cwd="/w", parent_session_id="a")
    db.create_session("c", "cli", cwd="  ")
    db.create_session("d", "cli", cwd="/arch")
    sql(db, "UPDATE sessions SET archived = 1 WHERE id = 'd'")
    sql(db, "UPDATE sessions SET started_at = 10, ended_at = 50 WHERE id = 'a'")
    sql(db, "UPDATE sessions SET started_at = 20 WHERE id = 'b'")
    got = {r["cwd"]: r for r in db.distinct_session_cwds()}
    assert set(got) == {"/w"}
    assert got["/w"]["sessions"] == 2 and got["/w"]["last_active"] == 50.0
    assert isinstance(got["/w"]["last_active"], float)
    assert {r["cwd"] for r in db.distinct_session_cwds(include_archived=True)} == {"/w", "/arch"}


@pytest.mark.parametrize("row,key", [
    ({"git_repo_root": " /repo ", "cwd": "/repo/sub"}, "/repo"),
    ({"git_repo_root": "  ", "cwd": " /w "}, "/w"),
    ({"git_repo_root": None, "cwd": ""}, None),
    ({}, None)])
def test_workspace_key(row, key):
    assert workspace_key(row) == key


# ---------------------------------------------------------------------------- delete ghosts
def test_finalize_orphaned_compression_sessions(db):
    old = time.time() - 8 * DAY
    db.create_session("root", "cli")
    db.end_session("root", "compression")
    for sid in ("orphan", "fresh", "busy", "empty"):
        db.create_session(sid, "cli", parent_session_id="root")
    for sid in ("orphan", "busy", "fresh"):
        db.append_message(sid, "user", "hi")
    sql(db, "UPDATE sessions SET started_at = ? WHERE id IN ('orphan', 'busy', 'empty')", old)
    sql(db, "UPDATE sessions SET api_call_count = 2 WHERE id = 'busy'")
    assert db.finalize_orphaned_compression_sessions() == 1
    row = db.get_session("orphan")
    assert row["end_reason"] == "orphaned_compression" and row["ended_at"] is not None
    assert all(db.get_session(s)["ended_at"] is None for s in ("fresh", "busy", "empty"))
    assert db.finalize_orphaned_compression_sessions() == 0


def test_prune_empty_ghost_sessions(db, tmp_path):
    old = time.time() - 2 * DAY
    transcripts = tmp_path / "sessions"
    transcripts.mkdir()
    for sid in ("ghost", "titled", "talk", "live", "young", "cli"):
        db.create_session(sid, "cli" if sid == "cli" else "tui")
        if sid != "live":
            db.end_session(sid, "user_exit")
        (transcripts / f"{sid}.json").write_text("{}")
    db.set_session_title("titled", "named")
    db.append_message("talk", "user", "hello")
    sql(db, "UPDATE sessions SET started_at = ? WHERE id != 'young'", old)
    assert db.prune_empty_ghost_sessions(sessions_dir=str(transcripts)) == 1
    assert db.get_session("ghost") is None
    assert not (transcripts / "ghost.json").exists()
    assert all(db.get_session(s) for s in ("titled", "talk", "live", "young", "cli"))
    assert (transcripts / "cli.json").exists()
