"""Open an existing store and append N messages to one session, printing "ok I" after each.

Usage: fp_appender.py DB_PATH SESSION_ID N. Failpoints come from HERMES_STATE_FAILPOINTS.
"""

import sys

from hermes_state import SessionDB


def main() -> int:
    path, sid, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    db = SessionDB(path)
    for i in range(1, n + 1):
        db.append_message(sid, "user", f"fp-{i}")
        print(f"ok {i}", flush=True)
    db.close()
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
