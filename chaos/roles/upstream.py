"""The ``upstream`` role: a real upstream release's store code beside ours (issue 23 item 4).

The release is named on the role (``upstream: {version: "0.19.0"}``) and must be in the cache
(:mod:`hermes_state.testing.upstream_release`; ``python -m chaos upstream fetch VERSION`` puts
it there once; a run whose release is not cached is SKIPPED with that command). The role
process (ours: it records the history) drives the release's own ``SessionDB`` in a separate OS
process that imports nothing of this package, so every write goes through upstream's write
path, migrations and FTS triggers, on the scenario's store, at the same time as our roles.

Workload (declared in :class:`Params`): ``mode`` -- ``gateway`` (one long-lived store handle,
``sessions`` sessions, appends at ``appends_per_s``, a search every ``search_every`` s),
``cli`` (open, one session, a burst of ``burst`` messages, a title, end, close) or ``cron``
(``cli`` ``repeat`` times, ``every`` s apart, each with a fresh process: close/reopen churn);
``message_bytes``, ``cjk_share``, ``tool_call_share``; ``crash_pattern``/``crash_nth``: the
upstream process SIGKILLs itself when the N-th SQL statement matching the pattern is about to
run during its first open (a migration killed mid-way: upstream's open runs its steps
statement by statement), after which the role starts a fresh process and opens again.

Every appended message carries its payload id (content prefix and ``platform_message_id``), so
``no_lost_writes`` owes upstream's acknowledged writes too. An error raised by upstream is a
``fail`` (its write path rolled back); a process that died mid-call is ``info``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hermes_state.testing.upstream_release import (
    VERSION_PATTERN,
    CrashAt,
    UpstreamError,
    UpstreamProcess,
)

from ..params import Duration, param
from .base import RoleContext
from .workload import Pacer, cjk_share, make_message, message_bytes, rate, search_query
from .workload import tool_call_share

KIND = "upstream"
SUMMARY = "a real upstream release's SessionDB (upstream: {version}) in its own process"


@dataclass(frozen=True, kw_only=True)
class Release:
    """The upstream release an `upstream` role runs (fetched once into the cache)."""

    version: str = param(description="Upstream release number, e.g. 0.19.0 or 0.22.2 (`python "
                         "-m chaos upstream fetch VERSION` caches it once).",
                         pattern=VERSION_PATTERN)


@dataclass(frozen=True, kw_only=True)
class Params:
    """A gateway, CLI or cron workload through upstream's own SessionDB."""

    mode: Literal["gateway", "cli", "cron"] = param(
        "gateway", "gateway: long-lived, appends at a rate; cli: one burst then close; cron: "
        "the cli run `repeat` times, each with a fresh process (close/reopen churn).")
    appends_per_s: float = rate(20, "Appends per second (gateway; cli/cron bursts: 0 = as "
                                "fast as possible).")
    sessions: int = param(2, "Concurrent sessions (gateway).", minimum=1, maximum=100)
    burst: int = param(10, "Messages per cli/cron run.", minimum=0, maximum=10_000)
    repeat: int = param(1, "Runs of a cron instance.", minimum=1, maximum=10_000)
    every: Duration = param(1, "Pause between cron runs.")
    message_bytes: int = message_bytes(160)
    cjk_share: float = cjk_share()
    tool_call_share: float = tool_call_share(0.2)
    search_every: Duration = param(0, "Period between searches (gateway; 0 = never).")
    crash_pattern: str = param("", "Regex (empty: none): the upstream process SIGKILLs itself when the "
                               "crash_nth SQL statement matching it is about to run during its "
                               "first open (a migration killed mid-way), then a fresh process "
                               "opens again.", maxLength=200)
    crash_nth: int = param(1, "Which matching statement kills it (1 = the first).", minimum=1,
                           maximum=100_000)


def _stderr(ctx: RoleContext) -> Path:
    return Path(ctx.cfg.log_path).with_suffix(".upstream.log")


def _definite() -> tuple:
    return (UpstreamError,)


