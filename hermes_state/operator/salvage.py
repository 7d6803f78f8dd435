"""``sessions salvage CAPTURE_DIR [--apply]``: bring back what only a retired-WAL capture holds
(SPEC §10.3; issue 16 item 3).

A capture (``state.db.retired-wal-<UTCSTAMP>-<pid>/``) is the main file and the WAL a writer held
when its sidecars were deleted under it: acknowledged turns that never reached the file now at
the path. This module compares the capture with the live store and, when asked, appends what the
store lacks.

- The capture is never opened in place: ``state.db`` and ``state.db-wal`` are copied into a
  private temporary directory (the copy is refused if a file changes while it is copied) and the
  WAL's sha256 is checked against ``manifest.json``. A capture of a main file over 512 MiB holds
  only its header (``main.mode: header_only``): its frames cannot be read and it is refused.
- Sessions are matched by id. Messages are matched per session by content and order, never by
  row id (the new generation reuses the ids the retired one had used): the capture's rows and
  the store's rows are compared as sequences of ``(role, content, timestamp, tool_call_id,
  tool_calls, tool_name, platform_message_id)`` (a longest common subsequence); a capture row
  with no partner is missing from the store.
- ``--apply`` appends the missing sessions and messages in ONE write transaction through the
  store's write path (``BEGIN IMMEDIATE``, the generation check), under the live-writer gate with
  the store's write lock held from the decision to the commit (:func:`hermes_state.processes.writer_gate.
  gate_held`, the gate of SPEC §11: refused while another process holds the store). The plan is
  computed again inside that transaction, so what is appended is what the store lacks at that
  moment. Salvaged rows keep their content and timestamps; they get new row ids after the
  existing ones. Session counters grow by what was appended. A session whose parent is nowhere
  is added as a root, a title another session already has is dropped (titles are unique).
- Identity: a capture is salvaged only into the store it was taken from. The capture's store
  token (``manifest.generation.token``, else ``state_meta['db_file_generation']`` read from the
  capture's own copy; SPEC §10.1) must equal the live store's. A capture of another store (another
  profile, a copy from elsewhere, the store before ``sessions recover --output`` rebuilt it) or one
  whose token cannot be read is refused with :class:`ForeignCaptureError`, naming both tokens and
  databases, unless the caller passes ``allow_foreign`` (``--allow-foreign``): the same session id
  in two stores names two unrelated conversations.
- Partial salvage: a row that cannot be added (a message whose session is in neither the capture
  nor the store, a value the live schema refuses) is skipped under its own SAVEPOINT and listed
  in ``not_salvaged`` with why; every other row is still appended in the same transaction.
- The record: one ``state_meta`` row ``salvage:<capture name>:<UTCSTAMP>`` with what was added
  (session ids, message ids per session). Applying twice adds nothing the second time (every row
  now has its partner), and nothing is recorded then.

Session fields the capture changed on existing sessions (a title, an end) are listed as
``differing_sessions`` and not applied: the store's newer writers may have changed them since.
"""

from __future__ import annotations

import difflib
import json
import os
import sqlite3
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..api.messages import count_tool_calls
from ..api.text import CleaningConnection
from ..db import SessionDB
from ..errors import HermesStateError
from ..files import atomic
from ..files.paths import utc_stamp
from ..files.store_files import connect_ro
from ..processes.writer_gate import gate_held
from .recover_source import SourceChangedError, copy_source

#: The columns that say "the same message" (content and order; never the row id).
MESSAGE_KEY = ("role", "content", "timestamp", "tool_call_id", "tool_calls", "tool_name",
               "platform_message_id")
#: Session fields compared for ``differing_sessions`` (informational only).
SESSION_FIELDS = ("title", "ended_at", "end_reason", "parent_session_id", "model")
RECORD_PREFIX = "salvage:"
CAPTURE_MARKER = ".retired-wal-"
MANIFEST_LIMIT = 1 << 20


