"""The one reader of SQLite's on-disk format (hermes_state/files/sqlite_format.py), checked
against what SQLite itself reports about real files it wrote."""

from __future__ import annotations

import os
import sqlite3

from hermes_state.files import sqlite_format as fmt


def _wal_store(path):
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("PRAGMA application_id=1234567")
    conn.execute("CREATE TABLE t(x)")
    for i in range(20):
        conn.execute("INSERT INTO t VALUES (?)", ("x" * 500,))
    return conn


def test_db_header_matches_the_pragmas(tmp_path):
    path = tmp_path / "s.db"
    conn = _wal_store(path)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    head = fmt.db_header(path.read_bytes()[:100])
    assert head["page_size"] == conn.execute("PRAGMA page_size").fetchone()[0]
    assert head["page_count"] == conn.execute("PRAGMA page_count").fetchone()[0]
    assert head["application_id"] == 1234567 == fmt.application_id(path.read_bytes()[:100])
    assert head["journal_mode"] == "wal"
    assert head["schema_cookie"] == conn.execute("PRAGMA schema_version").fetchone()[0]
    conn.close()


def test_wal_header_frames_and_wal_index_agree_with_sqlite(tmp_path):
    path = tmp_path / "s.db"
    conn = _wal_store(path)
    wal = open(f"{path}-wal", "rb").read()
    head = fmt.wal_header(wal)
    assert head["magic"] in fmt.WAL_MAGIC and head["page_size"] == 4096
    frames = list(fmt.wal_frames(wal))
    assert len(frames) == fmt.wal_frame_count(len(wal), 4096) > 0
    assert all(f["salt_ok"] for f in frames)
    assert sum(1 for f in frames if f["commit_size"]) == 22  # application_id, CREATE, 20 INSERTs
    idx = fmt.wal_index_header(open(f"{path}-shm", "rb").read(136))
    assert idx["mx_frame"] == len(frames) and idx["n_backfill"] == 0
    assert (idx["salt1"], idx["salt2"]) == (head["salt1"], head["salt2"]) and idx["copies_agree"]
    busy, log, done = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    idx = fmt.wal_index_header(open(f"{path}-shm", "rb").read(136))
    assert (busy, log, done) == (0, len(frames), idx["n_backfill"])
    conn.close()


def test_garbage_and_short_inputs_are_none_never_an_exception():
    for data in (b"", b"SQLite format 3\x00", os.urandom(200), b"\x00" * 200):
        assert fmt.db_header(data) is None or data.startswith(fmt.SQLITE_HEADER)
        assert fmt.wal_header(data) is None
        assert list(fmt.wal_frames(data)) == []
    assert fmt.wal_index_header(b"\x00" * 10) is None
    assert fmt.application_id(b"not sqlite") is None
    assert not fmt.is_sqlite(b"SQLite format 2\x00")
