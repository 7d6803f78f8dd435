"""``python -m chaos gate``: the regression gate before a schema bump (SPEC §16.5, §16.6).

Runs every ``scenarios/*.yaml`` (``--seeds K``: seeds ``seed .. seed+K-1`` of each) and the
schema-migration matrix (:mod:`chaos.matrix`), prints a verdict table, a short summary of the
rows that did not pass (each with its one-line reason and run directory) and a final line with
the counts and the total time, and optionally writes JUnit XML (one ``testcase`` per scenario ×
seed and per matrix row; :mod:`chaos.report.gate`). A scenario row that was INCONCLUSIVE, or
FAILed only by a wall-clock bound (:data:`chaos.checkers.TIMING_BOUND`), runs once more: FLAKY
when the rerun passes (both results shown), else the worse of the two; any other FAIL stands
(:func:`rerun_reason`). A run whose checkers were all SKIPPED is a SKIPPED row, counted apart.
Exit 0 when no row failed (flaky and skipped rows included) and something was tested; 1 when any
row failed, was INCONCLUSIVE or errored; 4 when every row was SKIPPED; 2 when a scenario file is
invalid (nothing runs); 3 when the toolkit itself failed.

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
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from hermes_state.testing import utc_stamp

from . import matrix, store
from .checkers import TIMING_BOUND
from .files import names
from .report.gate import (
    ERROR,
    FAIL,
    FLAKY,
    INCONCLUSIVE,
    PASS,
    SKIPPED,
    GateRow,
    combine,
    final_line,
    gate_status,
    short_summary,
    styled,
    write_junit,
)
from .report.gate import verdict_table as _table
from .sampler import measure

__all__ = ["GateRow", "Job", "rerun_reason", "rerun_reason_for", "run_gate", "verdict_table",
           "write_junit"]
#: Hang guard for one job (s): a scenario run or a matrix chunk stuck this long is an ERROR.
JOB_TIMEOUT_S = 1800.0


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
        """The matrix over real stores (:mod:`chaos.matrix.real`): one job per store.

        Each child selects the same stores (``--no-real``/``--stores`` as given) and runs only
        its own (``--only-store``), so cell names agree between the gate and the child.
        """
        from .matrix.real import label

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
                rows = [self._rerun(job, r) if rerun_reason(r) and not self.stopping else r
                        for r in rows]
            finally:
                slots.release(job.exclusive)
            with self.lock:
                self.rows.extend(rows)
                done[0] += 1
                bad = [r for r in rows if r.status != PASS]
                status = PASS if not bad else bad[0].status
                extra = f" ({len(bad)} of {len(rows)} rows not PASS)" if len(rows) > 1 and bad \
                    else ""
                self.console.print(f"[{done[0]:3}/{len(jobs)}] {styled(status)}"
                                   f"{' ' * max(1, 13 - len(status))}{escape(job.label)}{extra}",
                                   highlight=False)

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

    def _rerun(self, job: Job, row: GateRow) -> GateRow:
        """Run a scenario row's job once more (:func:`rerun_reason`) and combine both results
        (:func:`chaos.report.gate.combine`: FLAKY if the rerun passed, else the worse)."""
        with self.lock:
            self.console.print(f"      rerun {escape(row.label)}: {rerun_reason(row)} "
                               f"({escape(row.summary[:200])})", highlight=False, style="dim")
        again = self._run_job(job, attempt=2)
        return combine(row, again[0]) if again else row

    def _run_job(self, job: Job, attempt: int = 1) -> list[GateRow]:
        rerun = "" if attempt == 1 else f".rerun{attempt}"
        log = self.out / "logs" / f"{names.derive(job.label)}{rerun}.log"  # any label: one name
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


def verdict_table(rows: list[GateRow], width: int | None = None):
    """The gate's verdict table (:func:`chaos.report.gate.verdict_table`), matrix modes in the
    matrix's order."""
    return _table(rows, width, matrix.MODES)


def rerun_reason(row: GateRow) -> str | None:
    """Why a row is run once more (issue 27 item 5), or None: a scenario row that was
    INCONCLUSIVE (the run may not have reached its state on a loaded machine), or FAILed only
    by checkers whose bound is wall-clock time (:data:`chaos.checkers.TIMING_BOUND`). A FAIL of
    any other checker (lost writes, integrity, ...) is never rerun: it stands."""
    if row.kind != "scenario":
        return None
    return rerun_reason_for(row.status, row.failed_checkers)


