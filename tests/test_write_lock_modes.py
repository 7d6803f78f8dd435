"""Which write transactions need the checkpoint lock alone (issue 24 item 3; SPEC §4).

A write can restart the WAL only when its snapshot began with the whole log backfilled
(wal.c ``walTryBeginRead`` takes read slot 0 exactly then; ``walRestartLog`` restarts only for
slot 0 and ``nBackfill > 0``). Such a write takes the checkpoint lock EXCLUSIVELY; every other
write SHARED, beside checkpoints (which take it SHARED). The wal-index header is read through
SQLite's own ``-shm`` descriptor.
"""

from __future__ import annotations

import os
import struct

import pytest

from hermes_state import SessionDB, events
from hermes_state.files import sqlite_format
from hermes_state.store import connection, wal_index

EXPOSED = connection.wal_reset_exposure() is not None


def header(mx: int, backfill: int, *, init: int = 1, version: int = wal_index.WALINDEX_VERSION,
           torn: bool = False) -> bytes:
    hdr = struct.pack("=3I2BH8I", version, 0, 7, init, 0, 4096, mx, 3, 0, 0, 11, 22, 0, 0)
    second = hdr if not torn else hdr[:16] + b"\xff" + hdr[17:]
    return hdr + second + struct.pack("=I", backfill) + b"\0" * 36


def test_the_header_says_when_a_write_may_restart_the_wal():
    assert wal_index.parse(header(10, 10)).may_restart
    assert not wal_index.parse(header(10, 4)).may_restart
    assert not wal_index.parse(header(0, 0)).may_restart  # empty log: nothing to restart
    ix = wal_index.parse(header(10, 4))
    assert (ix.mx_frame, ix.n_backfill, ix.change) == (10, 4, 7)
    full = sqlite_format.wal_index_header(header(10, 4))
    assert (full["mx_frame"], full["n_backfill"], full["change"]) == (10, 4, 7)
    for bad in (header(10, 4, init=0), header(10, 4, version=1), header(10, 4, torn=True),
                header(10, 4)[:135]):
        assert wal_index.parse(bad) is None  # unknown: the caller takes the lock alone


@pytest.mark.skipif(not EXPOSED, reason="this SQLite has the WAL-reset fix")
def test_only_the_write_after_a_complete_checkpoint_takes_the_lock_exclusively(tmp_path):
    seen: list[dict] = []
    listen = lambda e: e["event"] in ("write", "checkpoint") and seen.append(e)  # noqa: E731
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "a")
        events.add_listener(listen)
        try:
            db.append_message("s", "user", "b")  # frames not checkpointed yet
            busy, log_, done = db.connection.checkpoint("PASSIVE")
            assert busy == 0 and log_ == done > 0
            db.append_message("s", "user", "c")  # begins with the WAL wholly backfilled
            db.append_message("s", "user", "d")  # c restarted it: not wholly backfilled
        finally:
            events.remove_listener(listen)
    writes = [e for e in seen if e["event"] == "write"]
    assert [(w["lock"], w["wal"][1] >= w["wal"][0] > 0) for w in writes] == [
        ("shared", False), ("exclusive", True), ("shared", False)]
    # c restarted the log: d's snapshot has fewer frames than c's
    assert writes[2]["wal"][0] < writes[1]["wal"][0]
    (ck,) = [e for e in seen if e["event"] == "checkpoint"]
    assert ck["lock"] == "shared"


def test_the_header_is_read_through_sqlites_own_descriptor(tmp_path):
    """No descriptor of the store's files is opened or closed by the read (SPEC §4)."""
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "a")
        before = sorted(os.listdir("/proc/self/fd"))
        for i in range(3):
            db.append_message("s", "user", f"x{i}")
        sc = db.connection
        assert sc._shm.fd is not None
        st = os.fstat(sc._shm.fd)
        assert (st.st_dev, st.st_ino) == tuple(sc.generation.shm)
        assert sorted(os.listdir("/proc/self/fd")) == before
