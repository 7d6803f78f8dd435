"""Listing, compression chains, id search and cron runs (UPSTREAM_API §2.3 resume id, §2.4,
§2.5 search_sessions_by_id, §2.11, D10)."""

from __future__ import annotations

import json

import pytest



def sql(db, statement, *args):
    db._write(lambda c: c.execute(statement, args))


def make(db, sid, started, parent=None, source="cli", end=None, ended_at=None, **kw):
    db.create_session(sid, source, parent_session_id=parent, **kw)
    sql(db, "UPDATE sessions SET started_at = ? WHERE id = ?", started, sid)
    if end:
        db.end_session(sid, end)
        sql(db, "UPDATE sessions SET ended_at = ? WHERE id = ?", ended_at or started + 1, sid)


def listed(db, **kw):
    return [r["id"] for r in db.list_sessions_rich(**kw)]


# ---------------------------------------------------------------------------- D10 example
@pytest.fixture
def lineage(db):
    make(db, "root1", 100, end="compression", ended_at=200)
    make(db, "delegate1", 150, parent="root1")  # unmarked sub-agent of the live root
    make(db, "mid1", 200, parent="root1", end="compression", ended_at=300)
    make(db, "tip1", 300, parent="mid1")
    make(db, "standalone", 250)
    db.append_message("root1", "user", "root question", timestamp=150.0)
    db.append_message("tip1", "user", "tip question", timestamp=400.0)
    db.set_session_title("tip1", "Tip title")
    return db


def test_listing_projects_the_tip_at_the_roots_position(lineage):
    rows = lineage.list_sessions_rich()
    assert [r["id"] for r in rows] == ["standalone", "tip1"]
    tip = rows[1]
    assert tip["_lineage_root_id"] == "root1"
    assert tip["started_at"] == 100  # the root's
    assert (tip["preview"], tip["title"], tip["last_active"]) == ("tip question", "Tip title",
                                                                   400.0)
    assert tip["end_reason"] is None and tip["ended_at"] is None
    assert "_lineage_root_id" not in rows[0]


def test_listing_without_projection_and_with_children(lineage):
    assert listed(lineage, project_compression_tips=False) == ["standalone", "root1"]
    assert set(listed(lineage, include_children=True)) == {
        "root1", "delegate1", "mid1", "tip1", "standalone"}
    assert all("_lineage_root_id" not in r for r in lineage.list_sessions_rich(
        include_children=True))


def test_order_by_last_active_uses_the_whole_chain(lineage):
    assert listed(lineage, order_by_last_active=True) == ["tip1", "standalone"]


def test_compression_root_without_child_stays_raw(db):
    make(db, "lonely", 10, end="compression")
    (row,) = db.list_sessions_rich()
    assert row["id"] == "lonely" and "_lineage_root_id" not in row


def test_delegates_hidden_even_when_orphaned_and_branches_listed(db):
    make(db, "parent", 10)
    make(db, "sub", 11, parent="parent", model_config={"_delegate_from": "parent"})
    make(db, "orphan", 12, model_config={"_delegate_from": "__orphaned__"})
    make(db, "branch", 13, parent="parent", model_config={"_branched_from": "parent"})
    make(db, "bad-json", 14)
    sql(db, "UPDATE sessions SET model_config = 'not json {' WHERE id = 'bad-json'")
    assert listed(db) == ["bad-json", "branch", "parent"]


def test_branch_child_of_a_branched_end_stays_visible_after_reopen(db):
    make(db, "p", 10, end="branched", ended_at=20)
    make(db, "b", 25, parent="p")
    assert "b" in listed(db)
    db.reopen_session("p")
    db.end_session("p", "branched")  # re-ended later than b started: the marker keeps it
    sql(db, "UPDATE sessions SET model_config = ? WHERE id = 'b'",
        json.dumps({"_branched_from": "p"}))
    assert "b" in listed(db)
    assert json.loads(db.get_session("b")["model_config"]) == {"_branched_from": "p"}


def test_filters(db):
    make(db, "a", 1, cwd="/repo")
    make(db, "b", 2, cwd="/repo/sub", source="telegram")
    make(db, "c", 3, cwd="/repo-wt")
    make(db, "d", 4, cwd="/REPO/x")
    make(db, "e", 5)
    sql(db, "UPDATE sessions SET archived = 1 WHERE id = 'e'")
    db.append_message("a", "user", "x")
    db.append_message("a", "user", "y")
    assert listed(db, cwd_prefix="/repo/") == ["d", "b", "a"]
    assert listed(db, source="telegram") == ["b"]
    assert listed(db, exclude_sources=["telegram"]) == ["d", "c", "a"]
    assert listed(db, min_message_count=2) == ["a"]
    assert listed(db, archived_only=True) == ["e"]
    assert "e" in listed(db, include_archived=True)
    assert listed(db, limit=2, offset=1) == ["c", "b"]