def rerun_reason_for(status: str, failed_checkers: list[str]) -> str | None:
    """:func:`rerun_reason` for one scenario run's ``status`` and its FAILed checkers (the
    audit judges its runs by the same rule: a timing-bound kill is believed only once a rerun
    fails too). Returns the reason, or None when the result stands."""
    if status == INCONCLUSIVE:
        return "INCONCLUSIVE: run once more"
    if status == FAIL and failed_checkers and set(failed_checkers) <= TIMING_BOUND:
        return f"timing-bound FAIL ({', '.join(failed_checkers)}): run once more"
    return None


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
    if code in (0, 1, 4) and isinstance(results, dict):
        row.run_dir = results.get("run_dir")
        row.load_factor = (results.get("load") or {}).get("factor")
        verdicts = results.get("verdicts", [])
        bad = [v for v in verdicts if v.get("status") not in ("PASS", "SKIPPED")]
        row.failed_checkers = sorted({str(v.get("checker")) for v in bad
                                      if v.get("status") == FAIL})
        if code == 4 and not bad:
            row.status = SKIPPED
            row.summary = f"every checker SKIPPED: {results.get('skipped') or '?'}"
            row.details = f"{row.summary}\nrun directory: {row.run_dir}"
        elif code == 0 and not bad:
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
        0 when no row failed and something was tested (FLAKY and SKIPPED rows are listed, not
        red), 4 when every row was SKIPPED, else 1.
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
        from .matrix import real_stores as rs

        found = rs.fixture_stores() if real else []
        for root in stores or ():
            found += rs.discover(root, f"stores/{Path(root).name}/")
        plan += gate.real_jobs(found, modes, quick, real, list(stores or ()))
    load = measure("gate start")
    console.print(f"chaos gate: {len(scenarios)} scenario(s) × {seeds} seed(s)"
                  + (f" + schema-migration matrix{' (quick)' if quick else ''}" if with_matrix
                     else "") + f", {len(plan)} jobs, {jobs} at once; output {out}; machine "
                  f"load: {load['ratio']:g} s wall per CPU second, loadavg/cpu "
                  f"{load['loadavg_per_cpu']}", highlight=False, markup=False)
    rows = gate.run(plan)
    total = time.monotonic() - t0
    console.print(verdict_table(rows, console.width))
    if junit:
        write_junit(Path(junit), rows, total)
        console.print(f"JUnit XML: {junit}", highlight=False, markup=False)
    for line in short_summary(rows):
        console.print(line, soft_wrap=True)
    console.print(final_line(rows, total), soft_wrap=True)
    status = gate_status(rows)
    code = {PASS: 0, SKIPPED: 4}.get(status, 1)
    if as_json:
        n_pass = sum(r.status in (PASS, FLAKY) for r in rows)
        n_skip = sum(r.status == SKIPPED for r in rows)  # counted apart, never as passed
        print(json.dumps({"rows": [asdict(r) for r in rows], "passed": n_pass,
                          "skipped": n_skip, "not_passed": len(rows) - n_pass - n_skip,
                          "verdict": status,
                          "seconds": round(total, 3), "exit_code": code, "out": str(out),
                          "load_at_start": load}, default=str))
    return code


# ---------------------------------------------------------------------- command line

def cmd_gate(args, load_all, err: Console) -> int:
    """``python -m chaos gate``: validate every scenario file (exit 2 if any is invalid), run."""
    if not args.with_scenarios and not args.matrix:
        err.print("[red]chaos gate: --no-scenarios with --no-matrix leaves nothing to run[/]")
        return 2
    files = sorted(args.scenarios.glob("*.yaml")) if args.with_scenarios else []
    if args.with_scenarios and not files:
        err.print(f"[red]chaos gate: no scenario files in {escape(str(args.scenarios))}[/]",
                  highlight=False)
        return 2
    scenarios, bad = load_all(files, err)
    if bad:
        return 2
    needs_fn = [sc for sc in scenarios if any(r.kind == "callable" for r in sc.roles)]
    for sc in needs_fn:
        err.print(f"chaos gate: {sc.source} left out: it has callable roles (a test runs it "
                  "with run_scenario(..., roles={...}))", highlight=False, markup=False)
    scenarios = [sc for sc in scenarios if sc not in needs_fn]
    if args.matrix:
        try:
            matrix.real_stores_of(args)
        except Exception as exc:  # noqa: BLE001 - a bad --stores is a usage error
            err.print(f"[red]chaos gate: {escape(str(exc))}[/]", highlight=False)
            return 2
    return run_gate(scenarios, seeds=args.seeds, quick=args.quick, with_matrix=args.matrix,
                    versions=args.versions if args.generated else [], modes=args.modes,
                    jobs=args.jobs, out=args.out, junit=args.junit, real=args.real,
                    stores=args.stores, as_json=args.json)
