"""What one scenario run says about a mutant, and when a kill is believed (issue 27 item 7).

A run of a mutant that fails is a *candidate* kill. It is believed only when (docs/decisions/
0026-audit-package.md):

* the run reached the mutated code (:mod:`chaos.audit.reach`): a failure in a run that never
  executed the mutant is the machine's or the scenario's, never a detection;
* the same scenario passes on the unmutated copy (the control; a control that fails is run once
  more before the scenario is set aside);
* every confirmation run of the mutant fails too: at least one when the gate would rerun the
  failure (INCONCLUSIVE, a wall-clock bound: :func:`chaos.gate.rerun_reason_for`), and
  ``--confirm N`` in all. A killer that passes a confirmation run is *flaky*: reported with its
  count (``killed in 2 of 3 runs``), never as a kill.

Pure functions over :class:`RunOutcome` values: the tests build the situations by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from ..gate import rerun_reason_for

KILLED, SURVIVED, FLAKY, ERROR = "KILLED", "SURVIVED", "FLAKY", "ERROR"
#: Hang guard for one scenario run of a mutant (s): no verdict by then counts as a hang.
RUN_TIMEOUT_S = 300.0
#: Hang guard for one run of the quick schema-migration matrix (s).
MATRIX_TIMEOUT_S = 900.0
#: Run statuses that say the scenario caught something.
FAILED = ("FAIL", "INCONCLUSIVE", "TOOLKIT", "HANG")


@dataclass
class RunOutcome:
    """One scenario run against one copy of the store.

    ``reached``: the mutated statements some process of the run executed (``"<file>:<line>"``),
    None when nothing was marked (the control, a patch with no Python change);
    ``load_factor``: the run's measured load factor (wall/CPU seconds, SPEC §16.5).
    """

    scenario: str
    status: str                  # PASS | FAIL | INCONCLUSIVE | SKIPPED | TOOLKIT | HANG | ERROR
    checkers: list[str] = field(default_factory=list)   # "name STATUS: summary" of non-PASS
    seconds: float = 0.0
    run_dir: str | None = None
    exit_code: int | None = None
    log: str = ""
    failed_checkers: list[str] = field(default_factory=list)   # names with a FAIL verdict
    reached: list[str] | None = None
    load_factor: float | None = None

    @property
    def failed(self) -> bool:
        """The scenario caught something (a kill, once the control passed)."""
        return self.status in FAILED

    @property
    def reached_mutant(self) -> bool:
        """The run executed the mutated code (True when nothing was marked)."""
        return self.reached is None or bool(self.reached)


def counts(out: RunOutcome) -> tuple[bool, str]:
    """Whether ``out`` counts against the mutant (before the control), and why not."""
    if not out.failed:
        return False, ""
    if not out.reached_mutant:
        return False, (f"{out.status}, but no process of the run reached the mutated code: "
                       "not the mutant's doing")
    return True, ""


def confirmations(out: RunOutcome, confirm: int) -> int:
    """How many more runs of the mutant a candidate kill ``out`` needs: ``confirm``, and at
    least one when the gate would run the row once more (:func:`chaos.gate.rerun_reason_for`;
    a TOOLKIT error or a hang is treated like INCONCLUSIVE)."""
    status = "INCONCLUSIVE" if out.status in ("TOOLKIT", "HANG") else out.status
    return max(confirm, 1 if rerun_reason_for(status, out.failed_checkers) else 0)


def kill_verdict(runs: list[RunOutcome]) -> tuple[str, int]:
    """``(KILLED | FLAKY, kills)`` for a candidate kill and its confirmation runs: KILLED when
    every run counts (:func:`counts`), else FLAKY with how many did."""
    kills = sum(counts(r)[0] for r in runs)
    return (KILLED if runs and kills == len(runs) else FLAKY), kills


def control_verdict(runs: list[RunOutcome]) -> str:
    """The control of a scenario from its runs: PASS, FLAKY (failed, then passed when run once
    more: usable), SKIPPED (nothing tested: no kill possible), or the first run's failing
    status (the scenario is set aside: its failures prove nothing)."""
    if not runs:
        return ERROR
    if runs[0].status == "PASS":
        return "PASS"
    if runs[0].status == "SKIPPED":
        return "SKIPPED"
    if any(r.status == "PASS" for r in runs[1:]):
        return FLAKY
    return runs[0].status


def last_json(stdout: str) -> dict | None:
    """The last line of ``stdout`` that is a JSON object (``chaos run --json``'s results)."""
    for line in reversed((stdout or "").strip().splitlines()):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict):
            return d
    return None


