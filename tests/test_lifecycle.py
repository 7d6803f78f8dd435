"""Listing, lineage walks, export, prune, clear and delete (SPEC §5). After every removal the
removed text must be found by no FTS index: checked with direct ``MATCH`` queries."""

from __future__ import annotations

import sqlite3
import time
import types

import pytest

from hermes_state import SessionDB
from hermes_state.api.titles import auto_title_key

DAY = 86400.0


@pytest.fixture
def db(tmp_path):
    with SessionDB(db_path=tmp_path / "state.db") as store:
        yield store


def sql(db, statement, args=()):
    db._write(lambda c: c.execute(statement, args))


def set_started(db, sid, t):
    sql(db, "UPDATE sessions SET started_at = ? WHERE id = ?", (t, sid))


def fts_tables(db):
    names = {r[0] for r in db._read(lambda c: c.execute(
        "SELECT name FROM sqlite_master WHERE type='table'").fetchall())}
    return [t for t in ("messages_fts", "messages_fts_trigram", "messages_fts_cjk") if t in names]


def fts_hits(db, table, word):
    return db._read(lambda c: [r[0] for r in c.execute(
        f"SELECT rowid FROM {table} WHERE {table} MATCH ?", (f'"{word}"',))])


def assert_indexed(db, word, role="user"):
    tables = fts_tables(db)
    assert "messages_fts" in tables
    for t in tables:
        if t == "messages_fts_trigram" and role == "tool":
            continue
        assert fts_hits(db, t, word), f"{word} should be in {t} before removal"


def assert_unindexed(db, word):
    for t in fts_tables(db):
        assert fts_hits(db, t, word) == [], f"{word} still found by {t}"


def fts_integrity(db):
    for t in fts_tables(db):
        db._write(lambda c: c.execute(
            f"INSERT INTO {t}({t}, rank) VALUES ('integrity-check', 1)"))


def count(db, table, where="1", args=()):
    return db._read(lambda c: c.execute(
        f"SELECT COUNT(*) FROM {table} WHERE {where}", args).fetchone()[0])


# ---------------------------------------------------------------------------- list_sessions
class TestListSessions:
    def test_newest_first_with_limit_offset_and_source(self, db):
        for i, src in enumerate(["cli", "telegram", "cli", "cli"]):
            db.create_session(f"s{i}", src)
            set_started(db, f"s{i}", 1000.0 + i)
        assert [s["id"] for s in db.list_sessions()] == ["s3", "s2", "s1", "s0"]
        assert [s["id"] for s in db.list_sessions(limit=2)] == ["s3", "s2"]
        assert [s["id"] for s in db.list_sessions(limit=2, offset=2)] == ["s1", "s0"]
        assert [s["id"] for s in db.list_sessions(source="cli")] == ["s3", "s2", "s0"]
        assert [s["id"] for s in db.list_sessions(source="telegram")] == ["s1"]
        assert db.list_sessions(source="discord") == []

    def test_default_limit_is_20(self, db):
        for i in range(25):
            db.create_session(f"s{i:02d}", "cli")
        assert len(db.list_sessions()) == 20

    def test_rows_carry_session_columns(self, db):
        db.create_session("s", "cli", model="m", model_config={"k": 1})
        (row,) = db.list_sessions()
        assert row["model"] == "m" and row["model_config"] == '{"k": 1}'  # raw text (D7)
        assert "_preview_raw" not in row

    @pytest.mark.parametrize("content,preview", [
        ("Hello", "Hello"),
        ("line one\nline two", "line one line two"),
        ("a\r\nb\rc", "a b c"),
        ("x" * 60, "x" * 60),
        ("x" * 61, "x" * 60 + "..."),
        ("y" * 500, "y" * 60 + "..."),
        ("\r\n" * 70, " " * 60 + "..."),
        ("ab\n" * 20 + "z", ("ab " * 20)[:60] + "..."),
    ])
    def test_preview_rules(self, db, content, preview):
        db.create_session("s", "cli")
        db.append_message("s", "user", content)
        assert db.list_sessions()[0]["preview"] == preview

    def test_preview_is_first_user_message_by_time(self, db):
        db.create_session("s", "cli")
        db.append_message("s", "assistant", "not me", timestamp=1.0)
        db.append_message("s", "user", None, timestamp=2.0)
        db.append_message("s", "user", "later", timestamp=9.0)
        db.append_message("s", "user", "first", timestamp=3.0)
        assert db.list_sessions()[0]["preview"] == "first"

    def test_preview_empty_without_user_message(self, db):
        db.create_session("s", "cli")
        db.append_message("s", "assistant", "hi")
        assert db.list_sessions()[0]["preview"] == ""

    def test_last_active(self, db):
        db.create_session("a", "cli")
        db.create_session("b", "cli")
        set_started(db, "a", 100.0)
        set_started(db, "b", 50.0)
        db.append_message("a", "user", "x", timestamp=150.0)
        db.append_message("a", "assistant", "y", timestamp=120.0)
        got = {s["id"]: s["last_active"] for s in db.list_sessions()}
        assert got == {"a": 150.0, "b": 50.0}

    def test_one_sql_statement_no_n_plus_one(self, db):
        for i in range(6):
            db.create_session(f"s{i}", "cli")
            db.append_message(f"s{i}", "user", f"hello {i}")
        statements: list[str] = []
        conn = db.connection.conn
        conn.set_trace_callback(statements.append)
        try:
            rows = db.list_sessions()
        finally:
            conn.set_trace_callback(None)
        assert len(rows) == 6
        assert len(statements) == 1, statements


