"""A newer release's rollback-journal store stays so while another process locks it (issue 23.1).

Releases from schema 25 keep a store in journal_mode=DELETE on an SQLite with the WAL-reset race
(UPSTREAM_API.md §4.5). A second, real process takes the store's lock (``BEGIN EXCLUSIVE``, what
a committing writer of a rollback-journal store holds) exactly when our open has probed the
journal mode, or right before it reads what it has to do: the open must retry, never read the
locked version as "older" (and switch the store to WAL), never let a raw ``database is
locked`` escape, and name the holder when the lock outlasts its retries.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from chaos.matrix import real_stores as rs
from hermes_state import OpenContentionError, SessionDB, events
from hermes_state.processes.checkpoint_lock import wal_reset_exposure

FIXTURES = {s.name.split("/")[-1]: s for s in rs.fixture_stores()}
EXPOSED = wal_reset_exposure() is not None


class LockWhenReached:
    """Event listener: at the first hit of failpoint ``point`` a second process takes the
    store's lock; at the open's first ``retry`` event it releases it (unless ``release`` is
    False). Every step waits on the holder's own line, never on time."""

    def __init__(self, spawn, db_path: Path, point: str, release: bool = True):
        self.spawn, self.db_path, self.point, self.release = spawn, db_path, point, release
        self.holder = None
        self.retries: list[dict] = []
        self.released = False

    def __call__(self, ev: dict) -> None:
        if ev.get("event") == "failpoint" and ev.get("name") == self.point and not self.holder:
            self.holder = self.spawn("rollback_holder.py", str(self.db_path))
            assert self.holder.readline() == "LOCKED"
        elif ev.get("event") == "retry" and ev.get("op") == "open" and self.holder:
            self.retries.append(ev)
            if self.release and not self.released:
                self.released = True
                self.holder.send("release")
                assert self.holder.readline() == "RELEASED"


@pytest.fixture
def v31(tmp_path) -> Path:
    """A private copy of the bundled schema-31 store (journal_mode DELETE, as 0.22.2 wrote it)."""
    path = rs.copy_store(FIXTURES["v31"].path, tmp_path / "v31")
    assert _disk_mode(path) == "delete"
    return path


def _disk_mode(path: Path) -> str:
    conn = sqlite3.connect(str(path))
    try:
        return conn.execute("PRAGMA journal_mode").fetchone()[0]
    finally:
        conn.close()


@pytest.fixture
def lock_at(spawn, armed):
    made: list[LockWhenReached] = []

    def _make(db_path: Path, point: str, release: bool = True) -> LockWhenReached:
        armed(f"{point}=sleep(0)@1")  # emits the failpoint event once, acts on nothing
        listener = LockWhenReached(spawn, db_path, point, release)
        events.add_listener(listener)
        made.append(listener)
        return listener

    yield _make
    for listener in made:
        events.remove_listener(listener)


@pytest.mark.skipif(not EXPOSED, reason="this SQLite has the WAL-reset fix: a newer release's "
                    "store is switched to WAL as usual (SPEC §4)")
def test_a_lock_taken_after_the_probe_never_switches_a_newer_store_to_wal(v31, lock_at):
    lock = lock_at(v31, "open.journal_probed")
    db = SessionDB(v31)
    try:
        assert lock.retries, "the second process never held the lock during the open"
        assert db.connection.journal_mode == "delete"
        assert db.get_session("s_cli") is not None
    finally:
        db.close()
    assert _disk_mode(v31) == "delete"
    assert not Path(f"{v31}-wal").exists()


def test_a_lock_taken_before_the_shape_is_read_is_retried_not_raised(v31, lock_at):
    lock = lock_at(v31, "open.before_shape")
    db = SessionDB(v31)  # before issue 23: sqlite3.OperationalError: database is locked
    try:
        assert [r["stage"] for r in lock.retries][:1] == ["shape"]
        assert db.get_session("s_tg") is not None
        if EXPOSED:
            assert db.connection.journal_mode == "delete"
    finally:
        db.close()


def test_a_lock_that_outlasts_the_retries_is_named_with_its_holder(v31, lock_at):
    lock = lock_at(v31, "open.before_shape", release=False)
    with pytest.raises(OpenContentionError) as err:
        SessionDB(v31)
    assert len(lock.retries) == 14  # 15 attempts in all (SPEC §4)
    assert f"PID {lock.holder.pid}" in str(err.value)
    assert "could not open" in str(err.value) and "Nothing was changed" in str(err.value)
    lock.holder.send("release")
    assert lock.holder.readline() == "RELEASED"
    SessionDB(v31).close()
    if EXPOSED:
        assert _disk_mode(v31) == "delete"
