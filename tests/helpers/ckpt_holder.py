"""Hold the store's checkpoint lock inside a real checkpoint until killed (issue 12 tests).

Usage: ``ckpt_holder.py DB_PATH`` with ``HERMES_STATE_FAILPOINTS=checkpoint.locked=sleep(MS)``.
Opens the store, prints ``{"open": pid}``, then runs a PASSIVE checkpoint and prints every
failpoint and checkpoint event as it happens (the failpoint line means: the lock is held now),
then ``{"done": true}``.
"""

import json
import os
import sys

from hermes_state import SessionDB, events


def say(obj: dict) -> None:
    sys.stdout.write(json.dumps(obj, default=str) + "\n")
    sys.stdout.flush()


def main() -> int:
    db = SessionDB(sys.argv[1])
    say({"open": os.getpid()})
    events.add_listener(lambda e: e["event"] in ("failpoint", "checkpoint") and say(e))
    db.checkpoint("PASSIVE")
    db.close()
    say({"done": True})
    return 0


if __name__ == "__main__":
    sys.exit(main())
