"""Exception types of the store and the messages users and operators read (SPEC §10.1, §12).

Every refusal carries two layers: ``user_message`` (what happened, that nothing is lost, what to
do next) and ``operator_detail`` (which identities differ, which holders were seen). ``str(err)``
is the user layer followed by the operator layer, so a log line has both.
"""

from __future__ import annotations

import errno
import sqlite3

__all__ = [
    "HermesStateError",
    "StateDbReplacedError",
    "DeletedWalGenerationError",
    "StateDbCorruptError",
    "WriteContentionError",
    "StorePermissionError",
    "NewerSchemaWriteError",
    "EvidenceWriteError",
    "StoreIOError",
]

# Fingerprint words (SPEC §10.1): support tooling and tests search for them; keep them verbatim.
RETIRED_WAL_USER_MESSAGE = (
    "session storage stopped writing because another process still holds a deleted "
    "state.db-wal or state.db-shm (an old copy of the write-ahead log). Nothing is lost: stop "
    "every process using this profile (gateway, desktop app, dashboard, cron), run `doctor` (it "
    "names them), then start again. Do not delete the WAL yourself."
)

#: Who holds the retired generation, as the refused caller reads it (issue 16 item 4): the
#: writer whose own WAL was deleted must not be told that "another process" holds it.
HOLDER_OTHER, HOLDER_SELF, HOLDER_SELF_AND_OTHERS = "other", "self", "self+others"


def retired_wal_user_message(held_by: str = HOLDER_OTHER, *, pid: int | None = None,
                             own_connection: bool = False, at_risk: str | None = None) -> str:
    """The user layer of :class:`DeletedWalGenerationError` for who holds the retired files.

    Args:
        held_by: :data:`HOLDER_OTHER` (the SPEC §10.1 text, verbatim), :data:`HOLDER_SELF` (the
            refused process itself holds the deleted WAL) or :data:`HOLDER_SELF_AND_OTHERS`.
        pid: the refused process's PID, named after "this process" (None: not named).
        own_connection: with :data:`HOLDER_SELF`, the refused connection is the one whose
            files were deleted or replaced while it was writing (else another connection this
            process has open holds them).
        at_risk: what is NOT saved yet and where it is (no verified capture of the retired
            log exists, issue 22 item 1): replaces "Nothing is lost", which is only said when
            a verified capture exists (or the log held nothing).
    Returns:
        The message; the fingerprint words "deleted state.db-wal or state.db-shm" are in all.
    """
    text = _retired_wal_text(held_by, pid, own_connection)
    if at_risk is None:
        return text
    return text.replace(
        "Nothing is lost: stop every process using this profile",
        f"{at_risk} Run `doctor` first (it saves a copy of that log), then stop every process "
        "using this profile").replace(
        ", run `doctor` (it names them), then start again.", ", then start again.")


def _retired_wal_text(held_by: str, pid: int | None, own_connection: bool) -> str:
    me = "this process" + (f" (PID {pid})" if pid is not None else "")
    if held_by == HOLDER_SELF:
        how = (f"they were deleted or replaced on disk while {me} was writing through its own "
               "connection." if own_connection else
               f"another connection {me} has open still uses them.")
        return RETIRED_WAL_USER_MESSAGE.replace(
            "because another process still holds",
            "because this process still holds").replace(
            "(an old copy of the write-ahead log).",
            f"(an old copy of the write-ahead log): {how}").replace(
            "stop every process using this profile (",
            "stop every process using this profile, this one included (")
    if held_by == HOLDER_SELF_AND_OTHERS:
        return RETIRED_WAL_USER_MESSAGE.replace(
            "because another process still holds",
            f"because {me} and another process still hold").replace(
            "stop every process using this profile (",
            "stop every process using this profile, this one included (")
    return RETIRED_WAL_USER_MESSAGE


REPLACED_DB_USER_MESSAGE = (
    "session storage stopped writing because state.db was replaced on disk while this process "
    "had it open (moved or copied over). Nothing this process wrote is lost: stop every process "
    "using this profile, run `doctor`, then start again."
)


class HermesStateError(Exception):
    """Base class of every error the store raises on purpose.

    Args:
        user_message: one or two sentences for the person running the agent.
        operator_detail: facts for whoever debugs it (identities, holders, paths); may be "".
    """

    def __init__(self, user_message: str, operator_detail: str = "") -> None:
        self.user_message = user_message
        self.operator_detail = operator_detail
        text = user_message if not operator_detail else f"{user_message}\n{operator_detail}"
        super().__init__(text)


