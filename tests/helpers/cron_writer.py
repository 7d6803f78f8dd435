"""A cron-like writer: open the store, create a session, append one message, close.

Usage: ``cron_writer.py DB_PATH SESSION_ID TEXT``. Prints one JSON line per store event of kind
retry / write_gave_up / checkpoint / failpoint as it happens (so a test sees at once that this
writer waits for a lock), then ``{"ack": message_id, "t": monotonic}`` or ``{"fail": class,
"msg": text}``, then ``{"closed": true}``.
"""

import json
import sys
import time

from hermes_state import SessionDB, events


def say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def main() -> int:
    path, sid, text = sys.argv[1:4]
    events.add_listener(lambda e: e["event"] in ("retry", "write_gave_up", "checkpoint",
                                                 "failpoint") and say(e))
    db = SessionDB(path)
    try:
        db.create_session(sid, source="cron")
        mid = db.append_message(sid, "user", text)
        say({"ack": mid, "t": time.monotonic()})
    except Exception as exc:  # noqa: BLE001 - reported to the test
        say({"fail": type(exc).__name__, "msg": str(exc)})
    db.close()
    say({"closed": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
