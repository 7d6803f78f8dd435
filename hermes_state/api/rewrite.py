"""Rewriting a session's transcript: replace, compact, rewind, restore (UPSTREAM_API §2.3, D11).

Every change is one write transaction. :func:`insert_rows` is the one row writer for a list of
message dicts (``replace_messages``, ``archive_and_compact`` and ``import_sessions``); each row
is written with ``active = 1`` (D11).

Message dict keys read: ``role`` (default ``"unknown"``), ``content`` (a list/dict round-trips,
D6), ``tool_call_id``, ``tool_calls``, ``tool_name``, ``effect_disposition``, ``timestamp``,
``token_count``, ``finish_reason``, ``platform_message_id`` (or ``message_id``), ``observed``,
``api_content``; ``reasoning``, ``reasoning_content``, ``reasoning_details`` and ``codex_*`` for
assistant rows only. A missing (or invalid) timestamp is "now", each later default pushed
strictly past the previous row, so the order of the list survives in ``(timestamp, id)``.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Iterable

from .messages import (
    ACTIVE_SQL,
    coerce_timestamp,
    count_tool_calls,
    insert_sql,
    message_row,
    message_values,
)
from .text import clean_text

_ASSISTANT_ONLY = ("reasoning", "reasoning_content", "reasoning_details",
                   "codex_reasoning_items", "codex_message_items")
_COMMON = ("content", "tool_name", "tool_calls", "tool_call_id", "token_count", "finish_reason",
           "effect_disposition", "api_content")
_TIME_STEP = 1e-6


def row_values(session_id: str, msg: dict, timestamp: float) -> dict:
    """The column map of one message dict (module docstring for the keys read)."""
    if not isinstance(msg, dict):
        raise TypeError(f"a message must be a dict, not {type(msg).__name__}")
    role = msg.get("role") or "unknown"
    fields = {k: msg.get(k) for k in _COMMON}
    if role == "assistant":
        fields.update({k: msg.get(k) for k in _ASSISTANT_ONLY})
    pmid = msg.get("platform_message_id")
    fields["platform_message_id"] = pmid if pmid is not None else msg.get("message_id")
    return message_values(session_id, role, observed=bool(msg.get("observed")),
                          timestamp=timestamp, **fields)


def insert_rows(c: sqlite3.Connection, session_id: str, messages: Iterable[dict]
                ) -> tuple[int, int]:
    """Insert ``messages`` for ``session_id`` inside the caller's transaction.

    Returns:
        ``(rows inserted, tool calls they carry)`` for the session counters.
    """
    prev: float | None = None
    n = calls = 0
    for msg in messages:
        ts = coerce_timestamp(msg.get("timestamp")) if isinstance(msg, dict) else None
        if ts is None:
            now = time.time()
            ts = now if prev is None else max(prev + _TIME_STEP, now + _TIME_STEP)
        vals = row_values(session_id, msg, ts)
        c.execute(insert_sql(list(vals)), list(vals.values()))
        prev = ts
        n += 1
        calls += count_tool_calls(msg.get("tool_calls"))
    return n, calls


def _set_counters(c: sqlite3.Connection, session_id: str, n: int, calls: int) -> None:
    c.execute("UPDATE sessions SET message_count = ?, tool_call_count = ? WHERE id = ?",
              (n, calls, session_id))


class RewriteMixin:
    """Transcript rewriting API; needs ``self._write(fn, op)``."""

    def replace_messages(self, session_id: str, messages: list[dict],
                         active_only: bool = False) -> None:
        """Replace the session's messages with ``messages`` in one transaction.

        Deletes the session's rows (only the ``active = 1`` ones with ``active_only``), inserts
        the list (module docstring) and sets ``message_count`` / ``tool_call_count`` to what
        was inserted.

        Raises:
            sqlite3.IntegrityError: unknown session (foreign key), when the list is non-empty.
            TypeError: an item that is not a dict (nothing is changed).
        """
        sid = clean_text(session_id)
        msgs = list(messages or [])

        def fn(c: sqlite3.Connection) -> None:
            where = f" AND {ACTIVE_SQL}" if active_only else ""
            c.execute(f"DELETE FROM messages WHERE session_id = ?{where}", (sid,))
            _set_counters(c, sid, *insert_rows(c, sid, msgs))

        self._write(fn, op="replace_messages")

    def archive_and_compact(self, session_id: str, compacted_messages: list[dict]) -> int:
        """Archive the active transcript and continue from a compacted one.

        Every active row becomes ``active = 0, compacted = 1`` (still searchable, UPSTREAM_API
        §2.5), the list is inserted as the new active rows and the counters are set to what was
        inserted. One transaction.

        Returns:
            Rows inserted.
        """
        sid = clean_text(session_id)
        msgs = list(compacted_messages or [])

        def fn(c: sqlite3.Connection) -> int:
            c.execute(f"UPDATE messages SET active = 0, compacted = 1 WHERE session_id = ? "
                      f"AND {ACTIVE_SQL}", (sid,))
            n, calls = insert_rows(c, sid, msgs)
            _set_counters(c, sid, n, calls)
            return n

        return self._write(fn, op="archive_and_compact")

    def rewind_to_message(self, session_id: str, target_message_id: int) -> dict:
        """Rewind the conversation to before a user message.

        Every active row with ``id >= target`` (the target included) becomes ``active = 0``;
        ``rewind_count`` goes up by one (also when nothing was active any more);
        ``message_count`` is unchanged.

        Returns:
            ``{"rewound_count", "target_message", "new_head_id"}``: rows deactivated, the target
            row (as :meth:`get_messages` returns rows), the largest still-active id or None.
        Raises:
            ValueError: the target is not a message of this session, or not a ``user`` one.
        """
        sid = clean_text(session_id)

        def fn(c: sqlite3.Connection) -> dict:
            row = c.execute("SELECT * FROM messages WHERE id = ? AND session_id = ?",
                            (target_message_id, sid)).fetchone()
            if row is None:
                raise ValueError(f"message {target_message_id} is not a message of session {sid}")
            if row["role"] != "user":
                raise ValueError(f"message {target_message_id} is a {row['role']!r} message: "
                                 "only a user message can be rewound to")
            n = c.execute(f"UPDATE messages SET active = 0 WHERE session_id = ? AND id >= ? "
                          f"AND {ACTIVE_SQL}", (sid, target_message_id)).rowcount
            c.execute("UPDATE sessions SET rewind_count = COALESCE(rewind_count, 0) + 1 "
                      "WHERE id = ?", (sid,))
            head = c.execute(f"SELECT MAX(id) FROM messages WHERE session_id = ? AND "
                             f"{ACTIVE_SQL}", (sid,)).fetchone()[0]
            return {"rewound_count": n, "target_message": message_row(row), "new_head_id": head}

        return self._write(fn, op="rewind_to_message")

    def restore_rewound(self, session_id: str, since_message_id: int) -> int:
        """Re-activate the session's inactive rows with ``id >= since_message_id``.

        Returns:
            Rows re-activated.
        """
        sid = clean_text(session_id)
        return self._write(lambda c: c.execute(
            "UPDATE messages SET active = 1 WHERE session_id = ? AND id >= ? AND active = 0",
            (sid, since_message_id)).rowcount, op="restore_rewound")

