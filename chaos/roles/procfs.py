"""What other processes may read of a role process under ``/proc`` (SPEC §10.2 holder scan).

The holder scan of the live-writer gate reads ``/proc/<pid>/fd`` of every process; one it cannot
read but that belongs to the same user must make the scan incomplete ("cannot prove the store is
quiet"). Root reads every process's descriptors (CAP_SYS_PTRACE), so a run as root never puts
that rule to the test. Two role options make it testable without changing uid (so no file of the
run needs another owner):

* ``undumpable``: the process calls ``prctl(PR_SET_DUMPABLE, 0)`` (what the kernel does after a
  setuid): a same-user reader without CAP_SYS_PTRACE gets EACCES on its ``/proc/<pid>/fd``;
* ``ptrace_cap: false``: the process drops CAP_SYS_PTRACE from its capability bounding set, so
  every program it executes (the maintenance CLI) lacks it, like an ordinary user's shell.
"""

from __future__ import annotations

import ctypes
import os

PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
CAP_SYS_PTRACE = 19


def _prctl(option: int, arg: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, arg, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}, {arg}): {os.strerror(err)}")


def _has_effective(cap: int) -> bool:
    """True when ``cap`` is in this process's effective set (``/proc/self/status`` CapEff)."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"CapEff:"):
                return bool(int(line.split()[1], 16) >> cap & 1)
    return False


def apply(*, undumpable: bool, ptrace_cap: bool) -> None:
    """Apply a role's ``/proc`` options to this process (call before the workload starts).

    Raises:
        OSError: the kernel refused (no prctl, or CAP_SYS_PTRACE could not be dropped while the
            process has it: the scenario would not test what it says).
    """
    if undumpable:
        _prctl(PR_SET_DUMPABLE, 0)
    if not ptrace_cap:
        try:
            _prctl(PR_CAPBSET_DROP, CAP_SYS_PTRACE)
        except OSError:
            if _has_effective(CAP_SYS_PTRACE):
                raise  # children would still read every process: refuse to pretend


def role_title(process: str, kind: str) -> str:
    """The name a role process goes by in ``ps``, in a holder scan and in the console:
    ``chaos role gateway-0 (gateway)`` (issue 27 item 12)."""
    return f"chaos role {process} ({kind})"


def set_title(title: str) -> str:
    """Name this process ``title`` where other processes read it: its command line
    (``/proc/<pid>/cmdline``, with the ``setproctitle`` package of the ``chaos`` extra; a holder
    scan names a process by it) and its ``comm`` (15 bytes). Returns how: ``"cmdline"``,
    ``"comm"`` (setproctitle missing: ``ps -o comm`` only) or ``"none"`` (neither possible)."""
    how = "none"
    try:
        import setproctitle
    except ImportError:
        setproctitle = None
    if setproctitle is not None:
        setproctitle.setproctitle(title)
        how = "cmdline"
    try:
        with open("/proc/self/comm", "w", encoding="utf-8") as fh:
            fh.write(title.removeprefix("chaos role ")[:15])
        how = "cmdline" if how == "cmdline" else "comm"
    except OSError:
        pass
    return how
