"""Peer: sqlite-utils inserting the same rows with FTS enabled vs ``append_message`` (SPEC §17).

No target: a point of comparison with a popular library. sqlite-utils gets a ``messages``
table with the same text, ``enable_fts(["content"], create_triggers=True)`` (its own
external-content FTS5 table kept in sync by triggers), WAL, and inserts one row per call
(``table.insert``, one transaction each, as a gateway appends). Ours: ``append_message`` on a
fresh ``SessionDB`` (both v23 FTS tables, session counters, write-path checks). Needs the
``bench`` extra (``pip install -e ".[bench]"``).

Usage: ``python benchmarks/bench_peer.py [-n 5000] [--runs 3]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_append import TEXT, fresh_store, run_ours  # noqa: E402


def run_sqlite_utils(path: Path, n: int) -> float:
    """Seconds for ``n`` single-row inserts through sqlite-utils with FTS triggers."""
    import sqlite_utils

    db = sqlite_utils.Database(str(path))
    db.enable_wal()
    db.execute("PRAGMA synchronous=NORMAL")
    table = db["messages"]
    table.create({"id": int, "session_id": str, "role": str, "content": str,
                  "timestamp": float}, pk="id")
    table.enable_fts(["content"], create_triggers=True)
    t0 = time.perf_counter()
    for i in range(n):
        table.insert({"session_id": "s", "role": "user" if i % 2 else "assistant",
                      "content": f"{i} {TEXT}", "timestamp": time.time()})
    elapsed = time.perf_counter() - t0
    db.close()
    return elapsed


def measure(n: int = 5000, runs: int = 3) -> dict:
    """Alternate ours / sqlite-utils ``runs`` times; ``{"ours": [s], "peer": [s]}``."""
    root = Path(tempfile.mkdtemp(prefix="bench-peer-"))
    ours, peer = [], []
    try:
        for k in range(runs):
            ours.append(run_ours(fresh_store(root, f"ours{k}"), n))
            p = root / f"peer{k}" / "peer.db"
            p.parent.mkdir(parents=True)
            peer.append(run_sqlite_utils(p, n))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"ours": ours, "peer": peer}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5000)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args(argv)
    res = measure(args.n, args.runs)
    mo, mp = statistics.median(res["ours"]), statistics.median(res["peer"])
    print(f"append_message {args.n / mo:.0f} msg/s, sqlite-utils insert+FTS {args.n / mp:.0f} "
          f"msg/s (ours/peer time {mo / mp:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
