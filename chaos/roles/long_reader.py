"""The ``long_reader`` role: holds a read transaction open for ``hold`` s every ``every`` s.

A read transaction pins the WAL at its snapshot: checkpoints cannot copy frames written after it
into ``state.db`` and the WAL cannot restart from its beginning, so the WAL grows while writers
go on (checkpoint starvation, SPEC §16.1, §4 "Reads never keep a read transaction open"). Like
``lock_holder`` it is a bare ``sqlite3`` connection (any SQLite program a user might point at
``state.db``: a dashboard, a backup script), not a client of the store.

Each hold is one op ``read_txn`` whose ``ok`` carries ``rows`` (messages visible in its
snapshot), ``held_s``, and the WAL size in bytes at the start and end of the hold
(``wal_bytes_before``/``wal_bytes_after``, from ``stat``: no descriptor is opened on it). After
the last hold it samples the WAL size every ``sample_every`` s until it stops (op ``wal_size``)
so the recovery after the pin is released is in the history.

Workload: ``first_at`` (seconds after the process starts), ``hold``, ``every``, ``holds`` (number of
holds; 0 = until stopped), ``sample_every``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass

from hermes_state.testing import sqlite_uri

from ..params import Duration, param
from .base import RoleContext

KIND = "long_reader"
SUMMARY = "holds a read transaction (checkpoint starvation)"
ADVERSARY = True  # a bare sqlite3 connection, not a client of the store


@dataclass(frozen=True, kw_only=True)
class Params:
    """Holds a read transaction for `hold` every `every`, first at `first_at`: the WAL cannot be
    checkpointed past it (checkpoint starvation); then samples the WAL size."""

    hold: Duration = param(3, "How long the read transaction stays open (> 0).")
    every: Duration = param(5, "Period between read transactions (> 0).")
    first_at: Duration = param(1, "Delay before the first read transaction, from the instance's "
                               "start.")
    holds: int = param(0, "Read transactions in total; 0 = until stopped.", minimum=0)
    sample_every: Duration = param(0.5, "Period of the WAL-size samples after the last hold "
                                   "(> 0).")

    #: Durations that must be > 0.
    POSITIVE = ("hold", "every", "sample_every")


def wal_bytes(db_path: str) -> int | None:
    """Size of ``<db_path>-wal`` in bytes, or None when it does not exist."""
    try:
        return os.stat(f"{db_path}-wal").st_size
    except FileNotFoundError:
        return None


def run(ctx: RoleContext) -> None:
    """``run(ctx)`` as :mod:`chaos.roles` defines it; the workload keys are in this module's
    docstring."""
    w: Params = ctx.params
    hold, every, holds, sample_every = w.hold, w.every, w.holds, w.sample_every
    path = ctx.cfg.db_path
    conn = sqlite3.connect(sqlite_uri(path, mode="ro"), uri=True, timeout=30.0, isolation_level=None)
    ctx.sleep(w.first_at)
    done = 0
    while not ctx.should_stop() and (holds == 0 or done < holds):
        started = time.monotonic()

        def hold_read() -> dict:
            before = wal_bytes(path)
            conn.execute("BEGIN")
            try:
                rows = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
                got = time.monotonic()
                ctx.sleep(hold)
            finally:
                conn.execute("COMMIT")
            return {"rows": rows, "held_s": round(time.monotonic() - got, 4),
                    "wal_bytes_before": before, "wal_bytes_after": wal_bytes(path)}

        ctx.op("read_txn", hold_read, definite=(sqlite3.Error,), hold_s=hold)
        done += 1
        if holds and done >= holds:
            break
        ctx.sleep(every - (time.monotonic() - started))
    conn.close()
    while not ctx.should_stop():
        ctx.op("wal_size", lambda: wal_bytes(path))
        ctx.sleep(sample_every)
