"""Opening the store and the single write path (SPEC §4, §10).

:class:`StoreConnection` owns one ``sqlite3`` connection to one store and everything that must
happen around a write: the thread lock, ``BEGIN IMMEDIATE``, the generation check, the jittered
retry on lock errors, the PASSIVE checkpoint cadence, sticky refusals, and a close that never
checkpoints a retired generation. :class:`hermes_state.db.SessionDB` builds the API on top.
"""

from __future__ import annotations

import ctypes
import logging
import os
import random
import sqlite3
import stat
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

from . import atomic, checkpoint_lock, events, failpoints, holders
from .checkpoint_lock import CheckpointLock
from .errors import (
    HOLDER_OTHER,
    HOLDER_SELF,
    HOLDER_SELF_AND_OTHERS,
    DeletedWalGenerationError,
    StateDbCorruptError,
    StateDbReplacedError,
    StorePermissionError,
    WriteContentionError,
)
from .generation import (
    Generation,
    capture_retired,
    diff,
    identity,
    own_descriptors,
)
from .paths import access_problem, ensure_home, sqlite_uri, utc_stamp

log = logging.getLogger("hermes_state")

T = TypeVar("T")

BUSY_TIMEOUT_S = 1.0  # SPEC §4: not the default 5/30 s
_WRITE_MAX_RETRIES = 15  # attempts in total (SPEC §4)
RETRY_SLEEP_MIN_S = 0.020
RETRY_SLEEP_MAX_S = 0.150
_CHECKPOINT_EVERY_N_WRITES = 50
#: Checkpoints one write may meet (and wait out) before it gives up: a guard against a livelock,
#: never reached in practice (each one met is a checkpoint another connection completed).
_MAX_CHECKPOINTS_MET = 10 * _WRITE_MAX_RETRIES
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024  # bytes

SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE = 1006

# Connections of retired generations this process must never close (Python 3.11 fallback when
# NO_CKPT_ON_CLOSE cannot be set): kept alive until the process exits (SPEC §10.5).
_UNCLOSABLE: list[sqlite3.Connection] = []

_exposure_logged = False


class _CheckpointLockMet(Exception):
    """Internal: right after BEGIN IMMEDIATE a checkpoint held the checkpoint lock."""


def is_lock_error(exc: BaseException) -> bool:
    """True for SQLITE_BUSY / SQLITE_LOCKED (and their extended codes), by error code (SPEC §4)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return False
    return (code & 0xFF) in (SQLITE_BUSY, SQLITE_LOCKED)


def wal_reset_exposure(version: str | None = None) -> str | None:
    """Describe this SQLite's exposure to the WAL-reset race, or None when fixed (SPEC §4).

    SQLite 3.7.0 through 3.51.2 are affected, except the backports 3.44.6+ (3.44 line) and
    3.50.7+ (3.50 line); fixed in 3.51.3.
    """
    v = tuple(int(p) for p in (version or sqlite3.sqlite_version).split(".")[:3])
    v = v + (0,) * (3 - len(v))
    if v < (3, 7, 0) or v >= (3, 51, 3):
        return None
    if v[:2] == (3, 44) and v >= (3, 44, 6):
        return None
    if v[:2] == (3, 50) and v >= (3, 50, 7):
        return None
    return (f"SQLite {'.'.join(map(str, v))} has the WAL-reset race (two connections "
            "checkpointing while a commit resets the WAL can lose committed frames; fixed in "
            "3.51.3, backported to 3.44.6 and 3.50.7). Remedy: run with a Python linked against "
            "a fixed SQLite.")


SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26
SQLITE_CORRUPT_VTAB = 267  # corruption inside a virtual table: the FTS shadow tables
SQLITE_CONSTRAINT = 19  # plain, no extended code: what FTS5 returns on a zeroed structure record
SQLITE_HEADER = b"SQLite format 3\x00"


def corruption_kind(exc: BaseException) -> str | None:
    """``"fts"`` (SQLITE_CORRUPT_VTAB), ``"structural"`` (CORRUPT/NOTADB) or None (SPEC §12).

    FTS damage that FTS5 reports as a bare SQLITE_CONSTRAINT is recognised by the write path
    with a probe (``_fts_damage_behind``), not here: the code alone does not tell.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return "structural" if "malformed" in str(exc) else None
    if code == SQLITE_CORRUPT_VTAB or (code & 0xFF == SQLITE_CORRUPT and "fts5" in str(exc)):
        return "fts"
    if code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return "structural"
    return None


def btrees_sound(conn: sqlite3.Connection) -> bool:
    """True when ``PRAGMA quick_check`` finds every b-tree sound (SPEC §12).

    Used after a "malformed" error raised by an FTS query: FTS5 reports damage inside its index
    blobs as plain SQLITE_CORRUPT (code 11) from MATCH/bm25/snippet, indistinguishable by code
    from a broken b-tree. If every b-tree (the FTS shadow tables' included) passes quick_check,
    the damage can only be in the data FTS5 decodes itself: it is confined to the FTS index.
    O(store size); runs only on that error path. A check that cannot run says False.
    """
    try:
        return [r[0] for r in conn.execute("PRAGMA quick_check")] == ["ok"]
    except sqlite3.Error:
        return False


