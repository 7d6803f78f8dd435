"""``update_token_counts`` (SPEC §2.3, §5): delta/absolute on the session row and the upsert of
the ``session_model_usage`` row, in one transaction."""

from __future__ import annotations

import sqlite3

import pytest

from hermes_state import SessionDB

COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
          "reasoning_tokens", "api_call_count")


@pytest.fixture
def db(tmp_path):
    with SessionDB(db_path=tmp_path / "state.db") as store:
        store.create_session("s", "cli")
        yield store


def usage_rows(db, sid="s"):
    return db._read(lambda c: [dict(r) for r in c.execute(
        "SELECT * FROM session_model_usage WHERE session_id = ? ORDER BY rowid", (sid,))])


def counts(row):
    return tuple(row[c] for c in COUNTS)


def test_unknown_session_returns_false_and_writes_nothing(db):
    assert db.update_token_counts("nope", input_tokens=5, model="m") is False
    assert db.get_session("nope") is None
    assert db._read(lambda c: c.execute(
        "SELECT COUNT(*) FROM session_model_usage").fetchone()[0]) == 0


def test_delta_adds_on_session_and_usage_row(db):
    assert db.update_token_counts("s", 10, 5, model="m", cache_read_tokens=3,
                                  cache_write_tokens=2, reasoning_tokens=1,
                                  api_call_count=1) is True
    assert db.update_token_counts("s", 1, 2, model="m", cache_read_tokens=3,
                                  cache_write_tokens=4, reasoning_tokens=5,
                                  api_call_count=1) is True
    assert counts(db.get_session("s")) == (11, 7, 6, 6, 6, 2)
    rows = usage_rows(db)
    assert len(rows) == 1
    assert counts(rows[0]) == (11, 7, 6, 6, 6, 2)


def test_absolute_sets_session_and_usage_row(db):
    db.update_token_counts("s", 10, 10, model="m", api_call_count=3)
    db.update_token_counts("s", 4, 6, model="m", reasoning_tokens=2, api_call_count=1,
                           absolute=True)
    assert counts(db.get_session("s")) == (4, 6, 0, 0, 2, 1)
    assert counts(usage_rows(db)[0]) == (4, 6, 0, 0, 2, 1)


def test_costs_add_in_delta_and_none_keeps_them(db):
    db.update_token_counts("s", model="m", estimated_cost_usd=0.25)
    db.update_token_counts("s", model="m", estimated_cost_usd=0.5, actual_cost_usd=0.1)
    db.update_token_counts("s", model="m")  # None: unknown, unchanged
    s = db.get_session("s")
    assert s["estimated_cost_usd"] == pytest.approx(0.75)
    assert s["actual_cost_usd"] == pytest.approx(0.1)
    row = usage_rows(db)[0]
    assert row["estimated_cost_usd"] == pytest.approx(0.75)
    assert row["actual_cost_usd"] == pytest.approx(0.1)


def test_costs_absolute_set_and_none_keeps_them(db):
    db.update_token_counts("s", model="m", estimated_cost_usd=2.0, actual_cost_usd=1.0)
    db.update_token_counts("s", model="m", estimated_cost_usd=0.5, absolute=True)
    s = db.get_session("s")
    assert (s["estimated_cost_usd"], s["actual_cost_usd"]) == (0.5, 1.0)
    row = usage_rows(db)[0]
    assert (row["estimated_cost_usd"], row["actual_cost_usd"]) == (0.5, 1.0)


def test_model_backfills_session_only_when_null(db):
    db.update_token_counts("s", 1, model="first")
    db.update_token_counts("s", 1, model="second")
    assert db.get_session("s")["model"] == "first"
    assert [r["model"] for r in usage_rows(db)] == ["first", "second"]


def test_usage_rows_keyed_by_model_billing_and_task(db):
    db.update_token_counts("s", 1, model="m")
    db.update_token_counts("s", 2, model="m", task="title")
    db.update_token_counts("s", 4, model="m", billing_provider="openrouter")
    db.update_token_counts("s", 8, model="m", billing_provider="openrouter",
                           billing_base_url="https://x", billing_mode="sub")
    db.update_token_counts("s", 16, model="m", task="title")
    rows = {(r["model"], r["billing_provider"], r["billing_base_url"], r["billing_mode"],
             r["task"]): r["input_tokens"] for r in usage_rows(db)}
    assert rows == {("m", "", "", "", ""): 1,
                    ("m", "", "", "", "title"): 18,
                    ("m", "openrouter", "", "", ""): 4,
                    ("m", "openrouter", "https://x", "sub", ""): 8}


