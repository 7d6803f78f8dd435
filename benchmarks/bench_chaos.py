"""``python -m chaos run`` wall time vs the scenario's own duration (SPEC §17, last row).

Runs ``benchmarks/chaos_3roles.yaml`` (three roles, 10 s, no faults) as a real subprocess,
``--out`` a temporary directory, and reports ``wall - duration`` as the runner's overhead
(spawn, checkers, report); SPEC §17 target <= 2 s.

Usage: ``python benchmarks/bench_chaos.py [--runs 3]``
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
SCENARIO = Path(__file__).resolve().parent / "chaos_3roles.yaml"


def scenario_duration(path: Path = SCENARIO) -> float:
    """The ``duration`` of the scenario file in seconds (``"10s"`` or a number)."""
    raw = yaml.safe_load(path.read_text())["duration"]
    return float(str(raw).rstrip("s"))


def run_once(path: Path = SCENARIO) -> dict:
    """One ``python -m chaos run``; ``{"wall_s", "duration_s", "overhead_s", "exit"}``."""
    out = Path(tempfile.mkdtemp(prefix="bench-chaos-"))
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    try:
        t = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "chaos", "run", str(path), "--out", str(out)],
                             cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
        wall = time.perf_counter() - t
    finally:
        shutil.rmtree(out, ignore_errors=True)
    duration = scenario_duration(path)
    return {"wall_s": wall, "duration_s": duration, "overhead_s": wall - duration,
            "exit": res.returncode, "stderr_tail": res.stderr[-500:] if res.returncode else ""}


def measure(runs: int = 3) -> list[dict]:
    """``runs`` x :func:`run_once`."""
    return [run_once() for _ in range(runs)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    res = measure(args.runs)
    over = [r["overhead_s"] for r in res]
    print(f"chaos run overhead: median {statistics.median(over):.2f} s "
          f"({min(over):.2f}-{max(over):.2f}), exits {[r['exit'] for r in res]}; target <= 2 s")
    return 0 if statistics.median(over) <= 2.0 and all(r["exit"] == 0 for r in res) else 1


if __name__ == "__main__":
    sys.exit(main())
