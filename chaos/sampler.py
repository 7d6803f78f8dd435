"""The sampler: what every role process holds, sampled every ~100 ms during a run (SPEC §16.3).

``single_wal_generation`` ("sampled during the run, no role process writes while it holds a
``-wal`` inode that is not the one at the path"), ``no_lockup`` ("on a stall the report names the
holders and the write-lock owner at that moment") and the report's WAL-size plot need facts that
no role can record about itself (a frozen or killed process records nothing). A thread of the
runner process reads them from ``/proc`` and writes one ``sample`` record per tick to
``history/sampler.jsonl`` (``process: "sampler"``).

A ``sample`` record (besides ``t``, ``wall``, ``process``, ``pid``, ``type``):

``seq``          sample number, 0-based
``path``         what is at the store's paths now: ``{"db"|"wal"|"shm": {"dev", "ino", "bytes"}
                 or null}``
``wal_bytes``    size of ``state.db-wal`` at the path in bytes (0 when absent)
``write_lock``   the WAL write-lock owner (POSIX write lock on byte 120 of ``-shm``, or
                 RESERVED/PENDING of the main file, from ``/proc/locks``):
                 ``{"pid", "process", "command"}`` or null
``locks``        every POSIX lock on the store: ``[{"pid", "process", "file", "start", "end",
                 "lock" (SQLite meaning), "write", "waiting"}]``
``procs``        one entry per role process (and their descendants, e.g. a maintenance
                 subprocess, with ``parent`` set): ``{"process", "pid", "status" (psutil status:
                 running/sleeping/stopped/zombie/...), "db"|"wal"|"shm": {"ino", "dev",
                 "deleted", "current"} or null}``; ``current`` is false when the inode the process
                 holds is not the one at the path (a retired generation). A file opened through
                 several descriptors is listed once. ``unreadable: true`` when ``/proc/PID/fd``
                 could not be read.
``in_flight``    operations invoked and not yet completed at the sample time, from the role
                 history files: ``[{"process", "op", "op_id", "since" (monotonic s)}]``
``waiting``      the processes that wait on the store: a blocked request in ``/proc/locks`` or a
                 write op in flight while another process owns the write lock (sorted names)
``checkpoint_lock`` the ``flock`` holders of ``state.db.checkpoint.lock`` (issue 12): ``[{"pid",
                 "process", "mode" (exclusive: a checkpoint or a maintenance command; shared: a
                 write transaction), "status" (``stopped`` for a frozen holder), "command"}]``;
                 one sample per tick gives the lock intervals of every process

The machine's load (issue 27 item 5): :func:`measure` spins this thread for 80 ms of CPU and
records wall/CPU time (1 on an idle core, about the runnable processes per core when loaded); the
runner writes one before its clock and one after the roles stopped as ``load`` records, and the
checkers whose bounds are about the machine scale them by :func:`chaos.history.history_load_factor`
(``docs/decisions/0021-honest-verdicts.md``).

Linux only (``/proc``); elsewhere the sampler records nothing and says so once in a ``sample``
record with ``unavailable`` set. The sampler never opens a store file: it reads links, ``stat``s
``/proc/PID/fd/N`` and reads ``/proc/locks`` (:mod:`hermes_state.processes.holders`).
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Callable, Iterable

from hermes_state import testing as probes

from .history import WRITE_OPS, HistoryWriter, JsonlTail
from .store import RUNNER_PROCESS, SAMPLER_PROCESS, history_file

#: Seconds between samples.
INTERVAL_S = 0.1
#: Name of the sampler's history file and its ``process`` field.
PROCESS = SAMPLER_PROCESS
_SUFFIX = {"db": "", "wal": "-wal", "shm": "-shm"}
_DELETED = " (deleted)"


def path_identity(db_path: str | os.PathLike) -> dict:
    """``{"db"|"wal"|"shm": {"dev", "ino", "bytes"} or None}`` of the files at the store's paths."""
    out: dict = {}
    for key, suffix in _SUFFIX.items():
        try:
            st = os.stat(f"{os.fspath(db_path)}{suffix}")
            out[key] = {"dev": st.st_dev, "ino": st.st_ino, "bytes": st.st_size}
        except OSError:
            out[key] = None
    return out


