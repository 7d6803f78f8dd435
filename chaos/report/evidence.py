"""Where each checker's evidence happened, for the banner, the timeline marks and the verdict
list of ``report.html`` (issue 16: every evidence item carries its time in seconds since the run
start and is marked on the timeline).

An evidence item's time is its ``at_s`` (stamped by :func:`chaos.checkers.run_checkers`), else
the time of the history record it quotes (:func:`chaos.history.evidence_time`, for runs judged
before ``at_s`` existed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..history import evidence_process, evidence_time
from .timeline import Timeline

NOT_PASSING = ("FAIL", "INCONCLUSIVE")


@dataclass(frozen=True)
class Mark:
    """One evidence item placed on the timeline.

    Attributes:
        checker, status: its verdict; ``index``: its position in the verdict's evidence;
        number: the badge number (failing evidence is numbered 1.. in time order, passing 0);
        at_s: seconds since the run start; ``t``: the same on the history's clock;
        lane: the process lane it names, if any; ``text``: one line; ``first``: the earliest
        evidence of a checker that did not pass (the moment the run failed).
    """

    checker: str
    status: str
    index: int
    number: int
    at_s: float
    t: float
    lane: str | None
    text: str
    first: bool = False

    @property
    def anchor(self) -> str:
        return mark_anchor(self.checker, self.index)

    @property
    def item_anchor(self) -> str:
        return item_anchor(self.checker, self.index)


def mark_anchor(checker: str, index: int) -> str:
    """``id`` of an evidence mark on the timeline."""
    return f"mark-{checker}-{index}"


def item_anchor(checker: str, index: int) -> str:
    """``id`` of an evidence item in the verdict list."""
    return f"ev-{checker}-{index}"


def checker_anchor(checker: str) -> str:
    """``id`` of a checker's row in the verdict list."""
    return f"checker-{checker}"


def at_s_of(item, tl: Timeline) -> float | None:
    """Seconds since the run start of one evidence item, or None when it carries no time."""
    if isinstance(item, dict) and isinstance(item.get("at_s"), (int, float)):
        return float(item["at_s"])
    t = evidence_time(item)
    return None if t is None else tl.rel(t)


def marks(results: dict, tl: Timeline) -> list[Mark]:
    """Every timed evidence item of every verdict, the not-passing ones numbered in time order
    and the earliest of them flagged ``first``."""
    raw = []
    for v in results.get("verdicts") or []:
        status = str(v.get("status"))
        if status == "SKIPPED":
            continue
        for i, item in enumerate(v.get("evidence") or []):
            at = at_s_of(item, tl)
            if at is None:
                continue
            proc = evidence_process(item)
            raw.append((str(v.get("checker")), status, i, at,
                        tl.lane_of(proc) if isinstance(proc, (str, int)) else None,
                        json.dumps(item, default=str, ensure_ascii=False)[:300]))
    failing = sorted((r for r in raw if r[1] in NOT_PASSING), key=lambda r: (r[3], r[0], r[2]))
    number = {(r[0], r[2]): n for n, r in enumerate(failing, 1)}
    first = (failing[0][0], failing[0][2]) if failing else None
    return [Mark(c, s, i, number.get((c, i), 0), at, tl.t0 + at, lane, text,
                 first=(c, i) == first) for c, s, i, at, lane, text in raw]


def first_failure(ms: list[Mark]) -> Mark | None:
    """The earliest evidence of a checker that did not pass (None: nothing failed)."""
    return next((m for m in ms if m.first), None)
