"""Session rows: create (first writer wins), get, end (first reason wins), reopen (SPEC §5)."""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from .text import clean_text, decode_json, encode_json

#: Keyword arguments of ``create_session(**routing)`` that map to sessions columns.
ROUTING_COLUMNS = (
    "session_key", "chat_id", "chat_type", "thread_id", "display_name", "origin_json",
    "cwd", "git_branch", "git_repo_root", "profile_name", "billing_provider", "billing_base_url",
    "billing_mode",
)

JSON_SESSION_COLUMNS = ("model_config",)


def session_row(row: sqlite3.Row | None) -> dict | None:
    """A sessions row as a dict with ``model_config`` decoded."""
    if row is None:
        return None
    out = dict(row)
    for col in JSON_SESSION_COLUMNS:
        if col in out:
            out[col] = decode_json(out[col])
    return out


class SessionsMixin:
    """Session-level API; needs ``self._write(fn, op)`` and ``self._read(fn)``."""

    def create_session(self, session_id: str, source: str, model: str | None = None,
                       model_config: Any = None, system_prompt: str | None = None,
                       user_id: str | None = None, parent_session_id: str | None = None,
                       **routing: Any) -> str:
        """Insert a session if absent; an existing row keeps its values (SPEC §5).

        Args:
            session_id: the id (text).
            source: ``cli``, ``telegram``, ...
            model_config: dict or JSON text.
            parent_session_id: an existing session (foreign key) or None.
            **routing: any of :data:`ROUTING_COLUMNS`.
        Returns:
            ``session_id``.
        Raises:
            TypeError: an unknown keyword.
            sqlite3.IntegrityError: ``parent_session_id`` names no session.
        """
        unknown = set(routing) - set(ROUTING_COLUMNS)
        if unknown:
            raise TypeError(f"create_session() got unknown keyword(s): {', '.join(sorted(unknown))}")
        cols = ["id", "source", "model", "model_config", "system_prompt", "user_id",
                "parent_session_id", "started_at"]
        vals = [session_id, source, model, encode_json(model_config), system_prompt, user_id,
                parent_session_id, time.time()]
        for key in ROUTING_COLUMNS:
            if key in routing:
                cols.append(key)
                vals.append(routing[key])
        vals = [clean_text(v) for v in vals]
        sql = (f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
               "ON CONFLICT(id) DO NOTHING")
        self._write(lambda c: c.execute(sql, vals), op="create_session")
        return vals[0]

    def get_session(self, session_id: str) -> dict | None:
        """The session row as a dict, or None."""
        sid = clean_text(session_id)
        return self._read(lambda c: session_row(
            c.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone()))

    def end_session(self, session_id: str, end_reason: str) -> bool:
        """Set ``ended_at``/``end_reason`` unless already ended: the FIRST reason wins (SPEC §5).

        Returns:
            True when this call ended the session; False if unknown or already ended.
        """
        def fn(c: sqlite3.Connection) -> bool:
            cur = c.execute(
                "UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND ended_at IS NULL",
                (time.time(), clean_text(end_reason), clean_text(session_id)))
            return cur.rowcount > 0
        return self._write(fn, op="end_session")

    def reopen_session(self, session_id: str) -> bool:
        """Clear ``ended_at`` and ``end_reason``; returns False for an unknown id (SPEC §5)."""
        def fn(c: sqlite3.Connection) -> bool:
            cur = c.execute("UPDATE sessions SET ended_at = NULL, end_reason = NULL WHERE id = ?",
                            (clean_text(session_id),))
            return cur.rowcount > 0
        return self._write(fn, op="reopen_session")