def quarantine_if_not_sqlite(db_path: Path) -> Path | None:
    """Move a 0-byte, zero-filled or non-SQLite ``state.db`` aside before connecting (§12).

    The file and its sidecars go to ``state.db.corrupt.<UTCSTAMP>.bak`` (``-wal``, ``-shm``
    appended) under the cross-process lock ``state.db.quarantine.lock`` (flock; the holder's pid
    is written in it), re-checked inside the lock, so two starting processes never both move
    things. Never touches a file some process holds open, a 0-byte file beside a non-empty WAL
    (a store being created), or a file this process already has a descriptor of (reading it
    would mean opening and closing a descriptor: SPEC §4). Names are taken without following
    links and without replacing anything (:mod:`hermes_state.atomic`).

    Returns:
        The backup path when the file was moved, else None.
    Raises:
        StateDbCorruptError: the file is damaged (not merely empty) and another process has it
            open: it is not moved under that process; the error names the holders (issue 11.7).
    """
    if not _looks_damaged(db_path):
        return None
    import fcntl

    with _DirLock(db_path.parent, exclusive=True):
        # Exclusive on the directory: no starting process is reading the header right now (they
        # read it under a shared lock), so every holder the scan sees really has the file open.
        lock = atomic.open_lock(f"{db_path}.quarantine.lock")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            os.ftruncate(lock, 0)
            os.pwrite(lock, f"pid={os.getpid()}\n".encode(), 0)
            if not _looks_damaged(db_path, locked=True):
                return None
            held = holders.scan(db_path).holders
            if held:
                if (os.lstat(db_path).st_size == 0
                        or not _looks_damaged(db_path, locked=True)):
                    # An empty file another process holds is a store being created; one that
                    # became a database while we scanned was being created too.
                    return None
                raise _damaged_and_held(db_path, held)
            name_for = atomic.numbered(f"{db_path}.corrupt.{utc_stamp()}.bak", before=".bak")
            for n in range(1, 100_000):  # the backup and both sidecar names must be free
                backup = name_for(n)
                if any(os.path.lexists(f"{backup}{s}") for s in ("", "-wal", "-shm")):
                    continue
                try:
                    atomic.rename_noreplace(db_path, backup)
                    break
                except FileExistsError:
                    continue
            for suffix in ("-wal", "-shm"):
                side = Path(f"{db_path}{suffix}")
                if os.path.lexists(side):
                    atomic.rename_noreplace(side, Path(f"{backup}{suffix}"))
        finally:
            os.close(lock)
    log.error("%s was not a SQLite database (empty, zero-filled or another format): moved "
              "aside to %s with its sidecars and a fresh store was created. Inspect it with "
              "`hermes-state sessions recover %s --inspect-only`.", db_path, backup, backup)
    events.enabled() and events.emit("quarantine", db=str(db_path), backup=str(backup))
    return backup


def _reset_fts_shadow(conn: sqlite3.Connection, table: str) -> None:
    """Give FTS5 ``table`` the shadow data of an empty table with the same arguments."""
    sql = conn.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()[0]
    args = sql[sql.index("(") + 1: sql.rindex(")")]
    conn.execute("DROP TABLE IF EXISTS temp.hermes_fts_reset")
    conn.execute(f"CREATE VIRTUAL TABLE temp.hermes_fts_reset USING fts5({args})")
    for suffix in ("_data", "_idx", "_docsize", "_content"):  # not _config: it stays valid
        shadow = table + suffix
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                            (shadow,)).fetchone():
            continue
        conn.execute(f"DELETE FROM main.{shadow}")
        fresh = f"hermes_fts_reset{suffix}"
        if conn.execute("SELECT 1 FROM temp.sqlite_master WHERE name = ?", (fresh,)).fetchone():
            conn.execute(f"INSERT INTO main.{shadow} SELECT * FROM temp.{fresh}")
    conn.execute("DROP TABLE temp.hermes_fts_reset")


class _DirLock:
    """``flock`` on the store's directory: shared while a starting process reads the header,
    exclusive while one decides to quarantine (so its holder scan never sees a mere reader)."""

    def __init__(self, directory: Path, *, exclusive: bool) -> None:
        self.directory, self.exclusive, self.fd = directory, exclusive, None

    def __enter__(self) -> "_DirLock":
        import fcntl

        try:
            self.fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
            fcntl.flock(self.fd, fcntl.LOCK_EX if self.exclusive else fcntl.LOCK_SH)
        except OSError:
            pass  # no directory lock on this filesystem: the quarantine lock file still orders
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _damaged_and_held(db_path: Path, held: list) -> StateDbCorruptError:
    """SPEC §12: a damaged store another process has open is never moved aside under it."""
    lines = "\n".join("  " + h.line() for h in held)
    err = StateDbCorruptError(
        f"session storage cannot open {db_path}: it is not a SQLite database (empty, "
        "zero-filled or another format) and another process has it open, so it was not moved "
        "aside. Nothing was written. Stop every process using this profile, then start again "
        "(the damaged file is then moved aside to state.db.corrupt.<UTCSTAMP>.bak and a fresh "
        f"store is created); `hermes-state sessions recover {db_path} --inspect-only` "
        "shows what is readable.",
        f"holders of the damaged store:\n{lines}")
    err.holders = [h.as_tuple() for h in held]
    return err