class SalvageError(HermesStateError):
    """The capture cannot be salvaged (missing files, a header-only capture, a WAL that is not
    the one the manifest describes, an unreadable copy). Nothing was written."""


class ForeignCaptureError(SalvageError):
    """The capture was taken from another store (its token differs from this store's), or its
    store cannot be told (no token): refused unless ``allow_foreign``. Nothing was written.

    Attributes:
        capture_token, store_token: the two ``db_file_generation`` tokens (None when unknown).
    """

    def __init__(self, user_message: str, operator_detail: str = "", *,
                 capture_token: str | None = None, store_token: str | None = None) -> None:
        self.capture_token = capture_token
        self.store_token = store_token
        super().__init__(user_message, operator_detail)


#: ``state_meta`` key of a store's identity token (SPEC §10.1).
TOKEN_KEY = "db_file_generation"


@dataclass
class CapturePlan:
    """What one capture holds that the store lacks.

    Attributes:
        capture: the capture directory; ``manifest``: its manifest (``captured_at``, ``pid``,
            ``trigger``); ``sessions`` / ``messages``: the capture's totals.
        new_sessions: session rows (column dicts) the store lacks entirely.
        missing: ``{session id: [message rows]}`` in the capture's order, the store lacking them.
        matched: capture messages found in the store.
        differing_sessions: ``[{"id", "fields": {name: [store, capture]}}]`` (not applied).
        identity: ``{"capture_token", "store_token", "same_store", "allowed_foreign"}``.
        not_salvageable: ``[{"table", "session_id", "capture_row_id", "role", "timestamp",
            "why"}]``: capture rows the store lacks that cannot be added (found while planning).
    """

    capture: Path
    manifest: dict
    sessions: int = 0
    messages: int = 0
    new_sessions: list[dict] = field(default_factory=list)
    missing: dict[str, list[dict]] = field(default_factory=dict)
    matched: int = 0
    differing_sessions: list[dict] = field(default_factory=list)
    identity: dict = field(default_factory=dict)
    not_salvageable: list[dict] = field(default_factory=list)

    @property
    def missing_messages(self) -> int:
        return sum(len(v) for v in self.missing.values())

    @property
    def lacks_anything(self) -> bool:
        return bool(self.new_sessions or self.missing_messages)

    def to_dict(self) -> dict:
        """JSON-safe summary: counts, and per session the first and last missing message."""
        by_session = []
        for sid, rows in self.missing.items():
            by_session.append({
                "session_id": sid, "messages": len(rows),
                "new_session": any(s["id"] == sid for s in self.new_sessions),
                "first": _brief(rows[0]), "last": _brief(rows[-1])})
        return {"capture": str(self.capture), "captured_at": self.manifest.get("captured_at"),
                "captured_by_pid": self.manifest.get("pid"),
                "trigger": self.manifest.get("trigger"),
                "capture_sessions": self.sessions, "capture_messages": self.messages,
                "matched_messages": self.matched,
                "missing_sessions": [s["id"] for s in self.new_sessions],
                "missing_messages": self.missing_messages, "by_session": by_session,
                "differing_sessions": self.differing_sessions, "identity": self.identity,
                "not_salvageable": self.not_salvageable}


def _brief(row: dict) -> dict:
    content = row.get("content")
    text = content if isinstance(content, str) else json.dumps(content, default=str)
    return {"role": row.get("role"), "timestamp": row.get("timestamp"),
            "platform_message_id": row.get("platform_message_id"),
            "content": (text or "")[:80]}


# ------------------------------------------------------------------------------ the capture
def captures_beside(db_path: str | os.PathLike) -> list[Path]:
    """The retired-WAL capture directories beside ``db_path``, oldest first (by name: the name
    carries the UTC stamp). ``.partial`` directories (interrupted captures) are left out."""
    db = Path(db_path).absolute()
    try:
        entries = sorted(db.parent.iterdir())
    except OSError:
        return []
    return [e for e in entries if e.name.startswith(db.name + CAPTURE_MARKER)
            and not e.name.endswith(".partial") and e.is_dir() and not e.is_symlink()]


