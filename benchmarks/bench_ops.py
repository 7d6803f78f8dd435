"""Operator commands on a big store beside the bare SQLite operation that bounds each (issue 18).

Every command runs as the operator runs it (``python -m hermes_state --home H ...`` in a new
process) and every reference as a bare ``sqlite3`` script in a new process, alternately, on the
same store (a fresh copy of it for the commands that change it; the copy is not timed). Wall
time and the child's peak RSS (``wait4``'s ``ru_maxrss``) are recorded for both.

==================  ===========================================  =================================
row                 ours                                         bare reference
==================  ===========================================  =================================
doctor              ``doctor --json``                            ``PRAGMA integrity_check``
backup              ``backup`` (online backup, quick_check,      the online backup API
                    manifest)                                    (``Connection.backup``, one step)
optimize            ``sessions optimize``                        ``VACUUM``
optimize-storage    ``sessions optimize-storage`` on a store     ``VACUUM INTO`` + the v23 FTS
                    with upstream's inline FTS layout            tables built with ``rebuild``
recover             ``sessions recover --inspect-only``          ``SELECT rowid, *`` of every
                                                                 canonical table, every row read
prune               ``sessions prune --older-than D --yes``      the same sessions deleted with
                    (D: the age of the oldest 10 % of sessions)  bare DELETEs (FTS triggers fire)
export              ``sessions export ID -o F`` of the largest   a bare SELECT of its row and
                    session                                      messages written as JSON objects
==================  ===========================================  =================================

Usage: ``python -m benchmarks.bench_ops --store PATH [--runs 3] [--only doctor,backup]``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

RSS_LIMIT_MB = 200.0
TARGET = 1.3
CANONICAL = ("sessions", "messages", "session_model_usage", "state_meta", "gateway_routing",
             "compression_locks", "async_delegations")


# ------------------------------------------------------------------------ the bare references

def _ro(path: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)


def bare_doctor(db: str, arg: str) -> None:
    _ro(db).execute("PRAGMA integrity_check").fetchall()


def bare_backup(db: str, arg: str) -> None:
    src = _ro(db)
    dst = sqlite3.connect(arg)
    src.backup(dst, pages=-1)
    dst.close()
    src.close()


def bare_optimize(db: str, arg: str) -> None:
    sqlite3.connect(db, isolation_level=None).execute("VACUUM")


def bare_optimize_storage(db: str, arg: str) -> None:
    from hermes_state.schema import tables as schema

    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("VACUUM INTO ?", (arg,))
    conn.close()
    out = sqlite3.connect(arg, isolation_level=None)
    out.execute("BEGIN")
    for (name,) in out.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name "
                               "LIKE 'messages_fts%'").fetchall():
        out.execute(f'DROP TRIGGER "{name}"')
    out.execute("DROP TABLE IF EXISTS messages_fts")
    out.execute("DROP TABLE IF EXISTS messages_fts_trigram")
    out.execute(schema.FTS_TABLE_SQL)
    out.execute(schema.TRIGRAM_VIEW_SQL)
    out.execute(schema.TRIGRAM_TABLE_SQL)
    for table in ("messages_fts", "messages_fts_trigram"):
        out.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
    out.execute("COMMIT")
    out.close()


def bare_recover(db: str, arg: str) -> None:
    conn = _ro(db)
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table in CANONICAL:
        if table in names:
            for _row in conn.execute(f"SELECT rowid, * FROM {table}"):
                pass


def bare_prune(db: str, arg: str) -> None:
    ids = [(i,) for i in json.loads(Path(arg).read_text())]
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany("UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ?",
                     ids)
    conn.executemany("DELETE FROM messages WHERE session_id = ?", ids)
    conn.executemany("DELETE FROM sessions WHERE id = ?", ids)
    conn.execute("COMMIT")


def bare_export(db: str, arg: str) -> None:
    """The session row and its messages as JSON objects (column names and values, as the
    export writes them), one per line."""
    sid, out = arg.split(":", 1)
    conn = _ro(db)
    conn.row_factory = sqlite3.Row
    with open(out, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(dict(conn.execute("SELECT * FROM sessions WHERE id = ?",
                                              (sid,)).fetchone()), ensure_ascii=False) + "\n")
        for row in conn.execute("SELECT * FROM messages WHERE session_id = ? ORDER BY id",
                                (sid,)):
            fh.write(json.dumps(dict(row), ensure_ascii=False) + "\n")


# ----------------------------------------------- the SPEC bounds: what the command must do
# The references bound the core operation only. These add, still in bare sqlite3 and
# the standard library, the other work SPEC asks of the command, so a miss can be split into
# "work the SPEC requires" and "our overhead" (rows.py: ``spec_ratio``).

def spec_backup(db: str, arg: str) -> None:
    """SPEC §13: the backup API from ``mode=ro``, the image made one file (journal_mode=DELETE),
    ``quick_check`` on it, its sha256 for the manifest, and an fsync."""
    bare_backup(db, arg)
    conn = sqlite3.connect(arg, isolation_level=None)
    conn.execute("PRAGMA journal_mode=DELETE").fetchone()
    conn.execute("PRAGMA quick_check").fetchall()
    conn.close()
    digest = hashlib.sha256()
    with open(arg, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    fd = os.open(arg, os.O_RDONLY)
    os.fsync(fd)
    os.close(fd)


def spec_optimize(db: str, arg: str) -> None:
    """SPEC §8: FTS5 'merge' and 'optimize' on each FTS table, PASSIVE checkpoint, VACUUM,
    TRUNCATE checkpoint."""
    conn = sqlite3.connect(db, isolation_level=None)
    names = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name IN "
        "('messages_fts', 'messages_fts_trigram', 'messages_fts_cjk')")]
    conn.execute("BEGIN IMMEDIATE")
    for name in names:
        conn.execute(f"INSERT INTO {name}({name}, rank) VALUES ('merge', 500)")
        conn.execute(f"INSERT INTO {name}({name}) VALUES ('optimize')")
    conn.execute("COMMIT")
    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
    conn.execute("VACUUM")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    conn.close()


def spec_recover(db: str, arg: str) -> None:
    """SPEC §14: copy the source and its sidecars to a private directory (size and mtime checked
    before and after), read every row of every canonical table of the copy, ``quick_check``."""
    work = Path(arg)
    work.mkdir(parents=True, exist_ok=True)
    before = os.stat(db)
    for suffix in ("", "-wal", "-shm"):
        if os.path.exists(db + suffix):
            shutil.copyfile(db + suffix, work / f"state.db{suffix}")
    after = os.stat(db)
    assert (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns)
    copy = str(work / "state.db")
    bare_recover(copy, "")
    _ro(copy).execute("PRAGMA quick_check").fetchall()


def spec_export(db: str, arg: str) -> None:
    """The bare export after the start-up every ``hermes-state`` command pays: importing the
    package and its CLI (no store opened)."""
    import hermes_state.cli  # noqa: F401

    bare_export(db, arg)


#: The SPEC bound of the rows whose issue reference covers only part of the command's work.
SPEC: dict[str, Callable[[str, str], None]] = {
    "backup": spec_backup, "optimize": spec_optimize, "recover": spec_recover,
    "export": spec_export,
}
#: What each SPEC bound adds to the issue's reference (rows.py prints it).
SPEC_WHAT = {
    "backup": "+ journal_mode=DELETE, quick_check, sha256, fsync of the image (SPEC §13)",
    "optimize": "FTS merge+optimize, PASSIVE, VACUUM, TRUNCATE (SPEC §8)",
    "recover": "copy of the source + every row + quick_check (SPEC §14)",
    "export": "+ the CLI's start-up (importing hermes_state.cli)",
}


BARE: dict[str, Callable[[str, str], None]] = {
    "doctor": bare_doctor, "backup": bare_backup, "optimize": bare_optimize,
    "optimize-storage": bare_optimize_storage, "recover": bare_recover, "prune": bare_prune,
    "export": bare_export,
}


# ------------------------------------------------------------------------------- the harness

@dataclass
class Op:
    """One row: the CLI arguments of ours and how to prepare each run."""

    name: str
    cli: Callable[["Run"], list[str]]
    mutates: bool = False
    inline_store: bool = False
    bare_arg: Callable[["Run"], str] = lambda run: ""
    max_runs: int | None = None  # a long row (minutes a side at 1 GB) runs at most this often
    spec_arg: Callable[["Run"], str] | None = None  # the SPEC bound's argument (else bare_arg)


@dataclass
class Run:
    """Paths of one timed run: the home (with ``state.db``) and a scratch directory."""

    home: Path
    scratch: Path
    largest: str
    prune_days: float
    prune_ids: Path

    @property
    def db(self) -> Path:
        return self.home / "state.db"


OPS = [
    Op("doctor", lambda r: ["doctor", "--json"]),
    Op("backup", lambda r: ["backup", "--json"],
       bare_arg=lambda r: str(r.scratch / "backup.db")),
    Op("optimize", lambda r: ["sessions", "optimize", "--json"], mutates=True),
    Op("optimize-storage", lambda r: ["sessions", "optimize-storage", "--json"], mutates=True,
       inline_store=True, bare_arg=lambda r: str(r.scratch / "vacuum-into.db"), max_runs=2),
    Op("recover", lambda r: ["sessions", "recover", str(r.db), "--inspect-only"],
       spec_arg=lambda r: str(r.scratch / "recover-copy")),
    Op("prune", lambda r: ["sessions", "prune", "--older-than", f"{r.prune_days:.6f}", "--yes",
                           "--json"], mutates=True, bare_arg=lambda r: str(r.prune_ids)),
    Op("export", lambda r: ["sessions", "export", r.largest, "--format", "json", "-o",
                            str(r.scratch / "export.json")],
       bare_arg=lambda r: f"{r.largest}:{r.scratch / 'export.jsonl'}"),
]


#: Runs ``python -m hermes_state ARGS`` and records the process's peak RSS (``VmHWM``, per
#: address space: unlike ``ru_maxrss`` it does not inherit the launching process's peak).
_OURS = ("import atexit, os, runpy, sys\n"
         "from benchmarks.bench_ops import write_hwm\n"
         "atexit.register(write_hwm)\n"
         "sys.argv = ['hermes-state', *sys.argv[1:]]\n"
         "runpy.run_module('hermes_state', run_name='__main__', alter_sys=True)\n")


def write_hwm() -> None:
    """Write this process's peak RSS (KiB, ``VmHWM``) to ``$HS_BENCH_HWM`` (Linux)."""
    target = os.environ.get("HS_BENCH_HWM")
    if not target:
        return
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    Path(target).write_text(line.split()[1])
    except OSError:
        pass


