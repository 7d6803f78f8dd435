"""8 writer processes, and 8 writers around a long lock hold (issue 18, SPEC §4, §17).

Every writer is a real OS process appending to its own session of a fresh store (schema,
triggers and pragmas made by ``SessionDB``); all start at one wall-clock instant. A workload is
one *configuration* of the writers:

=============  ============================================================================
``ours``       ``SessionDB.append_message`` (SPEC §4 write path: BEGIN IMMEDIATE, 1 s busy
               timeout, 20-150 ms jittered retry, 15 attempts, PASSIVE every 50 writes; the
               checkpoint lock of issue 12 as this SQLite needs it, unless the environment
               has ``HERMES_STATE_CHECKPOINT_LOCK=off``: ``bench_lock`` runs it both ways)
``ours-nolock`` the same with ``HERMES_STATE_CHECKPOINT_LOCK=off`` (the lock's cost)
``busy30``     bare ``sqlite3``, ``timeout=30``: SQLite's busy handler only, no application
               retry; the same statements (BEGIN IMMEDIATE; INSERT; UPDATE; COMMIT) and a
               PASSIVE checkpoint every 50 writes
``naive``      bare ``sqlite3``, ``timeout=1``, no retry (what a first implementation does)
``bound``      ``busy30`` plus what SPEC's per-write checks cannot do without (the writers8-p99
               row's SPEC bound): in every write transaction the system calls of the append
               row's bound (``bench_append.BOUND_WHAT``), the checkpoint lock SHARED, or
               EXCLUSIVE when the wal-index header says the write may restart the WAL (§4, this
               SQLite has the WAL-reset race), waited for holding SQLite's write lock; cadence
               checkpoints hold it SHARED (skipped when a write holds it EXCLUSIVE) and keep the
               WAL bounded (``SpecChecks.checkpoint``)
``ours-base``  ``ours`` importing ``hermes_state`` from the directory in ``$BENCH_BASE`` (an
               earlier checkout, e.g. ``git archive main hermes_state | tar -x -C DIR``): a
               change to the write path measured side by side with what it replaces
=============  ============================================================================

Two measurements (:func:`measure_writers8`, :func:`measure_stall`):

* **writers8**: 8 x ``per_writer`` appends, beside one process doing all of them (``single``)
  and beside ``busy30``: aggregate throughput, pooled latency percentiles, caller errors;
* **stall**: writers append for ``duration`` seconds (a short think time between appends)
  while a *staller* process takes the store's write lock for ``HOLD_S`` every ``PERIOD_S``
  (standing in for a VACUUM or TRUNCATE checkpoint: the checkpoint lock exclusively when the
  store uses it, as maintenance does, then BEGIN IMMEDIATE, sleep, ROLLBACK). Per config:
  caller errors, p99, max latency, fairness (slowest writer's appends / fastest's).

The ``ours`` writers subscribe to the store's events and count, per statement, every lock error
that led to a retry (``retry`` events: ``stage`` begin/statement/commit/checkpoint lock, the
SQLite error name, and whether it came *at once* or after the busy timeout), every write that
met a checkpoint holding the lock (``write`` events, ``met``), and the checkpoints (count,
time inside ``wal_checkpoint``, skipped): the retry-cause analysis of issue 18.

The appends that ran their own cadence checkpoint are counted apart (``ckpt_writes``,
``ckpt_p50``, ``ckpt_max``, ``p99_without_ckpt``), for ``ours`` (from its ``checkpoint`` events)
and for the bare configurations (every 50th append).

Usage: ``python benchmarks/bench_contention.py [--per-writer 400] [--runs 3] [--stall 15]
[--configs ours,ours-base,busy30]``
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import shutil
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
if os.environ.get("BENCH_USE_BASE") and "--worker" in sys.argv:
    sys.path.insert(0, os.environ["BENCH_BASE"])

from hermes_state import SessionDB  # noqa: E402
from hermes_state.processes.checkpoint_lock import ENV_VAR, CheckpointLock  # noqa: E402
from hermes_state.store.checkpointing import CADENCE_QUEUE_S, DRAIN_FRAMES  # noqa: E402
from hermes_state.store.connection import BUSY_TIMEOUT_S  # noqa: E402

WRITERS = 8
CHECKPOINT_EVERY = 50  # SPEC §4: a PASSIVE checkpoint every 50th write of a connection
HOLD_S = 1.5  # the staller's hold
PERIOD_S = 5.0  # one hold every PERIOD_S
FIRST_HOLD_S = 1.0  # after the start
THINK_S = 0.005  # pause between two appends of one stall writer
TEXT = "the quick brown fox jumps over the lazy dog while the gateway appends messages " * 3
INSERT = ("INSERT INTO messages (session_id, role, content, tool_name, tool_calls, tool_call_id, "
          "token_count, finish_reason, reasoning, reasoning_content, reasoning_details, "
          "codex_reasoning_items, codex_message_items, timestamp, api_content) VALUES "
          "(?, ?, ?, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, ?, NULL)")
UPDATE = ("UPDATE sessions SET message_count = message_count + 1, "
          "tool_call_count = tool_call_count + ? WHERE id = ?")

#: config name -> (writer kind, bare busy timeout s, checkpoint lock: None = as the
#: environment says (on unless HERMES_STATE_CHECKPOINT_LOCK=off), False = off)
CONFIGS = {
    "ours": ("ours", None, None),
    "ours-nolock": ("ours", None, False),
    "ours-base": ("ours", None, "base"),
    "busy30": ("bare", 30.0, None),
    "bound": ("bound", 30.0, None),
    "naive": ("bare", 1.0, None),
}
#: ``busy30-spinN``: ``busy30`` whose writers also burn N microseconds of CPU per append
#: outside the write lock (as ``ours`` spends its Python work: building the row, the checks,
#: events). An experiment for the p99 analysis (docs/decisions/0016-performance-at-scale.md), not a
#: row: does the busy handler's p99 grow to ours when its writers cost what ours cost? (It
#: does at N = 64, ours' extra CPU per append, but ours with the lock off has that cost too
#: and a p99 like the busy handler's: a busy loop is not a faithful stand-in.)
SPIN_PREFIX = "busy30-spin"


def _config(name: str) -> tuple[str, float | None, object, float]:
    """``(kind, bare busy timeout, lock, spin s)`` of a config name (:data:`CONFIGS`)."""
    if name.startswith(SPIN_PREFIX):
        return ("bare", 30.0, None, int(name[len(SPIN_PREFIX):]) / 1e6)
    return (*CONFIGS[name], 0.0)


def _env(lock: bool | None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1]) + os.pathsep + \
        env.get("PYTHONPATH", "")
    if lock == "base":
        env["BENCH_USE_BASE"] = "1"
    if lock is False:
        env[ENV_VAR] = "off"
    return env


class _Causes:
    """Event listener of an ``ours`` writer: retry causes, checkpoint meetings, checkpoints."""

    def __init__(self) -> None:
        self.retries: Counter = Counter()
        self.met_writes = 0
        self.met_total = 0
        self.ckpt = {"n": 0, "skipped": 0, "s": 0.0, "max_s": 0.0}
        self.ran_checkpoint = False  # the write now timed ran its cadence checkpoint
        self.locks: Counter = Counter()  # write transactions by the lock mode they took

    def __call__(self, ev: dict) -> None:
        kind = ev["event"]
        if kind == "retry":
            waited = ev.get("waited_s")
            when = ("at once" if waited is not None and waited < 0.9 * BUSY_TIMEOUT_S
                    else "after the busy timeout")
            self.retries[f"{ev.get('stage', '?')} | {ev.get('code') or '-'} | {when}"] += 1
        elif kind == "write":
            self.locks[str(ev.get("lock"))] += 1
            if ev.get("met"):
                self.met_writes += 1
                self.met_total += ev["met"]
        elif kind == "checkpoint":
            self.ran_checkpoint = True
            self.ckpt["n"] += 1
            if ev.get("skipped"):
                self.ckpt["skipped"] += 1
            elif ev.get("t_end") is not None:
                d = ev["t_end"] - ev["t_start"]
                self.ckpt["s"] += d
                self.ckpt["max_s"] = max(self.ckpt["max_s"], d)

    def as_dict(self) -> dict:
        return {"retries": dict(self.retries), "met_writes": self.met_writes,
                "met_total": self.met_total, "checkpoints": self.ckpt,
                "locks": dict(self.locks)}


def _writer(spec: dict) -> dict:
    """One writer process: appends until ``n`` done or ``until`` (epoch s); latencies (s)."""
    kind, path, sid = spec["kind"], spec["path"], spec["sid"]
    causes = None
    ran = [False]  # bare writers: the write now timed ran its checkpoint
    # bare writers' checkpoints: SQLite's PASSIVE returns busy at once while another
    # connection checkpoints (busy), else checkpoints (ran)
    bare_ckpt = {"busy": 0, "ran": 0, "error": 0, "skipped": 0, "drained": 0}
    if kind == "ours":
        from hermes_state import events

        causes = _Causes()
        listen = spec.get("causes", True)
        if listen:
            events.add_listener(causes)
        db = SessionDB(path)

        def write(i: int) -> None:
            before = db.connection.writes
            db.append_message(sid, "user" if i % 2 else "assistant", f"{i} {TEXT}")
            if not listen:  # no events: the cadence is every 50th write of the connection
                after = db.connection.writes
                causes.ran_checkpoint = after != before and after % CHECKPOINT_EVERY == 0

        close = db.close
    else:
        conn = sqlite3.connect(path, timeout=spec["timeout"], isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
        done = [0]

        spin = spec.get("spin", 0.0)
        checks = SpecChecks(path, conn, spec["timeout"]) if kind == "bound" else None

        def write(i: int) -> None:
            if spin:
                t_spin = time.perf_counter()
                while time.perf_counter() - t_spin < spin:
                    pass
            conn.execute("BEGIN IMMEDIATE")
            try:
                if checks is not None:
                    checks.enter()
                conn.execute(INSERT, (sid, "user" if i % 2 else "assistant", f"{i} {TEXT}",
                                      time.time()))
                conn.execute(UPDATE, (0, sid))
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            finally:
                if checks is not None:
                    checks.leave()
            done[0] += 1
            if done[0] % CHECKPOINT_EVERY == 0:
                ran[0] = True
                if checks is not None:
                    bare_ckpt[checks.checkpoint()] += 1
                    return
                try:
                    busy = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()[0]
                    bare_ckpt["busy" if busy else "ran"] += 1
                except sqlite3.OperationalError:
                    bare_ckpt["error"] += 1  # housekeeping, as in the store

        def close() -> None:
            conn.close()
            if checks is not None:
                checks.close()
    lat: list[float] = []
    lat_ckpt: list[float] = []  # latencies of the appends that ran their cadence checkpoint
    errors: list[str] = []
    _await_gun(spec, spec["sid"])
    n, until, think = spec.get("n"), spec.get("until"), spec.get("think", 0.0)
    delay = spec["start_at"] - time.time()
    if delay > 0:
        time.sleep(delay)
    i = 0
    # time mode: at least one append, so a writer that a loaded machine started after the
    # window still reports a latency (never an empty sample)
    while (n is not None and i < n) or (until is not None and (i == 0 or time.time() < until)):
        t = time.perf_counter()
        try:
            write(i)
            lat.append(time.perf_counter() - t)
            flag = causes.ran_checkpoint if causes is not None else ran[0]
            if flag:
                lat_ckpt.append(lat[-1])
            if causes is not None:
                causes.ran_checkpoint = False
            else:
                ran[0] = False
        except Exception as exc:  # an error that reached the caller: counted, not fatal
            errors.append(f"{type(exc).__name__}: {exc}"[:200])
        i += 1
        if think:
            time.sleep(think)
    end = time.time()
    close()
    return {"lat": lat, "lat_ckpt": lat_ckpt, "errors": errors, "end": end,
            "bare_ckpt": bare_ckpt if causes is None else None,
            "causes": causes.as_dict() if causes and spec.get("causes", True) else None}


#: What the ``bound`` configuration adds to ``busy30`` (the writers8-p99 row's SPEC bound).
BOUND_WHAT = ("busy30 + the system calls of SPEC's per-write checks (the append bound's), the "
              "checkpoint lock SHARED for writes and checkpoints, EXCLUSIVE for a write that "
              "may restart the WAL (§4, §10.1), and the WAL kept bounded: past 4,000 frames a "
              "checkpoint with every writer held off (§16)")


class SpecChecks:
    """The ``bound`` writers' share of SPEC's per-write checks: the system calls they cannot do
    without, made the cheapest way (no Python API around them), on descriptors of their own
    (closed after the connection: closing one of ``state.db`` would drop SQLite's POSIX locks).
    The checkpoint lock is its own file beside the store (``<db>.bound.lock``)."""

    def __init__(self, path: str, conn: sqlite3.Connection, timeout: float) -> None:
        conn.execute("SELECT count(*) FROM sessions").fetchone()  # -shm exists from here
        self.conn, self.timeout = conn, timeout
        self.dir = os.path.dirname(path)
        self.db_fd = os.open(path, os.O_RDONLY)
        self.shm_fd = os.open(f"{path}-shm", os.O_RDONLY)
        self.lock_fd = os.open(f"{path}.bound.lock", os.O_RDONLY | os.O_CREAT, 0o600)

    def enter(self) -> None:
        """Right after BEGIN IMMEDIATE: the checks' system calls, the lock in its mode."""
        os.fstat(self.shm_fd)
        hdr = os.pread(self.shm_fd, 136, 0)
        # a header not (yet) readable counts as "may restart", as the store reads it
        restart = len(hdr) < 100 or (_U32.unpack_from(hdr, 16)[0] > 0 and _U32.unpack_from(
            hdr, 96)[0] >= _U32.unpack_from(hdr, 16)[0])
        fcntl.flock(self.lock_fd, fcntl.LOCK_EX if restart else fcntl.LOCK_SH)
        os.getpid()
        os.stat(self.dir)
        os.fstat(self.db_fd)
        os.pread(self.db_fd, 100, 0)

    def _log_extended(self) -> bool:
        """Frames no checkpoint has copied yet (writes beside the one that just ran)."""
        hdr = os.pread(self.shm_fd, 136, 0)
        return len(hdr) < 100 or _U32.unpack_from(hdr, 16)[0] > _U32.unpack_from(hdr, 96)[0]

    def leave(self) -> None:
        fcntl.flock(self.lock_fd, fcntl.LOCK_UN)

    def checkpoint(self) -> str:
        """A cadence checkpoint as SPEC asks of it on this SQLite: PASSIVE holding the lock
        SHARED (it overlaps no write that may restart the WAL, §4; skipped when one holds it),
        then, when the WAL is past :data:`DRAIN_FRAMES` and writes added frames beside it (or a
        reader kept it from copying them all), the same with every writer held off (the lock EXCLUSIVE, taken while this connection holds
        SQLite's write lock, queued for at most :data:`CADENCE_QUEUE_S`), so the WAL stays
        bounded (§16 ``checkpoint_cadence``; the busy handler's writers let it grow).

        Returns: ``"skipped"``, ``"busy"`` (SQLite's PASSIVE returned busy), ``"ran"``,
        ``"drained"`` or ``"error"``."""
        conn = self.conn
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return "skipped"
        try:
            busy, log, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.OperationalError:
            return "error"
        finally:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)
        if busy or log <= DRAIN_FRAMES or (copied >= log and not self._log_extended()):
            return "busy" if busy else "ran"
        try:
            conn.execute(f"PRAGMA busy_timeout = {round(CADENCE_QUEUE_S * 1000)}")
            try:
                conn.execute("BEGIN IMMEDIATE")
            finally:
                conn.execute(f"PRAGMA busy_timeout = {round(self.timeout * 1000)}")
        except sqlite3.OperationalError:
            return "ran"  # the queue for the write lock was long: a later cadence drains
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX)  # only a writer past its COMMIT holds it
        finally:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                fcntl.flock(self.lock_fd, fcntl.LOCK_UN)  # never left held: writers wait on it
                raise
        try:
            conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
        except sqlite3.OperationalError:
            return "error"
        finally:
            fcntl.flock(self.lock_fd, fcntl.LOCK_UN)
        return "drained"

    def close(self) -> None:
        for fd in (self.db_fd, self.shm_fd, self.lock_fd):
            os.close(fd)