# ---------------------------------------------------------------------------- lineage
class TestLineage:
    def test_lineage_root_to_id(self, db):
        db.create_session("a", "cli")
        db.create_session("b", "cli", parent_session_id="a")
        db.create_session("c", "cli", parent_session_id="b")
        assert db.get_lineage("c") == ["a", "b", "c"]
        assert db.get_lineage("a") == ["a"]
        assert db.get_lineage("nope") == []

    def test_descendants_all_depths(self, db):
        db.create_session("a", "cli")
        for sid, parent in (("b", "a"), ("c", "b"), ("d", "a"), ("e", "c")):
            db.create_session(sid, "cli", parent_session_id=parent)
        db.create_session("other", "cli")
        for i, sid in enumerate("abcde"):
            set_started(db, sid, 10.0 + i)
        assert db.get_descendants("a") == ["b", "c", "d", "e"]
        assert db.get_descendants("c") == ["e"]
        assert db.get_descendants("e") == []
        assert db.get_descendants("nope") == []

    def test_cycles_terminate(self, db):
        db.create_session("a", "cli")
        db.create_session("b", "cli", parent_session_id="a")
        db.create_session("c", "cli", parent_session_id="b")
        sql(db, "UPDATE sessions SET parent_session_id = 'c' WHERE id = 'a'")
        assert db.get_lineage("c") == ["a", "b", "c"]
        assert db.get_lineage("a") == ["b", "c", "a"]
        assert sorted(db.get_descendants("a")) == ["b", "c"]

    def test_self_loop(self, db):
        db.create_session("a", "cli")
        sql(db, "UPDATE sessions SET parent_session_id = 'a' WHERE id = 'a'")
        assert db.get_lineage("a") == ["a"]
        assert db.get_descendants("a") == []

    def test_dangling_parent_ends_the_walk(self, db, tmp_path):
        db.create_session("b", "cli")
        db.create_session("c", "cli", parent_session_id="b")
        raw = sqlite3.connect(str(tmp_path / "state.db"))  # foreign_keys is off by default
        try:
            raw.execute("UPDATE sessions SET parent_session_id='ghost' WHERE id='b'")
            raw.commit()
        finally:
            raw.close()
        assert db.get_session("b")["parent_session_id"] == "ghost"
        assert db.get_lineage("c") == ["b", "c"]

    def test_conversation_with_ancestors_uses_lineage(self, db):
        db.create_session("a", "cli")
        db.append_message("a", "user", "one")
        db.create_session("b", "cli", parent_session_id="a")
        db.append_message("b", "assistant", "two")
        conv = db.get_messages_as_conversation("b", include_ancestors=True)
        assert [m["content"] for m in conv] == ["one", "two"]


