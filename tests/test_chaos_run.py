"""End-to-end: `python -m chaos run` on real processes and a real store (SPEC §16.5).

These run small ad-hoc scenarios through the command line; each uses its own ``--out`` under
tmp_path. The shipped scenarios (``scenarios/*.yaml`` tagged ``ci``) are test items of the pytest
plugin (:mod:`chaos.pytest_plugin`), with their extra assertions in ``scenarios/conftest.py``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_chaos(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chaos", *args], cwd=cwd, capture_output=True,
                          text=True, timeout=180)


def only_run_dir(out: Path) -> Path:
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert len(dirs) == 1, dirs
    return dirs[0]


def test_invalid_scenario_exits_2_and_runs_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ndescription: x\nduration: 5s\nroles:\n"
                   "  - {name: g, kind: gateway}\nnemesis:\n  - {at: 9s, fault: kill, role: g}\n"
                   "expect: {integrity: {}}\n")
    out = tmp_path / "runs"
    proc = run_chaos("run", str(bad), "--out", str(out), cwd=ROOT)
    assert proc.returncode == 2
    assert f"{bad}:7: nemesis[0].at" in proc.stderr
    assert not out.exists()


def test_a_fault_that_never_fires_is_not_green(tmp_path):
    # stale_wal_refusal needs a delete_sidecars fault; the scenario declares none, so the
    # checker must say INCONCLUSIVE and the run must exit 1 (a run that tested nothing).
    sc = tmp_path / "nothing.yaml"
    sc.write_text("name: nothing\ndescription: no fault at all\nduration: 1.5s\nroles:\n"
                  "  - {name: g, kind: gateway, workload: {appends_per_s: 20}}\n"
                  "expect:\n  stale_wal_refusal: {holder: g}\n  no_lost_writes: {}\n")
    out = tmp_path / "runs"
    proc = run_chaos("run", str(sc), "--out", str(out), "--json", cwd=ROOT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    verdicts = {v["checker"]: v["status"] for v in results["verdicts"]}
    assert verdicts == {"stale_wal_refusal": "INCONCLUSIVE", "no_lost_writes": "PASS",
                        "liveness": "PASS"}


def test_kill_mid_run_leaves_unknown_outcomes_as_info_and_loses_no_ack(tmp_path):
    sc = tmp_path / "kill.yaml"
    # Killed after its 30th acknowledged append, whenever that is on a loaded machine.
    sc.write_text("name: kill\ndescription: SIGKILL a writer mid-run\nduration: 4s\nroles:\n"
                  "  - {name: g, kind: gateway, workload: {appends_per_s: 0}}\n"
                  "nemesis:\n  - {after: {role: g, ok: 30}, fault: kill, role: g}\n"
                  "expect:\n  no_lost_writes: {}\n  integrity: {}\n")
    out = tmp_path / "runs"
    proc = run_chaos("run", str(sc), "--out", str(out), "--json", cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["processes"][0]["exitcode"] == -9
    history = [json.loads(line)
               for line in (only_run_dir(out) / "history.jsonl").read_text().splitlines()]
    assert any(r["type"] == "nemesis" and r["fault"] == "kill" and r["phase"] == "done"
               for r in history)


def test_validate_and_list(tmp_path):
    proc = run_chaos("validate", *map(str, sorted((ROOT / "scenarios").glob("*.yaml"))), cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    listing = run_chaos("list", str(ROOT / "scenarios"), cwd=ROOT)
    assert "stale_wal.yaml" in listing.stdout and "contention.yaml" in listing.stdout
    missing = run_chaos("list", str(tmp_path / "nope"), cwd=ROOT)
    assert missing.returncode == 2 and "no scenario directory" in missing.stderr


def test_matrix_subcommand_runs_one_cell(tmp_path):
    proc = run_chaos("matrix", "--versions", "21", "--no-real", "--modes", "plain", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "v21/plain" in proc.stdout and "PASS" in proc.stdout


def test_toolkit_failure_exits_3(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    proc = run_chaos("run", str(ROOT / "scenarios" / "stale_wal.yaml"), "--out", str(blocker),
                     cwd=ROOT)
    assert proc.returncode == 3
    assert "chaos:" in proc.stderr and "Traceback" not in proc.stderr


def test_a_fault_that_fails_to_apply_makes_the_run_inconclusive(tmp_path):
    # Not listed in must_observe: the failed step alone must keep the run from looking green.
    sc = tmp_path / "badfault.yaml"
    sc.write_text("name: badfault\ndescription: a fault on a table that does not exist\n"
                  "duration: 2s\nroles:\n  - {name: g, kind: gateway, workload: {appends_per_s: 20}}\n"
                  "nemesis:\n  - {at: 0.5s, fault: corrupt_page, table: nosuch}\n"
                  "expect:\n  integrity: {}\n")
    out = tmp_path / "runs"
    proc = run_chaos("run", str(sc), "--out", str(out), "--json", cwd=ROOT)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    verdicts = {v["checker"]: v for v in results["verdicts"]}
    assert verdicts["integrity"]["status"] == "PASS"
    assert verdicts["liveness"]["status"] == "INCONCLUSIVE"
    assert "step 0 corrupt_page failed" in verdicts["liveness"]["summary"]
