"""Concurrent appender: open the store, print READY, wait for a stdin line, append N messages.

Usage: append_worker.py DB_PATH SESSION_ID N TAG. Every even message of the run carries two
tool calls. Prints one JSON summary line: {"ids": [...], "errors": [...], "retries": k}.
"""

import json
import sys

from hermes_state import SessionDB, events


def main() -> int:
    path, sid, n, tag = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    retries = []
    events.add_listener(lambda e: e["event"] == "retry" and retries.append(e["sleep_s"]))
    db = SessionDB(path)
    db.create_session(sid, source="worker")
    print("READY", flush=True)
    sys.stdin.readline()
    ids, errors = [], []
    for i in range(n):
        calls = [{"id": f"{tag}-{i}-a"}, {"id": f"{tag}-{i}-b"}] if i % 2 == 0 else None
        try:
            ids.append(db.append_message(sid, "assistant", f"{tag} payload {i}", tool_calls=calls))
        except Exception as exc:  # noqa: BLE001 - the test asserts there are none
            errors.append(f"{type(exc).__name__}: {exc}")
    db.close()
    print(json.dumps({"ids": ids, "errors": errors, "retries": retries}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