def test_preview_rules(db):
    make(db, "s", 1)
    db.append_message("s", "assistant", "not me", timestamp=1.0)
    db.append_message("s", "user", "  x\r\nyz  ", timestamp=2.0)
    make(db, "long", 2)
    db.append_message("long", "user", "w" * 70)
    rows = {r["id"]: r for r in db.list_sessions_rich()}
    assert rows["s"]["preview"] == "x  yz"
    assert rows["long"]["preview"] == "w" * 60 + "..."
    make(db, "multi", 3)
    db.append_message("multi", "user", [{"type": "text", "text": "hi"}])
    assert db.list_sessions_rich()[0]["preview"].startswith("\x00json:")


def test_compact_rows_drops_only_the_system_prompt(db):
    make(db, "s", 1, system_prompt="long prompt")
    full, = db.list_sessions_rich()
    compact, = db.list_sessions_rich(compact_rows=True)
    assert "system_prompt" not in compact
    full.pop("system_prompt")
    assert full == compact


def test_id_and_search_queries_match_any_chain_member(lineage):
    db = lineage
    assert listed(db, order_by_last_active=True, id_query="MID1") == ["tip1"]
    assert listed(db, order_by_last_active=True, id_query="stand") == ["standalone"]
    db.set_session_title("standalone", "AN-94 rifle")
    assert listed(db, order_by_last_active=True, search_query="an94") == ["standalone"]
    assert listed(db, order_by_last_active=True, search_query="tip tit") == ["tip1"]
    assert listed(db, order_by_last_active=True, search_query="100%") == []


def test_session_count(lineage):
    db = lineage
    assert db.session_count() == 5
    assert db.session_count(exclude_children=True) == 2
    sql(db, "UPDATE sessions SET archived = 1 WHERE id = 'standalone'")
    assert db.session_count() == 4
    assert db.session_count(archived_only=True) == 1
    assert db.session_count(include_archived=True) == 5
    assert db.session_count(source="nope") == 0
    assert db.session_count(exclude_sources=["cli"]) == 0


def test_search_sessions_orders_by_last_active_and_includes_everything(lineage):
    db = lineage
    rows = db.search_sessions()
    assert [r["id"] for r in rows] == ["tip1", "standalone", "mid1", "delegate1", "root1"]
    assert len(rows) == 5 and all("last_active" in r for r in rows)
    assert len(db.search_sessions(limit=2, offset=4)) == 1


# ---------------------------------------------------------------------------- chains
def test_compression_tip_prefers_the_real_continuation(lineage):
    db = lineage
    assert db.get_compression_tip("root1") == "tip1"
    assert db.get_compression_tip("mid1") == "tip1"
    assert db.get_compression_tip("tip1") == "tip1"
    assert db.get_compression_tip("unknown") == "unknown"


def test_compression_tip_skips_branches_delegates_and_tools(db):
    make(db, "r", 1, end="compression")
    make(db, "b", 2, parent="r", model_config={"_branched_from": "r"})
    make(db, "d", 3, parent="r", model_config={"_delegate_from": "r"})
    make(db, "t", 4, parent="r", source="tool")
    assert db.get_compression_tip("r") == "r"
    make(db, "c", 0, parent="r")
    assert db.get_compression_tip("r") == "c"


def test_compression_tip_prefers_live_then_newest(db):
    make(db, "r", 1, end="compression")
    make(db, "ended", 5, parent="r", end="user_exit")
    make(db, "live_old", 2, parent="r")
    make(db, "live_new", 3, parent="r")
    assert db.get_compression_tip("r") == "live_new"
    db.append_message("live_old", "user", "recent", timestamp=99.0)
    assert db.get_compression_tip("r") == "live_old"


def test_compression_tip_cycle_safe(db):
    make(db, "a", 1, end="compression")
    make(db, "b", 2, parent="a", end="compression")
    sql(db, "UPDATE sessions SET parent_session_id = 'b' WHERE id = 'a'")
    assert db.get_compression_tip("a") == "b"


