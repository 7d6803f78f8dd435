"""Messages: append with counters in one transaction, read back, page, small lookups (SPEC §5;
UPSTREAM_API §2.3, D6, D11).

Rows come back as plain dicts of the raw columns: only ``content`` (D6: a list/dict stored with
the ``"\\x00json:"`` prefix returns as the list/dict) and ``tool_calls`` (JSON text → list;
invalid JSON → ``[]``) are decoded; ``reasoning_details``, ``codex_*`` and ``display_metadata``
stay JSON text. Every INSERT writes ``active = 1`` explicitly (D11), so legacy stores whose
``active`` column has no default still get visible rows.

Windows of a transcript around one message (UPSTREAM_API §2.3 ``get_messages_around``,
``get_anchored_view``): what a search hit opens onto. Inactive rows are included (a hit may be a
compacted row); rows are returned as :meth:`get_messages` returns them.
"""

from __future__ import annotations

import functools
import itertools
import math
import operator
import sqlite3
import time
from typing import Any, Callable, Iterable

from .text import (
    CleaningConnection,
    clean_text,
    content_text,
    decode_content,
    decode_tool_calls,
    encode_content,
    encode_json_field,
    int_arg,
)

#: Optional keyword columns of append_message beyond upstream's parameters (schema 23 only).
EXTRA_MESSAGE_COLUMNS = ("display_kind", "display_metadata")

#: ``list_recent_user_messages``: previews longer than this are cut to 77 chars + "...".
RECENT_PREVIEW_CHARS = 80

_ASSISTANT_ONLY = ("reasoning", "reasoning_content", "reasoning_details",
                   "codex_reasoning_items", "codex_message_items")
#: Visible rows (D11): ``active`` NULL counts as 1 (a legacy row not healed yet).
ACTIVE_SQL = "COALESCE(active, 1) = 1"


def message_row(row: sqlite3.Row) -> dict:
    """A messages row as a dict: ``content`` decoded (D6), ``tool_calls`` JSON-decoded."""
    out = dict(row)
    if "content" in out:
        out["content"] = decode_content(out["content"])
    if "tool_calls" in out:
        out["tool_calls"] = decode_tool_calls(out["tool_calls"])
    return out


def coerce_timestamp(value: Any) -> float | None:
    """A message timestamp as float epoch seconds: a number, or anything with ``.timestamp()``
    (datetime). None, or a value that is neither (or not finite), gives None (= now)."""
    if value is None or isinstance(value, bool):
        return None
    stamp = getattr(value, "timestamp", None)
    try:
        out = float(stamp()) if callable(stamp) else float(value)
    except (TypeError, ValueError, OverflowError, OSError):
        return None
    return out if math.isfinite(out) else None


def count_tool_calls(tool_calls: Any) -> int:
    """What a message adds to ``tool_call_count``: ``len`` of a list, 1 for any other truthy
    value, 0 for none (whatever the role, UPSTREAM_API §2.3)."""
    if not tool_calls:
        return 0
    return len(tool_calls) if isinstance(tool_calls, (list, tuple)) else 1


