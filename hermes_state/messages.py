"""Messages: append with counters in one transaction, read back, OpenAI conversation (SPEC §5)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Callable

from .text import clean_text, decode_json, encode_json

JSON_MESSAGE_COLUMNS = ("tool_calls", "reasoning_details", "codex_reasoning_items",
                        "codex_message_items", "display_metadata")

#: Optional keyword columns of append_message beyond the named parameters ("..." in SPEC §5).
EXTRA_MESSAGE_COLUMNS = ("effect_disposition", "platform_message_id", "observed", "active",
                         "compacted", "display_kind", "display_metadata")

_ASSISTANT_KEYS = ("finish_reason", "reasoning", "reasoning_content", "reasoning_details",
                   "codex_reasoning_items", "codex_message_items")


def message_row(row: sqlite3.Row) -> dict:
    """A messages row as a dict with its JSON fields decoded."""
    out = dict(row)
    for col in JSON_MESSAGE_COLUMNS:
        if col in out:
            out[col] = decode_json(out[col])
    return out


def build_append(session_id: str, role: str, content: str | None = None,
                 tool_name: str | None = None, tool_calls: Any = None,
                 tool_call_id: str | None = None, token_count: int | None = None,
                 finish_reason: str | None = None, reasoning: str | None = None,
                 reasoning_content: str | None = None, reasoning_details: Any = None,
                 codex_reasoning_items: Any = None, codex_message_items: Any = None,
                 timestamp: float | None = None, api_content: str | None = None,
                 **extra: Any) -> Callable[[sqlite3.Connection], int]:
    """Validate one message and return ``fn(conn) -> message id`` that inserts it and bumps the
    session's counters; the caller runs ``fn`` inside its write transaction (``append_message``
    alone, or with other statements, as the exactly-once spool replay does, SPEC §10.1).

    Raises:
        TypeError: an unknown keyword (before anything is written).
    """
    session_id = clean_text(session_id)
    unknown = set(extra) - set(EXTRA_MESSAGE_COLUMNS)
    if unknown:
        raise TypeError(f"append_message() got unknown keyword(s): {', '.join(sorted(unknown))}")
    calls_json = encode_json(tool_calls, empty_list_is_null=True)
    n_calls = 0
    if role != "tool" and calls_json is not None:
        decoded = tool_calls if isinstance(tool_calls, (list, tuple)) else decode_json(calls_json)
        n_calls = len(decoded) if isinstance(decoded, (list, tuple)) else 1
    cols = ["session_id", "role", "content", "tool_name", "tool_calls", "tool_call_id",
            "token_count", "finish_reason", "reasoning", "reasoning_content",
            "reasoning_details", "codex_reasoning_items", "codex_message_items", "timestamp",
            "api_content"]
    vals = [session_id, role, clean_text(content), clean_text(tool_name), calls_json,
            clean_text(tool_call_id), token_count, clean_text(finish_reason),
            clean_text(reasoning), clean_text(reasoning_content),
            encode_json(reasoning_details), encode_json(codex_reasoning_items),
            encode_json(codex_message_items),
            time.time() if timestamp is None else float(timestamp), clean_text(api_content)]
    for key in EXTRA_MESSAGE_COLUMNS:
        if key in extra:
            cols.append(key)
            vals.append(encode_json(extra[key]) if key in JSON_MESSAGE_COLUMNS
                        else clean_text(extra[key]))
    insert = f"INSERT INTO messages ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"

    def fn(c: sqlite3.Connection) -> int:
        cur = c.execute(insert, vals)
        c.execute("UPDATE sessions SET message_count = message_count + 1, "
                  "tool_call_count = tool_call_count + ? WHERE id = ?", (n_calls, session_id))
        return cur.lastrowid

    return fn


class MessagesMixin:
    """Message-level API; needs ``self._write(fn, op)`` and ``self._read(fn)``."""

    def append_message(self, session_id: str, role: str, content: str | None = None,
                       tool_name: str | None = None, tool_calls: Any = None,
                       tool_call_id: str | None = None, token_count: int | None = None,
                       finish_reason: str | None = None, reasoning: str | None = None,
                       reasoning_content: str | None = None, reasoning_details: Any = None,
                       codex_reasoning_items: Any = None, codex_message_items: Any = None,
                       timestamp: float | None = None, api_content: str | None = None,
                       **extra: Any) -> int:
        """Insert one message and bump the session's counters in the same transaction (SPEC §5).

        ``message_count += 1``; ``tool_call_count += len(tool_calls)`` except for ``role='tool'``
        rows. JSON fields accept Python values or JSON text; an empty ``tool_calls`` list is NULL.

        Args:
            session_id: an existing session.
            role: ``user``, ``assistant``, ``tool``, ``system``.
            timestamp: epoch seconds (float); default now.
            **extra: any of :data:`EXTRA_MESSAGE_COLUMNS` (e.g. ``platform_message_id``).
        Returns:
            The new message id.
        Raises:
            sqlite3.IntegrityError: unknown session (foreign key).
            TypeError: an unknown keyword.
            DeletedWalGenerationError / StateDbReplacedError / WriteContentionError: see
            :meth:`StoreConnection.execute_write`.
        """
        fn = build_append(session_id, role, content=content, tool_name=tool_name,
                          tool_calls=tool_calls, tool_call_id=tool_call_id,
                          token_count=token_count, finish_reason=finish_reason,
                          reasoning=reasoning, reasoning_content=reasoning_content,
                          reasoning_details=reasoning_details,
                          codex_reasoning_items=codex_reasoning_items,
                          codex_message_items=codex_message_items, timestamp=timestamp,
                          api_content=api_content, **extra)
        return self._write(fn, op="append_message")

    def get_messages(self, session_id: str) -> list[dict]:
        """Every message of a session in insertion (id) order, JSON fields decoded."""
        return self._read(lambda c: [message_row(r) for r in c.execute(
            "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (clean_text(session_id),))])

    def get_messages_as_conversation(self, session_id: str,
                                     include_ancestors: bool = False) -> list[dict]:
        """The session in OpenAI chat format (SPEC §5).

        Each item is ``{"role", "content"}`` plus ``tool_calls``, ``tool_call_id``, ``tool_name``
        when set; assistant rows also carry ``finish_reason``, ``reasoning``,
        ``reasoning_content`` (kept when ""), ``reasoning_details`` and ``codex_*`` when set.
        ``include_ancestors`` prepends the ``parent_session_id`` chain, root first.
        """
        chain = self.get_lineage(session_id) if include_ancestors else [session_id]
        out: list[dict] = []
        for sid in chain:
            for m in self.get_messages(sid):
                item: dict[str, Any] = {"role": m["role"], "content": m["content"]}
                for key in ("tool_calls", "tool_call_id", "tool_name"):
                    if m.get(key) is not None:
                        item[key] = m[key]
                if m["role"] == "assistant":
                    for key in _ASSISTANT_KEYS:
                        if m.get(key) is not None:
                            item[key] = m[key]
                out.append(item)
        return out
