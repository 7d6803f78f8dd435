"""The ``lock_holder`` role: holds ``BEGIN IMMEDIATE`` for ``hold`` seconds every ``every`` s.

It is an adversary, not a client of the store: a bare ``sqlite3`` connection like any other
SQLite program a user might point at ``state.db`` (SPEC §16.1 "reproduces lockups"). Workload:
``first_at`` (seconds after the process starts), ``hold``, ``every``.
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from ..params import Duration, param
from .base import RoleContext

KIND = "lock_holder"
SUMMARY = "holds BEGIN IMMEDIATE periodically"
ADVERSARY = True  # a bare sqlite3 connection, not a client of the store


@dataclass(frozen=True, kw_only=True)
class Params:
    """Holds BEGIN IMMEDIATE for `hold` every `every`, first at `first_at`."""

    hold: Duration = param(0.5, "How long the write lock is held (> 0).")
    every: Duration = param(2, "Period between lock acquisitions (> 0).")
    first_at: Duration = param(1, "Delay before the first acquisition, from the instance's start.")

    #: Durations that must be > 0.
    POSITIVE = ("hold", "every")


def run(ctx: RoleContext) -> None:
    """``run(ctx)`` as :mod:`chaos.roles` defines it; the workload keys are in this module's
    docstring."""
    w: Params = ctx.params
    hold, every, first_at = w.hold, w.every, w.first_at
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
