"""Usage accounting (SPEC §2.3, §5; UPSTREAM_API §2.7, D8): ``update_token_counts`` on the
session summary and the ``session_model_usage`` rows, ``record_auxiliary_usage``, the model and
billing-route setters."""

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


def usage_keys(db, sid="s"):
    return {(r["model"], r["billing_provider"], r["billing_base_url"], r["billing_mode"],
             r["task"]): r["input_tokens"] for r in usage_rows(db, sid)}


def counts(row):
    return tuple(row[c] for c in COUNTS)


# ---------------------------------------------------------------------------- summary row
def test_unknown_session_is_created_with_source_unknown(db):
    assert db.update_token_counts("nope", input_tokens=5, model="m") is None
    row = db.get_session("nope")
    assert (row["source"], row["model"], row["input_tokens"]) == ("unknown", "m", 5)
    assert usage_keys(db, "nope") == {("m", "", "", "", ""): 5}


def test_null_model_filled_even_without_usage(db):
    db.update_token_counts("s", model="first")
    assert db.get_session("s")["model"] == "first"
    assert usage_rows(db) == []  # nothing counted: no usage row
    db.update_token_counts("s", 1, model="second")
    assert db.get_session("s")["model"] == "first"  # only NULL is filled


def test_delta_adds_on_session_and_usage_row(db):
    db.update_token_counts("s", 10, 5, model="m", cache_read_tokens=3, cache_write_tokens=2,
                           reasoning_tokens=1, api_call_count=1)
    db.update_token_counts("s", 1, 2, model="m", cache_read_tokens=3, cache_write_tokens=4,
                           reasoning_tokens=5, api_call_count=1)
    assert counts(db.get_session("s")) == (11, 7, 6, 6, 6, 2)
    (row,) = usage_rows(db)
    assert counts(row) == (11, 7, 6, 6, 6, 2)


def test_absolute_sets_the_summary_and_writes_no_usage_row(db):
    db.update_token_counts("s", 10, 10, model="m", api_call_count=3)
    db.update_token_counts("s", 4, 6, model="m", reasoning_tokens=2, api_call_count=1,
                           absolute=True)
    assert counts(db.get_session("s")) == (4, 6, 0, 0, 2, 1)
    (row,) = usage_rows(db)
    assert counts(row) == (10, 10, 0, 0, 0, 3)  # untouched by the absolute call


def test_absolute_only_never_creates_a_usage_row(db):
    db.update_token_counts("s", 7, 7, model="m", absolute=True)
    assert usage_rows(db) == []


def test_estimated_cost_null_becomes_zero_actual_kept_when_none(db):
    db.update_token_counts("s", model="m")
    s = db.get_session("s")
    assert (s["estimated_cost_usd"], s["actual_cost_usd"]) == (0.0, None)
    db.update_token_counts("s", model="m", estimated_cost_usd=0.25)
    db.update_token_counts("s", model="m", estimated_cost_usd=0.5, actual_cost_usd=0.1)
    db.update_token_counts("s", model="m")
    s = db.get_session("s")
    assert s["estimated_cost_usd"] == pytest.approx(0.75)
    assert s["actual_cost_usd"] == pytest.approx(0.1)
    (row,) = usage_rows(db)
    assert row["estimated_cost_usd"] == pytest.approx(0.75)
    assert row["actual_cost_usd"] == pytest.approx(0.1)


def test_absolute_costs(db):
    db.update_token_counts("s", model="m", estimated_cost_usd=2.0, actual_cost_usd=1.0)
    db.update_token_counts("s", model="m", estimated_cost_usd=0.5, absolute=True)
    s = db.get_session("s")
    assert (s["estimated_cost_usd"], s["actual_cost_usd"]) == (0.5, 1.0)
    db.update_token_counts("s", model="m", absolute=True)  # absolute + None sets 0
    assert db.get_session("s")["estimated_cost_usd"] == 0.0


def test_actual_cost_alone_writes_no_usage_row(db):
    db.update_token_counts("s", model="m", actual_cost_usd=0.3)
    assert db.get_session("s")["actual_cost_usd"] == pytest.approx(0.3)
    assert usage_rows(db) == []


def test_usage_costs_are_never_null(db):
    db.update_token_counts("s", 3, model="m")
    (row,) = usage_rows(db)
    assert (row["estimated_cost_usd"], row["actual_cost_usd"]) == (0.0, 0.0)


def test_cost_labels_overwrite_when_given(db):
    db.update_token_counts("s", 1, model="m", cost_status="estimated", cost_source="table",
                           pricing_version="v1")
    db.update_token_counts("s", 1, model="m", cost_status="actual", pricing_version="v2")
    db.update_token_counts("s", 1, model="m")
    s = db.get_session("s")
    assert (s["cost_status"], s["cost_source"], s["pricing_version"]) == (
        "actual", "table", "v2")
    (row,) = usage_rows(db)
    assert (row["cost_status"], row["cost_source"]) == ("actual", "table")


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
    db.update_token_counts("s", 1, model="m\ud800", task="t\udfff")
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
    assert s["estimated_cost_usd"] == 0.0
    assert [r["model"] for r in usage_rows(db)] == ["m"]


# ---------------------------------------------------------------------------- attribution
def test_usage_without_model_goes_to_the_sessions_model(tmp_path):
    with SessionDB(db_path=tmp_path / "state.db") as db:
        db.create_session("s", "cli", model="gpt-4o")
        db.update_token_counts("s", 10, 5)
        assert usage_keys(db) == {("gpt-4o", "", "", "", ""): 10}


