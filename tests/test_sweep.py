"""Sweep mode (SPEC §16.2): kill -9 at every hit of a failpoint in turn, checking after each."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from chaos.sweep import run as run_scenario
from chaos.scenario import load_scenario, load_scenario_text
from chaos.sweep import scenario_for

ROOT = Path(__file__).resolve().parents[1]

SWEEP = """
name: sw
description: a cli crashed at every hit of {fp}
duration: 3s
roles:
  - {{name: victim, kind: cli, failpoints: "checkpoint.after=off",
     workload: {{burst: 1, title: false}}}}
sweep: {{failpoint: {fp}, role: victim, max: {max}}}
expect: {{integrity: {{}}}}
"""


def test_scenario_for_arms_crash_at_n_in_the_swept_role_only():
    sc = load_scenario_text(SWEEP.format(fp="write.before_commit", max=5))
    assert sc.sweep == {"failpoint": "write.before_commit", "role": "victim", "max": 5}
    s3 = scenario_for(sc, 3)
    assert s3.sweep is None and s3.role("victim").failpoints == (
        "checkpoint.after=off,write.before_commit=crash@3")
    assert sc.role("victim").failpoints == "checkpoint.after=off"  # unchanged
    with pytest.raises(ValueError):
        scenario_for(sc, 0)


def _sweep(tmp_path, text):
    return run_scenario(load_scenario_text(text, "sw.yaml"), out_dir=tmp_path / "runs",
                        console=Console(file=open(tmp_path / "console.txt", "w")))


@pytest.mark.slow
def test_shipped_sweep_crashes_at_every_hit_until_the_cli_completes(tmp_path):
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "chaos", "run",
                           str(ROOT / "scenarios" / "sweep_before_commit.yaml"), "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (sweep_dir,) = out.iterdir()
    results = json.loads((sweep_dir / "results.json").read_text())
    runs = results["runs"]
    # create_session, the append, end_session: three write transactions, then a clean run.
    assert [(r["n"], r["reached"]) for r in runs] == [(1, True), (2, True), (3, True), (4, False)]
    for r in runs:
        assert set(r["verdicts"].values()) == {"PASS"}, r
        hist = [json.loads(x) for x in (Path(r["run_dir"]) / "history.jsonl").read_text()
                .splitlines()]
        exit_code = next(x["exitcode"] for x in hist if x["type"] == "process"
                         and x["phase"] == "exit" and x["process"] == "victim-0")
        assert exit_code == (-9 if r["reached"] else 0)
    verdicts = {v["checker"]: v["status"] for v in results["verdicts"]}
    assert verdicts == {"no_lost_writes": "PASS", "integrity": "PASS", "recovery": "PASS",
                        "error_taxonomy": "PASS", "liveness": "PASS", "sweep": "PASS"}
    assert "crashed at every hit N = 1..3, completed at N = 4" in proc.stdout
    resolved = load_scenario_text((sweep_dir / "scenario.resolved.json").read_text())
    assert resolved.sweep == {"failpoint": "write.before_commit", "role": "victim", "max": 50}


@pytest.mark.slow
def test_a_sweep_still_crashing_at_max_is_inconclusive_and_exits_1(tmp_path):
    result = _sweep(tmp_path, SWEEP.format(fp="write.before_commit", max=2))
    assert result.exit_code == 1
    assert [(r["n"], r["reached"]) for r in result.results["runs"]] == [(1, True), (2, True)]
    sweep = next(v for v in result.verdicts if v.checker == "sweep")
    assert sweep.status == "INCONCLUSIVE" and "still crashing at N = 2" in sweep.summary


@pytest.mark.slow
def test_a_sweep_that_never_reaches_its_failpoint_tested_nothing(tmp_path):
    result = _sweep(tmp_path, SWEEP.format(fp="capture.mid_copy", max=5))
    assert result.exit_code == 1
    assert [(r["n"], r["reached"]) for r in result.results["runs"]] == [(1, False)]
    sweep = next(v for v in result.verdicts if v.checker == "sweep")
    assert sweep.status == "INCONCLUSIVE" and "never reached" in sweep.summary


def test_the_shipped_sweep_scenario_is_valid():
    sc = load_scenario(ROOT / "scenarios" / "sweep_before_commit.yaml")
    assert sc.sweep["failpoint"] == "write.before_commit"


def test_aggregate_takes_the_worst_status_and_names_the_failing_n():
    from chaos.checkers.base import Verdict
    from chaos.sweep import _aggregate

    runs = [{"n": 1}, {"n": 2}, {"n": 3}]
    per_run = [[Verdict("integrity", "PASS", "ok"), Verdict("recovery", "SKIPPED", "no")],
               [Verdict("integrity", "FAIL", "malformed", evidence=[{"x": 1}]),
                Verdict("recovery", "PASS", "ok")],
               [Verdict("integrity", "INCONCLUSIVE", "?"), Verdict("recovery", "PASS", "ok")]]
    integrity, recovery = _aggregate(runs, per_run)
    assert (integrity.status, recovery.status) == ("FAIL", "PASS")
    assert integrity.summary == "FAIL at N = 2, 3 (N = 2: malformed)"
    assert integrity.figures["per_n"] == {"1": "PASS", "2": "FAIL", "3": "INCONCLUSIVE"}
    assert integrity.evidence == [{"x": 1}]
    assert recovery.summary == "PASS at every N = 1..3"
