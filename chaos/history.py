"""The history of a chaos run: one JSON object per line, flushed as it happens (SPEC §16.1).

Every role process writes its own file ``history/<process>.jsonl`` (one ``write()`` per line,
flushed, so a ``kill -9`` loses no line that was written); the runner and the nemesis write
``history/runner.jsonl``. :func:`load` merges them into one list ordered by ``t``.

Common fields of every record:

``t``        CLOCK_MONOTONIC seconds (system-wide on Linux, so comparable across processes)
``wall``     epoch seconds
``process``  ``gateway-0``, ``cli-1``, ``runner``, ``nemesis``
``pid``      OS pid
``type``     one of the record types below

Record types:

``invoke``   an operation starts: ``op`` (``append``, ``create_session``, ``end_session``,
             ``open``, ``close``, ``hold_lock``, ``read``, ...), ``op_id`` (``"<process>:<n>"``,
             unique in the run), ``payload_id`` (appends: unique in the run, also stored in the
             message's ``platform_message_id``), ``session_id``
``ok``       the operation completed: ``op``, ``op_id``, ``payload_id``, ``latency_s``, ``value``
``fail``     the operation certainly did not take effect: ``op``, ``op_id``, ``payload_id``,
             ``error`` (exception class name), ``message``, ``spooled`` (appends diverted to the
             spool, SPEC §10.1)
``info``     outcome unknown. :func:`complete` turns every invoke without a completion (the
             process was killed mid-call) into ``info`` with ``synthesized: true``
``event``    a store event (``hermes_state.events``): ``event`` (``retry``, ``write``,
             ``checkpoint``, ``refusal``, ``capture``, ``write_gave_up``, ``open``) and its fields
``nemesis``  a fault: ``fault``, ``phase`` (``start``/``done``/``error``), ``step`` (index in the
             schedule), details (``files``, ``role``, ``pids``, ``signal``, ``error``)
``process``  lifecycle: ``phase`` (``spawn``/``exit``), ``role``, ``kind``, ``index``,
             ``exitcode`` (negative = killed by that signal)
``phase``    run phase: ``phase`` in ``warm-up``, ``chaos``, ``heal``, ``recover`` (``chaos
             watch``: ``watch``, ``end``)
``sample``   what the runner's sampler saw every ~100 ms (``process: "sampler"``, file
             ``history/sampler.jsonl``): the inodes each role process holds, the WAL size, the
             write-lock owner, the waiters (fields in :mod:`chaos.sampler`)
``observed`` what ``chaos watch`` saw change: holders, write-lock owner, checkpoints
             (``history/watch.jsonl``, :mod:`chaos.watch`)
``load``     the machine's load measured by the runner before the clock and after the roles
             stopped (:func:`chaos.sampler.measure`): ``when``, ``ratio`` (wall seconds per CPU
             second of a calibration spin), ``cpu_s``, ``wall_s``, ``loadavg_per_cpu``, ``cpus``;
             :func:`history_load_factor` turns them into the factor machine-time bounds scale by
"""

from __future__ import annotations

import bisect
import io
import json
import os
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from .files import inputs

#: The completions of an ``invoke`` (Jepsen: ok, fail, info).
COMPLETIONS = ("ok", "fail", "info")
#: Largest history file read (bytes): a long run's history is tens of MiB.
MAX_HISTORY_BYTES = 4 * 1024 ** 3

#: Operations that write to the store (SPEC §16.1 role workloads). ``open`` and ``close`` are
#: not writes for the checkers; ``hold_lock`` is an adversary's bare transaction.
WRITE_OPS = frozenset({
    "append", "append_message", "create_session", "end_session", "reopen_session",
    "set_title", "set_session_title", "set_auto_title", "update_token_counts", "set_meta",
    "delete_session", "clear_messages", "prune_sessions", "replay_spool",
})
#: The adversaries' bare transactions (``lock_holder``/``long_reader``): long by design, not
#: store clients.
ADVERSARY_OPS = frozenset({"hold_lock", "hold_read", "long_read"})
#: Process names that are not role instances.
TOOLKIT_PROCESSES = frozenset({"runner", "nemesis", "sampler", "watch"})