def _looks_damaged(db_path: Path, *, locked: bool = False) -> bool:
    """True for a 0-byte (no WAL beside it), zero-filled or non-SQLite regular ``state.db``.

    The header is read under a shared lock of the directory unless ``locked`` (see
    :func:`quarantine_if_not_sqlite`); never through a link, never blocking on a FIFO.
    """
    try:
        st = os.lstat(db_path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode):
        return False  # refused by name before this (_refuse_unsafe_files)
    if own_descriptors((st.st_dev, st.st_ino)):
        return False  # this process has it open: never open+close another descriptor
    if st.st_size == 0:
        wal = Path(f"{db_path}-wal")
        try:
            return os.lstat(wal).st_size == 0
        except FileNotFoundError:
            return True
    try:
        if locked:
            with atomic.open_regular(db_path) as fh:
                head = fh.read(4096)
        else:
            with _DirLock(db_path.parent, exclusive=False), atomic.open_regular(db_path) as fh:
                head = fh.read(4096)
    except FileNotFoundError:
        return False
    return not head.startswith(SQLITE_HEADER)


def _log_exposure_once() -> None:
    global _exposure_logged
    if not _exposure_logged:
        _exposure_logged = True
        text = wal_reset_exposure()
        if text:
            log.info(text)


def disable_checkpoint_on_close(conn: sqlite3.Connection, db_path: str) -> bool:
    """Make ``conn.close()`` skip SQLite's close-time checkpoint (SPEC §10.5).

    Python >= 3.12: ``Connection.setconfig``. Python 3.11: ``sqlite3_db_config`` through ctypes on
    the ``sqlite3*`` the connection object carries right after its object header, verified by
    asking SQLite for the database filename of that pointer first.

    Returns:
        True when the option is set and read back as set.
    """
    if hasattr(conn, "setconfig"):
        try:
            conn.setconfig(SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, True)  # type: ignore[attr-defined]
            return bool(conn.getconfig(SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE))  # type: ignore[attr-defined]
        except (sqlite3.Error, AttributeError):
            return False
    try:
        import _sqlite3

        lib = ctypes.CDLL(_sqlite3.__file__)
        ptr = ctypes.c_void_p.from_address(id(conn) + object.__basicsize__).value
        if not ptr:
            return False
        lib.sqlite3_db_filename.restype = ctypes.c_char_p
        lib.sqlite3_db_filename.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        name = lib.sqlite3_db_filename(ptr, b"main")
        if name is None or os.path.realpath(name.decode()) != os.path.realpath(db_path):
            return False
        out = ctypes.c_int(0)
        lib.sqlite3_db_config(ctypes.c_void_p(ptr), ctypes.c_int(SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE),
                              ctypes.c_int(1), ctypes.byref(out))
        return out.value == 1
    except (OSError, AttributeError, ValueError):
        return False


