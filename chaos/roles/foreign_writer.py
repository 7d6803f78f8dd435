"""The ``foreign_writer`` role: a SQLite client that knows nothing of the store's rules.

A bare ``sqlite3`` connection (busy timeout 30 s) such as a script, an old binary or another tool
pointed at ``state.db``: it never scans for a retired generation's holders (SPEC §10.4), so
beside a holder whose ``-wal``/``-shm`` were deleted it opens new sidecars and writes a second
WAL generation. It appends ``writes`` messages to its own session ``foreign-<process>``, each
in its own ``BEGIN IMMEDIATE`` transaction that also bumps the session's ``message_count``
(recorded as ``append`` ops with payload ids, so ``no_lost_writes`` owes them), then closes
(a nemesis step can fire ``after: {role: ..., ok: writes, delay: ...}``). With
``after_wal_gone`` it first waits until ``state.db-wal`` does not exist (another holder's sidecars
were deleted), so it writes beside a retired generation however late the fault fires.
Workload: ``writes``, ``appends_per_s``, ``after_wal_gone``.
"""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass

from ..params import param
from .base import RoleContext
from .workload import rate

KIND = "foreign_writer"
SUMMARY = "a bare sqlite3 client writing without the store's rules (no §10.4 scan), then closing"
ADVERSARY = True  # a bare sqlite3 connection, not a client of the store
WRITER = False    # nothing to wait for after the heal: it is done once it closed


@dataclass(frozen=True, kw_only=True)
class Params:
    """Append `writes` messages through a bare sqlite3 connection, then close."""

    writes: int = param(30, "Messages appended, one transaction each.", minimum=1,
                        maximum=10_000)
    appends_per_s: float = rate(50, "Rate of the appends; 0 = as fast as possible.")
    after_wal_gone: bool = param(False, "Wait until state.db-wal does not exist before opening "
                                 "(beside a holder whose sidecars were deleted).")


def run(ctx: RoleContext) -> None:
    """``run(ctx)`` as :mod:`chaos.roles` defines it; the workload keys are in this module's
    docstring."""
    w: Params = ctx.params
    session = f"foreign-{ctx.cfg.process}"
    while w.after_wal_gone and os.path.lexists(f"{ctx.cfg.db_path}-wal"):
        if ctx.should_stop():
            return
        ctx.sleep(0.02)
    conn = sqlite3.connect(ctx.cfg.db_path, timeout=30.0, isolation_level=None)
    conn.execute("INSERT OR IGNORE INTO sessions(id, source, started_at) VALUES (?, 'cli', ?)",
                 (session, time.time()))
    for _ in range(w.writes):
        if ctx.should_stop():
            break
        payload = ctx.next_payload_id()

        def append() -> int:
            conn.execute("BEGIN IMMEDIATE")
            try:
                cur = conn.execute(
                    "INSERT INTO messages(session_id, role, content, timestamp, "
                    "platform_message_id) VALUES (?, 'user', ?, ?, ?)",
                    (session, f"foreign write {payload}", time.time(), payload))
                conn.execute("UPDATE sessions SET message_count = message_count + 1 "
                             "WHERE id = ?", (session,))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            return int(cur.lastrowid)

        ctx.op("append", append, definite=(), payload_id=payload, session_id=session)
        if w.appends_per_s > 0:
            ctx.sleep(1.0 / w.appends_per_s)
    conn.close()
