"""``python -m benchmarks`` runs end to end on tiny sizes and writes the results JSON (SPEC §17).

Shape only: speed is measured by the benchmarks themselves, never asserted in tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_quick_harness_writes_results_json(tmp_path):
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--scale", "0.02", "--only",
         "append,search,migration", "--out", str(out), "--cache", str(tmp_path / "cache")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode in (0, 1), res.stderr
    data = json.loads(out.read_text())
    assert data["mode"] == "quick" and data["total_s"] > 0
    assert {"cpu_count", "python", "sqlite", "packages"} <= set(data["machine"])
    assert [r["id"] for r in data["rows"]] == ["append", "search", "migration"]
    for row in data["rows"]:
        assert {"what", "reference", "unit", "ours", "ref", "ratio", "target", "pass"} <= set(row)
        assert {"median", "min", "max"} <= set(row["ours"]) and row["ours"]["median"] > 0
        assert row["ref"]["min"] <= row["ref"]["median"] <= row["ref"]["max"]
        assert row["pass"] in (True, False)
    assert "append" in res.stdout and str(out) in res.stdout


def test_unknown_row_is_a_usage_error(tmp_path):
    res = subprocess.run([sys.executable, "-m", "benchmarks", "--only", "nope"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "nope" in res.stderr
