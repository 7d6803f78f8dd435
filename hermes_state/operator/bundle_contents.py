"""The contents of a diagnostic bundle: counts, sizes, schema and FTS layout, read from an
in-memory image of the store (SPEC §9.4; docs/decisions/0019-bundle-and-repro.md), and the small
readers and the id hasher the bundle's sections share.

The image is ``state.db`` with the WAL's committed frames applied
(:func:`hermes_state.files.sqlite_format.wal_image`), loaded with ``deserialize`` into a
``:memory:`` connection: no SQLite connection opens the store, no lock is taken, no file is
created. Only counts, lengths, names SQLite and this package define, and hashed ids leave it.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import sqlite3
import stat
import time
from pathlib import Path

from ..files import sqlite_format as fmt
from ..files.atomic import open_regular, read_regular

#: Above this size of ``state.db`` + ``-wal`` the contents are read from ``state.db`` alone.
IMAGE_LIMIT = 128 << 20
#: WAL checksums are verified up to this size (pure Python); above, the wal-index decides.
CHECKSUM_LIMIT = 8 << 20
#: ``PRAGMA quick_check`` runs on images up to this size.
QUICK_CHECK_LIMIT = 64 << 20
#: Size classes by message count: the first whose bound is not exceeded ("huge" past them).
SIZE_CLASSES = ((0, "empty"), (1000, "tiny"), (10_000, "small"), (100_000, "medium"),
                (1_000_000, "large"))
#: Session sources shown as they are; any other is hashed (it is a name a program chose, but
#: the bundle shows no value it does not know).
KNOWN_SOURCES = frozenset({"cli", "telegram", "discord", "slack", "whatsapp", "signal", "email",
                           "matrix", "api", "cron", "desktop", "gateway", "webhook", "sms",
                           "homeassistant", "dingtalk", "feishu", "wecom", "mattermost", "spool",
                           "recovered", "fixture", "tool", "subagent", "acp", "mcp", "worktree"})
KNOWN_ROLES = frozenset({"user", "assistant", "tool", "system", "developer", "function"})
#: ``state_meta`` keys whose value is a small flag or number the bundle shows.
META_FLAGS = frozenset({"fts_stale", "fts_cjk_stale", "fts_backfill", "fts_rebuild_high_water",
                        "fts_rebuild_progress", "fts_optimize_available", "last_auto_prune",
                        "telegram_dm_topic_schema_version"})
#: ``state_meta`` key prefixes counted (their suffix is an id, their value may be text).
META_PREFIXES = ("maintenance_request:", "maintenance_result:", "spool_imported:", "salvage:",
                 "auto_title:")
_FLAG_VALUE = re.compile(r"^[\w.:+-]{0,64}$")


class Hasher:
    """Keyed hash of ids: equal within one bundle, meaningless outside it (the key is not kept)."""

    def __init__(self) -> None:
        self._key = secrets.token_bytes(32)

    def __call__(self, value) -> str:
        return "h:" + hmac.new(self._key, str(value).encode("utf-8", "surrogatepass"),
                               hashlib.sha256).hexdigest()[:12]


def iso(t: float | None) -> str | None:
    if not isinstance(t, (int, float)) or isinstance(t, bool):
        return None
    try:
        return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))
    except (OverflowError, OSError, ValueError):
        return None


def file_info(path: Path) -> dict | None:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return {"error": exc.strerror}
    info = {"type": "file" if stat.S_ISREG(st.st_mode) else _kind(st.st_mode),
            "bytes": st.st_size, "mode": f"{stat.S_IMODE(st.st_mode):04o}",
            "owner_is_me": st.st_uid == os.geteuid(), "mtime": iso(st.st_mtime),
            "inode": st.st_ino}
    return info


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISLNK, "symlink"), (stat.S_ISDIR, "directory"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket"),
                       (stat.S_ISCHR, "char device"), (stat.S_ISBLK, "block device")):
        if test(mode):
            return name
    return "other"


def read_head(path: Path, n: int) -> bytes | None:
    """The first ``n`` bytes of a regular file (no symlink, never blocks), None when absent."""
    try:
        with open_regular(path) as fh:
            return fh.read(n)
    except FileNotFoundError:
        return None


def read_all(path: Path, limit: int) -> bytes | None:
    try:
        return read_regular(path, limit=limit)
    except FileNotFoundError:
        return None


def _image(db: Path, headers: dict) -> tuple[bytes, dict]:
    """The contents as a new reader would see them, and how they were read."""
    info = file_info(db)
    wal_info = file_info(Path(f"{db}-wal"))
    size = (info or {}).get("bytes", 0) + ((wal_info or {}).get("bytes") or 0)
    if size > IMAGE_LIMIT:
        raise _TooLarge(size)
    for _ in range(2):  # once more when a writer changed the wal-index meanwhile
        before = read_head(Path(f"{db}-shm"), fmt.WAL_INDEX_HEADER_SIZE)
        data = read_all(db, IMAGE_LIMIT) or b""
        wal = read_all(Path(f"{db}-wal"), IMAGE_LIMIT) or b""
        after = read_head(Path(f"{db}-shm"), fmt.WAL_INDEX_HEADER_SIZE)
        if before == after:
            break
    how: dict = {"stable": before == after}
    if before != after:
        how["stable_note"] = ("a writer committed while the files were read: the image is the "
                              "last commit of the WAL as read")
    frames = 0
    if wal:
        verify = len(wal) <= CHECKSUM_LIMIT
        found = fmt.wal_committed_frames(wal, verify_checksums=verify)
        idx = fmt.wal_index_header(after) if after else None
        how["wal_recovery"] = found
        head = fmt.wal_header(wal)
        idx_ok = (idx is not None and idx["copies_agree"] and head is not None
                  and (idx["salt1"], idx["salt2"]) == (head["salt1"], head["salt2"])
                  and found is not None and 0 < idx["mx_frame"] <= found["valid"])
        if idx_ok and not verify:
            frames, how["frames_from"] = idx["mx_frame"], "wal-index mxFrame"
        elif found is not None:
            frames, how["frames_from"] = found["committed"], (
                "WAL recovery (salts and checksums)" if verify else "WAL recovery (salts only)")
    image = fmt.wal_image(data, wal, frames)
    if image is None and frames:
        image, frames = fmt.wal_image(data, wal, 0), 0
        how["note"] = "the WAL's frames could not be applied: state.db alone was read"
    how["wal_frames_applied"] = frames
    return image or b"", how


class _TooLarge(Exception):
    def __init__(self, size: int) -> None:
        self.size = size
        super().__init__(f"{size} bytes")


def read_contents(db: Path, headers: dict, hasher: Hasher, deadline: float) -> dict:
    """Counts, sizes, schema version and FTS layout, read from an in-memory image."""
    head = headers.get("db_header") or {}
    out: dict = {"journal_mode_in_header": head.get("journal_mode")}
    if head.get("not_sqlite") or not head:
        out["readable"] = False
        out["why"] = "state.db is absent" if not head else "state.db is not a SQLite database"
        return out
    try:
        image, how = _image(db, headers)
        conn = sqlite3.connect(":memory:", isolation_level=None)
        conn.deserialize(image)
        out["read_from"] = ("an in-memory image of state.db with the committed WAL frames "
                            "applied (the store itself was not opened)")
    except _TooLarge as big:
        conn = sqlite3.connect(f"file:{db}?mode=ro&immutable=1", uri=True,
                               isolation_level=None)
        how = {"note": f"state.db + WAL are {big.size} bytes (over {IMAGE_LIMIT}): state.db was "
                       "read alone (immutable, no lock); frames still in the WAL are not counted"}
        image = b""
        out["read_from"] = "state.db alone (immutable=1: no lock taken, the WAL not applied)"
    out["image"] = how
    conn.set_progress_handler(lambda: time.monotonic() > deadline, 20_000)
    try:
        conn.execute("PRAGMA query_only=1")
        _contents_queries(conn, out, hasher, len(image))
    finally:
        conn.close()
    return out


def _q(conn: sqlite3.Connection, sql: str, *args):
    return conn.execute(sql, args).fetchall()


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in _q(conn, f'PRAGMA table_info("{table}")')}


def _contents_queries(conn: sqlite3.Connection, out: dict, hasher: Hasher, size: int) -> None:
    from ..schema.shape import describe, stored_version

    errors: dict = {}

    def part(name: str, fn) -> None:
        try:
            out[name] = fn()
        except (sqlite3.Error, ValueError, TypeError) as exc:
            errors[name] = f"{type(exc).__name__}: {exc}"

    part("pages", lambda: {"page_size": _q(conn, "PRAGMA page_size")[0][0],
                           "page_count": _q(conn, "PRAGMA page_count")[0][0],
                           "freelist_count": _q(conn, "PRAGMA freelist_count")[0][0]})
    part("schema_version", lambda: stored_version(conn)[0])
    part("fts", lambda: {k: v for k, v in describe(conn).items() if k in (
        "fts_layout", "fts_plan", "fts_tables", "foreign_triggers", "fts_problems",
        "duplicate_indexes", "pending", "newer", "code_version")})
    part("tables", lambda: _table_counts(conn))
    part("messages", lambda: _message_stats(conn))
    part("sessions", lambda: _session_stats(conn, hasher))
    part("state_meta", lambda: _state_meta(conn, hasher))
    if size and size <= QUICK_CHECK_LIMIT:
        part("quick_check", lambda: [r[0] for r in _q(conn, "PRAGMA quick_check(10)")])
    n = (out.get("messages") or {}).get("count")
    if isinstance(n, int):
        out["size_class"] = size_class(n)
    if errors:
        out["errors"] = errors


def size_class(messages: int) -> str:
    """``empty``/``tiny``/``small``/``medium``/``large``/``huge`` for a message count."""
    return next((name for bound, name in SIZE_CLASSES if messages <= bound), "huge")


def _table_counts(conn: sqlite3.Connection) -> dict:
    names = [r[0] for r in _q(conn, "SELECT name FROM sqlite_master WHERE type = 'table' AND "
                                    "sql NOT LIKE 'CREATE VIRTUAL%' ORDER BY name")]
    out = {}
    for name in names:
        if name.startswith(("messages_fts", "sqlite_")):
            continue
        try:
            out[name] = _q(conn, f'SELECT count(*) FROM "{name}"')[0][0]
        except sqlite3.Error as exc:
            out[name] = f"unreadable: {exc}"
    return out


def _message_stats(conn: sqlite3.Connection) -> dict:
    cols = _columns(conn, "messages")
    n, total, longest = _q(conn, "SELECT count(*), coalesce(sum(length(content)), 0), "
                                 "coalesce(max(length(content)), 0) FROM messages")[0]
    out = {"count": n, "content_chars_total": total, "content_chars_max": longest}
    roles = {}
    for role, k in _q(conn, "SELECT role, count(*) FROM messages GROUP BY role"):
        roles[role if role in KNOWN_ROLES else "other"] = roles.get(
            role if role in KNOWN_ROLES else "other", 0) + k
    out["by_role"] = roles
    if "tool_calls" in cols:
        out["with_tool_calls"] = _q(conn, "SELECT count(*) FROM messages WHERE tool_calls IS "
                                          "NOT NULL AND tool_calls NOT IN ('', '[]')")[0][0]
    if "timestamp" in cols:
        first, last = _q(conn, "SELECT min(timestamp), max(timestamp) FROM messages")[0]
        out["first_at"], out["last_at"] = iso(first), iso(last)
    return out


def _session_stats(conn: sqlite3.Connection, hasher: Hasher) -> dict:
    cols = _columns(conn, "sessions")
    out: dict = {"count": _q(conn, "SELECT count(*) FROM sessions")[0][0]}
    if "ended_at" in cols:
        out["ended"] = _q(conn, "SELECT count(*) FROM sessions WHERE ended_at IS NOT NULL")[0][0]
    if "source" in cols:
        by: dict = {}
        for source, k in _q(conn, "SELECT source, count(*) FROM sessions GROUP BY source"):
            key = source if source in KNOWN_SOURCES else f"other {hasher(source)}"
            by[key] = by.get(key, 0) + k
        out["by_source"] = by
    if "started_at" in cols:
        pick = [c for c in ("id", "source", "started_at", "ended_at", "message_count",
                            "parent_session_id") if c in cols]
        rows = _q(conn, f"SELECT {', '.join(pick)} FROM sessions ORDER BY started_at DESC "
                        "LIMIT 5")
        recent = []
        for row in rows:
            rec = dict(zip(pick, row))
            item = {"id": hasher(rec["id"]), "started_at": iso(rec.get("started_at")),
                    "ended_at": iso(rec.get("ended_at"))}
            if "source" in rec:
                item["source"] = (rec["source"] if rec["source"] in KNOWN_SOURCES
                                  else hasher(rec["source"]))
            if "message_count" in rec:
                item["message_count"] = rec["message_count"]
            if rec.get("parent_session_id") is not None:
                item["parent"] = hasher(rec["parent_session_id"])
            recent.append(item)
        out["most_recent"] = recent
    return out


def _state_meta(conn: sqlite3.Connection, hasher: Hasher) -> dict:
    try:
        rows = _q(conn, "SELECT key, value FROM state_meta")
    except sqlite3.OperationalError:
        return {"present": False}
    flags, prefixes, other, requests, results = {}, {}, [], [], []
    gateway_owner = None
    generation = None
    imported: set[str] = set()
    for key, value in rows:
        key = str(key)
        text = value if isinstance(value, str) else ("" if value is None else str(value))
        if key in META_FLAGS:
            flags[key] = text if _FLAG_VALUE.match(text) else f"<{len(text)} chars>"
        elif key == "gateway_owner":
            gateway_owner = _gateway_owner(text)
        elif key == "db_file_generation":
            generation = hasher(text)
        elif key.startswith(META_PREFIXES):
            prefix = next(p for p in META_PREFIXES if key.startswith(p))
            prefixes[prefix] = prefixes.get(prefix, 0) + 1
            if prefix == "maintenance_request:":
                requests.append(_maintenance_record(text, hasher))
            elif prefix == "maintenance_result:":
                results.append(_maintenance_record(text, hasher))
            elif prefix == "spool_imported:":
                imported.add(key[len(prefix):])
        else:
            other.append(hasher(key))
    return {"present": True, "keys": len(rows), "flags": flags, "counted_by_prefix": prefixes,
            "other_keys_hashed": sorted(other)[:50], "gateway_owner": gateway_owner,
            "generation_token": generation,
            "maintenance_requests": requests[:20],
            "maintenance_results": sorted(results, key=lambda r: r.get("at") or "")[-20:],
            "_imported": imported}


def _gateway_owner(text: str) -> dict:
    try:
        rec = json.loads(text)
        pid, since = rec.get("pid"), rec.get("since")
    except (ValueError, AttributeError, RecursionError):
        return {"unreadable": True}
    alive = None
    if isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 1 << 22:
        alive = os.path.exists(f"/proc/{pid}") if os.path.isdir("/proc") else None
    else:
        pid = None
    return {"pid": pid, "since": iso(since), "alive": alive}


def _maintenance_record(text: str, hasher: Hasher) -> dict:
    try:
        rec = json.loads(text)
    except (ValueError, RecursionError):
        return {"unreadable": True}
    if not isinstance(rec, dict):
        return {"unreadable": True}
    out = {"command": rec.get("command") if rec.get("command") in (
        "prune", "invalid") else "other"}
    for key in ("older_than_days", "pruned", "requested_by"):
        if isinstance(rec.get(key), (int, float)) and not isinstance(rec.get(key), bool):
            out[key] = rec[key]
    for key in ("requested_at", "at"):
        if rec.get(key) is not None:
            out[key] = iso(rec.get(key))
    if rec.get("source") is not None:
        out["source"] = rec["source"] if rec["source"] in KNOWN_SOURCES else hasher(rec["source"])
    if rec.get("error"):
        out["error"] = True
    return out
