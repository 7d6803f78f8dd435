"""The ``worktree`` role: a sub-agent working for a parent session (SPEC §16.1).

It creates a parent session (the orchestrating agent's), then ``children`` child sessions one after
another (``parent_session_id`` = the parent), each receiving ``messages_per_child`` messages at
``appends_per_s``, a token-usage update every ``usage_every`` acknowledged messages
(``update_token_counts`` with ``task='subagent'``), and a title taken down the lineage:
``get_next_title_in_lineage(title)`` gives ``title``, ``title #2``, ``title #3``... (SPEC §7).
Each child is ended with ``end_reason='subagent_done'``; the parent is ended last.

Workload: ``children``, ``messages_per_child``, ``appends_per_s`` (0 = as fast as possible),
``message_bytes``, ``cjk_share``, ``tool_call_share``, ``usage_every`` (0 = never), ``title``
(the lineage's base title; the process name is appended so instances do not collide).
"""

from __future__ import annotations

from dataclasses import dataclass

from hermes_state import SessionDB

from ..params import param
from .base import RoleContext
from .gateway import open_store
from .workload import cjk_share, make_message, message_bytes, rate, tool_call_share

KIND = "worktree"
SUMMARY = "a sub-agent with child sessions, token usage and lineage titles"


@dataclass(frozen=True, kw_only=True)
class Params:
    """A sub-agent: a parent session and child sessions (parent_session_id) one after another,
    each with messages, token-usage updates and a lineage title (`title`, `title #2`, ...)."""

    children: int = param(3, "Child sessions per instance.", minimum=1, maximum=1000)
    messages_per_child: int = param(10, "Messages appended to each child.", minimum=1,
                                    maximum=10_000)
    appends_per_s: float = rate(10, "Appends per second; 0 = as fast as possible.")
    message_bytes: int = message_bytes(200)
    cjk_share: float = cjk_share()
    tool_call_share: float = tool_call_share(0.3)
    usage_every: int = param(3, "Acknowledged messages between token-usage updates; 0 = none.",
                             minimum=0)
    title: str = param("worktree", "Base title of the lineage (the process name is appended).",
                       pattern="\\S", maxLength=60)


def run(ctx: RoleContext) -> None:
    """``run(ctx)`` as :mod:`chaos.roles` defines it; the workload keys are in this module's
    docstring."""
    w: Params = ctx.params
    children, per_child = w.children, w.messages_per_child
    rate, usage_every = w.appends_per_s, w.usage_every
    base = f"{w.title} {ctx.cfg.process}"
    db = open_store(ctx)
    if db is None:
        return
    parent = f"{ctx.cfg.process}-parent"
    ok, _ = ctx.op("create_session", lambda: db.create_session(parent, source="worktree"),
                   session_id=parent)
    if ok:
        for c in range(children):
            if ctx.should_stop():
                break
            _child(ctx, db, w, parent, f"{ctx.cfg.process}-child{c}", base, per_child, rate,
                   usage_every)
        ctx.op("end_session", lambda: db.end_session(parent, "worktree_done"), session_id=parent)
    ctx.op("close", db.close, definite=(Exception,))


def _child(ctx: RoleContext, db: SessionDB, w: Params, parent: str, sid: str, base: str,
           per_child: int, rate: float, usage_every: int) -> None:
    ok, _ = ctx.op("create_session", lambda: db.create_session(
        sid, source="worktree", parent_session_id=parent), session_id=sid,
        parent_session_id=parent)
    if not ok:
        return
    ok, title = ctx.op("next_title", lambda: db.get_next_title_in_lineage(base), session_id=sid)
    if ok:
        ctx.op("set_title", lambda: db.set_session_title(sid, title), session_id=sid, title=title)
    acked = 0
    for j in range(per_child):
        if ctx.should_stop():
            break
        pid = ctx.next_payload_id()
        msg = make_message(ctx.rng, pid, ("user", "assistant", "tool")[j % 3], w)
        ok, _ = ctx.op("append", lambda msg=msg: db.append_message(sid, **msg), payload_id=pid,
                       session_id=sid)
        if ok:
            acked += 1
            if usage_every and acked % usage_every == 0:
                inp, out = ctx.rng.randint(100, 8000), ctx.rng.randint(10, 1500)
                ctx.op("update_token_counts", lambda inp=inp, out=out: db.update_token_counts(
                    sid, input_tokens=inp, output_tokens=out, model="chaos-subagent",
                    task="subagent", api_call_count=1), session_id=sid, input_tokens=inp,
                    output_tokens=out)
        if rate > 0:
            ctx.sleep(1.0 / rate)
    ctx.op("end_session", lambda: db.end_session(sid, "subagent_done"), session_id=sid)
