"""Snapshot images: the online-backup copy, its verification and the facts a manifest records
(SPEC §13, §1).

:func:`backup_image` copies a store with the SQLite backup API from a ``mode=ro`` connection
into a rollback-journal image; :func:`verify_image` runs ``quick_check`` on it and reads its
facts; the rest are small helpers of :mod:`hermes_state.operator.snapshots` (names, stamps, sizes,
hashes). Nothing here decides which snapshot to keep or restore.
"""

from __future__ import annotations

import calendar
import hashlib
import os
import re
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from ..errors import SQLITE_BUSY, SQLITE_LOCKED
from ..files import atomic
from ..files.store_files import connect_ro, refuse_special_store_files

BUSY_TIMEOUT_S = 10.0
_REASON_MAX = 40
STAMP_RE = r"\d{8}T\d{6}Z"
_BAK_RE = re.compile(rf"^state\.db\.pre-update-emergency-({STAMP_RE})(?:-(\d+))?\.bak$")


# --------------------------------------------------------------------------- small helpers

def sanitize_reason(reason: str) -> str:
    """Lower-case ``reason`` and reduce it to ``[a-z0-9-]`` (SPEC §13 directory names).

    Runs of other characters become one ``-``; leading/trailing dashes are dropped; the result is
    cut to 40 characters. ``"Pre Update!"`` → ``"pre-update"``.

    Raises:
        ValueError: nothing usable is left (e.g. ``"!!!"``).
    """
    text = re.sub(r"[^a-z0-9-]+", "-", str(reason).strip().lower())
    text = re.sub(r"-{2,}", "-", text).strip("-")[:_REASON_MAX].strip("-")
    if not text:
        raise ValueError(f"snapshot reason {reason!r} has no letters or digits: use e.g. 'manual'")
    return text


def iso_now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int((t % 1) * 1e6):06d}Z"


def iso_epoch(text: object) -> float:
    """Seconds since the epoch of our ``created_at`` strings (0.0 when unparsable or not text)."""
    if not isinstance(text, str) or not text:
        return 0.0
    m = re.match(r"^(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d+))?Z$", text)
    if not m:
        return 0.0
    whole = calendar.timegm(tuple(int(x) for x in m.groups()[:6]) + (0, 0, 0))
    frac = float(f"0.{m.group(7)}") if m.group(7) else 0.0
    return whole + frac


def stamp_iso(stamp: str) -> str:
    """``20250102T030405Z`` → ``2025-01-02T03:04:05Z``."""
    return (f"{stamp[0:4]}-{stamp[4:6]}-{stamp[6:8]}T{stamp[9:11]}:{stamp[11:13]}:"
            f"{stamp[13:15]}Z")


def file_sha256(path: Path) -> str:
    """sha256 of a regular file (never a FIFO or device: see :func:`atomic.open_regular`)."""
    digest = hashlib.sha256()
    with atomic.open_regular(path) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def file_size(path: Path) -> int | None:
    try:
        return os.stat(path).st_size
    except FileNotFoundError:
        return None


def ro_uri(path: Path) -> str:
    return f"file:{quote(os.fspath(path))}?mode=ro"


def fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)  # our own new file
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def store_sizes(db: Path) -> dict:
    return {name: file_size(Path(f"{db}{suffix}"))
            for name, suffix in (("state.db", ""), ("state.db-wal", "-wal"),
                                 ("state.db-shm", "-shm"))}


def inspect_image(image: Path) -> dict:
    """``PRAGMA quick_check`` and the facts the manifest records, read through ``mode=ro``.

    Returns:
        ``{"quick_check": [lines], "verified": bool, "schema_version", "sessions", "messages",
        "page_size", "page_count", "error"}``; never raises for a damaged image.
    """
    out: dict = {"quick_check": [], "verified": False, "schema_version": None,
                 "sessions": None, "messages": None, "page_size": None, "page_count": None,
                 "error": None}
    try:
        conn = connect_ro(image, timeout=BUSY_TIMEOUT_S)
    except (sqlite3.Error, OSError) as exc:  # a FIFO or link beside the image: named
        out["error"] = f"cannot open the image: {getattr(exc, 'user_message', exc)}"
        return out
    try:
        try:
            out["quick_check"] = [r[0] for r in conn.execute("PRAGMA quick_check")]
        except sqlite3.Error as exc:
            out["error"] = f"quick_check failed: {exc}"
            return out
        out.update(image_facts(conn))
        # A snapshot is good only if it is a session store: an empty or foreign database passes
        # quick_check too (issue 11.10: a 0-byte state.db is never a "verified" snapshot).
        store = all(out.get(k) is not None for k in ("schema_version", "sessions", "messages"))
        out["verified"] = out["quick_check"] == ["ok"] and store
        if out["quick_check"] == ["ok"] and not store:
            out["error"] = "the image is not a session store (no schema_version, sessions or " \
                           "messages table: an empty or foreign database)"
    finally:
        conn.close()
    return out