class StoreConnection:
    """One writable (or read-only) connection to a store, with the write path of SPEC §4.

    Args:
        db_path: absolute path of ``state.db``.
        read_only: open ``mode=ro``: no scan, no schema work, never creates the store.
        synchronous: ``"NORMAL"`` (durable against process crash) or ``"FULL"``.
    Raises:
        DeletedWalGenerationError: some process holds a deleted/replaced sidecar (SPEC §10.4).
        StorePermissionError: the directory or a store file cannot be written.
        sqlite3.OperationalError: read-only open of a store that does not exist.
    """

    def __init__(self, db_path: Path, *, read_only: bool = False, synchronous: str = "NORMAL"):
        self.db_path = Path(db_path)
        self.read_only = read_only
        self._lock = threading.RLock()
        self._rng = random.Random()  # seeded from os.urandom: jitter must not follow a run seed
        self._writes = 0
        self._stage = "begin"  # the write path's statement running now (retry events)
        self._t_precommit = 0.0  # monotonic s, right before the last COMMIT (in the lock)
        self._sticky: BaseException | None = None
        self._retired = False
        self._closed = False
        self._capture_dir: str | None = None
        self.generation: Generation | None = None
        self._main_fd: int | None = None
        self._initial_disk_app_id: int | None = None
        self.journal_mode = "?"
        self._backfill = None  # fts_backfill.BackfillThread after a deferred FTS re-index
        self._guard: CheckpointLock | None = None
        self._exposed = wal_reset_exposure() is not None
        self._lock_checkpoints = False
        _log_exposure_once()
        self.retired_holders: list = []
        if read_only:
            self._refuse_unsafe_files()
            self.conn = self._connect_ro()
            return
        ensure_home(self.db_path.parent)
        self._refuse_unsafe_files()
        problem = access_problem(self.db_path, write=True)
        if problem is not None:  # SPEC §4: the exact path, the permission and the fix
            raise problem
        self._refuse_if_retired_holders()
        self.quarantined_to = quarantine_if_not_sqlite(self.db_path)
        self._open_guard()
        try:
            self._connect_and_prepare(synchronous)
        except BaseException:
            self._guard.close()  # type: ignore[union-attr]
            raise
        self._start_backfill()
        events.enabled() and events.emit(
            "open", db=str(self.db_path), journal_mode=self.journal_mode,
            sqlite=sqlite3.sqlite_version, generation=self.generation.as_dict())

    # ------------------------------------------------------------------ opening
    def _connect_and_prepare(self, synchronous: str) -> None:
        failpoints.hit("open.before_connect")
        try:
            self.conn = self._connect_rw(synchronous)
        except sqlite3.DatabaseError as exc:
            self._raise_named(exc)
        try:
            self._prepare_schema()
            failpoints.hit("open.after_schema")
            self._record_generation()
        except sqlite3.DatabaseError as exc:
            self.conn.close()
            self._raise_named(exc)
        except BaseException:
            self.conn.close()
            raise

    def _open_guard(self) -> None:
        """Open the checkpoint lock (issue 12); an unusable one is logged, never silent."""
        guard = self._guard = CheckpointLock(self.db_path)
        guard.log_degraded(self._exposed)
        self._lock_checkpoints = self._exposed and guard.usable

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

    def _connect_ro(self) -> sqlite3.Connection:
        """``mode=ro``; ``immutable=1`` while a process holds a retired sidecar (issue 11.5).

        With a retired generation held, the ``-shm`` at the path may index frames of a WAL that
        is no longer there (``disk I/O error``), and any ordinary opener would create a new
        ``-wal``/``-shm`` (a second generation). ``immutable=1`` reads the main file alone and
        touches neither sidecar: what the holder committed since the last checkpoint is not
        shown (it is safe in its WAL; the CLI says so). ``self.retired_holders`` lists them.
        """
        try:
            os.stat(self.db_path)
        except FileNotFoundError:
            raise sqlite3.OperationalError(f"no session store at {self.db_path}") from None
        except PermissionError as exc:
            raise (access_problem(self.db_path, write=False) or exc) from exc
        self.retired_holders = holders.scan(self.db_path, include_self=True).retired_holders
        params = {"mode": "ro"}
        if self.retired_holders:
            params["immutable"] = "1"
        uri = sqlite_uri(self.db_path, **params)
        conn = None
        try:  # a permission or damage problem surfaces here (SQLite opens lazily), by name
            conn = sqlite3.connect(uri, uri=True, timeout=BUSY_TIMEOUT_S, isolation_level=None,
                                   check_same_thread=False)
            conn.row_factory = sqlite3.Row
            conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            problem = access_problem(self.db_path, write=False)
            if problem is not None:
                raise problem from exc
            self._raise_named(exc)
        return conn

    def _refuse_unsafe_files(self) -> None:
        """The three store files must be plain files or absent: never a link, FIFO or device.

        Checked with ``lstat`` before anything opens them (a FIFO would block the open, a device
        would be read as a database). Raises :class:`~hermes_state.atomic.UnsafePathError`.
        """
        for suffix in ("", "-wal", "-shm"):
            p = Path(f"{self.db_path}{suffix}")
            try:
                st = os.lstat(p)
            except (FileNotFoundError, NotADirectoryError):
                continue
            if not stat.S_ISREG(st.st_mode):
                raise atomic.UnsafePathError(
                    f"refusing to open the session store: {p} is "
                    f"{atomic.describe_mode(st.st_mode)}, not a regular file.",
                    "the three files state.db, state.db-wal and state.db-shm must be plain files "
                    "in one directory (SPEC §1); replace it with the real file or move it away.",
                    path=str(p))

    def _raise_named(self, exc: sqlite3.DatabaseError) -> None:
        """Re-raise ``exc`` as the named refusal :meth:`_damaged_at_open` makes of it, if any."""
        err = self._damaged_at_open(exc)
        if err is exc:
            raise exc
        raise err from exc

    def _damaged_at_open(self, exc: sqlite3.DatabaseError) -> BaseException:
        """A structural error while opening becomes a named refusal (SPEC §12, issue 11.7)."""
        if corruption_kind(exc) != "structural":
            return exc
        held = holders.scan(self.db_path).holders
        lines = "\n".join("  " + h.line() for h in held) or "  (no other holder visible)"
        err = StateDbCorruptError(
            f"session storage cannot use {self.db_path}: the database file is damaged ({exc}). "
            "Nothing was written. Stop every process using this profile, then run "
            f"`hermes-state sessions recover {self.db_path} --inspect-only` (it works "
            "on a copy) and follow the command it prints, or restore the newest snapshot "
            "(`backup list`, then `backup restore ID`).",
            f"SQLite error code {getattr(exc, 'sqlite_errorcode', '?')}; holders:\n{lines}")
        err.holders = [h.as_tuple() for h in held]
        return err

    def _refuse_if_retired_holders(self) -> None:
        """SPEC §10.4: never connect while any process holds a retired sidecar of this store."""
        found = holders.scan(self.db_path, include_self=True).retired_holders
        if not found:
            return
        lines = "\n".join("  " + h.line() for h in found)
        detail = (f"{len(found)} process(es) still hold a retired WAL generation of "
                  f"{self.db_path}:\n{lines}")
        events.enabled() and events.emit("refusal", reason="open_scan", detail=detail,
                                         holders=[h.as_tuple() for h in found])
        mine = [h for h in found if h.pid == os.getpid()]
        held_by = (HOLDER_OTHER if not mine else HOLDER_SELF if len(mine) == len(found)
                   else HOLDER_SELF_AND_OTHERS)
        raise DeletedWalGenerationError(detail, holders=[h.as_tuple() for h in found],
                                        held_by=held_by, pid=os.getpid())

    def _connect_rw(self, synchronous: str) -> sqlite3.Connection:
        conn = sqlite3.connect(str(self.db_path), timeout=BUSY_TIMEOUT_S, isolation_level=None,
                               check_same_thread=False)
        conn.row_factory = sqlite3.Row
        try:
            self._apply_pragmas(conn, synchronous)
        except BaseException:
            conn.close()
            raise
        self._tighten_modes()
        return conn

    def _apply_pragmas(self, conn: sqlite3.Connection, synchronous: str) -> None:
        if synchronous.upper() not in ("NORMAL", "FULL"):
            raise ValueError(f"synchronous must be NORMAL or FULL, not {synchronous!r}")
        mode = self._retry_lock(lambda: conn.execute("PRAGMA journal_mode").fetchone()[0])
        from .store_shape import keeps_journal_mode

        if mode.lower() != "wal" and not keeps_journal_mode(conn, mode, self.db_path):
            mode = self._retry_lock(lambda: conn.execute("PRAGMA journal_mode=WAL").fetchone()[0])
            if mode.lower() != "wal":
                log.warning("this filesystem refused WAL mode for %s; using journal_mode=%s "
                            "(one writer at a time, readers block during commits)",
                            self.db_path, mode)
        self.journal_mode = mode.lower()
        conn.execute("PRAGMA foreign_keys=ON")
        if self._exposed:
            # Every checkpoint goes through checkpoint() and its lock: none from SQLite's
            # automatic checkpoint inside a COMMIT (issue 12).
            conn.execute("PRAGMA wal_autocheckpoint=0")
        conn.execute(f"PRAGMA synchronous={synchronous.upper()}")
        conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")

    def _tighten_modes(self) -> None:
        """chmod 0600 on the path (never open+close a descriptor of a live store, SPEC §1)."""
        for suffix in ("", "-wal", "-shm"):
            p = f"{self.db_path}{suffix}"
            try:
                if os.stat(p).st_mode & 0o077:
                    os.chmod(p, 0o600)
            except OSError:
                pass

    def _retry_lock(self, fn: Callable[[], T]) -> T:
        for attempt in range(1, _WRITE_MAX_RETRIES + 1):
            try:
                return fn()
            except sqlite3.OperationalError as exc:
                if not is_lock_error(exc) or attempt == _WRITE_MAX_RETRIES:
                    raise
                time.sleep(self._rng.uniform(RETRY_SLEEP_MIN_S, RETRY_SLEEP_MAX_S))
        raise AssertionError("unreachable")

    def _settled(self) -> bool:
        """True when the open has nothing to write (SPEC §3; :mod:`hermes_state.store_shape`).

        Read-only and cheap (catalogue queries; the declared columns are computed once per
        process). Judged by structure, whatever the store's version (2 to 31) and the names of
        its triggers and indexes: :func:`hermes_state.store_shape.pending_work` is empty.
        Sets ``self._schema_version_seen`` (None when unreadable).
        """
        from .store_shape import pending_work, stored_version

        self._schema_version_seen = stored_version(self.conn)[0]
        return not pending_work(self.conn)

    def _prepare_schema(self) -> None:
        """Create, migrate or complete the schema unless settled (SPEC §2, §3).

        Settled store: no write at all (a store newer than the code only gets its once-per-process
        warning). Otherwise :func:`hermes_state.migrations.prepare_store`: a fresh store in one
        transaction; an older one column reconciliation, then each versioned step in its own
        transaction with its ``migrate.v<N>.before_commit`` failpoint, then the idempotent rest.
        The outcome is kept in ``self.migration_report`` (None when settled).
        """
        from . import migrations

        self.migration_report = None
        if self._settled():
            migrations.warn_if_newer(self.db_path, self._schema_version_seen)
            return
        self.migration_report = migrations.prepare_store(self)

    def _start_backfill(self) -> None:
        """Resume a deferred FTS back-fill in a background thread (SPEC §2.4, fts_backfill)."""
        from . import fts_backfill

        if self.read(fts_backfill.wanted):
            self._backfill = fts_backfill.BackfillThread(self)
            self._backfill.start()

    def _record_generation(self) -> None:
        token = self.conn.execute(
            "SELECT value FROM state_meta WHERE key='db_file_generation'").fetchone()[0]
        app_id = self.conn.execute("PRAGMA application_id").fetchone()[0]
        self.generation = Generation.read(self.db_path, app_id, token)
        self._main_fd = None
        if self.journal_mode == "wal" and self._disk_application_id() != app_id:
            # Page 1 with our application_id is still only in the WAL (fresh store): move it to
            # the file so that the on-disk header can be compared before every write.
            self.checkpoint("PASSIVE", trigger="open")
        self._initial_disk_app_id = self._disk_application_id()

    def _disk_application_id(self) -> int | None:
        """``application_id`` in the 100-byte header ON DISK, read through SQLite's own descriptor.

        A read through the connection would be served from the page cache or our own WAL frames
        and never see a ``cp other.db state.db`` (same inode, new content). ``os.pread`` on the
        descriptor SQLite already holds opens nothing and closes nothing (SPEC §4). Returns None
        when no descriptor of ours has the recorded inode (non-Linux), -1 for a file whose header
        is not SQLite's.
        """
        assert self.generation is not None
        fd = self._main_fd
        if fd is not None:
            try:
                st = os.fstat(fd)
                if (st.st_dev, st.st_ino) != tuple(self.generation.db or ()):
                    fd = None
            except OSError:
                fd = None
        if fd is None:
            fds = own_descriptors(self.generation.db)
            fd = fds[0] if fds else None
            self._main_fd = fd
        if fd is None:
            return None
        try:
            header = os.pread(fd, 100, 0)
        except OSError:
            return None
        if len(header) < 72 or not header.startswith(b"SQLite format 3\x00"):
            return -1 if header else 0
        return int.from_bytes(header[68:72], "big", signed=True)

    def rerecord_generation(self) -> None:
        """Re-take the identities after this handle's own VACUUM/TRUNCATE (SPEC §8, §10.1)."""
        with self._lock:
            self._record_generation()

    # ------------------------------------------------------------------ the write path
    @property
    def writes(self) -> int:
        """Successful write transactions on this connection."""
        return self._writes

    @property
    def capture_dir(self) -> str | None:
        """The retired-WAL capture this handle wrote, if any (SPEC §10.3)."""
        return self._capture_dir

    def _check_usable(self) -> None:
        if self._closed:
            raise sqlite3.ProgrammingError("Cannot operate on a closed session store.")
        if self.read_only:
            raise sqlite3.OperationalError(
                "this session store handle is read-only (mode=ro); open it without read_only "
                "to write")
        if self._sticky is not None:
            raise self._sticky

    def _check_generation(self) -> None:
        """SPEC §10.1: the store under the connection must still be the one on disk."""
        assert self.generation is not None
        app_id = self._live_application_id()
        found = diff(self.generation, self.db_path, app_id)
        if found is None:
            return
        kind, detail = found
        self._retire(kind, detail, trigger="halt")
        raise self._sticky  # type: ignore[misc]

    def _live_application_id(self) -> int:
        """The recorded application_id unless the header on disk proves another file is there."""
        assert self.generation is not None
        disk = self._disk_application_id()
        if disk is None or disk in (self.generation.application_id, self._initial_disk_app_id):
            return self.generation.application_id
        return disk

    def _retire(self, kind: str, detail: str, trigger: str) -> None:
        """Make the refusal sticky, capture the retired WAL, never checkpoint again."""
        self._retired = True
        capture = None
        try:
            path = capture_retired(self.db_path, self.generation, trigger)  # type: ignore[arg-type]
            capture = str(path) if path else None
        except Exception as exc:  # noqa: BLE001 - the refusal must stand even if evidence fails
            log.error("could not write the retired-WAL capture beside %s: %s", self.db_path, exc)
        self._capture_dir = capture
        if kind == "replaced_db":
            detail += self._move_stale_sidecars_aside(capture)
        if capture:
            detail += f"; evidence captured in {capture}"
            events.enabled() and events.emit("capture", dir=capture, trigger=trigger, reason=kind)
        if kind == "retired_wal":
            # This handle holds the retired generation itself (issue 16 item 4).
            detail = (f"held by this process: PID {os.getpid()}, the connection that was "
                      f"writing; {detail}")
            err: StateDbReplacedError = DeletedWalGenerationError(
                detail, capture_dir=capture, held_by=HOLDER_SELF, pid=os.getpid(),
                own_connection=True)
        else:
            err = StateDbReplacedError(detail)
        self._sticky = err
        events.enabled() and events.emit("refusal", reason=kind, detail=detail)
        disable_checkpoint_on_close(self.conn, str(self.db_path))

    def _move_stale_sidecars_aside(self, capture: str | None) -> str:
        """After ``state.db`` was replaced, our ``-wal``/``-shm`` still sit at the path.

        They belong to the file that was replaced; the next opener would replay our frames onto
        the new file. While they are still exactly ours (same inode as recorded), rename them into
        the capture directory (or beside the store) so the new file opens clean. Nothing is
        deleted: the bytes stay as evidence.
        """
        assert self.generation is not None
        moved = []
        for suffix, recorded in (("-wal", self.generation.wal), ("-shm", self.generation.shm)):
            path = Path(f"{self.db_path}{suffix}")
            if recorded is None or identity(path) != tuple(recorded):
                continue
            if capture:
                dest = Path(capture) / f"{path.name}.moved-from-path"
            else:
                dest = path.with_name(f"{path.name}.stale-{utc_stamp()}-{os.getpid()}")
            try:
                moved.append(str(atomic.move_aside(path, atomic.numbered(dest))))
            except OSError as exc:
                log.error("could not move the stale %s aside: %s", path, exc)
        return f"; moved this generation's sidecars aside: {', '.join(moved)}" if moved else ""

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
        with self._lock:
            self._check_usable()
            conn = self.conn
            t0 = time.monotonic()
            attempt = 0
            fts_repaired = False
            # (pid, first seen, last seen, sightings) of the write-lock owner at failed attempts
            owner_run: tuple[int, float, float, int] | None = None
            wait_first = False  # the last attempt met a checkpoint: wait for its lock first
            met = 0  # checkpoints met right after BEGIN (each waited out, holding nothing)
            t_attempt = t0  # when the current attempt began (retry events: waited_s)

            def body(c: sqlite3.Connection) -> T:
                failpoints.hit("write.after_begin")
                if check_generation:
                    self._check_generation()
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
                except _CheckpointLockMet:
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
            failpoints.hit("write.after_commit")
            self._writes += 1
            events.enabled() and events.emit(
                "write", seq=self._writes, attempts=attempt, op=op, t_begin=t_begin,
                t_commit=t_commit, t_precommit=self._t_precommit, met=met,
                lock="shared" if held else self._unlocked_why())
            if self._writes % _CHECKPOINT_EVERY_N_WRITES == 0:
                self.checkpoint("PASSIVE", trigger="cadence")
            return result

    def _transaction(self, fn: Callable[[sqlite3.Connection], T]
                     ) -> tuple[T, float, float, bool]:
        """``BEGIN IMMEDIATE``, the checkpoint lock SHARED (tried, never waited for: this
        connection holds SQLite's write lock now), ``fn(conn)``, ``COMMIT``; rollback on any
        exception; the lock released.

        Returns:
            ``(fn's result, t_begin, t_commit, lock_was_held)`` (monotonic seconds).
        Raises:
            _CheckpointLockMet: a checkpoint holds the lock (rolled back: retry waiting first).
            Whatever ``BEGIN``/``fn``/``COMMIT`` raised.
        """
        conn = self.conn
        held = False
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

    def _enter_shared(self) -> bool:
        """Try the checkpoint lock SHARED for one write transaction, without waiting (issue 12).

        Returns:
            True when taken (the caller releases it); False when there is nothing to take (lock
            off or degraded, or this process holds it exclusively for maintenance).
        Raises:
            _CheckpointLockMet: a checkpoint (or maintenance) holds it now.
        """
        guard = self._guard
        if guard is None or guard.fd is None or checkpoint_lock.held_here(self.db_path):
            return False
        if guard.try_shared():
            return True
        raise _CheckpointLockMet()

    def _wait_lock_free(self) -> None:
        """Wait, holding nothing, until no checkpoint holds the lock (at most the busy timeout).

        Raises:
            sqlite3.OperationalError: still held; coded SQLITE_BUSY (a lock error of SPEC §4:
                jittered retry) with ``checkpoint_lock = True``.
        """
        guard = self._guard
        if guard is None or guard.fd is None:
            return
        if not guard.acquire_shared(BUSY_TIMEOUT_S):
            raise self._lock_busy_error()
        guard.release()

    def _lock_busy_error(self) -> sqlite3.OperationalError:
        found = checkpoint_lock.lock_holders(self.db_path)
        who = ", ".join(h.line() for h in found if h.mode == "exclusive") or "another process"
        exc = sqlite3.OperationalError(
            f"the store's checkpoint lock is held exclusively by {who} (a checkpoint or a "
            f"maintenance command)")
        exc.sqlite_errorcode = SQLITE_BUSY  # type: ignore[attr-defined]
        exc.sqlite_errorname = "SQLITE_BUSY"  # type: ignore[attr-defined]
        exc.checkpoint_lock = True  # type: ignore[attr-defined]
        return exc

    def _unlocked_why(self) -> str:
        """The ``lock`` field of a write event taken without the shared lock."""
        if checkpoint_lock.held_here(self.db_path):
            return "exclusive"
        return "off"

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
        from .schema import FTS_TABLES

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

        Search falls back to scanning while ``fts_stale`` is set; :meth:`rebuild_fts` (doctor
        --fix, optimize-storage) rebuilds the index and clears the mark.
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
            except _CheckpointLockMet:
                self._wait_lock_free()
        else:
            raise self._lock_busy_error()
        log.error("the search index of %s is corrupt (%s): switched off; messages are still "
                  "written; `doctor --fix` rebuilds it", self.db_path, exc)
        events.enabled() and events.emit("refusal", reason="fts_corrupt", detail=str(exc))

    def rebuild_fts(self) -> int:
        """Rebuild the FTS index after corruption and clear ``fts_stale`` (SPEC §12).

        A corrupt FTS5 table cannot even be dropped (its constructor fails), so each table's
        shadow data is first reset to that of a freshly created, empty table with the same
        arguments (built in the ``temp`` schema). On the v23 layout the tables are then refilled
        from ``messages`` and the triggers recreated; any other layout (a legacy one kept since
        a migration) is replaced whole by the v23 layout built from ``messages``
        (:func:`hermes_state.fts_layout.replace_layout`), so rows written while the index was
        switched off are indexed too. One write transaction.

        Returns:
            Messages in the store (every one is indexed afterwards).
        """
        from .fts_inventory import EXTERNAL_V23, inventory
        from .fts_layout import replace_layout
        from .schema import create_fts

        def fn(conn: sqlite3.Connection) -> int:
            inv = inventory(conn)
            present = [t for t in ("messages_fts", "messages_fts_trigram") if t in inv.tables]
            for table in present:
                _reset_fts_shadow(conn, table)
            if inv.kind != EXTERNAL_V23:
                replace_layout(conn, backfill=True)
                return conn.execute("SELECT count(*) FROM messages").fetchone()[0]
            conn.execute("DELETE FROM state_meta WHERE key IN ('fts_stale', "
                         "'fts_rebuild_high_water', 'fts_rebuild_progress')")
            for table in present:
                extra = "AND role <> 'tool'" if table == "messages_fts_trigram" else ""
                conn.execute(f"INSERT INTO {table}(rowid, content, tool_name, tool_calls) "
                             f"SELECT id, content, tool_name, tool_calls FROM messages "
                             f"WHERE 1 {extra}")
            create_fts(conn)  # recreates the dropped triggers (IF NOT EXISTS)
            return conn.execute("SELECT count(*) FROM messages").fetchone()[0]

        return self.execute_write(fn, op="rebuild_fts")

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
        """``(pid, command)`` of the process holding the checkpoint lock exclusively (issue 12);
        a frozen one is marked ``stopped`` in the command."""
        for h in checkpoint_lock.lock_holders(self.db_path):
            if h.mode == "exclusive" and not h.waiting:
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
        which = "state.db checkpoint lock held exclusively" if ckpt else "state.db write lock held"
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

    def checkpoint(self, mode: str = "PASSIVE", *, trigger: str = "manual",
                   wait: float = BUSY_TIMEOUT_S) -> tuple | None:
        """``PRAGMA wal_checkpoint(mode)``; returns ``(busy, log, checkpointed)`` or None.

        On an SQLite exposed to the WAL-reset race it runs holding the checkpoint lock
        EXCLUSIVELY, so it overlaps no write transaction of the store in any process (issue
        12); a lock that stays held for ``wait`` seconds skips this checkpoint (event with
        ``skipped``), it never hangs. Never runs on a retired/replaced/corrupt handle. Failures
        are logged, not raised (SPEC §4: a checkpoint is housekeeping).
        """
        with self._lock:
            if self._retired or self._sticky is not None or self.journal_mode != "wal":
                return None
            failpoints.hit("checkpoint.before")
            took = self._enter_exclusive(wait)
            if took is None:
                self._skipped_checkpoint(mode, trigger)
                return None
            try:
                return self._checkpoint_locked(mode, trigger, "exclusive" if took
                                               else self._unlocked_checkpoint_why())
            finally:
                if took:
                    self._guard.release()  # type: ignore[union-attr]

    def _enter_exclusive(self, wait: float) -> bool | None:
        """Take the checkpoint lock EXCLUSIVELY before a checkpoint (issue 12).

        Returns:
            True when taken (the caller releases it), False when not needed (fixed SQLite, lock
            off or degraded, or already held by this process for maintenance), None when it
            stayed busy for ``wait`` seconds (0 = one try).
        """
        if not self._lock_checkpoints or checkpoint_lock.held_here(self.db_path):
            return False
        guard = self._guard
        if guard.acquire_exclusive(0):  # type: ignore[union-attr]
            return True
        if wait <= 0:
            return None
        # Queue for SQLite's write lock like any writer (its busy timeout): while this
        # connection holds it, no write transaction can start, and a writer holds the
        # checkpoint lock only while it holds the write lock, so only writers finishing their
        # COMMIT still hold it. Without this, writers chaining their shared holds under load
        # starve the checkpoint. Nothing is written: the transaction is rolled back.
        try:
            self.conn.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            if is_lock_error(exc):
                return None
            raise
        try:
            ok = guard.acquire_exclusive(wait)  # type: ignore[union-attr]
        finally:
            self.conn.execute("ROLLBACK")
        return True if ok else None

    def _unlocked_checkpoint_why(self) -> str:
        if checkpoint_lock.held_here(self.db_path):
            return "exclusive"
        return "not needed" if not self._exposed else "off"

    def _skipped_checkpoint(self, mode: str, trigger: str) -> None:
        log.info("%s checkpoint of %s skipped: the checkpoint lock is busy", mode, self.db_path)
        if events.enabled():
            events.emit("checkpoint", mode=mode, trigger=trigger, seq=self._writes,
                        skipped="checkpoint lock busy", lock="busy",
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

    # ------------------------------------------------------------------ reads
    def read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn(conn)`` under the lock; autocommit, so no read transaction outlives the call."""
        with self._lock:
            if self._closed:
                raise sqlite3.ProgrammingError("Cannot operate on a closed session store.")
            try:
                return fn(self.conn)
            except sqlite3.DatabaseError as exc:
                if corruption_kind(exc) == "structural":
                    if not self.read_only:
                        raise self._corrupt(exc) from exc
                    self._raise_named(exc)
                raise

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """SPEC §10.5: healthy ⇒ PASSIVE checkpoint then close; retired ⇒ capture, no checkpoint.

        On an exposed SQLite both the PASSIVE checkpoint and the close (where SQLite's last
        connection checkpoints too) run holding the checkpoint lock exclusively; close never
        waits for it: when it is busy the checkpoint is skipped and SQLite's close-time
        checkpoint switched off (a busy lock means another connection is live, so this one is
        not the last anyway), issue 12.
        """
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
                        took = self._enter_exclusive(0)
                        if took is None:
                            self._skipped_checkpoint("PASSIVE", "close")
                            disable_checkpoint_on_close(conn, str(self.db_path))
                        else:
                            self._checkpoint_locked("PASSIVE", "close", "exclusive" if took
                                                    else self._unlocked_checkpoint_why())
                if self._retired or self._sticky is not None:
                    if not disable_checkpoint_on_close(conn, str(self.db_path)):
                        _UNCLOSABLE.append(conn)  # SPEC §10.5 fallback: never close it
                        return
                conn.close()
            finally:
                if self._guard is not None:
                    if took:
                        self._guard.release()
                    self._guard.close()
