"""Checkpoints of a store's connection under the checkpoint lock (SPEC §4, issue 12, issue 24).

A mixin of :class:`~hermes_state.store.connection.StoreConnection`: the PASSIVE/FULL/RESTART/
TRUNCATE call, the checkpoint lock taken SHARED (EXCLUSIVELY for a drain of a long WAL), and
the skip that never hangs. It needs from the class it is mixed into: ``conn``, ``db_path``,
``generation``, ``journal_mode``, ``_lock``, ``_guard``, ``_shm``, ``_retired``, ``_sticky``,
``_writes``, ``_exposed``, ``_lock_checkpoints``, ``_drain_after`` and ``_check_process``.
"""

from __future__ import annotations

import logging
import sqlite3
import time

from .. import events, failpoints
from ..errors import is_lock_error
from ..processes import checkpoint_lock

log = logging.getLogger("hermes_state")

BUSY_TIMEOUT_S = 1.0  # SPEC §4: not the default 5/30 s
#: A checkpoint that finds more frames than this in the WAL is followed by one that holds the
#: checkpoint lock EXCLUSIVELY (every writer waits) for the frames written beside the first,
#: so that the log ends complete and the next write restarts it (issue 24 item 3; 4,000
#: frames = 16 MiB at the default page size).
DRAIN_FRAMES = 4000
#: The longest a cadence checkpoint (or its drain) queues for SQLite's write lock to take the
#: checkpoint lock (:meth:`Checkpointing._enter_for_checkpoint`): it runs inside a caller's
#: ``append_message``, and as housekeeping it gives way rather than keep that caller waiting in
#: the busy handler behind every other writer (up to the 1 s busy timeout before). Skipped, it is
#: run again by the next cadence of any connection (issue 24 item 5).
CADENCE_QUEUE_S = 0.025
#: The checkpoint triggers that run inside a caller's write (bounded by CADENCE_QUEUE_S).
_IN_A_WRITE = ("cadence", "drain")


