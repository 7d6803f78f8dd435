"""8 writer processes: SessionDB's jittered retry vs SQLite's busy handler alone (SPEC §17, §4).

Three workloads on fresh stores (same schema, triggers and pragmas, created by ``SessionDB``),
each writer a real OS process appending to its own session, all starting at one wall-clock
instant:

* ``single``  one process, ``SessionDB.append_message`` x (8 x ``per_writer``);
* ``ours``    8 processes, ``SessionDB.append_message`` x ``per_writer`` each (the write path of
  :meth:`hermes_state.connection.StoreConnection.execute_write`: BEGIN IMMEDIATE, 1 s busy
  timeout, then a uniform 20-150 ms jittered retry, at most 15 attempts);
* ``bare``    8 processes issuing the same statements through bare ``sqlite3`` with
  ``timeout=30`` (SQLite's own busy handler only, no application retry), same pragmas, one
  transaction per message (BEGIN IMMEDIATE; INSERT message; UPDATE session counters; COMMIT),
  a PASSIVE checkpoint every 50 writes.

Figures per workload: aggregate throughput (messages / s, from the common start to the last
writer's end), per-call latency percentiles pooled over every writer (s), errors that reached
the caller. Rows of SPEC §17 built from them (see :func:`measure`):

* 8 writers vs one process: aggregate >= 0.7x, 0 errors, p99 <= 20x p50;
* jittered retry vs busy handler only: p99 latency ratio <= 0.5x.

Usage: ``python benchmarks/bench_contention.py [--per-writer 400] [--runs 3]``
"""

from __future__ import annotations

import argparse
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_state import SessionDB  # noqa: E402

WRITERS = 8
TEXT = "the quick brown fox jumps over the lazy dog while the gateway appends messages " * 3
INSERT = ("INSERT INTO messages (session_id, role, content, tool_name, tool_calls, tool_call_id, "
          "token_count, finish_reason, reasoning, reasoning_content, reasoning_details, "
          "codex_reasoning_items, codex_message_items, timestamp, api_content) VALUES "
          "(?, ?, ?, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, ?, NULL)")
UPDATE = ("UPDATE sessions SET message_count = message_count + 1, "
          "tool_call_count = tool_call_count + ? WHERE id = ?")


def _worker(mode: str, path: str, sid: str, n: int, start_at: float) -> dict:
    """One writer process: ``n`` appends to ``sid``; returns latencies (s) and errors."""
    if mode == "ours":
        db = SessionDB(path)

        def write(i: int) -> None:
            db.append_message(sid, "user" if i % 2 else "assistant", f"{i} {TEXT}")

        close = db.close
    else:
        conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")

        def write(i: int) -> None:
            conn.execute("BEGIN IMMEDIATE")
            try:
                conn.execute(INSERT, (sid, "user" if i % 2 else "assistant", f"{i} {TEXT}",
                                      time.time()))
                conn.execute(UPDATE, (0, sid))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            if (i + 1) % 50 == 0:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")

        close = conn.close
    lat: list[float] = []
    errors: list[str] = []
    delay = start_at - time.time()
    if delay > 0:
        time.sleep(delay)
    for i in range(n):
        t = time.perf_counter()
        try:
            write(i)
            lat.append(time.perf_counter() - t)
        except Exception as exc:  # an error that reached the caller: counted, not fatal
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
    end = time.time()
    close()
    return {"lat": lat, "errors": errors, "end": end}


def _fresh_store(root: Path, name: str, sessions: list[str]) -> Path:
    path = root / name / "state.db"
    with SessionDB(path) as db:
        for sid in sessions:
            db.create_session(sid, source="bench")
    return path


def _pct(sorted_vals: list[float], q: float) -> float:
    if not sorted_vals:
        return float("nan")
    k = min(len(sorted_vals) - 1, max(0, int(round(q * (len(sorted_vals) - 1)))))
    return sorted_vals[k]


def run_workload(root: Path, name: str, mode: str, writers: int, per_writer: int) -> dict:
    """Run ``writers`` processes of ``mode`` (``ours`` / ``bare``) on a fresh store.

    Returns:
        ``{"throughput": msgs/s, "p50": s, "p99": s, "errors": int, "error_samples": [str],
        "messages": int, "wall_s": s}``.
    """
    sids = [f"w{k}" for k in range(writers)]
    path = _fresh_store(root, name, sids)
    start_at = time.time() + 1.0 + 0.15 * writers  # every process opened before the gun
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + \
        env.get("PYTHONPATH", "")
    procs = [subprocess.Popen(
        [sys.executable, str(Path(__file__).resolve()), "--worker", mode, str(path), sid,
         str(per_writer), repr(start_at)], stdout=subprocess.PIPE, env=env, text=True)
        for sid in sids]
    outs = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise RuntimeError(f"{mode} writer exited {p.returncode}")
        outs.append(json.loads(out))
    lat = sorted(x for o in outs for x in o["lat"])
    errors = [e for o in outs for e in o["errors"]]
    wall = max(o["end"] for o in outs) - start_at
    return {"throughput": len(lat) / wall, "p50": _pct(lat, 0.50), "p99": _pct(lat, 0.99),
            "errors": len(errors), "error_samples": errors[:3], "messages": len(lat),
            "wall_s": wall}


def measure(per_writer: int = 400, runs: int = 3, writers: int = WRITERS) -> dict:
    """Alternate single / ours / bare ``runs`` times; medians and min-max of each figure.

    Returns:
        ``{"single": [run dicts], "ours": [...], "bare": [...]}`` (see :func:`run_workload`).
    """
    root = Path(tempfile.mkdtemp(prefix="bench-contention-"))
    out: dict[str, list[dict]] = {"single": [], "ours": [], "bare": []}
    try:
        for k in range(runs):
            out["single"].append(run_workload(root, f"single{k}", "ours", 1,
                                              per_writer * writers))
            out["ours"].append(run_workload(root, f"ours{k}", "ours", writers, per_writer))
            out["bare"].append(run_workload(root, f"bare{k}", "bare", writers, per_writer))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def summary(samples: list[dict], key: str) -> tuple[float, float, float]:
    """``(median, min, max)`` of ``key`` over run dicts."""
    vals = [s[key] for s in samples]
    return statistics.median(vals), min(vals), max(vals)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--worker":
        mode, path, sid, n, start_at = argv[1:6]
        print(json.dumps(_worker(mode, path, sid, int(n), float(start_at))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-writer", type=int, default=400)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    res = measure(args.per_writer, args.runs)
    for name in ("single", "ours", "bare"):
        tp = summary(res[name], "throughput")
        p50, p99 = summary(res[name], "p50")[0], summary(res[name], "p99")[0]
        errs = sum(s["errors"] for s in res[name])
        print(f"{name:6} {tp[0]:8.0f} msg/s ({tp[1]:.0f}-{tp[2]:.0f})  p50 {p50 * 1e3:7.2f} ms  "
              f"p99 {p99 * 1e3:8.2f} ms  errors {errs}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
