"""Refused writes are diverted, never dropped (SPEC §10.1).

``divert_to_spool`` appends each message as one JSON line to
``<HERMES_HOME>/sessions/<session_id>.jsonl`` with a ``spool_id`` (uuid) so that a later
``sessions replay-spool`` imports each line exactly once. One ``write()`` per line on an
``O_APPEND`` descriptor, flushed and fsynced before returning.
"""

from __future__ import annotations

import base64
import json
import os
import re
import sqlite3
import stat
import time
import uuid
from pathlib import Path

from ..errors import EvidenceWriteError
from ..files import atomic
from ..files.paths import ensure_home, spool_path
from .messages import build_append, coerce_timestamp, message_values
from .text import (
    CleaningConnection,
    UnstorableValueError,
    clean_text,
    encode_json_field,
    storable_problem,
)

#: The JSON fields of a message: spooled as the value given (validated), NULL when falsy.
_JSON_FIELDS = ("tool_calls", "reasoning_details", "codex_reasoning_items",
                "codex_message_items")
#: Record key naming the message fields spooled as base64 text of bytes (a BLOB).
BYTES_FIELDS = "bytes_fields"
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def spool_message(session_id: str, msg: dict) -> tuple[dict, list[str]]:
    """``(message, bytes_fields)`` of one spool record: what makes ``replay_spool`` store the
    row :meth:`append_message` would have stored now (SPEC §10.1), checked first.

    A JSON field is kept as given (NULL when falsy), ``content`` as given when JSON can carry
    it (else the text ``append_message`` stores), bytes (a bytearray, a memoryview) as base64
    text named in ``bytes_fields``, ``timestamp`` as epoch seconds (an invalid one: None, now
    at replay), every other field as it would be bound.

    Raises:
        UnstorableJSONError / UnstorableValueError: a field ``append_message`` refuses, named.
        TypeError: an unknown keyword.
    """
    fields = dict(msg)
    role = fields.pop("role", "user")
    if "timestamp" in fields:
        fields["timestamp"] = coerce_timestamp(fields["timestamp"])
    vals = message_values(session_id, role, **fields)  # a JSON field it cannot encode: named
    out: dict = {}
    blobs: list[str] = []
    for key, value in msg.items():
        if key == "role":
            out[key] = clean_text(value)
            continue
        if key == "timestamp":
            out[key] = fields["timestamp"]
            continue
        if key in _JSON_FIELDS:
            out[key] = value if encode_json_field(value, key) is not None else None
            continue
        stored = vals.get(key, value)
        if key == "content" and isinstance(value, (list, dict)) and isinstance(stored, str) \
                and stored.startswith("\x00json:"):
            stored = value  # JSON carries it as given (replay encodes it the same way)
        if isinstance(stored, (bytes, bytearray, memoryview)):
            out[key] = base64.b64encode(bytes(stored)).decode("ascii")
            blobs.append(key)
            continue
        if not isinstance(stored, (list, dict, float)):
            problem = storable_problem(stored)
            if problem:
                raise UnstorableValueError(f"{key}: cannot store {problem}; nothing was spooled")
        out[key] = stored
    return out, blobs


def _json_line(record: dict) -> str:
    """One spool line: JSON with non-ASCII text as is and a lone surrogate (inside a JSON field)
    as its ``\\uXXXX`` escape, so the line is valid UTF-8 and reads back as given."""
    text = json.dumps(record, ensure_ascii=False, allow_nan=True)
    if not text.isascii():
        text = _LONE_SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
    return text


def divert_to_spool(home: str | os.PathLike, session_id: str, messages: list[dict]) -> Path:
    """Append ``messages`` (dicts of ``append_message`` keyword arguments) to the spool.

    Each record gets a ``spool_id`` once; a write that fails part-way is tried once more with
    the SAME records (a torn line is cut off by a leading newline; a record written twice is
    imported once by ``replay-spool``), then named (issue 22 item 1).

    Args:
        home: the profile's HERMES_HOME (the spool lives under ``sessions/``).
        session_id: the session the messages belong to.
        messages: each a dict such as ``{"role": "user", "content": "hi"}``.
    Returns:
        The spool file path.
    Raises:
        ValueError: a session id that cannot name a file.
        UnstorableJSONError / UnstorableValueError / TypeError: a message ``append_message``
            would refuse (a JSON field ``json.dumps`` cannot encode, a value SQLite cannot
            bind, an unknown keyword), named; nothing was spooled.
        SpoolWriteError: the spool cannot be written (an
            :class:`~hermes_state.errors.EvidenceWriteError`): names the file, the cause and
            the messages not spooled; ``retry()`` appends the same records again.
        StorePermissionError: a planted link, FIFO or device where the spool belongs.
    """
    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, dict) for m in messages):
        raise TypeError("messages must be a list of dicts (append_message keyword arguments), "
                        f"not {ascii(messages)[:60]}; nothing was spooled")
    session_id = clean_text(session_id)  # the file must be valid UTF-8 to be replayed
    path = spool_path(home, session_id)
    lines = []
    for i, msg in enumerate(messages):
        message, blobs = spool_message(session_id, msg)
        record = {"spool_id": uuid.uuid4().hex, "session_id": session_id,
                  "spooled_at": time.time(), "message": message}
        if blobs:
            record[BYTES_FIELDS] = blobs
        try:
            line = _json_line(record)
            json.loads(line)  # what replay_spool will read (a nesting it cannot parse back)
        except (ValueError, RecursionError) as exc:
            raise UnstorableValueError(
                f"message {i}: cannot be spooled as a JSON line ({exc}); nothing was "
                "spooled") from None
        lines.append(line + "\n")
    data = ("\n" + "".join(lines)).encode("utf-8")
    err = None
    for _attempt in range(2):
        try:
            return _append(Path(home), path, data)
        except atomic.UnsafePathError:
            raise
        except OSError as exc:
            err = SpoolWriteError(Path(home), path, data, len(lines), session_id, exc)
    raise err  # type: ignore[misc]


