"""The gate on a loaded machine (issue 27 items 5, 6): an INCONCLUSIVE row and a row failed only
by a wall-clock bound run once more and are reported as FLAKY with both results when the rerun
passes; a FAIL of an invariant (lost writes, integrity) is never rerun and never hidden; the gate
ends with pytest's kind of short summary (each row that did not pass, its one-line reason, its run
directory) and one final line.

The jobs are real child processes printing a ``results.json`` line as ``chaos run --json`` does
(first attempt / second attempt told apart by a file they leave), run by the real :class:`Gate`.
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

from chaos.gate import Gate, Job, rerun_reason, write_junit
from chaos.report.gate import (FLAKY, GateRow, combine, final_line, gate_status,
                               short_summary)

REPO = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, pathlib, sys
mark = pathlib.Path(sys.argv[1])
first = not mark.exists()
mark.write_text("ran")
status, checker, summary = json.loads(sys.argv[2 if first else 3])
run_dir = str(mark.parent / ("run-1" if first else "run-2"))
verdicts = [{"checker": "integrity", "status": "PASS", "summary": "ok"},
            {"checker": checker, "status": status, "summary": summary}]
code = {"PASS": 0, "SKIPPED": 4}.get(status, 1)
print(json.dumps({"run_dir": run_dir, "verdicts": verdicts, "exit_code": code,
                  "verdict": status, "load": {"factor": 1.7}}))
sys.exit(code)
"""


def job(tmp_path: Path, first: tuple, second: tuple, name: str = "x.yaml") -> Job:
    return Job(f"{name} seed1", [sys.executable, "-c", CHILD, str(tmp_path / f"{name}.mark"),
                                 json.dumps(first), json.dumps(second)], "scenario", False,
               {"file": name, "seed": 1, "duration": 1})


def run_jobs(tmp_path: Path, *jobs: Job) -> tuple[list[GateRow], str]:
    buf = io.StringIO()
    gate = Gate(tmp_path / "out", 2, Console(file=buf, width=200))
    return gate.run(list(jobs)), buf.getvalue()


def runs_of(tmp_path: Path, name: str = "x.yaml") -> int:
    return len(list((tmp_path / "out" / "logs").glob(f"{name}*.log")))


def test_an_inconclusive_row_that_passes_on_its_rerun_is_flaky_with_both_results(tmp_path):
    (row,) = rows = run_jobs(tmp_path, job(
        tmp_path, ("INCONCLUSIVE", "must_observe", "never observed: write_lock_held"),
        ("PASS", "must_observe", "observed write_lock_held")))[0]
    assert row.status == FLAKY
    assert row.summary == ("first INCONCLUSIVE: must_observe INCONCLUSIVE: never observed: "
                           "write_lock_held; rerun PASS")
    assert row.first["run_dir"].endswith("run-1") and row.run_dir.endswith("run-2")
    assert row.load_factor == 1.7 and runs_of(tmp_path) == 2
    assert gate_status(rows) == "PASS"
    lines = [str(t) for t in short_summary(rows)]
    assert lines[0] == "short summary: 1 of 1 rows did not pass"
    assert lines[1].startswith("FLAKY        x.yaml seed1: first INCONCLUSIVE")
    assert "run-2 (first run " in lines[1] and lines[1].endswith("run-1)")
    assert str(final_line(rows, 3.0)).startswith(
        "gate: 1 rows passed (1 flaky: passed on a rerun), 0 skipped, 0 not passed")
    junit = tmp_path / "j.xml"
    write_junit(junit, rows, 3.0)
    case = next(ET.parse(junit).getroot().iter("testcase"))
    assert case.find("failure") is None and "FLAKY" in case.find("system-out").text
    assert "run-1" in case.find("system-out").text