def _child(argv: list[str], env: dict) -> tuple[float, float, int, str]:
    """Run ``argv``; returns ``(wall s, peak RSS MiB, exit code, stderr tail)``."""
    hwm = Path(tempfile.mkstemp(prefix="bench-hwm-")[1])
    env = dict(env, HS_BENCH_HWM=str(hwm))
    t = time.perf_counter()
    p = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    err = p.stderr.read()  # type: ignore[union-attr]
    _pid, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    p.returncode = os.waitstatus_to_exitcode(status)
    text = hwm.read_text().strip()
    hwm.unlink()
    rss_kib = int(text) if text else usage.ru_maxrss  # ru_maxrss: an upper bound
    return wall, rss_kib / 1024.0, p.returncode, err.decode(errors="replace")[-800:]


#: How old (s) the ctime of a store's main file must be when a timed run that only reads it
#: starts: a user's store was not copied a second earlier, and ``sessions recover`` re-hashes a
#: source file changed within ``recover_source.CTIME_SLACK_NS`` (1 s) of its start to prove it
#: unchanged (0.7 s for 1 GB), a check SPEC §14 does not ask (size and mtime before and
#: after). The window plus a margin for the kernel's coarse clock. The sidecars a read-only
#: open leaves (a 32 KiB ``-shm``, an empty ``-wal``) are not waited for: re-hashing them is
#: microseconds, and a live store's are as fresh.
SETTLE_S = 1.2