class Checkpointing:
    """Checkpoint methods of :class:`~hermes_state.store.connection.StoreConnection` (SPEC §4)."""

    def checkpoint(self, mode: str = "PASSIVE", *, trigger: str = "manual",
                   wait: float = BUSY_TIMEOUT_S) -> tuple | None:
        """``PRAGMA wal_checkpoint(mode)``; returns ``(busy, log, checkpointed)`` or None.

        On an SQLite exposed to the WAL-reset race it runs holding the checkpoint lock SHARED,
        so it overlaps no write transaction of the store that may restart the WAL (those hold
        it EXCLUSIVELY) in any process (issue 12, issue 24 item 3); a lock that stays held
        exclusively for ``wait`` seconds skips this checkpoint (event with
        ``skipped``), it never hangs. Never runs on a retired/replaced/corrupt handle. Failures
        are logged, not raised (SPEC §4: a checkpoint is housekeeping).
        """
        self._check_process()  # type: ignore[attr-defined]
        with self._lock:
            if self._retired or self._sticky is not None or self.journal_mode != "wal":
                return None
            failpoints.hit("checkpoint.before")
            drain = self._wal_needs_drain()
            row = self._checkpoint_once(mode, trigger, wait)
            if drain and row is not None and row[0] == 0 and 0 <= row[2] <= row[1] and (
                    row[2] < row[1] or self._log_extended()):
                # Writes beside it added frames (while it ran, or after the snapshot it
                # copied): copy that tail with every writer held off (a short hold), so the
                # log ends complete and the next write restarts it. Two writers whose
                # cadences coincide otherwise keep every checkpoint one write short of
                # complete, and the log grows without end (checkpoint_starvation).
                drained = self._checkpoint_once(mode, "drain", wait, exclusive=True)
                if drained is None or drained[2] < drained[1]:
                    # A drain a reader keeps from finishing is not tried again before the log
                    # has grown by as much once more (it would hold writers off for nothing).
                    self._drain_after = row[1] + DRAIN_FRAMES
                row = drained or row
            return row

    def _log_extended(self) -> bool:
        """True when the WAL now holds frames no checkpoint has copied (wal-index header
        through SQLite's own ``-shm`` descriptor; True when unreadable)."""
        ix = self._shm.read(self.generation.shm if self.generation is not None else None)
        return ix is None or ix.mx_frame > ix.n_backfill

    def _checkpoint_once(self, mode: str, trigger: str, wait: float, *,
                         exclusive: bool = False) -> tuple | None:
        """One checkpoint holding the lock as :meth:`_enter_for_checkpoint` takes it."""
        took = self._enter_for_checkpoint(
            wait, passive=mode.upper() == "PASSIVE", exclusive=exclusive,
            queue_s=CADENCE_QUEUE_S if trigger in _IN_A_WRITE else None)
        if took is None or took == "running":
            self._skipped_checkpoint(mode, trigger, running=took == "running")
            return None
        try:
            return self._checkpoint_locked(mode, trigger, (
                "exclusive" if exclusive else "shared") if took
                else self._unlocked_checkpoint_why())
        finally:
            if took:
                self._guard.release()  # type: ignore[union-attr]

    def _wal_needs_drain(self) -> bool:
        """True when the WAL holds more than :data:`DRAIN_FRAMES` frames (wal-index header,
        SQLite's own ``-shm`` descriptor), on an exposed SQLite: after the checkpoint beside
        the writers, the frames they added meanwhile are copied with every writer held off,
        so the log ends complete and the next write restarts it. Checkpoints beside writes
        alone cannot finish a log that writes keep extending (issue 24 item 3)."""
        if not self._lock_checkpoints:
            return False
        ix = self._shm.read(self.generation.shm if self.generation is not None else None)
        if ix is None or ix.mx_frame <= max(DRAIN_FRAMES, self._drain_after):
            if ix is not None and ix.mx_frame < self._drain_after - DRAIN_FRAMES:
                self._drain_after = 0  # the log restarted since
            return False
        return True

    def _enter_for_checkpoint(self, wait: float, *, passive: bool = False,
                              exclusive: bool = False,
                              queue_s: float | None = None) -> bool | str | None:
        """Take the checkpoint lock SHARED before a checkpoint (issue 12; issue 24 item 3: a
        checkpoint excludes maintenance and the writes that may restart the WAL, which hold it
        EXCLUSIVELY, and runs beside every other write), or EXCLUSIVELY for one that drains a
        long WAL (:meth:`_wal_needs_drain`: no write runs beside it).

        Args:
            wait: seconds to wait for an exclusive holder (0 = one try).
            passive: a PASSIVE checkpoint: when maintenance (or a write that may restart the
                WAL, i.e. one that follows a complete checkpoint) holds the lock exclusively,
                give up at once, as SQLite's PASSIVE returns busy at once (issue 18).
            queue_s: the longest wait for SQLite's write lock when the lock is busy (None: the
                connection's busy timeout); a cadence checkpoint runs inside a caller's write
                and queues no longer than :data:`CADENCE_QUEUE_S` behind the other writers.
        Returns:
            True when taken (the caller releases it), False when not needed (fixed SQLite, lock
            off or degraded, or already held by this process for maintenance), ``"running"``
            when ``passive`` and another description holds it exclusively, None when it stayed
            busy for ``wait`` seconds.
        """
        if not self._lock_checkpoints or checkpoint_lock.held_here(self.db_path):
            return False
        guard = self._guard
        if guard.try_exclusive() if exclusive else guard.try_shared():  # type: ignore[union-attr]
            return True
        if wait <= 0:
            return None
        if passive and guard.exclusive_elsewhere():  # type: ignore[union-attr]
            return "running"
        # Queue for SQLite's write lock like any writer (its busy timeout): while this
        # connection holds it, no write transaction can start, and a writer holds the
        # checkpoint lock exclusively only while it holds the write lock, so only a writer
        # finishing its COMMIT can still hold it. Nothing is written: rolled back.
        try:
            if queue_s is None:
                self.conn.execute("BEGIN IMMEDIATE")
            else:
                self.conn.execute(f"PRAGMA busy_timeout = {max(1, round(queue_s * 1000))}")
                try:
                    self.conn.execute("BEGIN IMMEDIATE")
                finally:
                    self.conn.execute(f"PRAGMA busy_timeout = {round(BUSY_TIMEOUT_S * 1000)}")
        except sqlite3.OperationalError as exc:
            if is_lock_error(exc):
                return None
            raise
        try:
            # Maintenance that took the lock while this one queued: a PASSIVE gives way.
            if passive and guard.exclusive_elsewhere():  # type: ignore[union-attr]
                return "running"
            take = guard.acquire_exclusive if exclusive else guard.acquire_shared  # type: ignore
            ok = take(wait)
        finally:
            self.conn.execute("ROLLBACK")
        return True if ok else None

    def _unlocked_checkpoint_why(self) -> str:
        if checkpoint_lock.held_here(self.db_path):
            return "exclusive"
        return "not needed" if not self._exposed else "off"

    def _skipped_checkpoint(self, mode: str, trigger: str, *, running: bool = False) -> None:
        why = ("the checkpoint lock is held exclusively (maintenance, or a write that may "
               "restart the WAL after a complete checkpoint)" if running
               else "the checkpoint lock is busy")
        log.info("%s checkpoint of %s skipped: %s", mode, self.db_path, why)
        if events.enabled():
            events.emit("checkpoint", mode=mode, trigger=trigger, seq=self._writes,
                        skipped=why if running else "checkpoint lock busy", lock="busy",
                        holders=[h.as_dict() for h in checkpoint_lock.lock_holders(self.db_path)])

    def _checkpoint_locked(self, mode: str, trigger: str, lock: str) -> tuple | None:
        """The checkpoint call itself, the lock (if any) already held."""
        t_start = time.monotonic()
        failpoints.hit("checkpoint.locked")
        try:
            row = tuple(self.conn.execute(f"PRAGMA wal_checkpoint({mode})").fetchone())
        except sqlite3.Error as exc:
            log.info("%s checkpoint failed (ignored): %s", mode, exc)
            events.enabled() and events.emit("checkpoint", mode=mode, trigger=trigger,
                                             seq=self._writes, error=str(exc), lock=lock,
                                             t_start=t_start, t_end=time.monotonic())
            return None
        t_end = time.monotonic()
        failpoints.hit("checkpoint.after")
        events.enabled() and events.emit("checkpoint", mode=mode, trigger=trigger,
                                         seq=self._writes, busy=row[0], log=row[1],
                                         checkpointed=row[2], lock=lock, t_start=t_start,
                                         t_end=t_end)
        return row
