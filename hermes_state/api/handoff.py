"""Session handoff between front-ends (UPSTREAM_API §2.9): a small state machine on the
session row, ``handoff_state`` NULL → ``pending`` → ``running`` → ``completed`` | ``failed``,
with ``handoff_platform`` and ``handoff_error``. Each transition is one conditional UPDATE, so two
claimers never both win."""

from __future__ import annotations

import sqlite3

from .sessions import session_row
from .text import clean_text

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
