"""``python -m chaos gate``: the regression gate before a schema bump (SPEC §16.5, §16.6).

Runs every ``scenarios/*.yaml`` (``--seeds K``: seeds ``seed .. seed+K-1`` of each) and the
schema-migration matrix (:mod:`chaos.matrix`), prints a verdict table and the total time, and
optionally writes JUnit XML (one ``testcase`` per scenario × seed and per matrix row). Exit 0
only when every row passed; 1 when any failed, was INCONCLUSIVE or errored; 2 when a scenario
file is invalid (nothing runs); 3 when the toolkit itself failed.

Every job is a child process (``python -m chaos run FILE --seed N --json`` for a scenario run,
``python -m chaos.matrix --versions ... --jsonl`` for a chunk of the matrix), up to ``--jobs``
at once (default: the core count). A scenario tagged ``exclusive`` runs alone: it waits until
every running job is done and nothing starts beside it (for scenarios whose timing must not
share the CPU). Job output goes to ``<out>/logs/``, scenario run directories to ``<out>/runs/``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich import box
from rich.console import Console
from rich.table import Table

from hermes_state.testing import utc_stamp

from . import matrix, store
from .files import names
from .report import STATUS_STYLE
from .report.terminal import compact, markup_safe

PASS, FAIL, INCONCLUSIVE, ERROR, SKIPPED = "PASS", "FAIL", "INCONCLUSIVE", "ERROR", "SKIPPED"
#: Hang guard for one job (s): a scenario run or a matrix chunk stuck this long is an ERROR.
JOB_TIMEOUT_S = 1800.0


@dataclass
class GateRow:
    """One verdict row: a scenario × seed run, or one matrix cell."""

    kind: str            # "scenario" | "matrix"
    suite: str           # scenario file name, or "matrix.v<N>"
    name: str            # "seed42", or the cell ("plain", "writer", "crash@v11")
    status: str          # PASS | FAIL | INCONCLUSIVE | ERROR
    summary: str = ""
    details: str = ""
    seconds: float = 0.0
    run_dir: str | None = None


@dataclass
class Job:
    """One child process of the gate and how to turn its output into rows."""

    label: str
    argv: list[str]
    kind: str
    exclusive: bool = False
    meta: dict = field(default_factory=dict)



def run_parallel(items, work, jobs: int, stop) -> None:
    """Call ``work(item)`` for every item on ``jobs`` threads; on any error or interrupt call
    ``stop()`` (which ends the running children) and re-raise. The main thread polls, so a
    signal reaches it while the workers run."""
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = [pool.submit(work, item) for item in items]
        try:
            for f in futures:
                while not f.done():
                    time.sleep(0.1)
                f.result()
        except BaseException:
            stop()
            raise

class _Slots:
    """``jobs`` shared slots; an exclusive job takes all of them (a readers-writer lock)."""

    def __init__(self, n: int) -> None:
        self.n, self.used = n, 0
        self.cond = threading.Condition()

    def acquire(self, exclusive: bool) -> None:
        need = self.n if exclusive else 1
        with self.cond:
            self.cond.wait_for(lambda: self.used + need <= self.n)
            self.used += need

    def release(self, exclusive: bool) -> None:
        with self.cond:
            self.used -= self.n if exclusive else 1
            self.cond.notify_all()


class Gate:
    """Plans, runs and reports one gate run. Use :func:`run_gate`."""

    def __init__(self, out: Path, jobs: int, console: Console) -> None:
        self.out = out
        self.jobs = max(1, jobs)
        self.console = console
        self.rows: list[GateRow] = []
        self.lock = threading.Lock()
        self.procs: set[subprocess.Popen] = set()
        self.stopping = False

    # ------------------------------------------------------------------ planning
    def scenario_jobs(self, scenarios: list, seeds: int) -> list[Job]:
        """One job per scenario × seed: ``python -m chaos run FILE --seed N --json``."""
        out = []
        for sc in scenarios:
            for k in range(max(1, seeds)):
                seed = sc.seed + k
                name = Path(sc.source).name
                out.append(Job(f"{name} seed {seed}",
                               [sys.executable, "-m", "chaos", "run", str(sc.source), "--seed",
                                str(seed), "--out", str(self.out / "runs"), "--json"],
                               "scenario", "exclusive" in sc.tags,
                               {"file": name, "seed": seed, "duration": sc.duration}))
        # Longest first so the pool ends together.
        out.sort(key=lambda j: -j.meta["duration"])
        return out

    def matrix_jobs(self, versions: list[int], modes: list[str], quick: bool) -> list[Job]:
        """The matrix split into chunks of versions of similar cost (longest first)."""
        cost = {v: len(matrix.cells([v], modes, quick=quick)) for v in versions}
        n_chunks = max(1, min(len(versions), self.jobs * 3))
        chunks: list[list[int]] = [[] for _ in range(n_chunks)]
        load = [0] * n_chunks
        for v in sorted(versions, key=lambda v: -cost[v]):
            i = load.index(min(load))
            chunks[i].append(v)
            load[i] += cost[v]
        jobs = []
        for chunk, c in sorted(zip(chunks, load), key=lambda x: -x[1]):
            if not chunk or not c:
                continue
            vs = ",".join(map(str, sorted(chunk)))
            argv = [sys.executable, "-m", "chaos.matrix", "--versions", vs, "--no-real",
                    "--modes", ",".join(modes), "--jsonl"] + (["--quick"] if quick else [])
            jobs.append(Job(f"matrix v{vs}", argv, "matrix", False,
                            {"versions": sorted(chunk), "cells": c}))
        return jobs

    def real_jobs(self, stores: list, modes: list[str], quick: bool, real: bool,
                  roots: list[Path]) -> list[Job]:
        """The matrix over real stores (:mod:`chaos.matrix_real`): one job per store.

        Each child selects the same stores (``--no-real``/``--stores`` as given) and runs only
        its own (``--only-store``), so cell names agree between the gate and the child.
        """
        from .matrix_real import label

        select = ["--no-generated"] + ([] if real else ["--no-real"])
        for root in roots:
            select += ["--stores", str(Path(root).absolute())]
        jobs = []
        for real_store in stores:
            lab = label(real_store)
            argv = [sys.executable, "-m", "chaos.matrix", *select, "--only-store", lab,
                    "--modes", ",".join(modes), "--jsonl"] + (["--quick"] if quick else [])
            expected = [c.name for c in matrix.cells([], modes, quick=quick,
                                                      stores=[real_store])]
            jobs.append(Job(f"matrix {real_store.name}", argv, "matrix", False,
                            {"versions": [], "cells": len(expected), "expected": expected}))
        jobs.sort(key=lambda j: -j.meta["cells"])
        return jobs

    # ------------------------------------------------------------------ running
    def run(self, jobs: list[Job]) -> list[GateRow]:
        """Run every job (``--jobs`` at once; exclusive ones alone) and collect the rows."""
        (self.out / "logs").mkdir(parents=True, exist_ok=True)
        slots = _Slots(self.jobs)
        done = [0]

        def work(job: Job) -> None:
            slots.acquire(job.exclusive)
            try:
                if self.stopping:
                    return
                rows = self._run_job(job)
            finally:
                slots.release(job.exclusive)
            with self.lock:
                self.rows.extend(rows)
                done[0] += 1
                bad = [r for r in rows if r.status != PASS]
                status = PASS if not bad else bad[0].status
                style = STATUS_STYLE.get(status, "bold red")
                extra = f" ({len(bad)} of {len(rows)} rows not PASS)" if len(rows) > 1 and bad \
                    else ""
                self.console.print(f"[{done[0]:3}/{len(jobs)}] [{style}]{status:12}[/] "
                                   f"{job.label}{extra}", highlight=False)

        run_parallel(jobs, work, self.jobs, self.stop)
        return self.rows

    def stop(self) -> None:
        """SIGTERM every running child (a chaos run stops its roles on SIGTERM)."""
        self.stopping = True
        with self.lock:
            procs = list(self.procs)
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGTERM)
                except ProcessLookupError:
                    pass
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def _run_job(self, job: Job) -> list[GateRow]:
        log = self.out / "logs" / f"{names.derive(job.label)}.log"  # any label: one component
        t0 = time.monotonic()
        with open(log, "w") as err:
            proc = subprocess.Popen(job.argv, stdout=subprocess.PIPE, stderr=err, text=True,
                                    cwd=os.getcwd())
            with self.lock:
                self.procs.add(proc)
            try:
                stdout, _ = proc.communicate(timeout=JOB_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGTERM)
                stdout, _ = proc.communicate()
                stdout += f"\n(gate: no result within {JOB_TIMEOUT_S:g}s: SIGTERM)"
            finally:
                with self.lock:
                    self.procs.discard(proc)
        seconds = round(time.monotonic() - t0, 3)
        if job.kind == "scenario":
            return [_scenario_row(job, proc.returncode, stdout, seconds, log)]
        return _matrix_rows(job, proc.returncode, stdout, seconds, log)


def _tail(path: Path, n: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return ""


def _scenario_row(job: Job, code: int, stdout: str, seconds: float, log: Path) -> GateRow:
    row = GateRow("scenario", job.meta["file"], f"seed{job.meta['seed']}", ERROR,
                  seconds=seconds)
    results = None
    for line in reversed(stdout.strip().splitlines()):
        try:
            results = json.loads(line)
            break
        except ValueError:
            continue
    if code in (0, 1) and isinstance(results, dict):
        row.run_dir = results.get("run_dir")
        verdicts = results.get("verdicts", [])
        bad = [v for v in verdicts if v.get("status") not in ("PASS", "SKIPPED")]
        if code == 0 and not bad:
            row.status = PASS
            row.summary = f"{len(verdicts)} checkers passed"
        else:
            statuses = {v["status"] for v in bad}
            row.status = FAIL if FAIL in statuses or not bad else INCONCLUSIVE
            row.summary = "; ".join(f"{v['checker']} {v['status']}: {v.get('summary', '')}"
                                    for v in bad) or f"exit {code}"
            row.details = json.dumps(bad, indent=2, default=str)[:20000] + \
                f"\nrun directory: {row.run_dir}"
        return row
    row.summary = {2: "invalid scenario", 3: "the toolkit failed"}.get(
        code, f"exit {code}") + f" (log {log})"
    row.details = _tail(log)
    return row


def _matrix_rows(job: Job, code: int, stdout: str, seconds: float, log: Path) -> list[GateRow]:
    rows, seen = [], set()
    for line in stdout.splitlines():
        try:
            d = json.loads(line)
        except ValueError:
            continue
        if not isinstance(d, dict) or "name" not in d:
            continue
        seen.add(d["name"])
        version, _, cell = d["name"].partition("/")
        rows.append(GateRow("matrix", f"matrix.{version}", cell, d["status"],
                            summary="; ".join(d["problems"][:3]) if d["problems"] else
                            ", ".join(f"{k} {v}" for k, v in d["figures"].items()),
                            details="\n".join(d["problems"]), seconds=d["seconds"]))
    expected = job.meta.get("expected") or [c.name for c in matrix.cells(
        job.meta["versions"], _modes_of(job.argv), quick="--quick" in job.argv)]
    for cell_name in expected:
        if cell_name not in seen:
            version, _, name = cell_name.partition("/")
            rows.append(GateRow("matrix", f"matrix.{version}", name, ERROR,
                                summary=f"no verdict: the matrix job exited {code} (log {log})",
                                details=_tail(log), seconds=0.0))
    return rows


def _modes_of(argv: list[str]) -> list[str]:
    return argv[argv.index("--modes") + 1].split(",")


# ---------------------------------------------------------------------- reporting

def verdict_table(rows: list[GateRow], width: int | None = None) -> Table:
    """Scenario rows one by one; matrix rows summarised per mode, every non-PASS row listed.
    Narrower than :data:`chaos.report.terminal.COMPACT_BELOW` columns (a CI log): light borders,
    and the kind and the time go under the row's name, so the summary keeps its width."""
    narrow = compact(width)
    t = Table(title="chaos gate", show_lines=False,
              **({"box": box.SIMPLE_HEAD, "padding": (0, 1), "pad_edge": False} if narrow
                 else {}))
    cols = ("what", "status", "summary") if narrow else ("kind", "what", "status", "time",
                                                          "summary")
    for col in cols:
        t.add_column(col, overflow="fold", no_wrap=col == "status",
                     ratio=1 if col == "summary" else None, min_width=16 if col == "summary"
                     else None)

    def t_add(kind: str, what: str, status: str, secs: str, summary: str) -> None:
        what, summary = markup_safe(what), markup_safe(summary)  # texts of any content
        if narrow:
            t.add_row(f"{what}\n[dim]{kind}, {secs}[/]", status, summary)
        else:
            t.add_row(kind, what, status, secs, summary)

    def styled(status: str) -> str:
        return f"[{STATUS_STYLE.get(status, 'bold red')}]{status}[/]"

    for r in sorted((r for r in rows if r.kind == "scenario"), key=lambda r: (r.suite, r.name)):
        t_add("scenario", f"{r.suite} {r.name}", styled(r.status), f"{r.seconds:.1f}s",
              r.summary)
    by_mode: dict[tuple[bool, str], list[GateRow]] = {}
    for r in rows:
        if r.kind == "matrix":
            real = r.suite.startswith("matrix.real.")
            by_mode.setdefault((real, r.name.split("@")[0]), []).append(r)
    for real, mode in [(False, m) for m in matrix.MODES] + [
            (True, m) for m in (*matrix.MODES, matrix.SKIP_MODE)]:
        group = by_mode.get((real, mode), [])
        if not group:
            continue
        ok = sum(1 for r in group if r.status == PASS)
        status = PASS if ok == len(group) else FAIL
        if mode == matrix.SKIP_MODE:  # stores that could not be tested: counted apart
            status = SKIPPED
        if real:
            what = f"real stores {mode} ({len(group)} cells, {len({r.suite for r in group})} stores)"
        else:
            versions = sorted({int(r.suite.split(".v")[1]) for r in group})
            what = f"{mode} ({len(group)} cells, v{versions[0]}-v{versions[-1]})"
        t_add("matrix", what, styled(status), f"{sum(r.seconds for r in group):.1f}s",
              f"{ok}/{len(group)} PASS")
        for r in group:
            if r.status != PASS:
                t_add("matrix", f"{r.suite[7:]}/{r.name}", styled(r.status),
                      f"{r.seconds:.1f}s", r.summary)
    return t


