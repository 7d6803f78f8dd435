"""``sessions recover`` on real damaged files (SPEC §14).

Damage is real: bytes of one b-tree leaf page of a quiet store are overwritten with garbage
(the page is found through SQLite's ``dbstat`` table, and the rowids it held are read from the
page itself before it is overwritten, so the tests know exactly which rows were lost). The
retired-WAL capture comes from a real child process that was refused after its WAL was deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_state import SessionDB
from hermes_state.errors import HermesStateError
from hermes_state.operator.recover import (
    CANONICAL_TABLES,
    RecoverRefused,
    SourceChangedError,
    copy_source,
    recover,
)

REPO = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- helpers

def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """SQLite varint at ``pos``: ``(value, length)``."""
    value = 0
    for i in range(8):
        byte = data[pos + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, i + 1
    return (value << 8) | data[pos + 8], 9


def leaf_rowids(page: bytes) -> list[int]:
    """Rowids stored on one table b-tree leaf page (not page 1)."""
    assert page[0] == 0x0D, f"not a table leaf page (type {page[0]})"
    cells = int.from_bytes(page[3:5], "big")
    out = []
    for i in range(cells):
        ptr = int.from_bytes(page[8 + 2 * i:10 + 2 * i], "big")
        _payload, n = _varint(page, ptr)
        rowid, _ = _varint(page, ptr + n)
        out.append(rowid)
    return out


def leaf_pages(path: Path, table: str) -> tuple[int, list[int]]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        try:
            pages = [r[0] for r in conn.execute(
                "SELECT pageno FROM dbstat WHERE name=? AND pagetype='leaf' ORDER BY pageno",
                (table,))]
        except sqlite3.OperationalError:
            pytest.skip("this SQLite has no dbstat table")
    finally:
        conn.close()
    return page_size, pages


def damage_leaf(path: Path, table: str, which: int | None = None) -> list[int]:
    """Overwrite one leaf page of ``table`` in a QUIET store; return the rowids it held."""
    for suffix in ("-wal", "-shm"):
        side = Path(f"{path}{suffix}")
        if side.exists():  # left by a read-only reader; must hold no frames
            assert suffix == "-shm" or side.stat().st_size == 0
    page_size, pages = leaf_pages(path, table)
    assert len(pages) >= 3, f"{table} has too few leaf pages to damage one in the middle"
    page = pages[len(pages) // 2 if which is None else which]
    with open(path, "r+b") as fh:
        fh.seek((page - 1) * page_size)
        rowids = leaf_rowids(fh.read(page_size))
        fh.seek((page - 1) * page_size)
        fh.write(b"\xde\xad\xbe\xef" * (page_size // 4))
    assert rowids
    return rowids


def file_hashes(path: Path) -> dict:
    out = {}
    for suffix in ("", "-wal", "-shm"):
        p = Path(f"{path}{suffix}")
        out[suffix] = hashlib.sha256(p.read_bytes()).hexdigest() if p.exists() else None
    return out


def listing(directory: Path) -> list[tuple[str, int]]:
    return sorted((p.name, p.stat().st_mtime_ns) for p in directory.iterdir())


def make_messages_store(path: Path, n: int = 600, sessions: int = 3) -> list[tuple]:
    """A quiet store with ``n`` messages over ``sessions`` sessions; returns every message row."""
    with SessionDB(path) as db:
        for s in range(sessions):
            db.create_session(f"s{s}", source="cli")
        for i in range(n):
            db.append_message(f"s{i % sessions}", "user" if i % 2 else "assistant",
                              f"message number {i} word{i}x " + "lorem ipsum " * 6)
        db.set_meta("custom_key", "custom value")
    return all_messages(path)


def all_messages(path: Path) -> list[tuple]:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT id, session_id, role, content, timestamp FROM messages "
                            "ORDER BY id").fetchall()
    finally:
        conn.close()


def open_ro(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True)


@pytest.fixture
def damaged(tmp_path):
    """A store whose messages table lost one leaf page: ``(path, rows_before, lost_rowids)``."""
    path = tmp_path / "src" / "state.db"
    rows = make_messages_store(path)
    lost = damage_leaf(path, "messages")
    return path, rows, lost


# --------------------------------------------------------------------------- healthy stores

def test_inspect_healthy_store_report_shape(tmp_path):
    path = tmp_path / "state.db"
    rows = make_messages_store(path, n=40)
    hashes = file_hashes(path)
    rep = recover(path, inspect_only=True)
    assert rep["operation"] == "inspect"
    assert rep["source"] == str(path)
    assert rep["journal_mode"] == "wal"
    assert rep["schema_version"] == 23
    assert set(rep["tables"]) == set(CANONICAL_TABLES)
    for name, table in rep["tables"].items():
        assert {"available", "columns", "rows", "error"} <= set(table), name
        assert table["available"] is True and table["error"] is None
        assert table["unreadable_ranges"] == [] and table["unreadable_rows"] == 0
    assert rep["tables"]["messages"]["rows"] == len(rows) == 40
    assert rep["tables"]["sessions"]["rows"] == 3
    assert rep["tables"]["state_meta"]["rows"] == 2
    assert "content" in rep["tables"]["messages"]["columns"]
    assert rep["integrity"] == ["ok"]
    assert rep["errors"] == []
    assert rep["recoverable"] is True and rep["source_unchanged"] is True
    assert rep["failed"] is False and rep["output"] is None
    assert "--output" in rep["next_step"]
    json.dumps(rep)  # JSON-able
    assert file_hashes(path) == hashes


def test_output_of_a_healthy_store_copies_every_row_and_rebuilds_fts(tmp_path):
    path = tmp_path / "state.db"
    rows = make_messages_store(path, n=120)
    with SessionDB(path) as db:
        db.create_session("child", source="cli", parent_session_id="s0")
        db.append_message("child", "tool", "tool output zebraword", tool_name="grep")
        db.connection.execute_write(lambda c: c.execute(
            "INSERT INTO state_meta(key, value) VALUES ('fts_rebuild_high_water', '5')"))
    rows = all_messages(path)
    out = tmp_path / "new" / "state.db"
    report = tmp_path / "report.json"
    rep = recover(path, output=out, report=report)
    assert rep["operation"] == "recover"
    assert rep["failed"] is False and rep["output"]["written"] is True
    assert json.loads(report.read_text()) == json.loads(json.dumps(rep, default=str))
    assert out.exists()
    assert not Path(f"{out}-wal").exists()
    assert [p.name for p in out.parent.iterdir()] == ["state.db"]  # no partial left behind
    assert rep["output"]["integrity_check"] == ["ok"]
    assert rep["output"]["foreign_key_check"] == []
    assert rep["output"]["counts"] == rep["output"]["expected_counts"]
    assert set(rep["output"]["skipped_state_meta"]) == {"db_file_generation",
                                                        "fts_rebuild_high_water"}
    assert all_messages(out) == rows
    with SessionDB(out) as db:
        assert db.get_meta("custom_key") == "custom value"
        assert db.get_meta("db_file_generation") != sqlite3.connect(path).execute(
            "SELECT value FROM state_meta WHERE key='db_file_generation'").fetchone()[0]
        assert db.get_session("child")["parent_session_id"] == "s0"
        conn = db.connection.conn
        hits = conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH 'word77x'"
                            ).fetchall()
        assert [h[0] for h in hits] == [r[0] for r in rows if "word77x " in r[3]]
        assert conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH "
                            "'zebraword'").fetchone()[0] == 1
        assert conn.execute("SELECT max(version) FROM schema_version").fetchone()[0] == 23
        new_id = db.append_message("s0", "user", "after recovery")
        assert new_id > rows[-1][0]


def test_refusals_before_any_work(tmp_path):
    path = tmp_path / "state.db"
    make_messages_store(path, n=5)
    with pytest.raises(RecoverRefused, match="no file"):
        recover(tmp_path / "missing.db")
    existing = tmp_path / "exists.db"
    existing.write_bytes(b"keep me")
    with pytest.raises(RecoverRefused, match="already exists"):
        recover(path, output=existing)
    assert existing.read_bytes() == b"keep me"
    with pytest.raises(RecoverRefused, match="exclude each other"):
        recover(path, output=tmp_path / "new.db", inspect_only=True)
    with pytest.raises(RecoverRefused):
        recover(path, output=path)
    with pytest.raises(RecoverRefused, match="report"):
        recover(path, report=path)
    assert isinstance(RecoverRefused("x"), HermesStateError)
    assert not (tmp_path / "new.db").exists()


# --------------------------------------------------------------------------- damaged pages

def test_inspect_finds_the_damaged_page_and_changes_no_file(damaged):
    path, rows, lost = damaged
    hashes = file_hashes(path)
    # COUNT(*) is answered from an index and does not notice the damage.
    conn = open_ro(path)
    try:
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == len(rows)
    finally:
        conn.close()
    names = listing(path.parent)
    rep = recover(path, inspect_only=True)
    msgs = rep["tables"]["messages"]
    assert msgs["rows"] == len(rows) - len(lost)
    assert msgs["unreadable_rows"] == len(lost)
    assert msgs["index_rows"] == len(rows)
    assert msgs["error"] and "malformed" in msgs["error"]
    covered = {i for lo, hi in msgs["unreadable_ranges"] for i in range(lo, hi + 1)}
    assert set(lost) <= covered
    assert not covered & ({r[0] for r in rows} - set(lost))  # no readable row is in a range
    assert rep["tables"]["sessions"]["unreadable_ranges"] == []
    assert rep["recoverable"] is True
    assert rep["integrity"] != ["ok"]
    assert any("messages" in e and "unreadable" in e for e in rep["errors"])
    assert "--allow-partial" in rep["next_step"]
    assert rep["source_unchanged"] is True
    assert file_hashes(path) == hashes
    assert listing(path.parent) == names


def test_output_without_allow_partial_fails_cleanly(damaged, tmp_path):
    path, _rows, lost = damaged
    hashes = file_hashes(path)
    out = tmp_path / "out" / "state.db"
    report = tmp_path / "r.json"
    rep = recover(path, output=out, report=report)
    assert rep["failed"] is True
    assert "--allow-partial" in rep["failure"] and str(len(lost)) in rep["failure"]
    assert rep["output"]["written"] is False
    assert not out.exists() and not (out.parent.exists() and list(out.parent.iterdir()))
    assert json.loads(report.read_text())["failed"] is True
    assert file_hashes(path) == hashes


def test_allow_partial_recovers_every_row_outside_the_damaged_page(damaged, tmp_path):
    path, rows, lost = damaged
    hashes = file_hashes(path)
    out = tmp_path / "out.db"
    rep = recover(path, output=out, allow_partial=True)
    assert rep["failed"] is False and rep["output"]["written"] is True
    expected = [r for r in rows if r[0] not in set(lost)]
    assert all_messages(out) == expected
    assert rep["output"]["counts"]["messages"] == len(expected)
    assert rep["output"]["integrity_check"] == ["ok"]
    assert rep["output"]["foreign_key_check"] == []
    assert rep["output"]["placeholder_sessions"] == []
    conn = open_ro(out)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        # The ids of the lost rows are never handed out again.
        assert conn.execute("SELECT seq FROM sqlite_sequence WHERE name='messages'"
                            ).fetchone()[0] >= rows[-1][0]
        survivor = expected[len(expected) // 2]
        word = re.search(r"word\d+x", survivor[3]).group(0)
        assert conn.execute("SELECT rowid FROM messages_fts WHERE messages_fts MATCH ?",
                            (word,)).fetchall() == [(survivor[0],)]
    finally:
        conn.close()
    assert file_hashes(path) == hashes


def test_unreadable_session_rows_become_placeholders(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        for s in range(400):
            db.create_session(f"sess-{s:04d}", source="telegram", model="m" * 30,
                              display_name=f"chat {s}")
            db.append_message(f"sess-{s:04d}", "user", f"hello {s}")
            db.append_message(f"sess-{s:04d}", "assistant", f"reply {s}")
    conn = open_ro(path)
    try:
        by_rowid = dict(conn.execute("SELECT rowid, id FROM sessions"))
    finally:
        conn.close()
    rows = all_messages(path)
    lost_rowids = damage_leaf(path, "sessions")
    lost_ids = sorted(by_rowid[r] for r in lost_rowids)

    rep = recover(path, inspect_only=True)
    assert rep["tables"]["sessions"]["unreadable_rows"] == len(lost_ids)
    assert rep["tables"]["messages"]["unreadable_rows"] == 0
    assert rep["recoverable"] is True

    out = tmp_path / "out.db"
    rep = recover(path, output=out, allow_partial=True)
    assert rep["failed"] is False, rep["failure"]
    assert rep["output"]["placeholder_sessions"] == lost_ids
    assert all_messages(out) == rows  # every message kept
    conn = open_ro(out)
    try:
        placeholders = conn.execute(
            "SELECT id, source, message_count FROM sessions WHERE source='recovered' ORDER BY id"
        ).fetchall()
        assert placeholders == [(sid, "recovered", 2) for sid in lost_ids]
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == 400
        assert conn.execute("SELECT display_name FROM sessions WHERE id='sess-0000'"
                            ).fetchone()[0] in ("chat 0", None)
        assert conn.execute("PRAGMA foreign_key_check").fetchall() == []
    finally:
        conn.close()


def test_zero_filled_file_is_not_recoverable(tmp_path):
    path = tmp_path / "state.db"
    path.write_bytes(b"\x00" * 65536)
    rep = recover(path, inspect_only=True)
    assert rep["recoverable"] is False
    assert rep["errors"]
    assert all(not t["available"] for t in rep["tables"].values())
    assert "snapshot" in rep["next_step"]
    out = tmp_path / "out.db"
    rep = recover(path, output=out, allow_partial=True)
    assert rep["failed"] is True and rep["recoverable"] is False
    assert not out.exists()
    assert path.read_bytes() == b"\x00" * 65536


def test_cli_exit_status_follows_recoverable(tmp_path, damaged):
    """``sessions recover --inspect-only`` exits 0 iff recoverable (SPEC §14)."""
    path, _rows, _lost = damaged
    zero = tmp_path / "zero" / "state.db"
    zero.parent.mkdir()
    zero.write_bytes(b"\x00" * 8192)
    env = dict(os.environ, PYTHONPATH=str(REPO))
    for source, code in ((path, 0), (zero, 1)):
        proc = subprocess.run([sys.executable, "-m", "hermes_state", "sessions", "recover",
                               "--source", str(source), "--inspect-only"],
                              capture_output=True, text=True, env=env, cwd=str(REPO), timeout=120)
        assert proc.returncode == code, proc.stderr
        assert json.loads(proc.stdout)["recoverable"] is (code == 0)


# --------------------------------------------------------------------------- retired-WAL capture

def test_recover_a_retired_wal_capture_of_a_refused_writer(tmp_path, spawn):
    path = tmp_path / "home" / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    ids = child.ok("append", sid="s", n=8, prefix="committed")["ids"]
    os.unlink(f"{path}-wal")
    os.unlink(f"{path}-shm")
    refused = child.call("append", sid="s", n=1, prefix="refused")
    assert refused["error"] == "DeletedWalGenerationError"
    capture = Path(child.ok("capture_dir")["capture_dir"])
    assert (capture / "state.db-wal").stat().st_size > 0
    cap_hashes = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in capture.iterdir()}

    rep = recover(capture, inspect_only=True)  # the directory form
    assert rep["source"] == str(capture / "state.db")
    assert rep["recoverable"] is True
    assert rep["tables"]["messages"]["rows"] == 8
    assert rep["capture"]["trigger"] == "halt" and rep["capture"]["pid"] == child.pid

    out = tmp_path / "salvaged.db"
    rep = recover(capture / "state.db", output=out)
    assert rep["failed"] is False, rep["failure"]
    with SessionDB(out) as db:
        got = db.get_messages("s")
    assert [(m["id"], m["content"]) for m in got] == [(i, f"committed-{n}")
                                                      for n, i in enumerate(ids)]
    assert {p.name: hashlib.sha256(p.read_bytes()).hexdigest()
            for p in capture.iterdir()} == cap_hashes


# --------------------------------------------------------------------------- source changes

def test_copy_source_refuses_when_a_real_writer_changes_the_source(tmp_path, spawn):
    path = tmp_path / "home" / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=3)
    work = tmp_path / "work"
    work.mkdir()
    copied = copy_source(path, work)
    assert copied["state.db"]["bytes"] == path.stat().st_size
    assert (work / "state.db-wal").read_bytes() == Path(f"{path}-wal").read_bytes()
    assert copied["state.db-journal"] is None

    work2 = tmp_path / "work2"
    work2.mkdir()
    with pytest.raises(SourceChangedError) as info:
        copy_source(path, work2, after_copy_hook=lambda: child.ok("append", sid="s", n=1))
    assert "the source changed while it was copied; stop every process using it" in str(
        info.value)
    assert "state.db-wal" in info.value.operator_detail


def test_recover_refuses_a_source_that_changes_during_the_copy(tmp_path, spawn):
    path = tmp_path / "home" / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=3)
    out = tmp_path / "out.db"
    report = tmp_path / "report.json"
    with pytest.raises(SourceChangedError) as info:
        recover(path, output=out, report=report,
                _after_copy_hook=lambda: child.ok("append", sid="s", n=2, prefix="during"))
    err = info.value
    assert isinstance(err, HermesStateError)
    assert "stop every process using it" in str(err)
    assert err.report["source_unchanged"] is False and err.report["failed"] is True
    assert any(f"PID {child.pid}" in line for line in err.report["holders"])
    assert not out.exists()
    assert json.loads(report.read_text())["failure"].startswith("the source changed")
    # The writer itself was never disturbed.
    assert len(child.ok("append", sid="s", n=1)["ids"]) == 1


# --------------------------------------------------------------------------- older schemas

@pytest.mark.parametrize("version", [1, 3, 12, 22])
def test_recover_an_older_schema_store_into_the_current_schema(tmp_path, version):
    from hermes_state.testing import build_fixture

    path = tmp_path / f"v{version}" / "state.db"
    manifest = build_fixture(path, version, write_sessions_json=False)
    out = tmp_path / f"new-v{version}.db"
    rep = recover(path, output=out)
    assert rep["failed"] is False, rep["failure"]
    assert rep["schema_version"] == version
    conn = open_ro(out)
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(23,)]
        assert conn.execute("SELECT count(*) FROM sessions").fetchone()[0] == \
            manifest["counts"]["sessions"]
        got = dict(conn.execute("SELECT id, content FROM messages"))
        assert got == {int(k): v for k, v in manifest["messages"].items()}
        if version < 4:
            titles = dict(conn.execute("SELECT id, title FROM sessions"))
            assert titles == manifest["expected_titles"]
    finally:
        conn.close()
    with SessionDB(out) as db:  # the output opens as a settled current store
        assert db.connection.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


# --------------------------------------------------------------------------- where the damage is

@pytest.mark.parametrize("which", [0, -1], ids=["first-leaf", "last-leaf"])
def test_damage_at_either_end_of_the_table(tmp_path, which):
    """min(rowid)/max(rowid) fail there: the bounds come from an index (SPEC §14)."""
    path = tmp_path / "state.db"
    rows = make_messages_store(path, n=400)
    lost = set(damage_leaf(path, "messages", which=which))
    rep = recover(path, inspect_only=True)
    msgs = rep["tables"]["messages"]
    assert msgs["rows"] == len(rows) - len(lost)
    assert msgs["unreadable_rows"] == len(lost)
    out = tmp_path / "out.db"
    rep = recover(path, output=out, allow_partial=True)
    assert rep["failed"] is False, rep["failure"]
    assert all_messages(out) == [r for r in rows if r[0] not in lost]


def _damage_an_overflow_page(path) -> None:
    """Overwrite the second overflow page of ``messages`` (a long value's chain) with junk."""
    page_size = leaf_pages(path, "messages")[0]
    conn = open_ro(path)
    try:
        overflow = [r[0] for r in conn.execute(
            "SELECT pageno FROM dbstat WHERE name='messages' AND pagetype='overflow'")]
    finally:
        conn.close()
    assert len(overflow) >= 3
    with open(path, "r+b") as fh:
        fh.seek((overflow[1] - 1) * page_size)
        fh.write(b"\xde\xad\xbe\xef" * (page_size // 4))


def test_damaged_overflow_page_loses_only_its_row(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        ids = [db.append_message("s", "user", f"short {i}") for i in range(100)]
        big = db.append_message("s", "tool", "BIG" + "y" * 30000, tool_name="cat")
        ids += [db.append_message("s", "user", f"short {i}") for i in range(100, 200)]
    _damage_an_overflow_page(path)
    rep = recover(path, inspect_only=True)
    msgs = rep["tables"]["messages"]
    assert msgs["unreadable_ranges"] == [[big, big]]
    assert msgs["unreadable_rows"] == 1 and msgs["rows"] == 200
    out = tmp_path / "out.db"
    rep = recover(path, output=out, allow_partial=True)
    assert [r[0] for r in all_messages(out)] == ids


def test_damaged_overflow_page_of_a_blob_value_is_unreadable(tmp_path):
    """Inspection reads every byte of a BLOB too, even in the record's last column (where no
    later column makes SQLite walk the overflow chain): ``length(blob)`` alone would read only
    the record header and miss the damaged overflow page."""
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        for i in range(50):
            db.append_message("s", "user", f"short {i}")
        big = db.append_message("s", "tool", "a small text", tool_name="cat")
        for i in range(50, 100):
            db.append_message("s", "user", f"short {i}")
    conn = sqlite3.connect(path)
    try:
        last = [r[1] for r in conn.execute("PRAGMA table_info(messages)")][-1]
        conn.execute(f'UPDATE messages SET "{last}" = ? WHERE id = ?', (b"\x01" * 30000, big))
        conn.commit()
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    _damage_an_overflow_page(path)
    rep = recover(path, inspect_only=True)
    msgs = rep["tables"]["messages"]
    assert msgs["unreadable_ranges"] == [[big, big]]
    assert msgs["unreadable_rows"] == 1 and msgs["rows"] == 100


def test_root_page_of_messages_damaged_is_not_recoverable(tmp_path):
    path = tmp_path / "state.db"
    make_messages_store(path, n=300)
    conn = open_ro(path)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name='messages'"
                            ).fetchone()[0]
        assert conn.execute("SELECT pagetype FROM dbstat WHERE pageno=?", (root,)
                            ).fetchone()[0] == "internal"
    finally:
        conn.close()
    with open(path, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(b"\xde\xad\xbe\xef" * (page_size // 4))
    rep = recover(path, inspect_only=True)
    assert rep["tables"]["messages"]["rows"] == 0
    assert rep["tables"]["messages"]["unreadable_rows"] == 300
    assert rep["tables"]["sessions"]["rows"] == 3
    assert rep["recoverable"] is False
    out = tmp_path / "out.db"
    rep = recover(path, output=out, allow_partial=True)
    assert rep["failed"] is True and not out.exists()


def test_unreadable_tail_without_any_index_is_reported_open_ended(tmp_path):
    """A foreign/minimal store: no index and no sqlite_sequence record the highest rowid."""
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE sessions (id TEXT, source TEXT NOT NULL, started_at REAL NOT NULL);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, "
        "role TEXT NOT NULL, content TEXT, timestamp REAL NOT NULL);")
    conn.execute("INSERT INTO sessions VALUES ('s', 'cli', 1.0)")
    conn.executemany("INSERT INTO messages VALUES (?, 's', 'user', ?, ?)",
                     [(i, f"row {i} " + "z" * 80, float(i)) for i in range(1, 301)])
    conn.commit()
    conn.close()
    lost = set(damage_leaf(path, "messages", which=-1))
    rep = recover(path, inspect_only=True)
    msgs = rep["tables"]["messages"]
    assert msgs["rows"] == 300 - len(lost)
    assert msgs["unreadable_ranges"][-1][1] is None
    assert msgs["unreadable_rows"] is None and msgs["rows_basis"] is None
    assert any("end of the table is unreadable" in w for w in rep["warnings"])
    assert any("is absent from the source" in w for w in rep["warnings"])
    out = tmp_path / "out.db"
    rep = recover(path, output=out, allow_partial=True)
    assert rep["failed"] is False, rep["failure"]
    assert [r[0] for r in all_messages(out)] == [i for i in range(1, 301) if i not in lost]


def test_sparse_rowids_are_read_without_walking_the_gaps(tmp_path):
    path = tmp_path / "state.db"
    conn = sqlite3.connect(path)
    conn.executescript(
        "CREATE TABLE sessions (id TEXT PRIMARY KEY, source TEXT NOT NULL, started_at REAL);"
        "CREATE TABLE messages (id INTEGER PRIMARY KEY, session_id TEXT NOT NULL, "
        "role TEXT NOT NULL, content TEXT, timestamp REAL NOT NULL);")
    conn.execute("INSERT INTO sessions VALUES ('s', 'cli', 1.0)")
    ids = [1, 2, 3, 10**6, 10**12, 2**62]
    conn.executemany("INSERT INTO messages VALUES (?, 's', 'user', 'x', 1.0)",
                     [(i,) for i in ids])
    conn.commit()
    conn.close()
    rep = recover(path, inspect_only=True)
    assert rep["tables"]["messages"]["rows"] == len(ids)
    assert rep["recoverable"] is True
    out = tmp_path / "out.db"
    assert recover(path, output=out)["failed"] is False
    assert [r[0] for r in all_messages(out)] == ids
