"""``no_lockup``: no operation waits longer than a bound without progress (SPEC §16.3, §4).

SPEC §16.3: "no operation waited longer than a bound without progress; on a stall the report
names the holders and the write-lock owner at that moment."

For every operation of a store client: its wait is the time from ``invoke`` to its completion
(``ok`` or ``fail``: progress means the caller got an answer; store ``retry`` events are not
progress). An operation that never completed waits until its process exited (the synthesized
``info``) or the history ends. Time during which the operation's *own* process was frozen by the
nemesis (``stop`` … ``cont``, or the heal's SIGCONT) is not counted: a frozen process cannot
progress by definition; the processes waiting on it are what this checker judges.

A wait longer than ``bound`` is a stall: FAIL. The evidence names, from the sampler
(:mod:`chaos.sampler`) at the moment the wait crossed the bound, the processes holding the store
(with retired generations marked), the write-lock owner (``/proc/locks``), the waiters and the
stopped processes.

Excluded: the adversaries' bare transactions (``hold_lock``, ``hold_read``, ``long_read``, and
every op of a ``lock_holder``/``long_reader`` role) and ``ignore_ops``.

Params: ``bound`` (seconds or duration string, default 5 s; multiplied by the run's measured load
factor unless ``scale_with_load: false``, :func:`chaos.history.history_load_factor`: it is about the machine: a lock
owner waiting for a CPU stretches every wait behind it), ``ignore_ops`` (op names),
``after_retry_budget`` (the bound counts from the end of the longest retry budget a write spent in
this run, the ``waited_s`` of its ``write_gave_up`` events: for scenarios whose writes wait out
their whole budget by design, where that budget's wall time is the machine's, not the rule's).
INCONCLUSIVE when no operation was judged.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..history import (
    ADVERSARY_OPS,
    Samples,
    brief,
    end_time,
    exit_records,
    fmt_t,
    moment,
    pair_ops,
    phase_time,
    role_of,
    run_start,
)
from ..params import Duration, param
from ..roles import ADVERSARY_KINDS
from .base import (
    CheckContext,
    Verdict,
    load_factor_for,
    params_of,
    role_kinds,
    scale_with_load_param,
    verdict_from,
)


@dataclass(frozen=True, kw_only=True)
class Params:
    """No operation waits longer than `bound` without progress; a stall names the holders and
    the write-lock owner of that moment (from samples)."""

    bound: Duration = param("5s", "Longest wait without progress.")
    ignore_ops: list[str] = param([], "Ops that are long by design (besides hold_lock and the "
                                  "adversary roles').", uniqueItems=True)
    after_retry_budget: bool = param(False, "Count the bound from the longest retry budget a "
                                     "write gave up after in this run (write_gave_up waited_s).")
    scale_with_load: bool = scale_with_load_param()


NAME = "no_lockup"
#: Its FAIL may be the machine's load (a wall-clock bound): the gate reruns such a row once.
TIMING_BOUND = True


def frozen_intervals(history: list[dict]) -> dict[str, list[tuple[float, float]]]:
    """``{process: [(stopped at, resumed at), ...]}`` from nemesis ``stop``/``cont`` ``done``
    records (field ``processes``) and the ``heal`` phase (SIGCONT to every role)."""
    end_t = end_time(history)
    heal = phase_time(history, "heal")
    since: dict[str, float] = {}
    out: dict[str, list[tuple[float, float]]] = {}
    for r in history:
        if r.get("type") != "nemesis" or r.get("phase") != "done":
            continue
        t = float(r.get("t", 0.0))
        if heal is not None and t > heal:
            break
        for name in r.get("processes") or []:
            if r.get("fault") == "stop":
                since.setdefault(name, t)
            elif r.get("fault") == "cont" and name in since:
                out.setdefault(name, []).append((since.pop(name), t))
    for name, t in since.items():
        out.setdefault(name, []).append((t, heal if heal is not None else end_t))
    return out


def _overlap(a: float, b: float, spans: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(b, y) - max(a, x)) for x, y in spans)


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    factor = load_factor_for(ctx.history, p.scale_with_load)
    bound = p.bound * factor
    budget = None
    if p.after_retry_budget:
        budget = max((float(r.get("waited_s") or 0.0) for r in ctx.history
                      if r.get("type") == "event" and r.get("event") == "write_gave_up"),
                     default=0.0)
        bound += budget
    ignore = ADVERSARY_OPS | set(p.ignore_ops)
    hist = ctx.history
    kinds = role_kinds(ctx.scenario)
    end_t = end_time(hist)
    exits = exit_records(hist)
    frozen = frozen_intervals(hist)
    samples = Samples(hist)

    judged = 0
    longest = (0.0, None)
    frozen_total = 0.0
    stalls: list[dict] = []
    for op in pair_ops(hist):
        if op.op in ignore or kinds.get(role_of(op.process)) in ADVERSARY_KINDS:
            continue
        start = op.t_invoke
        completed = (op.done is not None and not op.synthesized
                     and op.kind in ("ok", "fail"))
        if op.done is not None:  # a synthesized info is stamped at the process's exit
            end = float(op.done["t"])
        else:
            ex = exits.get(op.process)
            end = float(ex["t"]) if ex else end_t
        lost_to_freeze = _overlap(start, end, frozen.get(op.process, []))
        frozen_total += lost_to_freeze
        wait = max(0.0, end - start - lost_to_freeze)
        judged += 1
        if wait > longest[0]:
            longest = (wait, op)
        if wait > bound:
            crossed = start + bound
            at = samples.at_or_after(crossed)
            if at is None or float(at["t"]) > end:
                at = samples.nearest(crossed)
            stalls.append({"violation": "stall", "process": op.process, "pid": op.pid,
                           "op": op.op, "op_id": op.op_id, "waited_s": round(wait, 3),
                           "completed": completed, "outcome": op.kind,
                           "invoked_t": round(start, 6), "bound_crossed_t": round(crossed, 6),
                           "at_that_moment": moment(at), "record": brief(op.record())})

    fig: dict = {"bound_s": round(bound, 3), "nominal_bound_s": p.bound,
                 "load_factor": factor, "retry_budget_s": budget, "ops_judged": judged, "stalls": len(stalls),
                 "longest_wait_s": round(longest[0], 4),
                 "longest_wait_op": None if longest[1] is None else
                 f"{longest[1].process} {longest[1].op} ({longest[1].op_id})",
                 "frozen_time_excluded_s": round(frozen_total, 3), "samples": len(samples)}
    if samples.unavailable:
        fig["samples_unavailable"] = samples.unavailable
    if stalls:
        stalls.sort(key=lambda s: -s["waited_s"])
        first = stalls[0]
        at = first["at_that_moment"]
        fig["stalled_processes"] = sorted({s["process"] for s in stalls})
        summary = (f"{len(stalls)} op(s) waited longer than {_bound_text(p.bound, factor, budget)}; longest "
                   f"{first['process']} {first['op']} {first['waited_s']:.2f} s "
                   f"(invoked t={fmt_t(first['invoked_t'], run_start(ctx.history))}); at that moment "
                   f"write lock: "
                   f"{at.get('write_lock_owner') or 'nobody'}; holders: "
                   f"{'; '.join(at.get('holders') or []) or 'none sampled'}"
                   + (f"; stopped: {', '.join(at['stopped'])}" if at.get("stopped") else ""))
        return verdict_from(NAME, {"stall": stalls}, fig, summary=summary, fail_summary=summary,
                            evidence=stalls, cases_as_evidence=False)
    summary = "" if judged == 0 else (
        f"{judged} ops, longest wait {longest[0]:.3f} s ({fig['longest_wait_op']}) <= bound "
        f"{_bound_text(p.bound, factor, budget)}")
    return verdict_from(NAME, {}, fig, summary=summary,
                        inconclusive="no store operation to judge" if judged == 0 else None)


def _bound_text(nominal: float, factor: float, budget: float | None) -> str:
    """``5 s``, ``5 s x load 2.1 = 10.5 s``, ``+ retry budget 16.2 s`` as it applies."""
    text = f"{nominal:g} s" if factor == 1.0 else \
        f"{nominal:g} s x load {factor:g} = {nominal * factor:.2f} s"
    return text + (f" + retry budget {budget:.2f} s" if budget else "")
