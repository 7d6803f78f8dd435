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
take, and never for a retired generation. docs/decisions/wal-sync.md has the argument.

``HERMES_STATE_WAL_SYNC_S`` sets the delay in seconds (``off`` turns it off: the benchmark's
reference and the proof that the power-cut scenarios fail without it).
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref

log = logging.getLogger("hermes_state")

ENV_VAR = "HERMES_STATE_WAL_SYNC_S"
#: Seconds between a connection's first unsynced commit and the sync that covers it.
SYNC_DELAY_S = 1.0


def delay_s() -> float | None:
    """The configured delay (:data:`SYNC_DELAY_S` unless ``HERMES_STATE_WAL_SYNC_S`` says
    otherwise), or None when switched off (``off``/``0``/``no``/``false``)."""
    raw = os.environ.get(ENV_VAR, "").strip().lower()
    if not raw:
        return SYNC_DELAY_S
    if raw in ("off", "no", "false", "0"):
        return None
    try:
        value = float(raw)
    except ValueError:
        log.warning("%s=%r is not a number of seconds; using %g s", ENV_VAR, raw, SYNC_DELAY_S)
        return SYNC_DELAY_S
    return value if value > 0 else None


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


SYNCER = WalSyncer()
