"""A child process that drives a real SessionDB on command (used by tests/test_store_*.py).

Protocol: one JSON object per line on stdin, one JSON reply per line on stdout.
Replies are ``{"ok": true, ...}`` or ``{"ok": false, "error": <class>, "mro": [...], "msg": ...}``.
Ops: listen (record store events from now on), open(path), create(sid), append(sid, n, prefix),
close, hits, events, capture_dir, exit. No event listener is registered unless ``listen`` is sent.
"""

import json
import os
import sys

from hermes_state import SessionDB, events, failpoints

EVENTS: list[dict] = []


def reply(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def main() -> int:
    db = None
    for line in sys.stdin:
        if not line.strip():
            continue
        cmd = json.loads(line)
        op = cmd["op"]
        try:
            res: dict = {}
            if op == "listen":
                events.add_listener(EVENTS.append)
            elif op == "open":
                db = SessionDB(cmd["path"])
            elif op == "create":
                db.create_session(cmd["sid"], source="child")
            elif op == "append":
                res["ids"] = [db.append_message(cmd["sid"], "user", f"{cmd.get('prefix', 'm')}-{i}")
                              for i in range(cmd.get("n", 1))]
            elif op == "close":
                db.close()
            elif op == "hits":
                res["hits"] = {name: failpoints.hits(name) for name in failpoints.NAMES}
            elif op == "events":
                res["events"] = EVENTS
            elif op == "capture_dir":
                res["capture_dir"] = db.connection.capture_dir
            elif op == "exit":
                reply({"ok": True})
                return 0
            else:
                raise ValueError(f"unknown op {op}")
            res["ok"] = True
            res["pid"] = os.getpid()
            reply(res)
        except Exception as exc:  # report, keep serving
            reply({"ok": False, "error": type(exc).__name__,
                   "mro": [c.__name__ for c in type(exc).__mro__], "msg": str(exc),
                   "capture_dir": getattr(exc, "capture_dir", None),
                   "holders": getattr(exc, "holders", None)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
