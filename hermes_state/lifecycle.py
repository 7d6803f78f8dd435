"""Listing, lineage walks, export, prune, clear and delete of sessions (SPEC §5).

Decisions recorded here (the SPEC leaves them open):

* ``list_sessions`` orders by ``started_at`` DESC (then rowid DESC); the preview is the first
  user message with non-NULL content by ``(timestamp, id)`` (the seed query's order), ``\\r\\n``,
  ``\\n`` and ``\\r`` each become one space, nothing is trimmed, and a preview longer than 60
  characters becomes its first 60 + ``"..."``; a session without one has ``preview == ""``.
* ``get_lineage`` / ``get_descendants`` return session ids. ``get_descendants`` excludes the
  session itself (also when a corrupt cycle leads back to it) and is ordered by ``started_at``.
* ``export_session`` reads the session and its messages in one read snapshot. ``iter_export``
  yields the same dicts newest first, reading :data:`EXPORT_PAGE_SIZE` session rows per page
  (keyset paging, one short read per page and one per session's messages, no read transaction
  held while the caller consumes an item).
* ``prune_sessions``: "last activity" = the latest of ``started_at``, ``ended_at`` and the
  session's newest message timestamp; a session is pruned when it is ended, not pinned, matches
  ``source`` and that value is older than ``now - older_than_days * 86400``.
* ``clear_messages`` returns True for a known session (False otherwise); its usage rows and
  token counters stay (the tokens were spent).
* Removing a session also removes its automatic-title marker in ``state_meta`` (see
  :mod:`hermes_state.titles`). The FTS tables are kept exact by the delete triggers, which feed
  each FTS table the OLD values it indexed (SPEC §2.4), so removed text is found by no index.
"""

from __future__ import annotations

import sqlite3
import time
from typing import Callable, Iterator, TypeVar

from .messages import message_row
from .sessions import session_row
from .text import clean_text
from .titles import auto_title_key

T = TypeVar("T")

PREVIEW_CHARS = 60
#: Characters of the first user message fetched for the preview: enough that a preview longer
#: than 60 characters is still detected after ``\r\n`` pairs shrink to one space.
_PREVIEW_FETCH = 2 * (PREVIEW_CHARS + 1)
EXPORT_PAGE_SIZE = 100
SECONDS_PER_DAY = 86400.0

_LIST_SQL = f"""
SELECT s.*,
    (SELECT SUBSTR(m.content, 1, {_PREVIEW_FETCH}) FROM messages m
      WHERE m.session_id = s.id AND m.role = 'user' AND m.content IS NOT NULL
      ORDER BY m.timestamp, m.id LIMIT 1) AS _preview_raw,
    COALESCE((SELECT MAX(m2.timestamp) FROM messages m2 WHERE m2.session_id = s.id),
             s.started_at) AS last_active
FROM sessions s
WHERE (? IS NULL OR s.source = ?)
ORDER BY s.started_at DESC, s.rowid DESC
LIMIT ? OFFSET ?
"""


def make_preview(raw: str | None) -> str:
    """Preview text of a first user message (SPEC §5 ``list_sessions``)."""
    if not raw:
        return ""
    text = raw.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    if len(text) > PREVIEW_CHARS:
        return text[:PREVIEW_CHARS] + "..."
    return text


