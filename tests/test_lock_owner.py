"""The write-give-up error names the write-lock owner honestly (SPEC §4, §10.2).

Real lock holders (``tests/helpers/lock_holder.py``: a raw ``BEGIN IMMEDIATE`` in another
process). The writer's busy timeout is lowered to 10 ms on its own connection so the 15 attempts
finish quickly; the locks, processes and ``/proc/locks`` reads are real.
"""

from __future__ import annotations

import re
import time

import pytest

from hermes_state import SessionDB, events
from hermes_state.errors import WriteContentionError


@pytest.fixture
def writer(tmp_path):
    path = tmp_path / "state.db"
    db = SessionDB(path)
    db.create_session("s", source="cli")
    db.connection.conn.execute("PRAGMA busy_timeout = 10")
    yield path, db
    db.close()


def test_owner_line_reports_sightings_not_the_callers_wait(writer, spawn):
    path, db = writer
    holder = spawn("lock_holder.py", path)
    assert holder.readline() == "LOCKED", holder.stderr()
    locked_at = time.monotonic()
    with pytest.raises(WriteContentionError) as info:
        db.append_message("s", "user", "never written")
    given_up_at = time.monotonic()
    err = info.value
    line = err.lock_owner
    assert line.startswith(f"state.db write lock held by PID {holder.pid} (")
    assert "seen holding it at 15 consecutive failed attempt(s) of this writer over" in line
    assert f"this writer waited {err.waited_s:.1f}s over 15 attempts" in line
    assert " for " not in line  # no claim about how long the owner has held it
    # What is reported as "seen" lies inside the time the holder provably held the lock, and
    # inside this writer's own wait.
    seen = float(re.search(r"over ([0-9.]+)s;", line).group(1))
    assert seen == pytest.approx(err.lock_owner_seen_s, abs=0.05)
    assert err.lock_owner_seen_s <= given_up_at - locked_at
    assert err.lock_owner_seen_s <= err.waited_s
    assert line in str(err)


def test_a_new_owner_restarts_the_count(writer, spawn):
    """Owner A releases after attempt 5 and owner B takes the lock: only B's 10 sightings count."""
    path, db = writer
    first = spawn("lock_holder.py", path)
    assert first.readline() == "LOCKED", first.stderr()
    second = {}

    def swap(event: dict) -> None:
        if event["event"] == "retry" and event["attempt"] == 5:
            first.send("release")
            assert first.readline() == "RELEASED"
            second["child"] = child = spawn("lock_holder.py", path)
            assert child.readline() == "LOCKED", child.stderr()

    events.add_listener(swap)
    try:
        with pytest.raises(WriteContentionError) as info:
            db.append_message("s", "user", "never written")
    finally:
        events.remove_listener(swap)
    line = info.value.lock_owner
    assert f"PID {second['child'].pid} (" in line and f"PID {first.pid} (" not in line
    assert "seen holding it at 10 consecutive failed attempt(s)" in line
    assert info.value.lock_owner_seen_s < info.value.waited_s