class HistoryWriter:
    """Append-only JSONL writer for one process; thread-safe; one ``write()`` per record.

    Args:
        path: the file (created, parents too).
        process: the ``process`` field stamped on every record.
    """

    def __init__(self, path: str | os.PathLike, process: str) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.process = process
        self.pid = os.getpid()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()
        self._seq = 0

    def next_op_id(self) -> str:
        """A run-unique operation id ``<process>:<n>``."""
        with self._lock:
            self._seq += 1
            return f"{self.process}:{self._seq}"

    def record(self, type_: str, **fields) -> dict:
        """Write one record now. ``t``/``wall`` default to now; returns the record."""
        rec = {"t": fields.pop("t", None) or time.monotonic(),
               "wall": fields.pop("wall", None) or time.time(),
               "process": self.process, "pid": fields.pop("pid", None) or self.pid,
               "type": type_}
        rec.update(fields)
        line = (json.dumps(rec, ensure_ascii=False, default=str) + "\n").encode("utf-8", "replace")
        with self._lock:
            os.write(self._fd, line)
        return rec

    def event(self, ev: dict) -> None:
        """Record a store event dict (``hermes_state.events`` listener signature)."""
        fields = dict(ev)
        kind = fields.pop("event")
        self.record("event", event=kind, **fields)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_file(path: str | os.PathLike) -> list[dict]:
    """Records (JSON objects) of one JSONL file; a torn last line (killed mid-write) and any
    line that is not a JSON object are skipped.

    Raises:
        chaos.files.inputs.InputError: the file is a link, a FIFO, a device, a directory, larger
            than :data:`MAX_HISTORY_BYTES`, or unreadable (an OSError).
    """
    out = []
    fd, _ = inputs.open_regular(path, limit=MAX_HISTORY_BYTES)  # no link, FIFO or device
    with io.TextIOWrapper(os.fdopen(fd, "rb"), encoding="utf-8", errors="replace") as fh:
        for line in fh:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict):
                out.append(rec)
    return out


def load(history_dir: str | os.PathLike) -> list[dict]:
    """Merge every ``*.jsonl`` in ``history_dir`` into one list sorted by ``t`` (stable)."""
    records: list[dict] = []
    for path in sorted(Path(history_dir).glob("*.jsonl")):
        records.extend(read_file(path))
    records.sort(key=lambda r: r.get("t", 0.0))
    return records


def normalise(records: list[dict]) -> list[dict]:
    """Put the runner's lifecycle records under the process they are about, in place.

    The runner writes a role process's ``process`` ``exit`` (and ``spawn``) records on its behalf
    with ``process_of``/``child_pid``; after this they carry ``process``/``pid`` of the child, so
    :func:`complete` stamps the child's unfinished invokes at its exit. Returns ``records``.
    """
    for r in records:
        if r.get("type") == "process" and r.get("process_of"):
            r["process"] = r["process_of"]
            r["pid"] = r.get("child_pid", r.get("pid"))
    return records


def load_run_history(history_dir: str | os.PathLike) -> list[dict]:
    """A run's history from its per-process files: :func:`load` -> :func:`normalise` ->
    :func:`complete`. The runner and the report both read an unmerged history this way, so an
    interrupted run's synthesized records land where a finished run's would."""
    return complete(normalise(load(history_dir)))


