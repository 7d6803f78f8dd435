"""Refusals name the holder as the caller reads it: "this process" when the caller holds the
retired files or the write lock itself, "another process" otherwise (issue 16 item 4).

Real processes and real deletions: a child whose own WAL is deleted under it, this test process
holding a retired generation, a second connection of this process keeping the write lock.
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from hermes_state import DeletedWalGenerationError, SessionDB, WriteContentionError
from hermes_state.errors import RETIRED_WAL_USER_MESSAGE


def _delete_sidecars(path) -> None:
    os.unlink(f"{path}-wal")
    os.unlink(f"{path}-shm")


def _replace_wal(path) -> None:
    """A copy renamed over the live WAL (a sync tool, a restore by hand): a new inode at the
    name; the writer still holds the old one."""
    copy = Path(f"{path}.wal-copy")
    copy.write_bytes(Path(f"{path}-wal").read_bytes())
    os.replace(copy, f"{path}-wal")


@pytest.mark.parametrize("lose", [_delete_sidecars, _replace_wal], ids=["deleted", "replaced"])
def test_the_writer_whose_own_wal_went_is_told_this_process_holds_it(tmp_path, spawn, lose):
    path = tmp_path / "home" / "state.db"
    child = spawn("store_child.py")
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    child.ok("append", sid="s", n=3)
    lose(path)
    refused = child.call("append", sid="s", n=1)
    assert refused["error"] == "DeletedWalGenerationError", refused
    msg = refused["msg"]
    assert "this process still holds a deleted state.db-wal or state.db-shm" in msg, msg
    assert (f"deleted or replaced on disk while this process (PID {child.pid}) was writing "
            "through its own connection") in msg, msg
    assert f"held by this process: PID {child.pid}, the connection that was writing" in msg
    assert "state.db-wal identity" in msg  # the operator layer names which file changed
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
        assert f"this process (PID {os.getpid()}) was writing through its own connection" in \
            own.value.user_message
        with pytest.raises(DeletedWalGenerationError) as second:
            SessionDB(path)
        err = second.value
        assert "because this process still holds" in err.user_message
        # The new handle did not lose anything: another connection of this process holds it.
        assert f"another connection this process (PID {os.getpid()}) has open still uses them" \
            in err.user_message, err.user_message
        assert "through its own connection" not in err.user_message
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
