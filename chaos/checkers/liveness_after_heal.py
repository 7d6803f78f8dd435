"""``liveness_after_heal``: once the faults are healed, every writer commits again (SPEC §16.3).

SPEC §16.3: "after the heal phase (every process resumed, disk freed), every writer commits again
within a deadline." Runs have phases warm-up, chaos, heal, recover: ``phase`` records in the
history (the runner writes them).

Let H be the time of the first ``phase: heal`` record. The *writers* are the role processes alive
at H (spawned before H, no exit record before H) that are store clients (not of kind
``lock_holder``/``long_reader``/``maintenance``) and either belong to ``roles`` (param) or, by
default, had an ``ok`` write op (``WRITE_OPS``) before H. For each writer:

* live: an ``ok`` write op completed in ``[H, H + deadline]``;
* FAIL: no such commit although the process was still running at ``H + deadline`` or attempted a
  write in the window (a ``fail``/``info``/unfinished write). The evidence gives its writes after
  H and, from the sampler, the write-lock owner, the holders and the stopped processes at
  ``H + deadline``;
* not tested: it exited before ``H + deadline`` without attempting a write after H (a role that
  reached its own end). Counted, not judged.

Params: ``deadline`` (seconds or a duration string, default 3 s; multiplied by the run's
measured load factor unless ``scale_with_load: false``, :func:`chaos.history.history_load_factor`), ``roles`` (writer
roles).
INCONCLUSIVE when there is no heal phase in the history, or no writer was tested.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..history import (
    TOOLKIT_PROCESSES,
    Samples,
    brief,
    exit_records,
    fmt_t,
    moment,
    pair_ops,
    phase_time,
    proc_name,
    role_of,
    run_start,
    spawn_records,
)
from ..params import Duration, param
from ..roles import NOT_WRITER_KINDS
from .base import (
    CheckContext,
    Verdict,
    load_factor_for,
    params_of,
    problems_as_cases,
    role_kinds,
    scale_with_load_param,
    verdict_from,
)


@dataclass(frozen=True, kw_only=True)
class Params:
    """After the heal phase begins, every writer still alive commits again within `deadline`."""

    deadline: Duration = param("3s", "Time after the heal starts to commit again.")
    roles: list[str] | None = param(None, "Writer roles that must commit (default: every role "
                                    "that wrote during the run and was alive at the heal).",
                                    uniqueItems=True)
    scale_with_load: bool = scale_with_load_param()


NAME = "liveness_after_heal"
#: Its FAIL may be the machine's load (a wall-clock bound): the gate reruns such a row once.
TIMING_BOUND = True


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    factor = load_factor_for(ctx.history, p.scale_with_load)
    deadline = p.deadline * factor
    only = set(p.roles or ())
    hist = ctx.history
    H = phase_time(hist, "heal")
    if H is None:
        return verdict_from(NAME, {}, {"heal_t": None}, summary="",
                            inconclusive="no heal phase in the history: nothing to judge")
    until = H + deadline
    kinds = role_kinds(ctx.scenario)
    exits = exit_records(hist)
    spawns = spawn_records(hist)
    ops = [o for o in pair_ops(hist) if o.is_write()]
    first_seen: dict[str, float] = {}
    for r in hist:
        name = proc_name(r)
        if name and name not in TOOLKIT_PROCESSES:
            first_seen.setdefault(name, float(r.get("t", 0.0)))
    for name, rec in spawns.items():
        first_seen[name] = min(first_seen.get(name, float(rec["t"])), float(rec["t"]))

    candidates = []
    for name, t in sorted(first_seen.items()):
        role = role_of(name)
        if t > H or (name in exits and float(exits[name]["t"]) <= H):
            continue
        if kinds.get(role) in NOT_WRITER_KINDS:
            continue
        if only:
            if role in only:
                candidates.append(name)
        elif any(o.process == name and o.kind == "ok" and (o.t_done or 0.0) < H for o in ops):
            candidates.append(name)

    samples = Samples(hist)
    at_deadline = moment(samples.at_or_before(until))
    live, not_tested, dead = {}, [], []
    evidence: list = []
    for name in candidates:
        mine = [o for o in ops if o.process == name
                and (o.t_invoke >= H or (o.t_done is not None and o.t_done >= H))]
        commit = next((o for o in sorted(mine, key=lambda o: o.t_done or 1e18)
                       if o.kind == "ok" and o.t_done is not None and H <= o.t_done <= until),
                      None)
        if commit is not None:
            live[name] = round(commit.t_done - H, 3)
            continue
        attempted = [o for o in mine if o.t_invoke <= until]
        exited = exits.get(name)
        if not attempted and exited is not None and float(exited["t"]) < until:
            not_tested.append(name)
            continue
        dead.append(name)
        evidence.append({"violation": "no commit after heal", "process": name,
                         "writes_after_heal": [brief(o.record()) for o in attempted[:3]],
                         "exit": brief(exited) if exited else None,
                         "at_deadline": at_deadline})
    fig = {"heal_t": round(H, 6), "deadline_s": round(deadline, 3),
           "nominal_deadline_s": p.deadline, "load_factor": factor, "writers": candidates,
           "first_commit_after_heal_s": live, "not_tested": not_tested, "no_commit": dead}
    fail = (f"{len(dead)} writer(s) did not commit within {deadline:g} s of the heal "
            f"(t={fmt_t(H, run_start(ctx.history))}): {', '.join(dead)}; at the deadline write "
            f"lock: {at_deadline.get('write_lock_owner') or 'nobody'}"
            + (f", stopped: {', '.join(at_deadline['stopped'])}"
               if at_deadline.get("stopped") else ""))
    untested = (None if live else
                f"no writer was tested after the heal at t={fmt_t(H, run_start(ctx.history))} "
                f"({len(candidates)} writer(s) alive, {len(not_tested)} exited without writing)")
    worst = max(live.items(), key=lambda kv: kv[1]) if live else ("", 0.0)
    summary = ("" if not live else
               f"{len(live)} writer(s) committed again after the heal, slowest {worst[0]} after "
               f"{worst[1]:.3f} s (deadline {deadline:g} s)"
               + (f"; {len(not_tested)} not tested" if not_tested else ""))
    return verdict_from(NAME, problems_as_cases("no_commit", dead), fig, summary=summary,
                        fail_summary=fail, inconclusive=untested,
                        evidence=evidence if dead else (), cases_as_evidence=False)
