"""Maintenance that rewrites the store, and the live-writer gate in front of it (SPEC §8, §11).

``optimize``, ``optimize-storage`` and ``prune`` refuse while another process holds the store:
rewriting a database under a live writer is how every agent ends up refusing turns with the
retired-WAL error. ``--dry-run`` is never refused; ``--force`` skips the check; an incomplete
scan refuses ("cannot prove the store is quiet").

``prune`` is the exception when the only holder is the gateway that owns the store: the prune is
previewed read-only and handed to the gateway as a request row in ``state_meta``
(``maintenance_request:<uuid>``), which the gateway executes between turns with
:func:`run_pending_requests`, skipping sessions with a turn in progress. A gateway announces
ownership with :func:`claim_gateway_ownership` (``state_meta['gateway_owner']`` = JSON with its
pid and start time).
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from .. import failpoints
from ..errors import HermesStateError
from . import checkpoint_lock, holders
from .capture import others_at_risk

log = logging.getLogger("hermes_state")

GATED_COMMANDS = ("optimize", "optimize-storage", "prune",
                  # SessionDB methods that rewrite many rows or the file (UPSTREAM_API §2.8,
                  # §2.13): vacuum, optimize_fts, maybe_auto_prune_and_vacuum, delete_sessions,
                  # import_sessions
                  "vacuum", "optimize-fts", "auto-prune", "delete", "import",
                  # appends what a retired-WAL capture holds (hermes_state/operator/salvage.py)
                  "salvage")
REQUEST_PREFIX = "maintenance_request:"


class MaintenanceRefused(HermesStateError):
    """A gated command found another process holding the store (SPEC §11). Exit code 1.

    Attributes:
        holders: the :class:`hermes_state.processes.holders.Holder` objects seen.
        incomplete: True when the refusal is because the scan could not see every process.
    """

    def __init__(self, text: str, found: list, incomplete: bool = False) -> None:
        self.holders = found
        self.incomplete = incomplete
        super().__init__(text)


def refusal_text(command: str, db_path: Path, found: list, unreadable: list[int],
                 unlisted: str = "") -> str:
    """The exact refusal of SPEC §11 (holders with their files, nothing lost, --force);
    ``unlisted``: why the processes could not be listed at all (the scan's note)."""
    if found:
        lines = [f"Refusing `sessions {command}`: another process is using {db_path}."]
    else:
        lines = [f"Refusing `sessions {command}`: cannot prove that no other process is using "
                 f"{db_path}."]
    lines += [f"  {h.line()}" for h in found]
    if unreadable:
        lines.append("  cannot prove the store is quiet: could not inspect PID(s) "
                     + ", ".join(map(str, unreadable)))
    if unlisted:
        lines.append(f"  cannot prove the store is quiet: {unlisted}")
    retired = [h for h in found if getattr(h, "retired", ())]
    risk = others_at_risk(db_path, retired) if retired else None  # issue 22.1
    lines += [
        "Rewriting the database under a live writer is how every agent ends up refusing turns "
        "with the",
        "retired state.db-wal error. " + (f"Nothing was changed. {risk}" if risk
                                          else "Nothing is lost."),
        "Stop them first (gateway stop, quit the desktop app, pause cron), then re-run.",
        "Override with --force if you accept the risk.",
    ]
    return "\n".join(lines)


@dataclass
class GateDecision:
    """``action`` is ``run`` (quiet or forced), ``dry_run`` or ``handoff`` (prune to the gateway)."""

    action: str
    holders: list
    owner_pid: int | None = None


def check_gate(db_path: str | os.PathLike, command: str, *, force: bool = False,
               dry_run: bool = False, gateway_owner_pid: int | None = None) -> GateDecision:
    """Decide whether a gated command may run now (SPEC §11).

    Args:
        db_path: the store.
        command: one of :data:`GATED_COMMANDS`.
        force: skip the check.
        dry_run: a preview; never refused.
        gateway_owner_pid: pid recorded by the owning gateway (prune hand-off), if any.
    Returns:
        A :class:`GateDecision`.
    Raises:
        MaintenanceRefused: another process holds the store, or the scan is incomplete.
        ValueError: ``command`` is not gated.
    """
    if command not in GATED_COMMANDS:
        raise ValueError(f"{command!r} is not a gated maintenance command")
    db = Path(db_path).absolute()
    if dry_run:
        return GateDecision("dry_run", [])
    if force:
        return GateDecision("run", [])
    scan = holders.scan(db)
    if not scan.holders and scan.complete:
        return GateDecision("run", [])
    if (command == "prune" and scan.complete and gateway_owner_pid is not None and scan.holders
            and all(h.pid == gateway_owner_pid for h in scan.holders)):
        return GateDecision("handoff", scan.holders, gateway_owner_pid)
    raise MaintenanceRefused(refusal_text(command, db, scan.holders, scan.unreadable,
                                          "" if scan.listed else scan.platform_note),
                             scan.holders, incomplete=not scan.complete)


@contextlib.contextmanager
def gate_held(db_path: str | os.PathLike, command: str, *, force: bool = False,
              gateway_owner_pid: int | None = None,
              timeout: float | None = None) -> Iterator[GateDecision]:
    """The live-writer gate with the store's write lock held from the decision through the
    action (SPEC §11; issue 11).

    Scans once (a visible writer is refused at once), takes the store's write lock
    (:func:`hermes_state.processes.checkpoint_lock.exclusive`), scans again (:func:`check_gate`: the
    decision) and keeps the lock while the caller's block runs: a writer that starts after the
    scan (a cron job) waits for the action to end instead of committing in the window between
    "nobody is writing" and the rewrite. Store connections this process opens
    inside the block write through it. ``--force`` skips the holder refusal, not the lock (an
    unusable lock file is then only a warning).

    Yields:
        The :class:`GateDecision` (``run`` or ``handoff``).
    Raises:
        MaintenanceRefused: holders seen, the scan incomplete, a write transaction kept the lock
            for ``timeout`` seconds (the holders are named), or the lock file is unusable
            (without ``force``).
    """
    db = Path(db_path).absolute()
    # A first scan without the lock refuses at once under a visible writer (no wait for it).
    check_gate(db, command, force=force, gateway_owner_pid=gateway_owner_pid)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(checkpoint_lock.exclusive(
                db, timeout=checkpoint_lock.MAINTENANCE_WAIT_S if timeout is None else timeout,
                purpose=f"sessions {command}"))
        except checkpoint_lock.LockUnavailable as exc:
            if not force:
                raise MaintenanceRefused(
                    f"Refusing `sessions {command}`: cannot take the store's write lock "
                    f"({exc.problem}), so a writer could start in the middle of it. Nothing "
                    "was changed.\nFix the lock file (or its directory), then re-run; --force "
                    "runs without it if you accept the risk.", []) from None
            log.warning("sessions %s --force without the store's write lock: %s", command,
                        exc.problem)
        except checkpoint_lock.LockBusy as exc:
            lines = "\n".join(f"  {h.line()}" for h in exc.holders)
            raise MaintenanceRefused(
                f"Refusing `sessions {command}`: {exc}. Nothing was changed.\n"
                + (lines + "\n" if lines else "")
                + "Retry in a moment; if it keeps happening run `doctor` to see who holds the "
                "store.", []) from None
        # The decision that counts: taken with the lock held, kept until the action ends.
        decision = check_gate(db, command, force=force, gateway_owner_pid=gateway_owner_pid)
        failpoints.hit("cmd.maintenance.locked")
        yield decision


# ---------------------------------------------------------------------------- gateway hand-off

def claim_gateway_ownership(db) -> None:
    """Record this process as the gateway that owns the store (``state_meta['gateway_owner']``)."""
    db.set_meta("gateway_owner", json.dumps({"pid": os.getpid(), "since": time.time()}))


def gateway_owner_pid(db_path: str | os.PathLike) -> int | None:
    """The owning gateway's pid if it is recorded AND that process is alive, else None."""
    import sqlite3

    from ..files.atomic import UnsafePathError
    from ..files.store_files import connect_ro

    try:  # a FIFO or device at a store path is refused by name by the command's own open
        conn = connect_ro(db_path, timeout=1.0)
        try:
            row = conn.execute("SELECT value FROM state_meta WHERE key='gateway_owner'").fetchone()
        finally:
            conn.close()
    except (sqlite3.Error, UnsafePathError):
        return None
    if not row:
        return None
    try:
        pid = json.loads(row[0])["pid"]
    except (ValueError, KeyError, TypeError, IndexError, RecursionError):
        return None
    if isinstance(pid, bool) or not isinstance(pid, int) or not 0 < pid < 1 << 22:
        return None  # a row of another shape names no process (issue 11.10)
    import psutil

    return pid if psutil.pid_exists(pid) else None


def request_prune(db, *, older_than_days: float, source: str | None = None) -> str:
    """Queue a prune for the owning gateway; returns the request id (SPEC §11)."""
    rid = uuid.uuid4().hex
    db.set_meta(REQUEST_PREFIX + rid, json.dumps({
        "command": "prune", "older_than_days": older_than_days, "source": source,
        "requested_at": time.time(), "requested_by": os.getpid()}))
    return rid


def run_pending_requests(db, *, busy_sessions: set[str] | frozenset = frozenset()) -> list[dict]:
    """Execute queued maintenance requests (the gateway calls this between turns).

    Sessions in ``busy_sessions`` (a turn in progress) are never pruned. Each request row is
    deleted after it ran; the result is recorded as ``maintenance_result:<id>``.

    Returns:
        ``[{"id", "command", "pruned"}...]`` for the requests executed.
    """
    rows = db.connection.read(lambda c: c.execute(
        "SELECT key, value FROM state_meta WHERE key LIKE ? ESCAPE '\\'",
        (REQUEST_PREFIX.replace("_", "\\_") + "%",)).fetchall())
    done = []
    for key, value in rows:
        rid = key[len(REQUEST_PREFIX):]
        try:
            req = json.loads(value)
        except (TypeError, ValueError, RecursionError):
            req = None
        if not isinstance(req, dict):
            req = {"command": "invalid"}  # a row of another shape: recorded, never a crash
        command = req.get("command")
        result = {"id": rid, "command": command if isinstance(command, str) else repr(command)}
        days, source = req.get("older_than_days", 90), req.get("source")
        if command == "prune":
            if (isinstance(days, (int, float)) and not isinstance(days, bool)
                    and math.isfinite(days) and days >= 0
                    and (source is None or isinstance(source, str))):
                result["pruned"] = db.prune_sessions(older_than_days=float(days), source=source,
                                                     exclude=set(busy_sessions))
            else:
                result["error"] = ("invalid request: older_than_days must be a number >= 0 and "
                                   "source a string or null")

        def finish(c, key=key, rid=rid, result=result):
            c.execute("DELETE FROM state_meta WHERE key = ?", (key,))
            c.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)",
                      ("maintenance_result:" + rid, json.dumps({**result, "at": time.time()})))
        db.connection.execute_write(finish, op="maintenance_request")
        done.append(result)
    return done