def test_unknown_key_parts_are_empty_strings(db):
    db.update_token_counts("s", 3)
    (row,) = usage_rows(db)
    assert (row["model"], row["billing_provider"], row["billing_base_url"], row["billing_mode"],
            row["task"]) == ("", "", "", "", "")


def test_key_never_borrows_session_values(tmp_path):
    with SessionDB(db_path=tmp_path / "state.db") as db:
        db.create_session("s", "cli", model="sess-model", billing_provider="anthropic")
        db.update_token_counts("s", 1)
        db.update_token_counts("s", 2, model="sess-model", billing_provider="anthropic")
        rows = {(r["model"], r["billing_provider"]): r["input_tokens"] for r in usage_rows(db)}
        assert rows == {("", ""): 1, ("sess-model", "anthropic"): 2}


def test_billing_backfill_and_cost_labels(db):
    db.update_token_counts("s", model="m", billing_provider="p1", billing_base_url="u1",
                           billing_mode="m1", cost_status="estimated", cost_source="table",
                           pricing_version="v1")
    db.update_token_counts("s", model="m", billing_provider="p2", cost_status="actual",
                           pricing_version="v2")
    db.update_token_counts("s", model="m")
    s = db.get_session("s")
    assert (s["billing_provider"], s["billing_base_url"], s["billing_mode"]) == ("p1", "u1", "m1")
    assert (s["cost_status"], s["cost_source"], s["pricing_version"]) == (
        "actual", "table", "v2")
    rows = {(r["billing_provider"], r["billing_base_url"], r["billing_mode"]): r
            for r in usage_rows(db)}
    assert set(rows) == {("p1", "u1", "m1"), ("p2", "", ""), ("", "", "")}
    assert rows[("p1", "u1", "m1")]["cost_status"] == "estimated"
    assert rows[("p1", "u1", "m1")]["cost_source"] == "table"
    assert rows[("p2", "", "")]["cost_status"] == "actual"


def test_first_seen_kept_last_seen_advances(db):
    db.update_token_counts("s", 1, model="m")
    (first,) = usage_rows(db)
    db.update_token_counts("s", 1, model="m")
    (second,) = usage_rows(db)
    assert second["first_seen"] == first["first_seen"]
    assert second["last_seen"] >= first["last_seen"] >= first["first_seen"]


def test_none_counts_are_zero(db):
    db.update_token_counts("s", None, None, model="m", api_call_count=None)
    assert counts(db.get_session("s")) == (0, 0, 0, 0, 0, 0)


def test_lone_surrogates_in_labels_are_replaced(db):
    assert db.update_token_counts("s", 1, model="m\ud800", task="t\udfff") is True
    (row,) = usage_rows(db)
    assert (row["model"], row["task"]) == ("m\ufffd", "t\ufffd")


def test_one_transaction_usage_failure_rolls_back_session_update(db):
    db.update_token_counts("s", 5, model="m")
    db._write(lambda c: c.execute(
        "CREATE TRIGGER boom BEFORE INSERT ON session_model_usage "
        "WHEN new.model = 'explode' BEGIN SELECT RAISE(ABORT, 'usage insert refused'); END"))
    with pytest.raises(sqlite3.IntegrityError, match="usage insert refused"):
        db.update_token_counts("s", 100, model="explode", estimated_cost_usd=9.0)
    s = db.get_session("s")
    assert s["input_tokens"] == 5
    assert s["estimated_cost_usd"] is None
    assert [r["model"] for r in usage_rows(db)] == ["m"]


def test_get_model_usage_lists_rows(db):
    db.update_token_counts("s", 1, model="a")
    db.update_token_counts("s", 1, model="b")
    assert [r["model"] for r in db.get_model_usage("s")] == ["a", "b"]
    assert db.get_model_usage("nope") == []
