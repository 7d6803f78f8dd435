"""The capture obligation of a handle whose WAL generation was retired (SPEC §10.3, §10.5;
issue 22 item 1; docs/decisions/0025-capture-obligation.md).

When a handle finds its ``-wal``/``-shm`` deleted or replaced, the writes it acknowledged since the
last checkpoint exist only in the retired log, and only as long as this process keeps its
descriptor of it. The obligation is to keep that descriptor (and the SQLite connection that owns
it) until a complete, VERIFIED capture exists:

* the capture is attempted when the generation is retired, again on every later call on the
  handle, hard at close, once more at process exit; ``doctor`` in another process can complete it
  through ``/proc/<pid>/fd`` (:func:`hermes_state.processes.capture.capture_for_holder`), and the
  next attempt here then finds that capture and is done;
* until then every refusal says exactly what is at risk and which process holds the only copy
  (:meth:`CaptureObligation.at_risk`), and the marker ``state.db.capture-pending-<pid>.json``
  (when the disk takes it) tells ``doctor`` about the obligation, even after this process is gone;
* the connection is never closed while the obligation is pending (that would close the last
  descriptor of the retired log): it is kept, with the obligation, in a process-wide registry
  until a capture succeeds or the process exits; at exit a last attempt is made and a failure is
  printed on stderr as a loss, naming the bytes that are gone.
"""

from __future__ import annotations

import atexit
import logging
import os
import sqlite3
import sys
import threading
import time
from pathlib import Path

from .. import events
from ..errors import EvidenceWriteError
from ..processes.capture import (
    CAPTURE_MAIN_LIMIT,
    capture_retired,
    find_verified_capture,
    remove_marker,
    source_digest,
    wal_summary,
    write_marker,
)
from ..processes.generation import Generation

log = logging.getLogger("hermes_state")

#: Attempts at close (each one a complete capture), and the pauses between them (seconds).
CLOSE_PAUSES_S = (0.05, 0.25, 1.0)
EXIT_PAUSES_S = (0.1, 0.5)

_pending: dict[int, "CaptureObligation"] = {}  # id -> obligation (and the connection it keeps)
_pending_guard = threading.Lock()
_atexit_registered = False


class CaptureObligation:
    """One retired generation this process holds and must capture (module docstring).

    Args:
        db_path: the store.
        recorded: the generation recorded at open (the retired one).
        conn: the SQLite connection that owns the retired descriptors (kept alive while pending).
    """

    def __init__(self, db_path: Path, recorded: Generation, conn: sqlite3.Connection) -> None:
        self.db_path = Path(db_path)
        self.recorded = recorded
        self.conn = conn
        self.capture_dir: str | None = None
        self.error: EvidenceWriteError | None = None
        self.attempts = 0
        self.since = time.time()
        self.done = False
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        """True until a verified capture exists (or the generation held no WAL at all)."""
        return not self.done

    def attempt(self, trigger: str, *, final: bool = False) -> bool:
        """Try once to make a verified capture exist; True when one exists now.

        A capture ``doctor`` made meanwhile counts (found by the WAL's identity and sha256).
        A failure is kept (:attr:`error`), logged, and marked beside the store when possible.
        """
        with self._lock:
            if self.done:
                return True
            self.attempts += 1
            try:
                path = self._already_captured() if self.attempts > 1 else None
                if path is None and self.attempts > 1 and not final:
                    self._room_or_raise()
                path = path or capture_retired(self.db_path, self.recorded, trigger,
                                               keep_partial=final)
            except EvidenceWriteError as exc:
                self._failed(exc, trigger)
                return False
            self.capture_dir = str(path) if path else None
            self.done, self.error = True, None
        remove_marker(self.db_path)
        _forget(self)
        if self.capture_dir:
            events.enabled() and events.emit("capture", dir=self.capture_dir, trigger=trigger,
                                             attempts=self.attempts)
            if self.attempts > 1:
                log.warning("the retired WAL of %s is captured now in %s (attempt %d): nothing "
                            "is lost", self.db_path, self.capture_dir, self.attempts)
        return True

    def _already_captured(self) -> Path | None:
        digest = source_digest(self.recorded.wal, f"{self.db_path}-wal")
        if digest is None:
            return None
        return find_verified_capture(self.db_path, self.recorded.wal, wal_bytes=digest[0],
                                     wal_sha256=digest[1], check_copy=True)

    def _room_or_raise(self) -> None:
        """A retry on a disk that clearly lacks the room is not tried (it would copy part of
        the store again on every call): named as a failure like the attempt would be."""
        try:
            st = os.statvfs(self.db_path.parent)
        except OSError:
            return
        free = st.f_bavail * st.f_frsize
        held = self.held() or {}
        try:
            main = min(os.stat(self.db_path).st_size, CAPTURE_MAIN_LIMIT)
        except OSError:
            main = 0
        need = int(held.get("bytes") or 0) * 2 + main + (1 << 16)  # the WAL, its -shm, headroom
        if free < need:
            raise EvidenceWriteError(
                f"the capture of the retired WAL needs about {need} bytes in "
                f"{self.db_path.parent} and only {free} are free (No space left on device)",
                "the attempt was not made; it is retried at the next call",
                path=str(self.db_path.parent))

    def _failed(self, exc: EvidenceWriteError, trigger: str) -> None:
        first = self.error is None or self.error.user_message != exc.user_message
        self.error = exc
        held = self.held()
        marker = write_marker(self.db_path, {
            "state": "pending", "database": str(self.db_path), "since": self.since,
            "attempts": self.attempts, "trigger": trigger, "error": exc.user_message,
            "wal": {"identity": list(self.recorded.wal or ()), **(held or {})}})
        _remember(self)
        if first:  # once per distinct cause: a refused call loop must not flood the log
            log.error("%s%s", self.at_risk() or "", "" if marker else
                      " (the obligation marker could not be written beside the store either)")
        events.enabled() and events.emit("capture_failed", trigger=trigger,
                                         attempts=self.attempts, error=exc.user_message,
                                         marker=str(marker) if marker else None)

    def held(self) -> dict | None:
        """``{"bytes", "frames"}`` of the retired WAL this process holds, or None."""
        return wal_summary(self.recorded.wal, f"{self.db_path}-wal")

    def at_risk(self) -> str | None:
        """What is not saved yet and where, for the refusal's user layer; None when captured."""
        if self.done:
            return None
        held = self.held() or {}
        size = (f" ({held.get('frames', '?')} WAL frames, {held.get('bytes', '?')} bytes)"
                if held else "")
        why = (f"; writing its capture failed: {self.error.user_message}" if self.error
               else "")
        return (f"The writes this process acknowledged since the last checkpoint are NOT saved "
                f"yet: they exist only in that deleted log{size}, which this process (PID "
                f"{os.getpid()}) holds open{why}. The capture is retried at every call, at "
                "close and by `doctor`; if this process exits before it succeeds, those writes "
                "are lost.")