def read_manifest(capture: Path) -> dict:
    """The capture's ``manifest.json`` (bounded read, never through a symlink or a FIFO).

    Raises:
        SalvageError: missing, unreadable or not an object; or a header-only capture.
    """
    try:
        manifest = atomic.read_json(capture / "manifest.json", limit=MANIFEST_LIMIT)
    except (OSError, ValueError) as exc:
        raise SalvageError(f"{capture} has no readable manifest.json ({exc}): it is not a "
                           "complete retired-WAL capture; nothing was salvaged.") from None
    if not isinstance(manifest, dict):
        raise SalvageError(f"{capture}/manifest.json is not a JSON object: a damaged capture; "
                           "nothing was salvaged.")
    main = manifest.get("main") if isinstance(manifest.get("main"), dict) else {}
    if main.get("mode") == "header_only":
        raise SalvageError(
            f"{capture} holds only the 100-byte header of state.db (the store was over 512 MiB "
            "when it was captured), so its WAL frames have no page image to apply to; nothing "
            "was salvaged.", "keep the directory for a bug report")
    return manifest


def _private_copy(capture: Path, manifest: dict, work: Path) -> Path:
    """Copy the capture's ``state.db`` + ``state.db-wal`` into ``work``; check the WAL's sha256."""
    if not (capture / "state.db").is_file():
        raise SalvageError(f"{capture} has no state.db: an incomplete capture; nothing was "
                           "salvaged.")
    try:
        copied = copy_source(capture / "state.db", work)
    except SourceChangedError as exc:
        raise SalvageError(f"{capture} changed while it was copied ({exc.operator_detail}); "
                           "nothing was salvaged.") from None
    # The capture's shm (if any) is not trusted: SQLite rebuilds the WAL index from the WAL.
    for name in ("state.db-shm", "state.db-journal"):
        try:
            os.unlink(work / name)
        except FileNotFoundError:
            pass
    wal = manifest.get("wal") if isinstance(manifest.get("wal"), dict) else {}
    got = (copied.get("state.db-wal") or {}).get("sha256")
    if wal.get("sha256") and got != wal["sha256"]:
        raise SalvageError(f"{capture}/state.db-wal is not the WAL its manifest describes (sha256 "
                           f"{got} != {wal['sha256']}); nothing was salvaged.",
                           "keep the directory for a bug report")
    return work / "state.db"


@dataclass
class _CaptureRows:
    sessions: dict[str, dict]
    messages: dict[str, list[dict]]
    session_cols: list[str]
    message_cols: list[str]
    token: str | None = None


def _read_capture(capture: Path, manifest: dict, tmp_dir: str | None) -> _CaptureRows:
    with tempfile.TemporaryDirectory(prefix="hermes-salvage-", dir=tmp_dir) as work:
        os.chmod(work, 0o700)
        copy = _private_copy(capture, manifest, Path(work))
        conn = sqlite3.connect(os.fspath(copy), isolation_level=None, timeout=5.0)
        conn.row_factory = sqlite3.Row
        try:
            scols = _columns(conn, "sessions")
            mcols = _columns(conn, "messages")
            if "id" not in scols or not {"id", "session_id"} <= set(mcols):
                raise SalvageError(f"{capture}: the captured store has no sessions/messages "
                                   "tables; nothing to salvage.")
            sessions = {r["id"]: dict(r) for r in conn.execute("SELECT * FROM sessions")}
            messages: dict[str, list[dict]] = {}
            for r in conn.execute("SELECT * FROM messages ORDER BY session_id, id"):
                messages.setdefault(r["session_id"], []).append(dict(r))
            token = _token(conn)
        except sqlite3.DatabaseError as exc:
            raise SalvageError(f"{capture}: the captured store cannot be read ({exc}); "
                               f"`sessions recover {capture}/state.db --inspect-only` shows what "
                               "is readable. Nothing was salvaged.") from None
        finally:
            conn.close()
    return _CaptureRows(sessions, messages, scols, mcols, token)


