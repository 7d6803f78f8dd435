"""Why the session store could not be opened, in words a user can act on
(UPSTREAM_API §2.1 ``get_last_init_error``, ``format_session_db_unavailable``,
``is_malformed_db_error``)."""

from __future__ import annotations

import sqlite3
import threading

_last_error: str | None = None
_lock = threading.Lock()

NETWORK_FS_HINT = ("the store's directory looks like a network or FUSE filesystem (NFS, SMB, "
                   "FUSE) that does not support SQLite's locking: set HERMES_HOME to a local "
                   "disk")
_NETWORK_WORDS = ("locking protocol", "not authorized")
_MALFORMED_WORDS = ("malformed database schema", "database disk image is malformed")


def record_init_error(exc: BaseException) -> None:
    """Remember ``"<ExcType>: <message>"`` of a failed open (a later success keeps it)."""
    global _last_error
    with _lock:
        _last_error = f"{type(exc).__name__}: {exc}"


def get_last_init_error() -> str | None:
    """The last open failure of this process as ``"<ExcType>: <message>"``, or None."""
    with _lock:
        return _last_error


def format_session_db_unavailable(prefix: str = "Session database not available") -> str:
    """``"<prefix>."``, or ``"<prefix>: <cause>."`` with the last open failure, plus a hint to
    use a local disk when the cause is a filesystem that refuses SQLite's locking."""
    cause = get_last_init_error()
    if not cause:
        return f"{prefix}."
    text = f"{prefix}: {cause.rstrip('.')}."
    if any(word in cause.lower() for word in _NETWORK_WORDS):
        text += f" Hint: {NETWORK_FS_HINT}."
    return text


def is_malformed_db_error(exc: BaseException) -> bool:
    """True for a ``sqlite3.DatabaseError`` saying the schema or the file is malformed."""
    return isinstance(exc, sqlite3.DatabaseError) and any(
        word in str(exc).lower() for word in _MALFORMED_WORDS)
