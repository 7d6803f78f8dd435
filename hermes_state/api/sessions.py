"""Session rows: create or enrich, get, end (first reason wins), reopen, small updates (SPEC §5;
UPSTREAM_API §2.2, D5, D7).

Rows come back as plain dicts of the raw columns (D7): ``model_config`` and ``origin_json`` stay
JSON text (or None), flags stay ints.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from ..errors import HermesStateError
from . import system_prompts
from .text import clean_text, encode_json_field

#: Keyword arguments of ``create_session(**routing)`` that map to sessions columns. Upstream
#: accepts ``session_key``, ``chat_id``, ``chat_type``, ``thread_id``, ``cwd``, ``profile_name``;
#: the rest is this store's superset.
ROUTING_COLUMNS = (
    "session_key", "chat_id", "chat_type", "thread_id", "display_name", "origin_json",
    "cwd", "git_branch", "git_repo_root", "profile_name", "billing_provider", "billing_base_url",
    "billing_mode",
)

#: Columns an existing row takes from a later ``create_session`` only while they are NULL (D5).
_FILL_COLUMNS = ("model", "model_config", "system_prompt", "parent_session_id") + ROUTING_COLUMNS

#: ``promote_to_session_reset`` may end a row ended with one of these (a recoverable close).
RECOVERABLE_END_REASONS = ("agent_close", "ws_orphan_reap")
MAX_ROOT_HOPS = 100


def session_row(row: sqlite3.Row | None, conn: sqlite3.Connection | None = None) -> dict | None:
    """A sessions row as a plain dict of its raw columns (D7), or None.

    With ``conn``, a store that keeps prompts in ``system_prompts`` (schema 25+) shows the
    hashed prompt as ``system_prompt`` (:mod:`hermes_state.api.system_prompts`, D4).
    """
    if row is None:
        return None
    out = dict(row)
    if conn is not None and out.get(system_prompts.HASH_COLUMN):
        system_prompts.resolve(conn, out)
    return out


def upsert_session_sql(routing: dict[str, Any]) -> tuple[str, list]:
    """The ``create_session`` upsert (D5) for ``fill`` values, as ``(sql, args)``.

    Args:
        routing: ``{"id", "source", "user_id", "started_at", <fill columns>...}``.
    """
    cols = ["id", "source", "user_id", "started_at"] + [k for k in _FILL_COLUMNS if k in routing]
    vals = [clean_text(routing.get(k)) for k in cols]
    fills = [k for k in cols if k in _FILL_COLUMNS]
    update = ", ".join(f"{k} = COALESCE(sessions.{k}, excluded.{k})" for k in fills)
    sql = (f"INSERT INTO sessions ({', '.join(cols)}) VALUES ({', '.join('?' * len(cols))}) "
           + (f"ON CONFLICT(id) DO UPDATE SET {update}" if update else "ON CONFLICT(id) DO NOTHING"))
    return sql, vals


def upsert_session(c: sqlite3.Connection, session_id: str, source: str, **fields: Any) -> None:
    """Run the D5 upsert inside the caller's write transaction."""
    sql, vals = upsert_session_sql({"id": session_id, "source": source,
                                    "started_at": time.time(), **fields})
    c.execute(sql, vals)
    if fields.get("system_prompt") is not None:
        system_prompts.move_column_prompt(c, clean_text(session_id))  # schema 25+ stores (D4)


