"""Archive, bulk delete, prune candidates and lineage export (UPSTREAM_API §2.8).

Archiving hides a session and its whole compression lineage from the default listing and
counts; nothing is deleted. Bulk deletion (``delete_sessions``) rewrites many rows at once and
goes through the live-writer gate (SPEC §11): it refuses while another process holds the store,
unless ``force=True``.
"""

from __future__ import annotations

import sqlite3
from typing import Any, Iterable

from ..processes.writer_gate import gate_held
from .removal import delegate_descendants, prune_candidates_sql, remove_sessions
from .text import clean_text
from .transcripts import remove_transcripts

CANDIDATE_COLUMNS = ("id", "source", "title", "model", "started_at", "ended_at",
                     "message_count", "archived")
MAX_LINEAGE_ROWS = 10_000


def compression_component(c: sqlite3.Connection, session_id: str) -> list[str]:
    """The session plus every ancestor and descendant reached through parent→child edges whose
    parent ended with ``compression`` (cycle-safe); ``[]`` for an unknown id."""
    if c.execute("SELECT 1 FROM sessions WHERE id = ?", (session_id,)).fetchone() is None:
        return []
    seen = {session_id}
    frontier = [session_id]
    while frontier and len(seen) < MAX_LINEAGE_ROWS:
        marks = ",".join("?" * len(frontier))
        rows = c.execute(
            f"SELECT p.id FROM sessions k JOIN sessions p ON p.id = k.parent_session_id "
            f"WHERE k.id IN ({marks}) AND p.end_reason = 'compression' "
            f"UNION SELECT k.id FROM sessions k JOIN sessions p ON p.id = k.parent_session_id "
            f"WHERE p.id IN ({marks}) AND p.end_reason = 'compression'",
            (*frontier, *frontier)).fetchall()
        frontier = [r[0] for r in rows if r[0] not in seen]
        seen.update(frontier)
    return sorted(seen)


def _set_archived(c: sqlite3.Connection, session_id: str, archived: bool) -> int:
    ids = compression_component(c, session_id)
    if not ids:
        return 0
    return c.executemany("UPDATE sessions SET archived = ? WHERE id = ?",
                         [(1 if archived else 0, i) for i in ids]).rowcount


def _gate(db_path: Any, command: str, force: bool):
    """The live-writer gate holding the store's write lock through the action (SPEC §11)."""
    return gate_held(db_path, command, force=force)


class ArchiveMixin:
    """Archive / bulk-delete API; needs ``self._write``, ``self._read`` and ``self.db_path``."""

    def set_session_archived(self, session_id: str, archived: bool) -> bool:
        """Archive (or unarchive) a session with its whole compression lineage (ancestors and
        descendants through compression splits). Messages stay; only the listing and count
        defaults change.

        Returns:
            True when at least one row was updated; False for an unknown id.
        """
        sid = clean_text(session_id)
        return self._write(lambda c: _set_archived(c, sid, bool(archived)) > 0,
                           op="set_session_archived")

    def list_prune_candidates(self, older_than_days: float | None = None,
                              source: str | None = None, **filters: Any) -> list[dict]:
        """What :meth:`prune_sessions` with the same arguments would delete, oldest first:
        ``[{"id", "source", "title", "model", "started_at", "ended_at", "message_count",
        "archived"}]``. Read-only (the preview of the CLI's ``prune --dry-run``).

        Raises:
            TypeError: an unknown filter.
        """
        where, params = prune_candidates_sql(older_than_days, source, filters)
        cols = ", ".join(f"s.{c}" for c in CANDIDATE_COLUMNS)
        return self._read(lambda c: [dict(r) for r in c.execute(
            f"SELECT {cols} FROM sessions s WHERE {where} ORDER BY s.started_at, s.id", params)])

    def archive_sessions(self, older_than_days: float | None = None, source: str | None = None,
                         **filters: Any) -> int:
        """Archive every prune candidate (filter ``archived`` defaults to False, so a repeat
        returns 0) with its compression lineage, in one transaction. Live sessions are never
        candidates.

        Returns:
            The number of candidates.
        """
        filters.setdefault("archived", False)
        where, params = prune_candidates_sql(older_than_days, source, filters)

        def fn(c: sqlite3.Connection) -> int:
            ids = [r[0] for r in c.execute(
                f"SELECT s.id FROM sessions s WHERE {where} ORDER BY s.started_at", params)]
            for sid in ids:
                _set_archived(c, sid, True)
            return len(ids)

        return self._write(fn, op="archive_sessions")

    def delete_sessions(self, session_ids: Iterable[Any], sessions_dir: str | None = None, *,
                        force: bool = False) -> int:
        """Delete many sessions in one transaction, each as :meth:`delete_session` does
        (delegate sub-agents with it, other children orphaned); live and archived sessions are
        deleted when listed. Duplicates, non-strings and empty strings are dropped; unknown ids
        are skipped. Behind the live-writer gate (SPEC §11).

        Args:
            session_ids: the ids.
            sessions_dir: also remove their transcript files there.
            force: skip the live-writer gate.
        Returns:
            How many of the ids existed (and were deleted).
        Raises:
            MaintenanceRefused: another process holds the store (without ``force``).
        """
        ids = list(dict.fromkeys(clean_text(s) for s in (session_ids or [])
                                 if isinstance(s, str) and s))
        if not ids:
            return 0

        def fn(c: sqlite3.Connection) -> tuple[int, list[str]]:
            marks = ",".join("?" * len(ids))
            found = [r[0] for r in c.execute(f"SELECT id FROM sessions WHERE id IN ({marks})",
                                             ids)]
            doomed = list(found)
            for sid in found:
                doomed += [d for d in delegate_descendants(c, sid) if d not in doomed]
            remove_sessions(c, doomed)
            return len(found), doomed

        with _gate(self.db_path, "delete", force):
            count, doomed = self._write(fn, op="delete_sessions")
        remove_transcripts(sessions_dir, doomed)
        return count

    def export_session_lineage(self, session_id: str) -> dict | None:
        """The export of a whole compression lineage: a copy of the last segment's
        :meth:`export_session` plus ``segments`` (each export, root first),
        ``lineage_session_ids``, ``message_count`` (all segments) and ``messages`` (all
        segments' messages in lineage order). None for an unknown id."""
        lineage = self.get_compression_lineage(session_id)
        segments = [e for e in (self.export_session(s) for s in lineage) if e is not None]
        if not segments:
            return None
        out = dict(segments[-1])
        out["segments"] = segments
        out["lineage_session_ids"] = [s["id"] for s in segments]
        out["messages"] = [m for s in segments for m in s["messages"]]
        out["message_count"] = len(out["messages"])
        return out

