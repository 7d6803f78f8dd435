"""A read-only dashboard for the bundle tests: a bare sqlite3 connection whose read
transactions the test opens and ends.

Usage: ``dashboard_reader.py DB_PATH``. Commands on stdin, one per line: ``begin`` (BEGIN and a
first SELECT: the transaction now holds a read mark; prints ``{"reading": rows}``), ``end``
(COMMIT; prints ``{"ended": true}``), ``exit``.
"""

import json
import sqlite3
import sys


def main() -> int:
    conn = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True, isolation_level=None,
                           timeout=30)
    for line in sys.stdin:
        cmd = line.strip()
        if cmd == "begin":
            conn.execute("BEGIN")
            rows = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
            print(json.dumps({"reading": rows}), flush=True)
        elif cmd == "end":
            conn.execute("COMMIT")
            print(json.dumps({"ended": True}), flush=True)
        elif cmd == "exit":
            break
    conn.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