# ---------------------------------------------------------------------------- export
class TestExport:
    def test_export_session(self, db):
        db.create_session("s", "cli", model="m")
        db.append_message("s", "user", "hi")
        db.append_message("s", "assistant", "yo", tool_calls=[{"id": "c1"}])
        out = db.export_session("s")
        assert out["id"] == "s" and out["model"] == "m"
        assert [m["content"] for m in out["messages"]] == ["hi", "yo"]
        assert out["messages"][1]["tool_calls"] == [{"id": "c1"}]
        assert out["messages"] == db.get_messages("s")

    def test_export_unknown(self, db):
        assert db.export_session("nope") is None

    def test_export_all_and_source(self, db):
        for i, src in enumerate(["cli", "telegram", "cli"]):
            db.create_session(f"s{i}", src)
            set_started(db, f"s{i}", 100.0 + i)
            db.append_message(f"s{i}", "user", f"m{i}")
        all_ = db.export_all()
        assert [s["id"] for s in all_] == ["s2", "s1", "s0"]
        assert [[m["content"] for m in s["messages"]] for s in all_] == [["m2"], ["m1"], ["m0"]]
        assert [s["id"] for s in db.export_all(source="cli")] == ["s2", "s0"]
        assert db.export_all(source="none") == []

    def test_iter_export_is_a_lazy_generator(self, db):
        gen = db.iter_export()
        assert isinstance(gen, types.GeneratorType)
        assert list(gen) == []

    def test_iter_export_equal_timestamps_tie_break_on_id(self, db):
        for i in range(7):
            db.create_session(f"s{i}", "cli")
            set_started(db, f"s{i}", 500.0)  # identical: the order must tie-break, not skip/dupe
        ids = [s["id"] for s in db.iter_export()]
        assert ids == [f"s{i}" for i in range(6, -1, -1)]

    def test_iter_export_orders_by_last_active_with_it(self, db):
        for i in range(3):
            db.create_session(f"s{i}", "cli")
            set_started(db, f"s{i}", 100.0 + i)
        db.append_message("s0", "user", "late", timestamp=900.0)
        items = list(db.iter_export())
        assert [(s["id"], s["last_active"]) for s in items] == [
            ("s0", 900.0), ("s2", 102.0), ("s1", 101.0)]

    def test_iter_export_streams(self, db):
        for i in range(5):
            db.create_session(f"s{i}", "cli")
            set_started(db, f"s{i}", 100.0 + i)
            db.append_message(f"s{i}", "user", f"m{i}", timestamp=100.0 + i)
        statements: list[str] = []
        conn = db.connection.conn
        conn.set_trace_callback(statements.append)
        try:
            gen = db.iter_export()
            first = next(gen)
            after_first = list(statements)
            rest = list(gen)
        finally:
            conn.set_trace_callback(None)
        assert first["id"] == "s4"
        msg_reads = [s for s in after_first if s.lstrip().startswith("SELECT * FROM messages")]
        assert len(msg_reads) == 1  # only the first session's messages were read
        assert not conn.in_transaction
        assert [s["id"] for s in rest] == ["s3", "s2", "s1", "s0"]

    def test_iter_export_skips_session_deleted_mid_stream(self, db):
        for i in range(3):
            db.create_session(f"s{i}", "cli")
            set_started(db, f"s{i}", 100.0 + i)
        gen = db.iter_export()
        assert next(gen)["id"] == "s2"
        db.delete_session("s1")
        assert [s["id"] for s in gen] == ["s0"]


# ---------------------------------------------------------------------------- prune
def make_old(db, sid, *, days=200, ended=True, source="cli", parent=None, pinned=False,
             word=None):
    db.create_session(sid, source, parent_session_id=parent)
    t = time.time() - days * DAY
    if word:
        db.append_message(sid, "user", f"text {word}", timestamp=t)
    if ended:
        db.end_session(sid, "user_exit")
        sql(db, "UPDATE sessions SET ended_at = ? WHERE id = ?", (t, sid))
    sql(db, "UPDATE sessions SET started_at = ?, pinned = ? WHERE id = ?", (t, int(pinned), sid))


