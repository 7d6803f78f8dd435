"""The checkpoint lock around one write transaction of a store's connection (SPEC §4; issue 12,
issue 18, issue 24 item 3).

A mixin of :class:`~hermes_state.store.connection.StoreConnection`: the lock taken right after
``BEGIN IMMEDIATE`` in the mode the wal-index header asks (SHARED, EXCLUSIVE for a write that may
restart the WAL), the short wait holding SQLite's write lock, the wait holding nothing, and the
named lock error. It needs from the class it is mixed into: ``conn``, ``db_path``,
``generation``, ``_guard``, ``_shm``, ``_lock_checkpoints``, ``_lock_mode``, ``_wal_seen`` and
``_tx_taken``. The order of acquisition and the deadlock argument are in
docs/decisions/0001-checkpoint-lock.md.
"""

from __future__ import annotations

import sqlite3

from .. import events, failpoints
from ..errors import SQLITE_BUSY
from ..processes import checkpoint_lock
from .checkpointing import BUSY_TIMEOUT_S

__all__ = ["HOLD_WAIT_S", "CheckpointLockMet", "WriteLocking"]

#: How long a write that meets a checkpoint right after ``BEGIN IMMEDIATE`` waits for it while
#: keeping SQLite's write lock (a PASSIVE checkpoint takes a few ms). Past this it rolls back and
#: waits holding nothing, so a holder that needs the write lock (TRUNCATE, maintenance) is
#: never kept waiting longer (docs/decisions/0001-checkpoint-lock.md; issue 18).
HOLD_WAIT_S = 0.025


class CheckpointLockMet(Exception):
    """Internal: right after BEGIN IMMEDIATE a checkpoint held the checkpoint lock."""


class WriteLocking:
    """Checkpoint-lock methods of the write path of
    :class:`~hermes_state.store.connection.StoreConnection` (SPEC §4)."""

    def _enter_shared(self) -> bool:
        """Take the checkpoint lock for one write transaction (issue 12), waiting at most
        :data:`HOLD_WAIT_S` while SQLite's write lock is held (nothing written yet).

        SHARED for a write that cannot restart the WAL (it excludes maintenance only);
        EXCLUSIVE, on an SQLite with the WAL-reset race, for one that may (it excludes every
        checkpoint too, which holds the lock SHARED): see :meth:`_write_may_restart` and
        docs/decisions/0001-checkpoint-lock.md (issue 24 item 3).

        Returns:
            True when taken (the caller releases it); False when there is nothing to take (lock
            off or degraded, or this process holds it exclusively for maintenance).
        Raises:
            CheckpointLockMet: a checkpoint (or maintenance) holds it now.
        """
        guard = self._guard
        if guard is None or guard.fd is None or checkpoint_lock.held_here(self.db_path):
            return False
        # read where it decides (an exposed SQLite) or is evidence (the write event)
        may_restart = self._lock_checkpoints and self._write_may_restart() \
            if not events.enabled() else self._write_may_restart()
        exclusive = self._lock_checkpoints and may_restart
        self._lock_mode = "exclusive" if exclusive else "shared"
        guard.last_taken = None
        if guard.try_now(exclusive) or (
                guard.acquire_exclusive_polling if exclusive else guard.acquire_shared_polling)(
                HOLD_WAIT_S, before_try=lambda: failpoints.hit("write.lock_wait")):
            # the directory stamp the lock's identity check took, after locking: the
            # generation check's too (one stat per write, issue 24 item 4)
            self._tx_taken = guard.last_taken
            return True
        raise CheckpointLockMet()

    def _write_may_restart(self) -> bool:
        """Whether the write transaction this connection just began (``BEGIN IMMEDIATE``
        returned) can restart the WAL, from the wal-index header read through SQLite's own
        ``-shm`` descriptor (:mod:`hermes_state.store.wal_index`; True when unreadable).

        Holding SQLite's write lock, ``mxFrame`` is this snapshot's and ``nBackfill`` only
        grows: ``nBackfill < mxFrame`` now means it was so when the snapshot began, so the
        snapshot did not take read slot 0 and ``walRestartLog`` cannot restart the log.
        The header seen is kept for the ``write`` event (``wal``).
        """
        seen = self._wal_seen = self._shm.read(
            self.generation.shm if self.generation is not None else None)
        return True if seen is None else seen.may_restart

    def _wait_lock_free(self) -> None:
        """Wait, holding nothing, until the lock could be had in the mode the last attempt
        needed (at most the busy timeout).

        Raises:
            sqlite3.OperationalError: still held; coded SQLITE_BUSY (a lock error of SPEC §4:
                jittered retry) with ``checkpoint_lock = True``.
        """
        guard = self._guard
        if guard is None or guard.fd is None:
            return
        take = guard.acquire_exclusive if self._lock_mode == "exclusive" else \
            guard.acquire_shared
        if not take(BUSY_TIMEOUT_S):
            raise self._lock_busy_error()
        guard.release()

    def _lock_busy_error(self) -> sqlite3.OperationalError:
        found = checkpoint_lock.lock_holders(self.db_path)
        if self._lock_mode == "exclusive":
            who = ", ".join(h.line() for h in found if not h.waiting) or "another process"
            exc = sqlite3.OperationalError(
                f"the store's checkpoint lock is held by {who} (a checkpoint, a maintenance "
                f"command or a write); this write may restart the WAL and needs it alone")
        else:
            who = ", ".join(h.line() for h in found if h.mode == "exclusive") or \
                "another process"
            exc = sqlite3.OperationalError(
                f"the store's checkpoint lock is held exclusively by {who} (a maintenance "
                f"command, or a write that may restart the WAL)")
        exc.sqlite_errorcode = SQLITE_BUSY  # type: ignore[attr-defined]
        exc.sqlite_errorname = "SQLITE_BUSY"  # type: ignore[attr-defined]
        exc.checkpoint_lock = True  # type: ignore[attr-defined]
        return exc

    def _unlocked_why(self) -> str:
        """The ``lock`` field of a write event taken without the shared lock."""
        if checkpoint_lock.held_here(self.db_path):
            return "exclusive"
        return "off"
