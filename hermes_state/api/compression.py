"""Compression chains: a context-compression split ends the parent with
``end_reason='compression'`` and continues in a child (SPEC §7; UPSTREAM_API §2.3, §2.4).

- ``get_compression_tip``: walk forward to the live end of the chain.
- ``get_compression_lineage``: the whole chain, root first.
- ``resolve_resume_session_id``: the session a resume should open.

Every walk is bounded and cycle-safe (a visited set), so corrupt parent links never loop.

Coordination of compressors: the per-session lease, the failure cooldown and the fallback
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
from .filters import activity, is_branch_child, is_branched, is_continuation
from .text import clean_text, int_arg

MAX_CHAIN_HOPS = 100
MAX_RESUME_HOPS = 32

_TIP_CHILDREN = f"""
SELECT k.id FROM sessions k
WHERE k.parent_session_id = ? AND {is_continuation('k')}
ORDER BY COALESCE(k.end_reason = 'compression', 0) DESC, (k.ended_at IS NULL) DESC,
         {activity('k')} DESC, k.started_at DESC, k.id DESC
"""


def compression_tip(c: sqlite3.Connection, session_id: str) -> str:
    """The last session reached walking forward through compression continuations.

    At each compression-ended node the next is the child (not a branch, delegate or tool
    session) that itself ended with compression, else a live one, else any; ties by newest
    activity, then ``started_at`` and ``id`` descending. An uncompressed or unknown id is
    its own tip.
    """
    cur, seen = session_id, {session_id}
    for _ in range(MAX_CHAIN_HOPS):
        row = c.execute("SELECT end_reason FROM sessions WHERE id = ?", (cur,)).fetchone()
        if row is None or row[0] != "compression":
            break
        nxt = next((r[0] for r in c.execute(_TIP_CHILDREN, (cur,)) if r[0] not in seen), None)
        if nxt is None:
            break
        cur = nxt
        seen.add(cur)
    return cur


def compression_lineage(c: sqlite3.Connection, session_id: str) -> list[str]:
    """The compression chain containing ``session_id``, root first (UPSTREAM_API §2.4)."""
    row = c.execute(f"SELECT s.id, {is_branch_child('s')} AS branch FROM sessions s "
                    "WHERE s.id = ?", (session_id,)).fetchone()
    if row is None:
        return []
    if row["branch"]:
        return [session_id]
    cur, seen = session_id, {session_id}
    for _ in range(MAX_CHAIN_HOPS):
        parent = c.execute("SELECT p.id, p.end_reason FROM sessions k JOIN sessions p "
                           "ON p.id = k.parent_session_id WHERE k.id = ?", (cur,)).fetchone()
        if parent is None or parent["end_reason"] != "compression" or parent["id"] in seen:
            break
        cur = parent["id"]
        seen.add(cur)
    chain, seen = [cur], {cur}
    for _ in range(MAX_CHAIN_HOPS):
        end = c.execute("SELECT end_reason FROM sessions WHERE id = ?", (cur,)).fetchone()
        if end is None or end[0] != "compression":
            break
        nxt = next((r[0] for r in c.execute(
            f"SELECT k.id FROM sessions k WHERE k.parent_session_id = ? AND NOT "
            f"{is_branched('k')} ORDER BY k.started_at, k.id", (cur,)) if r[0] not in seen), None)
        if nxt is None:
            break
        chain.append(nxt)
        seen.add(nxt)
        cur = nxt
    return chain if session_id in chain else [session_id]


def _has_messages(c: sqlite3.Connection, session_id: str) -> bool:
    row = c.execute("SELECT COALESCE(message_count, 0) > 0 OR EXISTS (SELECT 1 FROM messages m "
                    "WHERE m.session_id = s.id) FROM sessions s WHERE s.id = ?",
                    (session_id,)).fetchone()
    return bool(row and row[0])


class CompressionMixin:
    """Compression-chain reads; needs ``self._read(fn)``."""

    def get_compression_tip(self, session_id: str) -> str:
        """The live end of the session's compression chain (:func:`compression_tip`)."""
        sid = clean_text(session_id)
        return self._read(lambda c: compression_tip(c, sid))

    def get_compression_lineage(self, session_id: str) -> list[str]:
        """The chain containing the session, root first.

        Unknown id → ``[]``; a branch child → ``[id]``. Otherwise walk up through parents that
        ended with compression to the root, then down from it while the current session ended
        with compression, to its first non-branch child by ``started_at``. ``[id]`` when the
        chain found does not contain the id.
        """
        sid = clean_text(session_id)
        return self._read(lambda c: compression_lineage(c, sid))

    def resolve_resume_session_id(self, session_id: str) -> str:
        """The session a resume of ``session_id`` should open.

        From the compression tip, follow the most recently started child (not a branch, delegate
        or tool session; at most 32 hops) and return the deepest session holding a message, else
        the tip. An empty id is returned unchanged.
        """
        if not session_id:
            return session_id
        sid = clean_text(session_id)

        def fn(c: sqlite3.Connection) -> str:
            tip = compression_tip(c, sid)
            best = tip if _has_messages(c, tip) else None
            cur, seen = tip, {tip}
            for _ in range(MAX_RESUME_HOPS):
                nxt = next((r[0] for r in c.execute(
                    f"SELECT k.id FROM sessions k WHERE k.parent_session_id = ? AND "
                    f"{is_continuation('k')} ORDER BY k.started_at DESC, k.id DESC", (cur,))
                    if r[0] not in seen), None)
                if nxt is None:
                    break
                cur = nxt
                seen.add(cur)
                if _has_messages(c, cur):
                    best = cur
            return best or tip

        return self._read(fn)



log = logging.getLogger("hermes_state")

DEFAULT_TTL_S = 300.0
_PID = re.compile(r"\bpid=(\d{1,30})\b")
#: Linux's largest pid (``pid_max`` cannot exceed 2**22); psutil cannot even ask beyond a C int.
PID_MAX = 1 << 22
_HOST = re.compile(r"\bhost=([^\s,;]+)")


def holder_is_dead(holder: str | None) -> bool:
    """True when ``holder`` names (``pid=<n>``) a local process that no longer exists. A holder
    naming another host (``host=<name>``) or no pid is never judged dead."""
    if not holder or not isinstance(holder, str):
        return False  # a holder of another type (a foreign client's BLOB) names no process
    pid = _PID.search(holder)
    if pid is None or not 0 < int(pid.group(1)) <= PID_MAX:
        return False  # a pid no process can have proves nothing (issue 22 item 7)
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
        value = max(0, int_arg(streak, "streak"))
        self._write(lambda c: c.execute(
            "UPDATE sessions SET compression_fallback_streak = ? WHERE id = ?",
            (value, clean_text(session_id))), op="set_compression_fallback_streak")
