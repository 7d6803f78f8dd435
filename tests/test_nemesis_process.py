"""Process faults (SPEC §16.2): failpoints armed at run time, kill at a named crash point,
restart, ``after:`` triggers and the run phases, on real processes and a real store."""

from __future__ import annotations

import json
import sqlite3
from collections import Counter
from pathlib import Path

import pytest

from chaos.nemesis import process
from chaos.runner import run_scenario
from chaos.scenario import load_scenario_text
from chaos.schedule import Counts, Schedule, reached
from hermes_state import SessionDB, failpoints
from rich.console import Console

# --------------------------------------------------------------------- the arm file (in-process)


@pytest.fixture
def arm_file(tmp_path, monkeypatch):
    """HERMES_STATE_FAILPOINTS_FILE pointing at a (not yet existing) file; reset after."""
    path = tmp_path / "fp.arm"
    monkeypatch.delenv(failpoints.ENV_VAR, raising=False)
    monkeypatch.setenv(failpoints.FILE_ENV_VAR, str(path))
    failpoints.reload()
    yield path
    monkeypatch.delenv(failpoints.FILE_ENV_VAR)
    monkeypatch.delenv(failpoints.ENV_VAR, raising=False)
    failpoints.reload()


def test_missing_arm_file_arms_nothing_then_arming_takes_effect_at_the_next_hit(arm_file):
    failpoints.hit("write.after_begin")  # no file: nothing armed
    process.arm(arm_file, "write.after_begin", "error(ioerr)")
    with pytest.raises(sqlite3.OperationalError, match="disk I/O error"):
        failpoints.hit("write.after_begin")
    process.arm(arm_file, "write.after_begin", "off")
    failpoints.hit("write.after_begin")  # disarmed by rewriting the file


def test_hits_of_a_name_armed_by_the_file_count_from_the_arming(arm_file):
    for _ in range(3):
        failpoints.hit("checkpoint.before")
    process.arm(arm_file, "checkpoint.before", "error(ioerr)@2")
    assert failpoints.hits("checkpoint.before") == 0
    failpoints.hit("checkpoint.before")  # hit 1 since arming: nothing
    with pytest.raises(sqlite3.OperationalError):
        failpoints.hit("checkpoint.before")  # hit 2
    failpoints.hit("checkpoint.before")  # hit 3: nothing


def test_file_overrides_the_env_var_and_a_fired_action_emits_an_event(arm_file, monkeypatch,
                                                                      event_log):
    monkeypatch.setenv(failpoints.ENV_VAR, "write.after_begin=error(ioerr),checkpoint.after=off")
    failpoints.reload()
    process.arm(arm_file, "write.after_begin", "off")
    process.arm(arm_file, "checkpoint.after", "error(full)")
    failpoints.hit("write.after_begin")
    with pytest.raises(sqlite3.OperationalError, match="full"):
        failpoints.hit("checkpoint.after")
    fired = [e for e in event_log if e["event"] == "failpoint"]
    assert [(e["name"], e["action"], e["hit"]) for e in fired] == [
        ("checkpoint.after", "error", 1)]


def test_arm_keeps_other_names_and_refuses_a_bad_spec(tmp_path):
    path = tmp_path / "a.arm"
    process.arm(path, "write.before_commit", "crash@3")
    assert process.arm(path, "checkpoint.before", "sleep(10)") == (
        "write.before_commit=crash@3,checkpoint.before=sleep(10)")
    assert process.arm(path, "write.before_commit", "off") == (
        "write.before_commit=off,checkpoint.before=sleep(10)")
    with pytest.raises(ValueError, match="unknown failpoint"):
        process.arm(path, "write.before_comit", "crash")
    with pytest.raises(ValueError, match="bad action"):
        process.arm(path, "write.before_commit", "explode")
    assert failpoints.parse(path.read_text()) == {
        "write.before_commit": failpoints.Action("off"),
        "checkpoint.before": failpoints.Action("sleep", None, 10.0)}
    assert [p.name for p in tmp_path.iterdir()] == ["a.arm"]  # no temporary file left


# ------------------------------------------------------------ real processes, real kill -9


@pytest.mark.parametrize("point, durable", [("write.before_commit", False),
                                            ("write.after_commit", True)])
