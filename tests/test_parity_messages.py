"""Messages as upstream's users rely on them (UPSTREAM_API §2.3, D6, D11)."""

from __future__ import annotations

import datetime as dt
import json
import sqlite3

import pytest

from hermes_state import SessionDB
from hermes_state.api.text import CONTENT_JSON_PREFIX


@pytest.fixture
def db(db):
    db.create_session("s", "cli")
    return db


def raw(db, statement, *args):
    return [tuple(r) for r in db._read(lambda c: c.execute(statement, args).fetchall())]


# ---------------------------------------------------------------------------- append
def test_append_returns_id_and_counts_tool_calls_whatever_the_role(db):
    a = db.append_message("s", "assistant", None, tool_calls=[{"id": "1"}, {"id": "2"}])
    b = db.append_message("s", "tool", "out", tool_call_id="1")
    c = db.append_message("s", "tool", "odd", tool_calls=[{"id": "x"}])
    d = db.append_message("s", "assistant", "x", tool_calls={"id": "single"})
    assert a < b < c < d
    row = db.get_session("s")
    assert (row["message_count"], row["tool_call_count"]) == (4, 4)


def test_append_encodes_json_fields_only_when_truthy(db):
    mid = db.append_message("s", "assistant", "x", tool_calls=[], reasoning_details=[],
                            codex_reasoning_items={}, codex_message_items=None)
    assert raw(db, "SELECT tool_calls, reasoning_details, codex_reasoning_items, "
               "codex_message_items FROM messages WHERE id = ?", mid) == [(None,) * 4]
    mid = db.append_message("s", "assistant", "y", reasoning_details=[{"t": "s"}])
    assert raw(db, "SELECT reasoning_details FROM messages WHERE id = ?", mid) == [
        ('[{"t": "s"}]',)]


def test_append_observed_active_platform_id_effect_api_content(db):
    mid = db.append_message("s", "user", "hi", platform_message_id="tg-7", observed=True,
                            effect_disposition="applied", api_content="hi [sent]")
    row = db.get_messages("s")[0]
    assert row["id"] == mid
    assert (row["platform_message_id"], row["observed"], row["active"],
            row["effect_disposition"], row["api_content"]) == ("tg-7", 1, 1, "applied",
                                                              "hi [sent]")
    db.append_message("s", "user", "x", api_content=["not", "a", "str"], observed=0)
    row = db.get_messages("s")[1]
    assert (row["api_content"], row["observed"]) == (None, 0)


def test_append_writes_active_1_where_the_column_has_no_default(tmp_path):
    """D11: a legacy store whose ``active`` was added without a default still gets 1."""
    path = tmp_path / "state.db"
    SessionDB(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute("UPDATE sqlite_master SET sql = replace(sql, "
                 "'active INTEGER NOT NULL DEFAULT 1', 'active INTEGER') WHERE name = 'messages'")
    conn.commit()
    conn.close()
    with SessionDB(path) as db:
        cols = {r[1]: r[4] for r in db._read(lambda c: c.execute("PRAGMA table_info(messages)"))}
        assert cols["active"] is None  # no default any more
        db.create_session("s", "cli")
        db.append_message("s", "user", "x")
        assert raw(db, "SELECT active FROM messages") == [(1,)]
        assert [m["content"] for m in db.get_messages("s")] == ["x"]


def test_timestamp_float_datetime_and_invalid(db):
    when = dt.datetime(2024, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    db.append_message("s", "user", "a", timestamp=when)
    db.append_message("s", "user", "b", timestamp=1234.5)
    db.append_message("s", "user", "c", timestamp="yesterday")
    rows = db.get_messages("s")
    assert rows[0]["timestamp"] == when.timestamp()
    assert rows[1]["timestamp"] == 1234.5
    assert rows[2]["timestamp"] > 1_600_000_000  # now


def test_unknown_session_is_a_foreign_key_error(db):
    with pytest.raises(sqlite3.IntegrityError, match="FOREIGN KEY"):
        db.append_message("missing", "user", "x")


# ---------------------------------------------------------------------------- D6 content
@pytest.mark.parametrize("content", [
    [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "x"}}],
    {"type": "text", "text": "dict content"},
    [],
    {"nested": ["ü", "中文"]},
])
def test_structured_content_round_trips(db, content):
    mid = db.append_message("s", "user", content)
    (stored,) = raw(db, "SELECT content FROM messages WHERE id = ?", mid)[0]
    assert stored == CONTENT_JSON_PREFIX + json.dumps(content)
    assert stored.isascii()
    assert db.get_messages("s")[0]["content"] == content
    assert db.get_messages_as_conversation("s")[0]["content"] == content
    assert db.export_session("s")["messages"][0]["content"] == content


def test_plain_and_scalar_content_stored_as_given(db):
    db.append_message("s", "user", "plain \ud800")
    db.append_message("s", "user", 42)
    db.append_message("s", "user", b"\x00bytes")
    assert raw(db, "SELECT content FROM messages ORDER BY id") == [
        ("plain \ufffd",), ("42",), (b"\x00bytes",)]  # TEXT affinity turns 42 into '42'