#: mxFrame (offset 16 of the wal-index header) and nBackfill (offset 96), native order
_U32 = struct.Struct("=I")


def _staller(spec: dict) -> dict:
    """Hold the write lock ``hold`` s every ``period`` s from ``first`` s after the start.

    Takes the checkpoint lock exclusively first (a no-op when it is off), as maintenance does.
    Returns the holds as ``[[start, end], ...]`` epoch seconds.
    """
    path = spec["path"]
    conn = sqlite3.connect(path, timeout=60.0, isolation_level=None)
    guard = CheckpointLock(path)
    holds = []
    _await_gun(spec, "staller")
    t = spec["start_at"] + spec["first"]
    while t + spec["hold"] < spec["until"]:
        delay = t - time.time()
        if delay > 0:
            time.sleep(delay)
        guard.acquire_exclusive(60.0)
        conn.execute("BEGIN IMMEDIATE")
        a = time.time()
        time.sleep(spec["hold"])
        b = time.time()
        conn.execute("ROLLBACK")
        guard.release()
        holds.append([a, b])
        t += spec["period"]
    guard.close()
    conn.close()
    return {"holds": holds}


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


def _without(sorted_all: list[float], some: list[float]) -> list[float]:
    """``sorted_all`` minus one occurrence of each value of ``some`` (still sorted)."""
    left = Counter(some)
    out = []
    for x in sorted_all:
        if left[x]:
            left[x] -= 1
        else:
            out.append(x)
    return out


