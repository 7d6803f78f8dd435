"""hermes-state: the session store of an AI agent (one SQLite file per profile, WAL mode).

Public API: :class:`SessionDB`, the error types, :func:`find_holders`, and the ``events`` and
``failpoints`` hooks. See SPEC.md (§5 for the API, §10 for multi-process safety).
"""

from .db import SessionDB
from .errors import (
    DeletedWalGenerationError,
    HermesStateError,
    NewerSchemaWriteError,
    StateDbCorruptError,
    StateDbReplacedError,
    StorePermissionError,
    WriteContentionError,
)
from .holders import find_holders, format_holder, write_lock_owner
from .schema import SCHEMA_VERSION

__all__ = [
    "SessionDB",
    "SCHEMA_VERSION",
    "HermesStateError",
    "StateDbReplacedError",
    "DeletedWalGenerationError",
    "StateDbCorruptError",
    "WriteContentionError",
    "StorePermissionError",
    "NewerSchemaWriteError",
    "find_holders",
    "format_holder",
    "write_lock_owner",
]

__version__ = "0.1.0"
