"""``SessionDB``: the public face of the store (SPEC §5).

Example::

    >>> from hermes_state import SessionDB
    >>> with SessionDB(db_path=tmp / "state.db") as db:
    ...     db.create_session("s1", source="cli")
    ...     db.append_message("s1", "user", "Hello")
    ...     db.get_messages_as_conversation("s1")
    [{'role': 'user', 'content': 'Hello'}]
"""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any, Callable, TypeVar

from .api.archive import ArchiveMixin
from .api.cleanup import CleanupMixin
from .api.compression import CompressionLocksMixin, CompressionMixin
from .api.gateway import GatewayMixin, HandoffMixin
from .api.housekeeping import HousekeepingMixin
from .api.importer import ImportMixin
from .api.lineage import LineageMixin
from .api.listing import ListingMixin
from .api.messages import AnchorsMixin, MessagesMixin
from .api.removal import RemovalMixin
from .api.replay import ReplayMixin
from .api.rewrite import RewriteMixin
from .api.search import SearchMixin
from .api.sessions import SessionsMixin
from .api.spool import divert_to_spool as _divert
from .api.telegram import TelegramMixin
from .api.text import CleaningConnection, UnstorableValueError, clean_text
from .api.titles import TitlesMixin
from .api.usage import UsageMixin
from .api.workspace import WorkspaceMixin
from .errors import HermesStateError
from .files.paths import default_db_path
from .schema.shape import newer_schema_error
from .store.availability import record_init_error
from .store.connection import StoreConnection
from .store.opening import open_connection

T = TypeVar("T")


class SessionDB(SessionsMixin, MessagesMixin, ReplayMixin, TitlesMixin, UsageMixin,
                LineageMixin, RemovalMixin, SearchMixin, WorkspaceMixin, CleanupMixin, RewriteMixin,
                AnchorsMixin, CompressionMixin, ListingMixin, ArchiveMixin, ImportMixin,
                GatewayMixin, HandoffMixin, TelegramMixin, CompressionLocksMixin,
                HousekeepingMixin):
    """One profile's session store: ``state.db`` in WAL mode, safe across threads and processes.

    Args:
        db_path: path of ``state.db``; default ``$HERMES_HOME/state.db`` (else
            ``~/.hermes/state.db``), resolved now, not at import (SPEC §1). The directory is
            created.
        read_only: open ``mode=ro`` (never creates, never writes, no stale-WAL scan).
        synchronous: ``"NORMAL"`` (default, durable against process crash) or ``"FULL"``.
    Raises:
        DeletedWalGenerationError: a process holds a deleted/replaced sidecar (SPEC §10.4).
        StorePermissionError: the directory or a store file is not writable.
    """

    def __init__(self, db_path: str | os.PathLike | None = None, *, read_only: bool = False,
                 synchronous: str = "NORMAL") -> None:
        try:
            self.db_path = (Path(db_path).absolute() if db_path is not None
                            else default_db_path())
            self.home = self.db_path.parent
            self.read_only = read_only
            self._conn = open_connection(self.db_path, read_only=read_only,
                                         synchronous=synchronous)
        except Exception as exc:
            record_init_error(exc)  # for format_session_db_unavailable()
            raise

    # -- plumbing used by the mixins
    def _write(self, fn: Callable[[sqlite3.Connection], T], op: str = "write") -> T:
        try:
            return self._conn.execute_write(lambda c: fn(CleaningConnection(c)), op=op)
        except OverflowError as exc:  # a number no column can hold, met while computing
            raise UnstorableValueError(f"{op}: a number is out of range ({exc}); nothing was "
                                       "written") from exc
        except (sqlite3.IntegrityError, sqlite3.OperationalError) as exc:
            named = self._newer_schema_error(exc, op)
            if named is None:
                raise
            raise named from exc

    def _newer_schema_error(self, exc: BaseException, op: str) -> Exception | None:
        """The named error when a newer store's schema refused the write (issue 10), or None."""
        if isinstance(exc, HermesStateError):
            return None
        return self._conn.read(lambda c: newer_schema_error(c, exc, op))

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        try:
            return self._conn.read(lambda c: fn(CleaningConnection(c)))
        except OverflowError as exc:  # an argument out of range, met while computing
            raise UnstorableValueError(f"a number is out of range ({exc})") from exc

    # -- state_meta
    def get_meta(self, key: str) -> str | None:
        """The ``state_meta`` value of ``key`` or None."""
        row = self._read(lambda c: c.execute(
            "SELECT value FROM state_meta WHERE key = ?", (clean_text(key),)).fetchone())
        return None if row is None else row[0]

    def set_meta(self, key: str, value: Any) -> None:
        """Upsert ``state_meta[key] = value`` (stored as text; None stores NULL)."""
        val = None if value is None else clean_text(str(value))
        self._write(lambda c: c.execute(
            "INSERT INTO state_meta(key, value) VALUES (?, ?) "
            "ON CONFLICT(key) DO UPDATE SET value = excluded.value", (clean_text(key), val)),
            op="set_meta")

    # -- refusals are diverted, not dropped (SPEC §10.1)
    def divert_to_spool(self, session_id: str, messages: list[dict]) -> Path:
        """Append refused messages to ``<home>/sessions/<session_id>.jsonl``; returns the path."""
        return _divert(self.home, session_id, messages)

    # -- lifecycle and introspection
    @property
    def connection(self) -> StoreConnection:
        """The underlying :class:`StoreConnection` (write counter, generation, capture dir)."""
        return self._conn

    @property
    def quarantined_to(self) -> Path | None:
        """Where a damaged ``state.db`` was moved aside at this open (SPEC §12), else None."""
        return getattr(self._conn, "quarantined_to", None)

    def checkpoint(self, mode: str = "PASSIVE") -> tuple | None:
        """Run ``PRAGMA wal_checkpoint(mode)`` now; ``(busy, log, checkpointed)`` or None."""
        return self._conn.checkpoint(mode, trigger="manual")

    def close(self) -> None:
        """Close: PASSIVE checkpoint when healthy; never a checkpoint for a retired generation."""
        self._conn.close()

    def __enter__(self) -> "SessionDB":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
