"""Damage judged before and after connecting: quarantine of a file that is not SQLite, named
refusals for a damaged store, b-tree soundness (SPEC §12, issue 11.7).

:func:`quarantine_if_not_sqlite` moves a 0-byte, zero-filled or foreign ``state.db`` aside
before the open connects; :func:`named_damage` turns a structural error at open into a
:class:`~hermes_state.errors.StateDbCorruptError` naming the holders; :func:`btrees_sound`
tells FTS-only damage from a broken b-tree. Nothing here repairs a store.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import stat
import time
from pathlib import Path

from .. import events, failpoints
from ..errors import (
    EvidenceWriteError,
    StateDbCorruptError,
    corruption_kind,
    store_io_error,
)
from ..files import atomic
from ..files.paths import utc_stamp
from ..files.sqlite_format import is_sqlite
from ..processes import holders
from ..processes.generation import own_descriptors
from ..processes.lock_files import LockTimeout, hold_file_lock

#: Seconds a starting process waits for another one's quarantine (a few renames) before the
#: named :class:`~hermes_state.processes.lock_files.LockTimeout` (SPEC §4: no unbounded wait).
QUARANTINE_LOCK_WAIT_S = 5.0
#: Seconds holders of a damaged file are scanned again before they count (header readers).
SETTLE_S = 1.0

log = logging.getLogger("hermes_state")


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
    appended) under the cross-process lock ``state.db.quarantine.lock`` (flock, waited for at
    most :data:`QUARANTINE_LOCK_WAIT_S`; the holder's pid is written in it when it can be),
    re-checked inside the lock, so two starting processes never both move things. Never touches a file some process holds open, a 0-byte file beside a non-empty WAL
    (a store being created), or a file this process already has a descriptor of (reading it
    would mean opening and closing a descriptor: SPEC §4). Names are taken without following
    links and without replacing anything (:mod:`hermes_state.files.atomic`).

    Returns:
        The backup path when the file was moved, else None.
    Raises:
        StateDbCorruptError: the file is damaged (not merely empty) and another process has it
            open: it is not moved under that process; the error names the holders (issue 11.7).
        LockTimeout: another process kept the quarantine lock past the deadline (named, with
            its state: a stopped process mid-quarantine).
        EvidenceWriteError: a rename failed (see :func:`_move_aside`).
    """
    if not _looks_damaged(db_path):
        return None
    try:
        lock = hold_file_lock(f"{db_path}.quarantine.lock", exclusive=True,
                              timeout=QUARANTINE_LOCK_WAIT_S, opener=atomic.open_lock,
                              what=f"the quarantine lock of {db_path}")
    except (LockTimeout, atomic.UnsafePathError):
        raise
    except OSError as exc:  # a full disk, an I/O error: named; the next open retries
        raise store_io_error(db_path, exc, "taking the quarantine lock of") from exc
    try:
        failpoints.hit("quarantine.locked")
        try:  # who holds it: informational (/proc/locks is the authority); never fatal
            os.ftruncate(lock, 0)
            os.pwrite(lock, f"pid={os.getpid()}\n".encode(), 0)
        except OSError:
            pass
        if not _looks_damaged(db_path, locked=True):
            return None
        held = _settled_holders(db_path)
        if held:
            if os.lstat(db_path).st_size == 0 or not _looks_damaged(db_path, locked=True):
                # An empty file another process holds is a store being created; one that
                # became a database while we scanned was being created too.
                return None
            raise _damaged_and_held(db_path, held)
        if not _looks_damaged(db_path, locked=True):
            # A store being created: its creator finished (and let go) while we scanned.
            return None
        backup = _move_aside(db_path)
    finally:
        os.close(lock)
    log.error("%s was not a SQLite database (empty, zero-filled or another format): moved "
              "aside to %s with its sidecars and a fresh store was created. Inspect it with "
              "`hermes-state sessions recover %s --inspect-only`.", db_path, backup, backup)
    events.enabled() and events.emit("quarantine", db=str(db_path), backup=str(backup))
    return backup


