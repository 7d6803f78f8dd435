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


# ------------------------------------------------------------------ the tmpfs lifeline
TMPFS_SCENARIO = """\
name: tmpfs-lifeline
description: a run on its own tmpfs, killed with SIGKILL while its gateway appends
duration: 40s
store: {fixture: empty, tmpfs: 4M}
roles:
  - {name: gw, kind: gateway, workload: {appends_per_s: 20}}
expect:
  integrity: {}
"""


def _needs_tmpfs():
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")


def _wait(predicate, what: str, bound_s: float = HANG_GUARD_S):
    """Poll ``predicate`` until true; the bound is a hang guard, not a speed claim."""
    import time

    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within the {bound_s:g}s hang guard")


def _mounts_under(root: Path) -> list[Path]:
    """Every tmpfs mounted under ``root`` (read from /proc/self/mountinfo, whoever mounted it)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        point = head.split()[4].replace("\\040", " ")
        if tail.split()[0] == "tmpfs" and point.startswith(str(root)):
            out.append(Path(point))
    return out


def test_a_run_killed_with_sigkill_leaves_no_tmpfs_mounted(tmp_path):
    """Issue 22 item 8: ``store: {tmpfs: ...}`` and the runner SIGKILLed: the tmpfs stayed
    mounted. Now its guard sees the lifeline close, keeps the files and unmounts it."""
    import signal

    _needs_tmpfs()
    sc = tmp_path / "tmpfs.yaml"
    sc.write_text(TMPFS_SCENARIO)
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(sc), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, cwd=tmp_path)
    try:
        (mountpoint,) = _wait(lambda: _mounts_under(out), "the run's tmpfs mounted")
        _wait(lambda: list(out.glob("*/history/gw-0.jsonl")), "the gateway started")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=HANG_GUARD_S)
        _wait(lambda: not _mounts_under(out), "the guard unmounted the tmpfs")
        assert (mountpoint / "state.db").is_file()  # the evidence was kept, in place
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the orphaned role processes
        except ProcessLookupError:
            pass
        for m in _mounts_under(out):
            subprocess.run(["umount", "-l", str(m)], check=False)


def test_the_next_run_sweeps_a_stale_tmpfs_of_a_dead_run(tmp_path, run_scenario):
    """A tmpfs whose runner is gone (its guard killed too) is rescued and unmounted by the
    next run, whatever scenario it runs."""
    _needs_tmpfs()
    from chaos import tmpfs_guard

    stale = tmp_path / "old-run" / "home"
    stale.mkdir(parents=True)
    dead = f"{tmpfs_guard.SOURCE_TAG}:{os.getpid()}:0"  # this pid, another start: not alive
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", dead, str(stale)], check=True)
    try:
        (stale / "state.db").write_text("the earlier run's store\n")
        assert _mounts_under(tmp_path)
        run_scenario(HOME_SCENARIO.replace("kind: callable", "kind: gateway").replace(
            "duration: 30s", "duration: 1s"))
        assert not _mounts_under(tmp_path / "old-run")
        assert (stale / "state.db").read_text() == "the earlier run's store\n"
    finally:
        for m in _mounts_under(tmp_path / "old-run"):
            subprocess.run(["umount", "-l", str(m)], check=False)
