"""Isolation of the store's transactions, judged from the ``write`` and ``checkpoint`` events of
every process on CLOCK_MONOTONIC (one clock for the whole machine on Linux): two checkers.

``checkpoint_isolation`` -- no checkpoint overlapped a write transaction that could restart the
WAL, in any process (issue 12; SPEC §4, the WAL-reset race of SQLite before 3.51.3; issue 24
item 3). A write transaction can restart the WAL only when its snapshot began with the whole
log backfilled (wal.c ``walRestartLog``, read slot 0). Each ``write`` event carries ``wal``:
``[mxFrame, nBackfill]`` of the wal-index header read right after its ``BEGIN IMMEDIATE``
(SQLite's write lock held). A write whose ``wal`` shows ``nBackfill < mxFrame`` (or an empty
log) could not restart it and may run beside a checkpoint; every other write (``wal``
missing, or ``nBackfill == mxFrame > 0``) may not.

From the store events of every role process, on CLOCK_MONOTONIC (one clock for the whole
machine on Linux, so intervals of different processes compare):

* a write transaction is a ``write`` event's ``[t_begin, t_commit]``: from right after
  ``BEGIN IMMEDIATE`` (and the checkpoint lock's shared hold) to ``COMMIT`` returned;
* a checkpoint is a ``checkpoint`` event's ``[t_start, t_end]``: from right after the lock's
  exclusive hold (before the ``checkpoint.locked`` failpoint, which can hold it open) to the
  return of ``PRAGMA wal_checkpoint``. Skipped checkpoints (lock busy) have no interval.

One case function per rule:

* :func:`checkpoint_overlap_cases`: a write interval and a checkpoint interval intersect (two connections of
  one process exclude each other through the lock too, so the same process counts).

Figures: writes and checkpoints judged, by the ``lock`` each event reports (``shared`` /
``exclusive``, or ``off`` / ``not needed``: taken without the lock); ``contended``: checkpoints
during which a write operation of another process was in flight (what the lock had to hold
back); the sampled holders of the lock (the sampler's ``checkpoint_lock`` field).
INCONCLUSIVE when no checkpoint was contended: the run never put a checkpoint beside a writer.

``write_exclusion`` -- write transactions never overlap, in any process: each one holds the
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

* :func:`write_overlap_cases`: two write intervals that intersect.

Figures: writes judged, processes, ``contended``: writes that started while another process had
a write operation in flight (what the lock had to serialise). INCONCLUSIVE below ``min_contended``
(the run never had two writers compete: nothing was tested).
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace

from ..history import WRITE_OPS, Samples, brief, events_of, pair_ops
from ..params import param
from .base import CheckContext, Verdict, params_of, verdict_from

CHECKPOINT_NAME = "checkpoint_isolation"


@dataclass(frozen=True, kw_only=True)
class CheckpointParams:
    """No checkpoint overlapped a write transaction of the store that could restart the WAL, in
    any process (issue 12; issue 24 item 3)."""

    min_contended: int = param(1, "Checkpoints that must have had a write of another process in "
                               "flight (fewer: INCONCLUSIVE, nothing was tested).", minimum=0)


@dataclass(frozen=True)
class Interval:
    """One write transaction or checkpoint of one process, with the event that reported it."""

    process: str
    start: float
    end: float
    record: dict


def write_intervals(history: list[dict]) -> list[Interval]:
    """Committed write transactions (``write`` events carrying ``t_begin``/``t_commit``)."""
    return [Interval(r.get("process") or "?", float(r["t_begin"]), float(r["t_commit"]), r)
            for r in events_of(history, "write")
            if r.get("t_begin") is not None and r.get("t_commit") is not None]


def checkpoint_intervals(history: list[dict]) -> list[Interval]:
    """Checkpoints that ran (``checkpoint`` events carrying ``t_start``/``t_end``)."""
    return [Interval(r.get("process") or "?", float(r["t_start"]), float(r["t_end"]), r)
            for r in events_of(history, "checkpoint")
            if r.get("t_start") is not None and r.get("t_end") is not None]


# ------------------------------------------------------------------------------ cases
def may_restart(write: dict) -> bool:
    """Whether a ``write`` event's transaction could restart the WAL (True when unknown)."""
    wal = write.get("wal")
    if not isinstance(wal, (list, tuple)) or len(wal) < 2:
        return True
    mx, backfill = wal[0], wal[1]
    return not (isinstance(mx, int) and isinstance(backfill, int)) or (mx > 0 and backfill >= mx)


def checkpoint_overlap_cases(writes: list[Interval], ckpts: list[Interval],
                             allowed: list | None = None) -> list[dict]:
    """Every (checkpoint, write transaction that could restart the WAL) pair whose open
    intervals intersect; pairs with a write that could not are appended to ``allowed``."""
    writes = sorted(writes, key=lambda w: w.start)
    starts = [w.start for w in writes]
    out = []
    for c in sorted(ckpts, key=lambda c: c.start):
        for w in writes[:bisect.bisect_left(starts, c.end)]:
            if w.end > c.start:
                if not may_restart(w.record):
                    if allowed is not None:
                        allowed.append((c, w))
                    continue
                out.append({
                    "violation": "overlap", "checkpoint": brief(c.record), "write": brief(w.record),
                    "overlap_s": round(min(w.end, c.end) - max(w.start, c.start), 6),
                    "why": f"{w.process} committed a write transaction "
                           f"[{w.start:.4f}, {w.end:.4f}] while {c.process} checkpointed "
                           f"[{c.start:.4f}, {c.end:.4f}] (lock: {c.record.get('lock')}/"
                           f"{w.record.get('lock')})"})
    return out