def complete(records: Iterable[dict]) -> list[dict]:
    """Jepsen's completion: every ``invoke`` without ``ok``/``fail``/``info`` gets an ``info``.

    The synthesized record carries ``synthesized: true`` and the invoke's fields, stamped at the
    time of the process's exit record if there is one, else at the end of the history.
    """
    records = list(records)
    done = {r["op_id"] for r in records if r.get("type") in ("ok", "fail", "info") and "op_id" in r}
    exits = {r["process"]: r for r in records if r.get("type") == "process"
             and r.get("phase") == "exit"}
    end_t = max((r.get("t", 0.0) for r in records), default=0.0)
    extra = []
    for r in records:
        if r.get("type") == "invoke" and r.get("op_id") not in done:
            ex = exits.get(r["process"])
            info = {k: v for k, v in r.items() if k not in ("type", "t", "wall")}
            info.update(type="info", synthesized=True,
                        t=ex["t"] if ex else end_t, wall=ex["wall"] if ex else r.get("wall"))
            extra.append(info)
    out = records + extra
    out.sort(key=lambda r: r.get("t", 0.0))
    return out


def write_merged(records: Iterable[dict], path: str | os.PathLike) -> None:
    """Write ``records`` as one ``history.jsonl``."""
    with open(path, "w", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, ensure_ascii=False, default=str) + "\n")


class JsonlTail:
    """Incremental reader of the ``*.jsonl`` history files in a directory as they grow.

    Only whole lines are consumed (a line still being written is read on the next poll), so
    records come out exactly once. Used by the runner (``after:`` counts, progress) and the
    sampler (operations in flight).

    Args:
        directory: the run's ``history/`` directory.
        skip: file names to ignore (e.g. ``runner.jsonl``).
    """

    def __init__(self, directory: Path, skip: tuple[str, ...] = ()) -> None:
        self.directory = Path(directory)
        self.skip = frozenset(skip)
        self.offsets: dict[Path, int] = {}

    def new_records(self) -> Iterator[dict]:
        """Yield every record appended since the last call (unparseable lines are skipped)."""
        for path in sorted(self.directory.glob("*.jsonl")):
            if path.name in self.skip:
                continue
            off = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as fh:
                    fh.seek(off)
                    data = fh.read()
            except OSError:
                continue
            end = data.rfind(b"\n")
            if end < 0:
                continue
            self.offsets[path] = off + end + 1
            for line in data[: end + 1].splitlines():
                try:
                    rec = json.loads(line)
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    yield rec



# ------------------------------------------------------------------------------ accessors
_INDEX_SUFFIX = re.compile(r"-\d+$")


def role_of(process: str | None) -> str:
    """``gateway-0`` -> ``gateway`` (the role name is the process name without ``-<i>``)."""
    return _INDEX_SUFFIX.sub("", process or "")


def proc_name(rec: dict) -> str | None:
    """The role process a record is about.

    Lifecycle (``process``) records may be written by the runner with ``role``/``index`` fields;
    every other record carries the emitting process in ``process``.
    """
    name = rec.get("process")
    if rec.get("type") == "process" and (name in TOOLKIT_PROCESSES or not name):
        if rec.get("role") is not None and rec.get("index") is not None:
            return f"{rec['role']}-{rec['index']}"
    return name


def is_type(rec: dict, type_: str, **fields) -> bool:
    """True when ``rec`` has ``type`` ``type_`` and every given field equal (Jepsen's
    predicates: ``is_type(r, "nemesis", phase="done")``)."""
    return rec.get("type") == type_ and all(rec.get(k) == v for k, v in fields.items())


def of_type(history: Iterable[dict], type_: str, **fields) -> list[dict]:
    """The records of ``history`` for which :func:`is_type` holds, in order."""
    return [r for r in history if is_type(r, type_, **fields)]


def lifecycle(history: Iterable[dict], phase: str) -> dict[str, dict]:
    """``{process: its spawn record}`` (first) or ``{process: its exit record}`` (last) for
    ``phase`` ``spawn``/``exit``."""
    out: dict[str, dict] = {}
    for r in history:
        if r.get("type") == "process" and r.get("phase") == phase:
            name = proc_name(r)
            if name and (phase == "exit" or name not in out):
                out[name] = r
    return out


def exit_records(history: Iterable[dict]) -> dict[str, dict]:
    """``{process: its (last) exit record}``."""
    return lifecycle(history, "exit")


