"""``import_sessions``: bring exported sessions into this store (UPSTREAM_API §2.8).

Everything is validated before anything is written; any invalid entry writes nothing and the
result lists every problem as ``{"index", "error"[, "session_id"]}``. A valid batch is written in
ONE transaction behind the live-writer gate (SPEC §11): existing ids are skipped, new sessions
get their exported metadata with the runtime state reset (handoff, rewind count, gateway routing,
compression cooldown), their messages are written like ``replace_messages`` writes them, and
parent links are made last, only to a parent that exists (in the store or the batch) and only
when no cycle results; otherwise the session stays a root and counts as ``detached``.

Limits: 500 sessions, 10,000 messages per session, 50,000 in total, 5 MiB per session and 25 MiB
in total (compact UTF-8 JSON).
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from typing import Any

from ..processes.writer_gate import gate_held
from .rewrite import insert_rows, row_values
from .text import clean_text, dump_json, storable_problem
from .titles import MAX_TITLE_LENGTH, clean_title

MAX_SESSIONS = 500
MAX_MESSAGES_PER_SESSION = 10_000
MAX_MESSAGES_TOTAL = 50_000
MAX_SESSION_BYTES = 5 * 1024 * 1024
MAX_TOTAL_BYTES = 25 * 1024 * 1024

SESSION_TEXT_FIELDS = ("parent_session_id", "source", "user_id", "model", "system_prompt",
                       "end_reason", "cwd", "git_branch", "git_repo_root", "billing_provider",
                       "billing_base_url", "billing_mode", "cost_status", "cost_source",
                       "pricing_version", "title")
MESSAGE_TEXT_FIELDS = ("tool_call_id", "tool_name", "effect_disposition", "finish_reason",
                       "reasoning", "reasoning_content", "platform_message_id", "message_id")
_COUNTS = ("input_tokens", "output_tokens", "cache_read_tokens", "cache_write_tokens",
           "reasoning_tokens", "api_call_count")
_COSTS = ("estimated_cost_usd", "actual_cost_usd")
_KEPT_TEXT = ("user_id", "model", "system_prompt", "end_reason", "cwd", "git_branch",
              "git_repo_root", "billing_provider", "billing_base_url", "billing_mode",
              "cost_status", "cost_source", "pricing_version", "profile_name")
_JSON_TEXT_MESSAGE_FIELDS = ("reasoning_details", "codex_reasoning_items", "codex_message_items")


def _number(value: Any, kind: type) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return kind(value)


def _bytes_as_text(value: Any) -> str:
    """``json.dumps`` fallback: BLOB columns (``display_identity`` of schema 31 stores) come
    out of this store's own export as bytes; they count by their hex size, anything else is
    not serializable."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).hex()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _number_error(entry: dict, prefix: str = "") -> str | None:
    """A numeric field SQLite cannot store as the import would write it: not finite, or an
    integer outside SQLite's 64-bit range (issue 22 item 7: validated, not an OverflowError at
    the write)."""
    for field in _COUNTS + _COSTS + ("started_at", "ended_at"):
        value = entry.get(field)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            return f"{prefix}{field} must be a finite number, not {value!r}"
        problem = storable_problem(int(value) if field in _COUNTS else value)
        if problem:
            return f"{prefix}{field}: {problem}"
    return None


def _written_error(entry: dict, sid: str, messages: list) -> str | None:
    """Build the rows the import would write (after cleaning) and check every value with the
    ranges SQLite accepts; the first problem, or None."""
    try:
        row = _session_row(entry, sid, _title(entry.get("title")), now=0.0)
    except (TypeError, ValueError, RecursionError) as exc:  # model_config json cannot encode
        return str(exc)
    for col, value in row.items():
        problem = storable_problem(value)
        if problem:
            return f"{col}: {problem}"
    for j, msg in enumerate(messages):
        try:
            values = row_values(sid, _message_for_insert(msg), 0.0)
        except (TypeError, ValueError, RecursionError) as exc:
            return f"messages[{j}]: {exc}"
        for col, value in values.items():
            problem = storable_problem(value)
            if problem:
                return f"messages[{j}].{col}: {problem}"
    return None