#: Longest wait for every process of a workload to have opened the store (a hang guard).
READY_GUARD_S = 180.0


def _await_gun(spec: dict, name: str) -> None:
    """Say this process is ready (store open), then wait for the parent's start time: every
    process starts together however long a loaded machine took to start them (issue 24 item 5:
    at ``--quick`` sizes a late start was most of the measured window). Sets
    ``spec["start_at"]`` and ``spec["until"]``."""
    gate = spec.get("gate")
    if not gate:
        return
    Path(gate, f"ready-{name}").touch()
    go = Path(gate, "go")
    deadline = time.monotonic() + READY_GUARD_S
    while not go.exists():
        if time.monotonic() > deadline:
            raise RuntimeError("no start signal from the benchmark within the guard")
        time.sleep(0.002)
    spec.update(json.loads(go.read_text()))


def _fire(gate: Path, names: list[str], duration: float | None) -> float:
    """Wait until every process said it is ready, then give them one start time (returned)."""
    deadline = time.monotonic() + READY_GUARD_S
    while not all((gate / f"ready-{n}").exists() for n in names):
        if time.monotonic() > deadline:
            raise RuntimeError(f"benchmark processes not ready within {READY_GUARD_S:g} s")
        time.sleep(0.01)
    start_at = time.time() + 0.2
    tmp = gate / "go.partial"
    tmp.write_text(json.dumps({"start_at": start_at, "until": start_at + duration
                               if duration is not None else None}))
    tmp.rename(gate / "go")
    return start_at