def contended(history: list[dict], ckpts: list[Interval]) -> list[Interval]:
    """Checkpoints during which a write op of another process was in flight (invoked, not yet
    completed): the writers the lock had to hold back."""
    ops = [(o.process, o.t_invoke, o.t_done) for o in pair_ops(history)
           if o.op in WRITE_OPS and o.t_done is not None]
    return [c for c in ckpts if any(p != c.process and t0 < c.end and t1 > c.start
                                    for p, t0, t1 in ops)]


# ------------------------------------------------------------------------------ verdict
def check_checkpoints(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`CheckpointParams`."""
    p = params_of(CheckpointParams, params)
    writes, ckpts = write_intervals(ctx.history), checkpoint_intervals(ctx.history)
    beside: list = []
    cases = {"overlap": checkpoint_overlap_cases(writes, ckpts, beside)}
    held = contended(ctx.history, ckpts)
    fig = {"writes": len(writes), "checkpoints": len(ckpts), "contended": len(held),
           "writes_that_may_restart": sum(1 for w in writes if may_restart(w.record)),
           "overlaps_of_writes_that_cannot_restart": len(beside),
           "write_locks": dict(Counter(str(w.record.get("lock")) for w in writes)),
           "checkpoint_locks": dict(Counter(str(c.record.get("lock")) for c in ckpts)),
           "skipped_checkpoints": sum(1 for r in events_of(ctx.history, "checkpoint")
                                      if r.get("skipped")),
           "longest_checkpoint_s": round(max((c.end - c.start for c in ckpts), default=0.0), 4),
           **sampled_holders(ctx.history)}
    summary = (f"{len(writes)} write transactions, {len(ckpts)} checkpoints "
               f"({len(held)} with a write of another process in flight), "
               f"{len(cases['overlap'])} overlap(s)")
    why = (None if len(held) >= p.min_contended else
           f"only {len(held)} checkpoint(s) had a write of another process in flight "
           f"(min_contended {p.min_contended})")
    return verdict_from(CHECKPOINT_NAME, cases, fig, summary=summary, inconclusive=why)


def sampled_holders(history: list[dict]) -> dict:
    """What the sampler saw of the lock: samples with an exclusive / shared holder, and who held
    it exclusively (``{process or pid: samples}``, frozen ones marked)."""
    ex = sh = 0
    who: Counter = Counter()
    for s in Samples(history).records:
        holders = s.get("checkpoint_lock") or []
        if any(h.get("mode") == "exclusive" for h in holders):
            ex += 1
        if any(h.get("mode") == "shared" for h in holders):
            sh += 1
        for h in holders:
            if h.get("mode") == "exclusive":
                name = h.get("process") or f"PID {h.get('pid')}"
                who[name + (" (stopped)" if h.get("status") == "stopped" else "")] += 1
    return {"samples_exclusive": ex, "samples_shared": sh, "exclusive_holders": dict(who)}


# ============================================================================== write_exclusion
WRITE_NAME = "write_exclusion"


@dataclass(frozen=True, kw_only=True)
class WriteParams:
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


def write_overlap_cases(writes: list[Interval], slack_s: float = 0.0) -> list[dict]:
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


def handovers(writes: list[Interval]) -> int:
    """Write transactions whose process was not the last to commit before them (a hand-over
    between processes: the lock changed owner)."""
    ordered = sorted(writes, key=lambda w: w.start)
    return sum(1 for a, b in zip(ordered, ordered[1:]) if a.process != b.process)


def check_writes(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`WriteParams`."""
    p = params_of(WriteParams, params)
    writes = locked_intervals(ctx.history)
    cases = {"overlap": write_overlap_cases(writes, p.slack_s)}
    handed = handovers(writes)
    fig = {"writes": len(writes), "processes": len({w.process for w in writes}),
           "handovers": handed}
    summary = (f"{len(writes)} write transactions of {fig['processes']} process(es), "
               f"{handed} lock hand-overs, {len(cases['overlap'])} overlap(s)")
    why = (None if handed >= p.min_contended else
           f"only {handed} hand-over(s) of the write lock between processes "
           f"(min_contended {p.min_contended})")
    return verdict_from(WRITE_NAME, cases, fig, summary=summary, inconclusive=why)


CHECKPOINT_ISOLATION = SimpleNamespace(NAME=CHECKPOINT_NAME, Params=CheckpointParams,
                                       check=check_checkpoints)
WRITE_EXCLUSION = SimpleNamespace(NAME=WRITE_NAME, Params=WriteParams, check=check_writes)
