"""Which processes may hold a store's files, from the kernel's lock table (issue 24 item 2).

Listing ``/proc/*/fd`` of every process and reading every link costs in proportion to the
machine (thousands of descriptors on a desktop), not to the store. ``/proc/locks`` is cheap and
exact about one thing: every process with an SQLite connection attached to a WAL holds POSIX
locks on that generation's files for as long as it is attached (a read lock on the ``-shm``
dead-man-switch byte, a SHARED or EXCLUSIVE lock on the main file), whether those files are
still at their paths or deleted. :func:`candidates` returns those processes, on the store's
filesystem, so :func:`hermes_state.processes.holders.scan` reads only their descriptors. What
this does not find, and why the open's refusal does not need it, is in
docs/decisions/0003-doctor-and-holders.md ("The open scans only the processes on the lock table").

Fail closed: when ``/proc/locks`` cannot be read, when an OFD lock (no pid) carries SQLite's
signature on that filesystem, or when the lock table's device numbers cannot be shown to be
``stat``'s for this filesystem, :func:`candidates` returns None and the caller scans every
process as before.
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
from dataclasses import dataclass

from ..files.sqlite_format import PENDING_BYTE, SHM_DMS_LOCK, SHM_WRITE_LOCK

#: SQLite's lock bytes on ``-shm`` (the WAL write lock 120 .. the dead-man switch 128); on the
#: main file they start at PENDING_BYTE (PENDING, RESERVED, SHARED).
SHM_FIRST, SHM_LAST = SHM_WRITE_LOCK, SHM_DMS_LOCK
LOCK_SUFFIX = ".checkpoint.lock"

# st_dev values whose /proc/locks keys were shown to match stat's, in this process
_keying_ok: set[int] = set()


@dataclass(frozen=True)
class Lock:
    """One line of ``/proc/locks`` (held or awaited)."""

    kind: str  # POSIX, OFDLCK, FLOCK, ...
    pid: int  # -1 for an OFD lock (no owning process)
    dev: tuple[int, int]
    ino: int
    start: int
    end: int | None
    write: bool
    waiting: bool = False  # a request blocked behind a holder (``->`` in the line)

    @property
    def sqlite_signature(self) -> bool:
        """A byte range only SQLite's unix VFS locks: the ``-shm`` lock bytes or the main file's
        bytes from PENDING_BYTE on."""
        if self.start >= PENDING_BYTE:
            return True
        return SHM_FIRST <= self.start <= SHM_LAST and self.end is not None \
            and self.end <= SHM_LAST


def parse(text: str) -> list[Lock]:
    """Every parsable line of ``/proc/locks`` text."""
    out = []
    for line in text.splitlines():
        parts = line.split()
        waiting = "->" in parts
        if waiting:
            parts.remove("->")
        # id: KIND ADVISORY|MANDATORY READ|WRITE pid maj:min:ino start end
        if len(parts) < 8:
            continue
        try:
            maj, mnr, ino = parts[5].split(":")
            out.append(Lock(parts[1], int(parts[4]), (int(maj, 16), int(mnr, 16)), int(ino),
                            int(parts[6]), None if parts[7] == "EOF" else int(parts[7]),
                            parts[3] == "WRITE", waiting))
        except ValueError:
            continue
    return out


def read() -> list[Lock] | None:
    """The lock table now, or None when it cannot be read."""
    try:
        with open("/proc/locks", "rb") as fh:
            # bytes decoded as UTF-8: no codec lookup (a process that dropped its privileges
            # may not be able to import one)
            return parse(fh.read().decode("utf-8", "replace"))
    except OSError:
        return None


def _dev(st: os.stat_result) -> tuple[int, int]:
    return (os.major(st.st_dev), os.minor(st.st_dev))


def _probe_keying(real: str, dev: tuple[int, int]) -> bool:
    """Show that the lock table names this filesystem's files by ``stat``'s device: hold a
    ``flock`` SHARED on the store's lock file (a regular file beside it, never a store file)
    for the moment of one read of ``/proc/locks``. False when it cannot be shown."""
    try:
        fd = os.open(real + LOCK_SUFFIX,
                     os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError:
        return False
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or _dev(st) != dev:
            return False  # a planted FIFO, device or directory proves nothing
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            mine = True
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                return False
            mine = False  # held exclusively: that holder's line shows the key as well
        try:
            table = read() or []
        finally:
            if mine:
                fcntl.flock(fd, fcntl.LOCK_UN)
        return any(lk.kind == "FLOCK" and lk.ino == st.st_ino and lk.dev == dev
                   and (lk.pid == os.getpid() or not mine) for lk in table)
    finally:
        os.close(fd)


def candidates(real: str, idents: dict[str, tuple[int, int] | None]) -> set[int] | None:
    """Pids that may hold a file of the store, or None: scan every process instead.

    Args:
        real: the store's ``state.db`` after ``realpath``.
        idents: ``{path: (st_dev, st_ino) or None}`` of ``state.db``, ``-wal``, ``-shm`` now.
    Returns:
        Every pid with a POSIX lock on the store's main file or ``-shm`` now, or with a lock
        carrying SQLite's signature on any other inode of the store's filesystem (a deleted or
        replaced generation); None when the table cannot be trusted (module docstring).
    """
    try:
        dev = _dev(os.stat(os.path.dirname(real) or "."))
    except OSError:
        return None
    st_dev = os.makedev(*dev)
    table = read()
    if table is None:
        return None
    current = {ident[1] for ident in idents.values() if ident is not None}
    if st_dev not in _keying_ok:
        if not any(lk.ino in current and lk.dev == dev and lk.kind in ("POSIX", "OFDLCK")
                   for lk in table) and not _probe_keying(real, dev):
            return None
        _keying_ok.add(st_dev)
    pids: set[int] = set()
    for lk in table:
        if lk.kind not in ("POSIX", "OFDLCK") or lk.dev != dev:
            continue
        if lk.ino in current or lk.sqlite_signature:
            if lk.pid < 0:
                return None  # an OFD lock names no process: cannot be narrowed
            if lk.pid > 0:  # 0: a process of another pid namespace, invisible here anyway
                pids.add(lk.pid)
    return pids
