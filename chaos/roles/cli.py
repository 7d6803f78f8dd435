"""The ``cli`` role: short-lived; opens, creates one session, appends a burst, closes (SPEC §16.1).

Workload: ``burst`` (messages), ``appends_per_s`` (0 = as fast as possible), ``title`` (set a
title when the API has it). An open refused by the stale-generation scan is recorded as a ``fail``
of op ``open`` and the process exits 0: refusing is the correct behaviour, not a crash.
"""

from __future__ import annotations

from hermes_state import SessionDB

from .base import RoleContext
from .workload import message_text


def run(ctx: RoleContext) -> None:
    w = ctx.cfg.workload
    burst = int(w.get("burst", 20))
    rate = float(w.get("appends_per_s", 0))
    ok, db = ctx.op("open", lambda: SessionDB(ctx.cfg.db_path), definite=(Exception,))
    if not ok:
        return
    sid = f"{ctx.cfg.process}-s0"
    ok, _ = ctx.op("create_session", lambda: db.create_session(sid, source="cli"), session_id=sid)
    if ok:
        for i in range(burst):
            if ctx.should_stop():
                break
            pid = ctx.next_payload_id()
            role = "user" if i % 2 == 0 else "assistant"
            text = message_text(ctx.rng, pid, 120)
            ctx.op("append", lambda role=role, text=text, pid=pid: db.append_message(
                sid, role, text, platform_message_id=pid), payload_id=pid, session_id=sid)
            if rate > 0:
                ctx.sleep(1.0 / rate)
        if w.get("title", True) and hasattr(db, "set_session_title"):
            ctx.op("set_title", lambda: db.set_session_title(sid, f"cli {ctx.cfg.process}"),
                   session_id=sid)
        ctx.op("end_session", lambda: db.end_session(sid, "cli_exit"), session_id=sid)
    ctx.op("close", db.close, definite=(Exception,))