def spawn_records(history: Iterable[dict]) -> dict[str, dict]:
    """``{process: its (first) spawn record}``."""
    return lifecycle(history, "spawn")


def events_of(history: Iterable[dict], kind: str) -> list[dict]:
    """Store events of one kind (``retry``, ``write``, ``checkpoint``, ...)."""
    return of_type(history, "event", event=kind)


def nemesis_steps(history: Iterable[dict]) -> list[tuple[dict, dict | None]]:
    """Every nemesis step as ``(start record, done record or None)``, in start order (a step
    without a ``start`` record is its ``done`` record twice)."""
    steps: dict = {}
    for r in history:
        if r.get("type") != "nemesis":
            continue
        key = r.get("step")
        if r.get("phase") == "start":
            steps[key] = [r, None]
        elif r.get("phase") == "done":
            steps.setdefault(key, [r, None])[1] = r
    return [(a, b) for a, b in steps.values()]


def phase_time(history: Iterable[dict], phase: str) -> float | None:
    """``t`` of the first ``phase`` record of that phase (``heal``, ``chaos``...), or None."""
    return next((float(r["t"]) for r in history if is_type(r, "phase", phase=phase)), None)


def end_time(history: Iterable[dict]) -> float:
    """The latest ``t`` of the history (0.0 when empty)."""
    return max((float(r.get("t", 0.0)) for r in history), default=0.0)


def brief(rec: dict, keys: Iterable[str] | None = None) -> dict:
    """A record without bulky fields (long messages cut), for evidence."""
    out = {}
    for k, v in rec.items():
        if keys is not None and k not in keys:
            continue
        if isinstance(v, str) and len(v) > 300:
            v = v[:297] + "..."
        out[k] = v
    return out


#: The phases a run (or a ``chaos watch``) starts with: the run's time 0.
START_PHASES = ("warm-up", "watch")
#: Record and evidence fields that hold a time on the history's clock (CLOCK_MONOTONIC seconds).
TIME_KEYS = frozenset({"t", "T", "t0", "t1", "t_invoke", "t_done", "t_start", "t_end",
                       "invoked_t", "bound_crossed_t", "heal_t", "ack_t", "cut_t", "crossed_t",
                       "sample_t", "exit_t"})
#: Nested fields of an evidence item that may be the history record it quotes.
_EVIDENCE_RECORDS = ("record", "invoke", "first", "op", "done", "sample_before", "event")


def run_start(history: Iterable[dict]) -> float:
    """The run's time 0 on the history's clock: its first ``warm-up`` (or ``watch``) phase
    record, else its earliest record (0.0 for an empty history). Every time a person reads --
    verdict text, evidence, the report's axes -- is in seconds since this moment (issue 16)."""
    records = list(history)
    starts = [float(r["t"]) for r in records
              if r.get("type") == "phase" and r.get("phase") in START_PHASES
              and isinstance(r.get("t"), (int, float))]
    if starts:
        return min(starts)
    times = [float(r["t"]) for r in records if isinstance(r.get("t"), (int, float))]
    return min(times) if times else 0.0


def fmt_t(t: float | None, start: float) -> str:
    """A time ``t`` on the history's clock as seconds since ``start`` (:func:`run_start`):
    ``4.213s``; ``?`` when unknown."""
    return "?" if t is None else f"{t - start:.3f}s"


def evidence_time(item) -> float | None:
    """The time (history clock) an evidence item is about: its ``t`` (or another
    :data:`TIME_KEYS` field), else that of the record it quotes (``record``, ``invoke``, ...);
    None when it carries none."""
    if not isinstance(item, dict):
        return None
    for key in ("t", "invoked_t", "t_invoke", "t_start", "T", "t0", "heal_t", "ack_t"):
        if isinstance(item.get(key), (int, float)) and not isinstance(item.get(key), bool):
            return float(item[key])
    for key in _EVIDENCE_RECORDS:
        found = evidence_time(item.get(key))
        if found is not None:
            return found
    return None