def _append(home: Path, path: Path, data: bytes) -> Path:
    """One complete append of ``data`` to the spool file, fsynced (no short write left)."""
    ensure_home(home)
    atomic.ensure_dir(path.parent, what="the spool directory")  # a symlinked sessions/: refused
    fd = atomic.open_append(path)  # no link, no FIFO, no device, no hard-linked file
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)
    return path


class SpoolWriteError(EvidenceWriteError):
    """Refused messages could not be spooled (issue 22 item 1): they exist only in the
    caller's memory. ``retry()`` appends the same records again (exactly once on replay).

    Attributes:
        count: how many messages were not spooled.
        session_id: their session.
    """

    def __init__(self, home: Path, path: Path, data: bytes, count: int, session_id: str,
                 exc: OSError) -> None:
        self._home, self._data, self.count, self.session_id = home, data, count, session_id
        why = exc.strerror or str(exc)
        super().__init__(
            f"{count} refused message(s) of session {session_id!r} could NOT be spooled to "
            f"{path} ({why}): they exist only in this process's memory now. Keep them; once "
            "the cause is fixed (free space), spool them again (SpoolWriteError.retry() "
            "appends the same records; replay-spool imports each once).",
            f"spool append failed: {exc!r}", path=str(path))

    def retry(self) -> Path:
        """Append the same records again; returns the spool path.

        Raises:
            SpoolWriteError: it failed again.
        """
        try:
            return _append(self._home, Path(self.path), self._data)
        except atomic.UnsafePathError:
            raise
        except OSError as exc:
            raise SpoolWriteError(self._home, Path(self.path), self._data, self.count,
                                  self.session_id, exc) from exc


#: Longest spool line read (bytes); a longer one is reported, never held in memory whole.
MAX_LINE_BYTES = 64 * 1024 * 1024


def _lines(fh, limit: int):
    """``(line number, bytes or None)`` for each line; None for a line longer than ``limit``."""
    lineno = 0
    while True:
        line = fh.readline(limit + 1)
        if not line:
            return
        lineno += 1
        if len(line) > limit and not line.endswith(b"\n"):
            while True:  # skip the rest of the overlong line in bounded chunks
                rest = fh.readline(1 << 20)
                if not rest or rest.endswith(b"\n"):
                    break
            yield lineno, None
            continue
        yield lineno, line


def scan_spool(path: str | os.PathLike, *, max_line: int = MAX_LINE_BYTES
               ) -> tuple[list[tuple[int, dict]], list[tuple[int, str]]]:
    """Parse one spool file line by line.

    Returns:
        ``(records, bad)``: ``records`` = ``[(line number, record dict)]``; ``bad`` =
        ``[(line number, reason)]`` for lines that are not a JSON object (a torn last line, a
        garbled or foreign line, a line over ``max_line`` bytes). Blank lines are ignored.
        Never raises for content.
    Raises:
        OSError: the file cannot be read; :class:`~hermes_state.files.atomic.NotRegularFileError` when
            it is a FIFO, device, directory or symlink (it is never opened for reading then).
    """
    records: list[tuple[int, dict]] = []
    bad: list[tuple[int, str]] = []
    with atomic.open_regular(path) as fh:
        for lineno, raw in _lines(fh, max_line):
            if raw is None:
                bad.append((lineno, f"longer than {max_line} bytes (skipped)"))
                continue
            line = raw.decode("utf-8", "replace")
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):
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

#: Errors caused by one spooled record's values (wrong types, out of range, too deep), never by
#: the store: the record is reported as failed and the replay goes on (issue 11.10).
_RECORD_ERRORS = (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.DataError,
                  sqlite3.ProgrammingError, ValueError, TypeError, OverflowError, RecursionError)


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
    spool_dir = Path(db.home) / "sessions"
    result = {"files": 0, "records": 0, "imported": 0, "skipped": 0, "failed": 0, "torn": 0,
              "errors": [], "warnings": []}
    try:
        st = os.lstat(spool_dir)
    except FileNotFoundError:
        return result
    if not stat.S_ISDIR(st.st_mode):
        raise atomic.UnsafePathError(
            f"refusing to read the spool: {spool_dir} is {atomic.describe_mode(st.st_mode)}, "
            "not a directory.", f"replace {spool_dir} with a plain directory holding the "
            "*.jsonl spool files (a link would import files from elsewhere)",
            path=str(spool_dir))
    for path in sorted(spool_dir.glob("*.jsonl")):
        result["files"] += 1
        try:
            records, bad = scan_spool(path)
        except OSError as exc:  # a FIFO, device, link or unreadable file: reported, not read
            result["failed"] += 1
            result["errors"].append(f"{path.name}: not read: {getattr(exc, 'user_message', exc)}")
            continue
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
            spool_id, sid = clean_text(spool_id), clean_text(sid)
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
                for name in rec.get(BYTES_FIELDS) or ():
                    if isinstance(fields.get(name), str):
                        fields[name] = base64.b64decode(fields[name], validate=True)
                insert = build_append(sid, role, **fields)
            except _RECORD_ERRORS as exc:
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
                mid = db.connection.execute_write(lambda c: fn(CleaningConnection(c)),
                                                 op="replay_spool")
            except _RECORD_ERRORS as exc:  # this record's values, not the store
                result["failed"] += 1
                result["errors"].append(f"{path.name}:{lineno} {spool_id}: {exc}")
                continue
            if mid is None:
                result["skipped"] += 1
            else:
                result["imported"] += 1
    return result
