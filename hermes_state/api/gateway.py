"""Gateway routing and handoff between front-ends: which chat peer a session belongs to, the
routing table, finding the session of an incoming message, and the handoff state machine
(UPSTREAM_API §2.9).

Handoff is a small state machine on the session row, ``handoff_state`` NULL → ``pending`` →
``running`` → ``completed`` | ``failed``, with ``handoff_platform`` and ``handoff_error``; each
transition is one conditional UPDATE, so two claimers never both win. (Not the prune hand-off of
SPEC §11: that is :mod:`hermes_state.processes.writer_gate`.)

Sessions carry their peer in ``session_key``, ``source`` (the platform), ``user_id``,
``chat_id``, ``chat_type``, ``thread_id``, ``display_name`` and ``origin_json``. The
``gateway_routing`` table maps ``(scope, session_key)`` to a routing entry (JSON text the gateway
owns).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any, Iterable, Mapping

from .filters import activity
from .sessions import RECOVERABLE_END_REASONS, session_row
from .text import clean_text, dump_json


def _text(value: Any, field: str = "value") -> Any:
    """A value for a TEXT column: str as is (cleaned), dict/list as JSON, other as given.

    Raises:
        UnstorableJSONError: a dict/list ``json.dumps`` cannot encode (``field`` named).
    """
    if isinstance(value, (dict, list)):
        return dump_json(value, field)
    return clean_text(value)


def _id(value: Any) -> str | None:
    return None if value is None else clean_text(str(value))


_RECOVERABLE = (f"(s.ended_at IS NULL OR s.end_reason IN "
                f"({', '.join(repr(r) for r in RECOVERABLE_END_REASONS)}))")
_HAS_MESSAGES = ("(COALESCE(s.message_count, 0) > 0 OR EXISTS (SELECT 1 FROM messages m "
                 "WHERE m.session_id = s.id))")


class GatewayMixin:
    """Gateway routing API; needs ``self._write(fn, op)`` and ``self._read(fn)``."""

    def record_gateway_session_peer(self, session_id: str, *, source: str,
                                    user_id: str | None = None, session_key: str | None = None,
                                    chat_id: str | None = None, chat_type: str | None = None,
                                    thread_id: str | None = None,
                                    display_name: str | None = None,
                                    origin_json: Any = None) -> None:
        """Record the chat peer of a session. No-op without ``session_id`` or ``session_key``.

        ``session_key``, ``source``, ``user_id``, ``chat_id``, ``chat_type`` and ``thread_id``
        are set as given (None clears); ``display_name`` and ``origin_json`` only when not None.
        """
        if not session_id or not session_key:
            return
        sets = ["session_key = ?", "source = ?", "user_id = ?", "chat_id = ?", "chat_type = ?",
                "thread_id = ?"]
        args = [_text(session_key), _text(source), _id(user_id), _id(chat_id), _text(chat_type),
                _id(thread_id)]
        for col, value in (("display_name", display_name), ("origin_json", origin_json)):
            if value is not None:
                sets.append(f"{col} = ?")
                args.append(_text(value, col))
        args.append(clean_text(session_id))
        self._write(lambda c: c.execute(f"UPDATE sessions SET {', '.join(sets)} WHERE id = ?",
                                        args), op="record_gateway_session_peer")

    def set_expiry_finalized(self, session_id: str, finalized: bool = True) -> None:
        """Mark a gateway session's expiry as handled (``expiry_finalized`` 1/0)."""
        self._write(lambda c: c.execute("UPDATE sessions SET expiry_finalized = ? WHERE id = ?",
                                        (1 if finalized else 0, clean_text(session_id))),
                    op="set_expiry_finalized")

    # ------------------------------------------------------------------ routing table
    def save_gateway_routing_entry(self, session_key: str, entry_json: Any, *,
                                   scope: str = "") -> None:
        """Upsert one routing entry (``updated_at`` = now); no-op when key or entry is empty."""
        if not session_key or not entry_json:
            return
        self._write(lambda c: c.execute(
            "INSERT INTO gateway_routing(scope, session_key, entry_json, updated_at) "
            "VALUES (?, ?, ?, ?) ON CONFLICT(scope, session_key) DO UPDATE SET "
            "entry_json = excluded.entry_json, updated_at = excluded.updated_at",
            (_text(scope or ""), _text(session_key), _text(entry_json, "entry_json"),
             time.time())),
            op="save_gateway_routing_entry")

    def replace_gateway_routing_entries(self, entries: Mapping[str, Any], *,
                                        scope: str = "") -> None:
        """Replace every entry of ``scope`` with ``entries`` (pairs with an empty side are
        skipped) in one transaction; other scopes are untouched."""
        now = time.time()
        rows = [(_text(scope or ""), _text(k), _text(v, "entry_json"), now)
                for k, v in dict(entries or {}).items() if k and v]

        def fn(c: sqlite3.Connection) -> None:
            c.execute("DELETE FROM gateway_routing WHERE scope = ?", (_text(scope or ""),))
            c.executemany("INSERT INTO gateway_routing(scope, session_key, entry_json, "
                          "updated_at) VALUES (?, ?, ?, ?)", rows)

        self._write(fn, op="replace_gateway_routing_entries")

    def load_gateway_routing_entries(self, *, scope: str = "") -> dict[str, str]:
        """``{session_key: entry_json}`` of one scope."""
        return self._read(lambda c: {r[0]: r[1] for r in c.execute(
            "SELECT session_key, entry_json FROM gateway_routing WHERE scope = ?",
            (_text(scope or ""),))})

    def delete_gateway_routing_entries(self, session_keys: Iterable[str], *,
                                       scope: str = "") -> None:
        """Delete the entries of ``session_keys`` in ``scope``."""
        rows = [(_text(scope or ""), _text(k)) for k in (session_keys or []) if k]
        if rows:
            self._write(lambda c: c.executemany(
                "DELETE FROM gateway_routing WHERE scope = ? AND session_key = ?", rows),
                op="delete_gateway_routing_entries")

    # ------------------------------------------------------------------ finding sessions
    def list_gateway_sessions(self, *, platform: str | None = None,
                              active_only: bool = True) -> list[dict]:
        """The newest session (by ``started_at``) of every ``session_key``, with ``last_active``,
        most recently active first. ``platform`` matches ``source`` case-insensitively;
        ``active_only`` then drops keys whose newest session has ended."""
        where, args = "s.session_key IS NOT NULL AND s.session_key != ''", []
        if platform:
            where += " AND LOWER(s.source) = LOWER(?)"
            args.append(clean_text(platform))

        def fn(c: sqlite3.Connection) -> list[dict]:
            rows = c.execute(
                f"SELECT * FROM (SELECT s.*, {activity('s')} AS last_active, ROW_NUMBER() OVER "
                f"(PARTITION BY s.session_key ORDER BY s.started_at DESC, s.rowid DESC) AS _rn "
                f"FROM sessions s WHERE {where}) WHERE _rn = 1"
                + (" AND ended_at IS NULL" if active_only else "")
                + " ORDER BY last_active DESC", args).fetchall()
            out = [session_row(r, c) for r in rows]
            for row in out:
                row.pop("_rn", None)
            return out

        return self._read(fn)

    def find_session_by_origin(self, *, platform: str, chat_id: Any, thread_id: Any = None,
                               user_id: Any = None) -> str | None:
        """The live gateway session of a chat (and thread), or None when it is ambiguous.

        Candidates: live rows with a ``session_key`` whose ``source`` equals ``platform``
        (case-insensitively), ``chat_id`` equals ``str(chat_id)`` and, when ``thread_id`` is
        given, ``COALESCE(thread_id, '')`` equals it; newest first. With ``user_id``: the newest
        candidate of exactly that user, else the only candidate, else None. Without: None when
        candidates belong to more than one distinct non-empty user, else the newest.
        """
        if not platform or chat_id is None or chat_id == "":
            return None
        where = ("s.ended_at IS NULL AND s.session_key IS NOT NULL AND s.session_key != '' "
                 "AND LOWER(s.source) = LOWER(?) AND s.chat_id = ?")
        args: list = [clean_text(platform), _id(chat_id)]
        if thread_id is not None:
            where += " AND COALESCE(s.thread_id, '') = ?"
            args.append(_id(thread_id))
        rows = self._read(lambda c: c.execute(
            f"SELECT s.id, s.user_id FROM sessions s WHERE {where} "
            "ORDER BY s.started_at DESC, s.rowid DESC", args).fetchall())
        if not rows:
            return None
        if user_id is not None:
            exact = [r[0] for r in rows if r[1] == _id(user_id)]
            if exact:
                return exact[0]
            return rows[0][0] if len(rows) == 1 else None
        users = {r[1] for r in rows if r[1]}
        return None if len(rows) > 1 and len(users) > 1 else rows[0][0]

    def find_latest_gateway_session_for_peer(self, *, source: str, user_id: Any = None,
                                             session_key: str | None = None, chat_id: Any = None,
                                             chat_type: str | None = None,
                                             thread_id: Any = None) -> dict | None:
        """The session a gateway should resume for a peer, or None.

        Qualifying rows are live (or closed with a recoverable reason: ``agent_close``,
        ``ws_orphan_reap``) and hold messages. First the newest one with this ``session_key``
        and ``source``; else, only when ``chat_id`` and ``chat_type`` are both given, the newest
        of that source whose ``user_id``, ``chat_id``, ``chat_type`` and ``thread_id`` are equal
        (NULL = ``''``). A ``session_reset`` session is never recovered. None without
        ``session_key``.
        """
        if not session_key:
            return None
        base = f"{_RECOVERABLE} AND {_HAS_MESSAGES} AND s.source = ?"
        order = " ORDER BY s.started_at DESC, s.rowid DESC LIMIT 1"

        def fn(c: sqlite3.Connection) -> dict | None:
            row = c.execute(f"SELECT s.* FROM sessions s WHERE {base} AND s.session_key = ?"
                            + order, (clean_text(source), clean_text(session_key))).fetchone()
            if row is None and chat_id not in (None, "") and chat_type:
                peer = " AND ".join(f"COALESCE(s.{col}, '') = ?" for col in
                                    ("user_id", "chat_id", "chat_type", "thread_id"))
                row = c.execute(
                    f"SELECT s.* FROM sessions s WHERE {base} AND {peer}" + order,
                    (clean_text(source), _id(user_id) or "", _id(chat_id) or "",
                     clean_text(chat_type) or "", _id(thread_id) or "")).fetchone()
            return session_row(row, c)

        return self._read(fn)



