"""What tests and the chaos toolkit use of the store beyond its public API (not the store itself).

The store never imports this package. It holds the fixture builders and verifiers (stores at
every historical schema version, stores shaped like upstream's newer releases, the gate's
comparison after a migration) and re-exports the read-only probes a checker or a sampler needs
(WAL header, holders and lock records, the FTS inventory and verifier, the checkpoint lock's
holders), so that ``chaos/`` imports only ``hermes_state`` (public API), ``hermes_state.events``,
``hermes_state.failpoints`` and ``hermes_state.testing``.

Modules:

* :mod:`.fixtures`: :func:`build_fixture` / :func:`check_migrated` (SPEC §16.6),
  :func:`create_store_schema`;
* :mod:`.upstream_shapes`: stores shaped like upstream 25 and 31 (UPSTREAM_API.md §4.5),
  :func:`copy_store` and :data:`FIXTURE_ROOT`.
"""

from __future__ import annotations

import sqlite3
from typing import Iterable

from ..api.messages import build_append
from ..api.system_prompts import prompt_hash
from ..db import SessionDB
from ..files.paths import (
    default_db_path,
    owning_store,
    sessions_json_path,
    sqlite_uri,
    utc_stamp,
)
from ..files.sqlite_format import (
    SHM_LOCK_NAMES,
    WAL_HEADER_SIZE,
    db_header,
    is_sqlite,
    wal_frames,
    wal_header,
    wal_index_header,
)
from ..operator.snapshots import PRE_RESTORE_REASON, list_snapshots
from ..processes.checkpoint_lock import exposure_line, lock_holders, wal_reset_exposure
from ..processes.holders import (
    HAVE_PROC,
    PENDING_BYTE,
    LockRecord,
    describe_pid,
    read_locks,
)
from ..processes.holders import scan as scan_holders
from ..schema.fts_inventory import LEGACY_KINDS, inventory
from ..store.wal_sync import ENV_VAR as WAL_SYNC_ENV_VAR
from ..schema.fts_layout import verify_fts
from ..schema.history import (
    CURRENT_VERSION,
    FTS_LAYOUTS,
    INLINE_TEXT,
    VERSIONS,
    history_layout,
    infer_version,
    live_fts_layout,
    schema_at,
    version_table,
)
from .fixtures import (
    BASE_TIME,
    OWN_META_KEYS,
    ROW_KEYS,
    build_fixture,
    check_migrated,
    cjk_number,
    create_store_schema,
    sqlite_problems,
)
from .upstream_shapes import FIXTURE_ROOT, copy_store

__all__ = [
    "BASE_TIME", "CURRENT_VERSION", "FIXTURE_ROOT", "FTS_LAYOUTS", "HAVE_PROC", "INLINE_TEXT",
    "LEGACY_KINDS", "LockRecord", "OWN_META_KEYS", "PENDING_BYTE", "PRE_RESTORE_REASON",
    "ROW_KEYS", "VERSIONS", "append_messages", "build_fixture", "check_migrated", "cjk_number",
    "copy_store", "create_store_schema", "default_db_path", "describe_pid", "exposure_line",
    "history_layout", "infer_version", "inventory", "list_snapshots", "live_fts_layout",
    "lock_holders", "owning_store", "prompt_hash", "read_locks", "scan_holders", "schema_at", "sessions_json_path",
    "sqlite_problems", "sqlite_uri", "utc_stamp", "verify_fts", "version_table", "wal_header",
    "wal_reset_exposure", "WAL_SYNC_ENV_VAR", "SHM_LOCK_NAMES", "WAL_HEADER_SIZE",
    "db_header", "is_sqlite",
    "wal_frames", "wal_index_header",
]


def append_messages(db: SessionDB, rows: Iterable[tuple[str, str, str]], *,
                    op: str = "fixture") -> int:
    """Append ``(session_id, role, content)`` rows to ``db`` in ONE write transaction.

    The sessions must exist. Returns the number of rows appended. Raises what
    :meth:`SessionDB.append_message` raises (SPEC §10: the write path's refusals).
    """
    fns = [build_append(sid, role, content) for sid, role, content in rows]

    def fill(conn: sqlite3.Connection) -> int:
        for fn in fns:
            fn(conn)
        return len(fns)

    return db.connection.execute_write(fill, op=op)
