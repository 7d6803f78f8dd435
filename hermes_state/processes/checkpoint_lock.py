"""The store's checkpoint lock: a ``flock`` on ``state.db.checkpoint.lock`` (SPEC §4; issue 12).

SQLite before 3.51.3 (3.44.6 / 3.50.7 on those lines) can lose committed frames when a
checkpoint overlaps a commit that resets the WAL. Among the store's own processes the overlap is
made impossible by one lock file beside the store:

* every write transaction of the store holds it SHARED (from right after ``BEGIN IMMEDIATE``
  to after ``COMMIT``/``ROLLBACK``);
* every checkpoint the store runs holds it EXCLUSIVELY (cadence, open, close, ``doctor --fix``,
  ``optimize``) on an exposed SQLite; on a fixed one checkpoints do not take it;
* a maintenance command (``backup restore``, ``optimize``, ``optimize-storage``, ``prune``,
  ``recover``) holds it EXCLUSIVELY across its decision ("nobody is writing") and its action:
  it is the store's write lock for issue 11 on every SQLite version.

It is a ``flock`` (never a POSIX lock, and never on ``state.db``: closing any descriptor of the
database would drop SQLite's own POSIX locks), on its own file that nothing ever writes, opened
without following symlinks. A crashed holder releases it. ``flock`` is per open file
description, so every :class:`CheckpointLock` (one per store connection) excludes every other
one, in this process as in others. The order of acquisition and the deadlock argument are in
``docs/decisions/0001-checkpoint-lock.md``.

``HERMES_STATE_CHECKPOINT_LOCK=off`` disables it (the toolkit's proof that its checker can fail,
and the benchmark's "without the lock" rows); that is reported as "NOT mitigated", never silent.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import sqlite3
import stat
import threading
import time
from pathlib import Path
from typing import Callable, Iterator

from .. import events
from ..errors import HermesStateError
from .generation import DirStamp
from .holders import describe_pid
from .lock_files import (
    LockHolder,
    file_identity,
    flock_holders,
    holders_text,
    lock_file_descriptors,
    open_lock_file,
    stale_locked,
    try_flock,
)

log = logging.getLogger("hermes_state")

_SH_NB = fcntl.LOCK_SH | fcntl.LOCK_NB
_EX_NB = fcntl.LOCK_EX | fcntl.LOCK_NB

LOCK_SUFFIX = ".checkpoint.lock"
ENV_VAR = "HERMES_STATE_CHECKPOINT_LOCK"
#: Seconds between two non-blocking attempts while waiting for the lock (``flock`` has no
#: timeout; a blocked ``flock`` could not be bounded by the busy timeout of SPEC §4).
POLL_S = 0.0005
#: A maintenance command waits this long for write transactions in flight to finish.
MAINTENANCE_WAIT_S = 5.0

_NO_FLOCK = {errno.EOPNOTSUPP, errno.ENOLCK, errno.EINVAL, errno.ENOSYS, errno.EBADF}

# Lock files this process holds EXCLUSIVELY through :func:`exclusive` (maintenance), by path:
# store connections of this process write and checkpoint inside that section without taking
# the lock again (their own descriptors would conflict with it).
_held: dict[str, list] = {}  # key -> [depth, CheckpointLock]
_held_guard = threading.Lock()
_degraded_logged: set[tuple[str, str]] = set()


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


def lock_path(db_path: str | os.PathLike) -> Path:
    """``<db>.checkpoint.lock`` beside the store (SPEC §1 table)."""
    return Path(f"{os.fspath(db_path)}{LOCK_SUFFIX}")


def disabled_by_env() -> bool:
    """True when ``HERMES_STATE_CHECKPOINT_LOCK=off`` (read at every open)."""
    return os.environ.get(ENV_VAR, "").strip().lower() in ("off", "0", "false", "no")


def _key(path: Path) -> str:
    return os.path.realpath(path)


def held_here(db_path: str | os.PathLike) -> bool:
    """True while this process holds the store's lock exclusively through :func:`exclusive`."""
    return bool(_held) and _key(lock_path(db_path)) in _held


