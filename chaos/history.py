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
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Iterable, Iterator

RECORD_TYPES = ("invoke", "ok", "fail", "info", "event", "nemesis", "process", "phase", "sample",
                "observed")


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
    line that is not a JSON object are skipped."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
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

