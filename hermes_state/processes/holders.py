"""Who holds the store: /proc scans, PID descriptions, the write-lock owner (SPEC §10.2, §10.4).

On Linux the scan reads ``/proc/<pid>/fd`` links itself, because psutil hides unlinked files and
an unlinked ``-wal`` is exactly what we look for. A process whose descriptors cannot be read is
reported in :attr:`HolderScan.unreadable` ("cannot prove the store is quiet"), never silently as
"no holder" (fail closed). Processes of other users whose ``/proc`` entries are unreadable are
skipped (docs/decisions/0003-doctor-and-holders.md). On other platforms psutil ``open_files()`` is
used (deleted files are invisible there: the scan says so in :attr:`HolderScan.platform_note`).

Never opens a store file: it only reads links, ``stat``s ``/proc/<pid>/fd/<n>`` and reads
``/proc/locks``.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from .. import events
from ..files.sqlite_format import (
    PENDING_BYTE,
    SHARED_FIRST,
    SHARED_SIZE,
    SHM_LOCK_NAMES,
    SHM_WRITE_LOCK,
)
from . import lock_table

_DELETED = " (deleted)"
HAVE_PROC = sys.platform.startswith("linux") and os.path.isdir("/proc/self/fd")
_CAP_SYS_PTRACE = 19  # capability number (linux/capability.h)

# How often a settling scan looks again at a holder that is closing the store (seconds).
SETTLE_POLL_S = 0.005


@dataclass(frozen=True)
class Holder:
    """One process holding store files.

    Attributes:
        pid: process id.
        command: command line, whitespace collapsed, cut to 80 characters.
        files: basenames, sorted; a deleted or replaced file is shown as ``state.db-wal (deleted)``
            or ``state.db-wal (replaced)``; a renamed sidecar under its new name.
        retired: the subset of ``files`` that are not the file now at the path.
    """

    pid: int
    command: str
    files: tuple[str, ...]
    retired: tuple[str, ...] = ()

    def line(self) -> str:
        """``PID 41230 (hermes gateway run): state.db, state.db-shm, state.db-wal`` (SPEC §10.2);
        `` (this process)`` is appended when the holder is the process formatting the line."""
        mine = " (this process)" if self.pid == os.getpid() else ""
        return f"PID {self.pid} ({self.command}): {', '.join(self.files)}{mine}"

    def as_tuple(self) -> tuple[int, str, list[str]]:
        return (self.pid, self.command, list(self.files))


@dataclass
class HolderScan:
    """Result of one scan. ``complete`` is False when some same-user process was unreadable, or
    when the processes could not be listed at all (``listed`` False: no /proc and psutil failed;
    ``platform_note`` says why)."""

    holders: list[Holder] = field(default_factory=list)
    unreadable: list[int] = field(default_factory=list)
    platform_note: str = ""
    listed: bool = True

    @property
    def complete(self) -> bool:
        return self.listed and not self.unreadable

    @property
    def retired_holders(self) -> list[Holder]:
        return [h for h in self.holders if h.retired]


def describe_pid(pid: int) -> str:
    """The command line of ``pid`` collapsed to one line of at most 80 characters.

    Falls back to the process name, then to ``?`` when the process is gone or unreadable.
    """
    try:
        proc = psutil.Process(pid)
        parts = proc.cmdline() or [proc.name()]
    except (psutil.Error, OSError):
        return "?"
    text = " ".join(" ".join(parts).split())
    return text if len(text) <= 80 else text[:77] + "..."


def _watched(db_path: str | os.PathLike) -> tuple[str, dict[str, tuple[int, int] | None]]:
    real = os.path.realpath(os.fspath(db_path))
    idents = {}
    for suffix in ("", "-wal", "-shm"):
        try:
            st = os.stat(real + suffix)
            idents[real + suffix] = (st.st_dev, st.st_ino)
        except OSError:
            idents[real + suffix] = None
    return real, idents


def _now(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _classify(real: str, target: str, fd_ident: tuple[int, int] | None,
              idents: dict[str, tuple[int, int] | None]) -> tuple[str, bool] | None:
    """Return ``(display_name, is_retired)`` if ``target`` is one of the store's files.

    Identity decides, never link text (issue 11.6): a link ending in `` (deleted)`` or naming a
    renamed sidecar whose descriptor has the SAME ``(st_dev, st_ino)`` as the file at the
    watched path now is that file (re-linked, as ZFS shows it), not a retired one. The text
    only counts when the descriptor's identity is unknown (fail closed).
    """
    deleted = target.endswith(_DELETED)
    path = target[: -len(_DELETED)] if deleted else target
    base = os.path.basename(real)
    if path in idents:
        name = os.path.basename(path)
        if deleted:
            if fd_ident is not None and fd_ident == _now(path):
                return name, False  # unlinked and re-linked: the same inode is at the path
            return f"{name} (deleted)", True
        if fd_ident is not None and idents[path] is not None and fd_ident != idents[path]:
            # The identities were taken when the scan started; the path may have been replaced
            # since (a store quarantined and created afresh by a starting process, SPEC §12).
            # Only a descriptor of a file that is not at the path NOW is a retired one.
            now = _now(path)
            if now != fd_ident:
                return f"{name} (replaced)", True
            idents[path] = now
        return name, False
    # A sidecar renamed aside (``state.db-wal.bak``) is still that generation's log, unless
    # it is the very inode at the sidecar's path now (a hard link, or unlinked and re-linked).
    for suffix in ("-wal", "-shm"):
        if path.startswith(real + suffix) and os.path.dirname(path) == os.path.dirname(real):
            if fd_ident is not None and fd_ident == _now(real + suffix):
                return os.path.basename(real + suffix), False
            return os.path.basename(path) + (" (deleted)" if deleted else ""), True
    del base
    return None


def scan(db_path: str | os.PathLike, *, include_self: bool = False,
         locked_only: bool = False) -> HolderScan:
    """Scan every process for descriptors of the store's three files (SPEC §10.2).

    Args:
        db_path: path of ``state.db`` (need not exist).
        include_self: also report this process (the open-time refusal of §10.4 does).
        locked_only: read the descriptors only of the processes the kernel's lock table shows
            holding the store's files or SQLite locks on its filesystem (and of this process),
            :func:`hermes_state.processes.lock_table.candidates`; every process when the table
            cannot be trusted. What that leaves out: docs/decisions/0003-doctor-and-holders.md
            (issue 24 item 2). The open's refusal (§10.4) uses it; doctor and the maintenance
            gates do not.
    Returns:
        A :class:`HolderScan`; holders sorted by pid.
    """
    if not HAVE_PROC:
        return _scan_psutil(db_path, include_self)
    real, idents = _watched(db_path)
    me = os.getpid()
    my_uid = os.geteuid()
    ptrace = _has_cap_sys_ptrace()
    result = HolderScan()
    pids = lock_table.candidates(real, idents) if locked_only else None
    if pids is None:
        names = (e.name for e in os.scandir("/proc") if e.name.isdigit())
    else:
        names = (str(p) for p in sorted(pids | ({me} if include_self else set())))
    for name in names:
        pid = int(name)
        if pid == me and not include_self:
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            _note_unreadable(result, pid, my_uid)
            continue
        except OSError:
            continue  # exited meanwhile (ENOENT, or ESRCH for a process being reaped)
        files: set[str] = set()
        retired: set[str] = set()
        denied = False
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except PermissionError:
                # listable but not readable: a root reader without CAP_SYS_PTRACE (a container's
                # default) facing a process that is not dumpable. Same rule: fail closed. (With
                # CAP_SYS_PTRACE a denial means a process beyond this namespace's reach, such
                # as a sandbox's init: skipped, as before.)
                denied = not ptrace
                break
            except OSError:
                continue
            if not target.startswith("/") or os.path.basename(real) not in target:
                continue
            try:
                st = os.stat(f"{fd_dir}/{fd}")
                fd_ident = (st.st_dev, st.st_ino)
            except OSError:
                fd_ident = None
            hit = _classify(real, target, fd_ident, idents)
            if hit is None:
                continue
            files.add(hit[0])
            if hit[1]:
                retired.add(hit[0])
        if denied:
            _note_unreadable(result, pid, my_uid)
            continue
        if files:
            result.holders.append(
                Holder(pid, describe_pid(pid), tuple(sorted(files)), tuple(sorted(retired))))
    result.holders.sort(key=lambda h: h.pid)
    return result


def closing_pids(db_path: str | os.PathLike) -> set[int]:
    """Pids holding the EXCLUSIVE lock of ``state.db`` (a WRITE lock over the SHARED range).

    In WAL mode only the last connection to close takes it: under it SQLite checkpoints,
    unlinks ``-shm`` (then closes it), closes and deletes ``-wal``. (Or a connection in
    ``locking_mode=EXCLUSIVE``.) Linux only, else an empty set.
    """
    last = SHARED_FIRST + SHARED_SIZE - 1
    name = os.path.basename(os.path.realpath(os.fspath(db_path)))
    return {rec.pid for rec in read_locks(db_path)
            if rec.file == name and rec.write and not rec.waiting and rec.start <= SHARED_FIRST
            and (rec.end is None or rec.end >= last)}


def scan_settled(db_path: str | os.PathLike, *, include_self: bool = False,
                 wait_s: float = 1.0, locked_only: bool = False) -> HolderScan:
    """:func:`scan`, looking again while a retired sidecar belongs to a closing connection.

    The last connection to close a WAL store unlinks ``-shm`` a moment before it closes it,
    with the EXCLUSIVE lock of ``state.db`` held (see :func:`closing_pids`): a scan in that
    window sees ``state.db-shm (deleted)`` although no generation is retired. Such a holder is
    waited for (polled every :data:`SETTLE_POLL_S`) and the store scanned again. A holder seen
    without that lock is scanned once more after the lock table was read (it may have finished
    closing in between); a retired sidecar it still holds then, or one held after ``wait_s``
    seconds, stays in the result (SPEC §10.4 refuses it).

    Args:
        db_path: path of ``state.db``.
        include_self, locked_only: as for :func:`scan`.
        wait_s: longest wait for closing holders, seconds.
    Returns:
        The last :class:`HolderScan`.
    """
    deadline = time.monotonic() + wait_s
    waited = False
    while True:
        result = scan(db_path, include_self=include_self, locked_only=locked_only)
        retired = {h.pid for h in result.retired_holders}
        if not retired:
            return result
        closing = closing_pids(db_path)
        if not retired <= closing:
            # The lock table is read after the descriptors: a closer that finished in between
            # holds neither any more. Only a holder that keeps its retired sidecar across that
            # read (a deleted file cannot be opened again) held it without the lock.
            confirm = scan(db_path, include_self=include_self, locked_only=locked_only)
            if {h.pid for h in confirm.retired_holders} & (retired - closing):
                return confirm
            result = confirm
            retired = {h.pid for h in confirm.retired_holders}
            if not retired:
                return confirm
        if time.monotonic() >= deadline:
            return result
        if not waited:
            waited = True
            events.enabled() and events.emit("holder_closing", pids=sorted(retired))
        time.sleep(SETTLE_POLL_S)


def _has_cap_sys_ptrace() -> bool:
    """True when this process may read any process's descriptors (CAP_SYS_PTRACE effective)."""
    try:
        with open("/proc/self/status", "rb") as f:
            for line in f:
                if line.startswith(b"CapEff:"):
                    return bool(int(line.split()[1], 16) >> _CAP_SYS_PTRACE & 1)
    except (OSError, ValueError):
        pass
    return False