def _token(conn: sqlite3.Connection) -> str | None:
    """``state_meta['db_file_generation']`` of a store, None when absent or not text."""
    try:
        row = conn.execute("SELECT value FROM state_meta WHERE key = ?", (TOKEN_KEY,)).fetchone()
    except sqlite3.OperationalError:  # no state_meta (an old or foreign store)
        return None
    value = None if row is None else row[0]
    return value if isinstance(value, str) and value else None


def capture_token(manifest: dict, rows: "_CaptureRows | None" = None) -> str | None:
    """The token of the store a capture was taken from: the manifest's ``generation.token``
    (recorded at the writer's open), else the one in the capture's own copy."""
    gen = manifest.get("generation") if isinstance(manifest.get("generation"), dict) else {}
    token = gen.get("token")
    if isinstance(token, str) and token:
        return token
    return rows.token if rows is not None else None


def check_identity(capture: Path, manifest: dict, rows: "_CaptureRows",
                   store_token: str | None, db_path: str | os.PathLike, *,
                   allow_foreign: bool = False) -> dict:
    """Whether ``capture`` was taken from the store at ``db_path`` (module docstring).

    Returns:
        ``{"capture_token", "store_token", "same_store", "allowed_foreign"}``.
    Raises:
        ForeignCaptureError: the tokens differ or one is unknown, and not ``allow_foreign``.
    """
    cap_token = capture_token(manifest, rows)
    same = cap_token is not None and cap_token == store_token
    out = {"capture_token": cap_token, "store_token": store_token, "same_store": same,
           "allowed_foreign": (not same) and allow_foreign}
    if same or allow_foreign:
        return out
    database = manifest.get("database")
    here = os.path.realpath(os.fspath(db_path))
    at_same_path = isinstance(database, str) and os.path.realpath(database) == here
    if cap_token is None or store_token is None:
        which = "the capture" if cap_token is None else "this store"
        why = (f"{which} carries no store token (state_meta['{TOKEN_KEY}']), so it cannot be "
               "shown to be this store's")
    elif at_same_path:
        why = (f"it was taken from the store then at {database} (token {cap_token}), and the "
               f"file now at that path is another store (token {store_token}): it was replaced "
               "since (restored from elsewhere, rebuilt by `sessions recover --output`, or "
               "copied over)")
    else:
        why = (f"it was taken from another store ({database!s}, token {cap_token}); this store "
               f"is {here} (token {store_token})")
    raise ForeignCaptureError(
        f"refusing to salvage {capture}: {why}. A session id in another store names another "
        "conversation; nothing was salvaged.",
        "salvage it into the store it came from; if this store really continues that one (you "
        "rebuilt or copied it), re-run with --allow-foreign",
        capture_token=cap_token, store_token=store_token)


def _columns(conn: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]


# ------------------------------------------------------------------------------ matching
def _key(row: dict, cols: tuple[str, ...]) -> tuple:
    return tuple(row.get(c) for c in cols)


def missing_rows(capture_rows: list[dict], store_keys: list[tuple],
                 cols: tuple[str, ...]) -> list[dict]:
    """The capture rows without a partner in the store, in the capture's order.

    Both sides are sequences of message keys; their longest common subsequence pairs the rows
    the store has (content and order, never the row id).
    """
    keys = [_key(r, cols) for r in capture_rows]
    matcher = difflib.SequenceMatcher(None, keys, store_keys, autojunk=False)
    paired = set()
    for a, _, size in matcher.get_matching_blocks():
        paired.update(range(a, a + size))
    return [r for i, r in enumerate(capture_rows) if i not in paired]


