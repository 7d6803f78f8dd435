"""Migration v1 -> v23 of an N-message store vs ``VACUUM INTO`` of the same store (SPEC §17).

SPEC §17 target: opening a version-1 store of 100 k messages with the current code (every
versioned step of SPEC §3, including the v10 trigram back-fill and the v11 re-index of both
inline FTS tables) takes at most 3x the time of ``VACUUM INTO`` of the same store, measured side
by side in one run.

Usage::

    python benchmarks/bench_migration.py [--messages 100000] [--sessions 500] [--runs K]
        [--dir DIR]

The v1 store is built from the declared v1 schema (:mod:`hermes_state.schema.history`) in one
transaction: a mix of user / assistant-with-tool_calls / tool / assistant rows, 60-400 characters,
some CJK. Then, on the same files: one warm-up read of the whole store (so both timings see a
warm page cache), ``VACUUM INTO`` a sibling file (timed), then ``SessionDB(path)`` (timed: the
migration) and close; the last run also times the deferred FTS back-fill to completion (not part
of the §17 ratio). Prints the figures and the median ratio; exit code 0 when it is within the
target, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_state import SessionDB, events  # noqa: E402
from hermes_state.testing import create_store_schema  # noqa: E402

TARGET_RATIO = 3.0
_WORDS = ("docker deploy error stack trace python rust build failed passed container kubernetes "
          "cluster config yaml json parse timeout retry network socket database index query "
          "migration schema version table column row commit rollback transaction lock wal "
          "checkpoint session message agent tool terminal file read write").split()
_CJK = ("東京", "会議", "記録", "記憶", "断裂", "問題", "复现", "讨论", "协议", "通信", "完了")


def build_v1_store(path: Path, messages: int, sessions: int, seed: int = 1) -> None:
    """A version-1 store with ``messages`` rows over ``sessions`` sessions (one transaction)."""
    rng = random.Random(seed)
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute("BEGIN")
        create_store_schema(conn, 1)
        conn.execute("INSERT INTO schema_version(version) VALUES (1)")
        t0 = 1_700_000_000.0
        sids = [f"bench{i:05d}" for i in range(sessions)]
        conn.executemany(
            "INSERT INTO sessions(id, source, model, started_at, message_count, input_tokens, "
            "output_tokens) VALUES (?, 'cli', 'm', ?, 0, ?, ?)",
            [(sid, t0 + i * 60, rng.randint(1, 9999), rng.randint(1, 9999))
             for i, sid in enumerate(sids)])

        def rows():
            for n in range(messages):
                sid = sids[n * sessions // messages]
                kind = n % 4
                words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 60)))
                if n % 9 == 0:
                    words += " " + "".join(rng.choice(_CJK) for _ in range(rng.randint(2, 8)))
                calls = tool_name = call_id = None
                role = ("user", "assistant", "tool", "assistant")[kind]
                if kind == 1:
                    args = json.dumps({"cmd": f"grep -r {words[:30]}"})
                    calls = json.dumps([{"id": f"c{n}", "type": "function", "function": {
                        "name": "terminal", "arguments": args}}])
                elif kind == 2:
                    tool_name, call_id = "terminal", f"c{n - 1}"
                yield (sid, role, words, call_id, calls, tool_name, t0 + n * 0.5,
                       rng.randint(1, 300))

        conn.executemany(
            "INSERT INTO messages(session_id, role, content, tool_call_id, tool_calls, tool_name, "
            "timestamp, token_count) VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows())
        conn.execute("UPDATE sessions SET message_count = (SELECT COUNT(*) FROM messages m "
                     "WHERE m.session_id = sessions.id)")
        conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _warm(path: Path) -> None:
    with open(path, "rb") as fh:
        while fh.read(1 << 20):
            pass


def migrate_once(v1_store: Path, work: Path, backfill: bool = False) -> dict:
    """Copy ``v1_store`` into ``work``, time ``VACUUM INTO`` of it, then its migration.

    Both timings see a warm page cache (the copy was just read). With ``backfill``, also time
    :func:`hermes_state.fts.switch.optimize_storage` afterwards (finishes any FTS back-fill the
    open deferred, SPEC §2.4; not part of the §17 ratio).

    Returns:
        ``{"vacuum_s", "migrate_s", "ratio", "steps": {version: s}, "stats": {...},
        "backfill_s": s | None, "fts_pending_after_open": (P, H) | None}``.
    """
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    db_path = work / "state.db"
    shutil.copyfile(v1_store, db_path)
    _warm(db_path)
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    t = time.perf_counter()
    conn.execute(f"VACUUM INTO '{work / 'vacuum-into.db'}'")
    vacuum_s = time.perf_counter() - t
    conn.close()
    steps: list[dict] = []
    listener = lambda e: e["event"] == "migration" and steps.append(e)  # noqa: E731
    events.add_listener(listener)
    t = time.perf_counter()
    try:
        db = SessionDB(db_path)
    finally:
        migrate_s = time.perf_counter() - t
        events.remove_listener(listener)
    from hermes_state.schema.fts_layout import rebuild_markers

    from hermes_state.fts.switch import optimize_storage

    try:
        pending = db._read(rebuild_markers)
        backfill_s = None
        if backfill:
            t = time.perf_counter()
            optimize_storage(db)
            backfill_s = time.perf_counter() - t
        stats = dict(db.connection.migration_report.stats)
    finally:
        db.close()
    shutil.rmtree(work, ignore_errors=True)
    return {"vacuum_s": vacuum_s, "migrate_s": migrate_s, "ratio": migrate_s / vacuum_s,
            "steps": {e["step"]: e["seconds"] for e in steps}, "stats": stats,
            "backfill_s": backfill_s, "fts_pending_after_open": pending}


def measure(messages: int = 100_000, sessions: int = 500, runs: int = 3,
            root: Path | None = None) -> dict:
    """Build one v1 store of ``messages`` rows, then :func:`migrate_once` ``runs`` times.

    The last run also times the FTS back-fill to completion (``backfill_s``).

    Returns:
        ``{"messages", "store_bytes", "build_s", "runs": [migrate_once dicts]}``.
    """
    tmp = Path(tempfile.mkdtemp(prefix="bench-migration-", dir=root))
    try:
        v1 = tmp / "v1.db"
        t = time.perf_counter()
        build_v1_store(v1, messages, sessions)
        build_s = time.perf_counter() - t
        out = [migrate_once(v1, tmp / f"run{k}", backfill=(k == runs - 1))
               for k in range(runs)]
        return {"messages": messages, "store_bytes": v1.stat().st_size, "build_s": build_s,
                "runs": out}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """``python benchmarks/bench_migration.py``: :func:`measure` once per ``--runs``, printed;
    exit 0 when the median ratio meets the §17 target, 1 otherwise."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=100_000)
    ap.add_argument("--sessions", type=int, default=500)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--dir", type=Path, default=None, help="work directory (default: a temp dir)")
    args = ap.parse_args(argv)
    res = measure(args.messages, args.sessions, args.runs, root=args.dir)
    print(f"SQLite {sqlite3.sqlite_version}, Python {sys.version.split()[0]}")
    print(f"store: {res['messages']} messages, {args.sessions} sessions, "
          f"{res['store_bytes'] / 1e6:.1f} MB (built in {res['build_s']:.2f}s)")
    for k, run in enumerate(res["runs"]):
        steps = run["steps"]
        print(f"run {k}: VACUUM INTO {run['vacuum_s']:.3f} s, migration v1 -> v23 "
              f"{run['migrate_s']:.3f} s, ratio {run['ratio']:.2f}x (v10 {steps.get(10, 0.0):.3f} s, "
              f"v11 {steps.get(11, 0.0):.3f} s; FTS pending after open "
              f"{run['fts_pending_after_open']})"
              + (f"; back-fill to completion {run['backfill_s']:.3f} s"
                 if run["backfill_s"] is not None else ""))
    ratio = statistics.median(r["ratio"] for r in res["runs"])
    print(f"median ratio migration / vacuum: {ratio:.2f}x (target <= {TARGET_RATIO:.1f}x): "
          f"{'OK' if ratio <= TARGET_RATIO else 'OVER TARGET'}")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
