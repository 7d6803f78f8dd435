"""A bare sqlite3 WAL writer for the faulty-filesystem tests (no store code involved).

Usage: sqlite_acker.py DB_PATH TAG SYNCHRONOUS N. Creates table ``t(tag, i)`` if missing, prints
READY, waits for a stdin line, then commits rows i = 0..N-1 one transaction each, printing
``ACK i`` after each commit returns and ``ERR i message`` when one raises (and goes on), then DONE.
N = 0 writes until killed.
"""

import sqlite3
import sys


def main() -> int:
    path, tag, sync, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    conn = sqlite3.connect(path, timeout=30, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={sync}")
    conn.execute("CREATE TABLE IF NOT EXISTS t(tag TEXT, i INTEGER, pad TEXT)")
    print("READY", flush=True)
    sys.stdin.readline()
    i = 0
    while n == 0 or i < n:
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t VALUES (?, ?, ?)", (tag, i, "x" * 300))
            conn.execute("COMMIT")
            print(f"ACK {i}", flush=True)
        except sqlite3.Error as exc:
            try:
                conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            print(f"ERR {i} {exc}", flush=True)
        i += 1
    print("DONE", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
