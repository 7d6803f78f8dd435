"""optimize_fts, rebuild_fts, vacuum, maybe_auto_prune_and_vacuum (UPSTREAM_API §2.13) and the
live-writer gate in front of them (SPEC §11)."""

from __future__ import annotations

import time

import pytest

from hermes_state.processes.writer_gate import MaintenanceRefused

DAY = 86400.0


def fts_tables(db):
    return {r[0] for r in db._read(lambda c: c.execute(
        "SELECT name FROM sqlite_master WHERE name IN ('messages_fts', 'messages_fts_trigram', "
        "'messages_fts_cjk')").fetchall())}


def fill(db, n=30):
    db.create_session("s", "cli")
    for i in range(n):
        db.append_message("s", "user", f"kubernetes rollout number {i} 記憶断裂テスト")


def test_optimize_fts_counts_tables_and_keeps_results(db):
    fill(db)
    before = db.search_messages("kubernetes", limit=50)
    cjk_before = db.search_messages("記憶断裂", limit=50)
    assert db.optimize_fts() == len(fts_tables(db)) == 2
    assert db.optimize_fts() == 2  # idempotent
    assert db.search_messages("kubernetes", limit=50) == before
    assert db.search_messages("記憶断裂", limit=50) == cjk_before


def test_rebuild_fts_counts_tables(db):
    fill(db, 3)
    assert db.rebuild_fts() == 2
    assert len(db.search_messages("kubernetes")) == 3


def test_vacuum_on_a_fresh_store_and_after_deletes(db):
    assert db.vacuum() == 2
    fill(db, 200)
    db.delete_session("s")
    size_before = db.db_path.stat().st_size
    assert db.vacuum() == 2
    assert db.db_path.stat().st_size <= size_before
    db.create_session("after", "cli")  # the handle still writes (identities re-recorded)
    db.append_message("after", "user", "still writing")
    assert db.search_messages("writing")[0]["session_id"] == "after"


def make_old(db, sid, days):
    db.create_session(sid, "cli")
    db.end_session(sid, "user_exit")
    t = time.time() - days * DAY
    db._write(lambda c: c.execute("UPDATE sessions SET started_at = ?, ended_at = ? WHERE id = ?",
                                  (t, t, sid)))


def test_auto_prune_runs_then_waits_for_the_interval(db):
    make_old(db, "old", 200)
    make_old(db, "recent", 5)
    out = db.maybe_auto_prune_and_vacuum(retention_days=90)
    assert out == {"skipped": False, "pruned": 1, "vacuumed": True}
    assert db.get_session("old") is None and db.get_session("recent") is not None
    marker = float(db.get_meta("last_auto_prune"))
    assert time.time() - marker < 60
    assert db.maybe_auto_prune_and_vacuum(retention_days=1) == {
        "skipped": True, "pruned": 0, "vacuumed": False}
    assert db.get_session("recent") is not None
    out = db.maybe_auto_prune_and_vacuum(retention_days=1, min_interval_hours=0)
    assert out["pruned"] == 1


def test_auto_prune_records_a_run_without_anything_to_prune(db):
    out = db.maybe_auto_prune_and_vacuum()
    assert out == {"skipped": False, "pruned": 0, "vacuumed": False}
    assert db.get_meta("last_auto_prune") is not None


def test_auto_prune_marker_not_a_number_counts_as_no_run(db):
    db.set_meta("last_auto_prune", "yesterday")
    make_old(db, "old", 200)
    assert db.maybe_auto_prune_and_vacuum(vacuum=False) == {
        "skipped": False, "pruned": 1, "vacuumed": False}


def test_auto_prune_old_marker_runs(db):
    db.set_meta("last_auto_prune", str(time.time() - 25 * 3600))
    assert db.maybe_auto_prune_and_vacuum()["skipped"] is False


def test_auto_prune_never_raises(db):
    db.close()
    out = db.maybe_auto_prune_and_vacuum()
    assert "error" in out and out["pruned"] == 0


def test_gate_refuses_rewrites_under_a_live_writer(db, spawn):
    fill(db, 3)
    make_old(db, "old", 200)
    child = spawn("store_child.py")
    child.ok("open", path=str(db.db_path))
    with pytest.raises(MaintenanceRefused, match="another process is using"):
        db.vacuum()
    with pytest.raises(MaintenanceRefused):
        db.optimize_fts()
    out = db.maybe_auto_prune_and_vacuum()
    assert out["skipped"] is True and "another process is using" in out["error"]
    assert db.get_session("old") is not None and db.get_meta("last_auto_prune") is None
    assert db.vacuum(force=True) == 2


def test_rewrites_run_holding_the_stores_write_lock(db, monkeypatch):
    """Decision and action under one exclusive hold of the store's write lock (SPEC §11,
    issue 11): observed from inside each action."""
    from hermes_state.processes import checkpoint_lock

    fill(db, 3)
    make_old(db, "old", 200)
    seen = []
    real_write = db._write

    def spy(fn, op="write"):
        seen.append((op, checkpoint_lock.held_here(db.db_path)))
        return real_write(fn, op=op)

    monkeypatch.setattr(db, "_write", spy)
    db.optimize_fts()
    db.vacuum()
    db.delete_sessions(["s"])
    db.import_sessions([{"id": "new"}])
    db.maybe_auto_prune_and_vacuum()
    held = {op: h for op, h in seen}
    for op in ("optimize_fts", "delete_sessions", "import_sessions", "prune_sessions"):
        assert held[op] is True, op
    db.append_message("new", "user", "after")  # outside: no exclusive hold left behind
    assert checkpoint_lock.held_here(db.db_path) is False
