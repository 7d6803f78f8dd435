"""Refused writes are diverted, never dropped (SPEC §10.1).

``divert_to_spool`` appends each message as one JSON line to
``<HERMES_HOME>/sessions/<session_id>.jsonl`` with a ``spool_id`` (uuid) so that a later
``sessions replay-spool`` imports each line exactly once. One ``write()`` per line on an
``O_APPEND`` descriptor, flushed and fsynced before returning.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from pathlib import Path

from .paths import spool_path


def divert_to_spool(home: str | os.PathLike, session_id: str, messages: list[dict]) -> Path:
    """Append ``messages`` (dicts of ``append_message`` keyword arguments) to the spool.

    Args:
        home: the profile's HERMES_HOME (the spool lives under ``sessions/``).
        session_id: the session the messages belong to.
        messages: each a dict such as ``{"role": "user", "content": "hi"}``.
    Returns:
        The spool file path.
    Raises:
        ValueError: a session id that cannot name a file.
        OSError: the spool cannot be written (the caller must keep the messages).
    """
    path = spool_path(home, session_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = []
    for msg in messages:
        record = {"spool_id": uuid.uuid4().hex, "session_id": session_id,
                  "spooled_at": time.time(), "message": msg}
        lines.append(json.dumps(record, ensure_ascii=False, default=str) + "\n")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, "".join(lines).encode("utf-8", "surrogatepass"))
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


def read_spool(path: str | os.PathLike) -> list[dict]:
    """Every complete record of one spool file (a torn last line is skipped)."""
    out = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out
