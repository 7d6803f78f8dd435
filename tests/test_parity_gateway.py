"""Gateway routing, handoff and Telegram topics (UPSTREAM_API §2.9)."""

from __future__ import annotations

import sqlite3

import pytest



def sql(db, statement, *args):
    db._write(lambda c: c.execute(statement, args))


def tables(db):
    return {r[0] for r in db._read(lambda c: c.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table'").fetchall())}


# ---------------------------------------------------------------------------- peers
def test_record_gateway_session_peer(db):
    db.create_session("s", "cli", user_id="old", display_name="Keep")
    db.record_gateway_session_peer("s", source="telegram", session_key="k", chat_id=123,
                                   chat_type="dm", thread_id=7, origin_json={"from": "x"})
    row = db.get_session("s")
    assert (row["source"], row["session_key"], row["user_id"], row["chat_id"],
            row["chat_type"], row["thread_id"], row["display_name"]) == (
        "telegram", "k", None, "123", "dm", "7", "Keep")
    assert row["origin_json"] == '{"from": "x"}'
    db.record_gateway_session_peer("s", source="discord", session_key="")  # no-op
    db.record_gateway_session_peer("", source="discord", session_key="k2")
    assert db.get_session("s")["source"] == "telegram"


def test_set_expiry_finalized(db):
    db.create_session("s", "telegram")
    db.set_expiry_finalized("s")
    assert db.get_session("s")["expiry_finalized"] == 1
    db.set_expiry_finalized("s", False)
    assert db.get_session("s")["expiry_finalized"] == 0


def test_routing_entries(db):
    db.save_gateway_routing_entry("k1", '{"a": 1}')
    db.save_gateway_routing_entry("k1", '{"a": 2}')
    db.save_gateway_routing_entry("k2", '{"b": 1}', scope="work")
    db.save_gateway_routing_entry("", "x")
    db.save_gateway_routing_entry("k3", "")
    assert db.load_gateway_routing_entries() == {"k1": '{"a": 2}'}
    assert db.load_gateway_routing_entries(scope="work") == {"k2": '{"b": 1}'}
    db.replace_gateway_routing_entries({"n1": "x", "n2": "y", "": "z", "n3": ""})
    assert db.load_gateway_routing_entries() == {"n1": "x", "n2": "y"}
    assert db.load_gateway_routing_entries(scope="work") == {"k2": '{"b": 1}'}
    db.delete_gateway_routing_entries(["n1", "missing"])
    assert db.load_gateway_routing_entries() == {"n2": "y"}


def test_list_gateway_sessions(db):
    for sid, key, src, started in (("a1", "ka", "Telegram", 1), ("a2", "ka", "telegram", 2),
                                   ("b1", "kb", "discord", 3), ("c1", None, "cli", 4),
                                   ("d1", "kd", "telegram", 5)):
        db.create_session(sid, src, session_key=key)
        sql(db, "UPDATE sessions SET started_at = ? WHERE id = ?", started, sid)
    db.end_session("d1", "user_exit")
    db.append_message("a1", "user", "old but chatty", timestamp=100.0)
    assert [r["id"] for r in db.list_gateway_sessions()] == ["b1", "a2"]
    assert [r["id"] for r in db.list_gateway_sessions(active_only=False)] == ["d1", "b1", "a2"]
    assert [r["id"] for r in db.list_gateway_sessions(platform="TELEGRAM")] == ["a2"]
    assert all("last_active" in r and "_rn" not in r for r in db.list_gateway_sessions())


def test_find_session_by_origin(db):
    def gw(sid, user, chat="c", thread=None, started=1, ended=False):
        db.create_session(sid, "Telegram", session_key=f"k-{sid}", user_id=user, chat_id=chat,
                          thread_id=thread)
        sql(db, "UPDATE sessions SET started_at = ? WHERE id = ?", started, sid)
        if ended:
            db.end_session(sid, "user_exit")

    assert db.find_session_by_origin(platform="", chat_id="c") is None
    gw("one", "u1", started=1)
    assert db.find_session_by_origin(platform="telegram", chat_id="c") == "one"
    assert db.find_session_by_origin(platform="telegram", chat_id="") is None
    assert db.find_session_by_origin(platform="telegram", chat_id=None) is None
    gw("two", "u2", started=2)
    assert db.find_session_by_origin(platform="telegram", chat_id="c") is None  # ambiguous
    assert db.find_session_by_origin(platform="telegram", chat_id="c", user_id="u1") == "one"
    assert db.find_session_by_origin(platform="telegram", chat_id="c", user_id="u9") is None
    gw("t", "u1", chat="g", thread="5", started=3)
    gw("t2", "u1", chat="g", started=4)
    assert db.find_session_by_origin(platform="telegram", chat_id="g", thread_id=5) == "t"
    assert db.find_session_by_origin(platform="telegram", chat_id="g", thread_id="") == "t2"
    assert db.find_session_by_origin(platform="telegram", chat_id="g") == "t2"  # same user
    gw("gone", "u1", chat="z", ended=True)
    assert db.find_session_by_origin(platform="telegram", chat_id="z") is None


def test_find_latest_gateway_session_for_peer(db):
    def gw(sid, key, started, end=None, msgs=True, **kw):
        db.create_session(sid, "telegram", session_key=key, **kw)
        sql(db, "UPDATE sessions SET started_at = ? WHERE id = ?", started, sid)
        if msgs:
            db.append_message(sid, "user", "hi")
        if end:
            db.end_session(sid, end)

    assert db.find_latest_gateway_session_for_peer(source="telegram") is None
    gw("old", "k", 1)
    gw("closed", "k", 2, end="agent_close")
    gw("reset", "k", 3, end="session_reset")
    gw("empty", "k", 4, msgs=False)
    assert db.find_latest_gateway_session_for_peer(source="telegram",
                                                   session_key="k")["id"] == "closed"
    assert db.find_latest_gateway_session_for_peer(source="discord", session_key="k") is None
    gw("peer", "other", 5, user_id="u", chat_id="c", chat_type="dm")
    found = db.find_latest_gateway_session_for_peer(
        source="telegram", session_key="new-key", user_id="u", chat_id="c", chat_type="dm")
    assert found["id"] == "peer"
    assert db.find_latest_gateway_session_for_peer(
        source="telegram", session_key="new-key", user_id="u", chat_id="c") is None
    assert db.find_latest_gateway_session_for_peer(
        source="telegram", session_key="new-key", user_id="u", chat_id="c", chat_type="dm",
        thread_id="9") is None


# ---------------------------------------------------------------------------- handoff
def test_handoff_state_machine(db):
    db.create_session("s", "cli")
    assert db.get_handoff_state("missing") is None
    assert db.get_handoff_state("s") == {"state": None, "platform": None, "error": None}
    assert db.request_handoff("s", "desktop") is True
    assert db.request_handoff("s", "web") is False  # already pending
    assert db.get_handoff_state("s") == {"state": "pending", "platform": "desktop",
                                         "error": None}
    assert [r["id"] for r in db.list_pending_handoffs()] == ["s"]
    assert db.claim_handoff("s") is True
    assert db.claim_handoff("s") is False
    assert db.list_pending_handoffs() == []
    db.fail_handoff("s", "x" * 600)
    state = db.get_handoff_state("s")
    assert state["state"] == "failed" and state["error"] == "x" * 500
    assert db.request_handoff("s", "web") is True
    assert db.get_handoff_state("s")["error"] is None
    db.claim_handoff("s")
    db.complete_handoff("s")
    assert db.get_handoff_state("s") == {"state": "completed", "platform": "web", "error": None}
    assert db.request_handoff("missing", "x") is False


def test_pending_handoffs_oldest_first(db):
    for sid, started in (("b", 2), ("a", 1)):
        db.create_session(sid, "cli")
        sql(db, "UPDATE sessions SET started_at = ? WHERE id = ?", started, sid)
        db.request_handoff(sid, "desktop")
    assert [r["id"] for r in db.list_pending_handoffs()] == ["a", "b"]


# ---------------------------------------------------------------------------- telegram
def test_topic_tables_are_opt_in_and_readers_never_migrate(db):
    assert "telegram_dm_topic_bindings" not in tables(db)
    assert db.get_telegram_topic_binding(chat_id=1, thread_id=2) is None
    assert db.list_telegram_topic_bindings_for_chat(chat_id=1) == []
    assert db.get_telegram_topic_binding_by_session(session_id="s") is None
    assert db.is_telegram_session_linked_to_topic(session_id="s") is False
    assert db.is_telegram_topic_mode_enabled(chat_id=1, user_id=2) is False
    assert db.delete_telegram_topic_binding(chat_id=1, thread_id=2) == 0
    db.disable_telegram_topic_mode(chat_id=1)
    assert "telegram_dm_topic_mode" not in tables(db)
    db.apply_telegram_topic_migration()
    assert {"telegram_dm_topic_mode", "telegram_dm_topic_bindings"} <= tables(db)
    assert db.get_meta("telegram_dm_topic_schema_version") == "2"
    db.apply_telegram_topic_migration()  # idempotent


def test_enable_disable_topic_mode(db):
    db.enable_telegram_topic_mode(chat_id=10, user_id=20, has_topics_enabled=True)
    assert db.is_telegram_topic_mode_enabled(chat_id="10", user_id=20) is True
    assert db.is_telegram_topic_mode_enabled(chat_id=10, user_id=21) is False
    row = db._read(lambda c: dict(c.execute(
        "SELECT * FROM telegram_dm_topic_mode").fetchone()))
    assert (row["has_topics_enabled"], row["allows_users_to_create_topics"]) == (1, None)
    db.disable_telegram_topic_mode(chat_id=10)
    assert db.is_telegram_topic_mode_enabled(chat_id=10, user_id=20) is False
    db.enable_telegram_topic_mode(chat_id=10, user_id=20, allows_users_to_create_topics=False)
    row = db._read(lambda c: dict(c.execute(
        "SELECT * FROM telegram_dm_topic_mode").fetchone()))
    assert (row["enabled"], row["has_topics_enabled"], row["allows_users_to_create_topics"]) == (
        1, 1, 0)


def test_bind_topics(db):
    for sid in ("s1", "s2"):
        db.create_session(sid, "telegram", user_id="u")
    db.bind_telegram_topic(chat_id=1, thread_id=100, user_id="u", session_key="k1",
                           session_id="s1")
    db.bind_telegram_topic(chat_id=1, thread_id=100, user_id="u", session_key="k1",
                           session_id="s1")  # idempotent
    binding = db.get_telegram_topic_binding(chat_id="1", thread_id="100")
    assert (binding["session_id"], binding["managed_mode"], binding["chat_id"]) == (
        "s1", "auto", "1")
    with pytest.raises(ValueError, match="already linked to another Telegram topic"):
        db.bind_telegram_topic(chat_id=1, thread_id=101, user_id="u", session_key="k",
                               session_id="s1")
    db.bind_telegram_topic(chat_id=1, thread_id=100, user_id="u", session_key="k2",
                           session_id="s2", managed_mode="manual")  # the topic is re-bound
    assert db.get_telegram_topic_binding_by_session(session_id="s2")["managed_mode"] == "manual"
    assert db.is_telegram_session_linked_to_topic(session_id="s1") is False
    db.bind_telegram_topic(chat_id=1, thread_id=101, user_id="u", session_key="k1",
                           session_id="s1")
    assert [b["thread_id"] for b in db.list_telegram_topic_bindings_for_chat(chat_id=1)] == [
        "101", "100"]
    with pytest.raises(sqlite3.IntegrityError):
        db.bind_telegram_topic(chat_id=1, thread_id=5, user_id="u", session_key="k",
                               session_id="missing")


def test_delete_binding_switches_mode_off_after_the_last(db):
    db.create_session("s1", "telegram")
    db.create_session("s2", "telegram")
    db.enable_telegram_topic_mode(chat_id=1, user_id="u")
    db.bind_telegram_topic(chat_id=1, thread_id=1, user_id="u", session_key="a", session_id="s1")
    db.bind_telegram_topic(chat_id=1, thread_id=2, user_id="u", session_key="b", session_id="s2")
    assert db.delete_telegram_topic_binding(chat_id=1, thread_id=1) == 1
    assert db.is_telegram_topic_mode_enabled(chat_id=1, user_id="u") is True
    assert db.delete_telegram_topic_binding(chat_id=1, thread_id=2) == 1
    assert db.is_telegram_topic_mode_enabled(chat_id=1, user_id="u") is False
    assert db.delete_telegram_topic_binding(chat_id=1, thread_id=2) == 0


def test_disable_clears_bindings_unless_asked(db):
    db.create_session("s1", "telegram")
    db.bind_telegram_topic(chat_id=1, thread_id=1, user_id="u", session_key="a", session_id="s1")
    db.disable_telegram_topic_mode(chat_id=1, clear_bindings=False)
    assert db.get_telegram_topic_binding(chat_id=1, thread_id=1) is not None
    db.disable_telegram_topic_mode(chat_id=1)
    assert db.get_telegram_topic_binding(chat_id=1, thread_id=1) is None


def test_deleting_a_bound_session_drops_its_binding(db):
    db.create_session("s1", "telegram")
    db.bind_telegram_topic(chat_id=1, thread_id=1, user_id="u", session_key="a", session_id="s1")
    assert db.delete_session("s1") is True
    assert db.get_telegram_topic_binding(chat_id=1, thread_id=1) is None


def test_v1_bindings_table_is_rebuilt_with_the_cascade(db):
    db.create_session("s1", "telegram")
    db._write(lambda c: c.execute(
        "CREATE TABLE telegram_dm_topic_bindings (chat_id TEXT NOT NULL, thread_id TEXT NOT NULL,"
        " user_id TEXT NOT NULL, session_key TEXT NOT NULL, session_id TEXT NOT NULL "
        "REFERENCES sessions(id), managed_mode TEXT NOT NULL DEFAULT 'auto', linked_at REAL "
        "NOT NULL, updated_at REAL NOT NULL, PRIMARY KEY (chat_id, thread_id))"))
    sql(db, "INSERT INTO telegram_dm_topic_bindings VALUES ('1', '1', 'u', 'k', 's1', 'auto', "
        "1, 1)")
    db.apply_telegram_topic_migration()
    ddl = db._read(lambda c: c.execute("SELECT sql FROM sqlite_master WHERE name = "
                                       "'telegram_dm_topic_bindings'").fetchone()[0])
    assert "ON DELETE CASCADE" in ddl
    assert db.get_telegram_topic_binding(chat_id=1, thread_id=1)["session_id"] == "s1"
    sql(db, "DELETE FROM sessions WHERE id = 's1'")  # the cascade now removes the binding
    assert db.get_telegram_topic_binding(chat_id=1, thread_id=1) is None


def test_list_unlinked_telegram_sessions_for_user(db):
    for sid, user, src in (("a", "u", "telegram"), ("b", "u", "telegram"),
                           ("c", "u", "cli"), ("d", "v", "telegram")):
        db.create_session(sid, src, user_id=user)
    db.append_message("a", "user", "first chat", timestamp=5.0)
    db.append_message("b", "user", "second chat")
    got = db.list_unlinked_telegram_sessions_for_user(chat_id=1, user_id="u")
    assert [r["id"] for r in got] == ["b", "a"]
    assert got[1]["preview"] == "first chat" and "last_active" in got[1]
    db.bind_telegram_topic(chat_id=1, thread_id=1, user_id="u", session_key="k", session_id="b")
    assert [r["id"] for r in db.list_unlinked_telegram_sessions_for_user(
        chat_id=999, user_id="u")] == ["a"]
    assert len(db.list_unlinked_telegram_sessions_for_user(chat_id=1, user_id="u",
                                                           limit=0)) == 0