def held_files(pid: int, db_path: str | os.PathLike, at_path: dict | None = None) -> dict:
    """What ``pid`` holds of the store, read from ``/proc/PID/fd``.

    Args:
        pid: the process.
        db_path: the store's ``state.db`` path (realpath-compared).
        at_path: :func:`path_identity` of the same moment (computed when None).
    Returns:
        ``{"db"|"wal"|"shm": {"dev", "ino", "deleted", "current"} or None}``; with
        ``"unreadable": True`` when the descriptors could not be listed (the process exited or
        belongs to another user).
    """
    real = os.path.realpath(os.fspath(db_path))
    at_path = path_identity(real) if at_path is None else at_path
    out: dict = {k: None for k in _SUFFIX}
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        out["unreadable"] = True
        return out
    base = os.path.basename(real)
    for fd in fds:
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if base not in target:
            continue
        deleted = target.endswith(_DELETED)
        path = target[: -len(_DELETED)] if deleted else target
        key = next((k for k, s in _SUFFIX.items() if path == real + s), None)
        if key is None:
            continue
        try:
            st = os.stat(f"{fd_dir}/{fd}")
        except OSError:
            continue
        cur = at_path.get(key)
        current = (not deleted and cur is not None
                   and (cur["dev"], cur["ino"]) == (st.st_dev, st.st_ino))
        if not current and not deleted:
            # The path may have changed since ``at_path`` was taken (a first writer just created
            # the -wal): judge against the path as it is now, after this descriptor was read.
            try:
                now = os.stat(path)
                current = (now.st_dev, now.st_ino) == (st.st_dev, st.st_ino)
            except OSError:
                current = False
        entry = {"dev": st.st_dev, "ino": st.st_ino, "deleted": deleted, "current": current}
        prev = out[key]
        # A process may hold two generations (old and new descriptors): keep the retired one,
        # it is the one the checkers care about.
        if prev is None or (prev["current"] and not current):
            out[key] = entry
    return out


#: ``/proc/PID/stat`` state letters as psutil names them.
_STATES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped", "t": "tracing-stop",
           "Z": "zombie", "X": "dead", "I": "idle", "P": "parked", "W": "waking", "K": "wake-kill"}


