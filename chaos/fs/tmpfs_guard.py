"""No run's tmpfs outlives its run (issue 22 item 8): the guard process, and the sweep of stale
mounts.

A run that puts its home on a tmpfs (:func:`chaos.fixtures.mount_tmpfs`) mounts it with the
source ``chaos-tmpfs:<runner pid>:<runner start time>`` (:func:`source_of`) and starts this
module as a guard process (``python -m chaos.fs.tmpfs_guard MOUNTPOINT SOURCE FD [IGNORE...]``) in
a session of its own, holding the read end of a pipe whose write end only the runner holds: the
same lifeline the faulty filesystem's daemon has. When the runner lets go (after its own
unmount) or dies (SIGKILL included), the guard reads end of file; if the run's tmpfs is still
mounted there it copies what it holds beside it, detaches it (``umount -l``) and puts the copy
in its place (:func:`rescue`), so the run directory keeps its evidence and no mount is left.

If the guard was killed too, the next run sweeps (:func:`sweep`): every tmpfs whose source names
a runner that is no longer that live process is rescued the same way.

Standard library only: the guard must not import ``hermes_state`` (an audit proves where every
process that imports the store imported it from).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

#: The ``source`` prefix of every tmpfs a run mounts.
SOURCE_TAG = "chaos-tmpfs"


def _start_time(pid: int) -> str | None:
    """Field 22 of ``/proc/<pid>/stat`` (clock ticks since boot), None when no such process."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError, ValueError):
        return None


def source_of(pid: int | None = None) -> str:
    """The mount source naming ``pid`` (default: this process) as the run that owns a tmpfs."""
    pid = os.getpid() if pid is None else pid
    return f"{SOURCE_TAG}:{pid}:{_start_time(pid) or 0}"


def _unescape(field: str) -> str:
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def run_mounts() -> list[tuple[Path, str]]:
    """``(mount point, source)`` of every tmpfs a run mounted (:data:`SOURCE_TAG`)."""
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        head, _, tail = line.partition(" - ")
        fields, rest = head.split(), tail.split()
        if (len(fields) >= 5 and len(rest) >= 2 and rest[0] == "tmpfs"
                and rest[1].startswith(SOURCE_TAG + ":")):
            out.append((Path(_unescape(fields[4])), _unescape(rest[1])))
    return out


def owner_alive(source: str) -> bool:
    """True when the runner a tmpfs ``source`` names is still that live process."""
    try:
        _tag, pid, start = source.split(":")
        return _start_time(int(pid)) == start
    except ValueError:
        return False


def rescue(path: Path, ignore: tuple[str, ...] = ()) -> dict:
    """Copy what the tmpfs at ``path`` holds beside it (``<name>.from-tmpfs``, ``ignore``
    names left out), detach it (``umount -l``: a process may still hold a file there) and put
    the copy in its place; what a process still running there wrote into the mount point after
    the unmount is moved beside it first (``<name>.after-unmount``). Never raises.

    Returns:
        ``{"mountpoint", "copied_to", "unmounted", "after_unmount"?, "error"?}``.
    """
    path = Path(path)
    out: dict = {"mountpoint": str(path), "copied_to": None, "unmounted": False}
    keep = _free_name(path, ".from-tmpfs")
    try:
        shutil.copytree(path, keep, symlinks=True, ignore=shutil.ignore_patterns(*ignore))
        out["copied_to"] = str(keep)
    except (OSError, shutil.Error) as exc:
        out["error"] = f"copy: {exc}"
    try:
        proc = subprocess.run(["umount", "-l", str(path)], capture_output=True, text=True,
                              timeout=60)
        out["unmounted"] = proc.returncode == 0
        if not out["unmounted"]:
            out["error"] = f"umount -l: {proc.stderr.strip()}"
            return out
    except (OSError, subprocess.TimeoutExpired) as exc:
        out["error"] = f"umount -l: {exc}"
        return out
    try:
        if out["copied_to"] and path.is_dir():
            if any(path.iterdir()):
                # A process of the run still alive there (an orphaned role of a SIGKILLed
                # runner) made files after the unmount: they are kept beside, under their own
                # name, and the copy still goes in place.
                aside = _free_name(path, ".after-unmount")
                path.rename(aside)
                out["after_unmount"] = str(aside)
            else:
                path.rmdir()
            keep.rename(path)
            out["copied_to"] = str(path)
    except OSError as exc:
        out["error"] = f"put back: {exc}"
    return out


def _free_name(path: Path, suffix: str) -> Path:
    """``<path><suffix>``, or ``<path><suffix>-2``, ``-3``... whichever does not exist."""
    candidate, k = path.with_name(path.name + suffix), 2
    while os.path.lexists(candidate):
        candidate = path.with_name(f"{path.name}{suffix}-{k}")
        k += 1
    return candidate


def sweep(ignore: tuple[str, ...] = ()) -> list[dict]:
    """:func:`rescue` every run tmpfs whose runner is dead; returns what each rescue did."""
    return [rescue(path, ignore) for path, source in run_mounts() if not owner_alive(source)]


def main(argv: list[str]) -> int:
    """The guard: wait for end of file on the lifeline FD, then rescue MOUNTPOINT if the run's
    tmpfs (SOURCE) is still mounted there."""
    mountpoint, source, fd, ignore = Path(argv[0]), argv[1], int(argv[2]), tuple(argv[3:])
    try:
        while os.read(fd, 64):
            pass
    except OSError:
        pass
    if (mountpoint, source) in run_mounts():
        rescue(mountpoint, ignore)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