class StateDbReplacedError(HermesStateError, sqlite3.OperationalError):
    """The main file under an open handle is no longer the one on disk (SPEC §10.1).

    Raised before a write when ``state.db`` has another inode or another ``application_id`` than
    the one recorded at open. Sticky: every later write on the same handle raises it again.
    Subclasses ``sqlite3.OperationalError`` so callers that already catch SQLite errors see it.
    """

    def __init__(self, operator_detail: str = "", user_message: str = REPLACED_DB_USER_MESSAGE):
        super().__init__(user_message, operator_detail)


class DeletedWalGenerationError(StateDbReplacedError):
    """The WAL generation this handle holds was retired: ``-wal``/``-shm`` deleted or replaced.

    Raised (SPEC §10.1, §10.4) by a live writer before its next write, and by a new writable
    open while any process still holds a deleted sidecar of the store. ``holders`` lists
    ``(pid, command, files)`` of the processes seen holding the retired generation, and
    ``capture_dir`` names the evidence directory written by this process (§10.3), if any.
    ``held_by`` says whether the refused process itself holds the retired files (its user
    message then says "this process" with its PID, and whether the refused connection is the
    one whose files went: ``own_connection``; :func:`retired_wal_user_message`).
    ``at_risk`` (None when a verified capture exists) says which acknowledged writes are not
    saved yet and which process holds the only copy; ``capture_pending`` is then True.
    """

    def __init__(
        self,
        operator_detail: str = "",
        *,
        holders: list | None = None,
        capture_dir: str | None = None,
        held_by: str = HOLDER_OTHER,
        pid: int | None = None,
        own_connection: bool = False,
        at_risk: str | None = None,
    ) -> None:
        self.holders = list(holders or [])
        self.capture_dir = capture_dir
        self.held_by = held_by
        self.at_risk = at_risk
        self.capture_pending = at_risk is not None
        super().__init__(operator_detail, user_message=retired_wal_user_message(
            held_by, pid=pid, own_connection=own_connection, at_risk=at_risk))


class StateDbCorruptError(HermesStateError, sqlite3.DatabaseError):
    """Structural corruption seen on a live handle (SPEC §12). Sticky; no checkpoint at close."""


class WriteContentionError(HermesStateError, sqlite3.OperationalError):
    """A write gave up after ``_WRITE_MAX_RETRIES`` lock errors (SPEC §4, §10.2).

    Attributes:
        attempts: how many BEGIN IMMEDIATE attempts were made.
        waited_s: seconds spent from the first attempt to giving up.
        holders: ``(pid, command, files)`` of the other processes holding the store.
        lock_owner: the write-lock owner line read from ``/proc/locks``, or None.
        lock_owner_seen_s: seconds between this writer's first and last sightings of that owner
            holding the lock at consecutive failed attempts (0.0 for one sighting), or None
            when the owner was not seen at the last attempt. Not how long the owner held it.
    """

    def __init__(
        self,
        user_message: str,
        operator_detail: str = "",
        *,
        attempts: int = 0,
        waited_s: float = 0.0,
        holders: list | None = None,
        lock_owner: str | None = None,
        lock_owner_seen_s: float | None = None,
    ) -> None:
        self.attempts = attempts
        self.waited_s = waited_s
        self.holders = list(holders or [])
        self.lock_owner = lock_owner
        self.lock_owner_seen_s = lock_owner_seen_s
        super().__init__(user_message, operator_detail)


class OpenContentionError(WriteContentionError):
    """A writable open gave up: another process kept the store locked through the open's
    retries (its pragmas, or the reads that decide what the open has to do; issue 23). Names
    the lock owner and the holders like :class:`WriteContentionError`; nothing was changed."""


class StorePermissionError(HermesStateError, PermissionError):
    """A store file or its directory cannot be written (SPEC §4): names the path and the fix."""


class EvidenceWriteError(HermesStateError, OSError):
    """Evidence could not be written: a retired-WAL capture, spooled messages, a snapshot, a
    quarantine move, a salvage record (issue 22 item 1). Never dropped silently: the message
    names what was not written, where, why, and what is at risk until it is; the write is
    retried (on the next call, at close, by ``doctor``, or by running the command again).

    Attributes:
        path: the file or directory that could not be written.
    """

    def __init__(self, user_message: str, operator_detail: str = "", *,
                 path: str = "") -> None:
        self.path = path
        super().__init__(user_message, operator_detail)