# ---------------------------------------------------------------------------- optimize (§8)

def optimize(db) -> dict:
    """FTS merge/optimize, PASSIVE checkpoint, VACUUM, TRUNCATE checkpoint, re-record identities.

    Runs on an open :class:`~hermes_state.db.SessionDB` after the gate allowed it (SPEC §8),
    holding the store's write lock exclusively (re-entrant under :func:`gate_held`): VACUUM and
    the TRUNCATE checkpoint overlap no write transaction of the store (issue 12).

    Returns:
        ``{"before_bytes", "after_bytes", "fts_tables"}`` (sizes of state.db + state.db-wal).
    """
    path = Path(db.db_path)

    def size() -> int:
        return sum(p.stat().st_size for p in (path, Path(f"{path}-wal")) if p.exists())

    with checkpoint_lock.exclusive_unless_unusable(path, purpose="optimize"):
        return _optimize(db, path, size)


def _optimize(db, path: Path, size) -> dict:
    before = size()
    conn = db.connection
    names = db.connection.read(lambda c: [r[0] for r in c.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name IN "
        "('messages_fts', 'messages_fts_trigram', 'messages_fts_cjk')")])

    def fts(c):
        for name in names:
            c.execute(f"INSERT INTO {name}({name}, rank) VALUES ('merge', 500)")
            c.execute(f"INSERT INTO {name}({name}) VALUES ('optimize')")
    db.connection.execute_write(fts, op="optimize_fts")
    conn.checkpoint("PASSIVE", trigger="optimize")
    db.connection.read(lambda c: c.execute("VACUUM"))
    conn.checkpoint("TRUNCATE", trigger="optimize")
    conn.rerecord_generation()
    return {"before_bytes": before, "after_bytes": size(), "fts_tables": names}
