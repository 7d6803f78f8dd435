"""When nemesis steps fire (SPEC §16.2): ``at:`` a time offset or ``after:`` an event count.

The runner feeds :class:`Counts` from the role history files as they grow and asks
:meth:`Schedule.due` every tick which steps to fire now. Triggers (validated by
``chaos/scenario/``):

* ``{role, ok|fail|info: N, op}`` — the role's N-th operation ``op`` (default ``append``) with
  that outcome, all its instances (restarted ones too) together;
* ``{event: KIND, count: N, role?}`` — the N-th store event of that kind (``checkpoint``,
  ``refusal``, ``retry``, ``failpoint``, ...), of the role's processes if ``role`` is given;
* ``{step: I}`` — nemesis step I is done (its fault applied without error).

Each may carry ``delay`` (seconds): the step fires that long after the trigger was reached.
Times are seconds since the start of the run.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from .scenario import AFTER_OUTCOMES, NemesisStep


@dataclass
class Counts:
    """What has happened so far, as seen in the history.

    Attributes:
        ops: ``(outcome, role, op) -> n`` for outcome in ok/fail/info.
        events: ``(kind, role) -> n`` and ``(kind, None) -> n`` (every process).
        steps_done: indices of the nemesis steps applied without error.
    """

    ops: Counter = field(default_factory=Counter)
    events: Counter = field(default_factory=Counter)
    steps_done: set = field(default_factory=set)

    def add_record(self, rec: dict, role: str) -> None:
        """Count one role history record (``role``: the role of its process)."""
        typ = rec.get("type")
        if typ in AFTER_OUTCOMES:
            self.ops[(typ, role, rec.get("op", ""))] += 1
        elif typ == "event":
            kind = rec.get("event")
            self.events[(kind, role)] += 1
            self.events[(kind, None)] += 1


def reached(after: dict, counts: Counts) -> bool:
    """True once the trigger ``after`` (a resolved ``NemesisStep.after``) is met by ``counts``."""
    for outcome in AFTER_OUTCOMES:
        if outcome in after:
            return counts.ops[(outcome, after["role"], after.get("op", "append"))] >= after[outcome]
    if "event" in after:
        return counts.events[(after["event"], after.get("role"))] >= after.get("count", 1)
    if "step" in after:
        return after["step"] in counts.steps_done
    raise ValueError(f"after trigger without a known key: {after!r}")


class Schedule:
    """The steps not fired yet and the times their ``after`` triggers were reached."""

    def __init__(self, steps: list[NemesisStep]) -> None:
        self.pending: list[NemesisStep] = list(steps)
        self.triggered_at: dict[int, float] = {}

    def due(self, now: float, counts: Counts) -> list[NemesisStep]:
        """Remove and return the steps to fire at ``now`` (seconds since the run started), in
        schedule order."""
        out = []
        for step in list(self.pending):
            if step.at is not None:
                fire_at = step.at
            else:
                if step.index not in self.triggered_at:
                    if not reached(step.after, counts):
                        continue
                    self.triggered_at[step.index] = now
                fire_at = self.triggered_at[step.index] + float(step.after.get("delay") or 0.0)
            if now >= fire_at:
                self.pending.remove(step)
                out.append(step)
        return out
