"""Lock files beside the store: bounded ``flock`` waits, who holds a lock, and the identity of
the file a descriptor locks (SPEC §4 "no wait without a bound", §10.2, §12; issue 22 items 2-3).

``flock(2)`` has no timeout, so every wait here polls ``LOCK_NB`` until a deadline and then
raises :class:`LockTimeout`, whose message lists every process holding (or waiting for) the
lock from ``/proc/locks``: PID, command line and state (running, sleeping, stopped, zombie, or
gone: a ``flock`` belongs to an open file description, so a descriptor inherited by a child
keeps it after the locker exited; those inheritors are named too).

A lock protects nothing once its path names another file: a process that locked the old inode
and one that opens the new file exclude nobody (issue 22 item 3). :func:`same_file` compares the
``(st_dev, st_ino)`` of a descriptor with the path, before each use, as the write path does for
``-wal``/``-shm`` (SPEC §10.1).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import HermesStateError
from . import lock_table
from .holders import HAVE_PROC, describe_pid

#: First pause between two non-blocking tries; it doubles up to :data:`MAX_POLL_S`.
POLL_S = 0.0005
MAX_POLL_S = 0.02

_STATES = {"R": "running", "S": "sleeping", "D": "disk-sleep", "T": "stopped",
           "t": "tracing-stop", "Z": "zombie", "X": "dead", "I": "idle"}


def process_state(pid: int) -> str:
    """``running``, ``sleeping``, ``stopped``, ``zombie``, ... of ``pid`` from ``/proc``;
    ``gone`` when it no longer exists (or cannot be read)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        letter = data[data.rfind(b")") + 2:].split()[0].decode("ascii", "replace")
    except (OSError, IndexError):
        return "gone"
    return _STATES.get(letter, letter)


@dataclass(frozen=True)
class LockHolder:
    """A process holding (or waiting for) a ``flock``: ``mode`` is ``exclusive`` or ``shared``;
    ``status`` its state (:func:`process_state`)."""

    pid: int
    mode: str
    waiting: bool
    command: str
    status: str

    def line(self) -> str:
        """``PID N (command) exclusive[, stopped]`` (the state only when it is unusual)."""
        extra = f", {self.status}" if self.status in ("stopped", "tracing-stop") else ""
        wait = " (waiting)" if self.waiting else ""
        return f"PID {self.pid} ({self.command}) {self.mode}{wait}{extra}"

    def describe(self) -> str:
        """``PID N (command): exclusive, stopped``: the state always named (error messages)."""
        wait = ", waiting for it" if self.waiting else ""
        return f"PID {self.pid} ({self.command}): {self.mode}{wait}, {self.status}"

    def as_dict(self) -> dict:
        return {"pid": self.pid, "mode": self.mode, "waiting": self.waiting,
                "command": self.command, "status": self.status}


def file_identity(target: str | os.PathLike | int) -> tuple[int, int] | None:
    """``(st_dev, st_ino)`` of an open descriptor (int) or a path (not following a final link);
    None when the path is missing or the descriptor unusable."""
    try:
        st = os.fstat(target) if isinstance(target, int) else os.lstat(target)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def same_file(fd: int, path: str | os.PathLike) -> bool:
    """True when ``path`` still names the file open on ``fd`` (same ``st_dev`` and ``st_ino``)."""
    here = file_identity(fd)
    return here is not None and here == file_identity(path)


def flock_holders(target: str | os.PathLike | tuple[int, int]) -> list[LockHolder]:
    """Every ``flock`` on a file, from ``/proc/locks`` (Linux; else ``[]``).

    Args:
        target: a path (its inode now, not following a link) or an identity ``(st_dev, st_ino)``.
    """
    if not HAVE_PROC:
        return []
    ident = target if isinstance(target, tuple) else file_identity(target)
    if ident is None:
        return []
    want = (os.major(ident[0]), os.minor(ident[0]), ident[1])
    out = []
    for lk in lock_table.read() or []:
        if lk.kind != "FLOCK" or (*lk.dev, lk.ino) != want:
            continue
        out.append(LockHolder(lk.pid, "exclusive" if lk.write else "shared", lk.waiting,
                              describe_pid(lk.pid), process_state(lk.pid)))
    return out


