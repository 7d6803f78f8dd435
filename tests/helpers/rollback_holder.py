"""Lock a rollback-journal store the way a committing writer does, until stdin says release.

Usage: rollback_holder.py DB_PATH. ``BEGIN EXCLUSIVE`` (in journal_mode=DELETE every other
connection's reads and writes now get SQLITE_BUSY), prints LOCKED; on a stdin line (or EOF)
commits, prints RELEASED and exits.
"""

import sqlite3
import sys


def main() -> int:
    conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
    conn.execute("BEGIN EXCLUSIVE")
    print("LOCKED", flush=True)
    sys.stdin.readline()
    conn.execute("COMMIT")
    conn.close()
    print("RELEASED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