def _note_unreadable(result: HolderScan, pid: int, my_uid: int) -> None:
    """Report ``pid`` as unreadable when it belongs to this user (another user's process cannot
    open the 0600 store files)."""
    try:
        owner = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return  # exited meanwhile
    if owner == my_uid:
        result.unreadable.append(pid)


def _scan_psutil(db_path: str | os.PathLike, include_self: bool) -> HolderScan:
    real, idents = _watched(db_path)
    me = os.getpid()
    result = HolderScan(platform_note=(
        "no /proc on this platform: deleted sidecars cannot be seen; holders come from psutil"))
    try:
        procs = list(psutil.process_iter(["pid"]))
    except (psutil.Error, OSError, IndexError) as exc:
        # Linux without /proc mounted (a bare container or chroot): psutil cannot list the
        # processes at all (IndexError from its empty pid list). Degrade, said: holders unknown.
        why = ("psutil found no process: /proc is not mounted" if isinstance(exc, IndexError)
               else f"{type(exc).__name__}: {exc}")
        result.platform_note = (
            f"the processes cannot be listed here ({why}): holders and deleted sidecars cannot "
            "be seen; mount /proc to see them")
        result.listed = False
        return result
    for proc in procs:
        if proc.pid == me and not include_self:
            continue
        try:
            opened = proc.open_files()
        except psutil.AccessDenied:
            result.unreadable.append(proc.pid)
            continue
        except psutil.Error:
            continue
        files = set()
        for f in opened:
            hit = _classify(real, os.path.realpath(f.path), None, idents)
            if hit:
                files.add(hit[0])
        if files:
            result.holders.append(Holder(proc.pid, describe_pid(proc.pid), tuple(sorted(files))))
    result.holders.sort(key=lambda h: h.pid)
    return result