def _spawn(role: str, spec: dict, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, str(Path(__file__).resolve()), f"--{role}",
                             json.dumps(spec)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, text=True)


def _collect(p: subprocess.Popen, what: str) -> dict:
    out, err = p.communicate(timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"{what} exited {p.returncode}: {err[-2000:]}")
    return json.loads(out)


def run_workload(root: Path, name: str, config: str, writers: int,
                 per_writer: int | None = None, *, duration: float | None = None,
                 stall: bool = False, think: float = 0.0, causes: bool = True) -> dict:
    """Run ``writers`` processes of ``config`` (see :data:`CONFIGS`) on a fresh store.

    Args:
        per_writer: appends per writer (count mode), or
        duration: seconds each writer appends for (time mode).
        stall: a staller process holds the write lock (``HOLD_S`` every ``PERIOD_S``).
        think: seconds between two appends of one writer.
        causes: ``ours`` writers listen to the store's events (:class:`_Causes`); without it
            they run as a user's process does (no listener: the store builds no events), and
            ``causes`` and the cadence-checkpoint split (``ckpt_*``) are not known.
    Returns:
        ``{"throughput": msgs/s, "p50", "p99", "max": s, "errors": int, "error_samples": [str],
        "messages": int, "wall_s": s, "fairness": slowest/fastest writer's appends,
        "causes": merged retry causes of ``ours`` writers or None, "holds": [[a, b]]}``.
    """
    kind, timeout, lock, spin = _config(config)
    sids = [f"w{k}" for k in range(writers)]
    path = _fresh_store(root, name, sids)
    env = _env(lock)
    gate = root / f"{name}.gate"
    gate.mkdir()
    procs = [_spawn("worker", {"kind": kind, "path": str(path), "sid": sid, "n": per_writer,
                               "think": think, "timeout": timeout, "gate": str(gate),
                               "spin": spin, "causes": causes}, env) for sid in sids]
    staller = _spawn("staller", {"path": str(path), "gate": str(gate), "first": FIRST_HOLD_S,
                                 "hold": HOLD_S, "period": PERIOD_S},
                     env) if stall else None
    start_at = _fire(gate, sids + (["staller"] if stall else []), duration)
    outs = [_collect(p, f"{config} writer") for p in procs]
    holds = _collect(staller, "staller")["holds"] if staller else []
    lat = sorted(x for o in outs for x in o["lat"])
    lat_ck = sorted(x for o in outs for x in o.get("lat_ckpt", []))
    errors = [e for o in outs for e in o["errors"]]
    wall = max(o["end"] for o in outs) - start_at
    done = [len(o["lat"]) for o in outs]
    merged = _merge([o["causes"] for o in outs]) if kind == "ours" and causes else None
    bare_ckpt = (dict(sum((Counter(o["bare_ckpt"]) for o in outs), Counter()))
                 if kind in ("bare", "bound") else None)
    return {"throughput": len(lat) / wall, "p50": _pct(lat, 0.50), "p99": _pct(lat, 0.99),
            "max": lat[-1] if lat else float("nan"), "errors": len(errors),
            "error_samples": errors[:3], "messages": len(lat), "wall_s": wall,
            "fairness": (min(done) / max(done)) if max(done) else float("nan"),
            "causes": merged, "holds": holds, "bare_checkpoints": bare_ckpt,
            "ckpt_writes": len(lat_ck), "ckpt_p50": _pct(lat_ck, 0.5),
            "ckpt_max": lat_ck[-1] if lat_ck else float("nan"),
            "p99_without_ckpt": _pct(_without(lat, lat_ck), 0.99)}


