"""The single write path of a store (SPEC §4, §10).

:class:`StoreConnection` owns one ``sqlite3`` connection to one store and everything that must
happen around a write: the thread lock, ``BEGIN IMMEDIATE``, the generation check, the jittered
retry on lock errors, the PASSIVE checkpoint cadence, sticky refusals, FTS switched off on
damage, and a close that never checkpoints a retired generation. Opening is
:mod:`hermes_state.store.opening`; :class:`hermes_state.db.SessionDB` builds the API on top.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

from .. import events, failpoints
from ..errors import (
    SQLITE_CONSTRAINT,
    ForkedHandleError,
    StateDbCorruptError,
    WriteContentionError,
    corruption_kind,
    is_io_error,
    is_lock_error,
    store_io_error,
)
from ..fts import backfill as fts_backfill
from ..processes import checkpoint_lock, holders
from ..processes.checkpoint_lock import CheckpointLock, wal_reset_exposure
from ..processes.generation import Generation, diff
from ..schema.tables import FTS_TABLES
from . import wal_index, wal_sync
from .checkpointing import BUSY_TIMEOUT_S, Checkpointing  # noqa: F401 (re-exported)
from .capture_obligation import close_attempts
from .generation_tracking import GenerationTracking
from .pragmas import disable_checkpoint_on_close
from .quarantine import raise_named
from .write_lock import HOLD_WAIT_S, CheckpointLockMet, WriteLocking  # noqa: F401 (re-exported)

log = logging.getLogger("hermes_state")

T = TypeVar("T")

_WRITE_MAX_RETRIES = 15  # attempts in total (SPEC §4)
RETRY_SLEEP_MIN_S = 0.020
RETRY_SLEEP_MAX_S = 0.150
_CHECKPOINT_EVERY_N_WRITES = 50
#: Checkpoints one write may meet (and wait out) before it gives up: a guard against a livelock,
#: never reached in practice (each one met is a checkpoint another connection completed).
_MAX_CHECKPOINTS_MET = 10 * _WRITE_MAX_RETRIES


# Connections of retired generations this process must never close (Python 3.11 fallback when
# NO_CKPT_ON_CLOSE cannot be set): kept alive until the process exits (SPEC §10.5).
_UNCLOSABLE: list[sqlite3.Connection] = []


def decode_lenient(data: bytes) -> str:
    """A text factory that reads invalid UTF-8 with U+FFFD (never raises)."""
    return data.decode("utf-8", "replace")


def is_decode_error(exc: BaseException) -> bool:
    """True for sqlite3's "Could not decode to UTF-8 column ..." (a TEXT value that is not
    UTF-8: a foreign client's bytes), which is not damage."""
    return isinstance(exc, sqlite3.OperationalError) and "Could not decode to UTF-8" in str(exc)


@contextlib.contextmanager
def lenient_text(conn: sqlite3.Connection):
    """Read text as :func:`decode_lenient` inside the block; the default factory after."""
    conn.text_factory = decode_lenient
    try:
        yield conn
    finally:
        conn.text_factory = str


def exposed_to_wal_reset() -> bool:
    """Whether this process's SQLite has the WAL-reset race (SPEC §4; issue 12): the one
    answer the open's pragmas and the connection's checkpoint lock both follow."""
    return wal_reset_exposure() is not None


def retry_lock_errors(fn: Callable[[], T], rng: random.Random, *, op: str = "open",
                      stage: str = "pragmas") -> T:
    """``fn()``, again after a uniform 20-150 ms sleep on each lock error (SQLITE_BUSY/LOCKED
    by code), at most :data:`_WRITE_MAX_RETRIES` attempts in total (SPEC §4).

    The open's statements outside a write transaction (its pragmas, the reads that decide what
    it has to do) use this; :meth:`StoreConnection.execute_write` is the same rule inside
    ``BEGIN IMMEDIATE``. Each retry emits a ``retry`` event (``op``, ``stage``, ``attempt``,
    ``sleep_s``, ``error``).

    Raises:
        sqlite3.OperationalError: the last lock error (``attempts`` and ``waited_s`` set on it),
            or any other error at once.
    """
    t0 = time.monotonic()
    for attempt in range(1, _WRITE_MAX_RETRIES + 1):
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not is_lock_error(exc):
                raise
            if attempt == _WRITE_MAX_RETRIES:
                exc.attempts = attempt  # type: ignore[attr-defined]
                exc.waited_s = time.monotonic() - t0  # type: ignore[attr-defined]
                raise
            pause = rng.uniform(RETRY_SLEEP_MIN_S, RETRY_SLEEP_MAX_S)
            events.enabled() and events.emit("retry", attempt=attempt, sleep_s=pause,
                                             error=str(exc), op=op, stage=stage,
                                             code=getattr(exc, "sqlite_errorname", None))
            time.sleep(pause)
    raise AssertionError("unreachable")


