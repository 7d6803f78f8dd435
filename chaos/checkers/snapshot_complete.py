"""``snapshot_complete``: a snapshot holds every write acknowledged before the backup started
(SPEC §13: the image is the store's consistent state, main file plus the WAL's committed frames;
a copy of ``state.db`` alone misses every commit still in the WAL).

A ``backup`` command (a ``maintenance`` role's ``run`` op or a nemesis ``run`` fault) that
succeeded prints ``snapshot PATH: verified=True``; the image at PATH is read (on a copy). Every
``append`` op whose ``ok`` record came before the command started was committed before the
backup's read transaction began, so its payload must be in that image.

One case function:

* :func:`missing_cases`: an append acknowledged before a backup started is absent from that
  backup's image.

Runs must not delete messages while they back up (no ``prune``/``restore`` in the scenario): a
message deleted between its acknowledgement and the backup would be reported. INCONCLUSIVE when
no verified snapshot was taken after at least ``min_appends`` acknowledged appends.
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from ..history import brief, pair_ops
from ..params import param
from .base import CheckContext, Verdict, params_of, verdict_from
from .maintenance_refusal import collect
from .store import payload_ids_in_db

NAME = "snapshot_complete"
_SNAPSHOT_RE = re.compile(r"^snapshot (/\S+): verified=True\s*$", re.MULTILINE)


@dataclass(frozen=True, kw_only=True)
class Params:
    """Every append acknowledged before a backup started is in that snapshot (SPEC §13)."""

    min_appends: int = param(20, "Acknowledged appends that must precede some verified snapshot "
                             "(fewer: INCONCLUSIVE).", minimum=1)


@dataclass
class Backup:
    """One successful backup: when it started, the image it wrote, the payloads in it."""

    t0: float
    image: str
    record: dict
    payloads: Counter | None = None   # None: the image could not be read
    error: str = ""


def backups(history: list[dict]) -> list[Backup]:
    """The run's successful backups (role and nemesis), each with the image path it printed."""
    out = []
    for cmd in collect(history, None):
        found = _SNAPSHOT_RE.findall(cmd.output) if cmd.exit_code == 0 else []
        if found:
            out.append(Backup(cmd.t0, found[-1], cmd.record))
    return out


def acked_appends(history: list[dict]) -> list[tuple[float, str, dict]]:
    """``(t_ok, payload_id, ok record)`` of every acknowledged append, by time."""
    return sorted((float(o.t_done), str(o.payload_id), o.done) for o in pair_ops(history)
                  if o.op == "append" and o.kind == "ok" and o.payload_id is not None
                  and not o.synthesized)


def missing_cases(taken: list[Backup], acked: list[tuple[float, str, dict]]) -> list[dict]:
    """Appends acknowledged before a backup started and absent from its image."""
    out = []
    for b in taken:
        if b.payloads is None:
            out.append({"violation": "snapshot_unreadable", "image": b.image, "error": b.error,
                        "command": brief(b.record),
                        "why": f"the verified snapshot {b.image} cannot be read: {b.error}"})
            continue
        missing = [(t, pid, rec) for t, pid, rec in acked if t < b.t0 and pid not in b.payloads]
        for t, pid, rec in missing[:5]:
            out.append({"violation": "missing_from_snapshot", "payload_id": pid,
                        "image": b.image, "ack": brief(rec), "command": brief(b.record),
                        "why": f"{len(missing)} append(s) acknowledged before the backup "
                               f"started are not in its snapshot {b.image} (first {pid})"})
    return out


def _read(b: Backup) -> None:
    try:
        b.payloads = payload_ids_in_db(Path(b.image))
    except (OSError, sqlite3.Error) as exc:
        b.error = f"{type(exc).__name__}: {exc}"


def check(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    taken = backups(ctx.history)
    for b in taken:
        _read(b)
    acked = acked_appends(ctx.history)
    before = [sum(1 for t, _, _ in acked if t < b.t0) for b in taken]
    cases = {"missing_from_snapshot": missing_cases(taken, acked)}
    fig = {"backups": len(taken), "acked_appends": len(acked),
           "most_acked_before_a_backup": max(before, default=0)}
    summary = (f"{len(taken)} verified snapshot(s); up to {fig['most_acked_before_a_backup']} "
               "acknowledged append(s) before one started")
    why = (None if fig["most_acked_before_a_backup"] >= p.min_appends else
           f"no verified snapshot followed {p.min_appends} acknowledged appends")
    return verdict_from(NAME, cases, fig, summary=summary, inconclusive=why)