def measure_writers8(per_writer: int = 400, runs: int = 3, writers: int = WRITERS,
                     configs: tuple[str, ...] = ("ours", "ours-nolock", "busy30")) -> dict:
    """Alternate ``single`` and each config ``runs`` times (count mode, no think time).

    The timed ``ours`` runs have no event listener, as a user's process has none (listening
    costs ours about 9 % msg/s and a step of p99 on 2 CPUs: the store then builds an event per
    write); each round adds one ``ours-events`` run of the same workload whose writers count the
    retry causes (:class:`_Causes`), for the notes only.

    Returns:
        ``{"single": [run dicts], "ours": [...], ..., "ours-events": [...]}`` (see
        :func:`run_workload`; ``causes`` is set in the ``ours-events`` runs only).
    """
    root = Path(tempfile.mkdtemp(prefix="bench-contention-"))
    out: dict[str, list[dict]] = {"single": [], **{c: [] for c in configs}}
    if "ours" in configs:
        out["ours-events"] = []
    try:
        for k in range(runs):
            order = list(configs) if k % 2 == 0 else list(reversed(configs))
            out["single"].append(run_workload(root, f"single{k}", "ours", 1,
                                              per_writer=per_writer * writers, causes=False))
            for c in order:
                out[c].append(run_workload(root, f"{c}{k}", c, writers, per_writer=per_writer,
                                           causes=False))
            if "ours" in configs:
                out["ours-events"].append(run_workload(root, f"ours-events{k}", "ours",
                                                       writers, per_writer=per_writer))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def measure_stall(duration: float = 15.0, runs: int = 3, writers: int = WRITERS,
                  configs: tuple[str, ...] = ("ours", "ours-nolock", "naive", "busy30")
                  ) -> dict:
    """Alternate the configs ``runs`` times, writers appending ``duration`` s around holds.

    Returns:
        ``{config: [run dicts]}`` (see :func:`run_workload`).
    """
    root = Path(tempfile.mkdtemp(prefix="bench-stall-"))
    out: dict[str, list[dict]] = {c: [] for c in configs}
    try:
        for k in range(runs):
            order = list(configs) if k % 2 == 0 else list(reversed(configs))
            for c in order:
                out[c].append(run_workload(root, f"stall-{c}{k}", c, writers, duration=duration,
                                           stall=True, think=THINK_S))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return out


