"""The ``cli`` role: short-lived; opens, creates one session, appends a burst, sets a title,
searches, closes (SPEC §16.1). With ``repeat`` > 1 it is a cron-like transient writer: it does
that ``repeat`` times, ``every`` seconds apart, each time with a fresh ``SessionDB`` (so its
close-time checkpoint runs next to a long-lived gateway's connection).

Workload: ``burst`` (messages per run; 0 = create and end an empty session), ``appends_per_s``
(0 = as fast as possible), ``message_bytes``, ``cjk_share``, ``tool_call_share``, ``title`` (set a
title after the burst), ``search`` (search for a word of the burst before closing), ``repeat``,
``every``. An open refused by the stale-generation scan is recorded as a ``fail`` of op ``open``
and the run is skipped: refusing is the correct behaviour, not a crash.
"""

from __future__ import annotations

from hermes_state import SessionDB

from .base import RoleContext
from .workload import make_message, search_query


def run(ctx: RoleContext) -> None:
    """``run(ctx)`` as :mod:`chaos.roles` defines it; the workload keys are in this module's
    docstring."""
    w = ctx.cfg.workload
    repeat = int(w.get("repeat", 1))
    every = float(w.get("every", 1.0))
    for i in range(repeat):
        if ctx.should_stop():
            break
        _one_run(ctx, w, i)
        if i + 1 < repeat:
            ctx.sleep(every)


def _one_run(ctx: RoleContext, w: dict, i: int) -> None:
    burst = int(w.get("burst", 20))
    rate = float(w.get("appends_per_s", 0))
    ok, db = ctx.op("open", lambda: SessionDB(ctx.cfg.db_path), definite=(Exception,))
    if not ok:
        return
    sid = f"{ctx.cfg.process}-s{i}"
    ok, _ = ctx.op("create_session", lambda: db.create_session(sid, source="cli"), session_id=sid)
    if ok:
        for j in range(burst):
            if ctx.should_stop():
                break
            pid = ctx.next_payload_id()
            msg = make_message(ctx.rng, pid, "user" if j % 2 == 0 else "assistant", w)
            ctx.op("append", lambda msg=msg: db.append_message(sid, **msg), payload_id=pid,
                   session_id=sid)
            if rate > 0:
                ctx.sleep(1.0 / rate)
        if w.get("title", True):
            title = f"cli {ctx.cfg.process}" + (f" run {i}" if i else "")
            ctx.op("set_title", lambda: db.set_session_title(sid, title), session_id=sid,
                   title=title)
        if w.get("search", False):
            q = search_query(ctx.rng, float(w.get("cjk_share", 0)))
            ctx.op("search", lambda: len(db.search_messages(q, limit=10)), query=q)
        ctx.op("end_session", lambda: db.end_session(sid, "cli_exit"), session_id=sid)
    ctx.op("close", db.close, definite=(Exception,))
