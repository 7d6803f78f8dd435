"""Validation agrees with the write; any value of any type is shown (issue 22 item 7).

What ``sessions import`` accepts is what it then writes (values checked after cleaning, with
the ranges SQLite accepts); a value of another type planted in a column by a foreign client is
listed and searched, never a traceback; a compression-lock holder naming an impossible pid is
not proof of anything.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.cli import main


@pytest.fixture
def home(tmp_path) -> Path:
    h = tmp_path / "home"
    with SessionDB(h / "state.db") as db:
        db.create_session("keep", source="cli")
        db.append_message("keep", "user", "hello")
    return h


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


def session_ids(home: Path) -> list[str]:
    with SessionDB(home / "state.db", read_only=True) as db:
        return sorted(r["id"] for r in db.connection.read(
            lambda c: c.execute("SELECT id FROM sessions").fetchall()))


@pytest.mark.parametrize("entry, words", [
    ({"id": "big", "messages": [{"role": "user", "content": "x", "token_count": 2 ** 63}]},
     "messages[0].token_count"),
    ({"id": "big", "input_tokens": 2 ** 64}, "input_tokens"),
    ({"id": "big", "output_tokens": 1e300}, "output_tokens"),
    ({"id": "big", "cache_read_tokens": float("inf")}, "finite"),
    ({"id": "big", "started_at": float("nan")}, "finite"),
    ({"id": "big", "estimated_cost_usd": -float("inf")}, "finite"),
])
def test_import_refuses_numbers_sqlite_cannot_store_before_writing(home, tmp_path, capsys,
                                                                   entry, words):
    path = tmp_path / "export.json"
    path.write_text(json.dumps([{"id": "fine", "messages": []}, entry]))
    code, out, err = run(capsys, "--home", home, "sessions", "import", path)
    assert code == 1, (out, err)
    assert "Traceback" not in err and words in err and "nothing imported" in err, err
    assert session_ids(home) == ["keep"]  # nothing written, not even the valid entry


def test_import_ids_equal_after_cleaning_are_duplicates(home, tmp_path, capsys):
    # Two lone surrogates: both ids are written as "dup\ufffd" -- the same id.
    path = tmp_path / "export.json"
    path.write_text('[{"id": "dup\\ud800", "messages": []}, {"id": "dup\\udfff", "messages": []}]')
    code, out, err = run(capsys, "--home", home, "sessions", "import", path)
    assert code == 1 and "duplicate session id" in err, (out, err)
    assert "UNIQUE" not in err and "doctor" not in err
    assert session_ids(home) == ["keep"]


def test_api_refuses_an_unbindable_integer_by_name(tmp_path):
    from hermes_state.api.text import UnstorableValueError

    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="cli")
        with pytest.raises(UnstorableValueError, match="outside SQLite's integer range"):
            db.append_message("s", "user", "x", token_count=2 ** 63)
        assert db.get_messages("s") == []
        assert db.message_count() == 0 if hasattr(db, "message_count") else True


@pytest.mark.parametrize("holder", ["pid=99999999999", "host=x pid=2147483648",
                                    "pid=" + "9" * 40, "pid=0"])
def test_compression_lock_with_an_impossible_pid_returns_false_not_overflow(tmp_path, holder):
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="cli")
        assert db.try_acquire_compression_lock("s", holder) is True
        # Another caller meets that holder: an impossible pid is not proof it is gone.
        assert db.try_acquire_compression_lock("s", "pid=1 me") is False
        assert db.get_compression_lock_holder("s") == holder


def plant(home: Path) -> None:
    """A foreign client's rows: a BLOB title and source, text in numeric columns, a BLOB and
    invalid UTF-8 content, invalid UTF-8 in a title."""
    with SessionDB(home / "state.db") as db:
        for i in range(5):
            db.create_session(f"s{i}", source="cli")
            db.append_message(f"s{i}", "user", f"hello planted {i}")
    conn = sqlite3.connect(home / "state.db", isolation_level=None)
    try:
        conn.execute("UPDATE sessions SET title = ? WHERE id = 's0'", (b"\xff\xfeblob title",))
        conn.execute("UPDATE sessions SET message_count = 'many', started_at = 'yesterday' "
                     "WHERE id = 's1'")
        conn.execute("UPDATE sessions SET source = X'00ff', model = 42 WHERE id = 's2'")
        conn.execute("UPDATE messages SET content = X'fffe00' WHERE session_id = 's3'")
        conn.execute("UPDATE sessions SET title = CAST(X'41ff42' AS TEXT) WHERE id = 's4'")
        conn.execute("UPDATE messages SET content = CAST(X'68656c6c6f20ff' AS TEXT) "
                     "WHERE session_id = 's4'")
    finally:
        conn.close()


@pytest.mark.parametrize("argv", [
    ("sessions", "list"), ("sessions", "list", "--json"), ("sessions", "search", "hello"),
    ("sessions", "search", "--id", "s"), ("sessions", "search", "--id", "s", "--json"),
    ("sessions", "show", "s0"), ("sessions", "show", "s4"), ("sessions", "export"),
    ("sessions", "export", "--format", "md"), ("sessions", "prune", "--dry-run",
                                               "--older-than", "0"),
    ("sessions", "archive", "--older-than", "0", "--dry-run"),
])
def test_values_of_any_type_in_the_store_are_shown(home, capsys, argv):
    plant(home)
    code, out, err = run(capsys, "--home", home, *argv)
    assert code == 0, (argv, out, err)
    assert "Traceback" not in err and "decode" not in err, err


def test_listing_shows_each_planted_row(home, capsys):
    plant(home)
    code, out, err = run(capsys, "--home", home, "sessions", "list", "--limit", "50")
    assert code == 0, err
    for sid in ("s0", "s1", "s2", "s3", "s4", "keep"):
        assert sid in out
    assert "A\ufffdB" in out  # invalid UTF-8 shown with U+FFFD, not an error


@pytest.mark.parametrize("field,value", [
    ("tool_calls", b"\xff\x00"),
    ("display_metadata", b"{}"),
    ("reasoning_details", {"k": b"x"}),
    ("codex_message_items", {1, 2}),
    ("tool_calls", [{"fn": object()}]),
])
def test_a_json_field_json_cannot_encode_is_refused_by_name(tmp_path, field, value):
    from hermes_state.api.text import UnstorableJSONError, UnstorableValueError

    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="cli")
        with pytest.raises(UnstorableJSONError, match=f"^{field}: cannot be stored as JSON") as ei:
            db.append_message("s", "assistant", "x", **{field: value})
        # named, and still the TypeError upstream's json.dumps raised
        assert isinstance(ei.value, TypeError) and isinstance(ei.value, UnstorableValueError)
        assert "nothing was written" in str(ei.value)
        assert db.get_messages("s") == []
        assert db.get_session("s")["message_count"] == 0


def test_a_circular_json_field_and_a_bad_model_config_are_refused_by_name(tmp_path):
    from hermes_state.api.text import UnstorableJSONError

    loop: list = []
    loop.append(loop)
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="cli")
        with pytest.raises(UnstorableJSONError, match="^reasoning_details: .*Circular"):
            db.append_message("s", "assistant", "x", reasoning_details=loop)
        with pytest.raises(UnstorableJSONError, match="^model_config: "):
            db.create_session("t", source="cli", model_config={"raw": b"\x00"})
        assert db.get_session("t") is None and db.get_messages("s") == []
