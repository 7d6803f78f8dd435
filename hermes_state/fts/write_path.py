"""What FTS upkeep needs from a store's write path, as a protocol (SPEC §4, §12).

The back-fill thread and the repair run their transactions through the store's single write
path (:class:`hermes_state.store.connection.StoreConnection` satisfies this protocol), so this
package depends on the shape of that path and never on the ``store`` package above it.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Protocol, TypeVar

T = TypeVar("T")


class WritePath(Protocol):
    """A store's write path: its database path and one-transaction writes."""

    db_path: Path

    def execute_write(self, fn: Callable[[sqlite3.Connection], T], *, op: str = "write",
                      check_generation: bool = True) -> T:
        """Run ``fn(conn)`` in one ``BEGIN IMMEDIATE`` transaction and commit; returns its value."""
        ...
