"""Opening a store: one pipeline from the path to a ready connection (SPEC §1-§4, §10.4, §12).

:func:`open_connection` reads top to bottom:

1. read-only: refuse unsafe files, connect ``mode=ro`` (``immutable=1`` beside a retired WAL);
2. writable: the home directory, unsafe files and permissions refused by name, any process
   holding a retired sidecar refused (SPEC §10.4), a file that is not SQLite quarantined
   (:mod:`hermes_state.store.quarantine`), the checkpoint lock opened (issue 12);
3. connect and set the pragmas (:mod:`hermes_state.store.pragmas`), create or migrate the schema
   unless the store is settled (:mod:`hermes_state.store.migrations`, :mod:`hermes_state.schema.shape`),
   record the generation (:mod:`hermes_state.store.generation_tracking`);
4. resume a deferred FTS back-fill (:mod:`hermes_state.fts.backfill`), emit ``open``.
"""

from __future__ import annotations

import logging
import os
import random
import sqlite3
from pathlib import Path
from typing import TypeVar

from .. import events, failpoints
from ..errors import (
    HOLDER_OTHER,
    HOLDER_SELF,
    HOLDER_SELF_AND_OTHERS,
    DeletedWalGenerationError,
    EvidenceWriteError,
    HermesStateError,
    OpenContentionError,
    StateDbReplacedError,
    is_io_error,
    is_lock_error,
    store_io_error,
)
from ..files import atomic
from ..files.paths import access_problem, ensure_home, sqlite_uri
from ..files.store_files import refuse_special_store_files
from ..processes import holders
from ..processes.capture import others_at_risk, retired_log_at_path
from ..processes.checkpoint_lock import CheckpointLock, wal_reset_exposure
from ..schema.shape import pending_work, stored_version
from . import migrated_copy, migrations
from .capture_obligation import pending_obligations
from .connection import (
    BUSY_TIMEOUT_S,
    StoreConnection,
    exposed_to_wal_reset,
    retry_lock_errors,
)
from .pragmas import apply_pragmas, tighten_modes
from .quarantine import quarantine_if_not_sqlite, raise_named

log = logging.getLogger("hermes_state")

T = TypeVar("T")

_exposure_logged = False

def open_connection(db_path: Path, *, read_only: bool = False,
                    synchronous: str = "NORMAL") -> StoreConnection:
    """Open the store at ``db_path``: refusals, quarantine, connect, migrate, generation.

    Args:
        db_path: absolute path of ``state.db``.
        read_only: open ``mode=ro``: no scan, no schema work, never creates the store.
        synchronous: ``"NORMAL"`` (durable against process crash) or ``"FULL"``.
    Returns:
        The :class:`~hermes_state.store.connection.StoreConnection`, ready for reads and writes.
    Raises:
        DeletedWalGenerationError: some process holds a deleted/replaced sidecar (SPEC §10.4).
        StorePermissionError: the directory or a store file cannot be written.
        StateDbCorruptError: the store is damaged (SPEC §12).
        sqlite3.OperationalError: read-only open of a store that does not exist.
    """
    db_path = Path(db_path)
    _log_exposure_once()
    if read_only:
        _refuse_unsafe_files(db_path)
        _move_retired_log_aside(db_path, read_only=True)
        conn, retired = _connect_ro(db_path)
        pending = _pending_for_reads(db_path, conn)
        if pending:  # an older store: read a migrated private copy (issue 22 item 6)
            sc = migrated_copy.open_copy(db_path, conn, pending, open_writable=open_connection)
            sc.retired_holders = list(retired)
            return sc
        return StoreConnection(db_path, conn, read_only=True, retired_holders=retired)
    ensure_home(db_path.parent)
    _refuse_unsafe_files(db_path)
    problem = access_problem(db_path, write=True)
    if problem is not None:  # SPEC §4: the exact path, the permission and the fix
        raise problem
    _refuse_if_retired_holders(db_path)
    _move_retired_log_aside(db_path, read_only=False)
    quarantined_to = quarantine_if_not_sqlite(db_path)
    guard = CheckpointLock(db_path)  # issue 12; an unusable one is logged, never silent
    guard.log_degraded(exposed_to_wal_reset())
    try:
        sc = _connect_and_prepare(db_path, guard, synchronous, quarantined_to)
    except BaseException:
        guard.close()
        raise
    sc.start_backfill()
    events.enabled() and events.emit(
        "open", db=str(sc.db_path), journal_mode=sc.journal_mode,
        sqlite=sqlite3.sqlite_version, generation=sc.generation.as_dict())
    return sc


