"""The SessionDB API of this stage (SPEC §2.2, §2.4, §5)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from hermes_state import SessionDB


@pytest.fixture
def db(tmp_path):
    store = SessionDB(tmp_path / "state.db")
    yield store
    store.close()


def raw(db, sql, *args):
    return [tuple(r) for r in db.connection.conn.execute(sql, args).fetchall()]


# --------------------------------------------------------------------------- sessions

def test_create_session_first_writer_wins(db):
    """Set values are never overwritten (D5 fills only NULL columns: test_parity_sessions)."""
    assert db.create_session("s1", source="cli", model="m-a", model_config={"t": 1},
                             system_prompt="sp", user_id="u1", chat_id="c1") == "s1"
    first = db.get_session("s1")
    assert db.create_session("s1", source="telegram", model="m-b", model_config={"t": 2},
                             system_prompt="other", user_id="u2", chat_id="c2") == "s1"
    again = db.get_session("s1")
    assert again == first
    assert (again["source"], again["model"], again["model_config"], again["system_prompt"],
            again["user_id"], again["chat_id"]) == ("cli", "m-a", '{"t": 1}', "sp", "u1", "c1")
    assert again["message_count"] == 0 and again["tool_call_count"] == 0
    assert isinstance(again["started_at"], float)
    assert raw(db, "SELECT count(*) FROM sessions") == [(1,)]


def test_create_session_unknown_parent_and_unknown_keyword(db):
    with pytest.raises(sqlite3.IntegrityError):
        db.create_session("child", source="cli", parent_session_id="nope")
    with pytest.raises(TypeError):
        db.create_session("s", source="cli", not_a_column=1)
    assert raw(db, "SELECT count(*) FROM sessions") == [(0,)]


def test_end_session_first_reason_wins_and_reopen(db):
    db.create_session("s1", source="cli")
    assert db.end_session("s1", "user_exit") is True
    ended = db.get_session("s1")
    assert ended["end_reason"] == "user_exit" and ended["ended_at"] is not None
    assert db.end_session("s1", "compression") is False
    again = db.get_session("s1")
    assert again["end_reason"] == "user_exit" and again["ended_at"] == ended["ended_at"]

    assert db.reopen_session("s1") is True
    reopened = db.get_session("s1")
    assert reopened["ended_at"] is None and reopened["end_reason"] is None
    assert db.end_session("s1", "timeout") is True
    assert db.get_session("s1")["end_reason"] == "timeout"

    assert db.end_session("missing", "x") is False
    assert db.reopen_session("missing") is False
    assert db.get_session("missing") is None


# --------------------------------------------------------------------------- messages

def test_append_message_counters(db):
    db.create_session("s1", source="cli")
    db.append_message("s1", "user", "hi")
    db.append_message("s1", "assistant", None,
                      tool_calls=[{"id": "c1", "function": {"name": "a"}},
                                  {"id": "c2", "function": {"name": "b"}}])
    db.append_message("s1", "tool", "out", tool_call_id="c1", tool_name="a")  # adds 0
    mid = db.append_message("s1", "assistant", "done", tool_calls=[])  # empty list => NULL
    s = db.get_session("s1")
    assert s["message_count"] == 4
    assert s["tool_call_count"] == 2
    assert raw(db, "SELECT tool_calls FROM messages WHERE id = ?", mid) == [(None,)]
    stored = raw(db, "SELECT tool_calls FROM messages WHERE role='assistant' AND content IS NULL")
    assert stored[0][0].startswith("[") and '"c1"' in stored[0][0]  # JSON text


def test_append_message_counter_is_per_session(db):
    db.create_session("a", source="cli")
    db.create_session("b", source="cli")
    for _ in range(3):
        db.append_message("a", "assistant", "x", tool_calls=[{"id": "1"}])
    db.append_message("b", "user", "y")
    assert (db.get_session("a")["message_count"], db.get_session("a")["tool_call_count"]) == (3, 3)
    assert (db.get_session("b")["message_count"], db.get_session("b")["tool_call_count"]) == (1, 0)


def test_append_to_unknown_session_is_integrity_error_and_writes_nothing(db):
    with pytest.raises(sqlite3.IntegrityError):
        db.append_message("nope", "user", "hi")
    assert raw(db, "SELECT count(*) FROM messages") == [(0,)]
    assert not db.connection.conn.in_transaction
    db.create_session("s", source="cli")
    assert db.append_message("s", "user", "after") > 0  # the handle still writes


def test_get_messages_order_and_json_decoding(db):
    """``content`` and ``tool_calls`` are decoded; the other JSON columns stay text (UPSTREAM_API
    §2.3)."""
    db.create_session("s1", source="cli")
    db.create_session("other", source="cli")
    ids = []
    # Timestamps deliberately out of order: insertion (id) order must win.
    ids.append(db.append_message("s1", "user", "first", timestamp=300.0))
    db.append_message("other", "user", "elsewhere")
    ids.append(db.append_message(
        "s1", "assistant", "second", timestamp=100.0,
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}],
        reasoning_details={"steps": [1, 2]}, codex_reasoning_items=[{"r": 1}],
        codex_message_items=[{"m": "x"}], display_metadata={"k": "v"}, token_count=7))
    ids.append(db.append_message("s1", "tool", "third", timestamp=200.0, tool_call_id="c1",
                                 tool_name="f"))
    msgs = db.get_messages("s1")
    assert [m["id"] for m in msgs] == ids == sorted(ids)
    assert [m["content"] for m in msgs] == ["first", "second", "third"]
    second = msgs[1]
    assert second["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    assert json.loads(second["reasoning_details"]) == {"steps": [1, 2]}
    assert json.loads(second["codex_reasoning_items"]) == [{"r": 1}]
    assert json.loads(second["codex_message_items"]) == [{"m": "x"}]
    assert json.loads(second["display_metadata"]) == {"k": "v"}
    assert second["token_count"] == 7
    assert second["timestamp"] == 100.0
    assert msgs[0]["tool_calls"] is None
    assert db.get_messages("missing") == []


def test_conversation_spec_example(db):
    db.create_session("s1", source="cli")
    db.append_message("s1", "user", "Hello")
    db.append_message("s1", "assistant", "Hi!")
    assert db.get_messages_as_conversation("s1") == [
        {"role": "user", "content": "Hello"}, {"role": "assistant", "content": "Hi!"}]


def test_conversation_extra_fields_rule(db):
    db.create_session("s1", source="cli")
    calls = [{"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]
    # A user row carrying assistant-only fields must not expose them.
    db.append_message("s1", "user", "go", finish_reason="stop", reasoning="r-user")
    db.append_message("s1", "assistant", None, tool_calls=calls, finish_reason="tool_calls",
                      reasoning="thinking", reasoning_content="",
                      reasoning_details=[{"type": "summary"}], codex_reasoning_items=[{"a": 1}],
                      codex_message_items=[{"b": 2}])
    db.append_message("s1", "tool", "file.txt", tool_call_id="c1", tool_name="ls")
    db.append_message("s1", "assistant", "done", finish_reason="stop")
    conv = db.get_messages_as_conversation("s1")
    assert conv == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": None, "tool_calls": calls, "finish_reason": "tool_calls",
         "reasoning": "thinking", "reasoning_content": "",
         "reasoning_details": [{"type": "summary"}], "codex_reasoning_items": [{"a": 1}],
         "codex_message_items": [{"b": 2}]},
        {"role": "tool", "content": "file.txt", "tool_call_id": "c1", "tool_name": "ls"},
        {"role": "assistant", "content": "done", "finish_reason": "stop"},
    ]


def test_conversation_include_ancestors_root_first(db):
    db.create_session("root", source="cli")
    db.create_session("mid", source="cli", parent_session_id="root")
    db.create_session("tip", source="cli", parent_session_id="mid")
    db.append_message("root", "user", "r")
    db.append_message("mid", "user", "m")
    db.append_message("tip", "user", "t")
    assert [m["content"] for m in db.get_messages_as_conversation("tip")] == ["t"]
    assert [m["content"] for m in db.get_messages_as_conversation(
        "tip", include_ancestors=True)] == ["r", "m", "t"]


def test_lone_surrogate_is_stored_as_replacement_character(db):
    db.create_session("s1", source="cli")
    mid = db.append_message("s1", "user", "a\ud835b", tool_name="t\udc00",
                            reasoning_content="\ud800")
    assert raw(db, "SELECT content, tool_name, reasoning_content FROM messages WHERE id = ?",
               mid) == [("a\ufffdb", "t\ufffd", "\ufffd")]
    assert db.get_messages("s1")[0]["content"] == "a\ufffdb"
    # A valid surrogate PAIR (an astral character) is not damaged.
    mid2 = db.append_message("s1", "user", "x\U0001d400y")
    assert raw(db, "SELECT content FROM messages WHERE id = ?", mid2) == [("x\U0001d400y",)]
    db.set_meta("k", "v\udfff")
    assert db.get_meta("k") == "v\ufffd"


def test_meta_upsert(db):
    assert db.get_meta("missing") is None
    db.set_meta("k", "one")
    assert db.get_meta("k") == "one"
    db.set_meta("k", 2)
    assert db.get_meta("k") == "2"
    assert raw(db, "SELECT count(*) FROM state_meta WHERE key='k'") == [(1,)]
    db.set_meta("k", None)
    assert db.get_meta("k") is None
    assert raw(db, "SELECT count(*) FROM state_meta WHERE key='k'") == [(1,)]


# --------------------------------------------------------------------------- FTS (§2.4)

def fts(db, table, query):
    return sorted(r[0] for r in raw(db, f"SELECT rowid FROM {table} WHERE {table} MATCH ?", query))


def test_fts_indexes_appended_content_tool_name_and_tool_calls(db):
    db.create_session("s1", source="cli")
    a = db.append_message("s1", "user", "please deploy the zebracorn service")
    b = db.append_message("s1", "assistant", None,
                          tool_calls=[{"function": {"name": "frobnicate_widget"}}])
    c = db.append_message("s1", "tool", "tool output quokkaplex", tool_name="grepper",
                          tool_call_id="x")
    assert fts(db, "messages_fts", "zebracorn") == [a]
    assert fts(db, "messages_fts", "frobnicate_widget") == [b]
    assert fts(db, "messages_fts", "grepper") == [c]
    assert fts(db, "messages_fts", "quokkaplex") == [c]
    # Trigram index: substring search, tool rows excluded.
    assert fts(db, "messages_fts_trigram", "bracor") == [a]
    assert fts(db, "messages_fts_trigram", "quokkaplex") == []
    for table in ("messages_fts", "messages_fts_trigram"):
        db.connection.conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")


def test_fts_follows_update_and_delete(db):
    db.create_session("s1", source="cli")
    mid = db.append_message("s1", "user", "alphaword")
    db._write(lambda c: c.execute("UPDATE messages SET content='betaword' WHERE id=?", (mid,)))
    assert fts(db, "messages_fts", "alphaword") == []
    assert fts(db, "messages_fts", "betaword") == [mid]
    assert fts(db, "messages_fts_trigram", "taword") == [mid]
    db._write(lambda c: c.execute("DELETE FROM messages WHERE id=?", (mid,)))
    assert fts(db, "messages_fts", "betaword") == []
    assert fts(db, "messages_fts_trigram", "taword") == []
    for table in ("messages_fts", "messages_fts_trigram"):
        db.connection.conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