class TestPrune:
    def test_prunes_old_ended_sessions_only(self, db):
        make_old(db, "old", word="oldword")
        make_old(db, "live", ended=False)
        make_old(db, "pinned", pinned=True)
        make_old(db, "recent", days=10)
        assert db.prune_sessions(older_than_days=90) == 1
        assert db.get_session("old") is None
        for sid in ("live", "pinned", "recent"):
            assert db.get_session(sid) is not None

    def test_default_is_90_days(self, db):
        make_old(db, "a", days=91)
        make_old(db, "b", days=89)
        assert db.prune_sessions() == 1
        assert db.get_session("a") is None and db.get_session("b") is not None

    def test_recent_message_keeps_old_session(self, db):
        make_old(db, "s")
        db.append_message("s", "user", "just now")
        assert db.prune_sessions(older_than_days=90) == 0

    def test_recent_end_keeps_old_session(self, db):
        make_old(db, "s")
        sql(db, "UPDATE sessions SET ended_at = ? WHERE id = 's'", (time.time(),))
        assert db.prune_sessions(older_than_days=90) == 0

    def test_recent_start_keeps_session(self, db):
        make_old(db, "s")
        sql(db, "UPDATE sessions SET started_at = ? WHERE id = 's'", (time.time(),))
        assert db.prune_sessions(older_than_days=90) == 0

    def test_source_filter(self, db):
        make_old(db, "tg", source="telegram")
        make_old(db, "cli", source="cli")
        assert db.prune_sessions(older_than_days=30, source="telegram") == 1
        assert db.get_session("tg") is None and db.get_session("cli") is not None

    def test_children_orphaned_at_any_depth(self, db):
        make_old(db, "a")
        make_old(db, "b", parent="a", ended=False)   # live child of a pruned parent
        make_old(db, "c", parent="b")                # pruned grandchild of a kept session
        make_old(db, "d", parent="c", days=1)        # recent child of pruned c
        make_old(db, "e", parent="d", days=1)
        assert db.prune_sessions(older_than_days=90) == 2
        assert db.get_session("a") is None and db.get_session("c") is None
        assert db.get_session("b")["parent_session_id"] is None
        assert db.get_session("d")["parent_session_id"] is None
        assert db.get_session("e")["parent_session_id"] == "d"  # untouched link survives

    def test_pruned_chain_all_goes(self, db):
        make_old(db, "a")
        make_old(db, "b", parent="a")
        make_old(db, "c", parent="b")
        assert db.prune_sessions(older_than_days=90) == 3
        assert count(db, "sessions") == 0

    def test_removes_messages_usage_meta_and_fts(self, db):
        make_old(db, "s", word="prunedzebra")
        db.append_message("s", "tool", "tooloutput prunedtoolword", tool_name="zzgrepper",
                          timestamp=time.time() - 200 * DAY)
        db.update_token_counts("s", 5, model="m")
        db.set_auto_title("s", "auto")
        make_old(db, "keep", days=1, word="keptzebra")
        assert_indexed(db, "prunedzebra")
        assert_indexed(db, "prunedtoolword", role="tool")
        assert db.prune_sessions(older_than_days=90) == 1
        assert count(db, "messages", "session_id = 's'") == 0
        assert count(db, "session_model_usage", "session_id = 's'") == 0
        assert db.get_meta(auto_title_key("s")) is None
        for word in ("prunedzebra", "prunedtoolword", "zzgrepper"):
            assert_unindexed(db, word)
        assert_indexed(db, "keptzebra")
        fts_integrity(db)

    def test_one_transaction(self, db):
        make_old(db, "a", word="alpha")
        make_old(db, "b", parent="a")
        make_old(db, "z")
        sql(db, "CREATE TRIGGER refuse BEFORE DELETE ON sessions WHEN old.id = 'z' "
                "BEGIN SELECT RAISE(ABORT, 'refused'); END")
        with pytest.raises(sqlite3.IntegrityError, match="refused"):
            db.prune_sessions(older_than_days=90)
        assert count(db, "sessions") == 3
        assert db.get_session("b")["parent_session_id"] == "a"
        assert count(db, "messages", "session_id = 'a'") == 1
        assert_indexed(db, "alpha")

    def test_nothing_to_prune(self, db):
        assert db.prune_sessions() == 0