class CheckpointLock:
    """One open file description of the lock file, and the ``flock`` operations on it.

    Never raises for an unusable lock file: ``problem`` says why (symlink, not a regular file,
    permission, no ``flock`` on this filesystem, disabled) and every operation then succeeds
    without locking (the degraded mode, logged once per path and reason, reported by ``doctor``
    and every chaos run as "exposed, NOT mitigated (problem)").

    Args:
        db_path: the store's ``state.db``.
        create: create the lock file when missing (store connections); False for readers of a
            store that may not be ours (``recover`` of a copy), where a missing file means "no
            live process of this code uses it": then ``problem`` is ``"absent"``.
        adopt: also lock, from now on, older lock files other processes hold locked right now
            (the path was removed or replaced under them: a split, issue 22 item 3).

    The file at the path is compared with the one this description locks (``(st_dev,
    st_ino)``, one ``lstat``) after each lock operation succeeds, as the write path does for
    ``-wal``/``-shm``: when it was removed or replaced, the new file is opened (created) and
    both are locked from then on, in inode order (``split`` says so). Docs:
    docs/decisions/0001-checkpoint-lock.md, "A split lock".
    """

    def __init__(self, db_path: str | os.PathLike, *, create: bool = True,
                 adopt: bool = True) -> None:
        self.db_path = Path(db_path)
        self.path = lock_path(db_path)
        self._path_str = os.fspath(self.path)
        self.fd: int | None = None
        self.problem: str | None = None
        self.mode: str | None = None  # None, "shared" or "exclusive"
        self.split: str | None = None  # why this lock holds more than one file, or None
        self._ident: tuple[int, int] | None = None  # (st_dev, st_ino) of ``fd``
        self._old: dict[int, tuple[int, int]] = {}  # fd -> identity of earlier lock files
        self._dir_stamp = DirStamp(self.path)  # the identity check's fast path (issue 24.4)
        #: ``(stamp, wall ns)`` of the store's directory (the lock file's) taken by the last
        #: identity check, after locking: the write path's generation check reuses it
        self.last_taken: tuple | None = None
        if disabled_by_env():
            self.problem = f"disabled by {ENV_VAR}=off"
        else:
            self.problem = self._open(create)
            if self.fd is not None and adopt:
                self._adopt_stale()

    def _open(self, create: bool) -> str | None:
        path = self.path
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        except OSError as exc:
            return f"cannot inspect {path}: {exc.strerror}"
        if st is not None and stat.S_ISLNK(st.st_mode):
            return f"{path} is a symbolic link (planted?); it is never followed"
        if st is not None and not stat.S_ISREG(st.st_mode):
            return f"{path} is not a regular file"
        if st is None and not create:
            return "absent"
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
        try:
            fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o600)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                return f"{path} is a symbolic link (planted?); it is never followed"
            if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                where = path if st is not None else path.parent
                return (f"cannot open {path}: permission denied (fix: chmod u+rw {path}"
                        + (f" or chmod u+rwx {where}" if st is None else "") + ")")
            return f"cannot open {path}: {exc.strerror}"
        try:
            fst = os.fstat(fd)
            if not stat.S_ISREG(fst.st_mode):
                os.close(fd)
                return f"{path} is not a regular file"
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                pass  # held exclusively by someone right now: flock works here
            else:
                os.close(fd)
                if exc.errno in _NO_FLOCK:
                    return (f"the filesystem of {path} does not support flock "
                            f"({errno.errorcode.get(exc.errno, exc.errno)})")
                return f"cannot lock {path}: {exc.strerror}"
        self.fd = fd
        self._ident = (fst.st_dev, fst.st_ino)
        return None

    # ---------------------------------------------------------------- identity (issue 22.3)
    def _follow_path(self) -> bool:
        """The path names another file than ``fd`` (removed, replaced): open that one too.
        True when ``fd`` changed (the old descriptor is kept in ``_old``).

        While the directory's stamp equals the one taken before a check that found the same
        file, one ``stat`` of the directory stands for the ``lstat`` (removing, replacing or
        renaming the lock file changes it): :class:`~hermes_state.processes.generation.DirStamp`.
        """
        stamps = self._dir_stamp
        stamp, taken = self.last_taken = stamps.take()
        if stamp is not None and stamp == stamps.kept:
            return False
        try:
            st = os.lstat(self._path_str)
            now: tuple[int, int] | None = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            now = None
        except OSError:
            return False
        if now == self._ident or (now is not None and now in self._old.values()):
            stamps.keep(stamp, taken)
            return False
        stamps.kept = None
        try:
            fd = open_lock_file(self.path)
        except OSError as exc:
            self._note_split(f"{self.path} was removed or replaced by something that cannot be "
                             f"locked ({exc.strerror or exc}); this process keeps locking the "
                             "file it had")
            return False
        new, old = file_identity(fd), self._ident
        self._old[self.fd] = old  # type: ignore[index]
        self.fd, self._ident = fd, new
        self._note_split(f"{self.path} was removed or replaced while this process had it open "
                         f"(inode {old[1] if old else '?'} -> {new[1] if new else '?'}); this "
                         "process now locks both files")
        return True

    def _adopt_stale(self) -> None:
        """Lock, from now on, the older lock files other processes hold locked at this moment
        (they would exclude nobody otherwise): each opened through ``/proc/PID/fd/N``."""
        for d in stale_locked(self.path, self._ident):
            if d.ident in self._old.values() or d.ident == self._ident:
                continue
            try:
                fd = os.open(d.proc_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
            except OSError:
                continue
            if file_identity(fd) != d.ident:
                os.close(fd)
                continue
            self._old[fd] = d.ident
            self._note_split(f"PID {d.pid} holds a removed or replaced {self.path.name} "
                             f"({d.link}); this process locks it too")

    def _note_split(self, why: str) -> None:
        self.split = why
        key = (str(self.path), why)
        if key not in _degraded_logged:
            _degraded_logged.add(key)
            log.error("checkpoint lock split: %s. Run `doctor`; restart the processes using "
                      "this store to end it (issue 22 item 3).", why)
        events.enabled() and events.emit("checkpoint_lock", status="split", reason=why)

    def _all_fds(self) -> list[int]:
        """Every descriptor to lock, in inode order (the same order in every process)."""
        fds = {self.fd: self._ident, **self._old}
        return sorted(fds, key=lambda fd: fds[fd] or (0, 0))  # type: ignore[arg-type]

    def holders(self) -> list[LockHolder]:
        """Processes holding (or waiting for) any file this lock locks (the old ones of a
        split too), from ``/proc/locks``; this description's own hold excluded."""
        idents = [self._ident, *self._old.values()] if self.fd is not None else []
        mine = os.getpid() if self.mode is not None else None
        return [h for ident in idents if ident for h in flock_holders(ident)
                if h.pid != mine]

    @property
    def usable(self) -> bool:
        """True when the lock file is open and ``flock`` works on it."""
        return self.fd is not None

    def log_degraded(self, exposed: bool) -> None:
        """Log (once per path and reason) that this store runs without the lock, and emit a
        ``checkpoint_lock`` event with ``status`` ``degraded``."""
        if self.problem is None or self.problem == "absent":
            return
        key = (str(self.path), self.problem)
        if key not in _degraded_logged:
            _degraded_logged.add(key)
            if exposed:
                log.error("checkpoint lock unavailable: %s. This store runs EXPOSED to the "
                          "WAL-reset race, NOT mitigated; maintenance commands refuse until it "
                          "is fixed.", self.problem)
            else:
                log.warning("checkpoint lock unavailable: %s. Maintenance commands refuse "
                            "until it is fixed.", self.problem)
        events.enabled() and events.emit("checkpoint_lock", status="degraded",
                                         reason=self.problem, exposed=exposed)

    # ---------------------------------------------------------------- operations
    def _try(self, op: int) -> bool:
        if not self._old:
            ok = try_flock(self.fd, op == fcntl.LOCK_EX)  # type: ignore[arg-type]
        else:
            ok = self._try_all(op)
        # One identity check, AFTER locking: a file removed or replaced before or while it was
        # locked is seen here, and the file now at the path is locked too before any use.
        if ok and self._follow_path():
            if not try_flock(self.fd, op == fcntl.LOCK_EX):  # type: ignore[arg-type]
                self._unlock_all()
                return False
        return ok

    def _try_all(self, op: int) -> bool:
        taken = []
        for fd in self._all_fds():
            if not try_flock(fd, op == fcntl.LOCK_EX):
                for t in taken:
                    fcntl.flock(t, fcntl.LOCK_UN)
                return False
            taken.append(fd)
        return True

    def _unlock_all(self) -> None:
        for fd in (self._all_fds() if self._old else (self.fd,)):
            fcntl.flock(fd, fcntl.LOCK_UN)  # type: ignore[arg-type]

    def _wait(self, op: int, timeout: float, max_pause: float = 0.004,
              before_try: Callable[[], None] | None = None) -> bool:
        if self._try(op):
            return True
        deadline = time.monotonic() + max(0.0, timeout)
        pause = POLL_S
        while time.monotonic() < deadline:
            time.sleep(pause)
            if before_try is not None:
                before_try()
            if self._try(op):
                return True
            pause = min(pause * 2, max_pause)
        return False

    def _take(self, op: int, mode: str, timeout: float | None, **wait) -> bool:
        if self.fd is None:
            return True
        if self._try(op) if timeout is None else self._wait(op, timeout, **wait):
            self.mode = mode
            return True
        return False

    def try_now(self, exclusive: bool) -> bool:
        """:meth:`try_exclusive` or :meth:`try_shared` in one call: the write path's lock,
        taken once per write transaction (issue 24 item 4). True when held (always when
        unusable); False when another description holds it."""
        fd = self.fd
        if fd is None:
            return True
        if self._old:
            return self.try_exclusive() if exclusive else self.try_shared()
        try:
            fcntl.flock(fd, _EX_NB if exclusive else _SH_NB)
        except BlockingIOError:  # EWOULDBLOCK: held by another description
            return False
        # the identity check after locking, as in _try
        if self._follow_path() and not try_flock(self.fd, exclusive):  # type: ignore[arg-type]
            self._unlock_all()
            return False
        self.mode = "exclusive" if exclusive else "shared"
        return True

    def try_shared(self) -> bool:
        """Take the lock SHARED without waiting; True when held (always True when unusable)."""
        return self._take(fcntl.LOCK_SH, "shared", None)

    def acquire_shared(self, timeout: float) -> bool:
        """Take the lock SHARED, waiting at most ``timeout`` seconds; True when held."""
        return self._take(fcntl.LOCK_SH, "shared", timeout)

    def acquire_shared_polling(self, timeout: float,
                               before_try: Callable[[], None] | None = None) -> bool:
        """Take the lock SHARED, trying every :data:`POLL_S` (no back-off) for at most
        ``timeout`` seconds: for a caller that holds SQLite's write lock meanwhile and must
        notice the release at once. ``before_try`` runs before each retry (a failpoint).
        True when held."""
        return self._take(fcntl.LOCK_SH, "shared", timeout, max_pause=POLL_S,
                          before_try=before_try)

    def try_exclusive(self) -> bool:
        """Take the lock EXCLUSIVELY without waiting; True when held (always when unusable)."""
        return self._take(fcntl.LOCK_EX, "exclusive", None)

    def acquire_exclusive_polling(self, timeout: float,
                                  before_try: Callable[[], None] | None = None) -> bool:
        """:meth:`acquire_shared_polling` for the EXCLUSIVE mode (a write that may restart the
        WAL, issue 24 item 3)."""
        return self._take(fcntl.LOCK_EX, "exclusive", timeout, max_pause=POLL_S,
                          before_try=before_try)

    def acquire_exclusive(self, timeout: float) -> bool:
        """Take the lock EXCLUSIVELY, waiting at most ``timeout`` seconds (0 = one try)."""
        return self._take(fcntl.LOCK_EX, "exclusive", timeout)

    def exclusive_elsewhere(self) -> bool:
        """True when another description holds the lock EXCLUSIVELY now (a checkpoint or
        maintenance), by one non-blocking SHARED try released at once. Call it holding nothing
        on this description; False when the lock is unusable."""
        if self.fd is None or self.mode is not None:
            return False
        if self._try(fcntl.LOCK_SH):
            self._unlock_all()
            return False
        return True

    def release(self) -> None:
        """Drop whatever this description holds (no-op when nothing is held)."""
        if self.fd is not None and self.mode is not None:
            self.mode = None
            if self._old:
                self._unlock_all()
            else:
                fcntl.flock(self.fd, fcntl.LOCK_UN)

    def close(self) -> None:
        """Release and close the descriptor (idempotent)."""
        if self.fd is not None:
            fd, self.fd = self.fd, None
            self.mode = None
            os.close(fd)
            for old in self._old:
                os.close(old)
            self._old.clear()


class LockBusy(HermesStateError):
    """The store's write lock could not be had in time (a maintenance command refuses).

    Attributes:
        holders: :class:`LockHolder` of the lock at that moment.
    """

    def __init__(self, text: str, found: list) -> None:
        self.holders = found
        super().__init__(text)


class LockUnavailable(HermesStateError):
    """The lock file cannot be used (``problem``): maintenance cannot exclude writers."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(problem)


@contextlib.contextmanager
def exclusive(db_path: str | os.PathLike, *, timeout: float | None = None,
              create: bool = True, purpose: str = "maintenance") -> Iterator[CheckpointLock]:
    """Hold the store's write lock EXCLUSIVELY for a maintenance command (issue 11).

    Every write transaction and checkpoint of the store in every process waits (within its
    retry budget, SPEC §4) until the block ends; store connections of THIS process keep working
    inside it (they see :func:`held_here`). Re-entrant within a process.

    Args:
        db_path: the store's ``state.db``.
        timeout: seconds to wait for write transactions in flight (default
            :data:`MAINTENANCE_WAIT_S`).
        create: create the lock file if missing; with False a missing file yields a lock that
            holds nothing (``problem == "absent"``: no process of this code uses the store).
        purpose: a label for the ``checkpoint_lock`` events.
    Yields:
        The :class:`CheckpointLock` (``usable`` False only for an absent file with
        ``create=False``).
    Raises:
        LockUnavailable: the lock file is unusable or disabled (``problem``).
        LockBusy: a write transaction kept it past ``timeout``; names the holders.
    """
    key = _key(lock_path(db_path))
    with _held_guard:
        outer = _held.get(key)
        if outer is not None:
            outer[0] += 1
    if outer is not None:
        try:
            yield outer[1]
        finally:
            with _held_guard:
                outer[0] -= 1
        return
    lock = CheckpointLock(db_path, create=create)
    try:
        if lock.problem is not None and lock.problem != "absent":
            raise LockUnavailable(lock.problem)
        timeout = MAINTENANCE_WAIT_S if timeout is None else timeout
        if not lock.acquire_exclusive(timeout):
            found = lock.holders()
            names = holders_text(found, file_identity(lock.path))
            raise LockBusy(f"a write transaction kept the store's write lock for {timeout:g}s "
                           f"({names})", found)
        t_acquired = time.monotonic()
        with _held_guard:
            _held[key] = [1, lock]
        try:
            yield lock
        finally:
            with _held_guard:
                _held.pop(key, None)
            lock.release()
            events.enabled() and events.emit("checkpoint_lock", status="released",
                                             purpose=purpose, t_acquired=t_acquired,
                                             t_released=time.monotonic())
    finally:
        lock.close()


@contextlib.contextmanager
def exclusive_unless_unusable(db_path: str | os.PathLike, *, purpose: str
                              ) -> Iterator[CheckpointLock | None]:
    """:func:`exclusive`, or nothing (None) when the lock file is unusable: the degraded mode
    the store's connections run in too (logged by them). Raises :class:`LockBusy`."""
    with contextlib.ExitStack() as stack:
        try:
            lock = stack.enter_context(exclusive(db_path, purpose=purpose))
        except LockUnavailable as exc:
            log.warning("%s without the store's write lock: %s", purpose, exc.problem)
            lock = None
        yield lock


# ---------------------------------------------------------------- who holds it (/proc/locks)
def lock_holders(db_path: str | os.PathLike) -> list[LockHolder]:
    """Every ``flock`` on the store's lock file from ``/proc/locks`` (Linux; else ``[]``).

    A process frozen with SIGSTOP while holding it shows with ``status`` ``stopped``.
    """
    return flock_holders(lock_path(db_path))


# ---------------------------------------------------------------- exposure report
MITIGATED = "exposed, mitigated by the checkpoint lock"


def exposure_line(db_path: str | os.PathLike, exposure: str | None) -> tuple[str, str | None]:
    """The one-line verdict doctor and every chaos run print (issue 12), without creating files.

    Args:
        db_path: the store's ``state.db``.
        exposure: :func:`hermes_state.store.connection.wal_reset_exposure` (None = fixed SQLite).
    Returns:
        ``(line, reason)``: ``"not exposed (...)"``, :data:`MITIGATED`, or
        ``"exposed, NOT mitigated (reason)"`` with the reason apart.
    """
    if exposure is None:
        return "not exposed (this SQLite has the WAL-reset fix; checkpoints run unlocked)", None
    reason = probe(db_path)
    if reason is None:
        return MITIGATED, None
    return f"exposed, NOT mitigated ({reason})", reason


def probe(db_path: str | os.PathLike) -> str | None:
    """Why the store's lock would not work now, or None when it would (creates nothing)."""
    if disabled_by_env():
        return f"disabled by {ENV_VAR}=off"
    path = lock_path(db_path)
    if os.path.lexists(path):
        lock = CheckpointLock(db_path, create=False, adopt=False)
        lock.close()
        if lock.problem is None:
            return split_problem(db_path)
        return lock.problem
    parent = path.parent
    if not parent.is_dir():
        return None  # created with the store
    if not os.access(parent, os.W_OK | os.X_OK):
        return f"cannot create {path}: {parent} is not writable"
    try:
        fd = os.open(parent, os.O_TMPFILE | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except (OSError, AttributeError):
        return None  # no O_TMPFILE here: flock support is checked at the first open
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        if exc.errno in _NO_FLOCK:
            return f"the filesystem of {parent} does not support flock"
    finally:
        os.close(fd)
    return None


def split_problem(db_path: str | os.PathLike) -> str | None:
    """Why the store's lock is split now, or None (issue 22 item 3; for ``doctor``).

    Split: a process holds a descriptor of a file that was the lock file (removed, replaced,
    renamed: another inode than the file at the path) and none of the file at the path; it
    and the processes that opened the store since lock different files. A process that holds
    both (this code locks both once it noticed) is not counted. Reads ``/proc/*/fd``.
    """
    path = lock_path(db_path)
    current = file_identity(path)
    by_pid: dict[int, list] = {}
    for d in lock_file_descriptors(path):
        by_pid.setdefault(d.pid, []).append(d)
    split = []
    for pid, ds in sorted(by_pid.items()):
        if current is not None and any(d.ident == current for d in ds):
            continue
        stale = [d for d in ds if d.ident != current]
        if stale:
            split.append(f"PID {pid} ({describe_pid(pid)}) locks {stale[0].link}, not the file "
                         f"now at {path.name}")
    if not split:
        return None
    return ("checkpoint lock split: " + "; ".join(split) + "; processes that opened the store "
            "since lock another file, so checkpoints and writes of the two groups may overlap. "
            f"Stop {'that process' if len(split) == 1 else 'those processes'} (and never "
            f"remove or replace {path.name})")
