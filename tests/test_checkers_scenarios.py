"""Checkers on real runs: shipped scenarios whose verdict depends on what really happened.

Each runs ``python -m chaos run`` (real processes, a real SIGKILL, real file deletion) with its own
``--out`` under tmp_path, then recomputes the expected figure from the history independently of
the checker.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.checkers.store import payload_ids_in_db

ROOT = Path(__file__).resolve().parents[1]


def run_scenario_file(name: str, tmp_path: Path) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "chaos", "run", str(ROOT / "scenarios" / name),
                           "--out", str(out)], cwd=ROOT, capture_output=True, text=True,
                          timeout=180)
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    return proc, run_dir


@pytest.mark.slow
def test_wal_deleted_after_crash_reports_exactly_the_lost_writes(tmp_path):
    proc, run_dir = run_scenario_file("wal_deleted_after_crash.yaml", tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    results = json.loads((run_dir / "results.json").read_text())
    verdict = next(v for v in results["verdicts"] if v["checker"] == "no_lost_writes")
    assert verdict["status"] == "PASS" and verdict["figures"]["expect_loss"] is True
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    gw = [r for r in history if r.get("process") == "gateway-0"]
    # The failpoint killed the gateway (a real SIGKILL) after its cadence checkpoint ...
    exit_rec = next(r for r in history if r.get("type") == "process" and r.get("phase") == "exit"
                    and r.get("process") == "gateway-0")
    assert exit_rec["exitcode"] == -9
    last_cp = max(i for i, r in enumerate(gw) if r.get("type") == "event"
                  and r.get("event") == "checkpoint")
    # ... so the acknowledged appends invoked after that checkpoint lived only in the deleted
    # WAL (the append whose write triggered the cadence checkpoint records its ok after it).
    invoked_after = {r["op_id"] for r in gw[last_cp:] if r["type"] == "invoke"}
    oks = [r for r in gw if r["type"] == "ok" and r["op"] == "append"]
    expected = [r["payload_id"] for r in oks if r["op_id"] in invoked_after]
    before = [r["payload_id"] for r in oks if r["op_id"] not in invoked_after]
    assert expected, "the run never left acknowledged frames in the WAL"
    assert verdict["figures"]["lost_payload_ids"] == expected
    assert verdict["figures"]["lost_by_process"] == {"gateway-0": len(expected)}
    store = payload_ids_in_db(run_dir / "final" / "state.db")
    assert not set(expected) & set(store)
    assert set(before) <= set(store)
    # the new writer worked on the store that lost them
    assert any(p.startswith("after-0") for p in store)
    # The runner's sampler watched it: the gateway held one WAL generation, the new writer one
    # (the inode number may be reused once the first is gone), nobody wrote into a retired one.
    samples = [r for r in history if r["type"] == "sample"]
    first = {e["wal"]["ino"] for s in samples for e in s["procs"]
             if e["process"] == "gateway-0" and e.get("wal")}
    second = {e["wal"]["ino"] for s in samples for e in s["procs"]
              if e["process"] == "after-0" and e.get("wal")}
    assert len(first) == 1 and len(second) == 1
    swg = next(v for v in results["verdicts"] if v["checker"] == "single_wal_generation")
    assert swg["status"] == "PASS" and swg["figures"]["samples_with_a_holder"] >= 5
