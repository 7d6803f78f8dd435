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

from ..history import (
    MAX_LOAD_FACTOR,
    evidence_time,
    history_load_factor,
    phase_time,
    run_start,
)
from ..params import build, param

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


#: Exit codes of a run (SPEC §16.5): every checker passed; a checker failed or was
#: INCONCLUSIVE; every checker was SKIPPED (nothing was tested: distinct from a pass). 2 (invalid
#: scenario) and 3 (the toolkit failed) are the command line's.
EXIT_PASS, EXIT_FAILED, EXIT_SKIPPED = 0, 1, 4
#: The verdicts about the run itself (:mod:`chaos.checkers.observed`), not about the store: they
#: alone never make a run PASS.
RUN_VERDICTS = frozenset({"must_observe", "liveness", "interrupted", "sweep"})


def _status(v) -> str:
    return str(v.get("status") if isinstance(v, dict) else getattr(v, "status", ""))


def _checker(v) -> str:
    return str(v.get("checker") if isinstance(v, dict) else getattr(v, "checker", ""))


def run_status(verdicts: Iterable) -> str:
    """The run's one verdict from its verdicts (:class:`Verdict` objects or their dicts): FAIL
    if any failed, else INCONCLUSIVE if any was, else SKIPPED when no checker of the store was
    judged (every one SKIPPED, or none at all: a run that tested nothing never passes), else
    PASS (SPEC §16.3, §16.5; issue 27)."""
    verdicts = list(verdicts)
    statuses = {_status(v) for v in verdicts}
    if FAIL in statuses or statuses - set(STATUSES):
        return FAIL
    if INCONCLUSIVE in statuses:
        return INCONCLUSIVE
    judged = [v for v in verdicts if _checker(v) not in RUN_VERDICTS and _status(v) != SKIPPED]
    return PASS if judged else SKIPPED


def exit_code_of(verdicts: Iterable) -> int:
    """The run's exit code (SPEC §16.5): :data:`EXIT_PASS` (0) when :func:`run_status` is PASS,
    :data:`EXIT_FAILED` (1) for FAIL or INCONCLUSIVE, :data:`EXIT_SKIPPED` (4) when every
    checker was SKIPPED (nothing was tested)."""
    return {PASS: EXIT_PASS, SKIPPED: EXIT_SKIPPED}.get(run_status(verdicts), EXIT_FAILED)


def outcome_fields(verdicts: Iterable) -> dict:
    """The top-level fields ``results.json`` carries about its verdicts: ``verdict``
    (:func:`run_status`), ``exit_code`` (:func:`exit_code_of`) and, for a SKIPPED run,
    ``skipped`` (the distinct reasons of its skipped checkers, joined)."""
    verdicts = list(verdicts)
    status = run_status(verdicts)
    out = {"verdict": status, "exit_code": exit_code_of(verdicts)}
    if status == SKIPPED:
        def summary(v) -> str:
            return str(v.get("summary") if isinstance(v, dict) else getattr(v, "summary", ""))
        reasons = dict.fromkeys(summary(v) for v in verdicts if _status(v) == SKIPPED)
        out["skipped"] = "; ".join(r for r in reasons if r) or "no checker was judged"
    return out


def worst_exit_code(codes: Iterable[int]) -> int:
    """One exit code for several runs: the toolkit failing (3) before an invalid scenario (2)
    before a failed run (1) before a skipped one (4) before a pass (0)."""
    rank = {3: 5, 2: 4, 1: 3, EXIT_SKIPPED: 2, 0: 1}
    return max(codes, key=lambda c: rank.get(c, 6), default=EXIT_PASS)


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


#: The ``scale_with_load`` parameter of the checkers whose bounds are about the machine
#: (``no_lockup``, ``latency``, ``liveness_after_heal``; issue 27 item 5).
SCALE_WITH_LOAD_DOC = ("Multiply the time bound by the run's measured load factor (wall time per "
                       f"CPU second of a calibration spin, 1 to {MAX_LOAD_FACTOR:g}): "
                       "the bound is about the machine, not the store.")


def scale_with_load_param():
    """The declaration of a checker's ``scale_with_load`` parameter (default true)."""
    return param(True, SCALE_WITH_LOAD_DOC)


def load_factor_for(history: list, scale: bool) -> float:
    """The factor a machine-time bound is multiplied by: the run's load factor
    (:func:`chaos.history.history_load_factor`), or 1 when ``scale`` is false."""
    return history_load_factor(history) if scale else 1.0


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
                 inconclusive: str | None = None, evidence: Iterable = (),
                 skipped: str | None = None, fail_summary: str | None = None,
                 cases_as_evidence: bool = True) -> Verdict:
    """The one verdict builder every checker uses (Elle's ``check``): SKIPPED when ``skipped``
    says which requirement is unmet, else FAIL when a case function found a violating case, else
    INCONCLUSIVE when ``inconclusive`` says why nothing was tested, else PASS.

    Args:
        name: the checker.
        cases: ``{rule: [violating case dicts]}`` from the checker's ``*_cases`` functions (a
            case's ``why`` is its one line).
        figures: the checker's figures; ``violations`` (per rule counts) is added on a FAIL
            unless the checker reports its own.
        summary: one line with the key figures.
        inconclusive: the reason the run tested nothing, or None.
        evidence: extra evidence (appended after the cases).
        skipped: the unmet requirement (and what to install or do), or None.
        fail_summary: the FAIL's one line when the checker words it itself; by default the
            first case of each violated rule, the count, then ``summary``.
        cases_as_evidence: put the cases first in the evidence (False when ``evidence``
            already holds them in the checker's own form).
    Returns:
        The :class:`Verdict`.
    """
    if skipped:
        return Verdict(name, SKIPPED, skipped, figures, list(evidence))
    bad = {rule: found for rule, found in cases.items() if found}
    ev = ([dict(c, violation=c.get("violation", rule)) for rule, found in bad.items()
           for c in found] if cases_as_evidence else []) + list(evidence)
    if bad:
        if "violations" not in figures:  # a checker may report its own per-violation figures
            figures = {**figures, "violations": {rule: len(found) for rule, found in bad.items()}}
        if fail_summary is None:
            whats = dict.fromkeys(found[0].get("why") or rule for rule, found in bad.items())
            fail_summary = (f"{'; '.join(whats)} ({sum(map(len, bad.values()))} violation(s)); "
                            + summary)
        return Verdict(name, FAIL, fail_summary, figures, ev)
    if inconclusive:
        return Verdict(name, INCONCLUSIVE, f"{inconclusive}; {summary}" if summary
                       else inconclusive, figures, ev)
    return Verdict(name, PASS, summary, figures, ev)


def problems_as_cases(rule: str, problems: list[str]) -> dict[str, list[dict]]:
    """``{rule: [{"why": problem}, ...]}``: a checker's list of problem lines as builder cases."""
    return {rule: [{"why": text} for text in problems]}
