"""The start gate of role processes (issue 27 item 1): the clock goes only to a process that said
ready, on every launch path; a process whose gate breaks never exits 0 silently; the processes a
power cut restarts really run (a REAL FUSE mount, real SIGKILLs, real role processes).
"""

from __future__ import annotations

import multiprocessing

import pytest

from chaos.fs import fuse_unavailable_reason
from chaos.roles import role_main
from chaos.roles.gate import (DISCARD, GATE_LOST_EXIT, GateLost, RoleStartError, await_ready,
                              discard, release, wait_for_start)
from chaos.runner import Runner
from chaos.scenario import load_scenario_text

_MP = multiprocessing.get_context("spawn")
HANG_GUARD_S = 120.0


def test_a_gate_closed_before_ready_is_lost_not_a_quiet_none():
    ours, theirs = _MP.Pipe()
    release(ours, {"t0": 0.0, "deadline": 1.0, "index": 0})  # the old restart path's order
    with pytest.raises(GateLost, match="before this process said ready"):
        wait_for_start(theirs)


def test_a_gate_closed_without_clock_or_discard_is_lost():
    ours, theirs = _MP.Pipe()
    child = _MP.Process(target=_say_ready_then_close, args=(ours,))
    child.start()
    ours.close()
    with pytest.raises(GateLost, match="without sending the run's clock"):
        wait_for_start(theirs)
    child.join(HANG_GUARD_S)


def _say_ready_then_close(conn):
    conn.recv()
    conn.close()


def test_a_discard_ends_the_child_without_running():
    ours, theirs = _MP.Pipe()
    child = _MP.Process(target=_answer_after_ready, args=(ours, DISCARD))
    child.start()
    ours.close()
    assert wait_for_start(theirs) is None
    child.join(HANG_GUARD_S)


def _answer_after_ready(conn, message):
    assert conn.recv() == "ready"
    conn.send(message)
    conn.close()


def test_await_ready_names_the_processes_that_never_said_ready():
    ours, theirs = _MP.Pipe()
    with pytest.raises(RoleStartError, match="gateway-7"):
        await_ready({ours: "gateway-7"}, guard_s=0.2)
    theirs.close()


def _cfg(tmp_path, process="gateway-9"):
    return {"role": "gateway", "kind": "gateway", "index": 0, "process": process,
            "db_path": str(tmp_path / "state.db"), "home": str(tmp_path),
            "history_dir": str(tmp_path), "log_path": str(tmp_path / f"{process}.log"),
            "seed": 1, "t0": 0.0, "deadline": 0.0, "workload": {}}


def test_a_role_process_released_before_ready_fails_loudly(tmp_path):
    """The old ``_restart``: launched and released at once. The child exited 0 with no
    history and no log; now it exits GATE_LOST_EXIT and its log says why."""
    ours, theirs = _MP.Pipe()
    proc = _MP.Process(target=role_main, args=(_cfg(tmp_path), None, theirs))
    proc.start()
    theirs.close()
    release(ours, {"t0": 0.0, "deadline": 1.0, "index": 0})
    proc.join(HANG_GUARD_S)
    assert proc.exitcode == GATE_LOST_EXIT
    assert "start gate lost" in (tmp_path / "gateway-9.log").read_text()
    assert not (tmp_path / "gateway-9.jsonl").exists()


def test_a_discarded_role_process_exits_0_without_running(tmp_path):
    ours, theirs = _MP.Pipe()
    proc = _MP.Process(target=role_main, args=(_cfg(tmp_path), None, theirs))
    proc.start()
    theirs.close()
    await_ready({ours: "gateway-9"}, guard_s=HANG_GUARD_S)
    discard(ours)
    proc.join(HANG_GUARD_S)
    assert proc.exitcode == 0
    assert not (tmp_path / "gateway-9.jsonl").exists()


RESTART = """
name: restart-without-spare
description: a restart released on the path with no spare process.
seed: 5
duration: 4s
store: {fixture: empty}
roles:
  - {name: gateway, kind: gateway, count: 1, workload: {appends_per_s: 30}}
nemesis:
  - {at: 1s, fault: restart, role: gateway}
expect:
  no_lost_writes: {}
"""


def _appends_by(history: list[dict], process: str, after: float = float("-inf")) -> list:
    return [r for r in history if r.get("type") == "ok" and r.get("op") == "append"
            and r.get("process") == process and float(r["t"]) > after]