def evidence_process(item) -> str | int | None:
    """The process (name, else PID) an evidence item is about, if it names one."""
    if not isinstance(item, dict):
        return None
    for key in ("process", "holder", "pid", "holder_pid"):
        if isinstance(item.get(key), (str, int)) and not isinstance(item.get(key), bool):
            return item[key]
    for key in _EVIDENCE_RECORDS:
        found = evidence_process(item.get(key))
        if found is not None:
            return found
    return None


def relative_times(obj, start: float):
    """A copy of ``obj`` (dicts, lists) with every :data:`TIME_KEYS` number turned into seconds
    since ``start`` (3 decimals) and the epoch ``wall`` fields dropped: what a person reads."""
    if isinstance(obj, dict):
        out = {}
        for k, v in obj.items():
            if k == "wall":
                continue
            if k in TIME_KEYS and isinstance(v, (int, float)) and not isinstance(v, bool):
                out[k] = round(float(v) - start, 3)
            else:
                out[k] = relative_times(v, start)
        return out
    if isinstance(obj, list):
        return [relative_times(v, start) for v in obj]
    return obj


def _first(key: str, *records: dict | None):
    """The first non-None ``key`` of ``records`` (None records skipped), else None."""
    return next((r[key] for r in records if r is not None and r.get(key) is not None), None)


@dataclass
class Op:
    """One operation (Jepsen's op): its ``invoke`` and its completion (``ok``/``fail``/``info``)."""

    op_id: str
    op: str
    process: str
    invoke: dict | None = None
    done: dict | None = None

    @property
    def kind(self) -> str:
        """``ok``, ``fail`` or ``info`` (no completion at all counts as ``info``)."""
        return self.done["type"] if self.done is not None else "info"

    @property
    def t_invoke(self) -> float:
        if self.invoke is not None:
            return float(self.invoke.get("t", 0.0))
        d = self.done or {}
        return float(d.get("t", 0.0)) - float(d.get("latency_s") or 0.0)

    @property
    def t_done(self) -> float | None:
        """Completion time; None when the outcome is unknown and no record says when."""
        return None if self.done is None else float(self.done.get("t", 0.0))

    @property
    def payload_id(self):
        return _first("payload_id", self.done, self.invoke)

    @property
    def error(self) -> str | None:
        return None if self.done is None else self.done.get("error")

    @property
    def pid(self):
        return _first("pid", self.invoke, self.done)

    @property
    def synthesized(self) -> bool:
        """True when the completion was made up by :func:`complete` (the process died)."""
        return bool(self.done is not None and self.done.get("synthesized"))

    def is_write(self) -> bool:
        """True for an op of :data:`WRITE_OPS`."""
        return self.op in WRITE_OPS

    def record(self) -> dict:
        """The most telling record for evidence: the completion, else the invoke."""
        return self.done if self.done is not None else (self.invoke or {})


def pair_ops(history: Iterable[dict]) -> list[Op]:
    """Pair every ``invoke`` with its completion by ``op_id`` (first completion wins).

    A completion whose invoke is missing still yields an :class:`Op`. Ops are returned in invoke
    order.
    """
    ops: dict[str, Op] = {}
    order: list[str] = []
    for r in history:
        typ = r.get("type")
        if typ != "invoke" and typ not in COMPLETIONS:
            continue
        op_id = r.get("op_id")
        if op_id is None:
            continue
        op = ops.get(op_id)
        if op is None:
            op = ops[op_id] = Op(op_id=op_id, op=r.get("op", "?"), process=r.get("process", "?"))
            order.append(op_id)
        if typ == "invoke":
            if op.invoke is None:
                op.invoke = r
        elif op.done is None:
            op.done = r
    out = [ops[i] for i in order]
    out.sort(key=lambda o: o.t_invoke)
    return out


