"""``prune_respects_turns``: a prune handed to the gateway never deletes a session whose turn is
still in progress (SPEC §11: the gateway executes the request "skipping sessions with a turn in
progress"; SPEC §5: never a live session).

The gateway role records, on each ``maintenance`` op that ran queued requests, the ended sessions
it protected at that moment (``busy_ended``: split parents whose compression turn is running)
and how many sessions the requests pruned (``result.pruned``). Its live sessions are protected
too, and they are never candidates (only ended sessions are pruned).

One case function:

* :func:`deleted_busy_cases`: a session protected by a maintenance op that pruned is absent from
  the final store, and no later pruning op of the same gateway left it unprotected (so only the
  prune that should have skipped it can have deleted it).

INCONCLUSIVE when no op pruned while protecting a session (nothing was tested).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass

from ..history import brief
from ..params import param
from .base import CheckContext, Verdict, params_of, verdict_from
from .store import connect_copy, copied_store

NAME = "prune_respects_turns"


@dataclass(frozen=True, kw_only=True)
class Params:
    """A prune handed to the gateway never deleted a session with a turn in progress (SPEC §11)."""

    min_protected: int = param(1, "Busy sessions that must have been protected by a prune that "
                               "deleted something (fewer: INCONCLUSIVE).", minimum=0)


def pruning_ops(history: list[dict]) -> list[dict]:
    """The gateway's completed ``maintenance`` ops whose requests pruned at least one session."""
    out = []
    for r in history:
        if r.get("type") != "ok" or r.get("op") != "maintenance":
            continue
        result = r.get("result") if isinstance(r.get("result"), dict) else {}
        if int(result.get("pruned") or 0) > 0:
            out.append(r)
    return sorted(out, key=lambda r: r.get("t", 0))


def deleted_busy_cases(ops: list[dict], sessions: set[str]) -> list[dict]:
    """Sessions protected by a pruning op, gone at the end, never unprotected by a later one."""
    out = []
    for i, op in enumerate(ops):
        later = [o for o in ops[i + 1:] if o.get("process") == op.get("process")]
        for sid in op.get("busy_ended") or []:
            if sid in sessions:
                continue
            if any(sid not in (o.get("busy_ended") or []) for o in later):
                continue  # a later prune may have taken it once its turn ended
            out.append({"violation": "busy_session_pruned", "session": sid, "op": brief(op),
                        "why": f"{sid} had a turn in progress when {op.get('process')}'s "
                               f"handed-over prune deleted {op['result'].get('pruned')} "
                               "session(s), and it is gone from the final store"})
    return out


def final_sessions(ctx: CheckContext) -> set[str]:
    """Ids in the final store's ``sessions`` table (read on a copy)."""
    with copied_store(ctx.store_path) as copy:
        conn = connect_copy(copy)
        try:
            return {r[0] for r in conn.execute("SELECT id FROM sessions")}
        except sqlite3.Error:
            return set()
        finally:
            conn.close()


def check(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    ops = pruning_ops(ctx.history)
    protected = sum(len(op.get("busy_ended") or []) for op in ops)
    cases = {"busy_session_pruned": deleted_busy_cases(ops, final_sessions(ctx))}
    fig = {"pruning_ops": len(ops), "protected": protected,
           "pruned": sum(int(op["result"].get("pruned") or 0) for op in ops)}
    summary = (f"{len(ops)} handed-over prune(s) deleted {fig['pruned']} session(s) while "
               f"protecting {protected} busy one(s); "
               f"{len(cases['busy_session_pruned'])} busy session(s) deleted")
    why = (None if protected >= p.min_protected else
           f"only {protected} busy session(s) protected by a prune that deleted something "
           f"(min_protected {p.min_protected})")
    return verdict_from(NAME, cases, fig, summary=summary, inconclusive=why)
