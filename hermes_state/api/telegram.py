"""Telegram DM topic mode: one forum topic per session in a private chat (UPSTREAM_API §2.9,
§4.3; decision record docs/decisions/0015-parity-upstream-api.md).

The two tables are opt-in, as upstream has them: a normal open never creates them;
:meth:`TelegramMixin.apply_telegram_topic_migration` does (called by the enabling and binding
methods), rebuilds a first-version bindings table whose foreign key lacks ``ON DELETE CASCADE``
and records ``state_meta['telegram_dm_topic_schema_version'] = '2'``. Readers never migrate:
without the tables they answer None / [] / False / 0.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Any

from .filters import activity
from .listing import ROW_EXTRAS, finish_row
from .text import clean_text, int_arg

MODE_TABLE = "telegram_dm_topic_mode"
BINDINGS_TABLE = "telegram_dm_topic_bindings"
SCHEMA_META_KEY = "telegram_dm_topic_schema_version"
SCHEMA_VERSION = "2"

MODE_DDL = f"""CREATE TABLE IF NOT EXISTS {MODE_TABLE} (
    chat_id TEXT PRIMARY KEY,
    user_id TEXT NOT NULL,
    enabled INTEGER NOT NULL DEFAULT 1,
    activated_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    has_topics_enabled INTEGER,
    allows_users_to_create_topics INTEGER,
    capability_checked_at REAL,
    intro_message_id TEXT,
    pinned_message_id TEXT
)"""

BINDINGS_DDL = f"""CREATE TABLE IF NOT EXISTS {BINDINGS_TABLE} (
    chat_id TEXT NOT NULL,
    thread_id TEXT NOT NULL,
    user_id TEXT NOT NULL,
    session_key TEXT NOT NULL,
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    managed_mode TEXT NOT NULL DEFAULT 'auto',
    linked_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (chat_id, thread_id)
)"""

INDEX_DDL = (
    f"CREATE UNIQUE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_session "
    f"ON {BINDINGS_TABLE}(session_id)",
    f"CREATE INDEX IF NOT EXISTS idx_telegram_dm_topic_bindings_user "
    f"ON {BINDINGS_TABLE}(user_id, chat_id)",
)

_BINDING_COLUMNS = ("chat_id", "thread_id", "user_id", "session_key", "session_id",
                    "managed_mode", "linked_at", "updated_at")


def _s(value: Any) -> str | None:
    return None if value is None else clean_text(str(value))


def _flag(value: Any) -> int | None:
    return None if value is None else (1 if value else 0)


def has_tables(c: sqlite3.Connection) -> bool:
    """True when both topic tables exist."""
    return c.execute("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)",
                     (MODE_TABLE, BINDINGS_TABLE)).fetchone()[0] == 2


def migrate(c: sqlite3.Connection) -> None:
    """Create the topic tables and indexes; rebuild a bindings table without the cascade.
    Runs inside the caller's write transaction; idempotent."""
    c.execute(MODE_DDL)
    row = c.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = ?",
                    (BINDINGS_TABLE,)).fetchone()
    if row is not None and "ON DELETE CASCADE" not in " ".join(row[0].upper().split()):
        old = f"{BINDINGS_TABLE}_v1"
        c.execute(f"ALTER TABLE {BINDINGS_TABLE} RENAME TO {old}")
        for name in ("idx_telegram_dm_topic_bindings_session",
                     "idx_telegram_dm_topic_bindings_user"):
            c.execute(f"DROP INDEX IF EXISTS {name}")
        c.execute(BINDINGS_DDL)
        live = {r[1] for r in c.execute(f"PRAGMA table_info({old})")}
        cols = [col for col in _BINDING_COLUMNS if col in live]
        c.execute(f"INSERT OR IGNORE INTO {BINDINGS_TABLE} ({', '.join(cols)}) "
                  f"SELECT {', '.join(cols)} FROM {old} "
                  f"WHERE session_id IN (SELECT id FROM sessions)")
        c.execute(f"DROP TABLE {old}")
    else:
        c.execute(BINDINGS_DDL)
    for ddl in INDEX_DDL:
        c.execute(ddl)
    c.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) "
              "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
              (SCHEMA_META_KEY, SCHEMA_VERSION))


