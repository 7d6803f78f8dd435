"""The faulty filesystem's JSONL log: one line per write, fsync, namespace change and fault.

Every line has ``ev`` (write | fsync | fsyncdir | truncate | create | unlink | rename | mkdir |
rmdir | link | symlink | fault | power_cut | power_on | sync | mount | unmount), ``t`` (wall
seconds), ``mono`` (CLOCK_MONOTONIC seconds, comparable with the history's), ``pid`` (the calling
process, 0 for the filesystem itself) and, where they apply, ``path`` (relative to the mount
root), ``off`` and ``len`` (bytes) and ``err`` (the errno name returned, absent on success).
The log lives outside the mount (writing into the mount from the daemon would deadlock).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Iterator


class FsLog:
    """Append-only JSONL writer, flushed per line (a killed daemon loses no written line)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        self._lock = threading.Lock()
        self._tgid: dict[int, int] = {}

    def tgid(self, tid: int) -> int:
        """The process (thread group) of a FUSE caller's thread id; the tid if it is gone."""
        if tid <= 0:
            return tid
        hit = self._tgid.get(tid)
        if hit is None:
            hit = tid
            try:
                with open(f"/proc/{tid}/status", "rb") as f:
                    for line in f:
                        if line.startswith(b"Tgid:"):
                            hit = int(line.split()[1])
                            break
            except (OSError, ValueError):
                pass
            if len(self._tgid) > 4096:
                self._tgid.clear()
            self._tgid[tid] = hit
        return hit

    def emit(self, ev: str, pid: int = 0, **fields) -> dict:
        """Write one record; returns it."""
        rec = {"ev": ev, "t": round(time.time(), 6), "mono": round(time.monotonic(), 6),
               "pid": self.tgid(pid)}
        rec.update(fields)
        line = (json.dumps(rec, separators=(",", ":")) + "\n").encode()
        with self._lock:
            os.write(self._fd, line)
        return rec

    def close(self) -> None:
        """Close the log file."""
        try:
            os.close(self._fd)
        except OSError:
            pass


def read_fs_log(path: Path) -> Iterator[dict]:
    """Records of a log file in order; a torn last line or a non-object line is skipped."""
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        return
    with f:
        for raw in f:
            try:
                rec = json.loads(raw)
            except ValueError:
                continue
            if isinstance(rec, dict):
                yield rec
