"""hermes-state: the session store of an AI agent (one SQLite file per profile, WAL mode).

Public API: :class:`SessionDB`, the error types, :func:`find_holders`, the gateway's hooks
(:func:`claim_gateway_ownership`, :func:`run_pending_requests`, :func:`replay_spool`), and the
``events`` and ``failpoints`` hooks. Tests and the chaos toolkit add :mod:`hermes_state.testing`. See SPEC.md (§5 for the API, §10 for multi-process safety).
"""

from .api.spool import replay_spool
from .api.workspace import workspace_key
from .db import SessionDB
from .errors import (
    DeletedWalGenerationError,
    ForkedHandleError,
    HermesStateError,
    NewerSchemaWriteError,
    OpenContentionError,
    StateDbCorruptError,
    StateDbReplacedError,
    StorePermissionError,
    WriteContentionError,
)
from .fts.query import MAX_QUERY_CHARS as MAX_FTS5_QUERY_CHARS
from .operator.schema_repair import repair_state_db_schema
from .processes.holders import find_holders, format_holder, write_lock_owner
from .processes.writer_gate import claim_gateway_ownership, run_pending_requests
from .schema.tables import SCHEMA_VERSION
from .schema.tables import TABLES_SQL as SCHEMA_SQL
from .store.availability import (
    format_session_db_unavailable,
    get_last_init_error,
    is_malformed_db_error,
)
from .store.wal_mode import apply_wal_with_fallback

__all__ = [
    "SessionDB",
    "AsyncSessionDB",
    "SCHEMA_VERSION",
    "SCHEMA_SQL",
    "MAX_FTS5_QUERY_CHARS",
    "DEFAULT_DB_PATH",
    "apply_wal_with_fallback",
    "workspace_key",
    "get_last_init_error",
    "format_session_db_unavailable",
    "is_malformed_db_error",
    "repair_state_db_schema",
    "HermesStateError",
    "StateDbReplacedError",
    "DeletedWalGenerationError",
    "StateDbCorruptError",
    "WriteContentionError",
    "OpenContentionError",
    "StorePermissionError",
    "ForkedHandleError",
    "NewerSchemaWriteError",
    "find_holders",
    "format_holder",
    "write_lock_owner",
    "claim_gateway_ownership",
    "run_pending_requests",
    "replay_spool",
]

__version__ = "0.1.0"


def __getattr__(name: str):
    """``DEFAULT_DB_PATH``: the default store path, resolved when read (SPEC §1: not frozen at
    import, so a later ``HERMES_HOME`` is honoured). ``AsyncSessionDB`` is imported on first use
    (asyncio costs every CLI command ~0.1-0.2 s of start-up otherwise)."""
    if name == "AsyncSessionDB":
        from .async_db import AsyncSessionDB

        return AsyncSessionDB
    if name == "DEFAULT_DB_PATH":
        from .files.paths import default_db_path

        return default_db_path()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
