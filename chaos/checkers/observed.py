"""Verdicts about the run itself rather than the store (SPEC §16.3: "a chaos run that tested
nothing must not look green"): ``must_observe``, ``liveness`` (every process worked, every
step fired) and ``interrupted``.

Each is a function of the history (and the run directory's interruption mark), like every
checker; the runner and ``report --recheck`` append them to the scenario's own verdicts.
"""

from __future__ import annotations

from pathlib import Path

from .. import store
from ..history import brief, moment, observed_states
from .base import Verdict, stamp_evidence, verdict_from


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
    evidence = [{"observed": m, "first": first[m]} for m in wanted if m in first]
    verdict = verdict_from("must_observe", {}, {"missing": missing},
                           summary="" if missing else f"observed {', '.join(wanted)}",
                           inconclusive=f"never observed: {', '.join(missing)}" if missing else None,
                           evidence=evidence)
    return [stamp_evidence(verdict, records)]


def liveness(records: list[dict]) -> list[Verdict]:
    """The run did its work (issue 27): every role process the runner released performed at
    least one operation (an ``invoke`` of its own), so did every restart (all its operations
    come after its restart), and every declared nemesis step fired (a step that failed to apply
    or never became due before the heal tested nothing). INCONCLUSIVE naming the idle processes
    and the steps that did not fire, else PASS with the counts; ``[]`` for a history without a
    single spawned process (a run that never started its roles, e.g. SKIPPED before them).

    Evidence: the spawn and exit record of each idle process, the record of each step that did
    not fire.
    """
    spawned = [r for r in records if r.get("type") == "process" and r.get("phase") == "spawn"]
    if not spawned:
        return []
    ops: dict[str, int] = {}
    for r in records:
        if r.get("type") == "invoke":
            ops[r.get("process", "")] = ops.get(r.get("process", ""), 0) + 1
    exits = {r.get("child"): r for r in records
             if r.get("type") == "process" and r.get("phase") == "exit"}
    idle = [r for r in spawned if not ops.get(r.get("child"))]
    restarts = [r for r in spawned if r.get("generation")]
    not_fired = [r for r in records if r.get("type") == "nemesis"
                 and r.get("phase") in ("error", "never")]
    problems, evidence = [], []
    for r in idle:
        name = r.get("child")
        again = f" (restart #{r.get('generation')} of slot {r.get('index')})" \
            if r.get("generation") else ""
        ex = exits.get(name)
        how = "" if ex is None else f", exit {ex.get('exitcode')}"
        problems.append(f"{name}{again} performed no operation{how}")
        evidence += [{"idle": name, "spawn": brief(r)}] + ([{"idle": name, "exit": brief(ex)}]
                                                          if ex else [])
    for r in not_fired:
        what = (f"failed: {r.get('error')}" if r.get("phase") == "error"
                else "never fired (not due before the heal)")
        problems.append(f"step {r.get('step')} {r.get('fault')} {what}")
        evidence.append(brief(r))
    done = [r for r in records if r.get("type") == "nemesis" and r.get("phase") == "done"]
    figures = {"processes": len(spawned), "restarts": len(restarts),
               "idle_processes": [r.get("child") for r in idle],
               "least_ops": min((ops.get(r.get("child"), 0) for r in spawned), default=0),
               "steps_fired": len(done), "steps_not_fired": len(not_fired)}
    if problems:
        idle_text = "; ".join(problems[:6]) + (f"; ... ({len(problems)} in all)"
                                               if len(problems) > 6 else "")
        return [stamp_evidence(verdict_from("liveness", {}, figures, summary="",
                                            inconclusive=idle_text, evidence=evidence), records)]
    summary = (f"{len(spawned)} role process(es) ({len(restarts)} restart(s)) each performed "
               f">= 1 operation (least {figures['least_ops']}); {len(done)} nemesis step(s) "
               "fired")
    return [verdict_from("liveness", {}, figures, summary=summary)]


def run_verdicts(must: list[str], records: list[dict]) -> list[Verdict]:
    """The verdicts about the run itself that every run and every recheck appends to the
    scenario's own: ``must_observe`` (when the scenario lists observables) and ``liveness``."""
    return must_observe(must, records) + liveness(records)


def interrupted(run_dir: Path) -> list[Verdict]:
    """``[INCONCLUSIVE "interrupted" verdict]`` when ``run_dir`` carries the interruption mark
    (:func:`chaos.store.mark_interrupted`), else ``[]``: a recheck of a partial run must not
    look green."""
    mark = store.interrupted_mark(run_dir)
    if mark is None:
        return []
    return [verdict_from("interrupted", {}, dict(mark), summary="",
                         inconclusive=f"the run was interrupted at {mark.get('at', '?')} after "
                         f"{mark.get('elapsed_s', '?')} s: every verdict judges a partial "
                         "history")]
