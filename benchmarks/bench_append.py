"""append_message throughput vs the same SQL issued by bare sqlite3 (SPEC §17, row 1).

Both sides write to a fresh store created by SessionDB (same schema, same FTS triggers, same
pragmas: WAL, synchronous=NORMAL, foreign_keys=ON), one transaction per message (BEGIN
IMMEDIATE; INSERT message; UPDATE session counters; COMMIT), a PASSIVE checkpoint every 50
writes on both sides. The runs alternate (ours, bare, ours, ...) so drift hits both; the table
reports medians and min-max.

    python benchmarks/bench_append.py [-n 5000] [--runs 5]
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_state import SessionDB  # noqa: E402

TEXT = "the quick brown fox jumps over the lazy dog while the gateway appends messages " * 3


#: The statements bare sqlite3 issues per append (the reference and the SPEC bound).
BARE_INSERT = ("INSERT INTO messages (session_id, role, content, tool_name, tool_calls, "
               "tool_call_id, token_count, finish_reason, reasoning, reasoning_content, "
               "reasoning_details, codex_reasoning_items, codex_message_items, timestamp, "
               "api_content) VALUES (?, ?, ?, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, "
               "NULL, NULL, ?, NULL)")
BARE_UPDATE = ("UPDATE sessions SET message_count = message_count + 1, "
               "tool_call_count = tool_call_count + ? WHERE id = ?")


def fresh_store(root: Path, name: str) -> Path:
    path = root / name / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="bench")
    return path


def run_ours(path: Path, n: int, cpu: list | None = None) -> float:
    with SessionDB(path) as db:
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            db.append_message("s", "user" if i % 2 else "assistant", f"{i} {TEXT}")
        if cpu is not None:
            cpu.append(time.process_time() - c0)
        return time.perf_counter() - t0


def run_bare(path: Path, n: int, cpu: list | None = None) -> float:
    conn = sqlite3.connect(str(path), timeout=1.0, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA synchronous=NORMAL")
    insert, update = BARE_INSERT, BARE_UPDATE
    t0, c0 = time.perf_counter(), time.process_time()
    for i in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(insert, ("s", "user" if i % 2 else "assistant", f"{i} {TEXT}", time.time()))
        conn.execute(update, (0, "s"))
        conn.execute("COMMIT")
        if (i + 1) % 50 == 0:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
    elapsed = time.perf_counter() - t0
    if cpu is not None:
        cpu.append(time.process_time() - c0)
    conn.close()
    return elapsed


#: What the SPEC bound of an append adds to bare sqlite3: the system calls of the per-write
#: checks SPEC asks (§4 the checkpoint lock, §10.1 the generation check), at their cheapest.
BOUND_WHAT = ("+ the system calls of SPEC's per-write checks: flock SHARED/UN of a lock file, "
              "an fstat and a pread of the -shm header, getpid (§4); a stat of the store's "
              "directory, an fstat and a pread of state.db's header (§10.1)")


def run_bound(path: Path, n: int, cpu: list | None = None) -> float:
    """:func:`run_bare` plus, in every write transaction, the system calls SPEC's per-write
    checks cannot do without (:data:`BOUND_WHAT`): the append's SPEC bound."""
    conn = sqlite3.connect(str(path), timeout=1.0, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("SELECT count(*) FROM sessions").fetchone()  # -shm exists from here
    insert, update = BARE_INSERT, BARE_UPDATE
    directory = str(path.parent)
    # closed only after the connection: closing a descriptor of state.db would drop SQLite's
    # POSIX locks
    db_fd = os.open(path, os.O_RDONLY)
    shm_fd = os.open(f"{path}-shm", os.O_RDONLY)
    lock_fd = os.open(f"{path}.bound.lock", os.O_RDONLY | os.O_CREAT, 0o600)
    try:
        t0, c0 = time.perf_counter(), time.process_time()
        for i in range(n):
            conn.execute("BEGIN IMMEDIATE")
            os.fstat(shm_fd)
            os.pread(shm_fd, 136, 0)
            fcntl.flock(lock_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            os.getpid()
            os.stat(directory)
            os.fstat(db_fd)
            os.pread(db_fd, 100, 0)
            conn.execute(insert, ("s", "user" if i % 2 else "assistant", f"{i} {TEXT}",
                                  time.time()))
            conn.execute(update, (0, "s"))
            conn.execute("COMMIT")
            fcntl.flock(lock_fd, fcntl.LOCK_UN)
            if (i + 1) % 50 == 0:
                conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
        elapsed = time.perf_counter() - t0
        if cpu is not None:
            cpu.append(time.process_time() - c0)
    finally:
        conn.close()
        for fd in (db_fd, shm_fd, lock_fd):
            os.close(fd)
    return elapsed


def measure(n: int = 5000, runs: int = 5) -> dict:
    """Alternate ours / bare ``runs`` times on fresh stores of ``n`` appends each (the order
    swapped every run).

    Returns:
        ``{"ours": [s per run], "bare": [s per run], "bound": [...], "ours_cpu": [...],
        "bare_cpu": [...], "bound_cpu": [...]}`` (wall and CPU seconds for ``n`` appends;
        ``bound``: :func:`run_bound`, the SPEC bound).
    """
    root = Path(tempfile.mkdtemp(prefix="bench-append-"))
    ours, bare, bound, ours_cpu, bare_cpu, bound_cpu = [], [], [], [], [], []
    try:
        for k in range(runs):
            sides = [("ours", ours, ours_cpu, run_ours), ("bare", bare, bare_cpu, run_bare),
                     ("bound", bound, bound_cpu, run_bound)]
            for name, out, cpu, fn in (sides if k % 2 == 0 else sides[::-1]):
                out.append(fn(fresh_store(root, f"{name}{k}"), n, cpu))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"ours": ours, "bare": bare, "ours_cpu": ours_cpu, "bare_cpu": bare_cpu,
            "bound": bound, "bound_cpu": bound_cpu}


def measure_sync(n: int = 2000, runs: int = 5) -> dict:
    """The loss window's time bound at its cost (issue 24 item 1): ``append_message`` x ``n``
    with the WAL sync thread (the default) and with ``HERMES_STATE_WAL_SYNC_S=off``,
    alternating on fresh stores.

    Returns:
        ``{"on": [s], "off": [s], "syncs": [WAL syncs per run with it on]}``.
    """
    from hermes_state import events
    from hermes_state.store import wal_sync

    root = Path(tempfile.mkdtemp(prefix="bench-walsync-"))
    out: dict = {"on": [], "off": [], "syncs": []}
    seen: list = []
    listen = lambda e: e["event"] == "wal_sync" and seen.append(e)  # noqa: E731
    saved = os.environ.get(wal_sync.ENV_VAR)
    try:
        for k in range(runs):
            for mode in (("on", "off") if k % 2 == 0 else ("off", "on")):
                if mode == "off":
                    os.environ[wal_sync.ENV_VAR] = "off"
                else:
                    os.environ.pop(wal_sync.ENV_VAR, None)
                path = fresh_store(root, f"{mode}{k}")
                seen.clear()
                events.add_listener(listen)
                try:
                    out[mode].append(run_ours(path, n))
                finally:
                    events.remove_listener(listen)
                if mode == "on":
                    out["syncs"].append(len(seen))
    finally:
        if saved is None:
            os.environ.pop(wal_sync.ENV_VAR, None)
        else:
            os.environ[wal_sync.ENV_VAR] = saved
        shutil.rmtree(root, ignore_errors=True)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=5000, help="messages per run")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    res = measure(args.n, args.runs)
    ours, bare = res["ours"], res["bare"]
    mo, mb = statistics.median(ours), statistics.median(bare)
    result = {"what": "append_message, one process", "n": args.n, "runs": args.runs,
              "ours_s": mo, "bare_s": mb, "ours_range_s": [min(ours), max(ours)],
              "bare_range_s": [min(bare), max(bare)], "ratio": mo / mb, "target": 1.3,
              "pass": mo / mb <= 1.3, "sqlite": sqlite3.sqlite_version}
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"append_message x{args.n}: ours {mo * 1e3:.0f} ms ({args.n / mo:.0f}/s), bare "
              f"sqlite3 {mb * 1e3:.0f} ms ({args.n / mb:.0f}/s); ratio {mo / mb:.2f}x "
              f"(target <= 1.3x) {'PASS' if result['pass'] else 'FAIL'}")
    return 0 if result["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