def _entry_error(entry: Any, seen_ids: set) -> tuple[str | None, str | None, int, int]:
    """``(error, session_id, size_bytes, messages)`` of one entry; error None when valid.

    The id is compared as it will be written (text-cleaned: two ids that differ only in lone
    surrogates are the same id), and every value is checked as it will be written."""
    if not isinstance(entry, dict):
        return "session must be an object", None, 0, 0
    raw_id = entry.get("id")
    sid = clean_text(str(raw_id).strip()) if raw_id is not None else ""
    sid_out = sid or None
    try:
        size = len(json.dumps(entry, separators=(",", ":"), ensure_ascii=False,
                              default=_bytes_as_text).encode("utf-8", "surrogatepass"))
    except (TypeError, ValueError, RecursionError):  # RecursionError: nested too deep
        return "session must be JSON serializable", sid_out, 0, 0
    if size > MAX_SESSION_BYTES:
        return "session exceeds the import size limit", sid_out, size, 0
    if not sid:
        return "session id is required", None, size, 0
    if sid in seen_ids:
        return "duplicate session id", sid, size, 0
    for field in SESSION_TEXT_FIELDS:
        if entry.get(field) is not None and not isinstance(entry[field], str):
            return f"{field} must be a string", sid, size, 0
    config = entry.get("model_config")
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except (ValueError, RecursionError):
            return "model_config must be valid JSON", sid, size, 0
    if config is not None and not isinstance(config, dict):
        return "model_config must be a JSON object", sid, size, 0
    messages = entry.get("messages", [])
    if messages is None:
        messages = []
    if not isinstance(messages, list):
        return "messages must be a list", sid, size, 0
    if len(messages) > MAX_MESSAGES_PER_SESSION:
        return "messages exceeds the per-session import limit", sid, size, len(messages)
    if not all(isinstance(m, dict) for m in messages):
        return "messages must contain only objects", sid, size, len(messages)
    for j, msg in enumerate(messages):
        role = msg.get("role")
        if not isinstance(role, str) or not role:
            return f"messages[{j}].role must be a non-empty string", sid, size, len(messages)
        for field in MESSAGE_TEXT_FIELDS:
            if msg.get(field) is not None and not isinstance(msg[field], str):
                return f"{field} must be a string", sid, size, len(messages)
        tc = msg.get("token_count")
        if tc is not None and (isinstance(tc, bool) or not isinstance(tc, int)):
            return "token_count must be an integer", sid, size, len(messages)
    error = _number_error(entry) or _written_error(entry, sid, messages)
    if error:
        return error, sid, size, len(messages)
    return None, sid, size, len(messages)


def validate(sessions: Any) -> tuple[list[dict], list[str]]:
    """Check a whole batch. Returns ``(errors, ids)``.

    Raises:
        ValueError: ``sessions`` is not a list, or has more than 500 entries.
    """
    if not isinstance(sessions, list):
        raise ValueError("sessions must be a list")
    if len(sessions) > MAX_SESSIONS:
        raise ValueError(f"too many sessions to import ({len(sessions)}, max {MAX_SESSIONS})")
    errors: list[dict] = []
    ids: list[str] = []
    seen: set = set()
    total_bytes = total_messages = 0
    for i, entry in enumerate(sessions):
        error, sid, size, n_msgs = _entry_error(entry, seen)
        total_bytes += size
        total_messages += n_msgs
        if error is None and total_bytes > MAX_TOTAL_BYTES:
            error = "import exceeds the total size limit"
        if error is None and total_messages > MAX_MESSAGES_TOTAL:
            error = "messages exceeds the total import limit"
        if sid and error != "duplicate session id":
            seen.add(sid)
        if error is not None:
            item = {"index": i, "error": error}
            if sid:
                item["session_id"] = sid
            errors.append(item)
        ids.append(sid or "")
    return errors, ids


def _message_for_insert(msg: dict) -> dict:
    out = dict(msg)
    for field in _JSON_TEXT_MESSAGE_FIELDS:
        value = out.get(field)
        if isinstance(value, str):
            try:
                out[field] = json.loads(value)
            except (ValueError, RecursionError):
                pass
    return out


def _session_row(entry: dict, sid: str, title: str | None, *, now: float | None = None) -> dict:
    config = entry.get("model_config")
    if isinstance(config, dict):
        config = dump_json(config, "model_config") if config else None
    row: dict[str, Any] = {
        "id": sid, "source": entry.get("source") or "import",
        "started_at": _number(entry.get("started_at"), float) or (
            time.time() if now is None else now),
        "ended_at": _number(entry.get("ended_at"), float), "model_config": config,
        "title": title, "archived": 1 if entry.get("archived") else 0,
    }
    for field in _KEPT_TEXT:
        if isinstance(entry.get(field), str):
            row[field] = entry[field]
    for field in _COUNTS:
        row[field] = _number(entry.get(field), int) or 0
    for field in _COSTS:
        row[field] = _number(entry.get(field), float)
    return {k: clean_text(v) for k, v in row.items()}