def _merge(causes: list[dict | None]) -> dict:
    """Sum cause dicts (:class:`_Causes`.as_dict, or earlier merges)."""
    retries: Counter = Counter()
    locks: Counter = Counter()
    met_writes = met_total = 0
    ck: Counter = Counter()
    max_s = 0.0
    for c in causes:
        if not c:
            continue
        retries.update(c["retries"])
        locks.update(c.get("locks") or {})
        met_writes += c["met_writes"]
        met_total += c["met_total"]
        ck.update({k: v for k, v in c["checkpoints"].items() if k != "max_s"})
        max_s = max(max_s, c["checkpoints"].get("max_s", 0.0))
    return {"retries": dict(retries), "met_writes": met_writes, "met_total": met_total,
            "checkpoints": {**dict(ck), "max_s": max_s}, "locks": dict(locks)}


def merged_write_locks(samples: list[dict]) -> dict:
    """Write transactions by the checkpoint-lock mode they took (``shared``: beside
    checkpoints; ``exclusive``: may restart the WAL, issue 24 item 3), over run dicts."""
    out: Counter = Counter()
    for s in samples:
        out.update(((s.get("causes") or {}).get("locks")) or {})
    return dict(out)


def merged_causes(samples: list[dict]) -> dict:
    """The retry causes of run dicts summed, with ``writes`` (appends that succeeded)."""
    return {**_merge([s.get("causes") for s in samples]),
            "writes": sum(s["messages"] for s in samples)}


