"""A time bound on the loss window at ``synchronous=NORMAL`` (SPEC §4; issue 24 item 1).

At NORMAL a commit writes its frames to the WAL without an fsync; SQLite syncs the WAL only
when a checkpoint copies it. So the commits since the last checkpoint can roll back on a power
cut, for as long as no checkpoint comes: hours for a gateway that wrote 49 messages and went
quiet. Here every connection that committed has its WAL made durable at most
:data:`SYNC_DELAY_S` after its first commit not yet synced: one process-wide thread
(:class:`WalSyncer`) waits for the earliest due connection and calls its
:meth:`~hermes_state.store.connection.StoreConnection.sync_wal`, which ``fdatasync``\\ s the
``-wal`` through the descriptor SQLite itself holds (found by identity in ``/proc/self/fd``:
no descriptor of a store file is opened or closed, SPEC §4), outside every lock the writers
take, and never for a retired generation. docs/decisions/0024-wal-sync.md has the argument.

``HERMES_STATE_WAL_SYNC_S`` sets the delay in seconds (``off`` turns it off: the benchmark's
reference and the proof that the power-cut scenarios fail without it).
"""

from __future__ import annotations

import atexit
import errno
import logging
import os
import threading
import time
import weakref

from .. import events, failpoints
from ..processes.generation import own_descriptors

log = logging.getLogger("hermes_state")

ENV_VAR = "HERMES_STATE_WAL_SYNC_S"
#: Seconds between a connection's first unsynced commit and the sync that covers it.
SYNC_DELAY_S = 1.0
#: The longest delay ``HERMES_STATE_WAL_SYNC_S`` may ask for (an hour); beyond it, or not a
#: positive number, the default is used with a warning (never a silently unbounded window).
MAX_DELAY_S = 3600.0


def delay_s() -> float | None:
    """The configured delay in seconds (:data:`SYNC_DELAY_S` unless ``HERMES_STATE_WAL_SYNC_S``
    says otherwise), or None when switched off (``off``/``0``/``no``/``false``). A value that
    is not a number in (0, :data:`MAX_DELAY_S`] is logged and the default used."""
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if not raw:
        return SYNC_DELAY_S
    if raw in ("off", "no", "false", "0"):
        return None
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not (0 < value <= MAX_DELAY_S):  # also NaN and infinities
        log.warning("%s=%r is not a number of seconds in (0, %g] (or 'off'); using %g s",
                    ENV_VAR, raw, MAX_DELAY_S, SYNC_DELAY_S)
        return SYNC_DELAY_S
    return value


class WalSyncer:
    """One daemon thread per process syncing the WALs of the connections that are due.

    Connections are held weakly: one dropped without ``close()`` is simply forgotten.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._due: "weakref.WeakKeyDictionary[object, float]" = weakref.WeakKeyDictionary()
        self._thread: threading.Thread | None = None
        self._pid = os.getpid()

    def schedule(self, handle: object, delay: float) -> None:
        """Sync ``handle`` (``sync_wal()``) ``delay`` seconds from now, unless already due."""
        with self._cond:
            if self._thread is None or self._pid != os.getpid() or not self._thread.is_alive():
                self._pid = os.getpid()  # after a fork the parent's thread is not ours
                self._thread = threading.Thread(target=self._run, name="hermes-state-wal-sync",
                                                daemon=True)
                self._thread.start()
            if handle not in self._due:
                self._due[handle] = time.monotonic() + delay
                self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    due = [h for h, t in list(self._due.items()) if t <= now]
                    if due:
                        for h in due:
                            self._due.pop(h, None)
                        break
                    nxt = min(self._due.values(), default=None)
                    self._cond.wait(None if nxt is None else max(0.0, nxt - now))
            for h in due:
                try:
                    h.sync_wal()  # type: ignore[attr-defined]
                except Exception as exc:  # noqa: BLE001 - housekeeping never kills the thread
                    log.warning("WAL sync failed (ignored): %s", exc)
            del due


    def flush(self) -> None:
        """Sync every connection still due now (at interpreter exit: a process that ends
        without ``close()`` still has its commits made durable, not only after the delay)."""
        if self._pid != os.getpid():
            return
        with self._cond:
            due = list(self._due.keys())
            self._due.clear()
        for h in due:
            try:
                h.sync_wal()  # type: ignore[attr-defined]
            except Exception as exc:  # noqa: BLE001 - exit-time housekeeping
                log.warning("WAL sync at exit failed (ignored): %s", exc)

    def _after_fork_in_child(self) -> None:
        """A forked child starts with no thread, no due handles and fresh locks (its copy of
        the parent's may have been held mid-use)."""
        self._cond = threading.Condition()
        self._due = weakref.WeakKeyDictionary()
        self._thread = None
        self._pid = os.getpid()


SYNCER = WalSyncer()
atexit.register(SYNCER.flush)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=SYNCER._after_fork_in_child)