def write_junit(path: Path, rows: list[GateRow], total_s: float) -> None:
    """JUnit XML: one ``testsuite`` per scenario file / matrix version, one ``testcase`` per row.

    FAIL and INCONCLUSIVE rows carry a ``failure`` (``type`` = the status), ERROR rows an
    ``error``; the element's ``message`` is the one-line summary, its text the details.
    """
    root = ET.Element("testsuites", name="chaos gate", tests=str(len(rows)),
                      failures=str(sum(r.status in (FAIL, INCONCLUSIVE) for r in rows)),
                      errors=str(sum(r.status == ERROR for r in rows)), time=f"{total_s:.3f}")
    suites: dict[str, list[GateRow]] = {}
    for r in rows:
        suites.setdefault(r.suite, []).append(r)
    for name, group in suites.items():
        s = ET.SubElement(root, "testsuite", name=name, tests=str(len(group)),
                          failures=str(sum(r.status in (FAIL, INCONCLUSIVE) for r in group)),
                          errors=str(sum(r.status == ERROR for r in group)),
                          time=f"{sum(r.seconds for r in group):.3f}")
        for r in group:
            prefix = "chaos.scenarios." if r.kind == "scenario" else "chaos."
            case = ET.SubElement(s, "testcase", classname=prefix + name, name=r.name,
                                 time=f"{r.seconds:.3f}")
            if r.status in (FAIL, INCONCLUSIVE):
                el = ET.SubElement(case, "failure", message=r.summary[:1000], type=r.status)
                el.text = r.details or r.summary
            elif r.status == ERROR:
                el = ET.SubElement(case, "error", message=r.summary[:1000], type=ERROR)
                el.text = r.details or r.summary
            if r.run_dir:
                ET.SubElement(case, "system-out").text = f"run directory: {r.run_dir}"
    ET.indent(root)
    path.parent.mkdir(parents=True, exist_ok=True)
    ET.ElementTree(root).write(path, encoding="utf-8", xml_declaration=True)


