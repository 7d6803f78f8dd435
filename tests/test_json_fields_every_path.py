"""Values ``json.dumps`` cannot encode, on every write path besides ``append_message``: the
spool (``divert_to_spool`` then ``replay_spool``), the gateway's JSON columns, the batch insert,
and message ``content``. Each is refused by name with nothing written, or stored as
``append_message`` stores it; never a bare ``TypeError``/``ValueError``/``RecursionError`` of the
encoder, never a spool record that replays as something else (SPEC §2.2, §10.1)."""

from __future__ import annotations

import datetime
import decimal

import pytest

from hermes_state import SessionDB
from hermes_state.api.spool import read_spool, replay_spool
from hermes_state.api.text import UnstorableJSONError, UnstorableValueError


def _deep(n: int) -> list:
    top: list = []
    cur = top
    for _ in range(n):
        nxt: list = []
        cur.append(nxt)
        cur = nxt
    return top


def _circular() -> list:
    loop: list = []
    loop.append(loop)
    return loop


@pytest.fixture
def db(tmp_path):
    with SessionDB(tmp_path / "state.db") as store:
        yield store


@pytest.mark.parametrize("field,value", [
    ("tool_calls", [b"\xff"]),
    ("reasoning_details", {1, 2}),
    ("codex_message_items", [decimal.Decimal(1)]),
    ("tool_calls", _circular()),
    ("tool_calls", _deep(100_000)),
    ("display_metadata", {(1, 2): "tuple key"}),
    ("tool_calls", [10 ** 5000]),
])
def test_divert_refuses_by_name_what_append_message_refuses(db, field, value):
    msg = {"role": "assistant", "content": "x", field: value}
    with pytest.raises(UnstorableJSONError, match=f"^{field}: cannot be stored as JSON"):
        db.divert_to_spool("s", [msg])
    assert not (db.home / "sessions" / "s.jsonl").exists()


@pytest.mark.parametrize("field,value", [("token_count", decimal.Decimal(3)),
                                         ("token_count", 2 ** 70)])
def test_divert_refuses_a_value_sqlite_cannot_bind(db, field, value):
    with pytest.raises(UnstorableValueError, match=f"^{field}: cannot store"):
        db.divert_to_spool("s", [{"role": "user", "content": "x", field: value}])
    assert not (db.home / "sessions" / "s.jsonl").exists()


@pytest.mark.parametrize("fields", [
    {"content": b"\xff\x00raw"},
    {"content": bytearray(b"\x01\x02")},
    {"content": memoryview(b"view")},
    {"content": "x", "tool_calls": [{"id": "a", "args": {"k": "x\ud800y"}}]},
    {"content": "x", "tool_calls": b""},  # falsy: NULL, not the text "b''"
    {"content": "x", "timestamp": datetime.datetime(2020, 1, 2, tzinfo=datetime.timezone.utc)},
    {"content": [{"type": "text", "text": "part"}], "display_metadata": {"k": [1, 2]}},
    {"content": "x", "reasoning_details": [float("nan")], "finish_reason": "stop"},
])
def test_a_spooled_message_replays_as_append_message_stores_it(db, fields):
    msg = {"role": "assistant", **fields}
    db.create_session("direct", source="cli")
    db.append_message("direct", **msg)
    db.divert_to_spool("spooled", [msg])
    for raw in (db.home / "sessions" / "spooled.jsonl").read_bytes().splitlines():
        raw.decode("utf-8")  # valid UTF-8 (a lone surrogate is escaped, not surrogatepass)
    result = replay_spool(db)
    assert (result["imported"], result["failed"], result["errors"]) == (1, 0, [])
    (want,), (got,) = db.get_messages("direct"), db.get_messages("spooled")
    skip = {"id", "session_id"} | ({"timestamp"} if "timestamp" not in fields else set())
    want = {k: v for k, v in want.items() if k not in skip}
    got = {k: v for k, v in got.items() if k not in skip}
    assert ascii(got) == ascii(want)  # ascii: NaN compares equal as text