def test_a_timing_bound_fail_is_rerun_and_the_worse_result_stands_when_it_repeats(tmp_path):
    (row,), out = run_jobs(tmp_path, job(
        tmp_path, ("FAIL", "no_lockup", "1 op(s) waited longer than 5 s"),
        ("INCONCLUSIVE", "liveness", "gateway-3 performed no operation")))
    assert row.status == "FAIL" and runs_of(tmp_path) == 2
    assert "first FAIL: no_lockup FAIL" in row.summary
    assert "rerun INCONCLUSIVE: liveness INCONCLUSIVE" in row.summary
    assert "rerun x.yaml seed1: timing-bound FAIL (no_lockup)" in out
    assert gate_status([row]) == "FAIL"


@pytest.mark.parametrize("checker", ["no_lost_writes", "integrity", "durability"])
def test_a_fail_of_an_invariant_is_never_rerun(tmp_path, checker):
    (row,), _ = run_jobs(tmp_path, job(tmp_path, ("FAIL", checker, "3 ok appends lost"),
                                       ("PASS", checker, "fine")))
    assert row.status == "FAIL" and row.first is None and runs_of(tmp_path) == 1
    assert rerun_reason(row) is None


def test_an_inconclusive_rerun_that_fails_an_invariant_is_a_fail(tmp_path):
    (row,), _ = run_jobs(tmp_path, job(
        tmp_path, ("INCONCLUSIVE", "liveness", "step 0 power_cut never fired"),
        ("FAIL", "no_lost_writes", "2 acknowledged appends lost")))
    assert row.status == "FAIL" and "no_lost_writes FAIL" in row.summary


def test_combine_keeps_the_worse_status_and_a_skipped_row_is_not_rerun():
    a = GateRow("scenario", "x.yaml", "seed1", "FAIL", "no_lockup FAIL: 6.01 s", run_dir="r1",
                failed_checkers=["no_lockup"])
    b = GateRow("scenario", "x.yaml", "seed1", "INCONCLUSIVE", "must_observe", run_dir="r2")
    assert combine(a, b).status == "FAIL" and combine(b, a).status == "FAIL"
    skipped = GateRow("scenario", "fs.yaml", "seed1", "SKIPPED", "every checker SKIPPED")
    assert rerun_reason(skipped) is None
    matrix = GateRow("matrix", "matrix.v3", "plain", "INCONCLUSIVE", "?")
    assert rerun_reason(matrix) is None
    mixed = GateRow("scenario", "x.yaml", "seed1", "FAIL", "", failed_checkers=["no_lockup",
                                                                              "integrity"])
    assert rerun_reason(mixed) is None


def test_the_gate_ends_with_the_rows_that_did_not_pass_and_their_run_directories(tmp_path):
    """A real gate run: one passing scenario, one failing an invariant. Before issue 27 it ended
    with the table sorted by name and a count; now a short summary names the failing row, its
    reason and its run directory, then one final line."""
    sc = tmp_path / "scenarios"
    sc.mkdir()
    from test_gate import FAILING, PASSING

    (sc / "tiny.yaml").write_text(PASSING)
    (sc / "cadence.yaml").write_text(FAILING)
    proc = subprocess.run([sys.executable, "-m", "chaos", "gate", "--scenarios", str(sc),
                           "--no-matrix", "--out", str(tmp_path / "out")], cwd=REPO,
                          capture_output=True, text=True, timeout=600,
                          env={**__import__("os").environ, "COLUMNS": "150"})
    assert proc.returncode == 1, proc.stdout + proc.stderr
    tail = proc.stdout[proc.stdout.index("short summary"):].strip().splitlines()
    assert tail[0] == "short summary: 1 of 2 rows did not pass"
    assert tail[1].startswith("FAIL         cadence.yaml seed9: checkpoint_cadence FAIL")
    run_dir = tail[1].rsplit(" -- ", 1)[1]
    assert Path(run_dir).is_dir() and Path(run_dir).parent == tmp_path / "out" / "runs"
    assert tail[2].startswith("gate: 1 rows passed, 0 skipped, 1 not passed (1 FAIL")
    assert tail[2].endswith("(FAIL)") and len(tail) == 3
    assert len(list((tmp_path / "out" / "runs").iterdir())) == 2  # an invariant FAIL: no rerun
