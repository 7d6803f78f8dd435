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

from hermes_state.paths import sqlite_uri

from .base import RoleContext


def wal_bytes(db_path: str) -> int | None:
    """Size of ``<db_path>-wal`` in bytes, or None when it does not exist."""
    try:
        return os.stat(f"{db_path}-wal").st_size
    except FileNotFoundError:
        return None


def run(ctx: RoleContext) -> None:
    """``run(ctx)`` as :mod:`chaos.roles` defines it; the workload keys are in this module's
    docstring."""
    w = ctx.cfg.workload
    hold = float(w.get("hold", 3.0))
    every = float(w.get("every", 5.0))
    holds = int(w.get("holds", 0))
    sample_every = float(w.get("sample_every", 0.5))
    path = ctx.cfg.db_path
    conn = sqlite3.connect(sqlite_uri(path, mode="ro"), uri=True, timeout=30.0, isolation_level=None)
    ctx.sleep(float(w.get("first_at", 1.0)))
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