def ctime_age(path: Path | str) -> float:
    """Seconds since ``path``'s ctime (its last change of data or metadata)."""
    return (time.time_ns() - os.stat(path).st_ctime_ns) / 1e9


def settle(db: Path, settle_s: float = SETTLE_S) -> float:
    """Wait until :func:`ctime_age` of ``db`` is at least ``settle_s``; returns the wait (s):
    0 for a file that has not changed since it settled."""
    wait = max(0.0, settle_s - ctime_age(db))
    time.sleep(wait)
    return wait


def _copy_store(src: Path, home: Path) -> None:
    if home.exists():
        shutil.rmtree(home)
    home.mkdir(parents=True)
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{src}{suffix}").exists():
            shutil.copyfile(f"{src}{suffix}", home / f"state.db{suffix}")


def _prune_plan(db: Path, share: float = 0.10) -> tuple[float, list[str]]:
    """The age (days) that makes ``prune --older-than`` take the oldest ``share`` of the
    sessions, and those ids (the store's own candidate query, read-only)."""
    from hermes_state import SessionDB
    from hermes_state.api.lineage import _LAST_ACTIVE  # noqa: F401 - same expression as prune

    with SessionDB(db, read_only=True) as ro:
        rows = ro._read(lambda c: c.execute(
            "SELECT MAX(s.started_at, s.ended_at, COALESCE((SELECT MAX(m.timestamp) FROM "
            "messages m WHERE m.session_id = s.id), s.started_at)) AS last FROM sessions s "
            "WHERE s.ended_at IS NOT NULL ORDER BY last").fetchall())
        total = ro._read(lambda c: c.execute("SELECT count(*) FROM sessions").fetchone()[0])
        k = max(1, int(total * share))
        cutoff = (rows[min(k, len(rows) - 1)][0] + rows[min(k, len(rows) - 1) - 1][0]) / 2
        days = (time.time() - cutoff) / 86400.0
        ids = ro.prune_candidates(older_than_days=days)
    return days, ids


