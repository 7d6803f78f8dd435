"""Verdicts about the run itself rather than the store (SPEC §16.3: "a chaos run that tested
nothing must not look green"): ``must_observe``, ``faults_fired`` and ``interrupted``.

Each is a function of the history (and the run directory's interruption mark), like every
checker; the runner and ``report --recheck`` append them to the scenario's own verdicts.
"""

from __future__ import annotations

from pathlib import Path

from .. import store
from ..history import brief, moment, observed_states, of_type
from .base import INCONCLUSIVE, PASS, Verdict, stamp_evidence


def must_observe(wanted: list[str], records: list[dict]) -> list[Verdict]:
    """INCONCLUSIVE unless every ``must_observe`` fault fired, store event happened and sampled
    state was witnessed; ``[]`` when nothing is wanted. Evidence: the first record of each
    observation (sample records abridged)."""
    if not wanted:
        return []
    first: dict[str, dict] = {}
    for r in records:
        if r.get("type") == "nemesis" and r.get("phase") == "done":
            first.setdefault(r.get("fault"), brief(r))
        elif r.get("type") == "event":
            first.setdefault(r.get("event"), brief(r))
    for state, sample in observed_states(records).items():
        first.setdefault(state, {"state": state, **moment(sample)})
    missing = [m for m in wanted if m not in first]
    status = INCONCLUSIVE if missing else PASS
    summary = (f"never observed: {', '.join(missing)}" if missing
               else f"observed {', '.join(wanted)}")
    evidence = [{"observed": m, "first": first[m]} for m in wanted if m in first]
    return [stamp_evidence(Verdict("must_observe", status, summary, {"missing": missing},
                                   evidence), records)]


def faults_fired(records: list[dict]) -> list[Verdict]:
    """An INCONCLUSIVE ``faults_fired`` verdict when a nemesis step was due but failed to apply
    (a run whose declared fault did not happen tested less than it says), whether or not the
    scenario lists it in ``must_observe``; ``[]`` otherwise. A step that was never due (an
    ``after:`` count not reached before the heal) is judged by ``must_observe`` only."""
    bad = of_type(records, "nemesis", phase="error")
    if not bad:
        return []
    what = "; ".join(f"step {r.get('step')} {r.get('fault')} failed: {r.get('error')}"
                     for r in bad[:5])
    return [stamp_evidence(Verdict("faults_fired", INCONCLUSIVE, what, {"not_applied": len(bad)},
                                   [brief(r) for r in bad[:10]]), records)]


def interrupted(run_dir: Path) -> list[Verdict]:
    """``[INCONCLUSIVE "interrupted" verdict]`` when ``run_dir`` carries the interruption mark
    (:func:`chaos.store.mark_interrupted`), else ``[]``: a recheck of a partial run must not
    look green."""
    mark = store.interrupted_mark(run_dir)
    if mark is None:
        return []
    return [Verdict("interrupted", INCONCLUSIVE,
                    f"the run was interrupted at {mark.get('at', '?')} after "
                    f"{mark.get('elapsed_s', '?')} s: every verdict judges a partial history",
                    dict(mark))]