def _plan(rows: _CaptureRows, capture: Path, manifest: dict, c: sqlite3.Connection) -> CapturePlan:
    """Compare the capture's rows with the store read through ``c``."""
    plan = CapturePlan(capture, manifest, sessions=len(rows.sessions),
                       messages=sum(map(len, rows.messages.values())))
    live_mcols = set(_columns(c, "messages"))
    key_cols = tuple(k for k in MESSAGE_KEY if k in live_mcols and k in rows.message_cols)
    for sid in sorted(set(rows.sessions) | set(rows.messages), key=_order):
        live = c.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone()
        if live is None and sid not in rows.sessions:
            # Messages whose session is in neither the capture nor the store: the foreign key
            # would refuse them, so they are named, not attempted.
            plan.not_salvageable += [
                _row_note("messages", sid, m, f"its session {sid!r} is in neither the capture "
                          "nor the store (FOREIGN KEY messages.session_id -> sessions.id)")
                for m in rows.messages.get(sid, [])]
            continue
        if live is None and sid in rows.sessions:
            plan.new_sessions.append(rows.sessions[sid])
        elif live is not None and sid in rows.sessions:
            names = [d[0] for d in c.execute("SELECT * FROM sessions LIMIT 0").description]
            live_row = dict(zip(names, live))
            diff = {f: [live_row.get(f), rows.sessions[sid].get(f)] for f in SESSION_FIELDS
                    if f in live_row and f in rows.sessions[sid]
                    and live_row.get(f) != rows.sessions[sid].get(f)}
            if diff:
                plan.differing_sessions.append({"id": sid, "fields": diff})
        captured = rows.messages.get(sid, [])
        if not captured:
            continue
        store_keys = [tuple(r) for r in c.execute(
            f"SELECT {', '.join(key_cols)} FROM messages WHERE session_id = ? ORDER BY id",
            (sid,))]
        lacking = missing_rows(captured, store_keys, key_cols)
        plan.matched += len(captured) - len(lacking)
        if lacking:
            plan.missing[sid] = lacking
    return plan


def _order(value) -> tuple:
    """Sort key for ids of any type (a foreign client may have stored a BLOB or NULL id)."""
    return (type(value).__name__, value if isinstance(value, (str, bytes)) else repr(value))


def _printable(value):
    """A JSON-safe form of a cell of any type (bytes and other objects by their repr)."""
    return value if value is None or isinstance(value, (str, int, float)) else repr(value)


def _row_note(table: str, sid, row: dict, why: str) -> dict:
    """One entry of ``not_salvaged``: which capture row, and why it could not be added."""
    return {"table": table, "session_id": _printable(sid),
            "capture_row_id": _printable(row.get("id")) if table == "messages" else None,
            "role": _printable(row.get("role")), "timestamp": _printable(row.get("timestamp")),
            "why": why}


def plan_capture(db_path: str | os.PathLike, capture_dir: str | os.PathLike, *,
                 tmp_dir: str | None = None, allow_foreign: bool = False) -> CapturePlan:
    """What ``capture_dir`` holds that the store at ``db_path`` lacks (read-only on both).

    Args:
        allow_foreign: compare a capture of another store too (module docstring).
    Raises:
        ForeignCaptureError: the capture was taken from another store (not ``allow_foreign``).
        SalvageError: the capture cannot be read (see :func:`read_manifest`).
        sqlite3.Error: the live store cannot be read.
    """
    capture = _capture_path(capture_dir)
    manifest = read_manifest(capture)
    rows = _read_capture(capture, manifest, tmp_dir)
    conn = connect_ro(db_path, timeout=5.0)
    try:
        identity = check_identity(capture, manifest, rows, _token(conn), db_path,
                                  allow_foreign=allow_foreign)
        plan = _plan(rows, capture, manifest, conn)
    finally:
        conn.close()
    plan.identity = identity
    return plan


def _capture_path(capture_dir: str | os.PathLike) -> Path:
    capture = Path(capture_dir).expanduser().absolute()
    if capture.name == "state.db" and capture.parent.is_dir():
        capture = capture.parent  # DIR/state.db names the capture too
    if not capture.is_dir():
        raise SalvageError(f"{capture} is not a directory: give a retired-WAL capture "
                           "(state.db.retired-wal-<UTCSTAMP>-<pid>/); `doctor` lists them.")
    return capture