def test_a_process_armed_at_run_time_kills_itself_at_the_crash_point(tmp_path, spawn, point,
                                                                     durable):
    db_path = tmp_path / "state.db"
    SessionDB(db_path).close()
    arm_path = tmp_path / "child.arm"
    child = spawn("store_child.py", env_extra={failpoints.FILE_ENV_VAR: str(arm_path)})
    child.ok("open", path=str(db_path))
    child.ok("create", sid="s1")
    child.ok("append", sid="s1", n=2, prefix="before")
    process.arm(arm_path, point, "crash")
    child.send(json.dumps({"op": "append", "sid": "s1", "n": 1, "prefix": "armed"}))
    assert child.readline() is None  # no reply: it died inside the call
    assert child.wait() == -9
    db = SessionDB(db_path)
    try:
        contents = [m["content"] for m in db.get_messages("s1")]
    finally:
        db.close()
    assert contents == ["before-0", "before-1"] + (["armed-0"] if durable else [])
    conn = sqlite3.connect(db_path)
    assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    conn.close()


# ------------------------------------------------------------------------------- schedule


def _steps(yaml_nemesis: str):
    sc = load_scenario_text(f"""
name: s
description: d
duration: 10s
roles: [{{name: gw, kind: gateway}}, {{name: cli, kind: cli}}]
nemesis:
{yaml_nemesis}
expect: {{integrity: {{}}}}
""")
    return sc.nemesis


def test_after_triggers_count_ops_events_and_steps():
    steps = _steps("""
  - {after: {role: gw, ok: 2}, fault: kill, role: cli}
  - {after: {role: gw, fail: 1, op: open}, fault: kill, role: cli}
  - {after: {event: checkpoint, count: 2, role: gw}, fault: kill, role: cli}
  - {after: {event: refusal}, fault: kill, role: cli}
  - {after: {step: 0, delay: 1.5s}, fault: kill, role: cli}
""")
    assert [s.after for s in steps] == [
        {"role": "gw", "ok": 2, "op": "append"}, {"role": "gw", "fail": 1, "op": "open"},
        {"event": "checkpoint", "count": 2, "role": "gw"}, {"event": "refusal", "count": 1},
        {"step": 0, "delay": 1.5}]
    counts = Counts()
    for rec, role in [({"type": "ok", "op": "append"}, "gw"), ({"type": "ok", "op": "append"},
                      "cli"), ({"type": "event", "event": "checkpoint"}, "cli"),
                      ({"type": "event", "event": "checkpoint"}, "gw")]:
        counts.add_record(rec, role)
    assert [reached(s.after, counts) for s in steps] == [False] * 5
    counts.add_record({"type": "ok", "op": "append"}, "gw")
    counts.add_record({"type": "fail", "op": "open"}, "gw")
    counts.add_record({"type": "event", "event": "checkpoint"}, "gw")
    counts.add_record({"type": "event", "event": "refusal"}, "cli")
    counts.steps_done.add(0)
    assert [reached(s.after, counts) for s in steps] == [True] * 5

    sched = Schedule(steps)
    assert [s.index for s in sched.due(3.0, counts)] == [0, 1, 2, 3]
    assert sched.due(4.4, counts) == []  # step 4 triggered at 3.0, fires 1.5 s later
    assert [s.index for s in sched.due(4.5, counts)] == [4]
    assert sched.pending == []


# ------------------------------------------------------------------- runs (real processes)


def _run(tmp_path: Path, text: str):
    result = run_scenario(load_scenario_text(text, "t.yaml"), out_dir=tmp_path / "runs",
                          console=Console(file=open(tmp_path / "console.txt", "w")))
    history = [json.loads(x) for x in (result.run_dir / "history.jsonl").read_text().splitlines()]
    return result, history


@pytest.mark.slow
@pytest.mark.parametrize("point", ["write.before_commit", "write.after_commit"])
def test_kill_at_a_crash_point_then_restart(tmp_path, point):
    result, history = _run(tmp_path, f"""
name: kill-at
description: kill at {point}, restart the slot
duration: 4s
roles: [{{name: gw, kind: gateway, workload: {{appends_per_s: 40}}}}]
nemesis:
  - {{after: {{role: gw, ok: 10}}, fault: kill, role: gw, failpoint: {point}}}
  - {{after: {{event: failpoint, role: gw}}, fault: restart, role: gw}}
expect: {{no_lost_writes: {{}}, integrity: {{}}}}
must_observe: [failpoint, restart]
""")
    assert result.exit_code == 0, result.results
    fired = [r for r in history if r.get("event") == "failpoint"]
    assert [(r["process"], r["name"], r["action"], r["hit"]) for r in fired] == [
        ("gw-0", point, "crash", 1)]
    exits = {r["process"]: r["exitcode"] for r in history
             if r["type"] == "process" and r["phase"] == "exit"}
    assert exits["gw-0"] == -9 and exits["gw-1"] == 0
    spawn1 = next(r for r in history if r["type"] == "process" and r["phase"] == "spawn"
                  and r["process"] == "gw-1")
    assert (spawn1["index"], spawn1["generation"], spawn1["replaces"]) == (0, 1, "gw-0")
    # The append in flight at the crash is info (unacknowledged); committed only after COMMIT.
    crashed = [r for r in history if r["type"] == "info" and r["process"] == "gw-0"
               and r.get("op") == "append"]
    assert len(crashed) == 1
    conn = sqlite3.connect(result.run_dir / "final" / "state.db")
    present = conn.execute("SELECT count(*) FROM messages WHERE platform_message_id = ?",
                           (crashed[0]["payload_id"],)).fetchone()[0]
    conn.close()
    assert present == (1 if point == "write.after_commit" else 0)
    assert any(r["type"] == "ok" and r["process"] == "gw-1" and r.get("op") == "append"
               for r in history)


