"""A tier that cannot run is SKIPPED everywhere, never a pass (issue 27 items 2, 3, 10, 12).

The README's set-up installs ``.[test]`` without ``.[fs]``: the faulty-filesystem scenarios cannot
mount anything. Here ``mfusepy`` is made unimportable for the child processes (a module of that
name that raises ImportError, first on ``PYTHONPATH``), exactly as on such a machine, and every
output is read: the console (the install hint verbatim: rich must not eat ``[fs]``), the final
one-line total, ``results.json`` (top-level ``verdict``), ``report.html``, the exit code (4), the
gate's table, short summary, final line and JUnit ``<skipped/>``, and the pytest item.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
HINT = "pip install -e '.[fs]'"


def _env(tmp_path: Path) -> dict:
    blocker = tmp_path / "no-fs-extra"
    blocker.mkdir(exist_ok=True)
    (blocker / "mfusepy.py").write_text(
        "raise ImportError(\"No module named 'mfusepy'\")\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocker), str(ROOT)]),
            "COLUMNS": "200"}


def test_chaos_run_of_an_fs_scenario_without_the_extra_is_skipped_everywhere(tmp_path):
    out = tmp_path / "runs"
    proc = subprocess.run([sys.executable, "-m", "chaos", "run",
                           str(ROOT / "scenarios" / "fs_power_cut_writers.yaml"), "--out", str(out)],
                          cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert HINT in proc.stdout  # the hint, brackets included (rich markup used to eat "[fs]")
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("total: 1 run, SKIPPED (exit 4)") and HINT in last, last
    (run_dir,) = out.iterdir()
    results = json.loads((run_dir / "results.json").read_text())
    assert results["verdict"] == "SKIPPED" and results["exit_code"] == 4
    assert {v["status"] for v in results["verdicts"]} == {"SKIPPED"}
    assert HINT in results["skipped"]
    page = (run_dir / "report.html").read_text()
    assert 'data-verdict="SKIPPED"' in page and "pip install -e &#x27;.[fs]&#x27;" in page


def test_the_gate_shows_an_fs_scenario_without_the_extra_as_skipped(tmp_path):
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    for name in ("fs_power_cut_writers.yaml", "stale_wal.yaml"):
        (scenarios / name).write_text((ROOT / "scenarios" / name).read_text())
    junit = tmp_path / "gate.xml"
    proc = subprocess.run([sys.executable, "-m", "chaos", "gate", "--no-matrix", "--scenarios",
                           str(scenarios), "--out", str(tmp_path / "out"), "--junit", str(junit)],
                          cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True,
                          timeout=600)
    text = proc.stdout
    assert proc.returncode == 0, text[-4000:] + proc.stderr[-3000:]  # something was tested
    row = next(line for line in text.splitlines() if "fs_power_cut_writers.yaml seed151" in line
               and "│" in line)
    assert "SKIPPED" in row and "checkers passed" not in row
    summary = text[text.index("short summary: 1 of 2 rows did not pass"):]
    line = summary.splitlines()[1]
    assert line.startswith("SKIPPED") and "fs_power_cut_writers.yaml seed151" in line
    assert HINT in line and str(tmp_path / "out" / "runs") in line
    assert "gate: 1 rows passed, 1 skipped, 0 not passed" in text.strip().splitlines()[-1]
    root = ET.parse(junit).getroot()
    assert root.get("skipped") == "1" and root.get("failures") == "0"
    case = next(c for c in root.iter("testcase") if "fs_power_cut" in c.get("classname"))
    skipped = case.find("skipped")
    assert skipped is not None and HINT in skipped.get("message")
    assert case.find("failure") is None


def test_a_gate_whose_every_row_is_skipped_is_not_green(tmp_path):
    scenarios = tmp_path / "scenarios"
    scenarios.mkdir()
    name = "fs_power_cut_full.yaml"
    (scenarios / name).write_text((ROOT / "scenarios" / name).read_text())
    proc = subprocess.run([sys.executable, "-m", "chaos", "gate", "--no-matrix", "--scenarios",
                           str(scenarios), "--out", str(tmp_path / "out")],
                          cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 4, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1].endswith("(SKIPPED)")


def test_the_pytest_item_of_an_fs_scenario_without_the_extra_is_skipped(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rs",
                           str(ROOT / "scenarios" / "fs_power_cut_full.yaml"),
                           "--rootdir", str(tmp_path), "-o", f"cache_dir={tmp_path}/.cache"],
                          cwd=tmp_path, env=_env(tmp_path), capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "1 skipped" in proc.stdout and "passed" not in proc.stdout.splitlines()[-1]
    assert "every checker SKIPPED" in proc.stdout and HINT in proc.stdout
