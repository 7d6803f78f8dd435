"""The processes of a diagnostic bundle: who holds the store, in which role, in which state, and
which of SQLite's locks each holds or waits for (SPEC §9.4).

Everything comes from ``/proc`` (links, ``stat``, ``/proc/locks``): no store file is opened and no
lock is taken. Command lines are kept only as far as they tell a role (program names, subcommands,
flags); every other word is replaced by its length, because a command line can carry a prompt or
a session id (``hermes chat -q "..."``, ``--resume ID``).
"""

from __future__ import annotations

import dataclasses
import os
import re
import time
from pathlib import Path

import psutil

from ..files.sqlite_format import READ_MARKS, db_lock_names, read_mark_index, shm_lock_names
from ..processes import holders, lock_table
from ..processes.checkpoint_lock import LOCK_SUFFIX

#: Roles a command line can tell, first match wins: ``(role, words)``; a word matches a whole
#: word of the command line (lower-cased, split on anything that is not a letter, digit, _ or -).
ROLE_WORDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("gateway", ("gateway",)),
    ("cron", ("cron", "crond", "cronjob", "cron_job", "cron-job", "scheduler")),
    ("desktop", ("desktop", "dashboard", "electron")),
    ("cli", ("cli", "chat")),
)
#: Maintenance commands of this package (``hermes-state sessions optimize`` ...) and of SQLite
#: tools, and the scenario command each stands for (``chaos.nemesis.commands.COMMANDS``).
MAINTENANCE_WORDS = {"optimize": "optimize", "optimize-storage": "optimize-storage",
                     "prune": "prune", "vacuum": "optimize", "restore": "restore",
                     "backup": "backup", "recover": "recover", "salvage": "salvage",
                     "replay-spool": "replay-spool", "doctor": "doctor", ".backup": "backup",
                     ".restore": "restore", ".recover": "recover", "export": "recover"}
#: Programs that are this store's command line or its agent (a CLI session when no other role).
CLI_PROGRAMS = ("hermes", "hermes-state", "hermes_state", "hermes-agent")
#: Words of a command line that are kept as they are (besides flags and script names).
SAFE_WORDS = frozenset({"python", "python3", "-m", "-c", "-b", "-u", "-x", "sessions", "run",
                        "chat", "serve", "start", "stop", "gateway", "cron", "cli", "sqlite3",
                        "hermes", "hermes-state", "hermes_state", "chaos", "role", "list", "show",
                        "search", "doctor", "backup", "restore", "optimize", "optimize-storage",
                        "prune", "recover", "salvage", "replay-spool", "export", "dashboard",
                        "desktop", "vacuum", "--force", "--dry-run", "--yes", "--fix", "--json",
                        "--inspect-only", "--allow-partial", "--apply", "--home", "-p",
                        "--profile", "--output", "--older-than", ".backup", ".restore",
                        ".recover", "node", "electron", "bash", "sh"})
_WORD_RE = re.compile(r"[a-z0-9_.-]+")
_SCRIPT_RE = re.compile(r"^[\w.-]{1,64}\.(py|sh|js)$")
#: ``/proc/<pid>/stat`` state letters.
STATES = {"R": ("running", "running"), "S": ("running", "sleeping"),
          "D": ("running", "disk-sleep"), "I": ("running", "idle"), "T": ("stopped", "stopped"),
          "t": ("stopped", "tracing-stop"), "Z": ("zombie", "zombie"), "X": ("gone", "dead")}


def _words(argv: list[str]) -> list[str]:
    """The words of a command line, lower-cased: each run of letters, digits, ``_.-`` and then
    its parts split on ``_``, ``.`` and ``-`` (``cron_job.py`` gives ``cron_job.py``, ``cron``,
    ``job``, ``py``)."""
    out = []
    for w in argv:
        for token in _WORD_RE.findall(w.lower()):
            out.append(token)
            parts = [p for p in re.split(r"[_.-]+", token) if p]
            if len(parts) > 1:
                out.extend(parts)
    return out