def _connect_and_prepare(db_path: Path, guard: CheckpointLock, synchronous: str,
                         quarantined_to: Path | None) -> StoreConnection:
    """Connect with the pragmas, build the :class:`StoreConnection`, prepare the schema and
    record the generation; the connection is closed on any failure."""
    failpoints.hit("open.before_connect")
    try:
        conn, journal_mode = _connect_rw(db_path, synchronous)
    except sqlite3.DatabaseError as exc:
        _raise_named_lock(db_path, exc, "set up the connection")
        _raise_io(db_path, exc)
        raise_named(db_path, exc)
    sc = StoreConnection(db_path, conn, guard=guard, journal_mode=journal_mode,
                         quarantined_to=quarantined_to, synchronous=synchronous)
    try:
        _prepare_schema(sc)
        failpoints.hit("open.after_schema")
        sc.record_generation()
        sc.sync_left_behind()
    except sqlite3.DatabaseError as exc:
        conn.close()
        _raise_named_lock(db_path, exc, "read what the open has to do")
        _raise_io(db_path, exc)
        raise_named(db_path, exc)
    except BaseException:
        conn.close()
        raise
    return sc


def _raise_io(db_path: Path, exc: sqlite3.DatabaseError) -> None:
    """An I/O-class SQLite error while opening becomes a named :class:`StoreIOError` (a
    permission problem is named as one first); anything else returns (issue 22 sweep)."""
    if not is_io_error(exc):
        return
    problem = access_problem(db_path, write=True)
    if problem is not None:
        raise problem from exc
    raise store_io_error(db_path, exc, "opening") from exc


def _connect_ro(db_path: Path) -> tuple[sqlite3.Connection, list]:
    """``mode=ro``; ``immutable=1`` while a process holds a retired sidecar (issue 11.5).

    With a retired generation held, the ``-shm`` at the path may index frames of a WAL that
    is no longer there (``disk I/O error``), and any ordinary opener would create a new
    ``-wal``/``-shm`` (a second generation). ``immutable=1`` reads the main file alone and
    touches neither sidecar: what the holder committed since the last checkpoint is not
    shown (it is safe in its WAL; the CLI says so).

    Returns:
        ``(connection, the processes holding a retired sidecar)``.
    """
    try:
        os.stat(db_path)
    except FileNotFoundError:
        raise sqlite3.OperationalError(f"no session store at {db_path}") from None
    except PermissionError as exc:
        raise (access_problem(db_path, write=False) or exc) from exc
    retired = holders.scan_settled(db_path, include_self=True,
                                   locked_only=True).retired_holders
    params = {"mode": "ro"}
    if retired:
        params["immutable"] = "1"
    uri = sqlite_uri(db_path, **params)
    conn = None
    try:  # a permission or damage problem surfaces here (SQLite opens lazily), by name
        conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False)
        conn.row_factory = sqlite3.Row
        conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
    except sqlite3.DatabaseError as exc:
        if conn is not None:
            conn.close()
        problem = access_problem(db_path, write=False)
        if problem is not None:
            raise problem from exc
        raise_named(db_path, exc)
    return conn, retired


def _pending_for_reads(db_path: Path, conn: sqlite3.Connection) -> list[str]:
    """:func:`migrated_copy.pending_for_reads`, its read errors named like the open's."""
    try:
        return migrated_copy.pending_for_reads(conn)
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise_named(db_path, exc)


def _refuse_unsafe_files(db_path: Path) -> None:
    """The store files must be plain files or absent: never a link, FIFO or device (checked
    with ``lstat`` before anything opens them: :mod:`hermes_state.files.store_files`)."""
    refuse_special_store_files(db_path)


def _refuse_if_retired_holders(db_path: Path) -> None:
    """SPEC §10.4: never connect while any process holds a retired sidecar of this store."""
    found = holders.scan_settled(db_path, include_self=True, locked_only=True).retired_holders
    if not found:
        return
    lines = "\n".join("  " + h.line() for h in found)
    detail = (f"{len(found)} process(es) still hold a retired WAL generation of "
              f"{db_path}:\n{lines}")
    events.enabled() and events.emit("refusal", reason="open_scan", detail=detail,
                                     holders=[h.as_tuple() for h in found])
    mine = [h for h in found if h.pid == os.getpid()]
    held_by = (HOLDER_OTHER if not mine else HOLDER_SELF if len(mine) == len(found)
               else HOLDER_SELF_AND_OTHERS)
    # "Nothing is lost" only when every retired log has a verified capture (issue 22.1).
    risks = [r for r in (others_at_risk(db_path, found),
                         *(ob.at_risk() for ob in pending_obligations()
                           if mine and ob.db_path == db_path)) if r]
    raise DeletedWalGenerationError(detail, holders=[h.as_tuple() for h in found],
                                    held_by=held_by, pid=os.getpid(),
                                    at_risk=" ".join(risks) or None)