def verify_image(image: Path) -> tuple[dict, str]:
    """:func:`inspect_image` and the image's sha256, side by side: the hash runs in a thread
    while SQLite checks the b-trees (both release the GIL), so verifying costs the longer of
    the two, not their sum (issue 18)."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        digest = pool.submit(file_sha256, image)
        facts = inspect_image(image)
        return facts, digest.result()


def image_facts(conn: sqlite3.Connection) -> dict:
    """Page size/count, schema version and the session/message counts read through ``conn``."""
    out = {}
    for key, sql in (("page_size", "PRAGMA page_size"), ("page_count", "PRAGMA page_count"),
                     ("schema_version", "SELECT max(version) FROM schema_version"),
                     ("sessions", "SELECT count(*) FROM sessions"),
                     ("messages", "SELECT count(*) FROM messages")):
        try:
            out[key] = conn.execute(sql).fetchone()[0]
        except sqlite3.Error:
            out[key] = None  # e.g. not a hermes store: counts stay unknown
    return out


def backup_bounded(src: sqlite3.Connection, dst: sqlite3.Connection, *,
                   busy_for_s: float = BUSY_TIMEOUT_S) -> None:
    """``src.backup(dst, pages=-1)`` that gives up when the source stays locked ``busy_for_s``.

    Python's ``Connection.backup`` retries SQLITE_BUSY/SQLITE_LOCKED forever (sleeping between
    steps, its connections' busy timeouts do not apply): a process holding the store in
    ``locking_mode=EXCLUSIVE`` would hang a backup or restore for good. The progress callback
    SQLite's backup calls after every step ends it instead.

    Raises:
        sqlite3.OperationalError: still locked after ``busy_for_s`` seconds (SQLITE_BUSY-coded;
            nothing was copied into ``dst`` that counts: the caller discards it).
    """
    since: list[float] = []

    def progress(status: int, remaining: int, total: int) -> None:
        if status not in (SQLITE_BUSY, SQLITE_LOCKED):
            since.clear()
            return
        now = time.monotonic()
        if not since:
            since.append(now)
        elif now - since[0] > busy_for_s:
            exc = sqlite3.OperationalError(
                f"database is locked: the store stayed locked for {busy_for_s:g} s while it "
                "was copied (another process holds it exclusively, e.g. in "
                "locking_mode=EXCLUSIVE, or runs a long maintenance command); nothing was "
                "copied. Run `hermes-state doctor` to see who holds it, then retry.")
            exc.sqlite_errorcode = SQLITE_BUSY  # type: ignore[attr-defined]
            raise exc

    src.backup(dst, pages=-1, progress=progress, sleep=0.05)


def backup_image(db: Path, dest: Path) -> None:
    """Copy the store's consistent image into the new file ``dest`` (SPEC §13).

    Source: a ``mode=ro`` connection, so this process can never write, checkpoint or recover
    the live store. One backup step (``pages=-1``) reads every page inside one read
    transaction: a point in time even under concurrent writers. The image is then switched to
    ``journal_mode=DELETE`` so it is a single self-contained file.

    Raises:
        sqlite3.Error: the source cannot be read as a database.
    """
    refuse_special_store_files(db, what="back up the session store")  # never a FIFO (SPEC §1)
    src = sqlite3.connect(ro_uri(db), uri=True, timeout=BUSY_TIMEOUT_S)
    try:
        dst = sqlite3.connect(os.fspath(dest), timeout=BUSY_TIMEOUT_S)
        try:
            backup_bounded(src, dst)
        finally:
            dst.close()
    finally:
        src.close()
    conn = sqlite3.connect(os.fspath(dest), timeout=BUSY_TIMEOUT_S)
    try:
        conn.execute("PRAGMA journal_mode=DELETE").fetchone()
    finally:
        conn.close()
    os.chmod(dest, 0o600)


def bak_key(name: str) -> tuple[str, int] | None:
    m = _BAK_RE.match(name)
    if not m or not name.startswith("state.db."):
        return None
    return (m.group(1), int(m.group(2) or 1))
