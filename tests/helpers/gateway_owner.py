"""A gateway-like owner: opens the store, claims ownership, runs queued maintenance requests.

Prints ``ready <pid>`` once it owns the store, then ``ran <json>`` for every batch of requests it
executed; exits when stdin closes. Its live session ``live`` has a turn in progress.
"""

import json
import select
import sys

from hermes_state import SessionDB
from hermes_state.processes import writer_gate as maintenance

db = SessionDB(sys.argv[1])
db.create_session("live", source="gateway")
db.append_message("live", "user", "a turn in progress")
maintenance.claim_gateway_ownership(db)
print(f"ready {__import__('os').getpid()}", flush=True)
while True:
    readable, _, _ = select.select([sys.stdin], [], [], 0.1)
    if readable and not sys.stdin.readline():
        break
    done = maintenance.run_pending_requests(db, busy_sessions={"live"})
    if done:
        print("ran " + json.dumps(done), flush=True)
db.close()
