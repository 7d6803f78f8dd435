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

from dataclasses import dataclass


from ..params import Duration, param
from .base import RoleContext
from .workload import cjk_share, make_message, message_bytes, rate, search_query, tool_call_share

KIND = "cli"
SUMMARY = "short-lived burst (or a cron-like repeated writer)"


@dataclass(frozen=True, kw_only=True)
class Params:
    """Open, create one session, append a burst, set a title, search, close."""

    burst: int = param(20, "Messages appended per run (0: an empty session, created and ended).",
                       minimum=0, maximum=10_000)
    message_bytes: int = message_bytes(120)
    cjk_share: float = cjk_share()
    tool_call_share: float = tool_call_share(0.0)
    search: bool = param(False, "Search for a generated word before closing.")
    repeat: int = param(1, "Runs (open, write, close) per instance: > 1 is a cron-like transient "
                        "writer.", minimum=1, maximum=10_000)
    every: Duration = param(1, "Pause between runs.")
    appends_per_s: float = rate(0, "Rate of the burst; 0 = as fast as possible.")
    title: bool = param(True, "Set a session title after the burst.")


def run(ctx: RoleContext) -> None:
    """``run(ctx)`` as :mod:`chaos.roles` defines it; the workload keys are in this module's
    docstring."""
    w: Params = ctx.params
    repeat = w.repeat
    every = w.every
    for i in range(repeat):
        if ctx.should_stop():
            break
        _one_run(ctx, w, i)
        if i + 1 < repeat:
            ctx.sleep(every)


def _one_run(ctx: RoleContext, w: Params, i: int) -> None:
    burst = w.burst
    rate = w.appends_per_s
    ok, db = ctx.op("open", ctx.open_db, definite=(Exception,))
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
        if w.title:
            title = f"cli {ctx.cfg.process}" + (f" run {i}" if i else "")
            ctx.op("set_title", lambda: db.set_session_title(sid, title), session_id=sid,
                   title=title)
        if w.search:
            q = search_query(ctx.rng, w.cjk_share)
            ctx.op("search", lambda: len(db.search_messages(q, limit=10)), query=q)
        ctx.op("end_session", lambda: db.end_session(sid, "cli_exit"), session_id=sid)
    ctx.op("close", db.close, definite=(Exception,))
