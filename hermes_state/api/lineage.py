"""Whole sessions read: the newest-first list with its preview, lineage walks and export (SPEC §5;
UPSTREAM_API §2.8, D7).

The choices the SPEC leaves open (preview text, descendant order, export order and snapshots)
are recorded in docs/decisions/0007-session-api.md.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Iterator

from ..store.reads import in_snapshot
from .messages import ACTIVE_SQL, message_row
from .sessions import session_row
from .text import clean_text, display_text, int_arg

PREVIEW_CHARS = 60
#: Characters of the first user message fetched for the preview: enough that a preview longer
#: than 60 characters is still detected after ``\r\n`` pairs shrink to one space.
_PREVIEW_FETCH = 2 * (PREVIEW_CHARS + 1)

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


def make_preview(raw: Any) -> str:
    """Preview text of a first user message (SPEC §5 ``list_sessions``); a value of any type
    (a foreign client's BLOB) is shown as text, never an error."""
    if not raw:
        return ""
    text = display_text(raw).replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    if len(text) > PREVIEW_CHARS:
        return text[:PREVIEW_CHARS] + "..."
    return text


class LineageMixin:
    """Listing, lineage and export API; needs ``self._read``."""

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
        rows = self._read(lambda c: [session_row(r, c) for r in c.execute(
            _LIST_SQL, (src, src, int_arg(limit, "limit"),
                        int_arg(offset, "offset"))).fetchall()])
        out = []
        for d in rows:
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
        """The raw session row plus ``"messages"`` (as :meth:`get_messages`: active rows,
        ``content`` and ``tool_calls`` decoded) (SPEC §5; UPSTREAM_API §2.8).

        Returns:
            The dict, or None for an unknown id. Both reads share one snapshot.
        """
        sid = clean_text(session_id)
        return self._read(lambda c: in_snapshot(c, lambda: _export_one(c, sid)))

    def iter_export(self, source: str | None = None) -> Iterator[dict]:
        """Stream :meth:`export_session` dicts (plus ``last_active``) of every session (of
        ``source``): ``last_active`` DESC, ``started_at`` DESC, ``id`` DESC.

        One read takes the ordered ids; each session's row and messages are read only when it
        is yielded, so at most one session's messages are in memory and no read transaction
        spans a ``yield``. A session deleted before its turn is skipped.

        Args:
            source: only sessions of this source; None = all.
        Yields:
            Session dicts with ``"last_active"`` and ``"messages"``.
        """
        src = clean_text(source)
        ids = self._read(lambda c: [r[0] for r in c.execute(
            "SELECT s.id FROM sessions s WHERE (? IS NULL OR s.source = ?) "
            f"ORDER BY {_LAST_ACTIVE} DESC, s.started_at DESC, s.id DESC", (src, src))])
        for sid in ids:
            item = self._read(lambda c, sid=sid: in_snapshot(c, lambda: _export_one(
                c, sid, with_last_active=True)))
            if item is not None:
                yield item

    def export_all(self, source: str | None = None) -> list[dict]:
        """Every session (of ``source``) with ``last_active`` and its messages, most recently
        active first (SPEC §5; UPSTREAM_API §2.8). Materialises :meth:`iter_export`; use that
        generator for large stores."""
        return list(self.iter_export(source))


_LAST_ACTIVE = ("COALESCE((SELECT MAX(m.timestamp) FROM messages m WHERE m.session_id = s.id), "
                "s.started_at)")


def _export_one(c: sqlite3.Connection, sid: str, with_last_active: bool = False) -> dict | None:
    extra = f", {_LAST_ACTIVE} AS last_active" if with_last_active else ""
    row = session_row(c.execute(f"SELECT s.*{extra} FROM sessions s WHERE s.id = ?",
                                (sid,)).fetchone(), c)
    if row is None:
        return None
    row["messages"] = [message_row(m) for m in c.execute(
        f"SELECT * FROM messages WHERE session_id = ? AND {ACTIVE_SQL} ORDER BY id", (sid,))]
    return row
