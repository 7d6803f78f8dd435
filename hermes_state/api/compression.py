"""Compression chains: a context-compression split ends the parent with
``end_reason='compression'`` and continues in a child (SPEC §7; UPSTREAM_API §2.3, §2.4).

- ``get_compression_tip``: walk forward to the live end of the chain.
- ``get_compression_lineage``: the whole chain, root first.
- ``resolve_resume_session_id``: the session a resume should open.

Every walk is bounded and cycle-safe (a visited set), so corrupt parent links never loop.
"""

from __future__ import annotations

import sqlite3

from .kinds import activity, is_branch_child, is_branched, is_continuation
from .text import clean_text

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
