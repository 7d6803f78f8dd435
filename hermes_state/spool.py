"""Refused writes are diverted, never dropped (SPEC §10.1).

``divert_to_spool`` appends each message as one JSON line to
``<HERMES_HOME>/sessions/<session_id>.jsonl`` with a ``spool_id`` (uuid) so that a later
``sessions replay-spool`` imports each line exactly once. One ``write()`` per line on an
``O_APPEND`` descriptor, flushed and fsynced before returning.
"""

from __future__ import annotations

import json
import os
import sqlite3
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


def scan_spool(path: str | os.PathLike) -> tuple[list[tuple[int, dict]], list[tuple[int, str]]]:
    """Parse one spool file line by line.

    Returns:
        ``(records, bad)``: ``records`` = ``[(line number, record dict)]``; ``bad`` =
        ``[(line number, reason)]`` for lines that are not a JSON object (a torn last line, a
        garbled or foreign line). Blank lines are ignored. Never raises for content.
    """
    records: list[tuple[int, dict]] = []
    bad: list[tuple[int, str]] = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                bad.append((lineno, "not JSON (torn or garbled line)"))
                continue
            if isinstance(rec, dict):
                records.append((lineno, rec))
            else:
                bad.append((lineno, f"a JSON {type(rec).__name__}, not an object"))
    return records, bad


def read_spool(path: str | os.PathLike) -> list[dict]:
    """Every record (JSON object) of one spool file; other lines are skipped (see
    :func:`scan_spool` for them)."""
    return [rec for _lineno, rec in scan_spool(path)[0]]


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
        ``{"files", "records", "imported", "skipped", "failed", "torn", "errors": ["file:line:
        why"], "warnings": [..]}``; ``torn`` counts lines that are not JSON (an append cut short
        by a crash: never acknowledged, so not a failure).
    """
    from .messages import build_append

    spool_dir = Path(db.home) / "sessions"
    result = {"files": 0, "records": 0, "imported": 0, "skipped": 0, "failed": 0, "torn": 0,
              "errors": [], "warnings": []}
    if not spool_dir.is_dir():
        return result
    for path in sorted(spool_dir.glob("*.jsonl")):
        result["files"] += 1
        records, bad = scan_spool(path)
        for lineno, reason in bad:
            # A line that is not JSON is a spool append cut short by a crash: that message was
            # never acknowledged as spooled, so it is reported, not counted as a failure.
            # JSON that is not an object is foreign content: a failure to look at.
            if reason.startswith("not JSON"):
                result["torn"] += 1
                result["warnings"].append(f"{path.name}:{lineno}: {reason}")
            else:
                result["records"] += 1
                result["failed"] += 1
                result["errors"].append(f"{path.name}:{lineno}: {reason}")
        for lineno, rec in records:
            result["records"] += 1
            spool_id = rec.get("spool_id")
            msg = rec.get("message")
            sid = rec.get("session_id")
            if not (isinstance(spool_id, str) and spool_id and isinstance(msg, dict)
                    and isinstance(sid, str) and sid and isinstance(msg.get("role", "user"), str)):
                result["failed"] += 1
                result["errors"].append(f"{path.name}:{lineno}: malformed record (needs string "
                                        "spool_id and session_id, a message object with a "
                                        "string role)")
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
            except (TypeError, ValueError) as exc:
                result["failed"] += 1
                result["errors"].append(f"{path.name}:{lineno} {spool_id}: {exc}")
                continue

            def fn(c, insert=insert, key=key, sid=sid):
                if c.execute("SELECT 1 FROM state_meta WHERE key = ?", (key,)).fetchone():
                    return None  # another replayer won the race
                c.execute("INSERT INTO sessions(id, source, started_at) VALUES (?, 'spool', ?) "
                          "ON CONFLICT(id) DO NOTHING", (sid, time.time()))
                mid = insert(c)
                c.execute("INSERT INTO state_meta(key, value) VALUES (?, ?)", (key, str(mid)))
                return mid

            try:
                mid = db._write(fn, op="replay_spool")
            except (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.DataError,
                    ValueError, TypeError) as exc:  # this record's values, not the store
                result["failed"] += 1
                result["errors"].append(f"{path.name}:{lineno} {spool_id}: {exc}")
                continue
            if mid is None:
                result["skipped"] += 1
            else:
                result["imported"] += 1
    return result