MAX_ERROR_CHARS = 500


class HandoffMixin:
    """Handoff API; needs ``self._write(fn, op)`` and ``self._read(fn)``."""

    def request_handoff(self, session_id: str, platform: str) -> bool:
        """Ask for a handoff to ``platform``: ``pending``, error cleared. Only from no handoff,
        ``completed`` or ``failed``.

        Returns:
            True when the request was recorded.
        """
        return self._write(lambda c: c.execute(
            "UPDATE sessions SET handoff_state = 'pending', handoff_platform = ?, "
            "handoff_error = NULL WHERE id = ? AND (handoff_state IS NULL OR "
            "handoff_state IN ('completed', 'failed'))",
            (clean_text(platform), clean_text(session_id))).rowcount > 0, op="request_handoff")

    def get_handoff_state(self, session_id: str) -> dict | None:
        """``{"state", "platform", "error"}`` (all None without a handoff); None for a missing
        session."""
        row = self._read(lambda c: c.execute(
            "SELECT handoff_state, handoff_platform, handoff_error FROM sessions WHERE id = ?",
            (clean_text(session_id),)).fetchone())
        if row is None:
            return None
        return {"state": row[0], "platform": row[1], "error": row[2]}

    def list_pending_handoffs(self) -> list[dict]:
        """Session rows with a ``pending`` handoff, oldest ``started_at`` first (``[]`` on an
        SQLite error)."""
        try:
            return self._read(lambda c: [session_row(r, c) for r in c.execute(
                "SELECT * FROM sessions WHERE handoff_state = 'pending' "
                "ORDER BY started_at, rowid")])
        except sqlite3.Error:
            return []

    def claim_handoff(self, session_id: str) -> bool:
        """``pending`` → ``running``; True for the one caller that made the move."""
        return self._write(lambda c: c.execute(
            "UPDATE sessions SET handoff_state = 'running' WHERE id = ? AND "
            "handoff_state = 'pending'", (clean_text(session_id),)).rowcount > 0,
            op="claim_handoff")

    def complete_handoff(self, session_id: str) -> None:
        """Mark the handoff ``completed`` and clear its error."""
        self._write(lambda c: c.execute(
            "UPDATE sessions SET handoff_state = 'completed', handoff_error = NULL WHERE id = ?",
            (clean_text(session_id),)), op="complete_handoff")

    def fail_handoff(self, session_id: str, error: str) -> None:
        """Mark the handoff ``failed`` with the first 500 characters of ``error``."""
        text = clean_text(str(error))[:MAX_ERROR_CHARS] if error is not None else None
        self._write(lambda c: c.execute(
            "UPDATE sessions SET handoff_state = 'failed', handoff_error = ? WHERE id = ?",
            (text, clean_text(session_id))), op="fail_handoff")
