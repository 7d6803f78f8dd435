"""The time bound on the loss window at synchronous=NORMAL (SPEC §4; issue 24 item 1).

A commit at NORMAL writes the WAL without an fsync; the store's sync thread ``fdatasync``\\ s the
``-wal`` through SQLite's own descriptor at most ``SYNC_DELAY_S`` after the first commit not yet
synced, never opening or closing a store file, never for a retired generation, and a close that
did not checkpoint the whole WAL syncs it. The power-cut proofs are the FUSE scenarios
(``fs_power_cut_idle``, ``fs_power_cut_burst``).
"""

from __future__ import annotations

import os
import threading

import pytest

from hermes_state import DeletedWalGenerationError, SessionDB, events, failpoints
from hermes_state.store import wal_sync

HANG_GUARD_S = 60.0


@pytest.fixture
def synced(monkeypatch):
    """Every fdatasync of this process, as ``(fd, (st_dev, st_ino))``, and an event per sync."""
    calls: list[tuple[int, tuple]] = []
    real = os.fdatasync

    def recording(fd):
        st = os.fstat(fd)
        calls.append((fd, (st.st_dev, st.st_ino)))
        return real(fd)

    monkeypatch.setattr(os, "fdatasync", recording)
    monkeypatch.setenv(wal_sync.ENV_VAR, "0.05")
    done = threading.Event()
    seen: list[dict] = []

    def listen(e):
        if e["event"] == "wal_sync":
            seen.append(e)
            done.set()

    events.add_listener(listen)
    yield calls, seen, done
    events.remove_listener(listen)


def test_a_commit_at_normal_is_synced_soon_through_sqlites_own_wal_descriptor(tmp_path, synced,
                                                                              monkeypatch):
    calls, seen, done = synced
    monkeypatch.setenv(failpoints.ENV_VAR, "wal_sync.before=off")  # 'off' counts the hits
    failpoints.reload()
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="cli")
        done.clear()
        calls.clear()
        before = sorted(os.listdir("/proc/self/fd"))
        db.append_message("s", "user", "made durable within the bound")
        assert done.wait(HANG_GUARD_S)  # before the change: never (no sync without a checkpoint)
        wal = tuple(db.connection.generation.wal)
        assert [ident for _, ident in calls] == [wal]
        assert calls[0][0] in [int(n) for n in before]  # a descriptor SQLite already had
        assert seen[-1]["trigger"] == "idle" and "error" not in seen[-1]
        assert failpoints.hits("wal_sync.before") >= 1
    monkeypatch.delenv(failpoints.ENV_VAR)
    failpoints.reload()


def test_full_and_read_only_handles_have_no_sync_thread_work(tmp_path, synced):
    calls, seen, done = synced
    path = tmp_path / "state.db"
    with SessionDB(path, synchronous="FULL") as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "fsynced by SQLite at commit")
        assert db.connection._sync_delay is None
    with SessionDB(path, read_only=True) as ro:
        assert ro.connection._sync_delay is None


def test_switched_off_by_the_environment(tmp_path, synced, monkeypatch):
    monkeypatch.setenv(wal_sync.ENV_VAR, "off")
    with SessionDB(tmp_path / "state.db") as db:
        assert db.connection._sync_delay is None


def test_a_retired_generation_is_never_synced(tmp_path, synced):
    calls, seen, done = synced
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "a")
        assert done.wait(HANG_GUARD_S)
        calls.clear()
        db.connection._sync_pending = True  # a commit not yet synced, then the WAL deleted
        os.unlink(f"{path}-wal")
        assert db.connection.sync_wal() is False and calls == []
        with pytest.raises(DeletedWalGenerationError):
            db.append_message("s", "user", "refused")


def test_a_close_whose_checkpoint_was_skipped_syncs_the_wal(tmp_path, synced, monkeypatch):
    calls, seen, done = synced
    monkeypatch.setenv(wal_sync.ENV_VAR, "3600")  # the thread never comes in time
    path = tmp_path / "state.db"
    other = SessionDB(path)  # keeps a reader so the close checkpoint cannot copy everything
    other.create_session("s", source="cli")
    db = SessionDB(path)
    other.connection.conn.execute("BEGIN")
    other.connection.conn.execute("SELECT count(*) FROM messages").fetchone()
    db.append_message("s", "user", "written just before close")
    seen.clear()
    db.close()
    assert [e["trigger"] for e in seen] == ["close"]
    other.connection.conn.execute("ROLLBACK")
    other.close()
