"""An SQLite without FTS5 (issue 23.3; UPSTREAM_API.md §2.13; SPEC §2.4).

The store is used from a child process whose SQLite connections really lack the ``fts5`` module
(:mod:`hermes_state.testing.without_fts`: ``sqlite3_drop_modules`` at every open, the same errors as
a build without FTS5). Like upstream, the store opens, writes and reads; the FTS triggers are
dropped so no write needs the module. Search takes the substring (LIKE) route instead of
upstream's ``[]`` (SPEC §6 keeps every message findable). When an SQLite with FTS5 opens the
store again, the triggers come back and every row is re-indexed, those written meanwhile too.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from chaos.matrix import real_stores as rs
from hermes_state import SessionDB
from hermes_state.schema.fts_inventory import inventory
from hermes_state.schema.fts_layout import status, verify_fts

FIXTURES = {s.name.split("/")[-1]: s for s in rs.fixture_stores()}
STORES = ["fresh", "ours", "v2", "v22", "v31"]


def _store(tmp_path: Path, name: str) -> Path:
    if name == "fresh":
        return tmp_path / "fresh" / "state.db"
    if name == "ours":  # a current store written with FTS5, then used without it
        path = tmp_path / "ours" / "state.db"
        with SessionDB(path) as db:
            db.create_session("before", source="cli")
            db.append_message("before", "user", "written before kubernetes was gone")
        return path
    return rs.copy_store(FIXTURES[name].path, tmp_path / name)


def _without_fts5(spawn, path: Path, tag: str) -> dict:
    child = spawn("no_fts5_child.py", str(path), tag)
    reply = json.loads(child.readline())
    child.wait()
    assert reply["ok"], reply
    return reply


def _meta(path: Path) -> dict:
    conn = sqlite3.connect(str(path))
    try:
        return dict(conn.execute("SELECT key, value FROM state_meta WHERE key LIKE 'fts%'"))
    finally:
        conn.close()


@pytest.mark.parametrize("name", STORES)
def test_the_store_opens_writes_and_finds_messages_without_fts5(tmp_path, spawn, name):
    path = _store(tmp_path, name)
    reply = _without_fts5(spawn, path, "x")  # before issue 23: no such module: fts5 at open
    assert reply["lacks_fts5"] is True
    assert reply["messages"] == 3 and reply["deleted"] is True
    assert reply["hits"] == reply["ids"][:1]  # the substring route finds the new message
    assert reply["version"] == (31 if name == "v31" else 23)
    assert reply["second_open_work"] is False  # switched off once; later opens write nothing
    meta = _meta(path)
    assert meta.get("fts_stale") == "1" and meta.get("fts_no_fts5") == "1"
    conn = sqlite3.connect(str(path))
    try:
        assert inventory(conn).fts_triggers == []
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    finally:
        conn.close()


@pytest.mark.parametrize("name", ["fresh", "ours", "v2", "v22"])
def test_fts5_back_restores_the_triggers_and_indexes_every_row(tmp_path, spawn, name):
    path = _store(tmp_path, name)
    reply = _without_fts5(spawn, path, "y")
    with SessionDB(path) as db:
        assert db.connection.migration_report is not None  # the open restored the index
        assert [h["id"] for h in db.search_messages("zephyry")] == reply["ids"][:1]
        if name != "fresh":
            assert db.search_messages("kubernetes")
        db.append_message("nofts-y", "user", "after the return of quixotic search")
        assert len(db.search_messages("quixotic")) == 1
    assert _meta(path) == {}
    conn = sqlite3.connect(str(path))
    try:
        st = status(conn)
        assert (st["layout"], st["stale"], st["plan"]) == ("external-v23", False, "ok")
        assert set(verify_fts(conn).values()) == {"ok"}
    finally:
        conn.close()
    again = SessionDB(path)
    assert again.connection.migration_report is None  # settled
    again.close()


def test_a_newer_store_is_detached_as_its_release_does_and_stays_findable(tmp_path, spawn):
    """Schema 31 keeps its own layout: its triggers are dropped with ``fts_stale`` (upstream's
    "detached, rebuild before re-attaching" mark, UPSTREAM_API.md §4.4), the rebuild is left to
    the release that owns the layout; meanwhile search takes the substring route."""
    path = _store(tmp_path, "v31")
    reply = _without_fts5(spawn, path, "z")
    with SessionDB(path) as db:
        assert [h["id"] for h in db.search_messages("zephyrz")] == reply["ids"][:1]
        assert db.search_messages("kubernetes")
        assert db.get_meta("fts_stale") == "1"
    conn = sqlite3.connect(str(path))
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchone()[0] == 31
        assert inventory(conn).fts_triggers == []
    finally:
        conn.close()
