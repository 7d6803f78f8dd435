"""Listing, lineage walks, export, prune, clear and delete of sessions (SPEC §5;
UPSTREAM_API §2.8, D7, D10).

Decisions recorded here (the SPEC leaves them open):

* ``list_sessions`` orders by ``started_at`` DESC (then rowid DESC); the preview is the first
  user message with non-NULL content by ``(timestamp, id)`` (the seed query's order), ``\\r\\n``,
  ``\\n`` and ``\\r`` each become one space, nothing is trimmed, and a preview longer than 60
  characters becomes its first 60 + ``"..."``; a session without one has ``preview == ""``.
  (``list_sessions_rich`` is upstream's listing, :mod:`hermes_state.listing`.)
* ``get_lineage`` / ``get_descendants`` return session ids. ``get_descendants`` excludes the
  session itself (also when a corrupt cycle leads back to it) and is ordered by ``started_at``.
* ``export_session`` reads the session and its ACTIVE messages in one read snapshot (upstream:
  rewound and compaction-archived rows are not exported). ``iter_export`` yields the same dicts
  plus ``last_active``, ordered ``last_active`` DESC, ``started_at`` DESC, ``id`` DESC (upstream's
  ``export_all`` order): one read of the ordered ids, then one short read per session when it is
  yielded, so no read transaction spans a ``yield`` and one session's messages are in memory.
* ``prune_sessions``: "last activity" = the latest of ``started_at``, ``ended_at`` and the
  session's newest message timestamp (SPEC §5; upstream ages by ``started_at``: README
  "Decisions not in the SPEC"); a session is pruned when it is ended, not pinned, matches the
  filters of :mod:`hermes_state.filters` and that value is older than
  ``now - older_than_days * 86400``. An explicit ``started_before`` filter ages by ``started_at``
  instead. ``older_than_days=None`` = no age bound.
* ``clear_messages`` returns True for a known session (False otherwise); its usage rows and
  token counters stay (the tokens were spent).
* ``delete_session`` also deletes the session's delegate sub-agents, recursively (D10); every
  other child is orphaned. Removing a session also removes its automatic-title marker in
  ``state_meta`` (see :mod:`hermes_state.titles`) and its Telegram topic binding. The FTS tables
  are kept exact by the delete triggers, which feed each FTS table the OLD values it indexed
  (SPEC §2.4), so removed text is found by no index. With ``sessions_dir`` the transcript files
  go too (:mod:`hermes_state.transcripts`).
"""

from __future__ import annotations

import sqlite3
import time
from typing import Iterator

from .filters import prune_filter_sql
from .kinds import is_delegate, marker
from .messages import ACTIVE_SQL, message_row
from .reads import in_snapshot
from .sessions import session_row
from .text import clean_text
from .titles import auto_title_key
from .transcripts import remove_transcripts


PREVIEW_CHARS = 60
#: Characters of the first user message fetched for the preview: enough that a preview longer
#: than 60 characters is still detected after ``\r\n`` pairs shrink to one space.
_PREVIEW_FETCH = 2 * (PREVIEW_CHARS + 1)
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
        rows = self._read(lambda c: [session_row(r, c) for r in c.execute(
            _LIST_SQL, (src, src, int(limit), int(offset))).fetchall()])
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
            **filters: the prune filters of :data:`hermes_state.filters.PRUNE_FILTERS`.
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
