"""The ``gateway`` role: long-lived, many sessions, appends at a rate, splits, spools refusals.

Workload (SPEC §16.1): ``appends_per_s`` (0 = as fast as possible), ``sessions`` (concurrent
sessions), ``message_bytes``, ``tool_call_share``, ``split_every`` (messages per session before a
compression split ends it and starts a child with ``parent_session_id``).
Refused appends (stale generation) are diverted to the spool (SPEC §10.1) and recorded as
``fail`` with ``spooled: true``. If the store cannot be opened it retries every 0.5 s. It claims
ownership of the store and runs queued maintenance requests (a prune handed over by
``sessions prune``, SPEC §11) once a second, never touching its own live sessions.
"""

from __future__ import annotations

import time

from hermes_state import SessionDB, maintenance
from hermes_state.errors import StateDbReplacedError

from .base import RoleContext
from .workload import message_text, tool_calls


def _open(ctx: RoleContext) -> SessionDB | None:
    while not ctx.should_stop():
        ok, value = ctx.op("open", lambda: SessionDB(ctx.cfg.db_path), definite=(Exception,))
        if ok:
            return value
        ctx.sleep(0.5)
    return None


def run(ctx: RoleContext) -> None:
    w = ctx.cfg.workload
    rate = float(w.get("appends_per_s", 20))
    n_sessions = int(w.get("sessions", 3))
    size = int(w.get("message_bytes", 200))
    share = float(w.get("tool_call_share", 0.2))
    split_every = int(w.get("split_every", 0))
    db = _open(ctx)
    if db is None:
        return
    proc = ctx.cfg.process
    sessions = [f"{proc}-s{i}" for i in range(n_sessions)]
    counts = {s: 0 for s in sessions}
    splits = 0
    for sid in sessions:
        ctx.op("create_session", lambda sid=sid: db.create_session(sid, source="gateway"),
               session_id=sid)
    # The gateway owns the store: `sessions prune` hands its deletions to us (SPEC §11).
    ctx.op("claim_owner", lambda: maintenance.claim_gateway_ownership(db))
    next_poll = time.monotonic() + 1.0
    interval = 1.0 / rate if rate > 0 else 0.0
    next_at = time.monotonic()
    roles = ("user", "assistant", "tool")
    k = 0
    while not ctx.should_stop():
        if time.monotonic() >= next_poll:
            next_poll = time.monotonic() + 1.0
            ctx.op("maintenance", lambda: len(maintenance.run_pending_requests(
                db, busy_sessions=frozenset(sessions))))
        slot = ctx.rng.randrange(n_sessions)
        sid = sessions[slot]
        role = roles[k % 3]
        k += 1
        pid = ctx.next_payload_id()
        msg = {"role": role, "content": message_text(ctx.rng, pid, size),
               "platform_message_id": pid}
        if role == "assistant" and ctx.rng.random() < share:
            msg["tool_calls"] = tool_calls(ctx.rng, ctx.rng.randint(1, 3))
        if role == "tool":
            msg["tool_name"] = "terminal"

        def spool(exc: BaseException, sid=sid, msg=msg) -> dict:
            if isinstance(exc, StateDbReplacedError):
                db.divert_to_spool(sid, [msg])
                return {"spooled": True}
            return {}

        ok, _ = ctx.op("append", lambda sid=sid, msg=msg: db.append_message(sid, **msg),
                       on_fail=spool, payload_id=pid, session_id=sid)
        if ok:
            counts[sid] += 1
            if split_every and counts[sid] >= split_every:
                splits += 1
                child = f"{proc}-s{slot}-c{splits}"
                ctx.op("end_session", lambda sid=sid: db.end_session(sid, "compression"),
                       session_id=sid)
                ctx.op("create_session", lambda sid=sid, child=child: db.create_session(
                    child, source="gateway", parent_session_id=sid), session_id=child)
                sessions[slot] = child
                counts[child] = 0
        if interval:
            next_at += interval
            delay = next_at - time.monotonic()
            if delay > 0:
                ctx.sleep(delay)
            else:
                next_at = time.monotonic()
    ctx.op("close", db.close, definite=(Exception,))
