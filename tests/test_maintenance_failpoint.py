"""The ``cmd.maintenance.locked`` failpoint (issue 25): a gated maintenance command reaches it
once allowed to run, holding the store's write lock, before its action; a refused one never
does. A chaos scenario uses it to hold the lock as long as a sleep says."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from hermes_state import SessionDB, failpoints

REPO = Path(__file__).resolve().parent.parent


def optimize(home: Path, spec: str, *extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), failpoints.ENV_VAR: spec}
    return subprocess.run([sys.executable, "-m", "hermes_state", "--home", str(home), "sessions",
                           "optimize", *extra], capture_output=True, text=True, env=env,
                          timeout=120)


def test_an_allowed_command_reaches_it_holding_the_lock_a_refused_one_never(tmp_path, spawn):
    home = tmp_path / "home"
    home.mkdir()
    db = home / "state.db"
    with SessionDB(db) as s:
        s.create_session("s", source="cli")
        s.append_message("s", "user", "hello")
    before = db.read_bytes()
    crashed = optimize(home, "cmd.maintenance.locked=crash")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr
    assert db.read_bytes() == before  # killed before its action: nothing rewritten
    gw = spawn("bundle_gateway.py", db, "s2", "20", "hello")
    assert '"ok": 1' in gw.readline()
    refused = optimize(home, "cmd.maintenance.locked=crash")
    assert refused.returncode == 1 and "Refusing `sessions optimize`" in refused.stderr
    gw.kill()
    assert "cmd.maintenance.locked" in failpoints.NAMES


def test_a_commands_failpoints_are_validated_and_given_to_it_alone(tmp_path):
    from chaos.nemesis.commands import run_command
    from chaos.scenario import validate_text

    base = ("name: x\ndescription: x\nduration: 5s\nroles:\n  - {name: g, kind: gateway}\n"
            "nemesis:\n  - {at: 1s, fault: run, command: optimize, failpoints: '%s'}\n"
            "expect: {integrity: {}}\n")
    (bad,) = validate_text(base % "cmd.maintenance.locked=explode", "x.yaml")
    assert bad.field == "nemesis[0].failpoints" and "bad failpoint spec" in bad.message
    assert validate_text(base % "cmd.maintenance.locked=sleep(10)", "x.yaml") == []
    home = tmp_path / "home"
    home.mkdir()
    SessionDB(home / "state.db").close()
    result = run_command("optimize", home, home / "state.db",
                         failpoint_spec="cmd.maintenance.locked=crash")
    assert result.exit_code == -signal.SIGKILL
    assert failpoints.ENV_VAR not in os.environ  # the caller's environment is untouched
