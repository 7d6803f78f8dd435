"""Hostile test of the shared directory stamp (issue 24 item 4): the generation check reuses
the stamp the checkpoint lock took right after locking, BEFORE the ``write.after_begin``
failpoint, whose documented meaning is "BEGIN IMMEDIATE succeeded, generation not yet
checked". A ``-wal`` deleted while a writer stands at that failpoint (a chaos nemesis's
window) must be refused by the check that follows it, as it was on 787c6a3; else the write is
acknowledged into the deleted log and lost with the process (kill -9 before the next call)."""

from __future__ import annotations

import os

import pytest

from hermes_state import DeletedWalGenerationError, SessionDB, events
from hermes_state.processes import generation


@pytest.fixture
def settle_now(monkeypatch):
    """Trust a directory stamp at once (the settle margins are for real clocks)."""
    monkeypatch.setattr(generation, "DIR_SETTLE_NS", 0)
    monkeypatch.setattr(generation, "FINE_SETTLE_NS", 0, raising=False)


def test_a_wal_deleted_at_write_after_begin_is_refused_by_that_write(tmp_path, settle_now,
                                                                      armed):
    path = tmp_path / "home" / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "a full check keeps the directory's stamp")
        db.append_message("s", "user", "and again")
        assert db.connection._dir_stamp.kept is not None
        deleted: list[str] = []

        def nemesis(event: dict) -> None:  # runs in the writer, at the failpoint
            if event.get("event") == "failpoint" and event.get("name") == "write.after_begin" \
                    and not deleted:
                os.unlink(f"{path}-wal")
                deleted.append(f"{path}-wal")

        armed("write.after_begin=sleep(0)")
        events.add_listener(nemesis)
        try:
            with pytest.raises(DeletedWalGenerationError):
                db.append_message("s", "user", "must be refused: its log is gone")
        finally:
            events.remove_listener(nemesis)
        assert deleted
