"""The ``gateway`` role: long-lived, many sessions, appends at a rate, splits, spools refusals.

Workload (SPEC §16.1; declared with their defaults in :class:`Params`):

* ``appends_per_s`` (0 = as fast as possible), ``burst_size``/``burst_every`` (every
  ``burst_every`` s the next ``burst_size`` appends go back to back), ``sessions`` (concurrent
  sessions), ``message_bytes``, ``cjk_share`` (share of CJK messages), ``tool_call_share``;
* ``split_every``: messages per session before a compression split ends it
  (``end_reason='compression'``) and starts a child with ``parent_session_id``; the parent stays
  "busy" (its compression turn in progress) for ``turn_s`` seconds after the split;
* ``titles``: give each session a title by hand and move it down the lineage at every split (the
  child takes its compression ancestor's title, SPEC §7); ``token_usage``: a token-usage update
  after every acknowledged assistant message; ``search_every``: a search every N s (0 = never);
  ``read_every``: every N s read every message of every session (op ``read_history``: a
  dashboard paging through the whole store; with another writer beside it, whose commits
  invalidate this handle's page cache, it reads every page of the messages b-tree from disk);
* ``max_appends``: after this many acknowledged appends the instance goes quiet with its store
  open (0 = never): an idle gateway;
* ``replay_spool_at_start``: once open, import the spool (``replay_spool``, SPEC §10.1): the
  "gateway restart" step;
* ``reopen_on_refusal``: after a refused write (a retired or replaced generation), open the store
  again (op ``open`` with ``reopen: true``, at most once a second) while keeping the refused
  handle, as an app opening another window would: beside its own retired generation that open
  must be refused too (SPEC §10.4); a handle that does open takes over the writes;
* ``resume_sessions``: sessions named ``<role>-s<i>`` instead of ``<process>-s<i>``, so a
  restarted instance appends to the sessions its predecessor wrote (new rows of the same
  session: after a lost WAL they reuse the lost rows' ids).

A session whose creation was refused is created again before its next message. Refused writes
(stale or replaced generation, write contention after the retry budget, a session whose creation
was refused) are diverted to the spool (``divert_to_spool``, SPEC §10.1) and
recorded as ``fail`` with ``spooled: true``. If the store cannot be opened it retries every 0.5 s.
It claims ownership of the store and runs queued maintenance requests (a prune handed over by
``sessions prune``, SPEC §11) once a second, never touching a session with a turn in progress
(its live sessions and the parents of a split younger than ``turn_s``); the ``maintenance`` op
records which ended sessions it protected (``busy_ended``).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass

from hermes_state import (
    SessionDB,
    StateDbCorruptError,
    StateDbReplacedError,
    WriteContentionError,
    claim_gateway_ownership,
    replay_spool,
    run_pending_requests,
)

from ..params import Duration, param
from .base import RoleContext
from .workload import Pacer, cjk_share, make_message, message_bytes, rate, search_query
from .workload import tool_call_share

KIND = "gateway"
SUMMARY = "long-lived, many sessions, appends at a rate"


@dataclass(frozen=True, kw_only=True)
class Params:
    """Long-lived sessions receiving user/assistant/tool messages."""

    appends_per_s: float = rate(20, "Appends per second per instance; 0 = as fast as possible.")
    sessions: int = param(3, "Concurrent sessions per instance.", minimum=1, maximum=100)
    message_bytes: int = message_bytes(200)
    cjk_share: float = cjk_share()
    tool_call_share: float = tool_call_share(0.2)
    burst_size: int = param(0, "Appends sent back to back (ignoring the rate) at every burst; "
                            "0 = no bursts.", minimum=0)
    burst_every: Duration = param(0, "Period between bursts (0 = no bursts).")
    split_every: int = param(0, "Messages before a compression split ends the session and starts "
                             "a child (parent_session_id); 0 = never.", minimum=0)
    turn_s: Duration = param(1, "How long a split parent stays busy (its turn in progress: a "
                             "handed-over prune skips it).")
    titles: bool = param(False, "Title each session by hand; a split's child takes its "
                         "compression ancestor's title (lineage, SPEC §7).")
    token_usage: bool = param(False, "A token-usage update after every acknowledged assistant "
                              "message.")
    search_every: Duration = param(0, "Period between searches (0 = never).")
    read_every: Duration = param(0, "Period between passes reading every message of every "
                                 "session (0 = never).")
    replay_spool_at_start: bool = param(False, "Once open, import the spool (`replay-spool`, "
                                        "SPEC §10.1): a gateway restart.")
    max_appends: int = param(0, "Appends after which this instance goes quiet, its store still "
                             "open (an idle gateway); 0 = no limit.", minimum=0)
    reopen_on_refusal: bool = param(False, "After a refused write, open the store again (at most "
                                    "once a second) keeping the refused handle: beside its own "
                                    "retired generation the open must be refused (SPEC §10.4).")
    resume_sessions: bool = param(False, "Name the sessions after the role, not the process: a "
                                  "restarted instance continues its predecessor's sessions (a "
                                  "gateway back on the same chats; instances at once share them).")

#: Refusals whose message is diverted to the spool instead of being dropped (SPEC §10.1).
SPOOLED_ERRORS = (StateDbReplacedError, WriteContentionError, StateDbCorruptError,
                  sqlite3.IntegrityError)


def open_store(ctx: RoleContext) -> SessionDB | None:
    """Open the store, retrying every 0.5 s until it opens or the role must stop."""
    while not ctx.should_stop():
        ok, value = ctx.op("open", ctx.open_db, definite=(Exception,))
        if ok:
            return value
        ctx.sleep(0.5)
    return None


def read_history(db: SessionDB) -> int:
    """Every message of every session (``get_messages`` per session); returns the row count."""
    ids = [r["id"] for r in db.list_sessions_rich(limit=100_000, include_children=True,
                                                    include_archived=True)]
    return sum(len(db.get_messages(sid)) for sid in ids)


def replay(ctx: RoleContext, db: SessionDB) -> None:
    """Import the spool once (op ``replay_spool``; its ``result`` has the counts)."""
    ctx.op("replay_spool", lambda: replay_spool(db), command="replay-spool")


def run(ctx: RoleContext) -> None:
    """``run(ctx)`` as :mod:`chaos.roles` defines it; the workload keys are in this module's
    docstring."""
    w: Params = ctx.params
    n_sessions = w.sessions
    split_every = w.split_every
    turn_s = w.turn_s
    titles = w.titles
    usage = w.token_usage
    search_every = w.search_every
    db = open_store(ctx)
    if db is None:
        return
    if w.replay_spool_at_start:
        replay(ctx, db)
    proc = ctx.cfg.process
    owner = ctx.cfg.role if w.resume_sessions else proc
    sessions = [f"{owner}-s{i}" for i in range(n_sessions)]
    counts = {s: 0 for s in sessions}
    busy_until: dict[str, float] = {}  # split parents whose compression turn is in progress
    parents: dict[str, str] = {}  # child -> parent of a split
    splits = 0
    created: set[str] = set()
    kept: list[SessionDB] = []  # refused handles kept open beside a reopened one
    next_reopen = 0.0
    for slot, sid in enumerate(sessions):
        _create(ctx, db, sid, created)
        if titles and sid in created:
            ctx.op("set_title", lambda sid=sid, slot=slot: db.set_session_title(
                sid, f"{proc} chat {slot}"), session_id=sid)
    # The gateway owns the store: `sessions prune` hands its deletions to us (SPEC §11).
    ctx.op("claim_owner", lambda: claim_gateway_ownership(db))
    next_poll = time.monotonic() + 1.0
    next_search = time.monotonic() + search_every if search_every > 0 else None
    next_read = time.monotonic() + w.read_every if w.read_every > 0 else None
    pacer = Pacer(time.monotonic(), w.appends_per_s, w.burst_size, w.burst_every)
    roles = ("user", "assistant", "tool")
    k = 0
    appended = 0
    while not ctx.should_stop():
        if w.max_appends and appended >= w.max_appends:
            ctx.sleep(0.05)  # quiet, store open (its sync thread and locks as a live gateway's)
            continue
        now = time.monotonic()
        if now >= next_poll:
            next_poll = now + 1.0
            _poll_requests(ctx, db, sessions, busy_until)
        if next_search is not None and now >= next_search:
            next_search = now + search_every
            q = search_query(ctx.rng, w.cjk_share)
            ctx.op("search", lambda q=q: len(db.search_messages(q, limit=10)), query=q)
        if next_read is not None and now >= next_read:
            next_read = now + w.read_every
            ctx.op("read_history", lambda: read_history(db))
        slot = ctx.rng.randrange(n_sessions)
        sid = sessions[slot]
        role = roles[k % 3]
        k += 1
        if sid not in created:  # its creation was refused: try again before the next turn
            _create(ctx, db, sid, created, parent_session_id=parents.get(sid))
        pid = ctx.next_payload_id()
        msg = make_message(ctx.rng, pid, role, w)

        def spool(exc: BaseException, sid=sid, msg=msg) -> dict:
            if isinstance(exc, SPOOLED_ERRORS):
                db.divert_to_spool(sid, [msg])
                return {"spooled": True}
            return {}

        ok, res = ctx.op("append", lambda sid=sid, msg=msg: db.append_message(sid, **msg),
                         on_fail=spool, payload_id=pid, session_id=sid)
        if (not ok and w.reopen_on_refusal and isinstance(res, StateDbReplacedError)
                and time.monotonic() >= next_reopen):
            next_reopen = time.monotonic() + 1.0
            opened, new = ctx.op("open", ctx.open_db, definite=(Exception,), reopen=True)
            if opened:
                kept.append(db)  # the refused handle stays open (it holds the retired WAL)
                db = new
        if ok:
            appended += 1
            counts[sid] += 1
            if usage and role == "assistant":
                inp, out = ctx.rng.randint(50, 4000), ctx.rng.randint(10, 800)
                ctx.op("update_token_counts", lambda sid=sid, inp=inp, out=out:
                       db.update_token_counts(sid, input_tokens=inp, output_tokens=out,
                                              model="chaos-model", api_call_count=1),
                       session_id=sid, input_tokens=inp, output_tokens=out)
            if split_every and counts[sid] >= split_every:
                splits += 1
                child = f"{proc}-s{slot}-c{splits}"
                parents[child] = sid
                _split(ctx, db, sid, child, titles, created)
                busy_until[sid] = time.monotonic() + turn_s
                sessions[slot] = child
                counts[child] = 0
        delay = pacer.delay(time.monotonic())
        if delay > 0:
            ctx.sleep(delay)
    for handle in (*kept, db):
        ctx.op("close", handle.close, definite=(Exception,))


def _create(ctx: RoleContext, db: SessionDB, sid: str, created: set[str],
            parent_session_id: str | None = None) -> None:
    """Create session ``sid`` (op ``create_session``); on success add it to ``created``."""
    ok, _ = ctx.op("create_session", lambda: db.create_session(
        sid, source="gateway", parent_session_id=parent_session_id), session_id=sid,
        **({"parent_session_id": parent_session_id} if parent_session_id else {}))
    if ok:
        created.add(sid)


def _split(ctx: RoleContext, db: SessionDB, parent: str, child: str, titles: bool,
           created: set[str]) -> None:
    """A compression split: end ``parent``, start ``child`` under it, move the title (SPEC §7)."""
    ctx.op("end_session", lambda: db.end_session(parent, "compression"), session_id=parent)
    _create(ctx, db, child, created, parent_session_id=parent)
    if titles and child in created:
        title = db.get_session_title(parent)
        if title:
            ctx.op("set_title", lambda: db.set_session_title(child, title), session_id=child,
                   title=title, lineage_from=parent)


def _poll_requests(ctx: RoleContext, db: SessionDB, sessions: list[str],
                   busy_until: dict[str, float]) -> None:
    """Run queued maintenance requests, protecting every session with a turn in progress."""
    now = time.monotonic()
    for sid in [s for s, t in busy_until.items() if t <= now]:
        del busy_until[sid]
    busy = frozenset(sessions) | frozenset(busy_until)
    busy_ended = sorted(busy_until)

    def run_requests():
        done = run_pending_requests(db, busy_sessions=busy)
        return {"requests": done, "pruned": sum(int(d.get("pruned") or 0) for d in done)}

    ctx.op("maintenance", run_requests, busy_ended=busy_ended)
