"""Corruption handling (SPEC §12): quarantine before connect, sticky structural errors, FTS-only
damage that keeps writes going. Every test damages a real file."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_state import SessionDB, StateDbCorruptError
from hermes_state.cli import main as cli

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("content", [b"", b"\0" * 8192, b"this is not a database\n" * 50],
                         ids=["empty", "zeroed", "text"])
def test_non_sqlite_store_is_moved_aside_and_a_fresh_one_created(tmp_path, content):
    path = tmp_path / "state.db"
    path.write_bytes(content)
    Path(f"{path}-wal").write_bytes(b"\0" * 100) if content else None
    with SessionDB(path) as db:
        backups = sorted(tmp_path.glob("state.db.corrupt.*.bak"))
        assert len(backups) == 1 and db.quarantined_to == backups[0]
        assert backups[0].read_bytes() == content
        if content:
            assert Path(f"{backups[0]}-wal").exists()
        db.create_session("s", source="cli")
        assert db.get_session("s") is not None


def test_two_starters_on_a_zeroed_store_move_it_once(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"\0" * 8192)
    code = ("import sys; from hermes_state import SessionDB; db = SessionDB(sys.argv[1]); "
            "db.create_session(sys.argv[2], source='cli'); db.close()")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(path), f"s{i}"], cwd=REPO)
             for i in range(2)]
    assert [p.wait(timeout=60) for p in procs] == [0, 0]
    assert len(list(tmp_path.glob("state.db.corrupt.*.bak"))) == 1
    with SessionDB(path) as db:
        assert db.get_session("s0") and db.get_session("s1")


def test_a_valid_store_is_never_quarantined(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
    with SessionDB(path) as db:
        assert db.quarantined_to is None and db.get_session("s")
    assert not list(tmp_path.glob("*.corrupt.*"))


def _garble_fts(path: Path) -> None:
    raw = sqlite3.connect(str(path))
    # id 10 is FTS5's structure record: damaging it makes every FTS access SQLITE_CORRUPT_VTAB
    raw.execute("UPDATE messages_fts_data SET block = x'ffffffff0102' WHERE id = 10")
    raw.commit()
    raw.close()


def test_fts_only_corruption_keeps_writes_going_and_search_falls_back(tmp_path, capsys):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        for i in range(30):
            db.append_message("s", "user", f"message number {i} about docker deployment")
    _garble_fts(path)
    with SessionDB(path) as db:
        mid = db.append_message("s", "user", "written after the index broke: kubernetes")
        assert mid > 0
        assert db.get_meta("fts_stale") is not None
        assert [h["id"] for h in db.search_messages("kubernetes")] == [mid]
        assert len(db.get_messages("s")) == 31
    assert cli(["--home", str(tmp_path), "doctor"]) == 1
    assert "search index was found corrupt" in capsys.readouterr().out
    assert cli(["--home", str(tmp_path), "doctor", "--fix"]) == 0  # repaired: nothing left to do
    assert "fixed by --fix: the search index was found corrupt" in capsys.readouterr().out
    with SessionDB(path) as db:
        assert db.get_meta("fts_stale") is None
        raw = db.connection.conn
        assert raw.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH "
                           "'kubernetes'").fetchone()[0] == 1
        raw.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 1)")
    assert cli(["--home", str(tmp_path), "doctor"]) == 0


def test_structural_corruption_is_sticky_and_never_checkpointed(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        for i in range(400):
            db.append_message("s", "user", f"row {i} " + "x" * 300)
    raw = sqlite3.connect(str(path))
    pages = [r[0] for r in raw.execute("SELECT pageno FROM dbstat WHERE name = 'messages' "
                                       "AND pagetype = 'leaf'")]
    page_size = raw.execute("PRAGMA page_size").fetchone()[0]
    raw.close()
    victim = pages[len(pages) // 2]
    with open(path, "r+b") as fh:
        fh.seek((victim - 1) * page_size)
        fh.write(b"\xa5" * page_size)
    db = SessionDB(path)
    with pytest.raises(StateDbCorruptError) as first:
        db.get_messages("s")
    assert "recover" in str(first.value)
    with pytest.raises(StateDbCorruptError):
        db.append_message("s", "user", "more")  # sticky: no further write is attempted
    before = path.read_bytes()
    db.close()
    assert path.read_bytes() == before  # no checkpoint at close


def _zero_fts_structure(path: Path, table: str = "messages_fts") -> None:
    raw = sqlite3.connect(str(path))
    # A zeroed structure record: FTS5 answers writes with a bare SQLITE_CONSTRAINT (19), not
    # SQLITE_CORRUPT_VTAB.
    raw.execute(f"UPDATE {table}_data SET block = zeroblob(length(block)) WHERE id = 10")
    raw.commit()
    raw.close()


@pytest.mark.parametrize("table", ["messages_fts", "messages_fts_trigram"])
def test_fts_damage_seen_as_a_bare_constraint_error_switches_the_index_off(tmp_path, capsys,
                                                                          table):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        for i in range(20):
            db.append_message("s", "user", f"message number {i} about docker")
    _zero_fts_structure(path, table)
    probe = sqlite3.connect(str(path))
    with pytest.raises(sqlite3.IntegrityError) as raw_error:  # what a plain write sees
        probe.execute("DELETE FROM messages WHERE id = 3")
    assert raw_error.value.sqlite_errorcode == 19
    probe.close()
    with SessionDB(path) as db:
        mid = db.append_message("s", "user", "written after the index broke: kubernetes")
        assert db.get_meta("fts_stale") is not None
        assert [h["id"] for h in db.search_messages("kubernetes")] == [mid]
        assert len(db.get_messages("s")) == 21
    assert cli(["--home", str(tmp_path), "doctor", "--fix"]) == 0
    assert "fixed by --fix: the search index was found corrupt" in capsys.readouterr().out
    with SessionDB(path) as db:
        assert db.get_meta("fts_stale") is None
        db.append_message("s", "user", "after the rebuild")
        raw = db.connection.conn
        raw.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")


def test_a_real_constraint_violation_leaves_the_index_alone(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "hello")
        with pytest.raises(sqlite3.IntegrityError):
            db._write(lambda c: c.execute(
                "INSERT INTO sessions(id, source, started_at) VALUES ('s', 'x', 1)"))
        assert db.get_meta("fts_stale") is None
        assert len(db.search_messages("hello")) == 1
