"""``doctor``'s part of the capture obligation (SPEC §9, §10.3; issue 22 item 1).

A process that holds a retired WAL holds the only copy of the writes it acknowledged since the
last checkpoint until a verified capture exists. ``doctor`` makes sure one does: for every such
holder it looks for a verified capture of exactly that log (identity, size, sha256 of the copy
and of the held descriptor read through ``/proc/<pid>/fd``) and, when there is none, writes it
itself from ``/proc/<pid>/fd/<n>`` (the holder's next call then finds it and its obligation
ends). When that fails too, doctor says what is at risk, in which process, and what to do.

It also reads the obligation markers ``state.db.capture-pending-<pid>.json``: a marker whose
process is gone without a capture is a loss, reported as one (never as "nothing is lost").
"""

from __future__ import annotations

from pathlib import Path

from ..errors import EvidenceWriteError
from ..processes.capture import (
    capture_for_holder,
    find_verified_capture,
    marker_alive,
    read_markers,
    uncaptured,
)

OK, WARN, ISSUE = "ok", "warn", "issue"


def rescue(db: Path, retired: list, report) -> None:
    """Make sure each holder's retired WAL has a verified capture; report each one.

    Args:
        db: the store.
        retired: :class:`~hermes_state.processes.holders.Holder` holding a retired generation.
        report: the :class:`~hermes_state.operator.doctor.DoctorReport` to add findings to.
    """
    done = report.stats.setdefault("captures", [])
    for h in retired:
        held = uncaptured(db, h.pid)
        try:
            capture, made = capture_for_holder(db, h.pid)
        except EvidenceWriteError as exc:
            size = (f" ({held['frames']} WAL frames, {held['bytes']} bytes)" if held else "")
            done.append({"pid": h.pid, "capture": None, "error": exc.user_message})
            report.add(ISSUE, f"PID {h.pid} ({h.command}) holds the ONLY copy of writes it "
                              f"acknowledged: its deleted state.db-wal{size} is not captured",
                       f"doctor could not capture it: {exc.user_message}",
                       f"fix: free space or fix the cause above, then run doctor again (it "
                       f"captures the log through /proc/{h.pid}/fd); do NOT stop PID {h.pid} "
                       "until doctor reports the capture: if it exits first, those writes are "
                       "lost")
            continue
        if capture is None:
            continue  # it holds only a retired -shm: no log to keep
        done.append({"pid": h.pid, "capture": str(capture), "made_now": made})
        if made:
            report.add(WARN, f"captured the deleted state.db-wal PID {h.pid} ({h.command}) "
                             f"holds into {capture.name} (verified)",
                       "no verified capture of it existed: it was the only copy of the writes "
                       "that process acknowledged since the last checkpoint; now nothing is lost",
                       f"bring them back later with `sessions salvage {capture} --apply`")
        else:
            report.add(OK, f"the deleted state.db-wal PID {h.pid} holds is captured in "
                           f"{capture.name} (verified): nothing is lost")


def markers(db: Path, report) -> None:
    """Obligation markers beside the store: pending ones (their process runs) and losses."""
    for path, rec in read_markers(db):
        if rec is None:
            report.add(WARN, f"unreadable capture obligation marker {path.name}",
                       "a process could not capture a retired WAL; check `doctor` while it "
                       "runs; delete the marker once the matter is settled")
            continue
        pid = rec.get("pid")
        wal = rec.get("wal") if isinstance(rec.get("wal"), dict) else {}
        ident = wal.get("identity")
        ident = tuple(ident) if isinstance(ident, list) and len(ident) == 2 else None
        captured = find_verified_capture(db, ident, pid=pid) if ident else None
        if captured is not None:
            report.add(OK, f"capture obligation of PID {pid} fulfilled: {captured.name}",
                       f"the marker {path.name} is left over; it may be deleted")
        elif marker_alive(rec):
            report.add(ISSUE, f"PID {pid} has a pending capture obligation since "
                              f"{rec.get('since')}: its retired WAL is not captured yet",
                       str(rec.get("error") or ""),
                       f"fix: free space or fix the cause, then run doctor again; do NOT stop "
                       f"PID {pid} before a capture exists")
        else:
            size = wal.get("bytes")
            report.add(ISSUE, f"PID {pid} exited without a capture of its retired WAL: the "
                              "writes it acknowledged since the last checkpoint "
                              f"({size if size is not None else 'an unknown number of'} bytes "
                              "of WAL) are LOST",
                       f"last error: {rec.get('error')}",
                       f"nothing on this machine holds them any more; the marker {path.name} "
                       "is the record of that loss: delete it once noted (check the spool with "
                       "`sessions replay-spool --dry-run` for what was diverted)")