def message_values(session_id: str, role: str, content: Any = None, tool_name: Any = None,
                   tool_calls: Any = None, tool_call_id: Any = None, token_count: Any = None,
                   finish_reason: Any = None, reasoning: Any = None,
                   reasoning_content: Any = None, reasoning_details: Any = None,
                   codex_reasoning_items: Any = None, codex_message_items: Any = None,
                   platform_message_id: Any = None, observed: Any = False,
                   effect_disposition: Any = None, timestamp: float | None = None,
                   api_content: Any = None, **extra: Any) -> dict:
    """The column → value map of one message row, encoded as upstream stores it.

    ``timestamp`` must already be a float (see :func:`coerce_timestamp`). ``active`` is 1.
    Raises:
        TypeError: an unknown keyword.
    """
    unknown = set(extra) - set(EXTRA_MESSAGE_COLUMNS)
    if unknown:
        raise TypeError(f"append_message() got unknown keyword(s): {', '.join(sorted(unknown))}")
    ct = clean_text  # (None passes through both helpers: not called for it, issue 24 item 4)
    vals = {
        "session_id": ct(session_id), "role": ct(role),
        "content": None if content is None else encode_content(content),
        "tool_name": None if tool_name is None else ct(tool_name),
        "tool_calls": encode_json_field(tool_calls, "tool_calls") if tool_calls else None,
        "tool_call_id": None if tool_call_id is None else ct(tool_call_id),
        "token_count": None if token_count is None else ct(token_count),
        "finish_reason": None if finish_reason is None else ct(finish_reason),
        "reasoning": None if reasoning is None else ct(reasoning),
        "reasoning_content": None if reasoning_content is None else ct(reasoning_content),
        "reasoning_details": (encode_json_field(reasoning_details, "reasoning_details")
                              if reasoning_details else None),
        "codex_reasoning_items": (
            encode_json_field(codex_reasoning_items, "codex_reasoning_items")
            if codex_reasoning_items else None),
        "codex_message_items": (encode_json_field(codex_message_items, "codex_message_items")
                                if codex_message_items else None),
        "platform_message_id": None if platform_message_id is None else ct(platform_message_id),
        "observed": 1 if observed else 0,
        "effect_disposition": None if effect_disposition is None else ct(effect_disposition),
        "timestamp": time.time() if timestamp is None else timestamp,
        "api_content": ct(api_content) if isinstance(api_content, str) else None,
        "active": 1,
    }
    if "display_kind" in extra:
        vals["display_kind"] = clean_text(extra["display_kind"])
    if "display_metadata" in extra:
        meta = extra["display_metadata"]
        vals["display_metadata"] = clean_text(meta) if isinstance(meta, str) else (
            encode_json_field(meta, "display_metadata"))
    return vals


def insert_sql(cols: list[str] | tuple[str, ...]) -> str:
    """``INSERT INTO messages (cols) VALUES (?, ...)``."""
    return _insert_sql(tuple(cols))


@functools.lru_cache(maxsize=16)
def _insert_sql(cols: tuple[str, ...]) -> str:
    return f"INSERT INTO messages ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))})"


_NONE = itertools.repeat(None)
_NOT_NONE = functools.partial(operator.is_not, None)


@functools.lru_cache(maxsize=256)
def _insert_sql_nulls(cols: tuple[str, ...], nulls: tuple[bool, ...]) -> str:
    """The INSERT of ``cols`` with a ``NULL`` literal where ``nulls`` says the value is None:
    the same row as binding None there, with fewer parameters to bind (issue 24 item 4)."""
    marks = ", ".join("NULL" if n else "?" for n in nulls)
    return f"INSERT INTO messages ({', '.join(cols)}) VALUES ({marks})"


def build_append(session_id: str, role: str, content: Any = None, tool_name: Any = None,
                 tool_calls: Any = None, tool_call_id: Any = None, token_count: Any = None,
                 finish_reason: Any = None, reasoning: Any = None, reasoning_content: Any = None,
                 reasoning_details: Any = None, codex_reasoning_items: Any = None,
                 codex_message_items: Any = None, platform_message_id: Any = None,
                 observed: Any = False, effect_disposition: Any = None, timestamp: Any = None,
                 api_content: Any = None, **extra: Any) -> Callable[[sqlite3.Connection], int]:
    """Validate one message and return ``fn(conn) -> message id`` that inserts it and bumps the
    session's counters; the caller runs ``fn`` inside its write transaction (``append_message``
    alone, or with other statements, as the exactly-once spool replay does, SPEC §10.1).

    Raises:
        TypeError: an unknown keyword (before anything is written).
        ValueError: a ``timestamp`` that is neither a number nor a datetime (``append_message``
            uses "now" for those instead; the spool replay reports them).
    """
    ts = coerce_timestamp(timestamp)
    if timestamp is not None and ts is None:
        raise ValueError(f"timestamp must be epoch seconds or a datetime, not {timestamp!r}")
    if (content is not None and not extra and tool_name is None and tool_calls is None
            and tool_call_id is None and token_count is None and finish_reason is None
            and reasoning is None and reasoning_content is None and reasoning_details is None
            and codex_reasoning_items is None and codex_message_items is None
            and platform_message_id is None and effect_disposition is None
            and api_content is None):
        # A plain message (the gateway's common case): the row message_values would give,
        # without building it (issue 24 item 4; tests/test_hot_path.py compares the two).
        args = (clean_text(session_id), clean_text(role), encode_content(content),
                1 if observed else 0, time.time() if ts is None else ts, 1)
        return _append_fn(_PLAIN_SQL, args, (0, args[0]))
    vals = message_values(
        session_id, role, content, tool_name, tool_calls, tool_call_id, token_count,
        finish_reason, reasoning, reasoning_content, reasoning_details, codex_reasoning_items,
        codex_message_items, platform_message_id, observed, effect_disposition, ts,
        api_content, **extra)
    n_calls = count_tool_calls(tool_calls)
    values = vals.values()
    sql = _insert_sql_nulls(tuple(vals), tuple(map(operator.is_, values, _NONE)))
    # message_values cleaned every text value: bound as they are (issue 24 item 4), as a
    # plain tuple (SQLite's module binds an exact tuple fastest), the Nones as NULL literals
    return _append_fn(sql, tuple(filter(_NOT_NONE, values)), (n_calls, vals["session_id"]))