def process_table() -> dict[int, tuple[int, str]]:
    """``{pid: (ppid, status)}`` of every process, from one pass over ``/proc/*/stat``.

    One pass per sample instead of a psutil ``children()`` scan per role (that costs a full
    process-table walk each time). Status names follow psutil (``running``, ``sleeping``,
    ``stopped``, ``zombie``, ...).
    """
    out: dict[int, tuple[int, str]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        rest = data[data.rfind(b")") + 2:].split()
        if len(rest) < 2:
            continue
        state = rest[0].decode("ascii", "replace")
        out[int(entry.name)] = (int(rest[1]), _STATES.get(state, state))
    return out


def _is_write_lock(rec: probes.LockRecord) -> bool:
    """The rule of :func:`hermes_state.write_lock_owner` on one held lock: a WRITE lock
    over byte 120 of ``-shm`` (WAL mode) or over PENDING/RESERVED of the main file."""
    if rec.waiting or not rec.write:
        return False

    def covers(b: int) -> bool:
        return rec.start <= b and (rec.end is None or rec.end >= b)

    if rec.file.endswith("-shm"):
        return covers(120)
    return covers(probes.PENDING_BYTE) or covers(probes.PENDING_BYTE + 1)


class _InFlight:
    """Incremental tail of the role history files: which operations are in flight now."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._tail = JsonlTail(directory, skip=(history_file(RUNNER_PROCESS),
                                                history_file(PROCESS)))
        self.open_ops: dict[str, dict] = {}

    def poll(self) -> list[dict]:
        for rec in self._tail.new_records():
            typ, op_id = rec.get("type"), rec.get("op_id")
            if op_id is None:
                continue
            if typ == "invoke":
                self.open_ops[op_id] = {"process": rec.get("process"), "op": rec.get("op"),
                                        "op_id": op_id, "since": rec.get("t")}
            elif typ in ("ok", "fail", "info"):
                self.open_ops.pop(op_id, None)
        return sorted(self.open_ops.values(), key=lambda o: (o["since"] or 0.0, o["op_id"]))


class Sampler:
    """A daemon thread writing ``sample`` records every :data:`INTERVAL_S` seconds.

    Args:
        db_path: the run's ``state.db``.
        history_dir: the run's ``history/`` directory (``sampler.jsonl`` is written there; the
            role files are tailed for in-flight operations).
        processes: callable returning ``[(process name, pid)]`` of the role processes alive now.
        interval_s: seconds between samples.
    """

    def __init__(self, db_path: str | os.PathLike, history_dir: str | os.PathLike,
                 processes: Callable[[], Iterable[tuple[str, int]]],
                 interval_s: float = INTERVAL_S) -> None:
        self.db_path = os.path.realpath(os.fspath(db_path))
        self.history_dir = Path(history_dir)
        self.processes = processes
        self.interval_s = interval_s
        self.writer = HistoryWriter(self.history_dir / history_file(PROCESS), PROCESS)
        self.inflight = _InFlight(self.history_dir)
        self.seq = 0
        self.errors = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Start the sampling thread (returns at once)."""
        self._thread = threading.Thread(target=self._loop, name="chaos-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread (after its current sample) and close the file (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        self.writer.close()

    def _loop(self) -> None:
        if not probes.HAVE_PROC:
            self.writer.record("sample", seq=0, unavailable="no /proc on this platform")
            return
        while True:
            try:
                self.sample()
            except Exception as exc:  # noqa: BLE001 - a sampling hiccup must not end the run
                self.errors += 1
                if self.errors <= 3:
                    self.writer.record("sample_error", error=f"{type(exc).__name__}: {exc}")
            if self._stop.wait(self.interval_s):
                break

    def _procs(self) -> list[tuple[str, int, int | None, str]]:
        """``[(name, pid, parent pid or None, status)]``: the roles and their descendants."""
        table = process_table()
        kids: dict[int, list[int]] = {}
        for pid, (ppid, _) in table.items():
            kids.setdefault(ppid, []).append(pid)
        out = []
        for name, pid in self.processes():
            if pid is None or pid not in table:
                continue
            out.append((name, pid, None, table[pid][1]))
            todo = list(kids.get(pid, ()))
            while todo:
                k = todo.pop()
                out.append((name, k, pid, table[k][1]))
                todo.extend(kids.get(k, ()))
        return out

    def sample(self) -> dict:
        """Take one sample now and record it; returns the record."""
        at_path = path_identity(self.db_path)
        procs = self._procs()
        name_of = {pid: name for name, pid, _, _ in procs}
        entries = []
        for name, pid, parent, status in procs:
            entry = {"process": name, "pid": pid, "status": status}
            if parent is not None:
                entry["parent"] = parent
            entry.update(held_files(pid, self.db_path, at_path))
            entries.append(entry)
        locks = []
        owner = None
        for rec in probes.read_locks(self.db_path):
            locks.append({"pid": rec.pid, "process": name_of.get(rec.pid), "file": rec.file,
                          "start": rec.start, "end": rec.end, "lock": rec.meaning(),
                          "write": rec.write, "waiting": rec.waiting})
            if owner is None and _is_write_lock(rec):
                owner = {"pid": rec.pid, "process": name_of.get(rec.pid),
                         "command": probes.describe_pid(rec.pid)}
        in_flight = self.inflight.poll()
        waiting = {name_of[lk["pid"]] for lk in locks if lk["waiting"] and lk["pid"] in name_of}
        if owner is not None:  # a process that is gone (SIGKILLed mid-write) waits on nothing
            alive = {name for name, _, parent, _ in procs if parent is None}
            waiting |= {o["process"] for o in in_flight
                        if o["op"] in WRITE_OPS and o["process"] != owner["process"]
                        and o["process"] in alive}
        wal = at_path.get("wal")
        ckpt = [{"pid": h.pid, "process": name_of.get(h.pid), "mode": h.mode,
                 "status": h.status, "command": h.command}
                for h in probes.lock_holders(self.db_path) if not h.waiting]
        rec = self.writer.record(
            "sample", seq=self.seq, path=at_path, wal_bytes=wal["bytes"] if wal else 0,
            write_lock=owner, locks=locks, procs=entries, in_flight=in_flight,
            waiting=sorted(w for w in waiting if w), checkpoint_lock=ckpt)
        self.seq += 1
        return rec


# ------------------------------------------------------------------------------ the machine's load
#: CPU seconds each load calibration spins (in slices of :data:`_SLICE_S`); see :func:`calibrate`.
CALIBRATION_CPU_S = 0.08
_SLICE_S = 0.004


def calibrate(cpu_s: float = CALIBRATION_CPU_S) -> dict:
    """Spin this thread for ``cpu_s`` CPU seconds; ``{"cpu_s", "wall_s", "ratio"}`` (wall time
    per CPU second: 1 on an idle core, about the runnable processes per core when loaded)."""
    c0, w0 = time.thread_time(), time.monotonic()
    x = 0
    while time.thread_time() - c0 < cpu_s:
        end = time.thread_time() + _SLICE_S
        while time.thread_time() < end:
            x += 1
    cpu, wall = time.thread_time() - c0, time.monotonic() - w0
    return {"cpu_s": round(cpu, 4), "wall_s": round(wall, 4),
            "ratio": round(max(1.0, wall / cpu) if cpu > 0 else 1.0, 3)}


def loadavg_per_cpu() -> float | None:
    """The 1-minute load average per CPU, or None where the OS has none."""
    try:
        return round(os.getloadavg()[0] / (os.cpu_count() or 1), 3)
    except (OSError, AttributeError):
        return None


def measure(when: str) -> dict:
    """One measurement: :func:`calibrate` plus ``loadavg_per_cpu`` and ``when`` (a label)."""
    return {"when": when, **calibrate(), "loadavg_per_cpu": loadavg_per_cpu(),
            "cpus": os.cpu_count()}
