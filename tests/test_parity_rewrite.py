"""Transcript rewriting and windows (UPSTREAM_API §2.3): replace_messages, archive_and_compact,
rewind/restore, get_messages_around, get_anchored_view."""

from __future__ import annotations

import sqlite3

import pytest



@pytest.fixture
def db(db):
    db.create_session("s", "cli")
    return db


def counters(db, sid="s"):
    row = db.get_session(sid)
    return row["message_count"], row["tool_call_count"]


def raw(db, statement, *args):
    return [tuple(r) for r in db._read(lambda c: c.execute(statement, args).fetchall())]


# ---------------------------------------------------------------------------- replace
def test_replace_messages_rewrites_rows_and_counters(db):
    db.append_message("s", "user", "old")
    db.replace_messages("s", [
        {"role": "user", "content": "new q", "message_id": "tg-1", "observed": True},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "a"}, {"id": "b"}],
         "reasoning": "think", "finish_reason": "tool_calls"},
        {"role": "tool", "content": "r", "tool_call_id": "a", "tool_name": "ls",
         "reasoning": "dropped: not an assistant row"},
        {"content": "no role"},
    ])
    rows = db.get_messages("s")
    assert [(r["role"], r["content"]) for r in rows] == [
        ("user", "new q"), ("assistant", None), ("tool", "r"), ("unknown", "no role")]
    assert rows[0]["platform_message_id"] == "tg-1" and rows[0]["observed"] == 1
    assert rows[1]["reasoning"] == "think" and rows[1]["tool_calls"] == [{"id": "a"}, {"id": "b"}]
    assert rows[2]["reasoning"] is None
    assert all(r["active"] == 1 for r in rows)
    assert counters(db) == (4, 2)
    assert db.search_messages("old") == []


def test_replace_messages_default_timestamps_are_strictly_increasing(db):
    db.replace_messages("s", [{"role": "user", "content": str(i)} for i in range(50)] +
                        [{"role": "user", "content": "given", "timestamp": 5.0},
                         {"role": "user", "content": "after given"}])
    stamps = [r["timestamp"] for r in db.get_messages("s")]
    assert stamps[:50] == sorted(stamps[:50]) and len(set(stamps[:50])) == 50
    assert stamps[50] == 5.0
    assert stamps[51] > stamps[49]


def test_replace_messages_active_only_keeps_inactive_rows(db):
    a = db.append_message("s", "user", "archived")
    db.append_message("s", "user", "live")
    db._write(lambda c: c.execute("UPDATE messages SET active = 0 WHERE id = ?", (a,)))
    db.replace_messages("s", [{"role": "user", "content": "fresh"}], active_only=True)
    assert [r["content"] for r in db.get_messages("s", include_inactive=True)] == [
        "archived", "fresh"]
    assert counters(db) == (1, 0)


def test_replace_messages_multimodal_content(db):
    parts = [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "x"}}]
    db.replace_messages("s", [{"role": "user", "content": parts}])
    assert db.get_messages("s")[0]["content"] == parts


def test_replace_messages_unknown_session_and_bad_items(db):
    with pytest.raises(sqlite3.IntegrityError):
        db.replace_messages("missing", [{"role": "user", "content": "x"}])
    db.append_message("s", "user", "kept")
    with pytest.raises(TypeError):
        db.replace_messages("s", [{"role": "user", "content": "a"}, "not a dict"])
    assert [r["content"] for r in db.get_messages("s")] == ["kept"]  # rolled back


# ---------------------------------------------------------------------------- compact
def test_archive_and_compact(db):
    for i in range(4):
        db.append_message("s", "user" if i % 2 == 0 else "assistant", f"kubernetes turn {i}")
    n = db.archive_and_compact("s", [{"role": "user", "content": "summary of four turns"},
                                     {"role": "assistant", "content": "ok",
                                      "tool_calls": [{"id": "z"}]}])
    assert n == 2
    assert [r["content"] for r in db.get_messages("s")] == ["summary of four turns", "ok"]
    assert counters(db) == (2, 1)
    archived = raw(db, "SELECT active, compacted FROM messages WHERE content LIKE 'kubernetes%'")
    assert archived == [(0, 1)] * 4
    assert db.has_archived_messages("s") is True
    assert len(db.search_messages("kubernetes")) == 4  # compacted rows stay searchable