_COUNTERS_SQL = ("UPDATE sessions SET message_count = COALESCE(message_count, 0) + 1, "
                 "tool_call_count = COALESCE(tool_call_count, 0) + ? WHERE id = ?")


def _append_fn(sql: str, args: tuple, counters: tuple) -> Callable[[sqlite3.Connection], int]:
    """``fn(conn) -> message id``: the INSERT of cleaned ``args`` and the counters' UPDATE."""

    def fn(c: sqlite3.Connection) -> int:
        execute = c.execute_cleaned if type(c) is CleaningConnection else c.execute
        cur = execute(sql, args)
        execute(_COUNTERS_SQL, counters)
        return cur.lastrowid

    return fn


def _plain_insert() -> str:
    """The INSERT of a plain message (session, role, content, observed, timestamp, active;
    every other column NULL), derived from :func:`message_values` so the two cannot drift."""
    vals = message_values("s", "user", "x", timestamp=0.0)
    given = tuple(k for k, v in vals.items() if v is not None)
    assert given == ("session_id", "role", "content", "observed", "timestamp", "active"), given
    return _insert_sql_nulls(tuple(vals), tuple(v is None for v in vals.values()))


_PLAIN_SQL = _plain_insert()


def recent_preview(content: Any) -> str:
    """``list_recent_user_messages`` preview: text, whitespace collapsed, over 80 chars cut to
    77 + ``"..."``."""
    text = " ".join(content_text(content).split())
    if len(text) > RECENT_PREVIEW_CHARS:
        return text[:RECENT_PREVIEW_CHARS - 3] + "..."
    return text


