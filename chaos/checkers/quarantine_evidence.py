"""``quarantine_evidence``: a quarantined store is kept whole, and never over an earlier one
(SPEC §12: a damaged ``state.db`` is moved aside *with its sidecars*, the three files being one
image, SPEC §1; a quarantine copy is evidence and is never replaced).

Each ``quarantine`` event (``db``, ``backup``) is judged with the sampler's view of the store's
paths just before it (:mod:`chaos.sampler`) and the files at the end of the run; the earlier
copies a ``plant_quarantine_copies`` fault planted (names and sha256 in its ``done`` record) are
judged with the files at the end.

Four case functions:

* :func:`sidecars_left_cases`: a ``-wal``/``-shm`` (non-empty) sat beside the damaged file in the
  last sample before the quarantine, and no ``<backup>-wal``/``<backup>-shm`` exists at the end:
  the WAL's committed frames were left behind (SQLite deletes a WAL beside an empty new store);
* :func:`overwritten_cases`: two quarantines named the same backup, or a backup is gone at the
  end (an earlier copy was replaced);
* :func:`planted_cases`: a planted copy is gone or its bytes changed at the end (a quarantine
  replaced it);
* :func:`beside_planted_cases`: a backup (from an event, or any ``state.db.corrupt.*.bak`` at
  the end that was not planted: a quarantine that failed half-way emits no event) sits beside a
  planted ``-wal``/``-shm``: two images mixed under one name.

INCONCLUSIVE when nothing was quarantined, or when copies were planted and no quarantine took a
name of a planted second (the copies were never in its way).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from ..history import Samples, brief, of_type
from ..params import param
from .base import CheckContext, Verdict, params_of, verdict_from

NAME = "quarantine_evidence"
PLANT_FAULT = "plant_quarantine_copies"
_STAMP = re.compile(r"\.corrupt\.(\d{8}T\d{6}Z)(?:-\d+)?\.bak$")


@dataclass(frozen=True, kw_only=True)
class Params:
    """A damaged store is moved aside with its -wal and -shm, each quarantine to a name of its
    own that survives the run, never over or beside an earlier copy (SPEC §12)."""

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


def planted(history: list[dict]) -> tuple[dict[str, str], list[tuple[str, str]], set[str]]:
    """``({name: sha256}, [(first_stamp, last_stamp)], {names found taken})`` of every
    ``plant_quarantine_copies`` ``done`` record (names relative to the store's directory)."""
    names, windows, taken = {}, [], set()
    for r in of_type(history, "nemesis", fault=PLANT_FAULT, phase="done"):
        names.update(r.get("planted") or {})
        windows.append((str(r.get("first_stamp")), str(r.get("last_stamp"))))
        taken.update(r.get("skipped") or ())
    return names, windows, taken - set(names)


def stamp_of(backup: str) -> str | None:
    """The ``<UTCSTAMP>`` of a ``state.db.corrupt.<UTCSTAMP>[-N].bak`` name, else None."""
    m = _STAMP.search(backup)
    return m.group(1) if m else None


def sha256_of(path: Path) -> str | None:
    """sha256 of the regular file at ``path``, None when it is absent or not a regular file
    (never read through a link, never blocking on a FIFO)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:  # absent, or a link (ELOOP)
        return None
    with os.fdopen(fd, "rb") as fh:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        return hashlib.file_digest(fh, "sha256").hexdigest()


def planted_cases(copies: dict[str, str], digest) -> list[dict]:
    """Planted copies gone or changed at the end; ``digest(name) -> sha256 | None``."""
    out = []
    for name, sha in sorted(copies.items()):
        now = digest(name)
        if now == sha:
            continue
        what = "is gone" if now is None else "was replaced (its bytes changed)"
        out.append({"violation": "planted_copy_gone" if now is None else "planted_copy_replaced",
                    "copy": name, "sha256": sha, "now": now,
                    "why": f"the earlier quarantine copy {name} {what} at the end of the run"})
    return out


def beside_planted_cases(backups: list[str], copies: dict[str, str]) -> list[dict]:
    """Backups of the store (names relative to its directory) beside a planted sidecar."""
    out = []
    for b in sorted(set(backups) - set(copies)):
        for side in ("-wal", "-shm"):
            if f"{b}{side}" in copies:
                out.append({"violation": "backup_beside_earlier_sidecar", "backup": b,
                            "sidecar": f"{b}{side}",
                            "why": f"the quarantine took {b} beside an earlier copy's {b}{side}: "
                                   "two images under one name"})
    return out


def _met(events: list[dict], windows: list[tuple[str, str]]) -> int:
    """Quarantines whose backup has the stamp of a planted second."""
    stamps = [stamp_of(os.path.basename(ev["backup"])) for ev in events]
    return sum(1 for s in stamps if s and any(a <= s <= b for a, b in windows))


def check(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    events = quarantines(ctx.history)
    samples = Samples(ctx.history)
    before = {i: sidecars_before(samples, float(ev.get("t", 0.0))) for i, ev in enumerate(events)}
    copies, windows, taken = planted(ctx.history)
    where = Path(ctx.home)  # the live store's directory (ctx.store_path is a final copy)
    backups = {os.path.basename(ev["backup"]) for ev in events}
    # any copy the run left (a quarantine failing half-way emits no event), but the files that
    # were there before the plant
    backups.update(f.name for f in where.glob("state.db.corrupt.*.bak") if f.name not in taken)
    changed = planted_cases(copies, lambda n: sha256_of(where / n))
    cases = {"sidecar_left_behind": sidecars_left_cases(events, before),
             "quarantine_overwritten": overwritten_cases(events),
             "planted_copy_changed": changed,
             "backup_beside_earlier_sidecar": beside_planted_cases(sorted(backups), copies)}
    met = _met(events, windows)
    fig = {"quarantines": len(events), "with_sidecars": sum(1 for v in before.values() if v),
           "planted": len(copies), "met_planted": met}
    summary = (f"{len(events)} quarantine(s), {fig['with_sidecars']} with sidecars beside the "
               "damaged file")
    if copies:
        summary += (f"; {len(copies) - len(changed)} of {len(copies)} planted earlier copies "
                    f"kept, {met} quarantine(s) met them")
    why = None if len(events) >= p.min_quarantines else (
        f"only {len(events)} quarantine(s) (min_quarantines {p.min_quarantines})")
    if why is None and windows and not met:
        why = ("no quarantine took a name of a second with planted copies (they were never in "
               "its way)")
    return verdict_from(NAME, cases, fig, summary=summary, inconclusive=why)
