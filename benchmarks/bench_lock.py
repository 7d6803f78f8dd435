"""The checkpoint lock's cost (issue 12): the same workloads with and without it, side by side.

``HERMES_STATE_CHECKPOINT_LOCK=off`` switches the lock off in every process of a run (the
writers inherit the environment); runs alternate on/off on fresh stores:

* ``append``   one process, ``SessionDB.append_message`` x n (two ``flock`` calls per write and
  an exclusive one per checkpoint);
* ``writers8`` 8 writer processes at full speed (bench_contention's workload): throughput and
  p99, where writers now wait for every checkpoint;
* ``stall``    4 writers at full speed while a foreign client holds ``BEGIN IMMEDIATE`` for
  0.3 s every 0.7 s (the stall of ``scenarios/lock_stall.yaml``): p99 and throughput.

``python benchmarks/bench_lock.py [--n N] [--per-writer N] [--runs K]``; the rows also run in
``python -m benchmarks --only lock-append,lock-writers8,lock-stall``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import bench_append, bench_contention  # noqa: E402
from hermes_state.processes.checkpoint_lock import ENV_VAR  # noqa: E402

STALL_WRITERS = 4
STALL_HOLD_S = 0.3
STALL_EVERY_S = 0.7


@contextlib.contextmanager
def lock(on: bool) -> Iterator[None]:
    """The checkpoint lock on (the default) or off, for this process and its children."""
    before = os.environ.get(ENV_VAR)
    if on:
        os.environ.pop(ENV_VAR, None)
    else:
        os.environ[ENV_VAR] = "off"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ENV_VAR, None)
        else:
            os.environ[ENV_VAR] = before


def measure_append(n: int, runs: int) -> dict:
    """``{"on": [s], "off": [s]}``: wall seconds for ``n`` appends, alternating."""
    root = Path(tempfile.mkdtemp(prefix="bench-lock-append-"))
    out: dict[str, list[float]] = {"on": [], "off": []}
    try:
        for k in range(runs):
            for mode in ("on", "off"):
                with lock(mode == "on"):
                    path = bench_append.fresh_store(root, f"{mode}{k}")
                    out[mode].append(bench_append.run_ours(path, n))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def measure_writers(per_writer: int, runs: int, writers: int = bench_contention.WRITERS,
                    stall: bool = False) -> dict:
    """``{"on": [run dicts], "off": [...]}`` of :func:`bench_contention.run_workload`, with a
    staller beside the writers when ``stall``."""
    root = Path(tempfile.mkdtemp(prefix="bench-lock-writers-"))
    out: dict[str, list[dict]] = {"on": [], "off": []}
    try:
        for k in range(runs):
            for mode in ("on", "off"):
                with lock(mode == "on"), _staller(root / f"{mode}{k}" / "state.db", stall):
                    out[mode].append(bench_contention.run_workload(
                        root, f"{mode}{k}", "ours", writers, per_writer))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


@contextlib.contextmanager
def _staller(db: Path, on: bool) -> Iterator[None]:
    """A foreign sqlite3 client that holds ``BEGIN IMMEDIATE`` periodically until stopped
    (it waits for the store to exist: the workload creates it)."""
    if not on:
        yield
        return
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--staller",
                             str(db)], stdin=subprocess.PIPE, text=True)
    try:
        yield
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)


def _stall_loop(db: str) -> int:
    import select

    while not os.path.exists(db):
        time.sleep(0.01)
    conn = sqlite3.connect(db, timeout=30.0, isolation_level=None)
    while True:
        if select.select([sys.stdin], [], [], STALL_EVERY_S - STALL_HOLD_S)[0]:
            return 0  # stdin closed: the workload is over
        conn.execute("BEGIN IMMEDIATE")
        time.sleep(STALL_HOLD_S)
        conn.execute("ROLLBACK")


def ratio(on: list[float], off: list[float]) -> float:
    """median(on) / median(off)."""
    return statistics.median(on) / statistics.median(off)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--staller"]:
        return _stall_loop(argv[1])
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=2000, help="appends per run (append row)")
    ap.add_argument("--per-writer", type=int, default=200, help="appends per writer process")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    a = measure_append(args.n, args.runs)
    w = measure_writers(args.per_writer, args.runs)
    s = measure_writers(args.per_writer, args.runs, STALL_WRITERS, stall=True)
    tp = {m: [r["throughput"] for r in w[m]] for m in w}
    p99 = {m: [r["p99"] for r in s[m]] for m in s}
    print(json.dumps({"append_s": a, "append_ratio": ratio(a["on"], a["off"]),
                      "writers8_msgs_per_s": tp, "writers8_ratio": ratio(tp["on"], tp["off"]),
                      "stall_p99_s": p99, "stall_p99_ratio": ratio(p99["on"], p99["off"])},
                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