class MessagesMixin:
    """Message-level API; needs ``self._write(fn, op)`` and ``self._read(fn)``."""

    def append_message(self, session_id: str, role: str, content: Any = None,
                       tool_name: str | None = None, tool_calls: Any = None,
                       tool_call_id: str | None = None, token_count: int | None = None,
                       finish_reason: str | None = None, reasoning: str | None = None,
                       reasoning_content: str | None = None, reasoning_details: Any = None,
                       codex_reasoning_items: Any = None, codex_message_items: Any = None,
                       platform_message_id: str | None = None, observed: bool = False,
                       effect_disposition: str | None = None, timestamp: Any = None,
                       api_content: str | None = None, **extra: Any) -> int:
        """Insert one message and bump the session's counters in the same transaction (SPEC §5).

        ``message_count += 1``; ``tool_call_count += len(tool_calls)`` (1 for a non-list, 0
        without). ``tool_calls``, ``reasoning_details`` and ``codex_*`` are stored as JSON text
        when truthy, else NULL (``[]`` → NULL). ``content``: a list/dict is stored as prefixed
        JSON and read back as given (D6). ``observed`` is stored 1/0, ``active`` is 1 (D11),
        ``api_content`` only when it is a str.

        Args:
            session_id: an existing session.
            role: ``user``, ``assistant``, ``tool``, ``system``.
            timestamp: epoch seconds, or a datetime; None or an invalid value = now.
            **extra: ``display_kind``, ``display_metadata``.
        Returns:
            The new message id.
        Raises:
            sqlite3.IntegrityError: unknown session (foreign key).
            TypeError: an unknown keyword.
            DeletedWalGenerationError / StateDbReplacedError / WriteContentionError: see
            :meth:`StoreConnection.execute_write`.
        """
        fn = build_append(session_id, role, content, tool_name, tool_calls, tool_call_id,
                          token_count, finish_reason, reasoning, reasoning_content,
                          reasoning_details, codex_reasoning_items, codex_message_items,
                          platform_message_id, observed, effect_disposition,
                          coerce_timestamp(timestamp), api_content, **extra)
        return self._write(fn, op="append_message")

    def get_messages(self, session_id: str, include_inactive: bool = False,
                     limit: int | None = None, offset: int = 0) -> list[dict]:
        """A session's messages in insertion (id) order (UPSTREAM_API §2.3).

        Args:
            include_inactive: also rows rewound or archived by compaction (``active = 0``).
            limit: page size (None = all); offset: rows to skip (also without a limit).
        Returns:
            Row dicts: ``content`` and ``tool_calls`` decoded, other columns raw.
        """
        sid = clean_text(session_id)
        where = "" if include_inactive else f" AND {ACTIVE_SQL}"
        lim = -1 if limit is None else max(int_arg(limit, "limit"), 0)
        off = max(int_arg(offset or 0, "offset"), 0)
        return self._read(lambda c: [message_row(r) for r in c.execute(
            f"SELECT * FROM messages WHERE session_id = ?{where} ORDER BY id LIMIT ? OFFSET ?",
            (sid, lim, off))])

    def has_platform_message_id(self, session_id: str, platform_message_id: str) -> bool:
        """True when the session has a message with this ``platform_message_id``."""
        row = self._read(lambda c: c.execute(
            "SELECT 1 FROM messages WHERE session_id = ? AND platform_message_id = ? LIMIT 1",
            (clean_text(session_id), clean_text(platform_message_id))).fetchone())
        return row is not None

    def message_count(self, session_id: str | None = None) -> int:
        """Message rows (inactive included) of one session, or of the store when None/empty."""
        if not session_id:
            return self._read(lambda c: c.execute("SELECT COUNT(*) FROM messages").fetchone()[0])
        return self._read(lambda c: c.execute(
            "SELECT COUNT(*) FROM messages WHERE session_id = ?",
            (clean_text(session_id),)).fetchone()[0])

    def has_archived_messages(self, session_id: str) -> bool:
        """True when the session has any ``active = 0`` row (compacted or rewound)."""
        row = self._read(lambda c: c.execute(
            "SELECT 1 FROM messages WHERE session_id = ? AND active = 0 LIMIT 1",
            (clean_text(session_id),)).fetchone())
        return row is not None

    def list_recent_user_messages(self, session_id: str, limit: int = 20,
                                  include_inactive: bool = False) -> list[dict]:
        """The newest user messages first: ``[{"id", "timestamp", "preview"}]``.

        ``preview``: the text (multimodal → its text parts, or ``"[multimodal content]"``) with
        whitespace collapsed, cut to 77 characters + ``"..."`` when over 80.
        """
        where = "" if include_inactive else f" AND {ACTIVE_SQL}"
        rows = self._read(lambda c: c.execute(
            f"SELECT id, timestamp, content FROM messages WHERE session_id = ? AND role = 'user'"
            f"{where} ORDER BY id DESC LIMIT ?", (clean_text(session_id), int_arg(limit, "limit"))).fetchall())
        return [{"id": r["id"], "timestamp": r["timestamp"],
                 "preview": recent_preview(decode_content(r["content"]))} for r in rows]

    def set_latest_user_api_content(self, session_id: str, content: Any, api_content: Any) -> int:
        """Set ``api_content`` on the newest active user row if its content equals ``content``.

        Returns:
            1 when the row was updated, else 0 (no user row, or another content is newest).
        """
        sid = clean_text(session_id)
        want = encode_content(content)
        api = clean_text(api_content)

        def fn(c: sqlite3.Connection) -> int:
            row = c.execute(f"SELECT id, content FROM messages WHERE session_id = ? AND "
                            f"role = 'user' AND {ACTIVE_SQL} ORDER BY id DESC LIMIT 1",
                            (sid,)).fetchone()
            if row is None or row["content"] != want:
                return 0
            c.execute("UPDATE messages SET api_content = ? WHERE id = ?", (api, row["id"]))
            return 1

        return self._write(fn, op="set_latest_user_api_content")