def infer_role(argv: list[str]) -> tuple[str, str]:
    """The role a command line tells, and why: ``("gateway", "command line word 'gateway'")``.

    Roles: ``maintenance`` (a maintenance command of this package or SQLite's shell),
    ``gateway``, ``cron``, ``desktop``, ``cli`` (this package's or the agent's program with no
    other role word), ``unknown``.
    """
    lowered = [w.lower() for w in argv]
    words = _words(argv)
    basenames = [os.path.basename(w) for w in lowered[:3]]
    program = next((b for b in basenames if b.startswith(CLI_PROGRAMS) or b == "sqlite3"), None)
    ours = program is not None or any(w in ("hermes_state", "hermes-state") for w in words)
    if ours or "sqlite3" in basenames:
        for w in words:
            if w in MAINTENANCE_WORDS and not (w == "export" and program is None):
                return "maintenance", f"command line word {w!r} of {program or 'hermes_state'}"
    for role, keys in ROLE_WORDS:
        hit = next((w for w in words if w in keys), None)
        if hit is not None:
            return role, f"command line word {hit!r}"
    if program is not None and program != "sqlite3":
        return "cli", f"program {program!r} without a gateway/cron/maintenance word"
    return "unknown", "nothing in the command line tells the role"


def maintenance_command(argv: list[str]) -> dict | None:
    """``{"command", "force", "dry_run", "word"}`` of a maintenance command line, else None."""
    for w in _words(argv):
        if w in MAINTENANCE_WORDS:
            return {"command": MAINTENANCE_WORDS[w], "word": w, "force": "--force" in argv,
                    "dry_run": "--dry-run" in argv}
    return None


def redact_argv(argv: list[str], paths: dict[str, str]) -> str:
    """The command line with every word that is not a program, a subcommand, a flag or a script
    name replaced by ``<N chars>`` (``paths``: exact words to show by a label, e.g. the store's
    path as ``<store>``)."""
    if len(argv) == 1 and " " in argv[0]:
        argv = argv[0].split()  # a process title set by the program (setproctitle)
    out = []
    for i, word in enumerate(argv):
        if word in paths:
            out.append(paths[word])
            continue
        base = os.path.basename(word)
        if i == 0 or word.lower() in SAFE_WORDS or base.lower() in SAFE_WORDS:
            out.append(base if i == 0 or "/" in word else word)
        elif re.fullmatch(r"--?[a-z][a-z0-9-]{0,30}", word):
            out.append(word)
        elif _SCRIPT_RE.match(base) and not word.startswith("-"):
            out.append(base)
        else:
            out.append(f"<{len(word)} chars>")
    return " ".join(out)


