"""The ``lock_holder`` role: holds ``BEGIN IMMEDIATE`` for ``hold`` seconds every ``every`` s.

It is an adversary, not a client of the store: a bare ``sqlite3`` connection like any other
SQLite program a user might point at ``state.db`` (SPEC §16.1 "reproduces lockups"). Workload:
``first_at`` (seconds after the process starts), ``hold``, ``every``.
"""

from __future__ import annotations

import sqlite3
import time

from .base import RoleContext


def run(ctx: RoleContext) -> None:
    """``run(ctx)`` as :mod:`chaos.roles` defines it; the workload keys are in this module's
    docstring."""
    w = ctx.cfg.workload
    hold = float(w.get("hold", 0.5))
    every = float(w.get("every", 2.0))
    first_at = float(w.get("first_at", 1.0))
    conn = sqlite3.connect(ctx.cfg.db_path, timeout=30.0, isolation_level=None)
    ctx.sleep(first_at)
    while not ctx.should_stop():
        started = time.monotonic()

        def hold_lock() -> float:
            conn.execute("BEGIN IMMEDIATE")
            got = time.monotonic()
            try:
                ctx.sleep(hold)
            finally:
                conn.execute("COMMIT")
            return round(time.monotonic() - got, 4)

        ctx.op("hold_lock", hold_lock, definite=(sqlite3.Error,), hold_s=hold)
        ctx.sleep(every - (time.monotonic() - started))
    conn.close()
