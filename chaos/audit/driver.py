"""``python -m chaos audit``: does every planted bug make a scenario fail? (issue 14)

For each mutant of the catalogue (:mod:`chaos.audit.catalogue`) the installed ``hermes_state`` package is
copied into the audit's directory with ONE rewrite applied, and scenarios run against it in child
processes (``python -m chaos run FILE --json``) whose ``PYTHONPATH`` starts with the copy and
whose working directory is the copy's (never the developer's tree). The mutant's own
``scenarios:`` run first, then the rest of the selection, cheapest first; the first scenario that
fails (a checker FAIL or INCONCLUSIVE, a toolkit error, a hang) kills it and the rest are skipped
(``--all`` runs every one). A kill only counts when the same scenario passes on an unmutated copy
run the same way (the *control*, once per scenario): a scenario that fails anyway proves nothing.
A kill by anything but a checker FAIL is confirmed by a second run of the mutant (an
INCONCLUSIVE under load is not a detection): if that one passes, it does not count.

Each run's probe (:mod:`chaos.audit.probe`) proves that every process that imported the store, and
every role process, imported the mutant copy; otherwise the audit is INVALID and exits 3. A
mutant whose pattern does not match exactly once is stale: an ERROR, never killed nor survived.

Exit 0 only when every mutant is killed; 1 when one survived or errored; 2 bad input (a mutant or
scenario file); 3 the audit itself is invalid (a run did not run the mutant) or failed.
"""

from __future__ import annotations

import fnmatch
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape
from rich.text import Text

import hermes_state
from hermes_state.testing import utc_stamp

from .. import store
from ..files import names
from ..files.owned import NotOwned, Owned
from ..gate import _Slots, run_parallel
from . import catalogue as mutants
from . import probe as audit_probe
from .report import kill_table, markdown_table, write_readme

KILLED, SURVIVED, ERROR = "KILLED", "SURVIVED", "ERROR"
#: Hang guard for one scenario run of a mutant (s): no verdict by then counts as a hang.
RUN_TIMEOUT_S = 300.0
#: Hang guard for one unit-test run of a mutant (s).
UNIT_TIMEOUT_S = 900.0
REPO = Path(__file__).resolve().parent.parent.parent


class AuditInvalid(Exception):
    """A run did not provably run the code it was meant to (the worst bug an audit can have)."""


@dataclass
class RunOutcome:
    """One scenario run against one copy of the store."""

    scenario: str
    status: str                  # PASS | FAIL | INCONCLUSIVE | SKIPPED | TOOLKIT | HANG | ERROR
    checkers: list[str] = field(default_factory=list)   # "name STATUS: summary" of non-PASS
    seconds: float = 0.0
    run_dir: str | None = None
    exit_code: int | None = None
    log: str = ""

    @property
    def failed(self) -> bool:
        """The scenario caught something (a kill, once the control passed)."""
        return self.status in ("FAIL", "INCONCLUSIVE", "TOOLKIT", "HANG")


@dataclass
class MutantResult:
    """The audit's verdict on one mutant: a row of the kill table."""

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


class Control:
    """The unmutated copy's verdict per scenario, computed once (under the same harness)."""

    def __init__(self, audit: "Audit") -> None:
        self.audit = audit
        self.ws: Workspace | None = None
        self.lock = threading.Lock()
        self.events: dict[str, threading.Event] = {}
        self.results: dict[str, RunOutcome] = {}

    def passes(self, scenario: Path) -> bool:
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
                self.results[name] = self.audit.run_scenario(self.ws, scenario)
            finally:
                ev.set()
        ev.wait()
        out = self.results.get(name)
        return out is not None and out.status == "PASS"


@dataclass
class Workspace:
    """A copy of the store package (mutated or not) and where its runs go."""

    root: Path
    package: Path
    mutated_file: Path | None

    @property
    def runs(self) -> Path:
        return self.root / "runs"