def _title(raw: Any) -> str | None:
    """An imported title cleaned like a title set by hand (SPEC §7); cut to 100 characters
    rather than refused (the import is not the user typing)."""
    cleaned = clean_title(raw) if isinstance(raw, str) else None
    return cleaned[:MAX_TITLE_LENGTH].rstrip() if cleaned else None


def _would_cycle(c: sqlite3.Connection, child: str, parent: str, planned: dict[str, str | None]
                 ) -> bool:
    """True when linking ``child`` under ``parent`` closes a loop: walk up from ``parent``
    through the planned links of the batch (their intended parent while not decided yet) and
    the store's links."""
    cur, seen = parent, set()
    while cur is not None and cur not in seen:
        if cur == child:
            return True
        seen.add(cur)
        if cur in planned:
            cur = planned[cur]
        else:
            row = c.execute("SELECT parent_session_id FROM sessions WHERE id = ?",
                            (cur,)).fetchone()
            cur = None if row is None else row[0]
    return False


def write_batch(c: sqlite3.Connection, sessions: list[dict], ids: list[str]) -> dict:
    """Insert a validated batch inside the caller's write transaction (module docstring)."""
    marks = ",".join("?" * len(ids))
    existing = {r[0] for r in c.execute(f"SELECT id FROM sessions WHERE id IN ({marks})", ids)}
    taken_titles: set[str] = set()
    imported: list[str] = []
    skipped: list[str] = []
    for entry, sid in zip(sessions, ids):
        if sid in existing:
            skipped.append(sid)
            continue
        title = _title(entry.get("title"))
        if title is not None and (title in taken_titles or c.execute(
                "SELECT 1 FROM sessions WHERE title = ?", (title,)).fetchone()):
            title = None  # titles are unique: the store's holder keeps it
        if title is not None:
            taken_titles.add(title)
        row = _session_row(entry, sid, title)
        c.execute(f"INSERT INTO sessions ({', '.join(row)}) VALUES "
                  f"({', '.join('?' * len(row))})", list(row.values()))
        msgs = [_message_for_insert(m) for m in (entry.get("messages") or [])]
        n, calls = insert_rows(c, sid, msgs)
        c.execute("UPDATE sessions SET message_count = ?, tool_call_count = ? WHERE id = ?",
                  (n, calls, sid))
        imported.append(sid)
    batch = set(imported)
    intended = {sid: clean_text(e.get("parent_session_id")) or None
                for e, sid in zip(sessions, ids) if sid in batch}
    planned: dict[str, str | None] = dict(intended)
    detached = 0
    for sid in imported:
        parent = intended[sid]
        if parent is None:
            continue
        exists = parent in batch or c.execute("SELECT 1 FROM sessions WHERE id = ?",
                                              (parent,)).fetchone() is not None
        if not exists or _would_cycle(c, sid, parent, planned):
            planned[sid] = None
            detached += 1
            continue
        c.execute("UPDATE sessions SET parent_session_id = ? WHERE id = ?", (parent, sid))
    return {"ok": True, "imported": len(imported), "skipped": len(skipped),
            "detached": detached, "imported_ids": imported, "skipped_ids": skipped,
            "errors": []}


class ImportMixin:
    """``import_sessions``; needs ``self._write`` and ``self.db_path``."""

    def import_sessions(self, sessions: list, *, force: bool = False) -> dict:
        """Import exported sessions (module docstring; UPSTREAM_API §2.8).

        Args:
            sessions: a list of :meth:`export_session`-shaped dicts (``id``, metadata,
                ``messages``).
            force: skip the live-writer gate.
        Returns:
            ``{"ok", "imported", "skipped", "detached", "imported_ids", "skipped_ids",
            "errors"}``; on a validation error ``{"ok": False, "imported": 0, "skipped": 0,
            "detached": 0, "errors": [{"index", "error"[, "session_id"]}]}`` and nothing is
            written.
        Raises:
            ValueError: ``sessions`` is not a list or has more than 500 entries.
            MaintenanceRefused: another process holds the store (without ``force``).
        """
        errors, ids = validate(sessions)
        if errors:
            return {"ok": False, "imported": 0, "skipped": 0, "detached": 0, "errors": errors}
        if not sessions:
            return {"ok": True, "imported": 0, "skipped": 0, "detached": 0, "imported_ids": [],
                    "skipped_ids": [], "errors": []}
        clean_ids = list(ids)  # already cleaned by validate (the duplicate check compared these)
        with gate_held(self.db_path, "import", force=force):
            return self._write(lambda c: write_batch(c, sessions, clean_ids),
                               op="import_sessions")