def find_holders(db_path: str | os.PathLike) -> list[tuple[int, str, list[str]]]:
    """Every OTHER process with ``state.db``, ``-wal`` or ``-shm`` open (SPEC §10.2).

    Returns:
        ``[(pid, command, files), ...]`` sorted by pid; ``files`` are sorted basenames, with
        `` (deleted)``/`` (replaced)`` marking a retired generation. Use :func:`scan` to also
        learn whether the scan was complete.
    """
    return [h.as_tuple() for h in scan(db_path).holders]


def format_holder(pid: int, command: str, files) -> str:
    """``PID N (command): a, b`` for one ``find_holders`` tuple."""
    return f"PID {pid} ({command}): {', '.join(files)}"


@dataclass(frozen=True)
class LockRecord:
    """One POSIX lock on a store file read from ``/proc/locks``."""

    pid: int
    file: str  # "state.db" / "state.db-shm"
    start: int
    end: int | None  # None = EOF
    write: bool
    waiting: bool

    def meaning(self) -> str:
        if self.file.endswith("-shm"):
            return SHM_LOCK_NAMES.get(self.start, f"byte {self.start}")
        if self.start == PENDING_BYTE:
            return "PENDING lock"
        if self.start == PENDING_BYTE + 1:
            return "RESERVED lock"
        return "SHARED lock" if not self.write else "EXCLUSIVE lock"


