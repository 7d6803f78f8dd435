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
from .text import clean_text


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
    session_id = clean_text(session_id)  # the file must be valid UTF-8 to be replayed
    path = spool_path(home, session_id)
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    lines = []
    for msg in messages:
        record = {"spool_id": uuid.uuid4().hex, "session_id": session_id,
                  "spooled_at": time.time(),
                  "message": {k: clean_text(v) for k, v in msg.items()}}
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


IMPORTED_PREFIX = "spool_imported:"


def replay_spool(db, *, dry_run: bool = False) -> dict:
    """Import every spooled message of ``<home>/sessions/*.jsonl`` exactly once (SPEC §10.1).

    Each record is imported in ONE write transaction together with the marker
    ``state_meta['spool_imported:<spool_id>'] = <message id>``, so a crash at any point neither
    loses nor duplicates a message, and re-running skips what was imported. A session that does
    not exist is created with ``source='spool'``. Spool files are never deleted.

    Args:
        db: an open writable :class:`~hermes_state.db.SessionDB`.
        dry_run: count only.
    Returns:
        ``{"files", "records", "imported", "skipped", "failed", "errors": [..]}``.
    """
    from .messages import build_append

    spool_dir = Path(db.home) / "sessions"
    result = {"files": 0, "records": 0, "imported": 0, "skipped": 0, "failed": 0, "errors": []}
    if not spool_dir.is_dir():
        return result
    for path in sorted(spool_dir.glob("*.jsonl")):
        result["files"] += 1
        for rec in read_spool(path):
            result["records"] += 1
            spool_id = rec.get("spool_id")
            msg = rec.get("message")
            sid = rec.get("session_id")
            if not spool_id or not isinstance(msg, dict) or not sid:
                result["failed"] += 1
                result["errors"].append(f"{path.name}: malformed record")
                continue
            key = IMPORTED_PREFIX + spool_id
            if db.get_meta(key) is not None:
                result["skipped"] += 1
                continue
            if dry_run:
                result["imported"] += 1
                continue
            fields = dict(msg)
            role = fields.pop("role", "user")
            try:
                insert = build_append(sid, role, **fields)
            except TypeError as exc:
                result["failed"] += 1
                result["errors"].append(f"{path.name} {spool_id}: {exc}")
                continue

            def fn(c, insert=insert, key=key, sid=sid):
                if c.execute("SELECT 1 FROM state_meta WHERE key = ?", (key,)).fetchone():
                    return None  # another replayer won the race
                c.execute("INSERT INTO sessions(id, source, started_at) VALUES (?, 'spool', ?) "
                          "ON CONFLICT(id) DO NOTHING", (sid, time.time()))
                mid = insert(c)
                c.execute("INSERT INTO state_meta(key, value) VALUES (?, ?)", (key, str(mid)))
                return mid

            if db._write(fn, op="replay_spool") is None:
                result["skipped"] += 1
            else:
                result["imported"] += 1
    return result