def proc_state(pid: int) -> tuple[str, str]:
    """``(state, detail)``: state ``running``/``stopped``/``zombie``/``gone`` and the kernel's
    word (sleeping, disk-sleep, tracing-stop, ...)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        letter = data[data.rfind(b")") + 2:].split()[0].decode("ascii", "replace")
    except (OSError, IndexError):
        return "gone", "gone"
    return STATES.get(letter, ("running", letter))


def _argv(pid: int) -> list[str]:
    try:
        return psutil.Process(pid).cmdline()
    except (psutil.Error, OSError):
        return []


def _age_s(pid: int) -> float | None:
    try:
        return round(max(0.0, time.time() - psutil.Process(pid).create_time()), 1)
    except (psutil.Error, OSError):
        return None


# ------------------------------------------------------------------------------ /proc/locks

def read_proc_locks() -> list[dict]:
    """Every line of ``/proc/locks``: ``{"kind" (POSIX/FLOCK/OFDLCK), "write", "waiting", "pid",
    "dev" (major, minor), "ino", "start", "end" (None = EOF)}``; [] without ``/proc``."""
    return [dataclasses.asdict(lk) for lk in lock_table.read() or []]


def _identity(path: str) -> tuple[tuple[int, int], int] | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino


def _fd_identities(pid: int, real: str) -> dict[tuple, str]:
    """``{(dev, ino): label}`` of the store files ``pid`` has open (a deleted one labelled so)."""
    out: dict[tuple, str] = {}
    fd_dir = f"/proc/{pid}/fd"
    try:
        fds = os.listdir(fd_dir)
    except OSError:
        return out
    base = os.path.basename(real)
    for fd in fds:
        try:
            target = os.readlink(f"{fd_dir}/{fd}")
            if base not in target:
                continue
            st = os.stat(f"{fd_dir}/{fd}")
        except OSError:
            continue
        deleted = target.endswith(" (deleted)")
        path = target[: -len(" (deleted)")] if deleted else target
        if os.path.dirname(path) != os.path.dirname(real):
            continue
        label = os.path.basename(path) + (" (deleted)" if deleted else "")
        out[((os.major(st.st_dev), os.minor(st.st_dev)), st.st_ino)] = label
    return out


def _decode(rec: dict, label: str, wal_index: dict | None) -> dict:
    """One lock as the bundle shows it: file, byte range, read/write, what SQLite means by it."""
    base = label.split(" ")[0]
    if base.endswith(LOCK_SUFFIX):
        names = ["checkpoint lock " + ("exclusive (a checkpoint or a maintenance command)"
                                        if rec["write"] else "shared (a write transaction)")]
    elif base.endswith("-shm"):
        names = shm_lock_names(rec["start"], rec["end"])
    elif base.endswith("-wal"):
        names = []
    else:
        names = db_lock_names(rec["start"], rec["end"], rec["write"])
    item = {"file": label, "kind": rec["kind"],
            "bytes": [rec["start"], "EOF" if rec["end"] is None else rec["end"]],
            "mode": "write" if rec["write"] else "read", "waiting": rec["waiting"],
            "names": names or ["(not a lock byte SQLite uses)"]}
    marks = (wal_index or {}).get("read_marks") or []
    mx = (wal_index or {}).get("mx_frame")
    for name in names:
        i = read_mark_index(name)
        if i is not None and not rec["write"] and i < len(marks) and i < READ_MARKS:
            item["read_mark"] = {"index": i, "value": marks[i],
                                 "frames_behind": (mx - marks[i]) if isinstance(mx, int)
                                 and marks[i] <= mx else None}
    return item


def collect(db_path: Path, wal_index: dict | None) -> dict:
    """The ``processes`` section: every process holding the store (files, role, state, locks).

    Args:
        db_path: ``state.db`` (need not exist).
        wal_index: the bundle's wal-index header (read marks named with their frame), or None.
    Returns:
        ``{"scan": {"complete", "unreadable", "platform_note"}, "processes": [...],
        "lock_notes": [...]}``; each process ``{"pid", "role", "role_from", "command", "state",
        "state_detail", "age_s", "files", "retired", "locks", "holds", "maintenance"?}``.
    """
    real = os.path.realpath(os.fspath(db_path))
    scan = holders.scan(real)
    by_pid: dict[int, dict] = {}
    for h in scan.holders:
        by_pid[h.pid] = {"pid": h.pid, "files": list(h.files), "retired": list(h.retired)}
    files = {}
    for suffix in ("", "-wal", "-shm", LOCK_SUFFIX):
        ident = _identity(real + suffix)
        if ident is not None:
            files[ident] = os.path.basename(real + suffix)
    locks = read_proc_locks()
    lock_pids = {rec["pid"] for rec in locks if (rec["dev"], rec["ino"]) in files}
    for pid in sorted(lock_pids | set(by_pid)):
        if pid <= 0 or pid == os.getpid():
            continue
        entry = by_pid.setdefault(pid, {"pid": pid, "files": [], "retired": [],
                                        "note": "holds a lock on the store but its descriptors "
                                                "could not be read"})
        idents = dict(files)
        idents.update(_fd_identities(pid, real))
        entry["locks"] = [_decode(rec, idents[(rec["dev"], rec["ino"])], wal_index)
                          for rec in locks if rec["pid"] == pid
                          and (rec["dev"], rec["ino"]) in idents]
    home = os.path.dirname(real)
    labels = {real: "<store>", home: "<home>", real + "-wal": "<store>-wal",
              real + "-shm": "<store>-shm"}
    out = []
    for pid in sorted(by_pid):
        entry = by_pid[pid]
        argv = _argv(pid)
        role, why = infer_role(argv)
        state, detail = proc_state(pid)
        entry.update(role=role, role_from=why, command=redact_argv(argv, labels) or "?",
                     state=state, state_detail=detail, age_s=_age_s(pid))
        if role == "maintenance":
            entry["maintenance"] = maintenance_command(argv)
        entry.setdefault("locks", [])
        entry["holds"] = sorted({n for lk in entry["locks"] if not lk["waiting"]
                                 for n in lk["names"]})
        entry["waits_for"] = sorted({n for lk in entry["locks"] if lk["waiting"]
                                     for n in lk["names"]})
        out.append(entry)
    return {"scan": {"complete": scan.complete, "unreadable": scan.unreadable,
                     "platform_note": scan.platform_note or None},
            "processes": out,
            "lock_notes": ["SQLite takes its locks without waiting (F_SETLK) and retries: a "
                           "process waiting for a busy lock shows in no lock record; "
                           "`waits_for` lists only blocked requests the kernel queued",
                           "read marks: a process holding `read mark N` (read) reads the "
                           "WAL up to wal_index.read_marks[N]; checkpoints cannot copy frames "
                           "past the oldest such mark, and the WAL cannot restart while any "
                           "is held"]}