def open_upstream(ctx: RoleContext, crash: CrashAt | None = None) -> UpstreamProcess | None:
    """Start the release's process and open the store (op ``open``, with the store's
    ``schema_version`` and ``journal_mode`` after the open); retried every 0.5 s until it opens
    or the role must stop. A crash armed for the first open kills that process; the next try
    runs without it."""
    version = ctx.cfg.upstream["version"]
    while not ctx.should_stop():
        up = None

        def start() -> dict:
            nonlocal up
            up = UpstreamProcess(version, ctx.cfg.home, crash_at=crash, stderr=_stderr(ctx))
            return up.open(ctx.cfg.db_path)

        ok, res = ctx.op("open", start, definite=_definite(), release=version,
                         **({"crash_pattern": crash.pattern} if crash else {}))
        if ok:
            return up
        if up is not None:
            up.kill()
        crash = None
        ctx.sleep(0.5)
    return None


def _append(ctx: RoleContext, up: UpstreamProcess, sid: str, role: str, w: Params) -> bool:
    pid = ctx.next_payload_id()
    msg = make_message(ctx.rng, pid, role, w)
    ok, _ = ctx.op("append", lambda: up.call("append_message", sid, **msg),
                   definite=_definite(), payload_id=pid, session_id=sid)
    return ok


def _alive(up: UpstreamProcess) -> bool:
    return up.proc.poll() is None


def run(ctx: RoleContext) -> None:
    """``run(ctx)`` as :mod:`chaos.roles` defines it; the workload keys are in this module's
    docstring."""
    w: Params = ctx.params
    crash = CrashAt(w.crash_pattern, w.crash_nth) if w.crash_pattern else None
    if w.mode == "gateway":
        _gateway(ctx, w, crash)
        return
    for i in range(w.repeat if w.mode == "cron" else 1):
        if ctx.should_stop():
            break
        _burst(ctx, w, i, crash)
        crash = None
        if i + 1 < w.repeat:
            ctx.sleep(w.every)


def _gateway(ctx: RoleContext, w: Params, crash: CrashAt | None) -> None:
    up = open_upstream(ctx, crash)
    if up is None:
        return
    proc = ctx.cfg.process
    sessions = [f"{proc}-s{i}" for i in range(w.sessions)]
    for sid in sessions:
        ctx.op("create_session", lambda sid=sid: up.call("create_session", sid, "telegram"),
               definite=_definite(), session_id=sid)
    pacer = Pacer(time.monotonic(), w.appends_per_s)
    next_search = time.monotonic() + w.search_every if w.search_every > 0 else None
    roles = ("user", "assistant", "tool")
    k = 0
    while not ctx.should_stop():
        if not _alive(up):  # killed from outside (a nemesis): a new process takes over
            up = open_upstream(ctx)
            if up is None:
                return
        now = time.monotonic()
        if next_search is not None and now >= next_search:
            next_search = now + w.search_every
            q = search_query(ctx.rng, w.cjk_share)
            ctx.op("search", lambda q=q: len(up.call("search_messages", q, limit=10)),
                   definite=_definite(), query=q)
        sid = sessions[ctx.rng.randrange(len(sessions))]
        _append(ctx, up, sid, roles[k % 3], w)
        k += 1
        delay = pacer.delay(time.monotonic())
        if delay > 0:
            ctx.sleep(delay)
    ctx.op("close", up.close, definite=())


def _burst(ctx: RoleContext, w: Params, i: int, crash: CrashAt | None) -> None:
    up = open_upstream(ctx, crash)
    if up is None:
        return
    sid = f"{ctx.cfg.process}-s{i}"
    ok, _ = ctx.op("create_session", lambda: up.call("create_session", sid, "cli"),
                   definite=_definite(), session_id=sid)
    if ok:
        for j in range(w.burst):
            if ctx.should_stop() or not _alive(up):
                break
            _append(ctx, up, sid, "user" if j % 2 == 0 else "assistant", w)
            if w.appends_per_s > 0:
                ctx.sleep(1.0 / w.appends_per_s)
        title = f"upstream {ctx.cfg.process} run {i}"
        ctx.op("set_title", lambda: up.call("set_session_title", sid, title),
               definite=_definite(), session_id=sid, title=title)
        ctx.op("end_session", lambda: up.call("end_session", sid, "cli_exit"),
               definite=_definite(), session_id=sid)
    ctx.op("close", up.close, definite=())