def run_gate(scenarios: list, *, seeds: int = 1, quick: bool = False, with_matrix: bool = True,
             versions: list[int] | None = None, modes: list[str] | None = None,
             jobs: int | None = None, out: Path | None = None, junit: Path | None = None,
             console: Console | None = None, real: bool = True,
             stores: list[Path] | None = None, as_json: bool = False) -> int:
    """Run the gate over ``scenarios`` (validated :class:`chaos.scenario.Scenario` objects).

    Args:
        scenarios: the scenarios to run (each ``seeds`` times, seeds ``seed .. seed+seeds-1``).
        seeds: K >= 1.
        quick: the matrix's quick subset (:func:`chaos.matrix.cells`).
        with_matrix: include the schema-migration matrix.
        versions, modes: matrix selection (default: all versions 1-22, every mode; ``[]``
            versions = no generated fixtures).
        real: include the bundled stores written by real upstream code.
        stores: directories of a user's own stores, each store in every mode.
        jobs: child processes at once (default: the core count).
        out: where ``runs/`` and ``logs/`` go (default ``runs/gate-<UTCSTAMP>``).
        junit: write JUnit XML there.
        console: where progress and the table go (default: stdout; stderr with ``as_json``).
        as_json: print the rows as one JSON object on stdout (``{"rows": [...], "passed",
            "not_passed", "seconds", "exit_code", "out"}``) after the table.
    Returns:
        0 when every row passed, else 1.
    """
    console = console or Console(stderr=as_json)
    jobs = jobs or os.cpu_count() or 1
    out = (out or Path(store.DEFAULT_OUT) / f"gate-{utc_stamp()}").absolute()
    t0 = time.monotonic()
    gate = Gate(out, jobs, console)
    plan = gate.scenario_jobs(scenarios, seeds)
    if with_matrix:
        modes = modes or list(matrix.MODES)
        plan += gate.matrix_jobs(list(matrix.OLD_VERSIONS) if versions is None else versions,
                                 modes, quick)
        from . import real_stores as rs

        found = rs.fixture_stores() if real else []
        for root in stores or ():
            found += rs.discover(root, f"stores/{Path(root).name}/")
        plan += gate.real_jobs(found, modes, quick, real, list(stores or ()))
    console.print(f"chaos gate: {len(scenarios)} scenario(s) × {seeds} seed(s)"
                  + (f" + schema-migration matrix{' (quick)' if quick else ''}" if with_matrix
                     else "") + f", {len(plan)} jobs, {jobs} at once; output {out}",
                  highlight=False)
    rows = gate.run(plan)
    total = time.monotonic() - t0
    console.print(verdict_table(rows, console.width))
    if junit:
        write_junit(Path(junit), rows, total)
        console.print(f"JUnit XML: {junit}", highlight=False)
    n_pass = sum(r.status == PASS for r in rows)
    n_skip = sum(r.status == SKIPPED for r in rows)  # a store that is not one: counted apart
    n_bad = len(rows) - n_pass - n_skip
    console.print(f"gate: {n_pass} rows passed, {n_bad} not"
                  + (f", {n_skip} skipped" if n_skip else "")
                  + f", in {total:.1f}s total ({'PASS' if not n_bad else 'FAIL'})",
                  highlight=False)
    code = 0 if n_bad == 0 and rows else 1
    if as_json:
        print(json.dumps({"rows": [asdict(r) for r in rows], "passed": n_pass,
                          "not_passed": n_bad, "seconds": round(total, 3), "exit_code": code,
                          "out": str(out)}, default=str))
    return code