# ------------------------------------------------------------------------------ applying
def _insert(c: sqlite3.Connection, table: str, row: dict) -> int:
    cols = list(row)
    cur = c.execute(f"INSERT INTO {table} ({', '.join(cols)}) VALUES "
                    f"({', '.join('?' * len(cols))})", [row[k] for k in cols])
    return int(cur.lastrowid)


def _tool_calls(value) -> int:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return 1 if value else 0
    return count_tool_calls(value)


def _try_insert(c: sqlite3.Connection, table: str, row: dict) -> tuple[int | None, str]:
    """Insert ``row`` under its own SAVEPOINT: ``(row id, "")``, or ``(None, why)`` when the
    live schema refuses it (a constraint, a value SQLite cannot bind); the transaction goes on.
    Lock errors and damage are not caught: the whole salvage retries or stops."""
    c.execute("SAVEPOINT salvage_row")
    try:
        rid = _insert(c, table, row)
    except (sqlite3.IntegrityError, sqlite3.InterfaceError, sqlite3.ProgrammingError,
            OverflowError, ValueError, TypeError) as exc:
        c.execute("ROLLBACK TO salvage_row")
        c.execute("RELEASE salvage_row")
        return None, f"{type(exc).__name__}: {exc}"
    c.execute("RELEASE salvage_row")
    return rid, ""


def _add_sessions(c: sqlite3.Connection, plan: CapturePlan, live_scols: set) -> dict:
    """Insert the plan's new sessions, parents first; returns what happened to them."""
    added, detached, titles_dropped, failed = [], [], [], {}
    new_ids = {s["id"] for s in plan.new_sessions}
    pending = list(plan.new_sessions)
    while pending:
        progressed = False
        for s in list(pending):
            parent = s.get("parent_session_id")
            waiting = parent and parent in new_ids and parent not in added and parent not in failed
            if waiting and any(p["id"] == parent for p in pending):
                continue
            row = {k: v for k, v in s.items() if k in live_scols}
            if parent and (parent in failed or parent not in new_ids) and c.execute(
                    "SELECT 1 FROM sessions WHERE id = ?", (parent,)).fetchone() is None:
                row["parent_session_id"] = None
                detached.append(s["id"])
            _add_one_session(c, s, row, added, titles_dropped, failed, plan)
            pending.remove(s)
            progressed = True
        if not progressed:  # a parent cycle among the new sessions: add the rest as roots
            for s in pending:
                detached.append(s["id"])
                row = {k: v for k, v in s.items() if k in live_scols}
                row["parent_session_id"] = None
                _add_one_session(c, s, row, added, titles_dropped, failed, plan)
            pending = []
    return {"added": added, "detached": detached, "titles_dropped": titles_dropped,
            "failed": failed}


def _add_one_session(c: sqlite3.Connection, s: dict, row: dict, added: list,
                     titles_dropped: list, failed: dict, plan: CapturePlan) -> None:
    if row.get("title") and c.execute("SELECT 1 FROM sessions WHERE title = ?",
                                      (row["title"],)).fetchone():
        titles_dropped.append(s["id"])
        row["title"] = None
    for counter in ("message_count", "tool_call_count"):
        if counter in row:
            row[counter] = 0
    _rid, why = _try_insert(c, "sessions", row)
    if why:
        failed[s["id"]] = why
        plan.not_salvageable.append(_row_note("sessions", s["id"], s, why))
    else:
        added.append(s["id"])