def _remember(ob: CaptureObligation) -> None:
    """Keep the obligation (and its connection: the retired descriptors) until done or exit."""
    global _atexit_registered
    with _pending_guard:
        _pending[id(ob)] = ob
        if not _atexit_registered:
            atexit.register(_at_exit)
            _atexit_registered = True


def _forget(ob: CaptureObligation) -> None:
    with _pending_guard:
        _pending.pop(id(ob), None)


def pending_obligations() -> list[CaptureObligation]:
    """The obligations of this process not fulfilled yet."""
    with _pending_guard:
        return list(_pending.values())


def close_attempts(ob: CaptureObligation) -> bool:
    """At close: try hard (:data:`CLOSE_PAUSES_S`); True when a capture exists now."""
    if ob.attempt("close"):
        return True
    for pause in CLOSE_PAUSES_S:
        time.sleep(pause)
        if ob.attempt("close", final=pause == CLOSE_PAUSES_S[-1]):
            return True
    log.critical("closing %s without a capture of its retired WAL: the connection is kept open "
                 "until this process exits so the log survives; run `doctor` now to save it. %s",
                 ob.db_path, ob.at_risk())
    return False


def _at_exit() -> None:
    """Last attempts before the process exits; a failure is printed as the loss it is."""
    for ob in pending_obligations():
        ok = ob.attempt("exit")
        for pause in EXIT_PAUSES_S:
            if ok:
                break
            time.sleep(pause)
            ok = ob.attempt("exit", final=pause == EXIT_PAUSES_S[-1])
        if ok:
            continue
        held = ob.held() or {}
        lost = (f"hermes-state: PID {os.getpid()} is exiting without a capture of the retired "
                f"WAL of {ob.db_path}: the writes it acknowledged since the last checkpoint "
                f"({held.get('frames', '?')} WAL frames, {held.get('bytes', '?')} bytes) are "
                f"LOST with it. Last error: "
                f"{ob.error.user_message if ob.error else 'unknown'}")
        write_marker(ob.db_path, {"state": "lost", "database": str(ob.db_path),
                                  "since": ob.since, "exited_at": time.time(),
                                  "attempts": ob.attempts, "wal": {
                                      "identity": list(ob.recorded.wal or ()), **held},
                                  "error": ob.error.user_message if ob.error else None})
        try:
            print(lost, file=sys.stderr, flush=True)
        except (OSError, ValueError):
            pass
        log.critical(lost)