def test_a_restart_with_no_spare_waits_for_ready_and_runs(run_scenario, monkeypatch):
    """More restarts than spares (the fallback launch path): the new process is launched, its
    ready awaited, then released; it appends (before: released before ready, exit 0, nothing)."""
    monkeypatch.setattr(Runner, "_launch_standby", lambda self: [])
    result = run_scenario(load_scenario_text(RESTART, "<restart>"))
    history = _history(result)
    assert _appends_by(history, "gateway-1"), result.console_text[-3000:]
    assert result.exit_code == 0, result.console_text[-3000:]


def _history(result) -> list[dict]:
    import json

    return [json.loads(line) for line in
            (result.run_dir / "history.jsonl").read_text().splitlines()]


POWER_CUT = """
name: power-cut-restarts-run
description: three gateways on the faulty filesystem, a power cut, the restarts append again.
seed: 151
duration: 7s
fs: {kind: faulty}
store: {fixture: empty, synchronous: NORMAL}
roles:
  - {name: gateway, kind: gateway, count: 3, workload: {appends_per_s: 40}}
nemesis:
  - {after: {role: gateway, ok: 60}, fault: power_cut}
expect:
  durability: {}
  integrity: {}
must_observe: [power_cut, fs_power_cut]
"""


def test_after_a_power_cut_the_restarted_gateways_append_on_the_real_fuse_mount(run_scenario):
    """fs_power_cut_writers' claim "the gateways start again on what was durable": every
    restarted process appends after the cut, and the final store holds those appends."""
    reason = fuse_unavailable_reason()
    if reason:
        pytest.skip(f"{reason} (pip install -e '.[fs]' and apt-get install fuse3)")
    result = run_scenario(load_scenario_text(POWER_CUT, "<power-cut>"))
    history = _history(result)
    cuts = [float(r["t"]) for r in history if r.get("event") == "fs_power_cut"]
    assert len(cuts) == 1, result.console_text[-3000:]
    restarts = [r["child"] for r in history if r.get("type") == "process"
                and r.get("phase") == "spawn" and r.get("generation")]
    assert sorted(restarts) == ["gateway-3", "gateway-4", "gateway-5"]
    import sqlite3

    conn = sqlite3.connect(result.run_dir / "final" / "state.db")
    stored = {row[0] for row in conn.execute("SELECT platform_message_id FROM messages")}
    conn.close()
    for process in restarts:
        after = _appends_by(history, process, cuts[0])
        assert after, f"{process} appended nothing after the power cut"
        assert {r["payload_id"] for r in after} <= stored
    exits = {r["child"]: r["exitcode"] for r in history if r.get("type") == "process"
             and r.get("phase") == "exit"}
    assert all(exits[p] == 0 for p in restarts), exits
    assert result.exit_code == 0, result.console_text[-3000:]


NAMED = """
name: named-roles
description: a lock holder and a gateway; the sampler names the write-lock owner.
seed: 3
duration: 60s
store: {fixture: empty}
roles:
  - {name: gateway, kind: gateway, count: 1, workload: {appends_per_s: 20}}
  - {name: locker, kind: lock_holder, count: 1, workload: {first_at: 0.2s, hold: 0.6s, every: 1s}}
nemesis:
  - {after: {role: locker, ok: 2, op: hold_lock}, fault: terminate, role: locker}
  - {after: {step: 0}, fault: terminate, role: gateway}
expect:
  no_lost_writes: {}
"""


def test_role_processes_are_named_by_their_role_where_holders_are_named(run_scenario):
    """Issue 27 item 12: a holder read as ``python -B -c from multiprocessing.spawn impor...``
    in the banner and the console; the lock owner is now ``chaos role locker-0
    (lock_holder)`` in every sample that names it (the store's own holder scan reads the same
    /proc/<pid>/cmdline)."""
    result = run_scenario(load_scenario_text(NAMED, "<named>"))
    history = _history(result)
    owners = {s["write_lock"]["command"] for s in history if s.get("type") == "sample"
              and s.get("write_lock") and s["write_lock"].get("process") == "locker-0"}
    assert owners == {"chaos role locker-0 (lock_holder)"}, owners
    assert result.exit_code == 0, result.console_text[-3000:]
