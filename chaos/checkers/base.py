"""What every checker shares: verdicts, the check context, the verdict builder (SPEC §16.3).

A checker is a pure function ``check(ctx: CheckContext, params: dict) -> Verdict`` of the run's
history and its final store: it starts no process and never modifies the store (it works on
copies, see :mod:`chaos.checkers.store`); it reads the history through :mod:`chaos.history`.
SPEC §16.3: each checker returns pass/fail with figures and the evidence (history excerpts);
INCONCLUSIVE when the run never reached the state the checker targets (a chaos run that tested
nothing must not look green), SKIPPED when a stated requirement is unmet.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

from ..history import evidence_time, phase_time, run_start
from ..params import build

PASS, FAIL, INCONCLUSIVE, SKIPPED = "PASS", "FAIL", "INCONCLUSIVE", "SKIPPED"
STATUSES = (PASS, FAIL, INCONCLUSIVE, SKIPPED)

#: A verdict carries at most this many evidence items (history records or small dicts).
MAX_EVIDENCE = 20

@dataclass
class Verdict:
    """One checker's result.

    Attributes:
        checker: the checker name (key of ``CHECKERS``).
        status: PASS, FAIL, INCONCLUSIVE or SKIPPED.
        summary: one line with the key figure.
        figures: numbers and short facts (JSON-serialisable).
        evidence: at most :data:`MAX_EVIDENCE` history records (or small dicts) proving it.
    """

    checker: str
    status: str
    summary: str
    figures: dict = field(default_factory=dict)
    evidence: list = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown verdict status {self.status!r}; use one of {STATUSES}")
        if len(self.evidence) > MAX_EVIDENCE:
            self.figures.setdefault("evidence_total", len(self.evidence))
            self.evidence = list(self.evidence[:MAX_EVIDENCE])

    def to_dict(self) -> dict:
        """A JSON-safe dict (non-JSON values become strings)."""
        return json.loads(json.dumps(asdict(self), default=str))


@dataclass
class CheckContext:
    """Everything a checker may read.

    Attributes:
        history: the merged history sorted by ``t``, already completed
            (:func:`chaos.history.complete`).
        store_path: the final ``state.db`` (maybe with ``state.db-wal`` beside it). Never modified:
            checkers copy it first.
        home: the run's HERMES_HOME (retired-WAL captures and ``sessions/<sid>.jsonl`` spools).
        run_dir: the run directory.
        scenario: the resolved scenario dict (``roles``, ``nemesis``, ``expect``).
    """

    history: list
    store_path: Path
    home: Path
    run_dir: Path
    scenario: dict


def exit_code_of(verdicts: Iterable) -> int:
    """0 when every verdict (a :class:`Verdict` or its dict) is PASS or SKIPPED, else 1 (SPEC
    §16.5 exit codes: INCONCLUSIVE is not green, SKIPPED is neutral)."""
    def status(v) -> str:
        return v.get("status") if isinstance(v, dict) else getattr(v, "status", "")
    return 0 if all(status(v) in (PASS, SKIPPED) for v in verdicts) else 1


def stamp_evidence(verdict: Verdict, history: list) -> Verdict:
    """Give every evidence item of ``verdict`` its time in seconds since the run start
    (``at_s``, issue 16: one time base for whoever reads it; the report marks it on the
    timeline). An item about a history record gets that record's time; one about the final store
    (integrity, the store's rows) gets the time the checks began (the ``recover`` phase) and
    ``about: "the final store"``. Items that are not dicts are wrapped as ``{"item": ...}``.
    Returns ``verdict`` (changed in place)."""
    start = run_start(history)
    checked = phase_time(history, "recover")
    out = []
    for item in verdict.evidence:
        item = dict(item) if isinstance(item, dict) else {"item": item}
        if not isinstance(item.get("at_s"), (int, float)):
            t = evidence_time(item)
            if t is None and checked is not None:
                t = checked
                item.setdefault("about", "the final store")
            if t is not None:
                item["at_s"] = round(t - start, 3)
        out.append(item)
    verdict.evidence = out
    return verdict


def role_kinds(scenario: dict | None) -> dict[str, str]:
    """``{role name: kind}`` from the scenario's ``roles`` list."""
    out = {}
    for role in (scenario or {}).get("roles") or []:
        if isinstance(role, dict) and role.get("name"):
            out[role["name"]] = role.get("kind", role["name"])
    return out


def params_of(cls: type, params):
    """A checker's typed parameters: ``params`` as given (an instance of ``cls``) or built from
    a dict with every default filled (:func:`chaos.params.build`)."""
    return params if isinstance(params, cls) else build(cls, dict(params or {}))


def verdict_from(name: str, cases: dict[str, list], figures: dict, *, summary: str,
                 inconclusive: str | None = None, evidence: Iterable = ()) -> Verdict:
    """The one verdict builder (Elle's ``check``): FAIL when a case function found a violating
    case, else INCONCLUSIVE when ``inconclusive`` says why nothing was tested, else PASS.

    Args:
        name: the checker.
        cases: ``{rule: [violating case dicts]}`` from the checker's ``*_cases`` functions.
        figures: the checker's figures; ``violations`` (per rule counts) is added.
        summary: one line with the key figures.
        inconclusive: the reason the run tested nothing, or None.
        evidence: extra evidence (appended after the cases).
    Returns:
        The :class:`Verdict`; a FAIL's summary starts with the first case of each violated
        rule (its ``why``, else the rule's name).
    """
    bad = {rule: found for rule, found in cases.items() if found}
    ev = [dict(c, violation=c.get("violation", rule)) for rule, found in bad.items()
          for c in found] + list(evidence)
    if bad:
        figures = {**figures, "violations": {rule: len(found) for rule, found in bad.items()}}
        whats = dict.fromkeys(found[0].get("why") or rule for rule, found in bad.items())
        return Verdict(name, FAIL, f"{'; '.join(whats)} ({sum(map(len, bad.values()))} "
                       "violation(s)); " + summary, figures, ev)
    if inconclusive:
        return Verdict(name, INCONCLUSIVE, f"{inconclusive}; {summary}", figures, ev)
    return Verdict(name, PASS, summary, figures, ev)