def _io_error(db_path: Path, exc: sqlite3.DatabaseError) -> BaseException:
    """A write that failed for I/O (SQLITE_FULL, IOERR, CANTOPEN, READONLY) as a named
    :class:`~hermes_state.errors.StoreIOError` keeping SQLite's code; rolled back."""
    err = store_io_error(db_path, exc, "writing to")
    err.sqlite_errorcode = getattr(exc, "sqlite_errorcode", None)  # type: ignore[attr-defined]
    err.sqlite_errorname = getattr(exc, "sqlite_errorname", None)  # type: ignore[attr-defined]
    return err


class StoreConnection(Checkpointing, GenerationTracking, WriteLocking, wal_sync.WalSyncing):
    """One writable (or read-only) connection to a store, with the write path of SPEC §4.

    Opened by :func:`hermes_state.store.opening.open_connection`, which runs the refusals and the
    quarantine, connects, and hands the ready ``sqlite3`` connection to this constructor; the
    schema work and :meth:`record_generation` follow on the built object.

    Args:
        db_path: absolute path of ``state.db``.
        conn: the open ``sqlite3`` connection (pragmas applied), owned from now on.
        read_only: a ``mode=ro`` handle: every write is refused.
        guard: the store's checkpoint lock (writable handles; None for read-only ones).
        journal_mode: what ``PRAGMA journal_mode`` answered at open (``"wal"``, ``"delete"``).
        retired_holders: processes holding a retired sidecar at a read-only open (issue 11.5).
        quarantined_to: where a file that was not SQLite was moved before this open (SPEC §12).
        synchronous: the connection's level; at ``NORMAL`` in WAL mode the WAL is synced at
            most :data:`~hermes_state.store.wal_sync.SYNC_DELAY_S` after a commit (SPEC §4).
    """

    def __init__(self, db_path: Path, conn: sqlite3.Connection, *, read_only: bool = False,
                 guard: CheckpointLock | None = None, journal_mode: str = "?",
                 retired_holders: list | None = None, quarantined_to: Path | None = None,
                 synchronous: str = "NORMAL"):
        self.db_path = Path(db_path)
        self.conn = conn
        self.read_only = read_only
        self.journal_mode = journal_mode
        self.retired_holders: list = list(retired_holders or [])
        self.quarantined_to = quarantined_to
        self.migration_report = None  # migrations.MigrationReport of this open, None if settled
        #: A read-only handle on a migrated private copy of an older store (store/migrated_copy):
        #: ``{"schema_version", "pending", "directory"}``; None otherwise.
        self.migrated_copy: dict | None = None
        self._on_close: list[Callable[[], object]] = []
        self.generation: Generation | None = None  # set by record_generation (writable)
        self._lock = threading.RLock()
        self._rng = random.Random()  # seeded from os.urandom: jitter must not follow a run seed
        self._writes = 0
        self._stage = "begin"  # the write path's statement running now (retry events)
        self._t_precommit = 0.0  # monotonic s, right before the last COMMIT (in the lock)
        self._sticky: BaseException | None = None
        self._retired = False
        self._closed = False
        self._obligation = None  # capture_obligation.CaptureObligation once retired
        self._retire_info: tuple[str, str] | None = None  # (kind, operator detail)
        self._stale_move_error: str | None = None  # sidecars of a replaced file left at the path
        self._main_fd: int | None = None
        self._initial_disk_app_id: int | None = None
        self._backfill = None  # fts_backfill.BackfillThread after a deferred FTS re-index
        self._guard = guard
        self._lock_mode = "shared"  # what the last write transaction needed of the lock
        self._drain_after = 0  # frames the WAL must exceed before the next draining checkpoint
        self._shm = wal_index.OwnShm()  # SQLite's own -shm descriptor (wal-index reads)
        self._wal_seen: wal_index.WalIndex | None = None  # the last write's wal-index header
        self._tx_taken: tuple | None = None  # this write's directory stamp (the lock took it)
        # The time bound of the loss window (SPEC §4; issue 24 item 1): None = not wanted
        self._sync_delay = (wal_sync.delay_s() if not read_only and journal_mode == "wal"
                            and str(synchronous).upper() == "NORMAL" else None)
        self._sync_pending = False  # a commit not yet covered by a WAL sync
        self._sync_lock = threading.Lock()  # the syncer's fdatasync vs close()
        self._pid = os.getpid()  # a handle is used only by the process that opened it
        self._wal_fd: int | None = None  # SQLite's own -wal descriptor
        self._exposed = exposed_to_wal_reset()
        # Checkpoints take the lock only where SQLite has the WAL-reset race (issue 12).
        self._lock_checkpoints = guard is not None and self._exposed and guard.usable

    # ------------------------------------------------------------------ state
    @property
    def checkpoint_lock_status(self) -> str:
        """``"exposed, mitigated by the checkpoint lock"``, ``"exposed, NOT mitigated (why)"``
        or ``"not exposed"`` for this handle (issue 12); ``"read-only"`` without a lock."""
        if self._guard is None:
            return "read-only"
        if not self._exposed:
            return "not exposed"
        if self._lock_checkpoints:
            return checkpoint_lock.MITIGATED
        return f"exposed, NOT mitigated ({self._guard.problem})"

    # ------------------------------------------------------------------ the write path
    @property
    def writes(self) -> int:
        """Successful write transactions on this connection."""
        return self._writes

    @property
    def capture_dir(self) -> str | None:
        """The verified retired-WAL capture of this handle's generation, if any (SPEC §10.3)."""
        return self._obligation.capture_dir if self._obligation is not None else None

    @property
    def capture_pending(self) -> bool:
        """True while this handle holds a retired WAL that no verified capture holds yet
        (issue 22 item 1): then the refusals say what is at risk."""
        return self._obligation is not None and self._obligation.pending

    def start_backfill(self) -> None:
        """Resume a deferred FTS back-fill in a background thread (SPEC §2.4), if one is wanted."""
        if self.read(fts_backfill.wanted):
            self._backfill = fts_backfill.BackfillThread(self)
            self._backfill.start()

    def _check_process(self) -> None:
        """Raise :class:`ForkedHandleError` in a process other than the one that opened it
        (``getpid`` at every call: a process id kept by :func:`os.register_at_fork` misses a
        child of ``fork(2)`` called outside Python, e.g. by a C extension; ~0.1 us)."""
        if os.getpid() != self._pid:
            raise ForkedHandleError(
                f"this session store handle ({self.db_path}) was opened by process {self._pid} "
                f"and cannot be used after a fork (SQLite forbids it); open a new SessionDB in "
                f"process {os.getpid()}")

    def _check_usable(self) -> None:
        self._check_process()
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed session store.")
        if self.read_only:
            raise sqlite3.OperationalError(
                "this session store handle is read-only (mode=ro); open it without read_only "
                "to write")
        if self._sticky is not None:
            self.retry_capture()  # a pending capture is retried at every call (issue 22.1)
            raise self._sticky

    def execute_write(self, fn: Callable[[sqlite3.Connection], T], *, op: str = "write",
                      check_generation: bool = True) -> T:
        """Run ``fn(conn)`` in one ``BEGIN IMMEDIATE`` transaction and commit (SPEC §4).

        Lock errors (SQLITE_BUSY/SQLITE_LOCKED by code) at BEGIN or inside the transaction roll
        back, sleep a uniform 20-150 ms and retry, at most 15 attempts in total. Every 50th
        successful write runs a PASSIVE checkpoint.

        Args:
            fn: the statements; called once per attempt with the raw connection; returns a value.
            op: a label for events.
            check_generation: compare identities before ``fn`` (only the open itself skips it).
        Returns:
            Whatever ``fn`` returned on the attempt that committed.
        Raises:
            DeletedWalGenerationError / StateDbReplacedError: the generation changed (sticky).
            WriteContentionError: lock errors on every attempt; names the write-lock owner.
            Any exception of ``fn`` (after rollback).
        """
        # before the lock: a forked child's copy of it may be held for ever by a thread of
        # the parent that was writing at the fork (ForkedHandleError, never a hang)
        self._check_process()
        with self._lock:
            self._check_usable()
            conn = self.conn
            conn.text_factory = str  # lenient only for a retry after a decode error (below)
            t0 = time.monotonic()
            attempt = 0
            fts_repaired = False
            # (pid, first seen, last seen, sightings) of the write-lock owner at failed attempts
            owner_run: tuple[int, float, float, int] | None = None
            wait_first = False  # the last attempt met a checkpoint: wait for its lock first
            met = 0  # checkpoints met right after BEGIN (each waited out, holding nothing)
            t_attempt = t0  # when the current attempt began (retry events: waited_s)

            def body(c: sqlite3.Connection) -> T:
                # an action at the failpoint (a nemesis's window): the stamp the lock took
                # before it is stale, the check takes its own ("generation not yet checked")
                fired = failpoints.hit("write.after_begin")
                if check_generation:
                    self._check_generation(None if fired else self._tx_taken)
                out = fn(c)
                failpoints.hit("write.before_commit")
                return out

            while True:
                attempt += 1
                try:
                    if wait_first:
                        self._stage = "checkpoint lock"
                        self._wait_lock_free()
                        wait_first = False
                    result, t_begin, t_commit, held = self._transaction(body)
                except CheckpointLockMet:
                    # Never wait for the lock while holding SQLite's write lock: rolled back,
                    # the next attempt waits for it to be free first, holding nothing (no
                    # cycle; docs/decisions/0001-checkpoint-lock.md). Like a busy handler that
                    # got the lock in time, a checkpoint waited out is not a failed attempt: only
                    # a wait that times out is (SQLITE_BUSY-coded, below).
                    met += 1
                    events.enabled() and events.emit(
                        "checkpoint_wait", op=op, attempt=attempt, met=met,
                        waited_s=time.monotonic() - t_attempt)
                    if met > _MAX_CHECKPOINTS_MET:
                        raise self._gave_up(attempt, time.monotonic() - t0,
                                            self._lock_busy_error(), owner_run) from None
                    attempt -= 1
                    wait_first = True
                    continue
                except sqlite3.DatabaseError as exc:
                    if is_decode_error(exc) and self.conn.text_factory is str:
                        # A row a foreign client wrote as invalid UTF-8: the same transaction
                        # again (it was rolled back), reading such text with U+FFFD.
                        self.conn.text_factory = decode_lenient
                        continue
                    kind = corruption_kind(exc)
                    if (kind is None and not fts_repaired and op != "rebuild_fts"
                            and self._fts_damage_behind(exc)):
                        kind = "fts"
                    if kind == "fts" and not fts_repaired and op != "rebuild_fts":
                        fts_repaired = True
                        self._switch_off_fts(exc)
                        continue  # the same write again, without the broken index
                    if kind == "structural":
                        raise self._corrupt(exc) from exc
                    if not is_lock_error(exc):
                        if is_io_error(exc):  # full disk, I/O error: named (issue 22 sweep)
                            raise _io_error(self.db_path, exc) from exc
                        raise
                    owner_run = self._sight_lock_owner(
                        owner_run, checkpoint_lock=getattr(exc, "checkpoint_lock", False))
                    if attempt >= _WRITE_MAX_RETRIES:
                        raise self._gave_up(attempt, time.monotonic() - t0, exc,
                                            owner_run) from exc
                    sleep_s = self._rng.uniform(RETRY_SLEEP_MIN_S, RETRY_SLEEP_MAX_S)
                    # Which statement met the lock error, and after how long (issue 18: a
                    # BUSY at once is a different cause from a busy timeout that ran out).
                    events.enabled() and events.emit(
                        "retry", attempt=attempt, sleep_s=sleep_s, error=str(exc), op=op,
                        stage=self._stage, code=getattr(exc, "sqlite_errorname", None),
                        waited_s=time.monotonic() - t_attempt)
                    time.sleep(sleep_s)
                    t_attempt = time.monotonic()
                    continue
                break
            conn.text_factory = str
            failpoints.hit("write.after_commit")
            self._writes += 1
            events.enabled() and events.emit(
                "write", seq=self._writes, attempts=attempt, op=op, t_begin=t_begin,
                t_commit=t_commit, t_precommit=self._t_precommit, met=met,
                lock=self._lock_mode if held else self._unlocked_why(),
                wal=self._wal_seen.as_list() if held and self._wal_seen else None)
            if self._sync_delay is not None and not self._sync_pending:
                self._sync_pending = True
                wal_sync.SYNCER.schedule(self, self._sync_delay)
            if self._writes % _CHECKPOINT_EVERY_N_WRITES == 0:
                self.checkpoint("PASSIVE", trigger="cadence")
            return result

    def _transaction(self, fn: Callable[[sqlite3.Connection], T]
                     ) -> tuple[T, float, float, bool]:
        """``BEGIN IMMEDIATE``, the checkpoint lock SHARED (waited for at most
        :data:`HOLD_WAIT_S`: this connection holds SQLite's write lock now), ``fn(conn)``,
        ``COMMIT``; rollback on any exception; the lock released.

        Returns:
            ``(fn's result, t_begin, t_commit, lock_was_held)`` (monotonic seconds).
        Raises:
            CheckpointLockMet: a checkpoint holds the lock (rolled back: retry waiting first).
            Whatever ``BEGIN``/``fn``/``COMMIT`` raised.
        """
        conn = self.conn
        held = False
        self._tx_taken = None
        try:
            self._stage = "begin"
            conn.execute("BEGIN IMMEDIATE")
            try:
                failpoints.hit("write.before_lock")
                held = self._enter_shared()
                t_begin = time.monotonic()
                self._stage = "statement"
                result = fn(conn)
                self._t_precommit = time.monotonic()  # still inside the write lock
                self._stage = "commit"
                conn.execute("COMMIT")
                return result, t_begin, time.monotonic(), held
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
        finally:
            if held:
                self._guard.release()  # type: ignore[union-attr]

    def _corrupt(self, exc: BaseException) -> StateDbCorruptError:
        """Structural corruption: sticky refusal, never a checkpoint again (SPEC §12)."""
        err = StateDbCorruptError(
            "session storage stopped writing because the database file is damaged ("
            f"{exc}). Nothing more is written to it. Stop every process using this profile, "
            "then run `hermes-state sessions recover STATE.DB --output NEW.db "
            "--allow-partial` (it works on a copy).",
            f"SQLite error code {getattr(exc, 'sqlite_errorcode', '?')} on {self.db_path}")
        self._sticky = err
        self._retired = True
        events.enabled() and events.emit("refusal", reason="corrupt", detail=str(exc))
        disable_checkpoint_on_close(self.conn, str(self.db_path))
        return err

    def _fts_damage_behind(self, exc: BaseException) -> bool:
        """True when a plain SQLITE_CONSTRAINT came from a damaged FTS index (SPEC §12).

        FTS5 reports some damage (e.g. a zeroed structure record) as a bare "constraint failed"
        (code 19, no extended code) rather than SQLITE_CORRUPT_VTAB. Real constraint violations
        always carry an extended code (UNIQUE, NOT NULL, FOREIGN KEY, CHECK, ...), so only the
        bare code is probed: each FTS table runs ``integrity-check`` (rank 1: against the
        content table) and damage there surfaces as SQLITE_CORRUPT_VTAB. Runs outside any
        transaction; a probe that cannot run (busy) says no.
        """
        if getattr(exc, "sqlite_errorcode", None) != SQLITE_CONSTRAINT:
            return False
        conn = self.conn
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        try:
            present = [r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name IN (?, ?, ?)",
                FTS_TABLES)]
        except sqlite3.Error:
            return False
        for table in present:
            try:
                conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
            except sqlite3.DatabaseError as probe:
                if corruption_kind(probe) == "fts":
                    log.error("%s: %s behind %r", self.db_path, probe, str(exc))
                    return True
        return False

    def _switch_off_fts(self, exc: BaseException) -> None:
        """FTS-only corruption: drop the FTS triggers, mark ``fts_stale``; writes go on (§12).

        Search falls back to scanning while ``fts_stale`` is set; :func:`hermes_state.fts.repair.rebuild_fts`
        (doctor --fix, optimize-storage) rebuilds the index and clears the mark.
        """
        conn = self.conn
        if conn.in_transaction:
            conn.execute("ROLLBACK")

        def drop(c: sqlite3.Connection) -> None:
            for (name,) in c.execute(
                    "SELECT name FROM sqlite_master WHERE type = 'trigger' AND "
                    "name LIKE 'messages\\_fts%' ESCAPE '\\'").fetchall():
                c.execute(f'DROP TRIGGER IF EXISTS "{name}"')
            c.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES ('fts_stale', ?)",
                      (f"{time.time():.0f} {exc}",))

        # A write transaction like any other: under the checkpoint lock (issue 12).
        for _ in range(_WRITE_MAX_RETRIES):
            try:
                self._transaction(drop)
                break
            except CheckpointLockMet:
                self._wait_lock_free()
        else:
            raise self._lock_busy_error()
        log.error("the search index of %s is corrupt (%s): switched off; messages are still "
                  "written; `doctor --fix` rebuilds it", self.db_path, exc)
        events.enabled() and events.emit("refusal", reason="fts_corrupt", detail=str(exc))

    def _sight_lock_owner(self, run: tuple[int, float, float, int] | None, *,
                          checkpoint_lock: bool = False) -> tuple[int, float, float, int] | None:
        """Note who holds the write lock right after a failed attempt (SPEC §10.2).

        Args:
            run: ``(pid, first_seen_s, last_seen_s, sightings)`` (monotonic seconds) of the
                owner seen at the previous failed attempts in a row, or None.
        Returns:
            The updated run: extended when the same pid holds the lock now, restarted when
            another pid does, None when no owner is visible (the run is broken).
        """
        owner = self._exclusive_owner() if checkpoint_lock else None
        pid = owner[0] if owner else (None if checkpoint_lock
                                      else holders.write_lock_owner_pid(self.db_path))
        now = time.monotonic()
        if pid is None:
            return None
        if run is not None and run[0] == pid:
            return (pid, run[1], now, run[3] + 1)
        return (pid, now, now, 1)

    def _exclusive_owner(self) -> tuple[int, str] | None:
        """``(pid, command)`` of the process holding the checkpoint lock in the way that keeps
        this write out (exclusively; or in either mode when this write needs it exclusively,
        issue 24 item 3); a frozen one is marked ``stopped`` in the command."""
        me = os.getpid()
        for h in checkpoint_lock.lock_holders(self.db_path):
            # a write that needs it EXCLUSIVELY is held off by a holder of either mode
            if not h.waiting and (h.mode == "exclusive" or (
                    self._lock_mode == "exclusive" and h.pid != me)):
                return h.pid, h.command + (", stopped" if h.status == "stopped" else "")
        return None

    def _gave_up(self, attempts: int, waited: float, exc: BaseException,
                 owner_run: tuple[int, float, float, int] | None = None) -> WriteContentionError:
        """The error after the last attempt; names the write-lock owner (SPEC §4, §10.2).

        How long the owner has held the lock is not knowable from ``/proc/locks``; what is
        reported is what this writer saw: at how many of its consecutive failed attempts the
        same pid held the lock and over how many seconds those sightings spread, separately
        from how long this writer waited.
        """
        ckpt = bool(getattr(exc, "checkpoint_lock", False))
        owner = self._exclusive_owner() if ckpt else holders.write_lock_owner(self.db_path)
        which = ("state.db write lock held" if not ckpt else
                 "state.db checkpoint lock held" if self._lock_mode == "exclusive" else
                 "state.db checkpoint lock held exclusively")
        owner_line = None
        seen_s = None
        if owner:
            pid, command = owner
            if owner_run is not None and owner_run[0] == pid:
                sightings, seen_s = owner_run[3], owner_run[2] - owner_run[1]
                seen = (f"seen holding it at {sightings} consecutive failed attempt(s) of this "
                        f"writer over {seen_s:.1f}s" if sightings > 1
                        else "seen holding it at this writer's last failed attempt")
            else:
                seen = "seen holding it as this writer gave up"
            owner_line = (f"{which} by PID {pid} ({command}): {seen}; "
                          f"this writer waited {waited:.1f}s over {attempts} attempts")
        seen_holders = holders.scan(self.db_path).holders
        lines = "\n".join("  " + h.line() for h in seen_holders) or "  (no other holder visible)"
        who = ("this process (another connection it has open)"
               if owner and owner[0] == os.getpid() else "another process")
        user = (f"session storage could not write after {attempts} attempts over {waited:.1f}s "
                f"because {who} kept the write lock. Nothing was written by this call; "
                "retry it, and if it keeps happening run `doctor` to see who holds the store.")
        detail = (owner_line + "\n" if owner_line else "") + f"holders:\n{lines}\nlast error: {exc}"
        events.enabled() and events.emit("write_gave_up", attempts=attempts, waited_s=waited,
                                         lock_owner=owner_line, lock_owner_seen_s=seen_s)
        return WriteContentionError(user, detail, attempts=attempts, waited_s=waited,
                                    holders=[h.as_tuple() for h in seen_holders],
                                    lock_owner=owner_line, lock_owner_seen_s=seen_s)

    # ------------------------------------------------------------------ reads
    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` under the lock; autocommit, so no read transaction outlives the call.

        Text that is not valid UTF-8 (a foreign client's bytes in a TEXT column) is read with
        U+FFFD in place of the bad bytes instead of failing the whole read (issue 22 item 7):
        ``fn`` runs again with a lenient text factory, only after such a failure.
        """
        self._check_process()
        with self._lock:
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed session store.")
            if self._obligation is not None:
                self.retry_capture()
            try:
                try:
                    return fn(self.conn)
                except sqlite3.OperationalError as exc:
                    if not is_decode_error(exc):
                        raise
                with lenient_text(self.conn):
                    return fn(self.conn)
            except sqlite3.DatabaseError as exc:
                if corruption_kind(exc) == "structural":
                    if not self.read_only:
                        raise self._corrupt(exc) from exc
                    raise_named(self.db_path, exc)
                raise

    # ------------------------------------------------------------------ close
    def on_close(self, fn: Callable[[], object]) -> None:
        """Call ``fn()`` once after the connection is closed (a private copy's cleanup)."""
        self._on_close.append(fn)

    def close(self) -> None:
        """SPEC §10.5: healthy ⇒ PASSIVE checkpoint then close; retired ⇒ capture, no checkpoint.

        On an exposed SQLite both the PASSIVE checkpoint and the close (where SQLite's last
        connection checkpoints too) run holding the checkpoint lock (SHARED); close never
        waits for it: when it is held exclusively the checkpoint is skipped and SQLite's
        close-time checkpoint switched off (an exclusive holder means another connection is
        live, so this one is not the last anyway), issue 12. At NORMAL, a close whose
        checkpoint did not copy the whole WAL syncs it (the loss window's time bound, §4).
        """
        if os.getpid() != self._pid:
            # A forked child's copy: it holds none of the parent's locks, so closing it could
            # checkpoint or delete the parent's log; its locks and threads may be copies held
            # mid-use. Forgotten, never closed (the parent's handle is untouched).
            self._closed = True
            _UNCLOSABLE.append(self.conn)
            return
        if self._backfill is not None:
            self._backfill.stop()  # before taking the lock: it may be waiting for it
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conn = self.conn
            took: bool | None = False
            try:
                if not self.read_only and self.generation is not None and not self._retired:
                    found = None
                    try:
                        found = diff(self.generation, self.db_path, self._live_application_id())
                    except sqlite3.Error:
                        found = None
                    if found is not None and self._sticky is None:
                        self._retire(found[0], found[1], trigger="close")
                    elif self._sticky is None and self.journal_mode == "wal":
                        failpoints.hit("close.before_checkpoint")
                        failpoints.hit("checkpoint.before")
                        took = self._enter_for_checkpoint(0)
                        row = None
                        if took is None:
                            self._skipped_checkpoint("PASSIVE", "close")
                            disable_checkpoint_on_close(conn, str(self.db_path))
                        else:
                            row = self._checkpoint_locked("PASSIVE", "close", "shared" if took
                                                          else self._unlocked_checkpoint_why())
                        if self._sync_pending and not (row and row[0] == 0 and row[1] == row[2]):
                            # the close checkpoint did not copy (and so sync) the whole WAL
                            with self._sync_lock:
                                self._fdatasync_wal("close")
                self._sync_pending = False
                if self._retired or self._sticky is not None:
                    self.retry_stale_move()
                    ob = self._obligation
                    if ob is not None and ob.pending and not close_attempts(ob):
                        return  # kept open with its obligation until a capture or the exit
                    if not disable_checkpoint_on_close(conn, str(self.db_path)):
                        _UNCLOSABLE.append(conn)  # SPEC §10.5 fallback: never close it
                        return
                with self._sync_lock:  # never beside the syncer's use of SQLite's descriptor
                    conn.close()
            finally:
                if self._guard is not None:
                    if took:
                        self._guard.release()
                    self._guard.close()
                for fn in self._on_close:
                    fn()