# ---------------------------------------------------------------------- command line

def add_subcommand(sub) -> None:
    """Register ``gate`` on the ``python -m chaos`` subparsers."""
    p = sub.add_parser("gate", help="every scenario (K seeds) plus the schema-migration matrix; "
                       "exit 0 only if all pass")
    p.add_argument("--junit", type=Path, default=None, help="write JUnit XML to this file")
    p.add_argument("--seeds", type=_positive, default=1, help="seeds per scenario (default 1)")
    p.add_argument("--jobs", type=_positive, default=None,
                   help="child processes at once (default: the core count)")
    p.add_argument("--scenarios", type=Path, default=Path("scenarios"),
                   help="directory of scenario files (default scenarios/)")
    p.add_argument("--out", type=Path, default=None,
                   help="where run directories and logs go (default runs/gate-<UTCSTAMP>)")
    p.add_argument("--no-matrix", dest="matrix", action="store_false",
                   help="scenarios only")
    p.add_argument("--no-scenarios", dest="with_scenarios", action="store_false",
                   help="the matrix only")
    p.add_argument("--json", action="store_true",
                   help="print the rows as one JSON object on stdout (progress on stderr)")
    p.add_argument("--audit", action="store_true",
                   help="instead: run the mutant catalogue against the `ci` scenarios "
                   "(python -m chaos audit --tag ci; exit 0 only if every mutant is killed)")
    p.add_argument("--mutants", type=Path, default=None,
                   help="with --audit: directory of mutant files (default chaos/mutants)")
    matrix.add_arguments(p)


