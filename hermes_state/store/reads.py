"""One consistent read over several statements (SPEC §4: no read transaction outlives a call)."""

from __future__ import annotations

import sqlite3
from typing import Callable, TypeVar

T = TypeVar("T")


def in_snapshot(c: sqlite3.Connection, fn: Callable[[], T]) -> T:
    """Run ``fn()`` inside one deferred read transaction on ``c`` (joining one already open),
    ended before returning."""
    began = not c.in_transaction
    if began:
        c.execute("BEGIN")
    try:
        return fn()
    finally:
        if began and c.in_transaction:
            c.execute("COMMIT")
