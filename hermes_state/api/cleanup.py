"""Sweeps of abandoned sessions: empty rows, TUI ghosts, orphaned compression continuations
(UPSTREAM_API §2.2, §2.8).

Each sweep is one write transaction (the write path of SPEC §4); removed rows go the way of
``delete_session`` without its delegate cascade (children are orphaned), and with a
``sessions_dir`` their transcript files are removed after the commit.
"""

from __future__ import annotations

import sqlite3
import time

from .removal import remove_sessions
from .text import clean_text
from .transcripts import remove_transcripts

#: A compression continuation still live after this long, never having called the API, is an
#: orphan of a crash between the split and the first turn.
ORPHANED_COMPRESSION_AGE_S = 7 * 86400.0
#: A TUI session untouched this long after its start is a ghost.
GHOST_AGE_S = 86400.0

_EMPTY = ("COALESCE(s.message_count, 0) = 0 AND s.ended_at IS NOT NULL "
          "AND COALESCE(s.archived, 0) = 0")


class CleanupMixin:
    """Sweep API; needs ``self._write(fn, op)`` and ``self._read(fn)``."""

    def finalize_orphaned_compression_sessions(self) -> int:
        """End live continuations of a compression split that never made an API call, started
        over 7 days ago and hold a message: ``end_reason='orphaned_compression'``.

        Returns:
            How many sessions were ended.
        """
        def fn(c: sqlite3.Connection) -> int:
            now = time.time()
            return c.execute(
                "UPDATE sessions SET ended_at = ?, end_reason = 'orphaned_compression' "
                "WHERE COALESCE(api_call_count, 0) = 0 AND ended_at IS NULL "
                "AND end_reason IS NULL AND started_at < ? "
                "AND EXISTS (SELECT 1 FROM sessions p WHERE p.id = sessions.parent_session_id "
                "            AND p.end_reason = 'compression') "
                "AND EXISTS (SELECT 1 FROM messages m WHERE m.session_id = sessions.id)",
                (now, now - ORPHANED_COMPRESSION_AGE_S)).rowcount

        return self._write(fn, op="finalize_orphaned_compression_sessions")

    def prune_empty_ghost_sessions(self, sessions_dir: str | None = None) -> int:
        """Delete ``source='tui'`` sessions that are untitled, ended, started over 24 h ago and
        hold no message; their transcript files too with ``sessions_dir``.

        Returns:
            How many sessions were deleted.
        """
        def fn(c: sqlite3.Connection) -> list[str]:
            ids = [r[0] for r in c.execute(
                "SELECT s.id FROM sessions s WHERE s.source = 'tui' AND s.title IS NULL "
                "AND s.ended_at IS NOT NULL AND s.started_at < ? "
                "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id)",
                (time.time() - GHOST_AGE_S,))]
            remove_sessions(c, ids)
            return ids

        ids = self._write(fn, op="prune_empty_ghost_sessions")
        remove_transcripts(sessions_dir, ids)
        return len(ids)

    def count_empty_sessions(self) -> int:
        """Ended, unarchived sessions with ``message_count = 0``."""
        return self._read(lambda c: c.execute(
            f"SELECT COUNT(*) FROM sessions s WHERE {_EMPTY}").fetchone()[0])

    def delete_empty_sessions(self, sessions_dir: str | None = None) -> int:
        """Delete what :meth:`count_empty_sessions` counts (live and archived empties are never
        touched; children are orphaned, no delegate cascade). Returns the count."""
        def fn(c: sqlite3.Connection) -> list[str]:
            ids = [r[0] for r in c.execute(f"SELECT s.id FROM sessions s WHERE {_EMPTY}")]
            remove_sessions(c, ids)
            return ids

        ids = self._write(fn, op="delete_empty_sessions")
        remove_transcripts(sessions_dir, ids)
        return len(ids)

    def delete_session_if_empty(self, session_id: str, sessions_dir: str | None = None) -> bool:
        """Delete the session only if it is untitled, holds no message and has no child.

        Returns:
            True when it was deleted.
        """
        sid = clean_text(session_id)

        def fn(c: sqlite3.Connection) -> bool:
            if c.execute(
                    "SELECT 1 FROM sessions s WHERE s.id = ? AND s.title IS NULL "
                    "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.session_id = s.id) "
                    "AND NOT EXISTS (SELECT 1 FROM sessions k WHERE k.parent_session_id = s.id)",
                    (sid,)).fetchone() is None:
                return False
            remove_sessions(c, [sid])
            return True

        deleted = self._write(fn, op="delete_session_if_empty")
        if deleted:
            remove_transcripts(sessions_dir, [sid])
        return deleted
