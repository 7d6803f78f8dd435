"""Named failpoints in the store's critical paths (SPEC §4 "Failpoints"), as in fail-rs/gofail.

Inert unless ``HERMES_STATE_FAILPOINTS`` or ``HERMES_STATE_FAILPOINTS_FILE`` is set when the
process first hits a failpoint (or when :func:`reload` is called). Syntax: ``name=action[,name=action...]`` where action is one of

* ``crash``            SIGKILL this process at the point (a real ``kill -9``: no atexit, no close)
* ``crash@N``          the same, only on the Nth hit of that name in this process (1-based)
* ``sleep(MS)``        sleep MS milliseconds at every hit (``sleep(MS)@N``: only the Nth)
* ``error(KIND)``      raise ``sqlite3.OperationalError`` with the SQLite error code of KIND:
                       ``ioerr`` (10), ``busy`` (5), ``locked`` (6), ``full`` (13), ``corrupt`` (11)
* ``off``              disabled

The names are a contract tested by ``tests/test_failpoints.py``; :data:`NAMES` lists them with
where they sit. An unknown name in the env var raises :class:`ValueError` at the first hit so a
typo in a scenario never yields a run that silently tested nothing.

Arming at run time (SPEC §16.2 "arm a failpoint so the role kills itself at a named crash
point"): ``HERMES_STATE_FAILPOINTS_FILE`` names a file holding a spec in the same syntax. Once it
is set, every hit ``stat``s the file and re-reads it when it changed (write it atomically: a new
file renamed over the old one); its entries override the env var's. The hits of a name whose
action the file changed are counted from that moment, so ``crash@1`` means "the next hit". A
missing file arms nothing. When the variable is unset the cost stays one dict lookup per hit.

Every action that fires emits a store event ``failpoint`` (``name``, ``action``, ``hit``) before
it acts, so a history shows where a process crashed.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import time
from dataclasses import dataclass

from . import events

ENV_VAR = "HERMES_STATE_FAILPOINTS"
FILE_ENV_VAR = "HERMES_STATE_FAILPOINTS_FILE"

#: Every failpoint name and where it sits. Patterns with ``<N>`` match a schema version.
NAMES: dict[str, str] = {
    "open.before_connect": "SessionDB open: after the stale-generation scan, before sqlite3.connect",
    "open.journal_probed": "SessionDB open: PRAGMA journal_mode read, the stored schema "
                           "version (which decides whether the mode is kept) not yet read",
    "open.before_shape": "SessionDB open: pragmas set, what the open still has to do "
                         "(pending_work) not yet read",
    "open.after_schema": "SessionDB open: schema created/migrated, identities not yet recorded",
    "write.before_lock": "write path: BEGIN IMMEDIATE succeeded, the checkpoint lock not yet "
                         "tried (issue 12)",
    "write.lock_wait": "write path: BEGIN IMMEDIATE succeeded and a checkpoint holds the "
                       "checkpoint lock; hit before each try of the short wait that keeps "
                       "SQLite's write lock (issue 18)",
    "write.after_begin": "write path: BEGIN IMMEDIATE succeeded, generation not yet checked",
    "write.before_commit": "write path: the transaction's statements ran, COMMIT not yet issued",
    "write.after_commit": "write path: COMMIT returned, the caller not yet told",
    "checkpoint.before": "before a PASSIVE checkpoint (cadence or close), before its lock",
    "checkpoint.locked": "checkpoint path: the checkpoint lock is held (exposed SQLite), "
                         "PRAGMA wal_checkpoint not yet called",
    "checkpoint.after": "after a PASSIVE checkpoint returned",
    "capture.mid_copy": "retired-WAL capture: WAL copied into the .partial dir, manifest not yet",
    "capture.before_publish": "retired-WAL capture: copied, verified and manifest written in the "
                              ".partial dir, not yet renamed into place (issue 22 item 1)",
    "close.before_checkpoint": "close(): before the close-time PASSIVE checkpoint",
    "wal_sync.before": "the loss-window bound: before the fdatasync of the -wal through "
                       "SQLite's own descriptor (NORMAL, a commit not yet synced)",
    "quarantine.locked": "quarantine of a file that is not SQLite: the quarantine lock is held, "
                         "nothing re-checked or moved yet (issue 22 item 2)",
    "migrate.v<N>.before_commit": "migration step to version N ran, its COMMIT not yet issued",
    # Commands (not the write path): where a killed command leaves its work behind (issue 11.12)
    "cmd.backup.before_publish": "backup: image and manifest written in the .partial directory, "
                                 "not yet renamed into place",
    "cmd.recover.after_copy": "sessions recover: the source copied into the private working "
                              "directory (and the output's .partial made), nothing inspected",
    "cmd.export.before_publish": "sessions export -o FILE: everything written to FILE.partial, "
                                 "not yet renamed onto FILE",
    "cmd.maintenance.locked": "a gated maintenance command (optimize, optimize-storage, prune, "
                              "salvage, ...) holds the store's write lock and was allowed to "
                              "run, its action not yet begun (issue 25: a maintenance beside a "
                              "writer, held as long as a sleep says)",
}

_ERROR_CODES = {"ioerr": 10, "busy": 5, "locked": 6, "full": 13, "corrupt": 11}
_ERROR_TEXT = {
    "ioerr": "disk I/O error",
    "busy": "database is locked",
    "locked": "database table is locked",
    "full": "database or disk is full",
    "corrupt": "database disk image is malformed",
}

_ACTION_RE = re.compile(
    r"^(?P<kind>crash|off|sleep\((?P<ms>\d+(?:\.\d+)?)\)|error\((?P<err>[a-z]+)\))(?:@(?P<nth>\d+))?$"
)


@dataclass(frozen=True)
class Action:
    """One parsed action: ``kind`` in crash/sleep/error/off, optional ``nth`` (1-based hit)."""

    kind: str
    nth: int | None = None
    sleep_ms: float = 0.0
    error: str = ""


def _name_is_known(name: str) -> bool:
    if name in NAMES:
        return True
    return re.fullmatch(r"migrate\.v\d+\.before_commit", name) is not None


def parse(spec: str) -> dict[str, Action]:
    """Parse a failpoint spec string into ``{name: Action}``.

    Raises:
        ValueError: unknown name, malformed action, unknown error kind or ``@0``.
    """
    out: dict[str, Action] = {}
    for item in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, action = item.partition("=")
        name, action = name.strip(), action.strip()
        if not sep or not name or not action:
            raise ValueError(f"failpoint {item!r}: expected name=action")
        if not _name_is_known(name):
            raise ValueError(f"unknown failpoint {name!r}; known: {', '.join(sorted(NAMES))}")
        m = _ACTION_RE.match(action)
        if not m:
            raise ValueError(
                f"failpoint {name}: bad action {action!r} (crash, crash@N, sleep(MS), "
                "error(ioerr|busy|locked|full|corrupt), off)"
            )
        nth = int(m["nth"]) if m["nth"] else None
        if nth == 0:
            raise ValueError(f"failpoint {name}: hit numbers start at 1")
        kind = m["kind"].split("(")[0]
        err = m["err"] or ""
        if kind == "error" and err not in _ERROR_CODES:
            raise ValueError(f"failpoint {name}: unknown error kind {err!r}")
        out[name] = Action(kind, nth, float(m["ms"] or 0), err)
    return out


_active: dict[str, Action] | None = None
_hits: dict[str, int] = {}
_env_map: dict[str, Action] = {}
_file: str | None = None
_file_key: tuple | None = None
_file_map: dict[str, Action] = {}


def reload() -> dict[str, Action]:
    """Re-read ``HERMES_STATE_FAILPOINTS`` (and the file named by ``HERMES_STATE_FAILPOINTS_FILE``)
    and reset hit counters. Returns the active map.

    Raises:
        ValueError: a bad spec in the env var or the file.
    """
    global _active, _env_map, _file, _file_key, _file_map
    _hits.clear()
    _env_map = parse(os.environ.get(ENV_VAR, ""))
    _file = os.environ.get(FILE_ENV_VAR) or None
    _file_key, _file_map = None, {}
    _active = dict(_env_map)
    if _file is not None:
        _poll_file()
    return dict(_active)


def _read_spec_file(path: str) -> str:
    """The armed spec file's text: never blocks on a FIFO, never reads a device or a link
    (``O_NONBLOCK | O_NOFOLLOW``, then ``fstat``); at most 64 KiB. (This module sits below
    ``hermes_state.files``, so it cannot use ``files.atomic.read_regular``.)

    Raises:
        FileNotFoundError: nothing there; ValueError: not a regular file.
    """
    import stat

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError(f"{FILE_ENV_VAR}={path} is not a regular file")
        return os.read(fd, 1 << 16).decode("utf-8", "replace")
    finally:
        os.close(fd)


def _poll_file() -> dict[str, Action]:
    """Re-read the arm file if its (inode, size, mtime) changed; return the active map."""
    global _active, _file_key, _file_map
    try:
        st = os.stat(_file)  # type: ignore[arg-type]
        key: tuple | None = (st.st_ino, st.st_size, st.st_mtime_ns)
    except OSError:
        key = None
    if key != _file_key:
        new: dict[str, Action] = {}
        if key is not None:
            try:
                new = parse(_read_spec_file(_file))  # type: ignore[arg-type]
            except FileNotFoundError:
                new = {}
        for name in set(new) | set(_file_map):
            if new.get(name) != _file_map.get(name):
                _hits.pop(name, None)  # counted from the moment it was (re)armed
        _file_key, _file_map = key, new
        _active = {**_env_map, **new}
    return _active  # type: ignore[return-value]


def hits(name: str) -> int:
    """How many times ``name`` was reached in this process since the last reload."""
    return _hits.get(name, 0)


def hit(name: str) -> bool:
    """Mark that execution reached failpoint ``name``; perform its action if one is armed.

    Costs one dict lookup when nothing is armed. Returns True when an action ran (a sleep:
    the caller's view of the files may be stale now), else False.

    Raises:
        sqlite3.OperationalError: for an armed ``error(KIND)`` action (``sqlite_errorcode`` set).
    """
    active = _active
    if active is None:
        active = reload()
    if _file is not None:
        active = _poll_file()
    if not active:
        return False
    action = active.get(name)
    if action is None:
        return False
    n = _hits[name] = _hits.get(name, 0) + 1
    if action.kind == "off" or (action.nth is not None and n != action.nth):
        return False
    events.enabled() and events.emit("failpoint", name=name, action=action.kind, hit=n)
    if action.kind == "crash":
        os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(10)  # SIGKILL is asynchronous only in theory; never return from a crash
    elif action.kind == "sleep":
        time.sleep(action.sleep_ms / 1000.0)
    elif action.kind == "error":
        exc = sqlite3.OperationalError(f"{_ERROR_TEXT[action.error]} (failpoint {name})")
        exc.sqlite_errorcode = _ERROR_CODES[action.error]  # type: ignore[attr-defined]
        exc.sqlite_errorname = "SQLITE_" + action.error.upper()  # type: ignore[attr-defined]
        raise exc
    return True
