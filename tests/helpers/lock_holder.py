"""Hold the store's write lock with a raw sqlite3 BEGIN IMMEDIATE until stdin says release.

Usage: lock_holder.py DB_PATH. Prints LOCKED once the lock is held; on any stdin line (or EOF)
commits and prints RELEASED.
"""

import sqlite3
import sys


def main() -> int:
    conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
    conn.execute("BEGIN IMMEDIATE")
    print("LOCKED", flush=True)
    sys.stdin.readline()
    conn.execute("COMMIT")
    print("RELEASED", flush=True)
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