def _binding(row: sqlite3.Row | None) -> dict | None:
    return None if row is None else dict(row)


class TelegramMixin:
    """Telegram topic-mode API; needs ``self._write(fn, op)`` and ``self._read(fn)``."""

    def apply_telegram_topic_migration(self) -> None:
        """Create (or repair) the topic tables (module docstring)."""
        self._write(migrate, op="telegram_topic_migration")

    def enable_telegram_topic_mode(self, *, chat_id: Any, user_id: Any,
                                   has_topics_enabled: bool | None = None,
                                   allows_users_to_create_topics: bool | None = None) -> None:
        """Turn topic mode on for a private chat (migrating first). Capabilities are stored
        1/0; None keeps what was known."""
        now = time.time()
        args = (_s(chat_id), _s(user_id), now, now, _flag(has_topics_enabled),
                _flag(allows_users_to_create_topics))

        def fn(c: sqlite3.Connection) -> None:
            migrate(c)
            c.execute(
                f"INSERT INTO {MODE_TABLE}(chat_id, user_id, enabled, activated_at, updated_at, "
                "has_topics_enabled, allows_users_to_create_topics) VALUES (?, ?, 1, ?, ?, ?, ?) "
                "ON CONFLICT(chat_id) DO UPDATE SET user_id = excluded.user_id, enabled = 1, "
                "updated_at = excluded.updated_at, has_topics_enabled = "
                "COALESCE(excluded.has_topics_enabled, has_topics_enabled), "
                "allows_users_to_create_topics = COALESCE(excluded.allows_users_to_create_topics,"
                " allows_users_to_create_topics)", args)

        self._write(fn, op="enable_telegram_topic_mode")

    def disable_telegram_topic_mode(self, *, chat_id: Any, clear_bindings: bool = True) -> None:
        """Turn topic mode off (``enabled = 0``) and, by default, forget the chat's bindings.
        No-op without the tables."""
        cid = _s(chat_id)

        def fn(c: sqlite3.Connection) -> None:
            if not has_tables(c):
                return
            c.execute(f"UPDATE {MODE_TABLE} SET enabled = 0, updated_at = ? WHERE chat_id = ?",
                      (time.time(), cid))
            if clear_bindings:
                c.execute(f"DELETE FROM {BINDINGS_TABLE} WHERE chat_id = ?", (cid,))

        self._write(fn, op="disable_telegram_topic_mode")

    def is_telegram_topic_mode_enabled(self, *, chat_id: Any, user_id: Any) -> bool:
        """True when topic mode is on for this chat and user (False without the tables)."""
        def fn(c: sqlite3.Connection) -> bool:
            return has_tables(c) and c.execute(
                f"SELECT 1 FROM {MODE_TABLE} WHERE chat_id = ? AND user_id = ? AND enabled = 1",
                (_s(chat_id), _s(user_id))).fetchone() is not None

        return self._read(fn)

    def get_telegram_topic_binding(self, *, chat_id: Any, thread_id: Any) -> dict | None:
        """The binding of one topic, or None."""
        return self._read(lambda c: _binding(c.execute(
            f"SELECT * FROM {BINDINGS_TABLE} WHERE chat_id = ? AND thread_id = ?",
            (_s(chat_id), _s(thread_id))).fetchone()) if has_tables(c) else None)

    def list_telegram_topic_bindings_for_chat(self, *, chat_id: Any) -> list[dict]:
        """The chat's bindings, most recently updated first."""
        return self._read(lambda c: [dict(r) for r in c.execute(
            f"SELECT * FROM {BINDINGS_TABLE} WHERE chat_id = ? ORDER BY updated_at DESC, rowid "
            "DESC", (_s(chat_id),))] if has_tables(c) else [])

    def get_telegram_topic_binding_by_session(self, *, session_id: str) -> dict | None:
        """The binding of a session, or None."""
        return self._read(lambda c: _binding(c.execute(
            f"SELECT * FROM {BINDINGS_TABLE} WHERE session_id = ?",
            (_s(session_id),)).fetchone()) if has_tables(c) else None)

    def is_telegram_session_linked_to_topic(self, *, session_id: str) -> bool:
        """True when the session is bound to a topic."""
        return self.get_telegram_topic_binding_by_session(session_id=session_id) is not None

    def bind_telegram_topic(self, *, chat_id: Any, thread_id: Any, user_id: Any,
                            session_key: str, session_id: str, managed_mode: str = "auto"
                            ) -> None:
        """Bind a topic to a session (migrating first); ids are stored as text.

        Binding the same topic to the same session again changes nothing but ``updated_at``;
        a topic bound to another session is re-bound.

        Raises:
            ValueError: the session is already bound to another topic.
            sqlite3.IntegrityError: unknown session (foreign key).
        """
        cid, tid, sid = _s(chat_id), _s(thread_id), _s(session_id)
        args = (cid, tid, _s(user_id), _s(session_key), sid, _s(managed_mode) or "auto")

        def fn(c: sqlite3.Connection) -> None:
            migrate(c)
            other = c.execute(f"SELECT chat_id, thread_id FROM {BINDINGS_TABLE} "
                              "WHERE session_id = ?", (sid,)).fetchone()
            if other is not None and (other[0], other[1]) != (cid, tid):
                raise ValueError("session is already linked to another Telegram topic")
            now = time.time()
            c.execute(
                f"INSERT INTO {BINDINGS_TABLE}(chat_id, thread_id, user_id, session_key, "
                "session_id, managed_mode, linked_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT(chat_id, thread_id) DO UPDATE SET user_id = excluded.user_id, "
                "session_key = excluded.session_key, managed_mode = excluded.managed_mode, "
                "linked_at = CASE WHEN session_id = excluded.session_id THEN linked_at "
                "ELSE excluded.linked_at END, session_id = excluded.session_id, "
                "updated_at = excluded.updated_at", (*args, now, now))

        self._write(fn, op="bind_telegram_topic")

    def delete_telegram_topic_binding(self, *, chat_id: Any, thread_id: Any) -> int:
        """Remove a topic's binding; the chat's topic mode is switched off when that was its
        last binding. Returns the rows removed (0 without the tables)."""
        cid, tid = _s(chat_id), _s(thread_id)

        def fn(c: sqlite3.Connection) -> int:
            if not has_tables(c):
                return 0
            n = c.execute(f"DELETE FROM {BINDINGS_TABLE} WHERE chat_id = ? AND thread_id = ?",
                          (cid, tid)).rowcount
            if n and c.execute(f"SELECT 1 FROM {BINDINGS_TABLE} WHERE chat_id = ?",
                               (cid,)).fetchone() is None:
                c.execute(f"UPDATE {MODE_TABLE} SET enabled = 0, updated_at = ? "
                          "WHERE chat_id = ?", (time.time(), cid))
            return n

        return self._write(fn, op="delete_telegram_topic_binding")

    def list_unlinked_telegram_sessions_for_user(self, *, chat_id: Any, user_id: Any,
                                                 limit: int = 10) -> list[dict]:
        """The user's ``telegram`` sessions bound to no topic, with ``preview`` and
        ``last_active``, most recently active first (``chat_id`` is not used: a user's DM
        sessions may predate the chat id). Works without the tables."""
        def fn(c: sqlite3.Connection) -> list[dict]:
            unbound = (f" AND NOT EXISTS (SELECT 1 FROM {BINDINGS_TABLE} b "
                       "WHERE b.session_id = s.id)") if has_tables(c) else ""
            return [finish_row(r, c) for r in c.execute(
                f"SELECT s.*, {ROW_EXTRAS} FROM sessions s WHERE s.source = 'telegram' "
                f"AND s.user_id = ?{unbound} ORDER BY {activity('s')} DESC, s.started_at DESC "
                "LIMIT ?", (_s(user_id), int_arg(limit, "limit")))]

        return self._read(fn)
