"""Refusals name the holder as the caller reads it: "this process" when the caller holds the
retired files or the write lock itself, "another process" otherwise (issue 16 item 4).

Real processes and real deletions: a child whose own WAL is deleted under it, this test process
holding a retired generation, a second connection of this process keeping the write lock.
"""

from __future__ import annotations

import os
import sqlite3

import pytest

from hermes_state import DeletedWalGenerationError, SessionDB, WriteContentionError
from hermes_state.errors import RETIRED_WAL_USER_MESSAGE


def _delete_sidecars(path) -> None:
    os.unlink(f"{path}-wal")
    os.unlink(f"{path}-shm")


def test_the_writer_whose_own_wal_was_deleted_is_told_this_process_holds_it(tmp_path, spawn):
    path = tmp_path / "home" / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=3)
    _delete_sidecars(path)
    refused = child.call("append", sid="s", n=1)
    assert refused["error"] == "DeletedWalGenerationError"
    msg = refused["msg"]
    assert "this process still holds a deleted state.db-wal or state.db-shm" in msg, msg
    assert "another process" not in msg, msg
    assert "this one included" in msg and "Nothing is lost" in msg
    # Another process opening now is told, verbatim (SPEC §10.1), that another process holds it.
    with pytest.raises(DeletedWalGenerationError) as info:
        SessionDB(path)
    assert info.value.user_message == RETIRED_WAL_USER_MESSAGE
    assert f"PID {child.pid}" in str(info.value) and "(this process)" not in str(info.value)


def test_a_second_handle_of_the_holding_process_is_told_this_process(tmp_path):
    path = tmp_path / "state.db"
    db = SessionDB(path)
    try:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "before")
        _delete_sidecars(path)
        with pytest.raises(DeletedWalGenerationError) as own:
            db.append_message("s", "user", "after")
        assert own.value.user_message.startswith(
            "session storage stopped writing because this process still holds a deleted "
            "state.db-wal or state.db-shm")
        with pytest.raises(DeletedWalGenerationError) as second:
            SessionDB(path)
        err = second.value
        assert "because this process still holds" in err.user_message
        assert f"PID {os.getpid()}" in err.operator_detail
        assert "(this process)" in err.operator_detail, err.operator_detail
    finally:
        db.close()


def test_write_lock_kept_by_another_connection_of_this_process_is_named_so(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        raw = sqlite3.connect(path, timeout=0, isolation_level=None)
        try:
            raw.execute("BEGIN IMMEDIATE")
            with pytest.raises(WriteContentionError) as info:
                db.append_message("s", "user", "blocked")
        finally:
            raw.execute("ROLLBACK")
            raw.close()
    msg = info.value.user_message
    assert "because this process (another connection it has open) kept the write lock" in msg, msg
