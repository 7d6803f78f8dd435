"""Compression lease, failure cooldown and fallback streak (SPEC §2.3; UPSTREAM_API §2.10).
Expiry is driven by the stored times (set in the past), never by waiting."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest



@pytest.fixture
def db(db):
    db.create_session("s", "cli")
    return db


def expire(db, sid="s"):
    db._write(lambda c: c.execute("UPDATE compression_locks SET expires_at = ? "
                                  "WHERE session_id = ?", (time.time() - 1, sid)))


def test_acquire_refresh_release(db):
    assert db.try_acquire_compression_lock("s", "A") is True
    assert db.try_acquire_compression_lock("s", "A") is True  # already ours
    assert db.try_acquire_compression_lock("s", "B") is False
    assert db.get_compression_lock_holder("s") == "A"
    assert db.refresh_compression_lock("s", "B") is False
    assert db.refresh_compression_lock("s", "A", ttl_seconds=600) is True
    db.release_compression_lock("s", "B")  # never another holder's
    assert db.get_compression_lock_holder("s") == "A"
    db.release_compression_lock("s", "A")
    db.release_compression_lock("s", "A")  # idempotent
    assert db.get_compression_lock_holder("s") is None
    assert db.try_acquire_compression_lock("s", "B") is True


def test_expired_lease_is_reclaimable(db):
    db.try_acquire_compression_lock("s", "A")
    expire(db)
    assert db.get_compression_lock_holder("s") is None
    assert db.refresh_compression_lock("s", "A") is False
    assert db.try_acquire_compression_lock("s", "B") is True
    assert db.get_compression_lock_holder("s") == "B"


def test_guards(db):
    assert db.try_acquire_compression_lock("", "A") is False
    db.close()
    assert db.try_acquire_compression_lock("s", "A") is False  # an SQLite error → False


def test_lease_of_a_dead_local_process_is_reclaimed(db):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()  # a pid that provably no longer exists (reaped)
    assert db.try_acquire_compression_lock("s", f"gateway pid={proc.pid}") is True
    assert db.try_acquire_compression_lock("s", "B") is True
    import os
    assert db.try_acquire_compression_lock("s", f"live pid={os.getpid()}") is False
    db.release_compression_lock("s", "B")
    assert db.try_acquire_compression_lock("s", f"remote host=elsewhere pid={proc.pid}")
    assert db.try_acquire_compression_lock("s", "C") is False  # another host: never judged


def test_failure_cooldown(db):
    assert db.get_compression_failure_cooldown("s") is None
    until = time.time() + 3600
    db.record_compression_failure_cooldown("s", until, error="context too long")
    got = db.get_compression_failure_cooldown("s")
    assert got["cooldown_until"] == until and got["error"] == "context too long"
    assert 0 < got["remaining_seconds"] <= 3600
    db.record_compression_failure_cooldown("s", time.time() - 1, error="old")
    assert db.get_compression_failure_cooldown("s") is None
    db.record_compression_failure_cooldown("s", until)
    db.clear_compression_failure_cooldown("s")
    row = db.get_session("s")
    assert (row["compression_failure_cooldown_until"], row["compression_failure_error"]) == (
        None, None)
    assert db.get_compression_failure_cooldown("missing") is None


def test_fallback_streak(db):
    assert db.get_compression_fallback_streak("s") == 0
    db.set_compression_fallback_streak("s", 3)
    assert db.get_compression_fallback_streak("s") == 3
    db.set_compression_fallback_streak("s", -5)
    assert db.get_compression_fallback_streak("s") == 0
    assert db.get_compression_fallback_streak("missing") == 0
    db._write(lambda c: c.execute(
        "UPDATE sessions SET compression_fallback_streak = 'junk' WHERE id = 's'"))
    assert db.get_compression_fallback_streak("s") == 0
    db.close()
    assert db.get_compression_fallback_streak("s") == 0
