"""``python -m chaos audit``: does every planted bug make a scenario fail? (issue 14, issue 27)

For each mutant of the catalogue (:mod:`chaos.audit.catalogue`: YAML rewrites and ``*.patch``
diffs) the installed ``hermes_state`` package is copied into the audit's directory with the
mutant planted, and scenarios run against it in child processes (``python -m chaos run FILE
--json``) whose ``PYTHONPATH`` starts with the copy and whose working directory is the copy's
(never the developer's tree). The mutant's own ``scenarios:`` run first, then the rest of the
selection, cheapest first, until one kills it (``--all``: every one).

When a failing run counts as a kill is :mod:`chaos.audit.verdicts`: it reached the mutated code,
the control passes (a failed control is run once more), and every confirmation run fails too
(a killer that passes one is FLAKY, and the search goes on for a reliable one).

Each run's probe (:mod:`chaos.audit.probe`) proves that every process that imported the store,
and every role process, imported the mutant copy; otherwise the audit is INVALID and exits 3. A
mutant whose pattern does not match exactly once is stale: an ERROR, never killed nor survived.

Exit 0 only when every mutant is killed; 1 when one survived, was only killed flakily or
errored; 2 bad input (a mutant, patch or scenario file); 3 the audit itself is invalid (a run
did not run the mutant) or failed.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.text import Text

import hermes_state
from hermes_state.testing import utc_stamp

from .. import role_start, store
from ..files import names
from ..files.owned import NotOwned, Owned
from ..gate import _Slots, run_parallel
from ..sampler import measure
from . import catalogue as mutants
from . import probe as audit_probe
from .report import kill_table, markdown_table, write_junit, write_readme
from .verdicts import (ERROR, FLAKY, KILLED, MATRIX_TIMEOUT_S, RUN_TIMEOUT_S, SURVIVED, RunOutcome,
                       confirmations, control_verdict, counts, kill_verdict, last_json,
                       matrix_outcome, outcome_of)

__all__ = ["ERROR", "FLAKY", "KILLED", "SURVIVED", "Audit", "AuditInvalid", "MutantResult",
           "RunOutcome", "Workspace", "run_audit"]
#: Hang guard for one unit-test run of a mutant (s).
UNIT_TIMEOUT_S = 900.0
#: Confirmation runs of a kill by default (each must fail too): 2, so a kill is 3 of 3 runs.
DEFAULT_CONFIRM = 2
REPO = Path(__file__).resolve().parent.parent.parent
#: The quick schema-migration matrix (SPEC §16.6: generated fixtures of every version and the
#: bundled stores real upstream code wrote, plain, beside a writer, crashed at each step) as one
#: more killer: ``python -m chaos.matrix --quick --jsonl`` on the copy. A mutant names it
#: ``matrix`` among its ``scenarios:``; ``--no-matrix`` leaves it out.
MATRIX = Path("matrix")


class AuditInvalid(Exception):
    """A run did not provably run the code it was meant to (the worst bug an audit can have)."""


@dataclass
class MutantResult:
    """The audit's verdict on one mutant: a row of the kill table.

    ``kills``: for KILLED and FLAKY, ``"<failing runs> of <runs>"`` of the killer;
    ``flaky``: every killer that failed a confirmation run (``scenario``, ``checker``,
    ``kills``, ``runs``).
    """

    name: str
    rule: str
    spec: str
    rewrite: str
    status: str = ERROR
    killed_by: str | None = None
    checker: str | None = None
    file: str | None = None
    runs: list[dict] = field(default_factory=list)
    unit_tests: str | None = None     # "caught" | "missed" | "error: ..." | None (not asked)
    seconds: float = 0.0
    error: str = ""
    kills: str | None = None
    flaky: list[dict] = field(default_factory=list)
    sites: int = 0


class Control:
    """The unmutated copy's verdict per scenario, computed once (under the same harness); a
    control that fails is run once more before its scenario is set aside."""

    def __init__(self, audit: "Audit") -> None:
        self.audit = audit
        self.ws: Workspace | None = None
        self.lock = threading.Lock()
        self.events: dict[str, threading.Event] = {}
        self.runs: dict[str, list[RunOutcome]] = {}

    @property
    def results(self) -> dict[str, RunOutcome]:
        """The last run of each scenario's control (its status is :func:`verdict`'s)."""
        out = {}
        for name, runs in self.runs.items():
            last = RunOutcome(**{**asdict(runs[-1]), "status": control_verdict(runs)})
            if len(runs) > 1:
                last.checkers = [f"run 1 {runs[0].status}: {'; '.join(runs[0].checkers)}"[:300],
                                 *last.checkers]
            out[name] = last
        return out

    def verdict(self, scenario: Path) -> str:
        """:func:`chaos.audit.verdicts.control_verdict` of ``scenario`` (run on first use)."""
        name = scenario.name
        with self.lock:
            ev = self.events.get(name)
            first = ev is None
            if first:
                ev = self.events[name] = threading.Event()
                if self.ws is None:
                    self.ws = self.audit.workspace("_control", None)
        if first:
            try:
                runs = [self.audit.run_scenario(self.ws, scenario)]
                if runs[0].status not in ("PASS", "SKIPPED") and not self.audit.stopping:
                    self.audit._say(f"      control {name}: {runs[0].status} "
                                    f"({'; '.join(runs[0].checkers)[:160]}): run once more",
                                    dim=True)
                    runs.append(self.audit.run_scenario(self.ws, scenario))
                self.runs[name] = runs
            finally:
                ev.set()
        ev.wait()
        runs = self.runs.get(name)
        return control_verdict(runs) if runs else ERROR

    def passes(self, scenario: Path) -> bool:
        """The scenario passes on the unmutated copy (at once, or when run once more)."""
        return self.verdict(scenario) in ("PASS", FLAKY)


@dataclass
class Workspace:
    """A copy of the store package (mutated or not) and where its runs go.

    ``sites``: the mutated statements (:mod:`chaos.audit.reach`), empty for the control.
    """

    root: Path
    package: Path
    mutated_file: Path | None
    sites: dict = field(default_factory=dict)
    attempts: dict = field(default_factory=dict)

    @property
    def runs(self) -> Path:
        return self.root / "runs"


class Audit:
    """Plans and runs one audit. Use :func:`run_audit`."""

    def __init__(self, out: Path, scenarios: list, jobs: int, console: Console, *,
                 all_scenarios: bool = False, control: bool = True,
                 unit_tests: list[str] | None = None, own_only: bool = False,
                 confirm: int = DEFAULT_CONFIRM, matrix: bool = False) -> None:
        self.out = out
        self.matrix = matrix
        self.own_only = own_only
        self.scenarios = scenarios
        self.jobs = max(1, jobs)
        self.console = console
        self.all = all_scenarios
        self.unit = unit_tests
        self.confirm = max(0, confirm)
        self.source = Path(hermes_state.__file__).resolve().parent
        self.slots = _Slots(self.jobs)
        self.control = Control(self) if control else None
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.stopping = False
        self.invalid: list[str] = []
        #: the directories this audit created: the only ones it may remove (issue 22 item 4)
        self.owned = Owned()
        self.done = 0
        self.total = 0
        self.load_factors: list[float] = []

    # ------------------------------------------------------------------ workspaces
    def workspace(self, name: str, mutant) -> Workspace:
        """A fresh copy under ``out/<name>/``: mutated (``mutant``) or pristine (the control).

        ``name`` must be a plain file name (:func:`chaos.files.names.check`) and ``out/<name>``
        must not exist: a directory this audit did not create is never reused nor removed. The
        copy is made and changed only there (a patch never touches the checkout).

        Raises:
            mutants.StaleMutant / mutants.MutantError: from the mutant's ``plant``; a bad name,
                or ``out/<name>`` exists.
        """
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            root = self.owned.make(names.child(self.out, name, "mutant"))
        except (names.BadName, NotOwned) as exc:
            raise mutants.MutantError(f"audit workspace: {exc}") from None
        sites: dict = {}
        if mutant is None:
            package, target = mutants.copy_package(self.source, root), None
        else:
            planted = mutant.plant(self.source, root)
            target = planted.files[0] if planted.files else None
            sites = planted.sites
            package = root / "hermes_state"
        audit_probe.install(root, sites)
        if self.unit is not None:
            for extra in ("tests", "scenarios"):
                if (REPO / extra).is_dir() and not (root / extra).exists():
                    shutil.copytree(REPO / extra, root / extra,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        return Workspace(root, package, target, sites)

    def env(self, ws: Workspace, probe: Path) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "HERMES_STATE_FAILPOINTS"}
        env["PYTHONPATH"] = os.pathsep.join([str(ws.root)] + [
            p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        env[audit_probe.ENV_LOG] = str(probe)
        # the probe proves every role process imported the copy: each must import for itself
        env[role_start.ENV_VAR] = "spawn"
        return env

    # ------------------------------------------------------------------ one run
    def _spawn(self, argv: list[str], ws: Workspace, probe: Path, log: Path,
               timeout: float) -> tuple[int | None, str]:
        with open(log, "w") as err:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=err, text=True,
                                    cwd=ws.root, env=self.env(ws, probe),
                                    start_new_session=True)
            with self.lock:
                self.procs.add(proc)
            try:
                stdout, _ = proc.communicate(timeout=timeout)
                code: int | None = proc.returncode
            except subprocess.TimeoutExpired:
                _terminate(proc)
                stdout, code = proc.communicate()[0] or "", None
            finally:
                with self.lock:
                    self.procs.discard(proc)
        return code, stdout

    def run_scenario(self, ws: Workspace, scenario: Path) -> RunOutcome:
        """``python -m chaos run SCENARIO --json`` on ``ws``'s copy; verifies the probe and
        reads which mutated statements the run reached.

        Raises:
            AuditInvalid: a process of the run imported ``hermes_state`` from elsewhere.
        """
        exclusive = "exclusive" in getattr(self._scenario_of(scenario), "tags", [])
        self.slots.acquire(exclusive)
        try:
            if self.stopping:
                return RunOutcome(scenario.name, "ERROR", ["audit interrupted"])
            ws.runs.mkdir(exist_ok=True)
            stem = names.derive(scenario.stem)
            with self.lock:
                k = ws.attempts[stem] = ws.attempts.get(stem, 0) + 1
            suffix = "" if k == 1 else f"-{k}"
            probe = ws.root / f"probe-{stem}{suffix}.jsonl"
            probe.unlink(missing_ok=True)
            log = ws.root / f"run-{stem}{suffix}.log"
            if scenario == MATRIX:
                argv = [sys.executable, "-m", "chaos.matrix", "--quick", "--jsonl"]
            else:
                argv = [sys.executable, "-m", "chaos", "run", str(scenario.resolve()), "--json",
                        "--out", str(ws.runs)]
            t0 = time.monotonic()
            code, stdout = self._spawn(argv, ws, probe, log, MATRIX_TIMEOUT_S
                                       if scenario == MATRIX else RUN_TIMEOUT_S)
            seconds = round(time.monotonic() - t0, 2)
        finally:
            self.slots.release(exclusive)
        if scenario == MATRIX:
            out = matrix_outcome(scenario.name, code, stdout, seconds, log)
        else:
            out = outcome_of(scenario.name, code, stdout, seconds, log)
        result = last_json(stdout) or {}
        pids = [p.get("pid") for p in result.get("processes", [])
                if isinstance(p, dict) and p.get("pid")
                and _ran(result.get("run_dir"), p.get("process"))]
        problems = audit_probe.verify(probe, ws.package, pids)
        if problems:
            text = (f"{ws.root.name} / {scenario.name}: the run did not provably run the copy "
                    f"{ws.package}:\n  " + "\n  ".join(problems))
            raise AuditInvalid(text)
        if ws.sites:
            out.reached = audit_probe.reached(probe)
        if out.load_factor is not None:
            with self.lock:
                self.load_factors.append(out.load_factor)
        return out

    def _scenario_of(self, path: Path):
        for sc in self.scenarios:
            if Path(sc.source).resolve() == path.resolve():
                return sc
        return None

    # ------------------------------------------------------------------ one mutant
    def order(self, mutant) -> list[Path]:
        """The scenarios to try on ``mutant``: its own first (those selected; ``matrix`` names
        the schema-migration matrix), then the rest of the selection, shortest first, and the
        matrix last (with ``matrix`` on)."""
        paths = {Path(sc.source).stem: Path(sc.source) for sc in self.scenarios}
        if self.matrix:
            paths.setdefault(MATRIX.name, MATRIX)
        first = [paths[n.removesuffix(".yaml")] for n in mutant.scenarios
                 if n.removesuffix(".yaml") in paths]
        if self.own_only:
            return first
        rest = sorted((Path(sc.source) for sc in self.scenarios
                       if Path(sc.source) not in first), key=lambda p: (_duration(
                           self._scenario_of(p)), p.name))
        if self.matrix and MATRIX not in first:
            rest.append(MATRIX)
        return first + rest

    def audit_one(self, mutant) -> MutantResult:
        res = MutantResult(mutant.name, mutant.rule, mutant.spec, mutant.rewrite_name)
        t0 = time.monotonic()
        try:
            ws = self.workspace(mutant.name, mutant)
        except mutants.MutantError as exc:
            res.error = str(exc)
            res.seconds = round(time.monotonic() - t0, 2)
            return res
        res.file = str(ws.mutated_file.relative_to(ws.root)) if ws.mutated_file else None
        res.sites = sum(len(v) for v in ws.sites.values())
        res.status = SURVIVED
        for scenario in self.order(mutant):
            if self.stopping:
                res.status, res.error = ERROR, "audit interrupted"
                break
            verdict, runs, note = self.try_scenario(ws, mutant, scenario)
            for i, out in enumerate(runs):
                entry = asdict(out)
                entry["kill"] = verdict == KILLED
                if i:
                    entry["confirmation"] = i
                if note and i == len(runs) - 1:
                    entry["note"] = note
                res.runs.append(entry)
            if verdict is None:
                continue
            first = runs[0]
            checker = first.checkers[0] if first.checkers else first.status
            kills = f"{kill_verdict(runs)[1]} of {len(runs)}"
            if verdict == FLAKY:
                res.flaky.append({"scenario": scenario.stem, "checker": checker,
                                  "kills": kill_verdict(runs)[1], "runs": len(runs)})
                if res.status == SURVIVED:
                    res.status, res.killed_by, res.checker, res.kills = (
                        FLAKY, scenario.stem, checker, kills)
                continue
            if res.status != KILLED:
                res.status, res.killed_by, res.checker, res.kills = (
                    KILLED, scenario.stem, checker, kills)
            if not self.all:
                break
        if self.unit is not None:
            res.unit_tests = self.unit_tests(ws, mutant)
        res.seconds = round(time.monotonic() - t0, 2)
        return res

    def try_scenario(self, ws: Workspace, mutant,
                     scenario: Path) -> tuple[str | None, list[RunOutcome], str]:
        """Run ``scenario`` on the mutant, and confirm a candidate kill.

        Returns:
            ``(KILLED | FLAKY | None, the runs, a note)``: None when it is no kill (the run
            passed, did not reach the mutated code, or the control fails too).
        """
        out = self.run_scenario(ws, scenario)
        ok, note = counts(out)
        if ok and self.control is not None and not self.control.passes(scenario):
            ok, note = False, (f"{out.status}, but the scenario fails on the unmutated copy too "
                               f"(control {self.control.verdict(scenario)}, run twice)")
        self._say(f"      {mutant.name}: {scenario.name} {out.status}"
                  + (f" ({out.checkers[0]})" if out.checkers and out.failed else "")
                  + (f" - {note}" if note else "") + f" {out.seconds:.1f}s", dim=True)
        if not ok:
            return None, [out], note
        runs = [out]
        for i in range(confirmations(out, self.confirm)):
            if self.stopping:
                break
            again = self.run_scenario(ws, scenario)
            runs.append(again)
            self._say(f"      {mutant.name}: {scenario.name} confirmation {i + 1}: "
                      f"{again.status}" + ("" if counts(again)[0] else
                                           f" - {counts(again)[1] or 'passed'}")
                      + f" {again.seconds:.1f}s", dim=True)
            if not counts(again)[0]:
                break
        verdict, kills = kill_verdict(runs)
        note = "" if verdict == KILLED else (
            f"flaky killer: killed in {kills} of {len(runs)} runs (not counted as a kill)")
        return verdict, runs, note

    def unit_tests(self, ws: Workspace, mutant) -> str:
        """Run the pytest subset (the mutant's ``unit_tests``, else ``--unit-tests``) on the copy.

        Returns ``"caught"`` (a test failed), ``"missed"`` (all passed) or ``"error: ..."``.
        """
        selection = mutant.unit_tests or self.unit or []
        if not selection:
            return "error: no unit tests named (mutant unit_tests or --unit-tests)"
        args = [str(ws.root / s) if not os.path.isabs(s) else s for s in selection]
        probe = ws.root / "probe-unit.jsonl"
        log = ws.root / "unit.log"
        self.slots.acquire(False)
        try:
            code, _ = self._spawn([sys.executable, "-m", "pytest", "-q", "-x", "-p",
                                   "no:cacheprovider", "-n", "0", "--rootdir", str(ws.root),
                                   *args], ws, probe, log, UNIT_TIMEOUT_S)
        finally:
            self.slots.release(False)
        problems = audit_probe.verify(probe, ws.package, [])
        if problems:
            raise AuditInvalid(f"{mutant.name} / unit tests: the run did not provably run the "
                               f"copy:\n  " + "\n  ".join(problems))
        return {0: "missed", 1: "caught"}.get(code, f"error: pytest exit {code} (log {log})")

    # ------------------------------------------------------------------ all
    def run(self, catalogue: list) -> list[MutantResult]:
        self.total = len(catalogue)
        results: list[MutantResult] = []

        def work(m) -> None:
            if self.stopping:
                return
            try:
                r = self.audit_one(m)
            except AuditInvalid as exc:
                with self.lock:
                    self.invalid.append(str(exc))
                self.stop()
                r = MutantResult(m.name, m.rule, m.spec, m.rewrite_name, ERROR,
                                 error="INVALID: " + str(exc))
            with self.lock:
                results.append(r)
                self.done += 1
                style = {KILLED: "green", SURVIVED: "bold red"}.get(r.status, "bold magenta")
                how = (f"by {r.killed_by} ({r.checker}; {r.kills} runs)"
                       if r.status in (KILLED, FLAKY)
                       else r.error.splitlines()[0] if r.error else
                       f"{len(r.runs)} scenario run(s), none a kill")
                self.console.print(f"[{self.done:3}/{self.total}] [{style}]{r.status:8}[/] "
                                   f"{escape(f'{r.name} {how}')} {r.seconds:.0f}s",
                                   highlight=False)

        run_parallel(catalogue, work, self.jobs, self.stop)
        order = {m.name: i for i, m in enumerate(catalogue)}
        return sorted(results, key=lambda r: order[r.name])

    def stop(self) -> None:
        """Stop every running child (SIGTERM to its process group, then SIGKILL)."""
        self.stopping = True
        with self.lock:
            procs = list(self.procs)
        for p in procs:
            _terminate(p)

    def _say(self, text: str, dim: bool = False) -> None:
        with self.lock:
            self.console.print(Text(text, style="dim" if dim else ""), highlight=False)


def _terminate(proc: subprocess.Popen) -> None:
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    except (ProcessLookupError, PermissionError):
        return
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _duration(sc) -> float:
    return float(getattr(sc, "duration", 0) or 0)


def _ran(run_dir: str | None, process: str | None) -> bool:
    """False only for a role process that left an empty history: killed before it ran any
    code of its role (a restart storm on a loaded machine), so it has no import to prove. One
    that imported the store anywhere else still left a probe record naming that place."""
    if not run_dir or not process:
        return True
    path = Path(run_dir) / "history" / f"{process}.jsonl"
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def load_line(start: dict, end: dict | None, factors: list[float]) -> str:
    """The machine's load during an audit, in one line (the kill table's footnote)."""
    text = (f"machine load: {start['ratio']:g} s wall per CPU second at the start"
            + (f", {end['ratio']:g} at the end" if end else "")
            + f" (loadavg per CPU {start.get('loadavg_per_cpu')}"
            + (f" / {end.get('loadavg_per_cpu')}" if end else "") + ")")
    if factors:
        text += (f"; the runs' load factors: median {statistics.median(factors):.2f}, "
                 f"max {max(factors):.2f} over {len(factors)} runs")
    return text


def patch_sentence(r: MutantResult) -> str:
    """What ``--patch`` answers: would the gate catch this change (coming back)?"""
    tried = len({x["scenario"] for x in r.runs})
    if r.status == KILLED:
        return (f"patch {r.name}: KILLED by {r.killed_by} ({r.checker}; {r.kills} runs): the "
                f"scenarios catch this change")
    if r.status == FLAKY:
        return (f"patch {r.name}: only flaky killers ({r.killed_by} killed it in {r.kills} "
                f"runs): the scenarios do not catch this change every time")
    if r.status == SURVIVED:
        return (f"patch {r.name}: no scenario kills it ({tried} scenario(s) ran): the scenarios "
                "would not catch this change")
    return f"patch {r.name}: not run: {r.error}"


def run_audit(catalogue: list, scenarios: list, *, jobs: int | None = None,
              out: Path | None = None, as_json: bool = False, junit: Path | None = None,
              all_scenarios: bool = False, control: bool = True,
              unit_tests: list[str] | None = None, markdown: Path | None = None,
              own_only: bool = False, readme: Path | None = None,
              console: Console | None = None, confirm: int = DEFAULT_CONFIRM,
              command: str | None = None, patches: bool = False, matrix: bool = False) -> int:
    """Run ``catalogue`` against ``scenarios`` (validated scenario objects); print the kill table.

    Args:
        catalogue: the mutants (:func:`chaos.audit.catalogue.load_dir`, or patches).
        scenarios: the selection, each a :class:`chaos.scenario.Scenario`.
        jobs: scenario runs at once (default: the core count).
        out: the audit directory (default ``runs/audit-<UTCSTAMP>``): one copy per mutant.
        as_json: print one JSON object on stdout (progress goes to stderr).
        junit: write JUnit XML there.
        all_scenarios: run every scenario on every mutant (no stop at the first kill).
        control: count a kill only when the scenario passes on an unmutated copy.
        unit_tests: also run this pytest selection (or each mutant's ``unit_tests``) on each
            mutant; None: skip the column.
        markdown: write the kill table as Markdown there (the README's table).
        own_only: try only each mutant's own ``scenarios:`` (a quick look, not the verdict).
        readme: rewrite the kill-table block of this README with the result.
        confirm: runs of the mutant after a candidate kill that must fail too (>= 0; at least
            one for a timing-bound or INCONCLUSIVE kill).
        command: the command line named above the Markdown table.
        patches: the catalogue is ``--patch`` files: end with one sentence per patch saying
            which scenario kills it, or that none does.
        matrix: also try the quick schema-migration matrix (:data:`MATRIX`), last.
    Returns:
        0 every mutant killed; 1 a survivor, a flaky kill or an ERROR; 3 the audit is invalid.
    """
    console = console or Console(stderr=as_json)
    jobs = jobs or os.cpu_count() or 1
    out = (out or Path(store.DEFAULT_OUT) / f"audit-{utc_stamp()}").absolute()
    out.mkdir(parents=True, exist_ok=True)
    audit = Audit(out, scenarios, jobs, console, all_scenarios=all_scenarios, control=control,
                  unit_tests=unit_tests, own_only=own_only, confirm=confirm, matrix=matrix)
    if audit.control is not None:  # before any mutant: a conflict is reported once, by name
        try:
            audit.control.ws = audit.workspace("_control", None)
        except mutants.MutantError as exc:
            console.print(f"[red]chaos audit: {escape(str(exc))}[/]", highlight=False)
            return 2
    load_start = measure("audit start")
    console.print(f"chaos audit: {len(catalogue)} mutant(s) of {audit.source} x "
                  f"{len(scenarios)} scenario(s){' and the quick matrix' if matrix else ''}, "
                  f"{jobs} run(s) at once, a kill confirmed by "
                  f"{audit.confirm} more run(s); output {out}; machine load: "
                  f"{load_start['ratio']:g} s wall per CPU second, loadavg/cpu "
                  f"{load_start['loadavg_per_cpu']}", highlight=False, markup=False)
    t0 = time.monotonic()
    try:
        results = audit.run(catalogue)
    except KeyboardInterrupt:
        console.print("[red]chaos audit: interrupted[/]")
        return 3
    total = time.monotonic() - t0
    load_end = measure("audit end")
    load = load_line(load_start, load_end, audit.load_factors)
    controls = {k: asdict(v) for k, v in (audit.control.results.items() if audit.control
                                          else [])}
    console.print(kill_table(results, console.width, with_unit=unit_tests is not None))
    for name, ctl in sorted(controls.items()):
        if ctl["status"] != "PASS":
            console.print(Text(f"control: {name} {ctl['status']} on the unmutated copy "
                               f"({'; '.join(ctl['checkers'])[:300]})"
                               + ("" if ctl["status"] == FLAKY else
                                  ": its failures count as no kill"), style="yellow"),
                          highlight=False)
    tally = {s: sum(r.status == s for r in results) for s in (KILLED, SURVIVED, FLAKY, ERROR)}
    code = 0 if tally[KILLED] == len(results) and results else 1
    if audit.invalid:
        code = 3
        for text in audit.invalid:
            console.print(f"[bold red]AUDIT INVALID[/] {escape(text)}", highlight=False)
    console.print(f"audit: {tally[KILLED]} killed, {tally[SURVIVED]} survived, {tally[FLAKY]} "
                  f"flaky (killed in some runs only), {tally[ERROR]} error(s) of {len(results)} "
                  f"mutant(s) in {total:.1f}s ({jobs} at once, {os.cpu_count()} cores); {load}",
                  highlight=False, markup=False)
    if patches:
        for r in results:
            console.print(patch_sentence(r), highlight=False, markup=False)
    if junit:
        write_junit(Path(junit), results, total)
    table = markdown_table(results, total, jobs, with_unit=unit_tests is not None, load=load,
                           confirm=audit.confirm)
    if markdown:
        Path(markdown).write_text(table)
    command = command or "python -m chaos audit " + " ".join(sys.argv[2:])
    if readme and not write_readme(Path(readme), table, command):
        console.print(f"[red]chaos audit: no kill-table markers in {escape(str(readme))}[/]",
                      highlight=False)
    if as_json:
        print(json.dumps({"mutants": [asdict(r) for r in results], **{
            k.lower(): v for k, v in tally.items()}, "controls": controls,
            "invalid": audit.invalid, "seconds": round(total, 1), "jobs": jobs,
            "confirm": audit.confirm, "load": {"start": load_start, "end": load_end,
                                               "run_factors": audit.load_factors},
            "exit_code": code, "out": str(out)}, default=str))
    return code