def _move_retired_log_aside(db_path: Path, *, read_only: bool) -> None:
    """A replaced ``state.db``'s WAL still at the path (its holder could not move it aside:
    a full disk) would be replayed by SQLite onto the new file: a writable open moves it into
    its capture (``<name>.moved-from-path``, as the holder would have); a read-only open, or a
    move that fails, refuses by name (issue 22 item 1). Nothing is deleted."""
    found = retired_log_at_path(db_path)
    if found is None:
        return
    capture, sidecars = found
    names = ", ".join(str(p) for p in sidecars)
    if not read_only:
        try:
            for side in sidecars:
                atomic.move_aside(side, atomic.numbered(capture / f"{side.name}.moved-from-path"))
            atomic.fsync_dir(db_path.parent)
        except OSError as exc:
            raise EvidenceWriteError(
                f"session storage cannot open {db_path}: the write-ahead log of the file it "
                f"replaced is still at {names} (its content is captured in {capture}) and it "
                f"could not be moved aside ({exc.strerror or exc}); opening now would replay "
                "that log onto the new state.db. Nothing was written. Free space (or fix the "
                f"cause) and open again, or move it yourself: mv {names} {capture}/",
                "a replaced store's sidecars left at the path (issue 22 item 1)",
                path=str(sidecars[0])) from exc
        log.warning("moved the write-ahead log of a replaced state.db (%s) into its capture "
                    "%s before opening", names, capture)
        return
    raise StateDbReplacedError(
        f"the write-ahead log of the file state.db replaced is still at {names} (captured in "
        f"{capture}); a read would mix it into the new store",
        user_message=(f"session storage cannot read {db_path} yet: the write-ahead log of the "
                      f"file it replaced is still at {names} (its content is safe in "
                      f"{capture}). Open the store once for writing (any command that writes, "
                      "or `doctor --fix`) to move it aside, or move it yourself: "
                      f"mv {names} {capture}/"))


def _connect_rw(db_path: Path, synchronous: str) -> tuple[sqlite3.Connection, str]:
    """A writable connection with the pragmas of SPEC §4; returns it and the journal mode."""
    conn = sqlite3.connect(str(db_path), timeout=BUSY_TIMEOUT_S, isolation_level=None,
                           check_same_thread=False)
    conn.row_factory = sqlite3.Row
    rng = random.Random()
    try:
        journal_mode = apply_pragmas(conn, synchronous, db_path,
                                     exposed=exposed_to_wal_reset(),
                                     retry=lambda fn: retry_lock_errors(fn, rng))
    except BaseException:
        conn.close()
        raise
    tighten_modes(db_path)
    return conn, journal_mode


def settled(conn: sqlite3.Connection) -> tuple[bool, int | None]:
    """Whether the open has nothing to write (SPEC §3; :mod:`hermes_state.schema.shape`), and
    the stored schema version (None when unreadable).

    Read-only and cheap (catalogue queries; the declared columns are computed once per
    process). Judged by structure, whatever the store's version (2 to 31) and the names of
    its triggers and indexes: :func:`hermes_state.schema.shape.pending_work` is empty.
    """
    version = stored_version(conn)[0]
    return not pending_work(conn), version


def _prepare_schema(sc: StoreConnection) -> None:
    """Create, migrate or complete the schema unless settled (SPEC §2, §3).

    Settled store: no write at all (a store newer than the code only gets its once-per-process
    warning). Otherwise :func:`hermes_state.store.migrations.prepare_store`: a fresh store in one
    transaction; an older one column reconciliation, then each versioned step in its own
    transaction with its ``migrate.v<N>.before_commit`` failpoint, then the idempotent rest.
    The outcome is kept in ``sc.migration_report`` (None when settled).
    """
    sc.migration_report = None
    failpoints.hit("open.before_shape")
    # Catalogue reads: on a rollback-journal store another process's commit locks them out;
    # retried like the pragmas, then named (issue 23), never a raw "database is locked".
    is_settled, version = retry_lock_errors(lambda: settled(sc.conn), random.Random(),
                                            stage="shape")
    if is_settled:
        migrations.warn_if_newer(sc.db_path, version)
        return
    sc.migration_report = migrations.prepare_store(sc)


def _raise_named_lock(db_path: Path, exc: BaseException, what: str) -> None:
    """A lock error that outlasted the open's retries becomes :class:`OpenContentionError`,
    naming the process holding the lock and every holder (SPEC §4, §10.2); else returns."""
    if not isinstance(exc, sqlite3.OperationalError) or isinstance(exc, HermesStateError) \
            or not is_lock_error(exc):
        return
    attempts = int(getattr(exc, "attempts", 1))
    waited = float(getattr(exc, "waited_s", 0.0))
    owner = holders.write_lock_owner(db_path)
    owner_line = (f"state.db locked by PID {owner[0]} ({owner[1]}) as this open gave up"
                  if owner else None)
    seen = holders.scan(db_path).holders
    lines = "\n".join("  " + h.line() for h in seen) or "  (no other holder visible)"
    who = f"PID {owner[0]} ({owner[1]})" if owner else "another process"
    events.enabled() and events.emit("write_gave_up", attempts=attempts, waited_s=waited,
                                     lock_owner=owner_line, op="open")
    raise OpenContentionError(
        f"session storage could not open {db_path}: {who} kept the store locked through "
        f"{attempts} attempts over {waited:.1f}s, so this open could not {what}. Nothing was "
        "changed; retry, and if it keeps happening run `doctor` to see who holds the store.",
        (owner_line + "\n" if owner_line else "") + f"holders:\n{lines}\nlast error: {exc}",
        attempts=attempts, waited_s=waited, holders=[h.as_tuple() for h in seen],
        lock_owner=owner_line) from exc


def _log_exposure_once() -> None:
    global _exposure_logged
    if not _exposure_logged:
        _exposure_logged = True
        text = wal_reset_exposure()
        if text:
            log.info(text)