def _move_aside(db_path: Path) -> Path:
    """Rename the damaged file and its sidecars to ``state.db.corrupt.<UTCSTAMP>[-N].bak``.

    Raises:
        EvidenceWriteError: a rename failed (named: what was moved, what was not, why); nothing
            is deleted and the next open retries.
    """
    name_for = atomic.numbered(f"{db_path}.corrupt.{utc_stamp()}.bak", before=".bak")
    moved: list[str] = []
    try:
        for n in range(1, 100_000):  # the backup and both sidecar names must be free
            backup = name_for(n)
            if not any(os.path.lexists(f"{backup}{s}") for s in ("", "-wal", "-shm")):
                break
        # The sidecars first, state.db last: a move cut short (a full disk) leaves state.db
        # at the path, still damaged, so the next open moves the rest; never a damaged file's
        # -wal beside a fresh store (SQLite would replay it, checkpoint it and delete it).
        for suffix in ("-wal", "-shm"):
            side = Path(f"{db_path}{suffix}")
            if os.path.lexists(side):
                atomic.rename_noreplace(side, Path(f"{backup}{suffix}"))
                moved.append(f"{side.name} -> {backup.name}{suffix}")
        atomic.rename_noreplace(db_path, backup)
        moved.append(f"{db_path.name} -> {backup.name}")
        atomic.fsync_dir(db_path.parent)
    except OSError as exc:
        raise EvidenceWriteError(
            f"session storage could not move the damaged {db_path} aside "
            f"({exc.strerror or exc}: {exc.filename or db_path}). Nothing was deleted"
            + (f"; already moved: {'; '.join(moved)}" if moved else "")
            + ". Fix the cause (free space, permissions), then start again: the next open "
            "retries the move.", "quarantine of a file that is not SQLite (SPEC §12)",
            path=str(exc.filename or db_path)) from exc
    return backup


def _settled_holders(db_path: Path) -> list:
    """Holders of ``db_path`` that stay: a starting process of an older release (or one whose
    lock file was unusable) reads the header without the quarantine lock, through a
    descriptor it closes at once, so holders are scanned again every few ms for at most
    :data:`SETTLE_S` and only a scan that still sees them counts."""
    deadline = time.monotonic() + SETTLE_S
    while True:
        held = holders.scan(db_path).holders
        if not held or time.monotonic() >= deadline:
            return held
        time.sleep(0.005)


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

    The header is read under a SHARED lock of ``state.db.quarantine.lock`` (waited for at most
    :data:`QUARANTINE_LOCK_WAIT_S`) unless ``locked`` (the quarantiner holds it EXCLUSIVELY):
    the quarantiner's holder scan then never takes this read for a holder. Never the store's
    directory: a user's ``flock ~/.hermes`` holds that (issue 22 item 2). A lock file that
    cannot be used (a full disk, a planted link) only costs that guarantee; the quarantiner's
    settle scan still tells a brief read from a holder. Never through a link, never blocking
    on a FIFO.
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
    lock = None if locked else _shared_lock(db_path)
    try:
        with atomic.open_regular(db_path) as fh:
            head = fh.read(4096)
    except FileNotFoundError:
        return False
    except atomic.UnsafePathError:
        raise
    except OSError as exc:  # EIO, ENOSPC on open, ...: named, never a bare traceback
        raise store_io_error(db_path, exc, "reading the header of") from exc
    finally:
        if lock is not None:
            os.close(lock)
    return not is_sqlite(head)


def _shared_lock(db_path: Path) -> int | None:
    """The quarantine lock SHARED for a header read, or None when the lock file is unusable.

    Raises:
        LockTimeout: a quarantiner kept it past the deadline (a stopped process: named).
    """
    try:
        return hold_file_lock(f"{db_path}.quarantine.lock", exclusive=False,
                              timeout=QUARANTINE_LOCK_WAIT_S, opener=atomic.open_lock,
                              what=f"the quarantine lock of {db_path}")
    except LockTimeout:
        raise
    except OSError:  # no space for it, a planted link or FIFO (refused when quarantining)
        return None


def raise_named(db_path: Path, exc: sqlite3.DatabaseError) -> None:
    """Re-raise ``exc`` as the named refusal :func:`named_damage` makes of it, if any."""
    err = named_damage(db_path, exc)
    if err is exc:
        raise exc
    raise err from exc


def named_damage(db_path: Path, exc: sqlite3.DatabaseError) -> BaseException:
    """A structural error while opening becomes a named refusal (SPEC §12, issue 11.7)."""
    if corruption_kind(exc) != "structural":
        return exc
    held = holders.scan(db_path).holders
    lines = "\n".join("  " + h.line() for h in held) or "  (no other holder visible)"
    err = StateDbCorruptError(
        f"session storage cannot use {db_path}: the database file is damaged ({exc}). "
        "Nothing was written. Stop every process using this profile, then run "
        f"`hermes-state sessions recover {db_path} --inspect-only` (it works "
        "on a copy) and follow the command it prints, or restore the newest snapshot "
        "(`backup list`, then `backup restore ID`).",
        f"SQLite error code {getattr(exc, 'sqlite_errorcode', '?')}; holders:\n{lines}")
    err.holders = [h.as_tuple() for h in held]
    return err