class Audit:
    """Plans and runs one audit. Use :func:`run_audit`."""

    def __init__(self, out: Path, scenarios: list, jobs: int, console: Console, *,
                 all_scenarios: bool = False, control: bool = True,
                 unit_tests: list[str] | None = None, own_only: bool = False) -> None:
        self.out = out
        self.own_only = own_only
        self.scenarios = scenarios
        self.jobs = max(1, jobs)
        self.console = console
        self.all = all_scenarios
        self.unit = unit_tests
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

    # ------------------------------------------------------------------ workspaces
    def workspace(self, name: str, mutant: mutants.Mutant | None) -> Workspace:
        """A fresh copy under ``out/<name>/``: mutated (``mutant``) or pristine (the control).

        ``name`` must be a plain file name (:func:`chaos.files.names.check`) and ``out/<name>`` must
        not exist: a directory this audit did not create is never reused nor removed.

        Raises:
            mutants.StaleMutant / mutants.MutantError: from :meth:`chaos.audit.catalogue.Mutant.apply`;
                a bad name, or ``out/<name>`` exists.
        """
        self.out.mkdir(parents=True, exist_ok=True)
        try:
            root = self.owned.make(names.child(self.out, name, "mutant"))
        except (names.BadName, NotOwned) as exc:
            raise mutants.MutantError(f"audit workspace: {exc}") from None
        if mutant is None:
            package, target = mutants.copy_package(self.source, root), None
        else:
            target = mutant.apply(self.source, root)
            package = root / "hermes_state"
        audit_probe.install(root)
        if self.unit is not None:
            for extra in ("tests", "scenarios"):
                if (REPO / extra).is_dir() and not (root / extra).exists():
                    shutil.copytree(REPO / extra, root / extra,
                                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        return Workspace(root, package, target)

    def env(self, ws: Workspace, probe: Path) -> dict:
        env = {k: v for k, v in os.environ.items() if k != "HERMES_STATE_FAILPOINTS"}
        env["PYTHONPATH"] = os.pathsep.join([str(ws.root)] + [
            p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        env[audit_probe.ENV_LOG] = str(probe)
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
        """``python -m chaos run SCENARIO --json`` on ``ws``'s copy; verifies the probe.

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
            probe = ws.root / f"probe-{stem}.jsonl"
            probe.unlink(missing_ok=True)
            log = ws.root / f"run-{stem}.log"
            t0 = time.monotonic()
            code, stdout = self._spawn([sys.executable, "-m", "chaos", "run",
                                        str(scenario.resolve()), "--json", "--out",
                                        str(ws.runs)], ws, probe, log, RUN_TIMEOUT_S)
            seconds = round(time.monotonic() - t0, 2)
        finally:
            self.slots.release(exclusive)
        out = _outcome(scenario.name, code, stdout, seconds, log)
        result = _last_json(stdout) or {}
        pids = [p.get("pid") for p in result.get("processes", [])
                if isinstance(p, dict) and p.get("pid")
                and _ran(result.get("run_dir"), p.get("process"))]
        problems = audit_probe.verify(probe, ws.package, pids)
        if problems:
            text = (f"{ws.root.name} / {scenario.name}: the run did not provably run the copy "
                    f"{ws.package}:\n  " + "\n  ".join(problems))
            raise AuditInvalid(text)
        return out

    def _scenario_of(self, path: Path):
        for sc in self.scenarios:
            if Path(sc.source).resolve() == path.resolve():
                return sc
        return None

    # ------------------------------------------------------------------ one mutant
    def order(self, mutant: mutants.Mutant) -> list[Path]:
        """The scenarios to try on ``mutant``: its own first (those selected), then the rest of
        the selection, shortest first."""
        paths = {Path(sc.source).stem: Path(sc.source) for sc in self.scenarios}
        first = [paths[n.removesuffix(".yaml")] for n in mutant.scenarios
                 if n.removesuffix(".yaml") in paths]
        if self.own_only:
            return first
        rest = sorted((Path(sc.source) for sc in self.scenarios
                       if Path(sc.source) not in first), key=lambda p: (_duration(
                           self._scenario_of(p)), p.name))
        return first + rest

    def audit_one(self, mutant: mutants.Mutant) -> MutantResult:
        res = MutantResult(mutant.name, mutant.rule, mutant.spec, mutant.rewrite_name)
        t0 = time.monotonic()
        try:
            ws = self.workspace(mutant.name, mutant)
        except mutants.MutantError as exc:
            res.error = str(exc)
            res.seconds = round(time.monotonic() - t0, 2)
            return res
        res.file = str(ws.mutated_file.relative_to(ws.root)) if ws.mutated_file else None
        res.status = SURVIVED
        for scenario in self.order(mutant):
            if self.stopping:
                res.status, res.error = ERROR, "audit interrupted"
                break
            out = self.run_scenario(ws, scenario)
            counted = out.failed and (self.control is None or self.control.passes(scenario))
            note = ("the scenario fails on the unmutated copy too (control)"
                    if out.failed and not counted else "")
            if counted and out.status != "FAIL":
                # INCONCLUSIVE, a toolkit error or a hang may be the machine's load, not the
                # mutant: it kills only when a second run of the mutant does not pass either
                again = self.run_scenario(ws, scenario)
                if not again.failed:
                    counted = False
                    note = (f"{out.status} once, then {again.status} on a second run of the "
                            "mutant: not counted")
            entry = asdict(out)
            entry["kill"] = counted
            if note:
                entry["note"] = note
            res.runs.append(entry)
            self._say(f"      {mutant.name}: {scenario.name} {out.status}"
                      + (f" ({out.checkers[0]})" if out.checkers and out.failed else "")
                      + ("" if counted or not out.failed else f" - {note}")
                      + f" {out.seconds:.1f}s", dim=True)
            if counted and res.killed_by is None:
                res.status, res.killed_by = KILLED, scenario.stem
                res.checker = out.checkers[0] if out.checkers else out.status
                if not self.all:
                    break
        if self.unit is not None:
            res.unit_tests = self.unit_tests(ws, mutant)
        res.seconds = round(time.monotonic() - t0, 2)
        return res

    def unit_tests(self, ws: Workspace, mutant: mutants.Mutant) -> str:
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
    def run(self, catalogue: list[mutants.Mutant]) -> list[MutantResult]:
        self.total = len(catalogue)
        results: list[MutantResult] = []

        def work(m: mutants.Mutant) -> None:
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
                how = (f"by {r.killed_by} ({r.checker})" if r.status == KILLED
                       else r.error.splitlines()[0] if r.error else
                       f"{len(r.runs)} scenario(s) passed")
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


def _last_json(stdout: str) -> dict | None:
    for line in reversed((stdout or "").strip().splitlines()):
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if isinstance(d, dict):
            return d
    return None


def _outcome(name: str, code: int | None, stdout: str, seconds: float, log: Path) -> RunOutcome:
    """A run's exit code and ``results.json`` line turned into a :class:`RunOutcome`."""
    if code is None:
        return RunOutcome(name, "HANG", [f"no verdict within {RUN_TIMEOUT_S:g}s"], seconds,
                          log=str(log))
    results = _last_json(stdout)
    if code in (0, 1) and results is not None:
        verdicts = results.get("verdicts", [])
        bad = [v for v in verdicts if v.get("status") not in ("PASS", "SKIPPED")]
        checkers = [f"{v.get('checker')} {v.get('status')}: {v.get('summary', '')}"[:300]
                    for v in sorted(bad, key=lambda v: v.get("status") != "FAIL")]
        status = "PASS" if code == 0 and not bad else (
            "FAIL" if any(v.get("status") == "FAIL" for v in bad) or not bad else "INCONCLUSIVE")
        return RunOutcome(name, status, checkers, seconds, results.get("run_dir"), code,
                          str(log))
    if code == 4 and results is not None:  # every checker SKIPPED: nothing tested, no kill
        return RunOutcome(name, "SKIPPED", [str(results.get("skipped") or "")[:300]], seconds,
                          results.get("run_dir"), code, str(log))
    if code == 3:
        return RunOutcome(name, "TOOLKIT", ["the run failed (exit 3): " + _tail(log)], seconds,
                          exit_code=code, log=str(log))
    return RunOutcome(name, "ERROR", [f"exit {code}: {_tail(log)}"], seconds, exit_code=code,
                      log=str(log))


def _tail(path: Path, n: int = 3) -> str:
    try:
        return " | ".join(path.read_text(errors="replace").strip().splitlines()[-n:])[:400]
    except OSError:
        return ""


def select_scenarios(pattern: str, tags: list[str] | None = None) -> list[Path]:
    """Scenario files matching ``pattern`` (a glob, relative to the cwd or absolute)."""
    base = Path(pattern)
    if base.is_dir():
        files = sorted(base.glob("*.yaml"))
    else:
        anchor = Path(base.anchor) if base.is_absolute() else Path(".")
        rel = str(base.relative_to(anchor)) if base.is_absolute() else pattern
        files = sorted(p for p in anchor.glob(rel) if p.suffix in (".yaml", ".yml"))
    return files


def write_junit(path: Path, results: list[MutantResult], total_s: float) -> None:
    """JUnit XML: one ``testcase`` per mutant; a survivor is a ``failure``, an ERROR an ``error``."""
    root = ET.Element("testsuites", name="chaos audit", tests=str(len(results)),
                      failures=str(sum(r.status == SURVIVED for r in results)),
                      errors=str(sum(r.status == ERROR for r in results)), time=f"{total_s:.3f}")
    suite = ET.SubElement(root, "testsuite", name="chaos.audit", tests=str(len(results)),
                          failures=str(sum(r.status == SURVIVED for r in results)),
                          errors=str(sum(r.status == ERROR for r in results)),
                          time=f"{sum(r.seconds for r in results):.3f}")
    for r in results:
        case = ET.SubElement(suite, "testcase", classname="chaos.mutants", name=r.name,
                             time=f"{r.seconds:.3f}")
        if r.status == SURVIVED:
            el = ET.SubElement(case, "failure", type=SURVIVED,
                               message=f"survived every scenario: {r.rule} ({r.spec})"[:1000])
            el.text = "\n".join(f"{x['scenario']}: {x['status']}" for x in r.runs)
        elif r.status == ERROR:
            el = ET.SubElement(case, "error", type=ERROR, message=r.error.splitlines()[0][:1000]
                               if r.error else ERROR)
            el.text = r.error
        else:
            ET.SubElement(case, "system-out").text = f"killed by {r.killed_by}: {r.checker}"
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def run_audit(catalogue: list[mutants.Mutant], scenarios: list, *, jobs: int | None = None,
              out: Path | None = None, as_json: bool = False, junit: Path | None = None,
              all_scenarios: bool = False, control: bool = True,
              unit_tests: list[str] | None = None, markdown: Path | None = None,
              own_only: bool = False, readme: Path | None = None,
              console: Console | None = None) -> int:
    """Run ``catalogue`` against ``scenarios`` (validated scenario objects); print the kill table.

    Args:
        catalogue: the mutants (:func:`chaos.audit.catalogue.load_dir`).
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
    Returns:
        0 every mutant killed; 1 a survivor or an ERROR; 3 the audit is invalid.
    """
    console = console or Console(stderr=as_json)
    jobs = jobs or os.cpu_count() or 1
    out = (out or Path(store.DEFAULT_OUT) / f"audit-{utc_stamp()}").absolute()
    out.mkdir(parents=True, exist_ok=True)
    audit = Audit(out, scenarios, jobs, console, all_scenarios=all_scenarios, control=control,
                  unit_tests=unit_tests, own_only=own_only)
    if audit.control is not None:  # before any mutant: a conflict is reported once, by name
        try:
            audit.control.ws = audit.workspace("_control", None)
        except mutants.MutantError as exc:
            console.print(f"[red]chaos audit: {escape(str(exc))}[/]", highlight=False)
            return 2
    console.print(f"chaos audit: {len(catalogue)} mutant(s) of {audit.source} x "
                  f"{len(scenarios)} scenario(s), {jobs} run(s) at once; output {out}",
                  highlight=False, markup=False)
    t0 = time.monotonic()
    try:
        results = audit.run(catalogue)
    except KeyboardInterrupt:
        console.print("[red]chaos audit: interrupted[/]")
        return 3
    total = time.monotonic() - t0
    controls = {k: asdict(v) for k, v in (audit.control.results.items() if audit.control
                                          else [])}
    console.print(kill_table(results, console.width, with_unit=unit_tests is not None))
    for name, ctl in sorted(controls.items()):
        if ctl["status"] != "PASS":
            console.print(Text(f"control: {name} {ctl['status']} on the unmutated copy "
                               f"({'; '.join(ctl['checkers'])[:300]}): its failures count as "
                               "no kill", style="yellow"), highlight=False)
    counts = {s: sum(r.status == s for r in results) for s in (KILLED, SURVIVED, ERROR)}
    code = 0 if counts[KILLED] == len(results) and results else 1
    if audit.invalid:
        code = 3
        for text in audit.invalid:
            console.print(f"[bold red]AUDIT INVALID[/] {escape(text)}", highlight=False)
    console.print(f"audit: {counts[KILLED]} killed, {counts[SURVIVED]} survived, "
                  f"{counts[ERROR]} error(s) of {len(results)} mutant(s) in {total:.1f}s "
                  f"({jobs} at once, {os.cpu_count()} cores)", highlight=False, markup=False)
    if junit:
        write_junit(Path(junit), results, total)
    table = markdown_table(results, total, jobs, with_unit=unit_tests is not None)
    if markdown:
        Path(markdown).write_text(table)
    if readme and not write_readme(Path(readme), table, "python -m chaos audit "
                                   + " ".join(sys.argv[2:])):
        console.print(f"[red]chaos audit: no kill-table markers in {escape(str(readme))}[/]",
                      highlight=False)
    if as_json:
        print(json.dumps({"mutants": [asdict(r) for r in results], **{
            k.lower(): v for k, v in counts.items()}, "controls": controls,
            "invalid": audit.invalid, "seconds": round(total, 1), "jobs": jobs,
            "exit_code": code, "out": str(out)}, default=str))
    return code


# ---------------------------------------------------------------------- command line

def cmd_audit(args, load_all, err: Console, *, tags: list[str] | None = None,
              pattern: str | None = None) -> int:
    """``python -m chaos audit`` (and ``gate --audit``): load, validate, run."""
    try:
        catalogue = mutants.load_dir(getattr(args, "mutants", None))
    except mutants.MutantError as exc:
        err.print(f"[red]chaos audit: {escape(str(exc))}[/]", highlight=False)
        return 2
    only = getattr(args, "only", None)
    if only:
        catalogue = [m for m in catalogue if any(fnmatch.fnmatch(m.name, g) for g in only)]
        if not catalogue:
            err.print(f"[red]chaos audit: no mutant matches {escape(' '.join(only))}[/]",
                      highlight=False)
            return 2
    files = select_scenarios(pattern or args.scenarios)
    if not files:
        err.print(f"[red]chaos audit: no scenario files match {escape(str(pattern or args.scenarios))}[/]",
                  highlight=False)
        return 2
    scenarios, bad = load_all(files, err)
    if bad:
        return 2
    want = list(tags or []) + list(getattr(args, "tag", None) or [])
    if want:
        scenarios = [sc for sc in scenarios if set(want) & set(sc.tags)]
        if not scenarios:
            err.print(f"[red]chaos audit: no scenario tagged {escape(', '.join(want))}[/]",
                      highlight=False)
            return 2
    unit_arg = getattr(args, "unit_tests", None)
    unit = None if unit_arg is None else unit_arg.split()
    return run_audit(catalogue, scenarios, jobs=args.jobs, out=args.out, as_json=args.json,
                     junit=args.junit, all_scenarios=getattr(args, "all", False),
                     control=getattr(args, "control", True), unit_tests=unit,
                     markdown=getattr(args, "markdown", None),
                     own_only=getattr(args, "own", False),
                     readme=getattr(args, "readme", None))
