"""Opening a migrated store again, in this process or a child (the matrix and the real stores).

:func:`second_open_problems` checks that a second open of a migrated store is a no-op;
:data:`OPEN_CHILD` is the child program that opens a store and prints its migration report,
run with :func:`child_env` (the repository on ``PYTHONPATH``, an optional failpoint).
"""

from __future__ import annotations

import hashlib
import os
import sqlite3
from pathlib import Path

import hermes_state
from hermes_state import SessionDB, failpoints

#: Where the store package this process runs was imported from: the checkout, or the audit's
#: mutated copy when ``chaos audit`` runs the matrix on a mutant. Children put it first on
#: ``PYTHONPATH`` and run in it, so they import the same store code as this process.
STORE_ROOT = Path(hermes_state.__file__).resolve().parent.parent
#: Sleep after each COMMIT of the writer cell's migration (ms; the write lock is free then), so
#: the old-schema writes interleave with the steps.
STEP_SLEEP_MS = 60

OPEN_CHILD = (
    "import json, sys, time\n"
    "from hermes_state import SessionDB\n"
    "t0 = time.monotonic()\n"
    "db = SessionDB(sys.argv[1])\n"
    "rep = db.connection.migration_report\n"
    "db.close()\n"
    "print(json.dumps({'survived': True, 't0': t0, 't1': time.monotonic(),\n"
    "                  'steps': rep.steps if rep else None}))\n"
)


def raw_connect(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


def probe_env(failpoint_spec: str = "") -> dict:
    env = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
    env["PYTHONPATH"] = str(STORE_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if failpoint_spec:
        env[failpoints.ENV_VAR] = failpoint_spec
    return env


def _store_state(path: Path, conn: sqlite3.Connection) -> tuple:
    wal = Path(f"{path}-wal")
    return (conn.execute("PRAGMA data_version").fetchone()[0],
            hashlib.sha256(path.read_bytes()).hexdigest(),
            hashlib.sha256(wal.read_bytes()).hexdigest() if wal.exists() else None)


def second_open_problems(path: Path) -> list[str]:
    """A second open of a migrated store must be a no-op: no report, no write, no byte changed.

    Reads ``PRAGMA data_version`` from a separate connection (it changes when another
    connection commits) and hashes ``state.db`` and ``state.db-wal`` before and after.
    """
    out: list[str] = []
    conn = raw_connect(path)
    try:
        conn.execute("SELECT count(*) FROM sessions").fetchone()
        before = _store_state(path, conn)
        db = SessionDB(path)
        try:
            if db.connection.migration_report is not None:
                out.append(f"second open migrated again: {db.connection.migration_report}")
            if db.connection.writes:
                out.append(f"second open wrote {db.connection.writes} transaction(s)")
        finally:
            db.close()
        after = _store_state(path, conn)
    finally:
        conn.close()
    for what, a, b in zip(("data_version", "state.db bytes", "state.db-wal bytes"), before, after):
        if a != b:
            out.append(f"second open changed {what}")
    return out
