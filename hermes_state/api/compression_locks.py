"""Compression coordination: the per-session lease, the failure cooldown and the fallback
streak (SPEC §2.3 ``compression_locks``; UPSTREAM_API §2.10).

The lease is a row of ``compression_locks``: acquiring deletes an expired row, or one whose
holder string carries ``pid=<n>`` of a process of this host that provably no longer exists
(SPEC §2.3: a crashed compressor must not block a session for the whole TTL), then inserts ours
if absent, and succeeds iff the row is now ours, all in one write transaction.
"""

from __future__ import annotations

import logging
import re
import socket
import sqlite3
import time

from ..errors import HermesStateError
from .text import clean_text

log = logging.getLogger("hermes_state")

DEFAULT_TTL_S = 300.0
_PID = re.compile(r"\bpid=(\d+)\b")
_HOST = re.compile(r"\bhost=([^\s,;]+)")


def holder_is_dead(holder: str | None) -> bool:
    """True when ``holder`` names (``pid=<n>``) a local process that no longer exists. A holder
    naming another host (``host=<name>``) or no pid is never judged dead."""
    if not holder:
        return False
    pid = _PID.search(holder)
    if pid is None:
        return False
    host = _HOST.search(holder)
    if host is not None and host.group(1) != socket.gethostname():
        return False
    import psutil

    return not psutil.pid_exists(int(pid.group(1)))


class CompressionLocksMixin:
    """Compression lease / cooldown / streak API; needs ``self._write`` and ``self._read``."""

    def try_acquire_compression_lock(self, session_id: str, holder: str,
                                     ttl_seconds: float = DEFAULT_TTL_S) -> bool:
        """Take the session's compression lease for ``ttl_seconds`` (module docstring).

        Returns:
            True when ``holder`` holds the lease now (also when it already did); False when
            another live holder has it, for an empty id, or on an SQLite error.
        """
        if not session_id:
            return False
        sid, who = clean_text(session_id), clean_text(holder)

        def fn(c: sqlite3.Connection) -> bool:
            now = time.time()
            row = c.execute("SELECT holder, expires_at FROM compression_locks WHERE "
                            "session_id = ?", (sid,)).fetchone()
            if row is not None and (row[1] is None or row[1] < now or
                                    (row[0] != who and holder_is_dead(row[0]))):
                c.execute("DELETE FROM compression_locks WHERE session_id = ?", (sid,))
            c.execute("INSERT OR IGNORE INTO compression_locks(session_id, holder, acquired_at, "
                      "expires_at) VALUES (?, ?, ?, ?)", (sid, who, now, now + ttl_seconds))
            got = c.execute("SELECT holder FROM compression_locks WHERE session_id = ?",
                            (sid,)).fetchone()
            return got is not None and got[0] == who

        try:
            return self._write(fn, op="try_acquire_compression_lock")
        except HermesStateError:
            raise
        except sqlite3.Error as exc:
            log.warning("compression lock for %s not acquired: %s", sid, exc)
            return False

    def refresh_compression_lock(self, session_id: str, holder: str,
                                 ttl_seconds: float = DEFAULT_TTL_S) -> bool:
        """Extend the lease to now + ``ttl_seconds`` if ``holder`` still holds it unexpired.

        Returns:
            False for another holder or an expired lease (another holder may reclaim it).
        """
        now = time.time()
        return self._write(lambda c: c.execute(
            "UPDATE compression_locks SET expires_at = ? WHERE session_id = ? AND holder = ? "
            "AND expires_at >= ?", (now + ttl_seconds, clean_text(session_id),
                                    clean_text(holder), now)).rowcount > 0,
            op="refresh_compression_lock")

    def release_compression_lock(self, session_id: str, holder: str) -> None:
        """Drop the lease if ``holder`` holds it (idempotent; never another holder's)."""
        self._write(lambda c: c.execute(
            "DELETE FROM compression_locks WHERE session_id = ? AND holder = ?",
            (clean_text(session_id), clean_text(holder))), op="release_compression_lock")

    def get_compression_lock_holder(self, session_id: str) -> str | None:
        """The holder of the session's unexpired lease, or None."""
        row = self._read(lambda c: c.execute(
            "SELECT holder FROM compression_locks WHERE session_id = ? AND expires_at >= ?",
            (clean_text(session_id), time.time())).fetchone())
        return None if row is None else row[0]

    # ------------------------------------------------------------------ failure cooldown
    def record_compression_failure_cooldown(self, session_id: str, cooldown_until: float,
                                            error: str | None = None) -> None:
        """Do not try compressing the session again before ``cooldown_until`` (epoch s);
        ``error`` says why. An SQLite error is logged, not raised."""
        try:
            self._write(lambda c: c.execute(
                "UPDATE sessions SET compression_failure_cooldown_until = ?, "
                "compression_failure_error = ? WHERE id = ?",
                (cooldown_until, clean_text(error), clean_text(session_id))),
                op="record_compression_failure_cooldown")
        except HermesStateError:
            raise
        except sqlite3.Error as exc:
            log.warning("compression cooldown of %s not recorded: %s", session_id, exc)

    def get_compression_failure_cooldown(self, session_id: str) -> dict | None:
        """``{"cooldown_until", "remaining_seconds", "error"}`` while the cooldown runs, else
        None (expired, none, or unknown session)."""
        row = self._read(lambda c: c.execute(
            "SELECT compression_failure_cooldown_until, compression_failure_error "
            "FROM sessions WHERE id = ?", (clean_text(session_id),)).fetchone())
        now = time.time()
        if row is None or row[0] is None or row[0] <= now:
            return None
        return {"cooldown_until": row[0], "remaining_seconds": row[0] - now, "error": row[1]}

    def clear_compression_failure_cooldown(self, session_id: str) -> None:
        """Forget the cooldown and its error."""
        self._write(lambda c: c.execute(
            "UPDATE sessions SET compression_failure_cooldown_until = NULL, "
            "compression_failure_error = NULL WHERE id = ?", (clean_text(session_id),)),
            op="clear_compression_failure_cooldown")

    # ------------------------------------------------------------------ fallback streak
    def get_compression_fallback_streak(self, session_id: str) -> int:
        """Consecutive compressions that fell back; 0 for a missing row, bad data or a closed
        store."""
        try:
            row = self._read(lambda c: c.execute(
                "SELECT compression_fallback_streak FROM sessions WHERE id = ?",
                (clean_text(session_id),)).fetchone())
            return max(0, int((row[0] if row else 0) or 0))
        except (sqlite3.Error, TypeError, ValueError):
            return 0

    def set_compression_fallback_streak(self, session_id: str, streak: int) -> None:
        """Store ``max(0, int(streak))``."""
        value = max(0, int(streak))
        self._write(lambda c: c.execute(
            "UPDATE sessions SET compression_fallback_streak = ? WHERE id = ?",
            (value, clean_text(session_id))), op="set_compression_fallback_streak")