def descriptor_holders(ident: tuple[int, int], *, skip: int | None = None) -> list[int]:
    """PIDs with an open descriptor of the file ``ident`` (a ``/proc/*/fd`` scan; for the
    rare case where the locker recorded in ``/proc/locks`` is gone or a zombie and an
    inheritor keeps the lock). Processes that cannot be read are skipped."""
    if not HAVE_PROC:
        return []
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == skip:
            continue
        try:
            fds = os.listdir(f"/proc/{entry.name}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.stat(f"/proc/{entry.name}/fd/{fd}")
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == tuple(ident):
                found.append(int(entry.name))
                break
    return found


def holders_text(found: list[LockHolder], ident: tuple[int, int] | None = None) -> str:
    """One line per holder with its state; inheritors named when the locker is gone/a zombie."""
    lines = [h.describe() for h in found if not h.waiting]
    if ident is not None and (not lines or any(h.status in ("gone", "zombie", "dead")
                                               for h in found if not h.waiting)):
        inheritors = [p for p in descriptor_holders(ident, skip=os.getpid())
                      if p not in {h.pid for h in found}]
        lines += [f"PID {p} ({describe_pid(p)}): holds an inherited descriptor of the lock "
                  f"file, {process_state(p)}" for p in inheritors]
    return "; ".join(lines) or "a process that cannot be seen (another user's or namespace's)"


class LockTimeout(HermesStateError):
    """A lock the store needed stayed held past its deadline (SPEC §4: no unbounded wait).

    Attributes:
        path: the lock file (or directory) waited for.
        holders: :class:`LockHolder` seen holding it when the wait ended.
        waited_s: seconds waited.
    """

    def __init__(self, user_message: str, operator_detail: str = "", *, path: str = "",
                 holders: list | None = None, waited_s: float = 0.0) -> None:
        self.path = path
        self.holders = list(holders or [])
        self.waited_s = waited_s
        super().__init__(user_message, operator_detail)


def try_flock(fd: int, exclusive: bool) -> bool:
    """One non-blocking ``flock``; True when taken, False when another description holds it.

    Raises:
        OSError: anything but "would block" (no ``flock`` on this filesystem, a bad descriptor).
    """
    try:
        fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | fcntl.LOCK_NB)
        return True
    except OSError as exc:
        if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
            return False
        raise


def flock_wait(fd: int, *, exclusive: bool, timeout: float, path: str | os.PathLike,
               what: str) -> None:
    """Take ``flock`` on ``fd``, waiting at most ``timeout`` seconds (polling ``LOCK_NB``).

    Args:
        fd: a descriptor of the lock file.
        exclusive: EXCLUSIVE, else SHARED.
        timeout: seconds (0 = one try).
        path: the lock file, for the message.
        what: what the lock is for ("the quarantine lock of /h/state.db"), for the message.
    Raises:
        LockTimeout: still held at the deadline; names every holder with its state.
        OSError: the lock cannot be taken at all (see :func:`try_flock`).
    """
    t0 = time.monotonic()
    deadline = t0 + max(0.0, timeout)
    pause = POLL_S
    while not try_flock(fd, exclusive):
        now = time.monotonic()
        if now >= deadline:
            raise lock_timeout(path, what, now - t0, file_identity(fd))
        time.sleep(min(pause, max(0.0, deadline - now)))
        pause = min(pause * 2, MAX_POLL_S)


def lock_timeout(path: str | os.PathLike, what: str, waited: float,
                 ident: tuple[int, int] | None) -> LockTimeout:
    """The named error for a lock still held after ``waited`` seconds."""
    found = flock_holders(ident) if ident is not None else []
    who = holders_text(found, ident)
    stopped = any(h.status in ("stopped", "tracing-stop") for h in found if not h.waiting)
    hint = (" A stopped process holds it: resume it (kill -CONT PID) or end it." if stopped
            else " Wait for it to finish, or end it if it is stuck.")
    return LockTimeout(
        f"session storage gave up waiting for {what} after {waited:.1f}s: it is held by "
        f"{who}.{hint} Nothing was written; retry afterwards.",
        f"lock file {path}", path=os.fspath(path), holders=found, waited_s=waited)


