"""search_messages as upstream's users rely on it (UPSTREAM_API §2.5): hit keys, visibility of
rewound and compacted rows, filters, sort, multimodal context."""

from __future__ import annotations

import pytest

from hermes_state import SessionDB


@pytest.fixture
def db(tmp_path):
    with SessionDB(tmp_path / "state.db") as store:
        store.create_session("s", "cli", model="m1")
        store.create_session("t", "telegram")
        yield store


def ids(hits):
    return [h["id"] for h in hits]


def test_hits_carry_tool_name(db):
    mid = db.append_message("s", "tool", "kubernetes pods listed", tool_name="kubectl",
                            tool_call_id="c")
    (hit,) = db.search_messages("kubernetes")
    assert hit["id"] == mid and hit["tool_name"] == "kubectl"
    assert (hit["source"], hit["model"], hit["session_id"]) == ("cli", "m1", "s")
    assert ">>>kubernetes<<<" in hit["snippet"]


def test_rewound_rows_hidden_compacted_rows_found(db):
    kept = db.append_message("s", "user", "rollback plan alpha")
    rewound = db.append_message("s", "user", "rollback plan beta")
    compacted = db.append_message("s", "user", "rollback plan gamma")
    db._write(lambda c: c.execute("UPDATE messages SET active = 0 WHERE id = ?", (rewound,)))
    db._write(lambda c: c.execute("UPDATE messages SET active = 0, compacted = 1 WHERE id = ?",
                                  (compacted,)))
    assert set(ids(db.search_messages("rollback"))) == {kept, compacted}
    assert set(ids(db.search_messages("rollback", include_inactive=True))) == {
        kept, rewound, compacted}


def test_source_filters(db):
    a = db.append_message("s", "user", "ledger entry")
    b = db.append_message("t", "user", "ledger entry too")
    assert db.search_messages("ledger", source_filter=[]) == []
    assert ids(db.search_messages("ledger", source_filter=["telegram"])) == [b]
    assert ids(db.search_messages("ledger", exclude_sources=["telegram"])) == [a]
    assert set(ids(db.search_messages("ledger", exclude_sources=[], role_filter=[]))) == {a, b}
    assert db.search_messages("ledger", role_filter=["assistant"]) == []


@pytest.mark.parametrize("sort,expect", [("newest", "desc"), ("OLDEST", "asc"),
                                         ("Newest ", "desc")])
def test_sort_by_time(db, sort, expect):
    made = [db.append_message("s", "user", f"billing run {i}", timestamp=100.0 + i)
            for i in (2, 0, 1)]
    by_time = [made[1], made[2], made[0]]
    got = ids(db.search_messages("billing", sort=sort))
    assert got == (by_time[::-1] if expect == "desc" else by_time)


def test_unknown_sort_is_relevance(db):
    db.append_message("s", "user", "billing")
    db.append_message("s", "user", "billing billing billing billing")
    assert ids(db.search_messages("billing", sort="bogus")) == ids(db.search_messages("billing"))


def test_sort_on_the_like_route(db):
    old = db.append_message("s", "user", "东京记忆断裂", timestamp=1.0)
    new = db.append_message("s", "user", "记忆断裂", timestamp=2.0)
    assert ids(db.search_messages("断裂", sort="oldest")) == [old, new]
    assert ids(db.search_messages("断裂", sort="newest")) == [new, old]


def test_context_renders_multimodal_text(db):
    db.append_message("s", "user", [{"type": "text", "text": "see picture"},
                                    {"type": "image_url", "image_url": {"url": "u"}}])
    db.append_message("s", "assistant", "the picture shows kubernetes")
    db.append_message("s", "user", [{"type": "image_url", "image_url": {"url": "v"}}])
    (hit,) = db.search_messages("kubernetes")
    assert hit["context"] == [
        {"role": "user", "content": "see picture"},
        {"role": "assistant", "content": "the picture shows kubernetes"},
        {"role": "user", "content": "[multimodal content]"}]


def test_context_cut_to_200(db):
    db.append_message("s", "user", "kubernetes " + "x" * 500)
    (hit,) = db.search_messages("kubernetes")
    assert len(hit["context"][0]["content"]) == 200


@pytest.mark.parametrize("query", ["", "   ", "***", None])
def test_empty_queries(db, query):
    db.append_message("s", "user", "anything")
    assert db.search_messages(query) == []
