"""Issue 22 item 8, the toolkit's edges: a role's home is the run's, a tmpfs never outlives its
run, the faulty filesystem's control socket answers its owner only, and ``--stores`` survives a
store that is not one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 120.0  # hang guard only

HOME_SCENARIO = """\
name: role-home
description: a role that opens SessionDB() with no path must open the run's store
duration: 30s
roles:
  - {name: plugin, kind: callable}
expect:
  integrity: {}
"""


def test_a_role_calling_sessiondb_without_a_path_opens_the_run_store(run_scenario, tmp_path,
                                                                     monkeypatch):
    """Issue 22 item 8: role processes did not get HERMES_HOME, so ``SessionDB()`` in role code
    wrote to the user's real ~/.hermes/state.db (here a decoy home the test points at)."""
    users = tmp_path / "users-hermes"
    monkeypatch.setenv("HERMES_HOME", str(users))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))

    def plugin(ctx):
        from hermes_state import SessionDB

        def touch():
            with SessionDB() as db:
                db.create_session("from-role", source="cli")
                return {"db": str(db.db_path), "home": os.environ.get("HERMES_HOME")}

        ctx.op("open_default", touch)

    result = run_scenario(HOME_SCENARIO, roles={"plugin": plugin})
    history = (result.run_dir / "history" / "plugin-0.jsonl").read_text()
    ok = next(json.loads(line) for line in history.splitlines() if '"type": "ok"' in line)
    home = result.run_dir / "home"
    assert ok["result"]["home"] == str(home), ok
    assert Path(ok["result"]["db"]).resolve() == (home / "state.db").resolve()
    assert not users.exists() and not (tmp_path / "user" / ".hermes").exists()