# ------------------------------------------------------------------------------ samples
class Samples:
    """The ``sample`` records of a history (:mod:`chaos.sampler`), sorted by ``t``, with lookups
    by time.

    Attributes:
        records: the samples that carry data (``unavailable`` ones excluded).
        unavailable: the reason the sampler could not sample (no ``/proc``), else None.
    """

    def __init__(self, history: Iterable[dict]) -> None:
        recs = [r for r in history if r.get("type") == "sample"]
        self.unavailable = next((r["unavailable"] for r in recs if r.get("unavailable")), None)
        self.records = sorted((r for r in recs if not r.get("unavailable")),
                              key=lambda r: float(r.get("t", 0.0)))
        self._ts = [float(r.get("t", 0.0)) for r in self.records]

    def __len__(self) -> int:
        return len(self.records)

    def at_or_after(self, t: float) -> dict | None:
        """The first sample taken at or after ``t`` (None past the end)."""
        i = bisect.bisect_left(self._ts, t)
        return self.records[i] if i < len(self.records) else None

    def at_or_before(self, t: float) -> dict | None:
        """The last sample taken at or before ``t`` (None before the first)."""
        i = bisect.bisect_right(self._ts, t)
        return self.records[i - 1] if i > 0 else None

    def nearest(self, t: float) -> dict | None:
        """The sample closest in time to ``t``."""
        a, b = self.at_or_before(t), self.at_or_after(t)
        if a is None or b is None:
            return a or b
        return a if t - float(a["t"]) <= float(b["t"]) - t else b

    def between(self, t0: float, t1: float) -> list[dict]:
        """Samples with ``t0 <= t <= t1``."""
        return self.records[bisect.bisect_left(self._ts, t0):bisect.bisect_right(self._ts, t1)]


#: States of the store the sampler can witness, for a scenario's ``must_observe``.
SAMPLED_STATES = ("retired_wal_held", "write_lock_held", "lock_wait", "checkpoint_lock_held")


def observed_states(history: Iterable[dict]) -> dict[str, dict]:
    """``{state: first sample showing it}`` for :data:`SAMPLED_STATES`: ``retired_wal_held`` (a
    role process holds a ``-wal`` that is not the one at the path), ``write_lock_held`` (someone
    owns the WAL write lock), ``lock_wait`` (a process waits: a blocked lock request, or a write
    in flight while another process owns the write lock), ``checkpoint_lock_held`` (a process
    holds the checkpoint lock in either mode: a checkpoint (shared), or maintenance or a write
    that may restart the WAL (exclusive); issue 12, issue 24 item 3)."""
    out: dict[str, dict] = {}
    for s in Samples(history).records:
        if "retired_wal_held" not in out and any(
                p.get("wal") and not p["wal"].get("current") for p in s.get("procs") or []):
            out["retired_wal_held"] = s
        if "write_lock_held" not in out and s.get("write_lock"):
            out["write_lock_held"] = s
        if "lock_wait" not in out and s.get("waiting"):
            out["lock_wait"] = s
        if "checkpoint_lock_held" not in out and any(
                not h.get("waiting") for h in s.get("checkpoint_lock") or []):
            out["checkpoint_lock_held"] = s
    return out


def proc_entry(sample: dict | None, process: str) -> dict | None:
    """The role process's own entry (not a descendant's) in ``sample``'s ``procs``."""
    for p in (sample or {}).get("procs") or []:
        if p.get("process") == process and p.get("parent") is None:
            return p
    return None


def holding(entry: dict) -> list[str]:
    """Which store files a ``procs`` entry holds: ``["db", "wal (retired)", ...]``."""
    out = []
    for key in ("db", "wal", "shm"):
        f = entry.get(key)
        if f:
            out.append(key if f.get("current") else f"{key} (retired)")
    return out