def test_usage_without_any_model_is_unknown(db):
    db.update_token_counts("s", 3)
    assert usage_keys(db) == {("unknown", "", "", "", ""): 3}


def test_usage_rows_per_model_route_and_task(db):
    db.update_token_counts("s", 1, model="m", billing_provider="p", api_call_count=1)
    db.update_token_counts("s", 2, model="m", billing_provider="p", task="title")
    db.update_token_counts("s", 4, model="m", billing_provider="p", billing_base_url="https://x")
    db.update_token_counts("s", 8, model="m", billing_provider="p", billing_mode="sub")
    db.update_token_counts("s", 16, model="m", billing_provider="p", task="title")
    # a part the call leaves out is the session's (filled by the first call that named it)
    assert usage_keys(db) == {("m", "p", "", "", ""): 1, ("m", "p", "", "", "title"): 2,
                              ("m", "p", "https://x", "", ""): 4,
                              ("m", "p", "https://x", "sub", ""): 8,
                              ("m", "p", "https://x", "sub", "title"): 16}


def test_route_fills_nulls_only_with_accounted_usage(db):
    db.update_token_counts("s", model="fallback", billing_provider="p", api_call_count=0)
    s = db.get_session("s")
    assert s["billing_provider"] is None and usage_rows(db) == []
    db.update_token_counts("s", 1, model="m", billing_provider="p1", billing_base_url="u1",
                           billing_mode="m1", api_call_count=1)
    db.update_token_counts("s", 1, model="m", billing_provider="p2", api_call_count=1)
    s = db.get_session("s")
    assert (s["billing_provider"], s["billing_base_url"], s["billing_mode"]) == ("p1", "u1", "m1")
    assert set(usage_keys(db)) == {("m", "p1", "u1", "m1", ""), ("m", "p2", "u1", "m1", "")}


def test_first_accounted_route_replaces_every_route_field(tmp_path):
    with SessionDB(db_path=tmp_path / "state.db") as db:
        db.create_session("s", "cli", model="configured", billing_provider="old",
                          billing_base_url="https://old", billing_mode="old-mode")
        db.update_token_counts("s", 5, model="actual", billing_provider="new", api_call_count=1)
        s = db.get_session("s")
        assert (s["model"], s["billing_provider"], s["billing_base_url"], s["billing_mode"]) == (
            "actual", "new", None, None)
        db.update_token_counts("s", 5, model="fallback", billing_provider="other",
                               api_call_count=1)
        s = db.get_session("s")
        assert (s["model"], s["billing_provider"]) == ("actual", "new")  # fixed once counted
        assert set(usage_keys(db)) == {("actual", "new", "", "", ""),
                                       ("fallback", "other", "", "", "")}


# ---------------------------------------------------------------------------- setters, aux
def test_record_auxiliary_usage_keeps_the_summary(db):
    db.update_token_counts("s", 10, model="main", billing_provider="p", api_call_count=1)
    db.record_auxiliary_usage("s", "title", model="small", input_tokens=7,
                              estimated_cost_usd=None)
    db.record_auxiliary_usage("s", "title", model="small", input_tokens=3,
                              estimated_cost_usd=0.5)
    s = db.get_session("s")
    assert (s["input_tokens"], s["api_call_count"], s["model"]) == (10, 1, "main")
    aux = [r for r in usage_rows(db) if r["task"] == "title"]
    assert [(r["model"], r["billing_provider"], r["billing_mode"], r["input_tokens"],
             r["api_call_count"], r["estimated_cost_usd"]) for r in aux] == [
        ("small", "", "", 10, 2, 0.5)]


def test_record_auxiliary_usage_guards_and_unknown_session(db):
    db.record_auxiliary_usage("", "title", input_tokens=1)
    db.record_auxiliary_usage("s", "", input_tokens=1)
    assert usage_rows(db) == []
    db.record_auxiliary_usage("new", "compress", input_tokens=2)
    assert db.get_session("new")["source"] == "unknown"
    assert usage_keys(db, "new") == {("unknown", "", "", "", "compress"): 2}


def test_update_session_model_is_unconditional_and_sticks(db):
    db.update_token_counts("s", 1, model="a")
    db.update_session_model("s", "b")
    db.update_token_counts("s", 1, model="c")
    assert db.get_session("s")["model"] == "b"


def test_update_session_billing_route(tmp_path):
    with SessionDB(db_path=tmp_path / "state.db") as db:
        db.create_session("s", "cli", system_prompt="SYS", billing_mode="keep")
        db.update_session_billing_route("s", provider="p", base_url="u")
        s = db.get_session("s")
        assert (s["billing_provider"], s["billing_base_url"], s["billing_mode"],
                s["system_prompt"]) == ("p", "u", "keep", None)
        db.update_session_billing_route("s", provider=None, base_url=None, billing_mode="m")
        s = db.get_session("s")
        assert (s["billing_provider"], s["billing_base_url"], s["billing_mode"]) == (
            None, None, "m")


def test_get_model_usage_lists_rows(db):
    db.update_token_counts("s", 1, model="a")
    db.update_token_counts("s", 1, model="b")
    assert [r["model"] for r in db.get_model_usage("s")] == ["a", "b"]
    assert db.get_model_usage("nope") == []
