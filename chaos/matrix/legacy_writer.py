"""An old-schema writer: what a binary of schema version N does to the store (SPEC §16.6).

Run as ``python -m chaos.matrix.legacy_writer DB_PATH VERSION``. It never imports the current store
code: a raw ``sqlite3`` connection (busy timeout 30 s), the version's own DDL (every statement
is ``IF NOT EXISTS``, so against a newer store it changes nothing) and INSERTs naming only the
columns that version knew. It writes its own session ``legacy-v<N>`` (so it never changes a row
of the fixture) and bumps that session's ``message_count`` like the old code did.

Protocol (one JSON object per stdout line):

* at start: DDL, one write, then ``{"ready": true}``;
* while stdin is silent: a write every :data:`PACE_S` (``phase="during"``), each in its own
  ``BEGIN IMMEDIATE`` transaction that also reads ``schema_version``;
* the line ``after`` on stdin: reconnect (an old binary started against the newer store), run
  the DDL again, write :data:`AFTER_WRITES` rows (``phase="after"``), print
  ``{"writes": [{"id", "word", "phase", "version", "t"}, ...]}`` and exit 0.

``t`` is ``time.monotonic()`` at the COMMIT (system-wide on Linux, comparable across processes).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time

from hermes_state.testing import create_store_schema, schema_at

PACE_S = 0.004
AFTER_WRITES = 20
#: Message columns an old binary writes, in the order it names them (filtered by version).
_MESSAGE_COLUMNS = ("session_id", "role", "content", "timestamp", "token_count", "finish_reason")


def word_for(version: int, phase: str, n: int) -> str:
    """The unique searchable word of the ``n``-th row of ``phase`` (one unicode61 token)."""
    return f"legacyv{version}{phase}{n:05d}"


class LegacyWriter:
    """A version-``version`` client of the store at ``path`` (raw sqlite3, old DDL)."""

    def __init__(self, path: str, version: int) -> None:
        self.path, self.version = path, version
        self.session = f"legacy-v{version}"
        self.columns = [c for c in _MESSAGE_COLUMNS if c in schema_at(version).columns("messages")]
        self.writes: list[dict] = []
        self.conn = self._connect()

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, isolation_level=None, timeout=30)
        conn.execute("BEGIN IMMEDIATE")
        create_store_schema(conn, self.version)
        conn.execute("INSERT OR IGNORE INTO sessions(id, source, started_at) VALUES (?, 'cli', ?)",
                     (self.session, 1.0))
        conn.execute("COMMIT")
        return conn

    def reconnect(self) -> None:
        """Close and open again, running the old DDL against whatever the store is now."""
        self.conn.close()
        self.conn = self._connect()

    def write(self, phase: str) -> None:
        """Append one row in its own transaction and remember it."""
        n = len(self.writes)
        word = word_for(self.version, phase, n)
        values = {"session_id": self.session, "role": "user", "content": f"{word} old code row",
                  "timestamp": 2_000_000_000.0 + n, "token_count": 1, "finish_reason": "stop"}
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            version = conn.execute("SELECT max(version) FROM schema_version").fetchone()[0]
            cur = conn.execute(
                f"INSERT INTO messages({', '.join(self.columns)}) "
                f"VALUES ({', '.join('?' for _ in self.columns)})",
                [values[c] for c in self.columns])
            conn.execute("UPDATE sessions SET message_count = message_count + 1 WHERE id = ?",
                         (self.session,))
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        self.writes.append({"id": cur.lastrowid, "word": word, "phase": phase,
                            "version": version, "t": time.monotonic()})


def main(argv: list[str]) -> int:
    """Entry point of the old-schema writer process (see the module docstring); returns its exit code."""
    path, version = argv[0], int(argv[1])
    writer = LegacyWriter(path, version)
    writer.write("before")
    print(json.dumps({"ready": True}), flush=True)
    stop = threading.Event()

    def wait_for_after() -> None:
        sys.stdin.readline()
        stop.set()

    threading.Thread(target=wait_for_after, daemon=True).start()
    while not stop.is_set():
        writer.write("during")
        time.sleep(PACE_S)
    writer.reconnect()
    for _ in range(AFTER_WRITES):
        writer.write("after")
    writer.conn.close()
    print(json.dumps({"writes": writer.writes}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
