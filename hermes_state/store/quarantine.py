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
from pathlib import Path

from .. import events
from ..errors import StateDbCorruptError, corruption_kind
from ..files import atomic
from ..files.paths import utc_stamp
from ..files.sqlite_format import is_sqlite
from ..processes import holders
from ..processes.generation import own_descriptors

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
    appended) under the cross-process lock ``state.db.quarantine.lock`` (flock; the holder's pid
    is written in it), re-checked inside the lock, so two starting processes never both move
    things. Never touches a file some process holds open, a 0-byte file beside a non-empty WAL
    (a store being created), or a file this process already has a descriptor of (reading it
    would mean opening and closing a descriptor: SPEC §4). Names are taken without following
    links and without replacing anything (:mod:`hermes_state.files.atomic`).

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
    return not is_sqlite(head)


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