@pytest.mark.slow
def test_phases_are_recorded_and_heal_resumes_a_stopped_process(tmp_path):
    result, history = _run(tmp_path, """
name: phases
description: stop a writer; the heal phase resumes it before the end
duration: 4s
phases: {heal_at: 2s}
roles: [{name: gw, kind: gateway, workload: {appends_per_s: 30}}]
nemesis:
  - {at: 0.8s, fault: stop, role: gw}
  - {after: {role: gw, ok: 100000}, fault: kill, role: gw}
expect: {no_lost_writes: {}}
""")
    phases = [r for r in history if r["type"] == "phase"]
    assert [p["phase"] for p in phases] == ["warm-up", "chaos", "heal", "recover"]
    heal = phases[2]
    assert heal["heal"]["sigcont"]["resumed"] == ["gw-0"]
    stopped = next(r for r in history if r["type"] == "nemesis" and r["fault"] == "stop"
                   and r["phase"] == "done")
    appends = [r["t"] for r in history if r["type"] == "ok" and r.get("op") == "append"]
    assert not [t for t in appends if stopped["t"] + 0.05 < t < heal["t"]], "frozen until heal"
    assert [t for t in appends if t > heal["t"]], "the writer commits again after the heal"
    # A step not fired by the heal never fires: the heal phase ends the faults.
    kill = [r["phase"] for r in history if r["type"] == "nemesis" and r["fault"] == "kill"]
    assert kill == ["never"]
    # ... and a declared step that never fired leaves the run INCONCLUSIVE (issue 27: liveness)
    verdicts = {v.checker: v for v in result.verdicts}
    assert verdicts["no_lost_writes"].status == "PASS"
    assert verdicts["liveness"].status == "INCONCLUSIVE"
    assert "step 1 kill never fired" in verdicts["liveness"].summary
    assert result.exit_code == 1, result.results


@pytest.mark.slow
def test_restart_storm_gives_every_instance_its_own_name_and_history(tmp_path):
    # The steps follow each other by events, but each restart waits for the instance it stops
    # to exit (up to 5 s each, by design): under load a SIGTERMed gateway took 3 s to close and
    # exit, so a 4 s run ended before the third restart. The run is as long as those waits.
    result, history = _run(tmp_path, """
name: storm
description: three restarts of a two-slot role
duration: 12s
roles: [{name: gw, kind: gateway, count: 2, workload: {appends_per_s: 30}}]
nemesis:
  - {at: 0.8s, fault: restart, role: gw}
  - {after: {step: 0, delay: 0.5s}, fault: restart, role: gw, index: 1, stop: terminate}
  - {after: {step: 1, delay: 0.5s}, fault: restart, role: gw, index: 0, stop: none}
expect: {no_lost_writes: {}, integrity: {}}
""")
    assert result.exit_code == 0, result.results
    spawns = [(r["process"], r["index"], r.get("generation", 0), r.get("replaces"))
              for r in history if r["type"] == "process" and r["phase"] == "spawn"]
    assert spawns == [("gw-0", 0, 0, None), ("gw-1", 1, 0, None), ("gw-2", 0, 1, "gw-0"),
                      ("gw-3", 1, 1, "gw-1"), ("gw-4", 1, 2, "gw-3"), ("gw-5", 0, 2, "gw-2")]
    exits = {r["process"]: r["exitcode"] for r in history
             if r["type"] == "process" and r["phase"] == "exit"}
    assert (exits["gw-0"], exits["gw-1"], exits["gw-3"]) == (-9, -9, 0)
    # stop: none left gw-2 running beside gw-5 until the end: both exit by themselves.
    assert exits["gw-2"] == 0 and exits["gw-5"] == 0
    # Each instance is its own OS process: its own pid on every record it wrote.
    pid_of = {r["process"]: r["child_pid"] for r in history
              if r["type"] == "process" and r["phase"] == "spawn"}
    assert len(set(pid_of.values())) == 6
    own = Counter((r["process"], r["pid"]) for r in history if r["type"] in ("invoke", "ok"))
    assert own and all(pid == pid_of[proc] for proc, pid in own)
    assert (result.run_dir / "history" / "gw-5.jsonl").exists()