def open_lock_file(path: str | os.PathLike, *, create: bool = True) -> int:
    """Open a lock file read-only for ``flock``: created 0600 if missing, never through a
    link, never blocking on a FIFO, regular files only (nothing is ever written to it).

    Raises:
        OSError: it cannot be opened (``ELOOP`` for a link; ``EINVAL`` with a message for a
            file of another type).
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK | os.O_NOCTTY
    fd = os.open(path, flags | (os.O_CREAT if create else 0), 0o600)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file", os.fspath(path))
    except BaseException:
        os.close(fd)
        raise
    return fd


def hold_file_lock(path: str | os.PathLike, *, exclusive: bool, timeout: float,
                   what: str, opener=open_lock_file) -> int:
    """Open (creating) the lock file ``path``, lock it within ``timeout`` seconds, and make sure
    the path still names the locked file (a file removed or replaced while this process waited
    is opened again): the usual lock-file dance, with a deadline.

    Args:
        opener: ``opener(path) -> fd`` (default :func:`open_lock_file`).
    Returns:
        The descriptor (close it to release the lock).
    Raises:
        LockTimeout: held by another process past the deadline (named).
        OSError: the lock file cannot be opened or locked.
    """
    t0 = time.monotonic()
    while True:
        fd = opener(path)
        try:
            flock_wait(fd, exclusive=exclusive, path=path, what=what,
                       timeout=max(0.0, timeout - (time.monotonic() - t0)))
            if same_file(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)  # the path names another file now: lock that one
        if time.monotonic() - t0 >= timeout:
            raise lock_timeout(path, what, time.monotonic() - t0, file_identity(path))


@dataclass(frozen=True)
class LockDescriptor:
    """A descriptor some process has of a file that is (or was) a lock file at ``path``."""

    pid: int
    fd: int
    link: str  # the /proc link text: the path, ``path (deleted)``, or the name it was renamed to
    ident: tuple[int, int]

    @property
    def proc_path(self) -> str:
        """``/proc/PID/fd/N``: opening it gives a new description of the same file."""
        return f"/proc/{self.pid}/fd/{self.fd}"


def _descriptors_of(pid: int, prefix: str, want: set[tuple[int, int]] | None
                    ) -> list[LockDescriptor]:
    out = []
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for name in fds:
        try:
            link = os.readlink(f"/proc/{pid}/fd/{name}")
        except OSError:
            continue
        if not link.startswith(prefix):
            continue
        try:
            st = os.stat(f"/proc/{pid}/fd/{name}")  # the file itself, not the /proc link
        except OSError:
            continue
        ident = (st.st_dev, st.st_ino)
        if want is None or ident in want:
            out.append(LockDescriptor(pid, int(name), link, ident))
    return out


def stale_locked(path: str | os.PathLike, current: tuple[int, int] | None
                 ) -> list[LockDescriptor]:
    """Descriptors of files that were the lock file at ``path`` (removed, replaced or renamed
    since: another inode than ``current``) and that some process holds LOCKED right now.

    Cheap when there is none (one read of ``/proc/locks``): only the processes holding a
    ``flock`` on another inode of the same filesystem have their descriptors read.
    """
    if not HAVE_PROC:
        return []
    try:
        dev = os.stat(os.path.dirname(os.fspath(path)) or ".").st_dev
        text = Path("/proc/locks").read_text()
    except OSError:
        return []
    want: dict[int, set[tuple[int, int]]] = {}
    for line in text.splitlines():
        parts = [p for p in line.split() if p != "->"]
        if len(parts) < 6 or parts[1] != "FLOCK":
            continue
        try:
            maj, mnr, ino = parts[5].split(":")
            ident = (os.makedev(int(maj, 16), int(mnr, 16)), int(ino))
            pid = int(parts[4])
        except ValueError:
            continue
        if ident[0] == dev and ident != current and pid != os.getpid():
            want.setdefault(pid, set()).add(ident)
    out = []
    for pid, idents in want.items():
        out += _descriptors_of(pid, os.fspath(path), idents)
    return out


def lock_file_descriptors(path: str | os.PathLike) -> list[LockDescriptor]:
    """Every descriptor any readable process has whose ``/proc`` link starts with ``path``
    (the lock file now, a removed one ``(deleted)``, one renamed to a longer name): a full
    ``/proc/*/fd`` scan, for ``doctor``."""
    if not HAVE_PROC:
        return []
    out = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            out += _descriptors_of(int(entry.name), os.fspath(path), None)
    return out
