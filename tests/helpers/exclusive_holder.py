"""Hold a store in ``locking_mode=EXCLUSIVE`` (any SQLite program may) until stdin says release.

Usage: exclusive_holder.py DB_PATH. Writes one row (the EXCLUSIVE lock is taken and kept, in
WAL mode with the WAL index in heap memory), prints LOCKED; on a stdin line closes and prints
RELEASED.
"""

import sqlite3
import sys


def main() -> int:
    conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
    conn.execute("PRAGMA locking_mode=EXCLUSIVE")
    conn.execute("CREATE TABLE IF NOT EXISTS holder_marks (x)")
    conn.execute("INSERT INTO holder_marks VALUES (1)")
    print("LOCKED", flush=True)
    sys.stdin.readline()
    conn.close()
    print("RELEASED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