def _snapshot(c: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """Run several reads in one read transaction (ended before returning, SPEC §4)."""
    c.execute("BEGIN")
    try:
        return fn(c)
    finally:
        if c.in_transaction:
            c.execute("COMMIT")


def _remove_sessions(c: sqlite3.Connection, ids: list[str]) -> None:
    """Inside a write transaction: orphan the children of ``ids``, delete their messages, usage
    rows, auto-title markers and the session rows themselves."""
    if not ids:
        return
    rows = [(i,) for i in ids]
    c.executemany("UPDATE sessions SET parent_session_id = NULL WHERE parent_session_id = ?", rows)
    c.executemany("DELETE FROM messages WHERE session_id = ?", rows)
    c.executemany("DELETE FROM session_model_usage WHERE session_id = ?", rows)
    c.executemany("DELETE FROM state_meta WHERE key = ?", [(auto_title_key(i),) for i in ids])
    c.executemany("DELETE FROM sessions WHERE id = ?", rows)


class LifecycleMixin:
    """Session listing/export/removal API; needs ``self._write`` and ``self._read``."""

    # ------------------------------------------------------------------ listing
    def list_sessions(self, source: str | None = None, limit: int = 20,
                      offset: int = 0) -> list[dict]:
        """Sessions newest first with ``preview`` and ``last_active`` (SPEC §5).

        One SQL statement (correlated subqueries on ``idx_messages_session``), no per-session
        queries.

        Args:
            source: only sessions of this source; None = all.
            limit: page size. offset: rows to skip.
        Returns:
            Session row dicts (``model_config`` decoded) plus ``preview`` (first user message,
            newlines → spaces, over 60 characters ⇒ first 60 + ``"..."``, ``""`` when none) and
            ``last_active`` (newest message timestamp, else ``started_at``).
        """
        src = clean_text(source)
        rows = self._read(lambda c: c.execute(
            _LIST_SQL, (src, src, int(limit), int(offset))).fetchall())
        out = []
        for r in rows:
            d = session_row(r)
            d["preview"] = make_preview(d.pop("_preview_raw"))
            out.append(d)
        return out

    # ------------------------------------------------------------------ lineage
    def get_lineage(self, session_id: str) -> list[str]:
        """Ancestors of a session, root first, ending with ``session_id`` (SPEC §5, §7).

        One recursive query collects the ``(id, parent)`` links (``UNION`` deduplicates, so a
        corrupt cycle terminates); the chain is then walked with a visited set.

        Returns:
            ``[root, ..., session_id]``; ``[]`` for an unknown id.
        """
        sid = clean_text(session_id)

        def fn(c: sqlite3.Connection) -> list[str]:
            links = dict(c.execute(
                """WITH RECURSIVE up(id, parent) AS (
                       SELECT id, parent_session_id FROM sessions WHERE id = ?
                       UNION
                       SELECT s.id, s.parent_session_id FROM sessions s JOIN up ON s.id = up.parent
                   ) SELECT id, parent FROM up""", (sid,)).fetchall())
            chain: list[str] = []
            cur = sid if sid in links else None
            seen: set[str] = set()
            while cur is not None and cur in links and cur not in seen:
                seen.add(cur)
                chain.append(cur)
                cur = links[cur]
            return list(reversed(chain))

        return self._read(fn)

    def get_descendants(self, session_id: str) -> list[str]:
        """Every descendant (children, grandchildren, ...) of a session (SPEC §5).

        A recursive CTE over ``parent_session_id`` with ``UNION`` (cycle-safe: a revisited id is
        dropped). The session itself is never included.

        Returns:
            Descendant ids ordered by ``started_at`` (then rowid); ``[]`` when none or unknown.
        """
        sid = clean_text(session_id)
        return self._read(lambda c: [r[0] for r in c.execute(
            """WITH RECURSIVE down(id) AS (
                   SELECT id FROM sessions WHERE parent_session_id = ?
                   UNION
                   SELECT s.id FROM sessions s JOIN down ON s.parent_session_id = down.id
               )
               SELECT s.id FROM sessions s JOIN down ON s.id = down.id WHERE s.id != ?
               ORDER BY s.started_at, s.rowid""", (sid, sid))])

    # ------------------------------------------------------------------ export
    def export_session(self, session_id: str) -> dict | None:
        """The session row (dict) plus ``"messages"`` (as :meth:`get_messages`) (SPEC §5).

        Returns:
            The dict, or None for an unknown id. Both reads share one snapshot.
        """
        sid = clean_text(session_id)

        def fn(c: sqlite3.Connection) -> dict | None:
            row = session_row(c.execute("SELECT * FROM sessions WHERE id = ?", (sid,)).fetchone())
            if row is None:
                return None
            row["messages"] = [message_row(m) for m in c.execute(
                "SELECT * FROM messages WHERE session_id = ? ORDER BY id", (sid,))]
            return row

        return self._read(lambda c: _snapshot(c, fn))

    def iter_export(self, source: str | None = None) -> Iterator[dict]:
        """Stream :meth:`export_session` dicts of every session (of ``source``), newest first.

        Sessions are read in pages of :data:`EXPORT_PAGE_SIZE` (keyset paging on
        ``(started_at, rowid)``) and each session's messages only when it is yielded, so at most
        one session's messages are in memory and no read transaction spans a ``yield``.
        A session deleted between its page and its turn is skipped.

        Args:
            source: only sessions of this source; None = all.
        Yields:
            Session dicts with ``"messages"``.
        """
        src = clean_text(source)
        cursor: tuple[float, int] | None = None
        while True:
            def page(c: sqlite3.Connection, after=cursor) -> list[tuple]:
                sql = "SELECT id, started_at, rowid FROM sessions WHERE (? IS NULL OR source = ?)"
                args: list = [src, src]
                if after is not None:
                    sql += " AND (started_at < ? OR (started_at = ? AND rowid < ?))"
                    args += [after[0], after[0], after[1]]
                sql += " ORDER BY started_at DESC, rowid DESC LIMIT ?"
                args.append(EXPORT_PAGE_SIZE)
                return [tuple(r) for r in c.execute(sql, args)]

            rows = self._read(page)
            if not rows:
                return
            for sid, _started, _rowid in rows:
                item = self.export_session(sid)
                if item is not None:
                    yield item
            cursor = (rows[-1][1], rows[-1][2])
            if len(rows) < EXPORT_PAGE_SIZE:
                return

    def export_all(self, source: str | None = None) -> list[dict]:
        """Every session (of ``source``) with its messages, newest first (SPEC §5).

        Materialises :meth:`iter_export`; use that generator for large stores.
        """
        return list(self.iter_export(source))

    # ------------------------------------------------------------------ removal
    def prune_sessions(self, older_than_days: float = 90, source: str | None = None,
                       exclude: set[str] | frozenset[str] = frozenset()) -> int:
        """Delete ended, unpinned sessions inactive for longer than ``older_than_days`` (SPEC §5).

        Last activity = the latest of ``started_at``, ``ended_at`` and the session's newest
        message. Live (not ended) and pinned sessions are never pruned. Children of a pruned
        session are orphaned (``parent_session_id = NULL``), not deleted, at any depth. Messages,
        usage rows and auto-title markers go with their session. One write transaction.

        Args:
            older_than_days: age threshold in days (fractions allowed).
            source: only sessions of this source; None = all.
            exclude: session ids never to prune (a gateway's sessions with a turn in progress,
                SPEC §11).
        Returns:
            The number of sessions deleted.
        """
        cutoff = time.time() - float(older_than_days) * SECONDS_PER_DAY
        src = clean_text(source)
        skip = {clean_text(s) for s in exclude}

        def fn(c: sqlite3.Connection) -> int:
            ids = [i for i in _prune_ids(c, cutoff, src) if i not in skip]
            _remove_sessions(c, ids)
            return len(ids)

        return self._write(fn, op="prune_sessions")

    def prune_candidates(self, older_than_days: float = 90, source: str | None = None) -> list[str]:
        """The ids ``prune_sessions`` would delete now (read-only preview, SPEC §8, §11)."""
        cutoff = time.time() - float(older_than_days) * SECONDS_PER_DAY
        src = clean_text(source)
        return self._read(lambda c: _prune_ids(c, cutoff, src))

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

    def delete_session(self, session_id: str) -> bool:
        """Delete a session with its messages and usage rows; its children are orphaned
        (``parent_session_id = NULL``) (SPEC §5). One transaction.

        Returns:
            True when the session existed, False for an unknown id.
        """
        sid = clean_text(session_id)

        def fn(c: sqlite3.Connection) -> bool:
            if c.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone() is None:
                return False
            _remove_sessions(c, [sid])
            return True

        return self._write(fn, op="delete_session")


def _prune_ids(c: sqlite3.Connection, cutoff: float, src: str | None) -> list[str]:
    """Ended, unpinned sessions (of ``src``) whose last activity is before ``cutoff``."""
    return [r[0] for r in c.execute(
        """SELECT s.id FROM sessions s
           WHERE s.ended_at IS NOT NULL AND COALESCE(s.pinned, 0) = 0
             AND (? IS NULL OR s.source = ?)
             AND MAX(s.started_at, s.ended_at,
                     COALESCE((SELECT MAX(m.timestamp) FROM messages m
                               WHERE m.session_id = s.id), s.started_at)) < ?
           ORDER BY s.started_at""",
        (src, src, cutoff))]
