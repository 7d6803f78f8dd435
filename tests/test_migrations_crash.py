"""A crash at every migration step, then a reopen (SPEC §3, §16.6).

For each start version (1, 9, 19) and each step N it must run, a child process opens the store
with ``HERMES_STATE_FAILPOINTS="migrate.v<N>.before_commit=crash"`` and is SIGKILLed right before
that step's COMMIT. The store must then be at version N-1 (the step rolled back, the earlier ones
committed) with every row intact, and a normal reopen must complete to 23 with everything intact
(the schema-bump gate's comparison, :func:`hermes_state.testing.check_migrated`).
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_state import SessionDB, testing as h

REPO = Path(__file__).resolve().parent.parent
CASES = [(start, n) for start in (1, 9, 19) for n in range(start + 1, 24)]

_OPEN = ("import sys\nfrom hermes_state import SessionDB\nSessionDB(sys.argv[1])\n"
         "print('survived')\n")


def _open_in_child(path: str, failpoints: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "HERMES_STATE_FAILPOINTS"}
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env["HERMES_STATE_FAILPOINTS"] = failpoints
    return subprocess.run([sys.executable, "-c", _OPEN, path], env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("start,step", CASES, ids=[f"v{s}-crash-at-v{n}" for s, n in CASES])
def test_crash_before_the_commit_of_every_step(tmp_path, start, step):
    m = h.build_fixture(tmp_path / "state.db", start, sessions=6, messages_per_session=6)
    res = _open_in_child(m["path"], f"migrate.v{step}.before_commit=crash")
    assert res.returncode == -signal.SIGKILL, (res.returncode, res.stdout, res.stderr)
    assert "survived" not in res.stdout

    conn = sqlite3.connect(m["path"], isolation_level=None)
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(step - 1,)]
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert dict(conn.execute("SELECT id, content FROM messages")) == m["messages"]
        assert {r[0] for r in conn.execute("SELECT id FROM sessions")} == set(m["session_ids"])
        # The interrupted step left nothing behind (e.g. no half-rebuilt usage table).
        assert "session_model_usage__v22" not in {
            r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    finally:
        conn.close()

    with SessionDB(m["path"]) as db:
        rep = db.connection.migration_report
        assert rep.from_version == step - 1 and rep.steps == list(range(step, 24))
    conn = sqlite3.connect(m["path"], isolation_level=None)
    try:
        assert h.check_migrated(conn, m) == []
    finally:
        conn.close()


def test_crash_twice_in_a_row_then_reopen(tmp_path):
    """Crash at v11, then again at v18 on the resumed open, then complete."""
    m = h.build_fixture(tmp_path / "state.db", 3, sessions=12, messages_per_session=4)
    for step in (11, 18):
        res = _open_in_child(m["path"], f"migrate.v{step}.before_commit=crash")
        assert res.returncode == -signal.SIGKILL
    SessionDB(m["path"]).close()
    conn = sqlite3.connect(m["path"], isolation_level=None)
    try:
        assert h.check_migrated(conn, m) == []
    finally:
        conn.close()


def test_an_error_inside_a_step_fails_the_open_and_rolls_the_step_back(tmp_path):
    """A non-lock error in a step: the open raises, the store stays at the previous version."""
    m = h.build_fixture(tmp_path / "state.db", 15, sessions=4, messages_per_session=4)
    res = _open_in_child(m["path"], "migrate.v18.before_commit=error(ioerr)")
    assert res.returncode == 1 and "disk I/O error" in res.stderr
    conn = sqlite3.connect(m["path"], isolation_level=None)
    try:
        assert conn.execute("SELECT version FROM schema_version").fetchall() == [(17,)]
    finally:
        conn.close()
    SessionDB(m["path"]).close()
    conn = sqlite3.connect(m["path"], isolation_level=None)
    try:
        assert h.check_migrated(conn, m) == []
    finally:
        conn.close()
