"""Roles as Python functions from tests (issue 16 item 6): ``run_scenario(..., roles={"name":
fn})``, ``fn`` a closure over the test's locals, run in a spawned interpreter (multiprocess, dill),
never a fork.

The worked example of docs/SCENARIOS.md ("a user-reported lockup") is the first test: a user's
plugin keeps a write transaction open for ~2 s while the gateway appends; ``no_lockup`` with the
user's patience as its bound fails and names the plugin as the write-lock owner.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time

import pytest

from chaos.roles.python_callable import CallableRoleError, check_bindings

LOCKUP = """\
name: plugin-lockup
description: >-
  Reported: "the gateway stops answering for a few seconds whenever my plugin syncs". The
  plugin keeps a write transaction open while it works; the gateway's appends wait behind it.
seed: 3
duration: 60s
roles:
  - {name: gateway, kind: gateway, count: 1, workload: {appends_per_s: 20}}
  - {name: plugin, kind: callable, count: 1}
nemesis:
  # the run ends once the plugin has synced once: the gateway is stopped, the plugin returns
  - {after: {role: plugin, ok: 1, op: plugin_sync}, fault: terminate, role: gateway}
expect:
  # the user's complaint ("stops answering"), not a bound about the machine: never stretched
  no_lockup: {bound: 1s, ignore_ops: [plugin_sync], scale_with_load: false}
  no_lost_writes: {}
  integrity: {}
"""


def test_a_closure_reproduces_a_user_reported_lockup(run_scenario):
    hold_s = 2.5  # from the report: "a few seconds" every sync
    seen_by_child: list = []  # the child's copy: shows the closure arrived by value

    def plugin(ctx):
        """The user's plugin, reduced to what it does to the store."""
        conn = sqlite3.connect(ctx.cfg.db_path, timeout=30, isolation_level=None)
        seen_by_child.append(os.getpid())
        # It syncs while the gateway is busy: wait for the gateway's first message (an event,
        # not a time: a spawned interpreter may start seconds late on a loaded machine).
        while not ctx.should_stop() and not conn.execute(
                "SELECT EXISTS (SELECT 1 FROM messages)").fetchone()[0]:
            ctx.sleep(0.05)

        def sync():
            conn.execute("BEGIN IMMEDIATE")  # the plugin's "sync": a long write transaction
            time.sleep(hold_s)  # what the plugin does (not a wait of the test)
            conn.execute("COMMIT")
            return len(seen_by_child)

        ctx.op("plugin_sync", sync)
        conn.close()

    result = run_scenario(LOCKUP, roles={"plugin": plugin})
    verdicts = {v.checker: v for v in result.verdicts}
    lockup = verdicts["no_lockup"]
    assert lockup.status == "FAIL", lockup
    assert "waited longer than 1 s" in lockup.summary
    plugin_pid = next(p["pid"] for p in result.results["processes"] if p["process"] == "plugin-0")
    assert f"write lock: PID {plugin_pid}" in lockup.summary, lockup.summary
    assert plugin_pid != os.getpid() and seen_by_child == []  # it ran in another interpreter
    # Nothing was lost and the store is sound: the report is about waiting, not data.
    assert verdicts["no_lost_writes"].status == "PASS"
    assert verdicts["integrity"].status == "PASS"
    history = (result.run_dir / "history" / "plugin-0.jsonl").read_text()
    assert '"op": "plugin_sync"' in history and '"type": "ok"' in history
    # The sync held the lock for its whole length (the run's deadline did not cut it short).
    sync = next(json.loads(line) for line in history.splitlines() if '"type": "ok"' in line)
    assert sync["latency_s"] >= hold_s


def test_a_scenario_without_its_function_is_refused_before_anything_runs(run_scenario, tmp_path):
    with pytest.raises(CallableRoleError, match=r"role 'plugin' is kind callable: pass its "
                                                r"function"):
        run_scenario(LOCKUP)
    with pytest.raises(CallableRoleError, match="no role 'other' of kind callable"):
        run_scenario(LOCKUP, roles={"plugin": lambda ctx: None, "other": lambda ctx: None})
    assert not any(tmp_path.glob("runs-*/*"))  # no run directory was made


def test_check_bindings():
    kinds = {"g": "gateway", "p": "callable"}
    fn = lambda ctx: None  # noqa: E731
    assert check_bindings(kinds, {"p": fn}) == {"p": fn}
    assert check_bindings({"g": "gateway"}, None) == {}
    with pytest.raises(CallableRoleError, match="not a function"):
        check_bindings(kinds, {"p": 3})
    with pytest.raises(CallableRoleError, match="no role 'g' of kind callable"):
        check_bindings(kinds, {"p": fn, "g": fn})


def test_chaos_run_explains_it_cannot_run_a_callable_role(tmp_path):
    import subprocess
    import sys

    sc = tmp_path / "lockup.yaml"
    sc.write_text(LOCKUP)
    proc = subprocess.run([sys.executable, "-m", "chaos", "run", str(sc), "--out",
                           str(tmp_path / "runs")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "role 'plugin' is kind callable" in proc.stderr
    assert not (tmp_path / "runs").exists()