def inline_store(src: Path, dest: Path) -> Path:
    """``dest/state.db``: a copy of ``src`` with upstream's inline FTS layout (v11-v22) instead
    of v23's (built once; an existing one is reused)."""
    from hermes_state.schema.history import FTS_LAYOUTS, INLINE_TEXT

    if (dest / "state.db").exists():
        return dest / "state.db"
    tmp = dest.with_name(dest.name + f".building-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    _copy_store(src, tmp)
    conn = sqlite3.connect(tmp / "state.db", isolation_level=None)
    conn.execute("BEGIN")
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'trigger' AND name "
                                "LIKE 'messages_fts%'").fetchall():
        conn.execute(f'DROP TRIGGER "{name}"')
    conn.execute("DROP TABLE IF EXISTS messages_fts")
    conn.execute("DROP TABLE IF EXISTS messages_fts_trigram")
    conn.execute("DROP VIEW IF EXISTS messages_fts_trigram_source")
    layout = FTS_LAYOUTS["inline"]
    for _name, sql in layout.tables:
        conn.execute(sql)
    for _name, sql in layout.triggers:
        conn.execute(sql)
    text = INLINE_TEXT.format(r="messages")
    for table in ("messages_fts", "messages_fts_trigram"):
        conn.execute(f"INSERT INTO {table}(rowid, content) SELECT id, {text} FROM messages")
    conn.execute("COMMIT")
    conn.execute("VACUUM")
    conn.close()
    os.replace(tmp, dest)
    return dest / "state.db"


