"""``write_exclusion``: write transactions never overlap, in any process: each one holds the
store's write lock from its BEGIN (SPEC §4: ``BEGIN IMMEDIATE`` for every write transaction, so
lock conflicts surface at BEGIN, not inside the transaction or at COMMIT).

A ``write`` event's ``[t_begin, t_precommit]`` (CLOCK_MONOTONIC, one clock for every process on
Linux) runs from right after ``BEGIN`` returned to right before ``COMMIT`` is issued: both clock
reads are taken inside the transaction (``t_commit``, read after ``COMMIT`` returned, is not: a
writer descheduled there would seem to overlap its successor). Under ``BEGIN IMMEDIATE`` the
connection holds SQLite's one WAL write lock over that whole interval, so two intervals of the
store never intersect. A deferred ``BEGIN`` takes no lock: its interval starts
before the lock is won (the first write statement then waits in the busy handler, or fails with
``SQLITE_BUSY`` inside the transaction), and it overlaps the transaction that held the lock.

One case function:

* :func:`overlap_cases`: two write intervals that intersect.

Figures: writes judged, processes, ``contended``: writes that started while another process had
a write operation in flight (what the lock had to serialise). INCONCLUSIVE below ``min_contended``
(the run never had two writers compete: nothing was tested).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..history import brief
from ..params import param
from .base import CheckContext, Verdict, params_of, verdict_from
from ..history import events_of
from .checkpoint_isolation import Interval

NAME = "write_exclusion"


@dataclass(frozen=True, kw_only=True)
class Params:
    """No two write transactions overlapped: each held the write lock from its BEGIN IMMEDIATE
    (SPEC §4)."""

    min_contended: int = param(1, "Write transactions that must have met another process's "
                               "write in flight (fewer: INCONCLUSIVE).", minimum=0)
    slack_s: float = param(0.0, "Tolerance (s) on the intervals' ends.", minimum=0)


def locked_intervals(history: list[dict]) -> list[Interval]:
    """``[t_begin, t_precommit]`` of every ``write`` event that carries both."""
    return [Interval(r.get("process") or "?", float(r["t_begin"]), float(r["t_precommit"]), r)
            for r in events_of(history, "write")
            if r.get("t_begin") is not None and r.get("t_precommit") is not None]


def overlap_cases(writes: list[Interval], slack_s: float = 0.0) -> list[dict]:
    """Every pair of write intervals that intersect by more than ``slack_s``."""
    out = []
    ordered = sorted(writes, key=lambda w: w.start)
    latest: Interval | None = None  # the interval ending last among those started so far
    for w in ordered:
        if latest is not None and w.start < latest.end - slack_s:
            out.append({
                "violation": "overlap", "first": brief(latest.record), "second": brief(w.record),
                "overlap_s": round(min(w.end, latest.end) - w.start, 6),
                "why": f"{w.process} began a write transaction at {w.start:.4f} while "
                       f"{latest.process}'s [{latest.start:.4f}, {latest.end:.4f}] held the write "
                       "lock: a transaction that started without the lock (not BEGIN IMMEDIATE)"})
        if latest is None or w.end > latest.end:
            latest = w
    return out


def contended(writes: list[Interval]) -> int:
    """Write transactions whose process was not the last to commit before them (a hand-over
    between processes: the lock changed owner)."""
    ordered = sorted(writes, key=lambda w: w.start)
    return sum(1 for a, b in zip(ordered, ordered[1:]) if a.process != b.process)


def check(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    writes = locked_intervals(ctx.history)
    cases = {"overlap": overlap_cases(writes, p.slack_s)}
    handovers = contended(writes)
    fig = {"writes": len(writes), "processes": len({w.process for w in writes}),
           "handovers": handovers}
    summary = (f"{len(writes)} write transactions of {fig['processes']} process(es), "
               f"{handovers} lock hand-overs, {len(cases['overlap'])} overlap(s)")
    why = (None if handovers >= p.min_contended else
           f"only {handovers} hand-over(s) of the write lock between processes "
           f"(min_contended {p.min_contended})")
    return verdict_from(NAME, cases, fig, summary=summary, inconclusive=why)