def test_invalid_json_after_the_prefix_is_returned_raw(db):
    db._write(lambda c: c.execute(
        "INSERT INTO messages(session_id, role, content, timestamp) VALUES ('s', 'user', ?, 1)",
        (CONTENT_JSON_PREFIX + "{broken",)))
    assert db.get_messages("s")[0]["content"] == CONTENT_JSON_PREFIX + "{broken"


def test_unserialisable_content_is_its_str(db):
    db.append_message("s", "user", [object.__new__(type("Odd", (), {"__repr__": lambda s: "odd"}))])
    (stored,) = raw(db, "SELECT content FROM messages")[0]
    assert stored == "[odd]"


# ---------------------------------------------------------------------------- get_messages
def test_get_messages_active_only_and_paging(db):
    ids = [db.append_message("s", "user" if i % 2 == 0 else "assistant", f"m{i}")
           for i in range(6)]
    db._write(lambda c: c.execute("UPDATE messages SET active = 0 WHERE id IN (?, ?)",
                                  (ids[1], ids[2])))
    assert [m["content"] for m in db.get_messages("s")] == ["m0", "m3", "m4", "m5"]
    assert [m["content"] for m in db.get_messages("s", include_inactive=True)] == [
        f"m{i}" for i in range(6)]
    assert [m["content"] for m in db.get_messages("s", limit=2)] == ["m0", "m3"]
    assert [m["content"] for m in db.get_messages("s", limit=2, offset=2)] == ["m4", "m5"]
    assert [m["content"] for m in db.get_messages("s", offset=3)] == ["m5"]
    assert db.get_messages("s", limit=5, offset=10) == []


def test_get_messages_decodes_only_content_and_tool_calls(db):
    db.append_message("s", "assistant", "x", tool_calls=[{"id": "c"}],
                      codex_message_items=[{"a": 1}])
    db._write(lambda c: c.execute(
        "INSERT INTO messages(session_id, role, tool_calls, timestamp) VALUES "
        "('s', 'assistant', '{not json', 2)"))
    first, second = db.get_messages("s")
    assert first["tool_calls"] == [{"id": "c"}]
    assert first["codex_message_items"] == '[{"a": 1}]'
    assert second["tool_calls"] == []


# ---------------------------------------------------------------------------- small reads
def test_has_platform_message_id_and_message_count(db, tmp_path):
    db.create_session("t", "cli")
    db.append_message("s", "user", "a", platform_message_id="p1")
    db.append_message("t", "user", "b")
    db._write(lambda c: c.execute("UPDATE messages SET active = 0 WHERE session_id = 't'"))
    assert db.has_platform_message_id("s", "p1") is True
    assert db.has_platform_message_id("t", "p1") is False
    assert db.message_count("s") == 1 and db.message_count("t") == 1  # inactive counted
    assert db.message_count() == 2 and db.message_count("") == 2
    assert db.message_count("missing") == 0


def test_list_recent_user_messages(db):
    db.append_message("s", "user", "first   words\n\nhere")
    db.append_message("s", "assistant", "reply")
    db.append_message("s", "user", "y" * 81)
    db.append_message("s", "user", [{"type": "image_url", "image_url": {}}])
    db.append_message("s", "user", [{"type": "text", "text": "caption"},
                                    {"type": "image_url", "image_url": {}}])
    got = db.list_recent_user_messages("s")
    assert [g["preview"] for g in got] == ["caption", "[multimodal content]", "y" * 77 + "...",
                                           "first words here"]
    assert set(got[0]) == {"id", "timestamp", "preview"}
    assert len(db.list_recent_user_messages("s", limit=2)) == 2
    db._write(lambda c: c.execute("UPDATE messages SET active = 0 WHERE content LIKE 'first%'"))
    assert len(db.list_recent_user_messages("s")) == 3
    assert len(db.list_recent_user_messages("s", include_inactive=True)) == 4


def test_recent_preview_exactly_80_is_kept(db):
    db.append_message("s", "user", "z" * 80)
    assert db.list_recent_user_messages("s")[0]["preview"] == "z" * 80


def test_set_latest_user_api_content(db):
    db.append_message("s", "user", "older")
    db.append_message("s", "user", "latest")
    db.append_message("s", "assistant", "reply")
    assert db.set_latest_user_api_content("s", "older", "x") == 0
    assert db.set_latest_user_api_content("s", "latest", "latest + ctx \ud800") == 1
    rows = db.get_messages("s")
    assert [r["api_content"] for r in rows] == [None, "latest + ctx \ufffd", None]
    parts = [{"type": "text", "text": "pic"}]
    db.append_message("s", "user", parts)
    assert db.set_latest_user_api_content("s", parts, "pic sent") == 1
    assert db.set_latest_user_api_content("missing", "a", "b") == 0


def test_has_archived_messages(db):
    assert db.has_archived_messages("s") is False
    mid = db.append_message("s", "user", "a")
    assert db.has_archived_messages("s") is False
    db._write(lambda c: c.execute("UPDATE messages SET active = 0 WHERE id = ?", (mid,)))
    assert db.has_archived_messages("s") is True