def measure(store: Path, runs: int = 3, only: list[str] | None = None,
            work: Path | None = None, inline: Path | None = None, largest: str = "s00000",
            progress: Callable[[str], None] | None = None) -> dict:
    """Every op of :data:`OPS` (or ``only``) ``runs`` times, ours and bare alternately.

    Args:
        store: the (cached) store; never changed (mutating ops run on copies).
        work: scratch directory (default: a new temporary one, removed at the end).
        inline: the store with upstream's inline FTS layout (built from ``store`` when missing).
    Returns:
        ``{op: {"ours": [s], "bare": [s], "ours_rss_mb": [MiB], "bare_rss_mb": [MiB],
        "exits": [int], "stderr": str, "source_age_s": [s]}}`` plus ``"_meta"``; rows with a
        SPEC bound (:data:`SPEC`) also ``"spec"`` and ``"spec_rss_mb"``, measured in the same
        alternation. ``source_age_s``: :func:`ctime_age` of ``state.db`` in place as each timed
        run of each side starts. A store that an op only reads is copied into place once and
        :func:`settle` waits, before any timed run of any side, until it is :data:`SETTLE_S`
        old (the same preparation for all; one wait per op, after its copy); an op that changes
        the store gets a fresh copy before each run of each side.
    """
    say = progress or (lambda m: None)
    own_work = work is None
    work = Path(tempfile.mkdtemp(prefix="bench-ops-")) if work is None else work
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("HERMES_HOME", None)
    out: dict = {}
    try:
        home = work / "home"
        scratch = work / "scratch"
        scratch.mkdir(parents=True, exist_ok=True)
        _copy_store(store, home)
        days, ids = _prune_plan(home / "state.db")
        ids_file = work / "prune-ids.json"
        ids_file.write_text(json.dumps(ids))
        out["_meta"] = {"store": str(store), "store_bytes": store.stat().st_size,
                        "prune_days": days, "prune_sessions": len(ids), "largest": largest}
        in_home = store  # the store home/state.db is a copy of now
        for op in OPS:
            if only and op.name not in only:
                continue
            src = store
            if op.inline_store:
                src = inline or inline_store(store, work / "inline")
            r = out[op.name] = {"ours": [], "bare": [], "ours_rss_mb": [], "bare_rss_mb": [],
                                "exits": [], "stderr": "", "source_age_s": []}
            sides = ("ours", "bare")
            if op.name in SPEC:
                sides += ("spec",)
                r.update(spec=[], spec_rss_mb=[])
            for k in range(min(runs, op.max_runs or runs)):
                for side in (sides if k % 2 == 0 else sides[::-1]):
                    say(f"{op.name} {side} {k + 1}/{runs}")
                    if op.mutates or in_home != src:
                        _copy_store(src, home)
                        in_home = None if op.mutates else src
                    if not op.mutates:
                        settle(home / "state.db")  # waits only after a change: once per op
                    shutil.rmtree(scratch, ignore_errors=True)
                    scratch.mkdir()
                    shutil.rmtree(home / "state-snapshots", ignore_errors=True)
                    run = Run(home, scratch, largest, days, ids_file)
                    if side == "ours":
                        argv = [sys.executable, "-c", _OURS, "--home", str(home), *op.cli(run)]
                    elif side == "bare":
                        argv = [sys.executable, "-m", "benchmarks.bench_ops", "--bare", op.name,
                                str(run.db), op.bare_arg(run)]
                    else:
                        argv = [sys.executable, "-m", "benchmarks.bench_ops", "--spec", op.name,
                                str(run.db), (op.spec_arg or op.bare_arg)(run)]
                    r["source_age_s"].append(ctime_age(run.db))
                    wall, rss, code, err = _child(argv, env)
                    r[side].append(wall)
                    r[f"{side}_rss_mb"].append(rss)
                    if side == "ours":
                        r["exits"].append(code)
                        if code != 0:
                            r["stderr"] = err
                    elif code != 0:
                        raise RuntimeError(f"{side} {op.name} failed: {err}")
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("--bare", "--spec"):
        (BARE if argv[0] == "--bare" else SPEC)[argv[1]](argv[2], argv[3] if len(argv) > 3
                                                         else "")
        write_hwm()
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", default=None)
    ap.add_argument("--largest", default="s00000")
    args = ap.parse_args(argv)
    res = measure(args.store, args.runs, args.only.split(",") if args.only else None,
                  largest=args.largest, progress=lambda m: print(m, file=sys.stderr))
    print(json.dumps(res.pop("_meta")))
    for name, r in res.items():
        o, b = statistics.median(r["ours"]), statistics.median(r["bare"])
        print(f"{name:17} ours {o:7.2f} s  bare {b:7.2f} s  ratio {o / b:5.2f}x  "
              f"rss {max(r['ours_rss_mb']):6.1f} / {max(r['bare_rss_mb']):6.1f} MiB  "
              f"exits {r['exits']} {r['stderr'][-300:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