# ---------------------------------------------------------------------------- clear_messages
class TestClearMessages:
    def test_clears_and_resets_counters(self, db):
        db.create_session("s", "cli")
        db.append_message("s", "user", "clearedword")
        db.append_message("s", "assistant", "x", tool_calls=[{"id": 1}, {"id": 2}])
        db.update_token_counts("s", 7, model="m")
        db.set_session_title("s", "kept title")
        db.create_session("other", "cli")
        db.append_message("other", "user", "otherword")
        assert db.get_session("s")["tool_call_count"] == 2
        assert_indexed(db, "clearedword")
        assert db.clear_messages("s") is True
        s = db.get_session("s")
        assert (s["message_count"], s["tool_call_count"]) == (0, 0)
        assert s["title"] == "kept title" and s["input_tokens"] == 7
        assert db.get_messages("s") == []
        assert_unindexed(db, "clearedword")
        assert_indexed(db, "otherword")
        assert len(db.get_messages("other")) == 1
        fts_integrity(db)

    def test_counters_count_again_after_clear(self, db):
        db.create_session("s", "cli")
        db.append_message("s", "user", "a")
        db.clear_messages("s")
        db.append_message("s", "assistant", "b", tool_calls=[{"id": 1}])
        s = db.get_session("s")
        assert (s["message_count"], s["tool_call_count"]) == (1, 1)

    def test_unknown(self, db):
        assert db.clear_messages("nope") is False


# ---------------------------------------------------------------------------- delete_session
class TestDeleteSession:
    def test_deletes_session_messages_usage_and_meta(self, db):
        db.create_session("s", "cli")
        db.append_message("s", "user", "deletedword")
        db.append_message("s", "tool", "tool deletedtoolword", tool_name="zzdeltool")
        db.update_token_counts("s", 3, model="m")
        db.set_auto_title("s", "Doomed")
        db.create_session("keep", "cli")
        db.append_message("keep", "user", "keepword")
        assert_indexed(db, "deletedword")
        assert db.delete_session("s") is True
        assert db.get_session("s") is None
        assert count(db, "messages", "session_id = 's'") == 0
        assert count(db, "session_model_usage", "session_id = 's'") == 0
        assert db.get_meta(auto_title_key("s")) is None
        for word in ("deletedword", "deletedtoolword", "zzdeltool"):
            assert_unindexed(db, word)
        assert_indexed(db, "keepword")
        fts_integrity(db)

    def test_usage_rows_removed_even_without_fk_cascade(self, db):
        """The usage rows go explicitly, not only through ON DELETE CASCADE (which does nothing
        on a connection or legacy table without enforced foreign keys)."""
        db.create_session("s", "cli")
        db.update_token_counts("s", 3, model="m")
        conn = db.connection.conn
        conn.execute("PRAGMA foreign_keys=OFF")
        try:
            assert db.delete_session("s") is True
        finally:
            conn.execute("PRAGMA foreign_keys=ON")
        assert count(db, "session_model_usage") == 0

    def test_title_freed(self, db):
        db.create_session("s", "cli")
        db.set_session_title("s", "Reusable")
        db.delete_session("s")
        db.create_session("t", "cli")
        assert db.set_session_title("t", "Reusable") is True

    def test_children_orphaned_grandchildren_kept(self, db):
        db.create_session("a", "cli")
        db.create_session("b", "cli", parent_session_id="a")
        db.create_session("c", "cli", parent_session_id="b")
        db.create_session("d", "cli", parent_session_id="a")
        assert db.delete_session("a") is True
        assert db.get_session("b")["parent_session_id"] is None
        assert db.get_session("d")["parent_session_id"] is None
        assert db.get_session("c")["parent_session_id"] == "b"
        assert db._read(lambda c: c.execute("PRAGMA foreign_key_check").fetchall()) == []

    def test_unknown(self, db):
        assert db.delete_session("nope") is False

    def test_one_transaction(self, db):
        db.create_session("a", "cli")
        db.append_message("a", "user", "survivorword")
        db.create_session("b", "cli", parent_session_id="a")
        sql(db, "CREATE TRIGGER refuse BEFORE DELETE ON sessions "
                "BEGIN SELECT RAISE(ABORT, 'refused'); END")
        with pytest.raises(sqlite3.IntegrityError, match="refused"):
            db.delete_session("a")
        assert db.get_session("b")["parent_session_id"] == "a"
        assert len(db.get_messages("a")) == 1
        assert_indexed(db, "survivorword")

    def test_message_count_consistent_after_removals(self, db):
        for sid in ("a", "b"):
            db.create_session(sid, "cli")
            for i in range(3):
                db.append_message(sid, "user", f"{sid}{i}")
        db.delete_session("a")
        bad = db._read(lambda c: c.execute(
            "SELECT s.id FROM sessions s WHERE s.message_count != "
            "(SELECT COUNT(*) FROM messages m WHERE m.session_id = s.id)").fetchall())
        assert bad == []