# ---------------------------------------------------------------------------- rewind
def test_rewind_to_message_and_restore(db):
    u1 = db.append_message("s", "user", "first")
    db.append_message("s", "assistant", "answer")
    u2 = db.append_message("s", "user", [{"type": "text", "text": "second"}])
    a2 = db.append_message("s", "assistant", "answer 2")
    out = db.rewind_to_message("s", u2)
    assert out["rewound_count"] == 2 and out["new_head_id"] == u1 + 1
    assert out["target_message"]["id"] == u2
    assert out["target_message"]["content"] == [{"type": "text", "text": "second"}]
    row = db.get_session("s")
    assert (row["rewind_count"], row["message_count"]) == (1, 4)
    assert [r["content"] for r in db.get_messages("s")] == ["first", "answer"]
    assert db.search_messages("second") == []
    # rewinding again to the same (now inactive) target changes nothing but the count
    again = db.rewind_to_message("s", u2)
    assert again["rewound_count"] == 0 and db.get_session("s")["rewind_count"] == 2
    assert db.restore_rewound("s", u2) == 2
    assert [r["id"] for r in db.get_messages("s")][-1] == a2
    assert db.restore_rewound("s", u2) == 0


def test_rewind_everything_leaves_no_head(db):
    u1 = db.append_message("s", "user", "only")
    assert db.rewind_to_message("s", u1)["new_head_id"] is None


def test_rewind_errors(db):
    db.create_session("t", "cli")
    other = db.append_message("t", "user", "elsewhere")
    a = db.append_message("s", "assistant", "not a user turn")
    with pytest.raises(ValueError):
        db.rewind_to_message("s", other)
    with pytest.raises(ValueError):
        db.rewind_to_message("s", a)
    with pytest.raises(ValueError):
        db.rewind_to_message("s", 999999)
    assert db.get_session("s")["rewind_count"] == 0


# ---------------------------------------------------------------------------- windows
@pytest.fixture
def convo(db):
    roles = ["user", "assistant", "tool", "assistant", "user", "assistant", "tool", "user",
             "assistant", "user", "assistant", "user"]
    ids = [db.append_message("s", r, f"m{i}" if i != 10 else "", tool_call_id="c" if r == "tool"
                             else None) for i, r in enumerate(roles)]
    return db, ids


def test_messages_around(convo):
    db, ids = convo
    out = db.get_messages_around("s", ids[5], window=2)
    assert [r["id"] for r in out["window"]] == ids[3:8]
    assert (out["messages_before"], out["messages_after"]) == (2, 2)
    edge = db.get_messages_around("s", ids[0], window=3)
    assert [r["id"] for r in edge["window"]] == ids[:4]
    assert (edge["messages_before"], edge["messages_after"]) == (0, 3)
    none = db.get_messages_around("s", ids[5], window=-4)
    assert [r["id"] for r in none["window"]] == [ids[5]]


def test_messages_around_includes_inactive_rows_and_missing_anchor(convo):
    db, ids = convo
    db._write(lambda c: c.execute("UPDATE messages SET active = 0 WHERE id = ?", (ids[4],)))
    assert ids[4] in [r["id"] for r in db.get_messages_around("s", ids[5], 1)["window"]]
    db.create_session("t", "cli")
    empty = {"window": [], "messages_before": 0, "messages_after": 0}
    assert db.get_messages_around("t", ids[5]) == empty
    assert db.get_messages_around("s", 10 ** 9) == empty


def test_anchored_view(convo):
    db, ids = convo
    view = db.get_anchored_view("s", ids[6], window=2, bookend=2)
    assert [r["id"] for r in view["window"]] == [ids[4], ids[5], ids[6], ids[7], ids[8]]
    assert (view["messages_before"], view["messages_after"]) == (2, 2)
    assert [r["id"] for r in view["bookend_start"]] == [ids[0], ids[1]]
    assert [r["id"] for r in view["bookend_end"]] == [ids[9], ids[11]]  # ids[10] is empty
    tools = db.get_anchored_view("s", ids[3], window=1, keep_roles=None, bookend=0)
    assert [r["role"] for r in tools["window"]] == ["tool", "assistant", "user"]
    assert tools["bookend_start"] == [] and tools["bookend_end"] == []


def test_anchored_view_filters_the_window_but_keeps_the_anchor(convo):
    db, ids = convo
    view = db.get_anchored_view("s", ids[2], window=1)
    assert [r["id"] for r in view["window"]] == [ids[1], ids[2], ids[3]]
    view = db.get_anchored_view("s", ids[4], window=2)
    assert [r["role"] for r in view["window"]] == ["assistant", "user", "assistant"]
    assert view["messages_before"] == 1 and view["messages_after"] == 1


def test_anchored_view_missing_anchor(convo):
    db, _ = convo
    assert db.get_anchored_view("s", 10 ** 9) == {
        "window": [], "messages_before": 0, "messages_after": 0, "bookend_start": [],
        "bookend_end": []}