def read_locks(db_path: str | os.PathLike) -> list[LockRecord]:
    """POSIX locks held or awaited on the store's main file and ``-shm`` (Linux only, else [])."""
    if not HAVE_PROC:
        return []
    real = os.path.realpath(os.fspath(db_path))
    inodes: dict[tuple[int, int, int], str] = {}
    for suffix in ("", "-shm"):
        try:
            st = os.stat(real + suffix)
        except OSError:
            continue
        inodes[(os.major(st.st_dev), os.minor(st.st_dev), st.st_ino)] = os.path.basename(real + suffix)
    if not inodes:
        return []
    out = []
    try:
        text = Path("/proc/locks").read_text()
    except OSError:
        return []
    for line in text.splitlines():
        parts = line.split()
        waiting = "->" in parts
        if waiting:
            parts.remove("->")
        # id: POSIX ADVISORY WRITE pid maj:min:ino start end
        if len(parts) < 8 or parts[1] not in ("POSIX", "OFDLCK"):
            continue
        try:
            maj, mnr, ino = parts[5].split(":")
            key = (int(maj, 16), int(mnr, 16), int(ino))
            pid = int(parts[4])
            start = int(parts[6])
            end = None if parts[7] == "EOF" else int(parts[7])
        except ValueError:
            continue
        if key in inodes:
            out.append(LockRecord(pid, inodes[key], start, end, parts[3] == "WRITE", waiting))
    return out


def write_lock_owner_pid(db_path: str | os.PathLike) -> int | None:
    """The pid holding the store's write lock now, or None (SPEC §10.2); no command lookup.

    WAL mode: a WRITE lock on byte 120 of ``-shm``. Rollback mode: RESERVED/PENDING on the main
    file. Waiting (blocked) requests are ignored. Cheap enough to call once per failed attempt.
    """
    for rec in read_locks(db_path):
        if rec.waiting or not rec.write:
            continue
        covers = lambda b: rec.start <= b and (rec.end is None or rec.end >= b)  # noqa: E731
        if rec.file.endswith("-shm") and covers(SHM_WRITE_LOCK):
            return rec.pid
        if not rec.file.endswith("-shm") and (covers(PENDING_BYTE) or covers(PENDING_BYTE + 1)):
            return rec.pid
    return None


def write_lock_owner(db_path: str | os.PathLike) -> tuple[int, str] | None:
    """The process holding the store's write lock, as ``(pid, command)``, or None (SPEC §10.2).

    See :func:`write_lock_owner_pid` for which locks count.
    """
    pid = write_lock_owner_pid(db_path)
    return None if pid is None else (pid, describe_pid(pid))