def _window(c: sqlite3.Connection, sid: str, anchor: int, window: int) -> dict | None:
    row = c.execute("SELECT * FROM messages WHERE id = ? AND session_id = ?",
                    (anchor, sid)).fetchone()
    if row is None:
        return None
    n = max(int_arg(window or 0, "window"), 0)
    before = c.execute("SELECT * FROM messages WHERE session_id = ? AND id < ? "
                       "ORDER BY id DESC LIMIT ?", (sid, anchor, n)).fetchall()[::-1]
    after = c.execute("SELECT * FROM messages WHERE session_id = ? AND id > ? "
                      "ORDER BY id LIMIT ?", (sid, anchor, n)).fetchall()
    return {"before": [message_row(r) for r in before], "anchor": message_row(row),
            "after": [message_row(r) for r in after]}


def _view(before: list, anchor: dict, after: list) -> dict:
    return {"window": before + [anchor] + after, "messages_before": len(before),
            "messages_after": len(after)}


class AnchorsMixin:
    """Windowed reads; needs ``self._read(fn)``."""

    def get_messages_around(self, session_id: str, around_message_id: int,
                            window: int = 5) -> dict:
        """Up to ``window`` rows before the anchor, the anchor, up to ``window`` after, by id.

        Returns:
            ``{"window": [rows], "messages_before": n, "messages_after": n}`` (the counts are
            the rows returned on each side); empty with zero counts when the anchor is not a
            message of that session. A negative window counts as 0.
        """
        sid = clean_text(session_id)

        def fn(c: sqlite3.Connection) -> dict:
            w = _window(c, sid, around_message_id, window)
            if w is None:
                return {"window": [], "messages_before": 0, "messages_after": 0}
            return _view(w["before"], w["anchor"], w["after"])

        return self._read(fn)

    def get_anchored_view(self, session_id: str, around_message_id: int, window: int = 5,
                          bookend: int = 3,
                          keep_roles: Iterable[str] | None = ("user", "assistant")) -> dict:
        """:meth:`get_messages_around` filtered to ``keep_roles`` (the anchor always stays;
        None keeps every role), plus ``bookend_start`` / ``bookend_end``: the first / last
        ``bookend`` rows before / after the window with a kept role and non-empty content,
        ascending id.

        Returns:
            ``{"window", "messages_before", "messages_after", "bookend_start",
            "bookend_end"}``; all empty when the anchor is not a message of that session.
        """
        sid = clean_text(session_id)
        roles = None if keep_roles is None else list(keep_roles)
        n_book = max(int_arg(bookend or 0, "bookend"), 0)

        def kept(r: dict) -> bool:
            return roles is None or r["role"] in roles

        def fn(c: sqlite3.Connection) -> dict:
            w = _window(c, sid, around_message_id, window)
            if w is None:
                return {"window": [], "messages_before": 0, "messages_after": 0,
                        "bookend_start": [], "bookend_end": []}
            first = (w["before"] or [w["anchor"]])[0]["id"]
            last = (w["after"] or [w["anchor"]])[-1]["id"]
            role_sql, args = "", []
            if roles is not None:
                role_sql = f" AND role IN ({','.join('?' * len(roles))})"
                args = roles
            nonempty = " AND content IS NOT NULL AND content != ''"
            start = c.execute(f"SELECT * FROM messages WHERE session_id = ? AND id < ?"
                              f"{role_sql}{nonempty} ORDER BY id LIMIT ?",
                              (sid, first, *args, n_book)).fetchall()
            end = c.execute(f"SELECT * FROM messages WHERE session_id = ? AND id > ?"
                            f"{role_sql}{nonempty} ORDER BY id DESC LIMIT ?",
                            (sid, last, *args, n_book)).fetchall()[::-1]
            view = _view([r for r in w["before"] if kept(r)], w["anchor"],
                         [r for r in w["after"] if kept(r)])
            view["bookend_start"] = [message_row(r) for r in start]
            view["bookend_end"] = [message_row(r) for r in end]
            return view

        return self._read(fn)