def moment(sample: dict | None) -> dict:
    """What a sample says about one moment, for evidence: holders, write-lock owner, waiters,
    stopped processes and the WAL size."""
    if sample is None:
        return {"sample": None, "note": "no sample near this moment"}
    holders = []
    stopped = []
    for p in sample.get("procs") or []:
        files = holding(p)
        if files:
            who = p["process"] + (f" (child pid {p['pid']})" if p.get("parent") else "")
            holders.append(f"PID {p['pid']} {who}: {', '.join(files)}")
        if p.get("status") == "stopped":
            stopped.append(f"PID {p['pid']} {p['process']}")
    wl = sample.get("write_lock")
    owner = None if not wl else (f"PID {wl['pid']} {wl.get('process') or '(not a role)'}"
                                 f" ({wl.get('command', '?')})")
    return {"sample_t": sample.get("t"), "seq": sample.get("seq"), "holders": holders,
            "write_lock_owner": owner, "waiting": sample.get("waiting") or [],
            "stopped": stopped, "wal_bytes": sample.get("wal_bytes")}


def pid_of(value) -> int | None:
    """A PID from a sample field: an int, ``{"pid": N}``, ``[N, cmd]``, ``"PID N ..."``."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, dict):
        return pid_of(value.get("pid"))
    if isinstance(value, (list, tuple)) and value:
        return pid_of(value[0])
    if isinstance(value, str):
        parts = value.split()
        if len(parts) >= 2 and parts[0] == "PID" and parts[1].isdigit():
            return int(parts[1])
        if value.isdigit():
            return int(value)
    return None


def command_of(value) -> str:
    """The command of a sample's holder/owner field (``{"command"}`` or ``[pid, cmd]``)."""
    if isinstance(value, dict):
        return str(value.get("command") or "")
    if isinstance(value, (list, tuple)) and len(value) > 1:
        return str(value[1])
    return ""


def sample_wal_bytes(rec: dict) -> int | None:
    """WAL size in bytes of a ``sample`` record (``wal_bytes``; None when absent)."""
    v = rec.get("wal_bytes")
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return int(v)
    return None


def sample_owner(rec: dict) -> int | None:
    """PID owning the write lock in a ``sample`` record (``write_lock``), or None."""
    return pid_of(rec.get("write_lock")) if rec.get("write_lock") is not None else None


def sample_waiters(rec: dict) -> list:
    """Who waits on the store in a ``sample`` record: process names or PIDs (``waiting``)."""
    out = []
    for w in rec.get("waiting") or []:
        if isinstance(w, str) and not w.isdigit() and not w.startswith("PID "):
            out.append(w)
        elif pid_of(w) is not None:
            out.append(pid_of(w))
    return out


# ------------------------------------------------------------------------------ load
#: The factor never exceeds this: a bound may stretch 3x on a loaded machine, no more.
MAX_LOAD_FACTOR = 3.0
#: The ``type`` of the history records the runner writes with each measurement.
LOAD_RECORD = "load"


def factor_of(measurements: list[dict]) -> float:
    """The load factor of ``measurements`` (:func:`measure` dicts): the largest ``ratio``,
    clamped to [1, :data:`MAX_LOAD_FACTOR`]; 1 without any."""
    ratios = [float(m["ratio"]) for m in measurements
              if isinstance(m, dict) and isinstance(m.get("ratio"), (int, float))]
    return round(min(MAX_LOAD_FACTOR, max([1.0] + ratios)), 3)


_LOAD_FIELDS = ("when", "ratio", "cpu_s", "wall_s", "loadavg_per_cpu", "cpus")


def load_summary(history: list[dict]) -> dict:
    """``{"factor", "measurements": [{when, ratio, cpu_s, wall_s, loadavg_per_cpu, cpus}]}``
    of a run's history, for ``results.json``."""
    found = [r for r in history if r.get("type") == LOAD_RECORD]
    return {"factor": factor_of(found),
            "measurements": [{k: r.get(k) for k in _LOAD_FIELDS} for r in found]}


def history_load_factor(history: list[dict]) -> float:
    """The load factor recorded in a run's history (its ``load`` records); 1 when it has none
    (a hand-made history, or a run before issue 27: bounds are not scaled)."""
    return factor_of([r for r in history if r.get("type") == LOAD_RECORD])
