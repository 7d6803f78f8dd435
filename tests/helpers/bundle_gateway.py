"""A gateway-like writer for the bundle tests: appends to one session until killed.

Usage: ``bundle_gateway.py DB_PATH SESSION_ID RATE TEXT``: opens the store, creates the session,
then appends ``TEXT <i>`` (alternately user and assistant) RATE times a second (0: as fast as
possible). Prints JSON lines: ``{"ok": i}`` after each append, ``{"fail": class, "msg": first
line}`` after a failed one (it goes on), and the store events failpoint / refusal / capture /
write_gave_up as they happen. Failpoints come from HERMES_STATE_FAILPOINTS. The file name says
"gateway" so the bundle tells its role from the command line.
"""

import json
import sys
import time

from hermes_state import SessionDB, events


def say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def main() -> int:
    path, sid, rate, text = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
    events.add_listener(lambda e: e["event"] in ("failpoint", "refusal", "capture",
                                                 "write_gave_up") and say(e))
    db = SessionDB(path)
    db.create_session(sid, source="telegram")
    i = 0
    while True:
        i += 1
        try:
            db.append_message(sid, ("user", "assistant")[i % 2], f"{text} {i}")
            say({"ok": i})
        except Exception as exc:  # noqa: BLE001 - reported to the test, the loop goes on
            say({"fail": type(exc).__name__, "msg": (str(exc).splitlines() or [""])[0]})
            time.sleep(0.05)
        if rate > 0:
            time.sleep(1.0 / rate)


if __name__ == "__main__":
    sys.exit(main())