def test_spool_records_of_earlier_versions_still_replay(db):
    """A record without ``bytes_fields`` (written before it existed) replays as it did."""
    db.divert_to_spool("s", [{"role": "user", "content": "plain"}])
    (rec,) = read_spool(db.home / "sessions" / "s.jsonl")
    assert "bytes_fields" not in rec
    assert replay_spool(db)["imported"] == 1
    assert db.get_messages("s")[0]["content"] == "plain"


@pytest.mark.parametrize("value", [{"raw": b"x"}, _circular(), [{1, 2}]])
def test_gateway_json_columns_refuse_by_name(db, value):
    db.create_session("s", source="telegram")
    with pytest.raises(UnstorableJSONError, match="^origin_json: cannot be stored as JSON"):
        db.record_gateway_session_peer("s", source="telegram", session_key="k",
                                       origin_json=value)
    assert db.get_session("s")["session_key"] is None  # nothing written
    with pytest.raises(UnstorableJSONError, match="^entry_json: "):
        db.save_gateway_routing_entry("k", value)
    db.save_gateway_routing_entry("keep", {"ok": 1})
    with pytest.raises(UnstorableJSONError, match="^entry_json: "):
        db.replace_gateway_routing_entries({"a": {"ok": 1}, "b": value})
    assert db.load_gateway_routing_entries() == {"keep": '{"ok": 1}'}


def test_a_batch_of_rows_sqlite_cannot_bind_is_a_named_refusal(db):
    db.save_gateway_routing_entry("keep", "{}")
    with pytest.raises(UnstorableValueError, match="nothing was written"):
        db.replace_gateway_routing_entries({"a": {1, 2}})  # a set: not a bindable value
    assert db.load_gateway_routing_entries() == {"keep": "{}"}


@pytest.mark.parametrize("content", [_deep(100_000), [10 ** 5000]])
def test_content_neither_json_nor_str_can_encode_is_refused_by_name(db, content):
    db.create_session("s", source="cli")
    with pytest.raises(UnstorableValueError, match="^content: cannot be stored"):
        db.append_message("s", "user", content)
    assert db.get_messages("s") == [] and db.get_session("s")["message_count"] == 0


@pytest.mark.parametrize("content", [bytearray(b"\x00\xff"), memoryview(b"\x00\xff")])
def test_bytes_like_content_is_stored_as_bytes_not_its_repr(db, content):
    db.create_session("s", source="cli")
    db.append_message("s", "user", content)
    assert db.get_messages("s")[0]["content"] == b"\x00\xff"


@pytest.mark.parametrize("entry,why", [
    ({"model_config": {"raw": b"\x00"}}, "model_config: cannot be stored as JSON"),
    ({"model_config": "[" * 100_000 + "]" * 100_000}, "model_config must be valid JSON"),
    ({"messages": [{"role": "assistant", "content": "x", "tool_calls": _deep(100_000)}]},
     "session must be JSON serializable"),
])
def test_import_sessions_reports_what_json_cannot_carry(db, entry, why):
    result = db.import_sessions([{"id": "a", "source": "cli", **entry}])
    assert result["ok"] is False and why in result["errors"][0]["error"]
    assert db.get_session("a") is None


def test_cli_import_of_a_file_nested_deeper_than_json_reads_is_an_error_not_a_traceback(
        tmp_path, capsys, monkeypatch):
    from hermes_state.cli import main

    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    deep = "[" * 100_000 + "]" * 100_000
    path = tmp_path / "deep.json"
    path.write_text('[{"id": "a", "source": "cli", "messages": [{"role": "assistant", '
                    f'"content": "x", "tool_calls": {deep}}}]}}]')
    code = main(["sessions", "import", str(path)])
    err = capsys.readouterr().err
    assert code != 0 and "is neither JSON nor JSON lines" in err and "Traceback" not in err
