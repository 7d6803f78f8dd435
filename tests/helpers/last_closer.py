"""Leave a store in the state SQLite's last closing connection is in for a moment.

Usage: last_closer.py DB_PATH [--no-lock]. SQLite's last connection to close a WAL store takes
the EXCLUSIVE lock of ``state.db`` (a POSIX write lock over the SHARED range), checkpoints,
unlinks ``-shm`` and only then closes it, then closes and deletes ``-wal`` (os_unix.c
unixShmUnmap, wal.c sqlite3WalClose). This child takes that very lock, opens ``-wal`` and
``-shm`` (creating them if needed), unlinks ``-shm`` and prints CLOSING; on a stdin line it
finishes the close as SQLite does (closes ``-shm``, closes and deletes ``-wal``, releases the
lock) and prints CLOSED. ``--no-lock`` skips the EXCLUSIVE lock and holds what a connection
attached to the WAL holds instead (a read lock on the ``-shm`` dead-man-switch byte 128 and a
SHARED lock on ``state.db``): a process that keeps a deleted ``-shm`` without closing the store
(a retired generation). ``--raw`` takes no lock at all: a plain ``open()`` of the files (no
SQLite connection), which the open's lock-table scan does not look at (issue 24 item 2).
"""

import fcntl
import os
import sys

SHARED_FIRST = 0x40000000 + 2
SHARED_SIZE = 510


def main() -> int:
    db = sys.argv[1]
    flags = sys.argv[2:]
    lock = "--no-lock" not in flags and "--raw" not in flags
    attached = "--no-lock" in flags
    fd_db = os.open(db, os.O_RDWR)
    if lock:
        fcntl.lockf(fd_db, fcntl.LOCK_EX | fcntl.LOCK_NB, SHARED_SIZE, SHARED_FIRST, os.SEEK_SET)
    elif attached:
        fcntl.lockf(fd_db, fcntl.LOCK_SH | fcntl.LOCK_NB, SHARED_SIZE, SHARED_FIRST, os.SEEK_SET)
    fd_wal = os.open(f"{db}-wal", os.O_RDWR | os.O_CREAT, 0o600)
    fd_shm = os.open(f"{db}-shm", os.O_RDWR | os.O_CREAT, 0o600)
    if attached:
        fcntl.lockf(fd_shm, fcntl.LOCK_SH | fcntl.LOCK_NB, 1, 128, os.SEEK_SET)
    os.unlink(f"{db}-shm")
    print("CLOSING", flush=True)
    sys.stdin.readline()
    os.close(fd_shm)
    os.close(fd_wal)
    os.unlink(f"{db}-wal")
    os.close(fd_db)  # releases the lock
    print("CLOSED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