class SessionsMixin:
    """Session-level API; needs ``self._write(fn, op)`` and ``self._read(fn)``."""

    def create_session(self, session_id: str, source: str, model: str | None = None,
                       model_config: Any = None, system_prompt: str | None = None,
                       user_id: str | None = None, parent_session_id: str | None = None,
                       **routing: Any) -> str:
        """Create a session, or fill in the still-NULL metadata of an existing row (D5).

        A new row gets ``started_at`` = now. On an existing id each of ``model``,
        ``model_config``, ``system_prompt``, ``parent_session_id`` and the routing columns keeps
        its stored value when non-NULL and takes the new one otherwise; ``source``, ``user_id``
        and ``started_at`` never change (SPEC §5: the first writer wins).

        Args:
            session_id: the id (text).
            source: ``cli``, ``telegram``, ...
            model_config: any JSON value; stored as JSON text when truthy, else NULL.
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
        fields = dict(routing, model=model,
                      model_config=encode_json_field(model_config, "model_config"),
                      system_prompt=system_prompt, user_id=user_id,
                      parent_session_id=parent_session_id)
        self._write(lambda c: upsert_session(c, session_id, source, **fields),
                    op="create_session")
        return clean_text(session_id)

    def ensure_session(self, session_id: str, source: str = "unknown", model: str | None = None,
                       **kwargs: Any) -> str:
        """:meth:`create_session` with ``source='unknown'`` by default: creates a minimal row
        when absent, never overwrites a non-NULL value. Returns ``session_id``."""
        return self.create_session(session_id, source, model=model, **kwargs)

    def get_session(self, session_id: str) -> dict | None:
        """The session row as a dict of raw columns (D7), or None."""
        sid = clean_text(session_id)
        return self._read(lambda c: session_row(
            c.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone(), c))

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

    def promote_to_session_reset(self, session_id: str, reason: str = "session_reset") -> bool:
        """End a live session (or one closed with a recoverable reason: ``agent_close``,
        ``ws_orphan_reap``) with ``reason``, so a gateway never recovers it.

        Returns:
            True when a row changed; False for an empty or unknown id, another end reason, or
            an SQLite error. Refusals of the write path (SPEC §10.1) still raise.
        """
        if not session_id:
            return False
        marks = ", ".join("?" * len(RECOVERABLE_END_REASONS))

        def fn(c: sqlite3.Connection) -> bool:
            cur = c.execute(
                f"UPDATE sessions SET ended_at = ?, end_reason = ? WHERE id = ? AND "
                f"(ended_at IS NULL OR end_reason IN ({marks}))",
                (time.time(), clean_text(reason), clean_text(session_id),
                 *RECOVERABLE_END_REASONS))
            return cur.rowcount > 0
        try:
            return self._write(fn, op="promote_to_session_reset")
        except HermesStateError:
            raise
        except sqlite3.Error:
            return False

    def update_system_prompt(self, session_id: str, system_prompt: str | None) -> None:
        """Store ``system_prompt`` verbatim (lone surrogates replaced) on the session row; on a
        schema 25+ store behind its hash in ``system_prompts`` (D4)."""
        self._write(lambda c: system_prompts.write(c, clean_text(session_id),
                                                   clean_text(system_prompt)),
                    op="update_system_prompt")

    def update_session_meta(self, session_id: str, model_config_json: str | None,
                            model: str | None = None) -> None:
        """Set ``model_config`` to the given JSON text as is; ``model`` only when not None."""
        self._write(lambda c: c.execute(
            "UPDATE sessions SET model_config = ?, model = COALESCE(?, model) WHERE id = ?",
            (clean_text(model_config_json), clean_text(model), clean_text(session_id))),
            op="update_session_meta")

    def resolve_session_id(self, id_or_prefix: str) -> str | None:
        """An exact id, or the only id starting with ``id_or_prefix`` (``%``, ``_``, ``\\`` are
        literal; ASCII case-insensitive like upstream's LIKE). None for ``""``, no match or
        several."""
        if not id_or_prefix:
            return None
        key = clean_text(str(id_or_prefix))
        pattern = key.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"

        def fn(c: sqlite3.Connection) -> str | None:
            if c.execute("SELECT 1 FROM sessions WHERE id = ?", (key,)).fetchone():
                return key
            rows = c.execute("SELECT id FROM sessions WHERE id LIKE ? ESCAPE '\\' LIMIT 2",
                             (pattern,)).fetchall()
            return rows[0][0] if len(rows) == 1 else None

        return self._read(fn)

    def get_conversation_root(self, session_id: str) -> str:
        """The first id of the ``parent_session_id`` chain (any parent kind, at most 100 hops,
        cycle-safe); an unknown or parentless id is returned as is."""
        sid = clean_text(session_id)

        def fn(c: sqlite3.Connection) -> str:
            cur, seen = sid, {sid}
            for _ in range(MAX_ROOT_HOPS):
                row = c.execute("SELECT parent_session_id FROM sessions WHERE id = ?",
                                (cur,)).fetchone()
                if row is None or row[0] is None or row[0] in seen:
                    break
                cur = row[0]
                seen.add(cur)
            return cur

        return self._read(fn)
