"""Wall time of the two suites a change waits for: ``chaos gate`` and ``pytest -n auto``.

Both run as the developer runs them, in a new process from the repository root, with JUnit XML
written to a temporary file; the ten slowest test cases (gate: scenario runs and matrix cells;
pytest: tests, setup and call together) are read back from it. Targets (issue 18): gate
<= 10 min, pytest <= 4 min on 2 cores. ``quick`` runs a small subset of each (one scenario
file and the plain matrix cells at two versions; one test module without xdist) so that
``--quick`` covers the row.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUICK_SCENARIO = "sweep_before_commit.yaml"
QUICK_TESTS = "tests/test_store_basics.py"


def _slowest(junit: Path, n: int = 10) -> list[tuple[float, str]]:
    """The ``n`` slowest ``testcase`` elements of a JUnit file: ``[(seconds, name)]``."""
    try:
        root = ET.parse(junit).getroot()
    except (OSError, ET.ParseError):
        return []
    cases: dict[str, float] = {}
    for case in root.iter("testcase"):
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        cases[name] = cases.get(name, 0.0) + float(case.get("time") or 0.0)
    return sorted(((t, name) for name, t in cases.items()), reverse=True)[:n]


def _run(argv: list[str], junit: Path, timeout: float) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    t = time.perf_counter()
    try:
        p = subprocess.run(argv, cwd=REPO, env=env, capture_output=True, text=True,
                           timeout=timeout)
        code, tail = p.returncode, (p.stdout + p.stderr)[-1500:]
    except subprocess.TimeoutExpired:
        code, tail = -1, f"timed out after {timeout:.0f} s"
    return {"wall_s": time.perf_counter() - t, "exit": code, "tail": tail,
            "slowest": _slowest(junit), "command": " ".join(argv[2:] if argv[1] == "-m"
                                                              else argv)}


def measure_gate(quick: bool, work: Path) -> dict:
    """``python -m chaos gate`` (full) or a one-scenario, quick-matrix subset."""
    junit = work / "gate.xml"
    argv = [sys.executable, "-m", "chaos", "gate", "--junit", str(junit), "--out",
            str(work / "gate")]
    if quick:
        scen = work / "scenarios"
        scen.mkdir()
        shutil.copy(REPO / "scenarios" / QUICK_SCENARIO, scen)
        argv += ["--scenarios", str(scen), "--quick", "--versions", "1,22", "--modes", "plain"]
    res = _run(argv, junit, 3600)
    res["what"] = ("python -m chaos gate" + (f" (quick subset: {QUICK_SCENARIO}, matrix plain "
                                             "v1,v22)" if quick else " (every scenario + matrix)"))
    res["command"] = "python -m " + " ".join(argv[2:])
    return res


def measure_pytest(quick: bool, work: Path) -> dict:
    """``pytest -n auto`` (the whole suite) or one module."""
    junit = work / "pytest.xml"
    argv = [sys.executable, "-m", "pytest", "-n", "0" if quick else "auto", "-q", "-p",
            "no:cacheprovider", f"--junitxml={junit}"]
    if quick:
        argv.append(QUICK_TESTS)
    res = _run(argv, junit, 3600)
    res["what"] = (f"pytest -n 0 {QUICK_TESTS} (quick subset; the full run is pytest -n auto)"
                   if quick else "pytest -n auto (the whole suite)")
    res["command"] = "python -m " + " ".join(argv[2:])
    return res


def measure(quick: bool = False) -> dict:
    """``{"gate": {...}, "pytest": {...}}``: ``wall_s``, ``exit``, ``slowest`` [(s, name)],
    ``what``, ``command``, ``tail`` (last output)."""
    work = Path(tempfile.mkdtemp(prefix="bench-suites-"))
    try:
        return {"gate": measure_gate(quick, work), "pytest": measure_pytest(quick, work)}
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    import json

    print(json.dumps(measure(quick="--quick" in sys.argv), indent=1))
