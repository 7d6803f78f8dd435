"""``python -m chaos shrink``: a smaller scenario that still fails the same checker.

The search itself is checked with a pure predicate in place of a run (fast, exact); one
end-to-end test shrinks a real failing run and runs the result again.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from chaos.scenario import load_scenario, load_scenario_text
from chaos.shrink import ShrinkError, Shrinker, Target, load_failure

REPO = Path(__file__).resolve().parent.parent

# checkpoint_cadence with every: 3 fails for any writer that makes 3 writes (the store
# checkpoints every 50th): deterministic, whatever the machine's load.
FAILING = """\
name: cadence-fail
description: A cadence of 3 writes is expected; the store checkpoints every 50, so it fails.
seed: 5
duration: 3s
roles:
  - {name: locker, kind: lock_holder, count: 1, workload: {first_at: 0.3s, hold: 0.2s, every: 1s}}
  - {name: writer, kind: gateway, count: 2, workload: {appends_per_s: 0, sessions: 2}}
nemesis:
  - {at: 0.8s, fault: stop, role: locker}
expect:
  checkpoint_cadence: {every: 3}
  integrity: {}
"""


def _doc(text: str = FAILING) -> dict:
    return load_scenario_text(text).to_dict()


def test_search_removes_everything_the_failure_does_not_need():
    doc = _doc(FAILING.replace("duration: 3s", "duration: 8s"))
    calls = []

    def run(candidate):  # fails iff a gateway role runs for at least 2 s
        calls.append(candidate)
        writer = any(r["kind"] == "gateway" for r in candidate["roles"])
        return ("FAIL" if writer and candidate["duration"] >= 2 else "INCONCLUSIVE"), "dir"

    s = Shrinker(doc, Target("checkpoint_cadence", "FAIL"), run, max_runs=50, min_duration=1)
    res = s.shrink()
    best = res.scenario
    assert [r["name"] for r in best["roles"]] == ["writer"]
    assert best["roles"][0]["count"] == 1
    assert best["nemesis"] == [] and best["expect"] == {"checkpoint_cadence": {"every": 3}}
    assert best["duration"] == 2.0            # 8 -> 4 -> 2 kept, 1 undone
    assert 1 <= best["roles"][0]["workload"]["appends_per_s"] < 2  # 0 -> 50 -> halved to >= 1
    assert res.runs == len(calls) <= 50
    assert any("without checkers integrity" in r for r in res.removed)
    assert any(a.ran and not a.accepted and a.status == "INCONCLUSIVE" for a in res.attempts)
    load_scenario_text(json.dumps(best))  # still a valid scenario


def test_search_respects_the_budget_and_skips_invalid_candidates_without_a_run():
    doc = _doc(FAILING.replace("  integrity: {}\n", "  integrity: {}\n  stale_wal_refusal: "
                               "{holder: writer}\n"))
    doc["roles"].reverse()  # the writer first: ddmin tries to remove it first
    runs = []
    s = Shrinker(doc, Target("stale_wal_refusal", "FAIL"),
                 lambda c: (runs.append(c) or "FAIL", "dir"), max_runs=3)
    res = s.shrink()
    assert res.runs == len(runs) == 3
    # The writer role is named by the checker: removing it is invalid and never run.
    assert all(any(r["name"] == "writer" for r in c["roles"]) for c in runs)
    assert any(not a.ran and "not a role" in a.reason for a in res.attempts)


def test_a_run_without_a_failure_is_refused(tmp_path):
    with pytest.raises(ShrinkError, match="not a finished run directory"):
        load_failure(tmp_path)
    (tmp_path / "scenario.resolved.json").write_text(json.dumps(_doc()))
    (tmp_path / "results.json").write_text(json.dumps(
        {"verdicts": [{"checker": "integrity", "status": "PASS"}]}))
    with pytest.raises(ShrinkError, match="every checker passed"):
        load_failure(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "chaos", "shrink", str(tmp_path)], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "nothing to shrink" in proc.stderr


def _run(*args, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "chaos", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


@pytest.mark.slow
def test_shrinking_a_real_failing_run(tmp_path):
    sc = tmp_path / "fail.yaml"
    sc.write_text(FAILING)
    out = tmp_path / "runs"
    first = _run("run", sc, "--out", out)
    assert first.returncode == 1, first.stdout[-2000:]
    run_dir = next(out.iterdir())
    shrink = _run("shrink", run_dir, "--max-runs", 3)
    assert shrink.returncode == 0, shrink.stdout + shrink.stderr
    path = run_dir / "shrunk.yaml"
    text = path.read_text()
    assert text.startswith("# Shrunk by `python -m chaos shrink`")
    assert "# Still fails: checkpoint_cadence FAIL, confirmed by the run in" in text
    header = [line for line in text.splitlines() if line.startswith("#")]
    assert header[-3:] == ["#   - without nemesis step stop locker at 0.8s",
                           "#   - without role locker (1 instance(s))",
                           "#   - role writer count 2 -> 1"]
    small = load_scenario(path)
    original = load_scenario(sc)
    assert len(small.nemesis) < len(original.nemesis)
    assert sum(r.count for r in small.roles) < sum(r.count for r in original.roles)
    assert list(small.expect) == ["checkpoint_cadence"]
    doc = yaml.safe_load(text)
    assert doc["seed"] == 5
    # The shrunk scenario still fails the same checker when run again.
    again = _run("run", path, "--out", tmp_path / "again", "--json")
    assert again.returncode == 1
    verdicts = {v["checker"]: v["status"]
                for v in json.loads(again.stdout.strip().splitlines()[-1])["verdicts"]}
    assert verdicts == {"checkpoint_cadence": "FAIL", "liveness": "PASS"}