class WalSyncing:
    """Mixin of :class:`~hermes_state.store.connection.StoreConnection`: the WAL sync of the
    loss window's time bound. It needs ``db_path``, ``generation``, ``_sync_pending``,
    ``_sync_lock``, ``_wal_fd``, ``_closed``, ``_retired``, ``_sticky``, ``_writes`` and
    ``_pid``."""

    def sync_wal(self) -> bool:
        """Make every commit of this connection so far durable: ``fdatasync`` of the ``-wal``
        through SQLite's own descriptor (SPEC §4: nothing opened or closed). Called by the
        :mod:`~hermes_state.store.wal_sync` thread; takes no lock a writer takes, and never
        syncs a retired generation or a closed handle.

        Returns:
            True when the WAL was synced. A failed sync is logged and emitted (``wal_sync``
            with ``error``), never raised.
        """
        if os.getpid() != self._pid:
            return False  # a forked child's copy of the parent's handle: never touched
        with self._sync_lock:
            if not self._sync_pending:
                return False
            self._sync_pending = False  # before the sync: a commit after this schedules again
            if self._closed or self._retired or self._sticky is not None:
                return False
            return self._fdatasync_wal("idle")

    def sync_left_behind(self) -> bool:
        """At a writable open at NORMAL: ``fdatasync`` a ``-wal`` that holds frames, so
        commits a writer left unsynced (killed by ``kill -9``, or ended without ``close()``
        before its sync was due) are durable from here on (SPEC §4). Returns True when synced.
        """
        if self._sync_delay is None:  # type: ignore[attr-defined]
            return False
        try:
            if os.lstat(f"{self.db_path}-wal").st_size <= 32:  # the header alone: no frames
                return False
        except OSError:
            return False
        with self._sync_lock:
            return self._fdatasync_wal("open")

    def _fdatasync_wal(self, trigger: str) -> bool:
        t_start = time.monotonic()
        for _ in range(3):
            fd = self._own_wal_fd()
            if fd is None:
                return False
            failpoints.hit("wal_sync.before")
            try:
                os.fdatasync(fd)
                # The descriptor may be another connection's of this process (the same
                # file: as good), closed and its number reused meanwhile: the sync counts
                # only when it still names this generation's -wal afterwards.
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) == tuple(self.generation.wal):  # type: ignore
                    break
            except OSError as exc:
                if exc.errno != errno.EBADF:
                    return self._sync_failed(trigger, exc, t_start)
            self._wal_fd = None  # look it up again
        else:
            return self._sync_failed(trigger, OSError(errno.EBADF, "no descriptor of this "
                                                      "generation's -wal stayed open"), t_start)
        events.enabled() and events.emit("wal_sync", trigger=trigger, t_start=t_start,
                                         t_end=time.monotonic(), seq=self._writes)
        return True

    def _sync_failed(self, trigger: str, exc: OSError, t_start: float) -> bool:
        """Log and emit a failed sync (``wal_sync`` with ``error``); returns False."""
        log.error("fdatasync of %s-wal failed: %s (commits since the last checkpoint may "
                  "not survive a power cut)", self.db_path, exc)
        events.enabled() and events.emit("wal_sync", trigger=trigger, error=str(exc),
                                         t_start=t_start, t_end=time.monotonic())
        return False

    def _own_wal_fd(self) -> int | None:
        """SQLite's descriptor of this generation's ``-wal``, or None when the ``-wal`` at the
        path is another file (a retired generation: never synced, SPEC §10.5) or no
        descriptor of ours has it."""
        gen = self.generation
        if gen is None or gen.wal is None:
            return None
        want = tuple(gen.wal)
        try:
            st = os.lstat(f"{self.db_path}-wal")
            if (st.st_dev, st.st_ino) != want:
                return None
        except OSError:
            return None
        fd = self._wal_fd
        if fd is not None:
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) == want:
                    return fd
            except OSError:
                pass
        fds = own_descriptors(want)
        self._wal_fd = fds[0] if fds else None
        return self._wal_fd