class StoreIOError(HermesStateError, sqlite3.OperationalError):
    """The store's own files could not be opened, read or written while opening it: a full disk,
    an I/O error, a file that cannot be created (issue 22, the I/O error sweep). Names the path
    and the cause; nothing was written. ``errno_name`` is the errno or SQLite code seen."""

    def __init__(self, user_message: str, operator_detail: str = "", *, path: str = "",
                 errno_name: str = "") -> None:
        self.path = path
        self.errno_name = errno_name
        super().__init__(user_message, operator_detail)


def store_io_error(path: object, exc: BaseException, doing: str) -> StoreIOError:
    """A :class:`StoreIOError` for ``exc`` (an ``OSError`` or an SQLite I/O-class error)
    met while ``doing`` (``"opening"``, ``"reading the header of"``)."""
    code = getattr(exc, "sqlite_errorname", None) or errno.errorcode.get(
        getattr(exc, "errno", None) or 0, "")
    cause = getattr(exc, "strerror", None) or str(exc)
    where = getattr(exc, "filename", None) or path
    return StoreIOError(
        f"session storage failed {doing} {path}: {cause} ({code or 'I/O error'}; {where}). "
        "Nothing was written. If the disk is full, free space; otherwise check the disk "
        "(dmesg) and the directory's permissions, then retry.",
        f"{type(exc).__name__}: {exc}", path=str(where), errno_name=str(code))


#: SQLite primary result codes of I/O trouble while opening (not damage, not lock errors).
SQLITE_IO_CODES = {8: "SQLITE_READONLY", 10: "SQLITE_IOERR", 13: "SQLITE_FULL",
                   14: "SQLITE_CANTOPEN"}


def is_io_error(exc: BaseException) -> bool:
    """True for SQLITE_IOERR/FULL/CANTOPEN/READONLY (and extended codes), by code."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code is not None and (code & 0xFF) in SQLITE_IO_CODES


class NewerSchemaWriteError(HermesStateError, sqlite3.IntegrityError):
    """A write this code cannot make safely on a store written by a newer release (issue 10).

    The newer schema requires something this code does not write (a NOT NULL column without a
    default, a CHECK, a trigger needing a function or tokenizer it lacks). Nothing was written.

    Attributes:
        schema_version: the store's schema version.
        operation: the write that was refused (``append_message``, ...).
    """

    def __init__(self, user_message: str, operator_detail: str = "", *,
                 schema_version: int | None = None, operation: str = "") -> None:
        self.schema_version = schema_version
        self.operation = operation
        super().__init__(user_message, operator_detail)


# ------------------------------------------------------------------ SQLite error codes
SQLITE_BUSY = 5
SQLITE_LOCKED = 6
SQLITE_CORRUPT = 11
SQLITE_NOTADB = 26
SQLITE_CORRUPT_VTAB = 267  # corruption inside a virtual table: the FTS shadow tables
SQLITE_CONSTRAINT = 19  # plain, no extended code: what FTS5 returns on a zeroed structure record


def is_lock_error(exc: BaseException) -> bool:
    """True for SQLITE_BUSY / SQLITE_LOCKED (and their extended codes), by error code (SPEC §4)."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return False
    return (code & 0xFF) in (SQLITE_BUSY, SQLITE_LOCKED)


def corruption_kind(exc: BaseException) -> str | None:
    """``"fts"`` (SQLITE_CORRUPT_VTAB), ``"structural"`` (CORRUPT/NOTADB) or None (SPEC §12).

    FTS damage that FTS5 reports as a bare SQLITE_CONSTRAINT is recognised by the write path
    with a probe (``_fts_damage_behind``), not here: the code alone does not tell.
    """
    code = getattr(exc, "sqlite_errorcode", None)
    if code is None:
        return "structural" if "malformed" in str(exc) else None
    if code == SQLITE_CORRUPT_VTAB or (code & 0xFF == SQLITE_CORRUPT and "fts5" in str(exc)):
        return "fts"
    if code & 0xFF in (SQLITE_CORRUPT, SQLITE_NOTADB):
        return "structural"
    return None


class ForkedHandleError(HermesStateError, sqlite3.ProgrammingError):
    """A store handle opened in another process (before a ``fork``) was used in this one.

    SQLite forbids carrying a connection across ``fork``: the child holds none of the
    parent's POSIX locks, so its writes, checkpoints and close could run beside the parent's
    as if alone (a split WAL, a deleted log under a live transaction). Open a new
    ``SessionDB`` in the child (SPEC §4).
    """
