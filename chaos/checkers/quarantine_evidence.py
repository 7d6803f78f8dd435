"""``quarantine_evidence``: a quarantined store is kept whole, and never over an earlier one
(SPEC §12: a damaged ``state.db`` is moved aside *with its sidecars*, the three files being one
image, SPEC §1; a quarantine copy is evidence and is never replaced).

Each ``quarantine`` event (``db``, ``backup``) is judged with the sampler's view of the store's
paths just before it (:mod:`chaos.sampler`) and the files at the end of the run.

Two case functions:

* :func:`sidecars_left_cases`: a ``-wal``/``-shm`` (non-empty) sat beside the damaged file in the
  last sample before the quarantine, and no ``<backup>-wal``/``<backup>-shm`` exists at the end:
  the WAL's committed frames were left behind (SQLite deletes a WAL beside an empty new store);
* :func:`overwritten_cases`: two quarantines named the same backup, or a backup is gone at the
  end (an earlier copy was replaced).

INCONCLUSIVE when nothing was quarantined.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..history import Samples, brief
from ..params import param
from .base import CheckContext, Verdict, params_of, verdict_from

NAME = "quarantine_evidence"


@dataclass(frozen=True, kw_only=True)
class Params:
    """A damaged store is moved aside with its -wal and -shm, each quarantine to a name of its
    own that survives the run (SPEC §12)."""

    min_quarantines: int = param(1, "Quarantines that must have happened (fewer: "
                                 "INCONCLUSIVE).", minimum=1)


def quarantines(history: list[dict]) -> list[dict]:
    """The ``quarantine`` events, by time."""
    return sorted((r for r in history if r.get("type") == "event"
                   and r.get("event") == "quarantine" and r.get("backup")),
                  key=lambda r: float(r.get("t", 0.0)))


def sidecars_before(samples: Samples, t: float) -> list[str]:
    """The non-empty sidecars (``"wal"``, ``"shm"``) at the store's path in the last sample
    taken before ``t``."""
    s = samples.at_or_before(t)
    path = (s or {}).get("path") or {}
    return [k for k in ("wal", "shm") if ((path.get(k) or {}).get("bytes") or 0) > 0]


def sidecars_left_cases(events: list[dict], before: dict[int, list[str]],
                        exists=os.path.lexists) -> list[dict]:
    """Quarantines whose backup lacks a sidecar the damaged file had."""
    out = []
    for i, ev in enumerate(events):
        for side in before.get(i, []):
            kept = f"{ev['backup']}-{side}"
            if not exists(kept):
                out.append({"violation": "sidecar_left_behind", "sidecar": side, "event": brief(ev),
                            "why": f"state.db-{side} sat beside the damaged file but was not "
                                   f"moved with it ({kept} does not exist)"})
    return out


def overwritten_cases(events: list[dict], exists=os.path.lexists) -> list[dict]:
    """Backups named twice, or gone at the end."""
    out, seen = [], {}
    for ev in events:
        b = ev["backup"]
        if b in seen:
            out.append({"violation": "quarantine_overwritten", "backup": b, "event": brief(ev),
                        "why": f"two quarantines moved a damaged store to {b}: the earlier copy "
                               "was replaced"})
        seen[b] = ev
    for b, ev in seen.items():
        if not exists(b):
            out.append({"violation": "quarantine_gone", "backup": b, "event": brief(ev),
                        "why": f"the quarantine copy {b} is gone at the end of the run"})
    return out


def check(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    events = quarantines(ctx.history)
    samples = Samples(ctx.history)
    before = {i: sidecars_before(samples, float(ev.get("t", 0.0))) for i, ev in enumerate(events)}
    cases = {"sidecar_left_behind": sidecars_left_cases(events, before),
             "quarantine_overwritten": overwritten_cases(events)}
    fig = {"quarantines": len(events), "with_sidecars": sum(1 for v in before.values() if v)}
    summary = (f"{len(events)} quarantine(s), {fig['with_sidecars']} with sidecars beside the "
               "damaged file")
    why = None if len(events) >= p.min_quarantines else (
        f"only {len(events)} quarantine(s) (min_quarantines {p.min_quarantines})")
    return verdict_from(NAME, cases, fig, summary=summary, inconclusive=why)
