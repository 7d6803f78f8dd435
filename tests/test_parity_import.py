"""import_sessions (UPSTREAM_API §2.8): validation before any write, limits, skips, parent
links without cycles, the export round trip, the live-writer gate."""

from __future__ import annotations

import pytest

from hermes_state import SessionDB
from hermes_state.api import importer
from hermes_state.processes.writer_gate import MaintenanceRefused


def count(db, table="sessions"):
    return db._read(lambda c: c.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])


def test_round_trip_through_export(tmp_path, db):
    db.create_session("s", "telegram", model="m", model_config={"t": 1}, cwd="/w",
                      git_branch="main", git_repo_root="/w", user_id="u", chat_id="c",
                      session_key="k")
    db.set_session_title("s", "Exported")
    db.append_message("s", "user", [{"type": "text", "text": "pic"}], platform_message_id="p1")
    db.append_message("s", "assistant", None, tool_calls=[{"id": "c1"}],
                      reasoning_details=[{"x": 1}], finish_reason="tool_calls")
    db.append_message("s", "tool", "result", tool_call_id="c1", tool_name="ls")
    db.update_token_counts("s", 10, 5, api_call_count=1, estimated_cost_usd=0.5)
    db._write(lambda c: c.execute("UPDATE sessions SET handoff_state = 'pending' WHERE id = 's'"))
    exported = db.export_session("s")
    with SessionDB(tmp_path / "other.db") as other:
        out = other.import_sessions([exported])
        assert out == {"ok": True, "imported": 1, "skipped": 0, "detached": 0,
                       "imported_ids": ["s"], "skipped_ids": [], "errors": []}
        row = other.get_session("s")
        for key in ("title", "cwd", "git_branch", "git_repo_root", "model", "model_config",
                    "source", "user_id", "input_tokens", "output_tokens",
                    "estimated_cost_usd", "started_at"):
            assert row[key] == exported[key], key
        assert (row["message_count"], row["tool_call_count"]) == (3, 1)
        assert (row["session_key"], row["chat_id"], row["handoff_state"]) == (None, None, None)
        msgs = other.get_messages("s")
        assert [m["content"] for m in msgs] == [m["content"] for m in exported["messages"]]
        assert [m["timestamp"] for m in msgs] == [m["timestamp"] for m in exported["messages"]]
        assert msgs[1]["tool_calls"] == [{"id": "c1"}]
        assert msgs[1]["reasoning_details"] == '[{"x": 1}]'  # JSON text parsed, not re-quoted
        assert msgs[0]["platform_message_id"] == "p1"
        assert other.search_messages("result")[0]["session_id"] == "s"


def test_defaults_skips_and_archived(db):
    db.create_session("exists", "cli")
    out = db.import_sessions([{"id": "exists"}, {"id": " new ", "archived": True},
                              {"id": "other", "messages": [{"role": "user", "content": "x"}]}])
    assert out["imported_ids"] == ["new", "other"] and out["skipped_ids"] == ["exists"]
    row = db.get_session("new")
    assert (row["source"], row["archived"], row["message_count"]) == ("import", 1, 0)
    assert row["started_at"] > 1_600_000_000
    assert db.get_session("exists")["source"] == "cli"


def test_parents_linked_after_insert_without_cycles(db):
    db.create_session("store-parent", "cli")
    out = db.import_sessions([
        {"id": "child", "parent_session_id": "batch-parent"},
        {"id": "batch-parent"},
        {"id": "to-store", "parent_session_id": "store-parent"},
        {"id": "missing-parent", "parent_session_id": "nowhere"},
        {"id": "self", "parent_session_id": "self"},
        {"id": "a", "parent_session_id": "b"},
        {"id": "b", "parent_session_id": "a"},
    ])
    assert out["ok"] and out["detached"] == 3
    parent = {sid: db.get_session(sid)["parent_session_id"] for sid in out["imported_ids"]}
    assert parent == {"child": "batch-parent", "batch-parent": None,
                      "to-store": "store-parent", "missing-parent": None, "self": None,
                      "a": None, "b": "a"}


def test_title_already_held_is_not_imported(db):
    db.create_session("holder", "cli")
    db.set_session_title("holder", "Taken")
    out = db.import_sessions([{"id": "x", "title": "Taken"}, {"id": "y", "title": "Free"},
                              {"id": "z", "title": "Free"}])
    assert out["imported"] == 3
    assert [db.get_session(s)["title"] for s in "xyz"] == [None, "Free", None]


