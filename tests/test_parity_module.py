"""Module-level names of upstream's store (UPSTREAM_API §1, §2.1): apply_wal_with_fallback, the
open-failure helpers, AsyncSessionDB, constants."""

from __future__ import annotations

import asyncio
import logging
import os
import sqlite3
import threading

import pytest

import hermes_state
from hermes_state import (
    AsyncSessionDB,
    SessionDB,
    apply_wal_with_fallback,
    format_session_db_unavailable,
    get_last_init_error,
    is_malformed_db_error,
)
from hermes_state.store import availability, wal_mode


def deny_wal(conn, deny_probe=False):
    """A real SQLite authorizer refusing ``PRAGMA journal_mode=WAL`` the way an NFS mount
    answers ("not authorized")."""
    def auth(action, arg1, arg2, dbname, source):
        if action == sqlite3.SQLITE_PRAGMA and arg1 == "journal_mode":
            if (arg2 or "").lower() == "wal" or (arg2 is None and deny_probe):
                return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK
    conn.set_authorizer(auth)


def test_wal_is_set_and_probed(tmp_path):
    conn = sqlite3.connect(tmp_path / "a.db")
    assert apply_wal_with_fallback(conn) == "wal"
    statements = []
    conn.set_trace_callback(statements.append)
    assert apply_wal_with_fallback(conn) == "wal"
    assert statements == ["PRAGMA journal_mode"]  # already WAL: no set-pragma
    conn.close()


def test_refusal_falls_back_to_delete_and_warns_once(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(wal_mode, "_warned", set())
    caplog.set_level(logging.WARNING, logger="hermes_state")
    for name in ("x.db", "y.db"):
        conn = sqlite3.connect(tmp_path / name)
        deny_wal(conn)
        assert apply_wal_with_fallback(conn, db_label="nfs-store") == "delete"
        conn.set_authorizer(None)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        conn.close()
    assert len([r for r in caplog.records if "refused WAL" in r.getMessage()]) == 1


def test_refusal_on_a_wal_file_is_raised_never_downgraded(tmp_path):
    path = tmp_path / "w.db"
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE t(x)")
    conn.commit()
    conn.close()
    conn = sqlite3.connect(path)
    deny_wal(conn, deny_probe=True)
    with pytest.raises(sqlite3.DatabaseError, match="not authorized"):
        apply_wal_with_fallback(conn)
    conn.set_authorizer(None)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    conn.close()


def test_other_errors_propagate(tmp_path):
    conn = sqlite3.connect(tmp_path / "o.db")
    conn.close()
    with pytest.raises(sqlite3.ProgrammingError):
        apply_wal_with_fallback(conn)


def test_many_threads_connecting_at_once(tmp_path):
    path = tmp_path / "shared.db"
    errors = []

    def worker():
        for _ in range(5):
            try:
                conn = sqlite3.connect(path, timeout=30)
                apply_wal_with_fallback(conn)
                conn.execute("CREATE TABLE IF NOT EXISTS t(x)")
                conn.close()
            except Exception as exc:  # noqa: BLE001 - collected and asserted below
                errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    deleted = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")
               if os.path.exists(f"/proc/self/fd/{fd}")
               and os.readlink(f"/proc/self/fd/{fd}").endswith(" (deleted)")]
    assert not [d for d in deleted if "shared.db" in d]


# ---------------------------------------------------------------------------- open failures
def test_init_error_is_recorded_and_formatted(tmp_path, monkeypatch):
    monkeypatch.setattr(availability, "_last_error", None)
    assert format_session_db_unavailable() == "Session database not available."
    with pytest.raises(sqlite3.OperationalError):
        SessionDB(tmp_path / "missing.db", read_only=True)
    cause = get_last_init_error()
    assert cause.startswith("OperationalError: ") and "missing.db" in cause
    text = format_session_db_unavailable("Cannot resume")
    assert text.startswith("Cannot resume: OperationalError: ") and text.endswith(".")
    with SessionDB(tmp_path / "ok.db"):
        pass
    assert get_last_init_error() == cause  # a success never clears it


def test_network_filesystem_hint(monkeypatch):
    monkeypatch.setattr(availability, "_last_error", "OperationalError: locking protocol")
    text = format_session_db_unavailable()
    assert text.startswith("Session database not available: OperationalError: locking "
                           "protocol.")
    assert "NFS" in text and "local disk" in text


@pytest.mark.parametrize("exc,expected", [
    (sqlite3.DatabaseError("malformed database schema (x)"), True),
    (sqlite3.DatabaseError("database disk image is malformed"), True),
    (sqlite3.OperationalError("database is locked"), False),
    (ValueError("malformed database schema"), False),
])
def test_is_malformed_db_error(exc, expected):
    assert is_malformed_db_error(exc) is expected


# ---------------------------------------------------------------------------- async
def test_async_session_db(tmp_path):
    db = SessionDB(tmp_path / "state.db")
    adb = AsyncSessionDB(db)
    assert adb.db_path == db.db_path  # non-callables pass through

    async def main():
        async with adb:
            await adb.create_session("s", "cli")
            await asyncio.gather(*(adb.append_message("s", "user", f"m{i}") for i in range(10)))
            return await adb.get_messages("s")

    rows = asyncio.run(main())
    assert sorted(r["content"] for r in rows) == sorted(f"m{i}" for i in range(10))
    with pytest.raises(sqlite3.ProgrammingError):
        db.get_messages("s")  # closed by the async context


# ---------------------------------------------------------------------------- constants
def test_constants(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "home"))
    assert hermes_state.DEFAULT_DB_PATH == tmp_path / "home" / "state.db"
    assert hermes_state.MAX_FTS5_QUERY_CHARS == 2048
    assert SessionDB.MAX_TITLE_LENGTH == 100
    conn = sqlite3.connect(":memory:")
    for stmt in hermes_state.SCHEMA_SQL.split(";"):
        if stmt.strip():
            conn.execute(stmt)
    assert conn.execute("SELECT COUNT(*) FROM sessions").fetchone() == (0,)
    db = SessionDB(tmp_path / "x.db", read_only=False)
    assert (db.db_path, db.read_only) == (tmp_path / "x.db", False)
    db.close()