def _positive(text: str) -> int:
    import argparse

    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return value


def cmd_gate(args, load_all, err: Console) -> int:
    """``python -m chaos gate``: validate every scenario file (exit 2 if any is invalid), run."""
    if not args.with_scenarios and not args.matrix:
        err.print("[red]chaos gate: --no-scenarios with --no-matrix leaves nothing to run[/]")
        return 2
    files = sorted(args.scenarios.glob("*.yaml")) if args.with_scenarios else []
    if args.with_scenarios and not files:
        err.print(f"[red]chaos gate: no scenario files in {args.scenarios}[/]", highlight=False)
        return 2
    scenarios, bad = load_all(files, err)
    if bad:
        return 2
    needs_fn = [sc for sc in scenarios if any(r.kind == "callable" for r in sc.roles)]
    for sc in needs_fn:
        err.print(f"chaos gate: {sc.source} left out: it has callable roles (a test runs it "
                  "with run_scenario(..., roles={...}))", highlight=False)
    scenarios = [sc for sc in scenarios if sc not in needs_fn]
    if args.matrix:
        try:
            matrix.real_stores_of(args)
        except Exception as exc:  # noqa: BLE001 - a bad --stores is a usage error
            err.print(f"[red]chaos gate: {exc}[/]", highlight=False)
            return 2
    return run_gate(scenarios, seeds=args.seeds, quick=args.quick, with_matrix=args.matrix,
                    versions=args.versions if args.generated else [], modes=args.modes,
                    jobs=args.jobs, out=args.out, junit=args.junit, real=args.real,
                    stores=args.stores, as_json=args.json)
