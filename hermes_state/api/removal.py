"""Sessions removed: prune, clear and delete, with the delegate cascade (SPEC §5; UPSTREAM_API
§2.8, D10).

What "last activity" means for prune, what a clear keeps and which children a delete takes
along are recorded in docs/decisions/0007-session-api.md. The FTS tables are kept exact by the delete
triggers (SPEC §2.4); transcript files go too when a ``sessions_dir`` is given
(:mod:`hermes_state.api.transcripts`).
"""

from __future__ import annotations

import sqlite3
import time

from .filters import is_delegate, marker, prune_filter_sql
from .text import clean_text
from .titles import auto_title_key
from .transcripts import remove_transcripts

SECONDS_PER_DAY = 86400.0


def remove_sessions(c: sqlite3.Connection, ids: list[str]) -> None:
    """Inside a write transaction: orphan the children of ``ids``, delete their messages, usage
    rows, auto-title markers, Telegram topic bindings and the session rows themselves."""
    if not ids:
        return
    rows = [(i,) for i in ids]
    c.executemany("UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ?", rows)
    c.executemany("DELETE FROM messages WHERE session_id = ?", rows)
    c.executemany("DELETE FROM session_model_usage WHERE session_id = ?", rows)
    c.executemany("DELETE FROM state_meta WHERE key = ?", [(auto_title_key(i),) for i in ids])
    if c.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND "
                 "name = 'telegram_dm_topic_bindings'").fetchone():
        c.executemany("DELETE FROM telegram_dm_topic_bindings WHERE session_id = ?", rows)
    c.executemany("DELETE FROM sessions WHERE id = ?", rows)


def delegate_descendants(c: sqlite3.Connection, session_id: str) -> list[str]:
    """The delegate sub-agents of a session, recursively (D10): rows whose ``_delegate_from``
    names a session of the frontier, or children of the frontier carrying any
    ``_delegate_from``; never the session itself. Cycle-safe."""
    seen = {session_id}
    found: list[str] = []
    frontier = [session_id]
    while frontier:
        marks = ",".join("?" * len(frontier))
        rows = c.execute(
            f"SELECT s.id FROM sessions s WHERE {marker('s', '_delegate_from')} IN ({marks}) "
            f"OR (s.parent_session_id IN ({marks}) AND {is_delegate('s')})",
            (*frontier, *frontier)).fetchall()
        frontier = [r[0] for r in rows if r[0] not in seen]
        seen.update(frontier)
        found += frontier
    return found


def prune_candidates_sql(older_than_days: float | None, source: str | None,
                         filters: dict) -> tuple[str, list]:
    """``WHERE`` clause over ``s`` of what a prune with these arguments removes (module
    docstring): ended, not pinned, the filters, the age bound."""
    conds, params = prune_filter_sql(filters, source)
    conds.append("COALESCE(s.pinned, 0) = 0")
    if filters.get("started_before") is None and older_than_days is not None:
        cutoff = time.time() - float(older_than_days) * SECONDS_PER_DAY
        conds.append("MAX(s.started_at, s.ended_at, COALESCE((SELECT MAX(m.timestamp) "
                     "FROM messages m WHERE m.session_id = s.id), s.started_at)) < ?")
        params.append(cutoff)
    return " AND ".join(conds), params


class RemovalMixin:
    """Prune, clear and delete API; needs ``self._write`` and ``self._read``."""

    # ------------------------------------------------------------------ removal
    def prune_sessions(self, older_than_days: float | None = 90, source: str | None = None,
                       sessions_dir: str | None = None,
                       exclude: set[str] | frozenset[str] = frozenset(), **filters) -> int:
        """Delete ended, unpinned sessions inactive for longer than ``older_than_days`` (SPEC §5).

        Last activity = the latest of ``started_at``, ``ended_at`` and the session's newest
        message (module docstring for ``started_before`` and None). Live (not ended) and pinned
        sessions are never pruned. Children of a pruned session are orphaned
        (``parent_session_id = NULL``), not deleted, at any depth; no delegate cascade.
        Messages, usage rows and auto-title markers go with their session. One write
        transaction; transcript files after it.

        Args:
            older_than_days: age threshold in days (fractions allowed); None = no age bound.
            source: only sessions of this source; None = all.
            sessions_dir: also remove the pruned sessions' transcript files there.
            exclude: session ids never to prune (a gateway's sessions with a turn in progress,
                SPEC §11).
            **filters: the prune filters of :data:`hermes_state.api.filters.PRUNE_FILTERS`.
        Returns:
            The number of sessions deleted.
        Raises:
            TypeError: an unknown filter.
        """
        where, params = prune_candidates_sql(older_than_days, source, filters)
        skip = {clean_text(s) for s in exclude}

        def fn(c: sqlite3.Connection) -> list[str]:
            ids = [r[0] for r in c.execute(
                f"SELECT s.id FROM sessions s WHERE {where} ORDER BY s.started_at", params)
                if r[0] not in skip]
            remove_sessions(c, ids)
            return ids

        ids = self._write(fn, op="prune_sessions")
        remove_transcripts(sessions_dir, ids)
        return len(ids)

    def prune_candidates(self, older_than_days: float | None = 90,
                         source: str | None = None, **filters) -> list[str]:
        """The ids ``prune_sessions`` would delete now, oldest first (read-only, SPEC §8, §11)."""
        where, params = prune_candidates_sql(older_than_days, source, filters)
        return self._read(lambda c: [r[0] for r in c.execute(
            f"SELECT s.id FROM sessions s WHERE {where} ORDER BY s.started_at, s.id", params)])

    def clear_messages(self, session_id: str) -> bool:
        """Delete a session's messages, keep the session, reset ``message_count`` and
        ``tool_call_count`` to 0 (SPEC §5), in one transaction.

        Returns:
            True for a known session, False for an unknown id.
        """
        sid = clean_text(session_id)

        def fn(c: sqlite3.Connection) -> bool:
            cur = c.execute("UPDATE sessions SET message_count = 0, tool_call_count = 0 "
                            "WHERE id = ?", (sid,))
            if cur.rowcount == 0:
                return False
            c.execute("DELETE FROM messages WHERE session_id = ?", (sid,))
            return True

        return self._write(fn, op="clear_messages")

    def delete_session(self, session_id: str, sessions_dir: str | None = None) -> bool:
        """Delete a session with its messages and usage rows, and its delegate sub-agents
        recursively with theirs; every other child is orphaned (``parent_session_id = NULL``)
        (SPEC §5; D10). One transaction; transcript files after it.

        Returns:
            True when the session existed, False for an unknown id.
        """
        sid = clean_text(session_id)

        def fn(c: sqlite3.Connection) -> list[str] | None:
            if c.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone() is None:
                return None
            ids = delegate_descendants(c, sid) + [sid]
            remove_sessions(c, ids)
            return ids

        ids = self._write(fn, op="delete_session")
        if ids is None:
            return False
        remove_transcripts(sessions_dir, ids)
        return True