def summary(samples: list[dict], key: str) -> tuple[float, float, float]:
    """``(median, min, max)`` of ``key`` over run dicts."""
    vals = [s[key] for s in samples]
    return statistics.median(vals), min(vals), max(vals)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] in ("--worker", "--staller"):
        fn = _writer if argv[0] == "--worker" else _staller
        print(json.dumps(fn(json.loads(argv[1]))))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-writer", type=int, default=400)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--stall", type=float, default=0.0,
                    help="also run the stall workload for this many seconds per config")
    ap.add_argument("--configs", default="ours,ours-nolock,busy30")
    args = ap.parse_args(argv)
    res = measure_writers8(args.per_writer, args.runs, configs=tuple(args.configs.split(",")))
    if args.stall:
        res.update({f"stall {k}": v for k, v in measure_stall(args.stall, args.runs).items()})
    for name, samples in res.items():
        tp = summary(samples, "throughput")
        print(f"{name:18} {tp[0]:7.0f} msg/s ({tp[1]:.0f}-{tp[2]:.0f})  "
              f"p50 {summary(samples, 'p50')[0] * 1e3:6.2f} ms  "
              f"p99 {summary(samples, 'p99')[0] * 1e3:7.2f} ms  "
              f"max {summary(samples, 'max')[0] * 1e3:7.1f} ms  "
              f"fair {summary(samples, 'fairness')[0]:.2f}  "
              f"ckpt writes {summary(samples, 'ckpt_writes')[0]:.0f} "
              f"p50 {summary(samples, 'ckpt_p50')[0] * 1e3:.1f} ms "
              f"max {summary(samples, 'ckpt_max')[0] * 1e3:.1f} ms; "
              f"p99 without them {summary(samples, 'p99_without_ckpt')[0] * 1e3:.2f} ms  "
              f"errors {sum(s['errors'] for s in samples)}")
        bare = [s["bare_checkpoints"] for s in samples if s.get("bare_checkpoints")]
        if bare:
            print(f"{'':18} PASSIVE checkpoints: {sum(b.get('busy', 0) for b in bare)} returned "
                  f"busy at once, {sum(b.get('ran', 0) for b in bare)} ran, "
                  f"{sum(b.get('drained', 0) for b in bare)} went on to a drain, "
                  f"{sum(b.get('skipped', 0) for b in bare)} skipped (lock held)")
        c = merged_causes(samples)
        if c["writes"] and any(s.get("causes") for s in samples):
            print(f"{'':18} retries {c['retries']}; met a checkpoint: {c['met_writes']} writes "
                  f"({c['met_total']} times); checkpoints {c['checkpoints']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