def outcome_of(name: str, code: int | None, stdout: str, seconds: float,
               log: Path) -> RunOutcome:
    """A run's exit code and ``results.json`` line turned into a :class:`RunOutcome`."""
    if code is None:
        return RunOutcome(name, "HANG", [f"no verdict within {RUN_TIMEOUT_S:g}s"], seconds,
                          log=str(log))
    results = last_json(stdout)
    if code in (0, 1) and results is not None:
        verdicts = results.get("verdicts", [])
        bad = [v for v in verdicts if v.get("status") not in ("PASS", "SKIPPED")]
        checkers = [f"{v.get('checker')} {v.get('status')}: {v.get('summary', '')}"[:300]
                    for v in sorted(bad, key=lambda v: v.get("status") != "FAIL")]
        status = "PASS" if code == 0 and not bad else (
            "FAIL" if any(v.get("status") == "FAIL" for v in bad) or not bad else "INCONCLUSIVE")
        failed = sorted({str(v.get("checker")) for v in bad if v.get("status") == "FAIL"})
        factor = (results.get("load") or {}).get("factor")
        return RunOutcome(name, status, checkers, seconds, results.get("run_dir"), code,
                          str(log), failed, load_factor=factor)
    if code == 4 and results is not None:  # every checker SKIPPED: nothing tested, no kill
        return RunOutcome(name, "SKIPPED", [str(results.get("skipped") or "")[:300]], seconds,
                          results.get("run_dir"), code, str(log))
    if code == 3:
        return RunOutcome(name, "TOOLKIT", ["the run failed (exit 3): " + tail(log)], seconds,
                          exit_code=code, log=str(log))
    return RunOutcome(name, "ERROR", [f"exit {code}: {tail(log)}"], seconds, exit_code=code,
                      log=str(log))


def matrix_outcome(name: str, code: int | None, stdout: str, seconds: float,
                   log: Path) -> RunOutcome:
    """The quick schema-migration matrix's rows (``python -m chaos.matrix --jsonl``) as one
    :class:`RunOutcome`: FAIL naming the rows that did not pass, PASS when every row passed
    (SKIPPED rows count as nothing), ERROR when no row came back."""
    if code is None:
        return RunOutcome(name, "HANG", [f"no verdict within {MATRIX_TIMEOUT_S:g}s"], seconds,
                          log=str(log))
    rows = []
    for line in (stdout or "").splitlines():
        try:
            row = json.loads(line)
        except ValueError:
            continue
        if isinstance(row, dict) and "name" in row and "status" in row:
            rows.append(row)
    if not rows:
        return RunOutcome(name, "ERROR", [f"exit {code}, no matrix row: {tail(log)}"], seconds,
                          exit_code=code, log=str(log))
    bad = [r for r in rows if r["status"] not in ("PASS", "SKIPPED")]
    if not bad:
        status = "PASS" if any(r["status"] == "PASS" for r in rows) else "SKIPPED"
        return RunOutcome(name, status, [], seconds, exit_code=code, log=str(log))
    checkers = [f"matrix {r['name']} {r['status']}: {'; '.join(map(str, r.get('problems') or []))}"
                [:300] for r in bad]
    return RunOutcome(name, "FAIL", checkers, seconds, exit_code=code, log=str(log),
                      failed_checkers=["matrix"])


def tail(path: Path, n: int = 3) -> str:
    """The last ``n`` lines of a log, on one line (empty when unreadable)."""
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-n:])[:400]
    except OSError:
        return ""