@pytest.mark.parametrize("entry,error", [
    ("nope", "session must be an object"),
    ({}, "session id is required"),
    ({"id": "  "}, "session id is required"),
    ({"id": "a", "messages": {}}, "messages must be a list"),
    ({"id": "a", "messages": ["x"]}, "messages must contain only objects"),
    ({"id": "a", "title": 5}, "title must be a string"),
    ({"id": "a", "source": ["cli"]}, "source must be a string"),
    ({"id": "a", "billing_mode": 1}, "billing_mode must be a string"),
    ({"id": "a", "model_config": "{bad"}, "model_config must be valid JSON"),
    ({"id": "a", "model_config": "[1]"}, "model_config must be a JSON object"),
    ({"id": "a", "model_config": [1]}, "model_config must be a JSON object"),
    ({"id": "a", "messages": [{"content": "x"}]}, "messages[0].role must be a non-empty string"),
    ({"id": "a", "messages": [{"role": ""}]}, "messages[0].role must be a non-empty string"),
    ({"id": "a", "messages": [{"role": "user", "tool_name": 1}]}, "tool_name must be a string"),
    ({"id": "a", "messages": [{"role": "user", "message_id": 7}]}, "message_id must be a string"),
    ({"id": "a", "messages": [{"role": "user", "token_count": "5"}]},
     "token_count must be an integer"),
    ({"id": "a", "x": object()}, "session must be JSON serializable"),
])
def test_validation_errors_write_nothing(db, entry, error):
    out = db.import_sessions([{"id": "good"}, entry])
    assert out["ok"] is False and (out["imported"], out["skipped"], out["detached"]) == (0, 0, 0)
    (err,) = out["errors"]
    assert err["index"] == 1 and err["error"] == error
    if isinstance(entry, dict) and str(entry.get("id", "")).strip():
        assert err["session_id"] == "a"
    else:
        assert "session_id" not in err
    assert count(db) == 0


def test_duplicate_ids_and_every_error_reported(db):
    out = db.import_sessions([{"id": "a"}, {"id": "a"}, 5])
    assert [(e["index"], e["error"]) for e in out["errors"]] == [
        (1, "duplicate session id"), (2, "session must be an object")]


def test_batch_shape_limits(db, monkeypatch):
    with pytest.raises(ValueError, match="sessions must be a list"):
        db.import_sessions({"id": "a"})
    with pytest.raises(ValueError):
        db.import_sessions([{"id": str(i)} for i in range(501)])
    monkeypatch.setattr(importer, "MAX_MESSAGES_PER_SESSION", 2)
    out = db.import_sessions([{"id": "a", "messages": [{"role": "user"}] * 3}])
    assert out["errors"][0]["error"] == "messages exceeds the per-session import limit"
    monkeypatch.setattr(importer, "MAX_MESSAGES_TOTAL", 3)
    out = db.import_sessions([{"id": "a", "messages": [{"role": "user"}] * 2},
                              {"id": "b", "messages": [{"role": "user"}] * 2}])
    assert [(e["index"], e["error"]) for e in out["errors"]] == [
        (1, "messages exceeds the total import limit")]
    monkeypatch.setattr(importer, "MAX_SESSION_BYTES", 100)
    out = db.import_sessions([{"id": "big", "system_prompt": "x" * 200}])
    assert out["errors"][0]["error"] == "session exceeds the import size limit"
    monkeypatch.setattr(importer, "MAX_SESSION_BYTES", 10_000)
    monkeypatch.setattr(importer, "MAX_TOTAL_BYTES", 300)
    out = db.import_sessions([{"id": "a", "system_prompt": "x" * 200},
                              {"id": "b", "system_prompt": "y" * 200}])
    assert [(e["index"], e["error"]) for e in out["errors"]] == [
        (1, "import exceeds the total size limit")]
    assert count(db) == 0


def test_empty_batch(db):
    assert db.import_sessions([]) == {"ok": True, "imported": 0, "skipped": 0, "detached": 0,
                                      "imported_ids": [], "skipped_ids": [], "errors": []}


def test_import_is_refused_under_a_live_writer(db, spawn):
    child = spawn("store_child.py")
    child.ok("open", path=str(db.db_path))
    with pytest.raises(MaintenanceRefused):
        db.import_sessions([{"id": "a"}])
    assert count(db) == 0
    assert db.import_sessions([{"id": "a"}], force=True)["imported"] == 1


def test_lone_surrogates_are_cleaned(db):
    out = db.import_sessions([{"id": "s\ud800", "title": "t\udfff",
                               "messages": [{"role": "user", "content": "c\ud800"}]}])
    assert out["ok"]
    assert db.get_session("s\ufffd")["title"] == "t\ufffd"
    assert db.get_messages("s\ufffd")[0]["content"] == "c\ufffd"
