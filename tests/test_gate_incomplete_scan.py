"""The live-writer gate fails closed on a scan it cannot complete (SPEC §10.2, §11).

A real process of the same user whose descriptors cannot be read: a child that dropped from root
to uid 65534 after start-up is not dumpable, so its ``/proc/<pid>/fd`` is unreadable to other
processes of uid 65534. The gate, run by another
uid-65534 process, must refuse ("cannot prove ...") instead of treating the store as quiet.
Needs root to change uid; skipped otherwise.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from hermes_state import SessionDB

NOBODY = 65534

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a second user")


@pytest.fixture
def store():
    """A store in a fresh directory the second user can traverse (pytest's tmp_path is 0700)."""
    with tempfile.TemporaryDirectory(prefix="hermes-gate-") as directory:
        os.chmod(directory, 0o755)
        path = Path(directory) / "state.db"
        with SessionDB(path) as db:
            db.create_session("s", source="cli")
        yield path


@pytest.mark.parametrize("command", [["optimize"], ["optimize-storage"],
                                     ["prune", "--older-than", "0", "--yes"]])
def test_gate_refuses_when_a_same_user_process_cannot_be_inspected(store, spawn, command):
    hidden = spawn("drop_uid.py", NOBODY, "hold", store)
    assert hidden.readline() == "HOLDING", hidden.stderr()
    gate = spawn("drop_uid.py", NOBODY, "cli", "--home", store.parent, "sessions", *command)
    gate.proc.stdin.close()
    assert gate.wait() == 1
    err = gate.proc.stderr.read()
    assert (f"Refusing `sessions {command[0]}`: cannot prove that no other process is using "
            f"{store}.") in err
    assert "cannot prove the store is quiet: could not inspect PID(s)" in err
    assert str(hidden.pid) in err
    assert "--force" in err


def test_dry_run_is_not_refused_by_an_incomplete_scan(store, spawn):
    hidden = spawn("drop_uid.py", NOBODY, "hold", store)
    assert hidden.readline() == "HOLDING", hidden.stderr()
    gate = spawn("drop_uid.py", NOBODY, "cli", "--home", store.parent, "sessions", "optimize",
                 "--dry-run")
    gate.proc.stdin.close()
    assert gate.wait() == 0, gate.proc.stderr.read()