def test_compression_lineage(db):
    make(db, "r", 1, end="compression")
    make(db, "m", 2, parent="r", end="compression")
    make(db, "branch", 2.5, parent="m", model_config={"_branched_from": "m"})
    make(db, "t", 3, parent="m")
    make(db, "later", 4, parent="m")
    for sid in ("r", "m", "t"):
        assert db.get_compression_lineage(sid) == ["r", "m", "t"]
    assert db.get_compression_lineage("later") == ["later"]  # not the first child
    assert db.get_compression_lineage("missing") == []


def test_compression_lineage_delegates_are_not_skipped_downward(lineage):
    """Upstream quirk kept: walking down takes the first child by started_at even when it is an
    unmarked sub-agent, so a chain whose root spawned one earlier ends there."""
    db = lineage
    assert db.get_compression_lineage("root1") == ["root1", "delegate1"]
    assert db.get_compression_lineage("mid1") == ["mid1"]
    assert db.get_compression_lineage("standalone") == ["standalone"]


def test_compression_lineage_branch_child_and_cycle(db):
    make(db, "p", 1, end="compression")
    make(db, "br", 2, parent="p", model_config={"_branched_from": "p"})
    assert db.get_compression_lineage("br") == ["br"]
    make(db, "x", 5, end="compression")
    make(db, "y", 6, parent="x", end="compression")
    sql(db, "UPDATE sessions SET parent_session_id = 'y' WHERE id = 'x'")
    got = db.get_compression_lineage("x")
    assert sorted(got) == ["x", "y"] and len(got) == 2


def test_resolve_resume_session_id(db):
    assert db.resolve_resume_session_id("") == ""
    make(db, "r", 1, end="compression")
    make(db, "t", 2, parent="r")
    db.append_message("t", "user", "hello")
    assert db.resolve_resume_session_id("r") == "t"
    make(db, "k", 3, parent="t")  # a newer child with messages is deeper
    db.append_message("k", "user", "more")
    assert db.resolve_resume_session_id("r") == "k"
    make(db, "empty", 4, parent="k")
    make(db, "dlg", 5, parent="k", model_config={"_delegate_from": "k"})
    db.append_message("dlg", "user", "sub-agent")
    assert db.resolve_resume_session_id("r") == "k"
    assert db.resolve_resume_session_id("unknown") == "unknown"


# ---------------------------------------------------------------------------- id search
def test_search_sessions_by_id_ranking_and_projection(lineage):
    db = lineage
    make(db, "xroot", 500)
    make(db, "root", 501)
    got = [(r["id"], r.get("_lineage_root_id")) for r in db.search_sessions_by_id("root")]
    assert got == [("root", None), ("tip1", "root1"), ("xroot", None)]
    assert [r["id"] for r in db.search_sessions_by_id("ROOT1")] == ["tip1"]
    assert db.search_sessions_by_id("   ") == []
    assert db.search_sessions_by_id("root", limit=0) == []
    assert len(db.search_sessions_by_id("root", limit=1)) == 1
    sql(db, "UPDATE sessions SET archived = 1 WHERE id = 'xroot'")
    assert "xroot" in [r["id"] for r in db.search_sessions_by_id("root")]
    assert "xroot" not in [r["id"] for r in db.search_sessions_by_id(
        "root", include_archived=False)]


# ---------------------------------------------------------------------------- cron runs
def test_list_cron_job_runs(db):
    for sid, started, source in (("cron_alpha_1", 10, "cron"), ("cron_alpha_2", 20, "cron"),
                                 ("cron_alpha2_1", 30, "cron"), ("cron_xalpha_1", 40, "cron"),
                                 ("cron_alpha_3", 50, "cli"), ("cron_alpha_0", 20, "cron")):
        make(db, sid, started, source=source)
    db.append_message("cron_alpha_2", "user", "nightly report")
    runs = db.list_cron_job_runs("alpha")
    assert [r["id"] for r in runs] == ["cron_alpha_2", "cron_alpha_0", "cron_alpha_1"]
    assert runs[0]["preview"] == "nightly report" and "last_active" in runs[0]
    assert [r["id"] for r in db.list_cron_job_runs("alpha", limit=1, offset=1)] == [
        "cron_alpha_0"]
    assert db.list_cron_job_runs("none") == []


def test_list_cron_job_runs_uses_the_source_index(db):
    statements = []
    conn = db.connection.conn
    conn.set_trace_callback(statements.append)
    try:
        db.list_cron_job_runs("alpha")
    finally:
        conn.set_trace_callback(None)
    query = next(s for s in statements if "FROM sessions" in s and "cron" in s)
    plan = " ".join(str(tuple(r)) for r in conn.execute("EXPLAIN QUERY PLAN " + query))
    assert "idx_sessions_source" in plan