def _write_plan(c: sqlite3.Connection, plan: CapturePlan, rows: _CaptureRows) -> dict:
    """Append ``plan`` inside the caller's write transaction; returns what was added.

    Every row goes in under its own SAVEPOINT: one the live schema refuses is listed in
    ``not_salvaged`` with why, and the others are still added (issue 22 item 5)."""
    live_scols = set(_columns(c, "sessions"))
    live_mcols = set(_columns(c, "messages"))
    sessions = _add_sessions(c, plan, live_scols)
    added_messages: dict[str, list[int]] = {}
    for sid, msgs in plan.missing.items():
        if sid in sessions["failed"]:
            plan.not_salvageable += [_row_note("messages", sid, m, f"its session {sid!r} could "
                                               f"not be added ({sessions['failed'][sid]})")
                                     for m in msgs]
            continue
        ids, calls = [], 0
        for m in msgs:
            rid, why = _try_insert(c, "messages", {k: v for k, v in m.items()
                                                   if k in live_mcols and k != "id"})
            if why:
                plan.not_salvageable.append(_row_note("messages", sid, m, why))
                continue
            ids.append(rid)
            calls += _tool_calls(m.get("tool_calls"))
        if not ids:
            continue
        c.execute("UPDATE sessions SET message_count = COALESCE(message_count, 0) + ?, "
                  "tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ?",
                  (len(ids), calls, sid))
        added_messages[sid] = ids
    added_sessions = sessions["added"]
    record = {"capture": str(plan.capture), "captured_at": plan.manifest.get("captured_at"),
              "wal_sha256": (plan.manifest.get("wal") or {}).get("sha256"),
              "applied_at": time.time(), "by_pid": os.getpid(),
              "sessions_added": added_sessions, "messages_added": added_messages,
              "detached_sessions": sessions["detached"],
              "titles_dropped": sessions["titles_dropped"], "identity": plan.identity,
              "not_salvaged": plan.not_salvageable}
    key = None
    if added_sessions or added_messages:
        key = f"{RECORD_PREFIX}{plan.capture.name}:{utc_stamp()}"
        c.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                  (key, json.dumps(record, default=repr)))
    return {**record, "record_key": key,
            "messages_added_total": sum(map(len, added_messages.values()))}


def apply_captures(db_path: str | os.PathLike, captures: list[str | os.PathLike], *,
                   force: bool = False, tmp_dir: str | None = None,
                   allow_foreign: bool = False) -> list[dict]:
    """Append what each capture holds that the store lacks, in ONE write transaction under the
    live-writer gate with the store's write lock held (module docstring).

    Args:
        db_path: the live store (must exist).
        captures: capture directories, applied in this order (a later one is compared with the
            store including what an earlier one added).
        force: skip the holder refusal (never the write lock).
        allow_foreign: also apply a capture of another store (module docstring).
    Returns:
        One dict per capture: the plan (:meth:`CapturePlan.to_dict`) under ``"plan"`` and what
        was added (``sessions_added``, ``messages_added`` {session: [new row ids]},
        ``messages_added_total``, ``detached_sessions``, ``titles_dropped``, ``record_key``,
        ``identity``, ``not_salvaged``: the capture rows that could not be added, with why).
    Raises:
        ForeignCaptureError: a capture of another store (not ``allow_foreign``); nothing
            written.
        MaintenanceRefused: another process holds the store (SPEC §11), or the lock is busy.
        SalvageError: a capture cannot be read (nothing written).
        HermesStateError: the store refused the write (nothing written).
    """
    loaded = []
    for cap in captures:
        path = _capture_path(cap)
        manifest = read_manifest(path)
        loaded.append((path, manifest, _read_capture(path, manifest, tmp_dir)))
    with gate_held(db_path, "salvage", force=force), SessionDB(db_path) as db:
        def fn(c: sqlite3.Connection) -> list[dict]:
            out = []
            for path, manifest, rows in loaded:
                identity = check_identity(path, manifest, rows, _token(c), db_path,
                                          allow_foreign=allow_foreign)
                plan = _plan(rows, path, manifest, c)
                plan.identity = identity
                out.append({"plan": plan.to_dict(), **_write_plan(c, plan, rows)})
            return out
        return db.connection.execute_write(lambda c: fn(CleaningConnection(c)), op="salvage")
