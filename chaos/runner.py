"""The run loop (SPEC §16.5): spawn roles, fire the nemesis schedule, collect the history, check.

Data flows one way: scenario → runner (roles + nemesis) → history → checkers → report. The
runner never judges; checkers never run processes.

Phases (SPEC §16.3), each recorded in the history as a ``phase`` record: ``warm-up`` (from the
start to the first fault), ``chaos`` (faults fire), ``heal`` (at ``phases.heal_at``, default the
end of ``duration``: every action of ``chaos.nemesis.HEALS`` runs — SIGCONT every process, free
the disk — and the record carries what each did; roles keep running until ``duration``), then
the roles are stopped (SIGCONT, SIGTERM, SIGKILL what does not exit within :data:`STOP_GRACE_S`)
and ``recover`` (final store snapshot, checkers). The chaos phase ends early when every role
process has exited and nothing (role start, nemesis step) is left to happen.

Role processes are launched before the run's clock starts and released at their ``start_at``
(:mod:`chaos.roles.gate`); so are the processes the ``restart`` steps will start, released by the
restart: a loaded machine's interpreter start-up never eats a scenario's timeline.

Scheduling (``at``/``after``) lives in :mod:`chaos.schedule`. Restarts (``restart`` fault) start
a new :class:`RoleInstance` in the same slot under a fresh process name. Every role process
runs with ``HERMES_STATE_FAILPOINTS_FILE`` naming its own arm file under ``failpoints/`` so a
nemesis step can arm a failpoint in it at run time (:mod:`chaos.nemesis.process`).
"""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from hermes_state import failpoints
from hermes_state.testing import exposure_line, wal_reset_exposure

from . import fixtures, role_start, store
from .fs import FaultyMount, FsUnavailable, read_fs_log
from . import history as hist
from .checkers import CheckContext, run_checkers
from .checkers.base import SKIPPED, Verdict, outcome_fields
from .checkers.observed import run_verdicts
from .nemesis import FAULTS, HEALS, NemesisEnv, NemesisError
from .nemesis.base import open_pidfd, signal_instance
from .nemesis.commands import command_argv
from .params import as_dict, build
from .report import print_verdicts
from .report.terminal import markup_safe
from .roles import ROLES, role_main
from .roles.gate import GATE_LOST_EXIT, READY_GUARD_S, await_ready, discard, release
from .roles.python_callable import check_bindings, spawn_context
from .sampler import Sampler, measure
from .scenario import NemesisStep, RoleSpec, Scenario
from .schedule import Counts, Schedule, reached

TICK_S = 0.02
STOP_GRACE_S = 5.0
NATURAL_EXIT_S = 2.0

_MP = role_start.context()  # SPEC §16.1: never forked from a holder (role_start.py)


@dataclass
class RoleInstance:
    """One OS process playing one instance of a role."""

    spec: RoleSpec
    index: int  # the slot (0 <= index < count); a restart starts a new instance in the same slot
    process: str
    proc: multiprocessing.process.BaseProcess | None = None
    exit_recorded: bool = False
    term_sent: bool = False
    generation: int = 0  # 0: started by the scenario; k: the k-th restart of the slot
    replaces: str | None = None  # the process this restart replaced
    failpoints_file: str = ""  # HERMES_STATE_FAILPOINTS_FILE of the process (run-time arming)
    history_file: str = ""  # set at spawn: history/<process>.jsonl
    gate: multiprocessing.connection.Connection | None = None  # start gate until released
    pidfd: int | None = None  # signals go through it (nemesis.base.signal_instance)
    said_ready: bool = False  # the process reported ready on its gate (released only then)

    @property
    def role(self) -> str:
        return self.spec.name

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc is not None else None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.exitcode is None and self.proc.is_alive()

    def ready(self) -> bool:
        """True once the process wrote its first history record (its SIGTERM handler is set:
        a SIGTERM before that would kill it with the default action, not shut it down)."""
        try:
            return bool(self.history_file) and os.path.getsize(self.history_file) > 0
        except OSError:
            return False


class HistoryTail:
    """Reads the role history files as they grow: counts for ``after:`` triggers and progress."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._tail = hist.JsonlTail(directory, skip=(store.history_file(store.RUNNER_PROCESS),
                                                     store.history_file(store.SAMPLER_PROCESS)))
        self.ok_by_role_op: dict[tuple[str, str], int] = {}
        self.roles: dict[str, str] = {}  # process -> role (filled by the runner at spawn)
        self.seen = Counts()
        self.counts = {"ok": 0, "fail": 0, "info": 0, "retry": 0, "refusal": 0, "capture": 0,
                       "checkpoint": 0}
        self.new_notes: list[str] = []

    def poll(self) -> None:
        for rec in self._tail.new_records():
            self._count(rec)

    def _count(self, rec: dict) -> None:
        proc = rec.get("process", "")
        self.seen.add_record(rec, self.roles.get(proc) or proc.rsplit("-", 1)[0])
        typ = rec.get("type")
        if typ in ("ok", "fail", "info"):
            self.counts[typ] += 1
            if typ == "ok":
                role = rec.get("process", "").rsplit("-", 1)[0]
                key = (role, rec.get("op", ""))
                self.ok_by_role_op[key] = self.ok_by_role_op.get(key, 0) + 1
            elif rec.get("op") == "open":
                self.new_notes.append(f"{rec.get('process')} open refused: {rec.get('error')}")
        elif typ == "event":
            ev = rec.get("event")
            if ev in self.counts:
                self.counts[ev] += 1
            if ev in ("refusal", "capture", "write_gave_up", "failpoint"):
                detail = rec.get("dir") or rec.get("reason") or ""
                if ev == "failpoint":
                    detail = f"{rec.get('name')}={rec.get('action')} at hit {rec.get('hit')}"
                self.new_notes.append(f"{rec.get('process')} {ev} {detail}")


def preflight(scenario: Scenario, run_dir: Path) -> None:
    """Derive, without starting anything, every input the run gives its parts: each role's
    typed workload as its process rebuilds it, each maintenance command's argv (paths checked
    against ``run_dir``), each fault's typed parameters and failpoint spec, the schedule's
    triggers, the store fixture. The runner calls it first; a scenario that validates must pass
    it (issue 11: what ``validate`` accepts, ``run`` can execute).

    Raises:
        ValueError, KeyError, TypeError: an input the run could not use (a toolkit defect:
            validation should have refused the scenario).
    """
    run = store.RunDir(Path(run_dir))
    restarts = {s.params.role: 0 for s in scenario.nemesis if s.fault == "restart"}
    for s in scenario.nemesis:
        if s.fault == "restart":
            restarts[s.params.role] += 1 if s.params.index is not None else \
                scenario.role(s.params.role).count
    for spec in scenario.roles:
        for n in range(spec.count + restarts.get(spec.name, 0)):  # every process's files
            process = f"{spec.name}-{n}"
            run.process_history(process), run.log(process), run.arm_file(process)
        workload = build(ROLES[spec.kind].Params, as_dict(spec.workload))
        if spec.failpoints:
            failpoints.parse(spec.failpoints)
        if spec.kind == "maintenance":
            command_argv(workload.command, run.home, run.db_path, force=workload.force,
                         dry_run=workload.dry_run, args=list(workload.args))
    for step in scenario.nemesis:
        fault = FAULTS[step.fault]
        params = build(fault.Params, as_dict(step.params))
        if step.fault == "run":
            command_argv(params.command, run.home, run.db_path, force=params.force,
                         dry_run=params.dry_run, args=list(params.args))
        elif step.fault == "kill" and params.failpoint:
            failpoints.parse(f"{params.failpoint}=crash@{params.hit or 1}")
        elif step.fault == "arm_failpoint":
            failpoints.parse(f"{params.failpoint}={params.action}")
        if step.after is not None:
            reached(step.after, Counts())
    if not fixtures.is_fixture_name(scenario.store["fixture"]):
        raise ValueError(f"unknown store fixture {scenario.store['fixture']!r}")
    if scenario.store.get("tmpfs"):
        fixtures.parse_size(scenario.store["tmpfs"])
    Schedule(scenario.nemesis).due(0.0, Counts())


def upstream_missing(scenario: Scenario) -> str | None:
    """Why the run cannot start its ``upstream`` roles (a release not in the cache, with the
    command that fetches it), or None (issue 23: no network at run time)."""
    from hermes_state.testing import upstream_release

    for spec in scenario.roles:
        if spec.upstream is not None and upstream_release.cached(spec.upstream.version) is None:
            return str(upstream_release.NotCached(spec.upstream.version))
    return None


def header(scenario: Scenario) -> str:
    """The run's first line (rich markup): name, seed, duration and the description, whatever
    the description holds (control characters escaped, ``[`` kept as text)."""
    return (f"[bold]{scenario.name}[/] seed {scenario.seed}, {scenario.duration:g}s: "
            f"{markup_safe(scenario.description)}")


@dataclass
class RunResult:
    """Outcome of one run: where it was written, the verdicts and the process exit code."""

    run_dir: Path
    verdicts: list
    exit_code: int
    results: dict = field(default_factory=dict)


def _close_pidfd(inst: RoleInstance) -> None:
    if inst.pidfd is not None:
        fd, inst.pidfd = inst.pidfd, None
        if fd >= 0:  # not GONE
            os.close(fd)


class Runner:
    """Runs one scenario once. Use :func:`run_scenario`."""

    def __init__(self, scenario: Scenario, run_dir: Path, console: Console,
                 functions: dict | None = None) -> None:
        self.sc = scenario
        #: the test's functions of the ``callable`` roles, checked (issue 16 item 6)
        self.functions = check_bindings({r.name: r.kind for r in scenario.roles}, functions)
        self.run_dir = run_dir
        self.dirs = store.RunDir(run_dir)
        self.console = console
        self.home = self.dirs.home
        self.db_path = self.dirs.db_path
        self.hist_dir = self.dirs.history_dir
        self.log_dir = self.dirs.logs
        self.instances: list[RoleInstance] = []
        self.t0 = 0.0
        self.sampler: Sampler | None = None
        self.mount: fixtures.Mount | None = None
        self.fs: FaultyMount | None = None
        self.writer: hist.HistoryWriter | None = None
        self.tail: HistoryTail | None = None
        self._numbers: dict[str, int] = {}  # role -> next process number for a restart
        self.launched: list[RoleInstance] = []  # started before the clock, released at start_at
        self._standby: dict[str, list[RoleInstance]] = {}  # role -> processes its restarts use

    # ------------------------------------------------------------------ helpers
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def say(self, text: str) -> None:
        """One progress line; ``text`` is rich markup whose every value from the run was escaped
        (``rich.markup.escape``) where the line was built."""
        self.console.print(f"[dim]{self.elapsed():7.2f}s[/] {text}", highlight=False)

    def _prepare_store(self) -> dict:
        """Mount the store's tmpfs if asked, write the fixture (chaos/fixtures.py, SPEC §16.4).

        Raises:
            fixtures.TmpfsUnavailable: the tmpfs cannot be mounted (the run is SKIPPED).
            chaos.fs.FsUnavailable: the faulty filesystem cannot be mounted (SKIPPED too).
        """
        store = self.sc.store
        swept = fixtures.sweep_stale_tmpfs() if os.geteuid() == 0 else []  # dead runs' mounts
        if store.get("tmpfs"):
            self.mount = fixtures.mount_tmpfs(self.home, fixtures.parse_size(store["tmpfs"]))
        if self.sc.fs:
            self.fs = FaultyMount(self.dirs.fs_backing, self.home, self.dirs.fs_log).start()
        need_backup = any(s.fault == "replace_db" and s.params.source == "backup"
                          for s in self.sc.nemesis)
        details = fixtures.prepare_store(store, self.db_path, seed=self.sc.seed,
                                         need_backup=need_backup)
        if swept:
            details = {**details, "swept_tmpfs": swept}
        if self.fs is not None:  # the machine boots with the fixture on its disk
            details = {**details, "fs": {"backing": str(self.fs.backing),
                                         "log": str(self.fs.log_path), **self.fs.control.sync()}}
        return details

    def release_store(self) -> None:
        """Unmount the store's tmpfs (its files are copied into the run directory first) or the
        faulty filesystem (its backing directory stays in the run directory)."""
        if self.fs is not None:
            fs, self.fs = self.fs, None
            fs.close()
        if self.mount is not None:
            mount, self.mount = self.mount, None
            mount.unmount()

    def _skipped(self, reason: str) -> RunResult:
        """Every checker SKIPPED with ``reason`` (SPEC §16.3): a requirement is unmet. The
        run is SKIPPED (exit 4, never a pass) and still writes ``report.html``."""
        verdicts = [Verdict(name, SKIPPED, reason, {"reason": reason}, [])
                    for name in self.sc.expect]
        results = {"scenario": self.sc.name, "seed": self.sc.seed, "run_dir": str(self.run_dir),
                   "duration_s": self.sc.duration, "sqlite": sqlite3.sqlite_version,
                   **outcome_fields(verdicts), "skipped": reason,
                   "verdicts": [v.to_dict() for v in verdicts], "processes": []}
        hist.write_merged([], self.dirs.history)
        store.write_results(self.dirs.results, results)
        self.console.print(f"[yellow]SKIPPED: {markup_safe(reason)}[/]")
        self._write_report()
        return RunResult(self.run_dir, verdicts, results["exit_code"], results)

    def _launch(self, inst: RoleInstance) -> None:
        """Start ``inst``'s process behind its start gate: it sets itself up, reports ready and
        waits for :meth:`_release` (which sends the run's clock and its deadline)."""
        spec = inst.spec
        self.dirs.failpoints.mkdir(exist_ok=True)
        inst.failpoints_file = str(self.dirs.arm_file(inst.process))
        inst.history_file = str(self.dirs.process_history(inst.process))
        cfg = {
            "role": spec.name, "kind": spec.kind, "index": inst.index, "process": inst.process,
            "db_path": str(self.db_path), "home": str(self.home),
            "history_dir": str(self.hist_dir), "log_path": str(self.dirs.log(inst.process)),
            "seed": self.sc.seed, "t0": 0.0, "deadline": 0.0,
            "workload": as_dict(spec.workload), "failpoints": spec.failpoints or "",
            "synchronous": self.sc.store.get("synchronous", "NORMAL"),
            "undumpable": spec.undumpable, "ptrace_cap": spec.ptrace_cap,
            # the longest a launched process waits for its clock (or a discard) once ready
            "start_guard_s": self.sc.duration + READY_GUARD_S + STOP_GRACE_S,
            "upstream": as_dict(spec.upstream) if spec.upstream is not None else None,
            # the runner's, now (a fork server's were taken when it started): the arm file is
            # named there
            "environ": {**os.environ, failpoints.FILE_ENV_VAR: inst.failpoints_file},
            "cwd": os.getcwd(),
        }
        fn = self.functions.get(spec.name)
        if fn is None:
            ours, theirs = _MP.Pipe()
            inst.proc = _MP.Process(target=role_main, args=(cfg, None, theirs),
                                    name=inst.process, daemon=False)
        else:  # the test's function: dill-pickled into a spawned interpreter (multiprocess)
            ctx = spawn_context()
            ours, theirs = ctx.Pipe()
            inst.proc = ctx.Process(target=role_main, args=(cfg, fn, theirs), name=inst.process,
                                    daemon=False)
        try:
            inst.proc.start()
        finally:
            theirs.close()
        inst.pidfd = open_pidfd(inst.proc.pid)
        inst.gate = ours

    def _await_ready(self, insts: list[RoleInstance]) -> None:
        """Wait (bounded: :data:`chaos.roles.gate.READY_GUARD_S`) until every launched process
        of ``insts`` reported ready on its gate, or died starting (its exit is recorded once
        released).

        Raises:
            chaos.roles.gate.RoleStartError: some did neither in time (names them).
        """
        gates = {i.gate: i.process for i in insts if i.gate is not None and not i.said_ready}
        ready = await_ready(gates) if gates else set()
        for inst in insts:
            if inst.gate in ready:
                inst.said_ready = True

    def _release(self, inst: RoleInstance, writer: hist.HistoryWriter) -> None:
        """Let ``inst`` run from now: send the run's ``t0`` and its deadline through its gate,
        after its ``ready`` (waited for here if it has not come yet: every launch path sends the
        clock only to a process that said ready, issue 27)."""
        spec = inst.spec
        if not inst.said_ready:
            self._await_ready([inst])
        self.instances.append(inst)
        if self.tail is not None:
            self.tail.roles[inst.process] = spec.name
        end = spec.stop_at if spec.stop_at is not None else self.sc.duration
        gate, inst.gate = inst.gate, None
        release(gate, {"t0": self.t0, "deadline": self.t0 + end, "index": inst.index})
        extra = ({"generation": inst.generation, "replaces": inst.replaces}
                 if inst.generation else {})
        writer.record("process", phase="spawn", role=spec.name, kind=spec.kind,
                      index=inst.index, child=inst.process, child_pid=inst.proc.pid,
                      process_of=inst.process, **extra)
        again = f" restart #{inst.generation} of slot {inst.index}" if inst.generation else ""
        self.say(f"spawn [bold]{escape(inst.process)}[/] ({escape(spec.kind)}) pid "
                 f"{inst.proc.pid}{again}")

    def _discard(self, launched: list[RoleInstance]) -> None:
        """Discard launched processes never released: they exit (0) without running."""
        unreleased = [i for i in launched if i.gate is not None]
        for inst in unreleased:
            discard(inst.gate)
            inst.gate = None
        for inst in unreleased:
            inst.proc.join(STOP_GRACE_S)
            if inst.proc.exitcode is None:
                inst.proc.kill()
                inst.proc.join(STOP_GRACE_S)

    def _restart(self, role: str, slot: int) -> RoleInstance | None:
        """Start the next instance of ``role``'s ``slot`` (the ``restart`` fault, SPEC §16.2):
        the role's next standby process (launched and imported before the run's clock started,
        as a supervisor's warm spare) is released in the slot. None when the role's ``stop_at``
        has passed (a process released then would stop before its first operation)."""
        spec = self.sc.role(role)
        if spec.stop_at is not None and self.elapsed() >= spec.stop_at:
            return None
        number = self._numbers.get(role, spec.count)
        self._numbers[role] = number + 1
        same = [i for i in self.instances if i.role == role and i.index == slot]
        spares = self._standby.get(role, [])
        if spares and spares[0].process == f"{role}-{number}":
            inst = spares.pop(0)
        else:  # more restarts than the scenario's steps can ask for: launched now, released
            inst = RoleInstance(spec, slot, f"{role}-{number}")  # once ready (_release waits)
            self._launch(inst)
            self.launched.append(inst)
        inst.index, inst.generation = slot, len(same)
        inst.replaces = same[-1].process if same else None
        self._release(inst, self.writer)
        return inst

    def _launch_standby(self) -> list[RoleInstance]:
        """Launch (not release) one process per instance the scenario's steps can start: a
        ``restart`` step every slot of its role (or the step's ``index``), a ``power_cut`` or
        ``torn_write`` that restarts every slot of every role (the machine reboots); numbered
        as they will be."""
        wanted: dict[str, int] = {}
        for step in self.sc.nemesis:
            if step.fault == "restart":
                role = step.params.role
                n = 1 if step.params.index is not None else self.sc.role(role).count
                wanted[role] = wanted.get(role, 0) + n
            elif step.fault in ("power_cut", "torn_write") and step.params.restart:
                for spec in self.sc.roles:
                    wanted[spec.name] = wanted.get(spec.name, 0) + spec.count
        out = []
        for role, n in sorted(wanted.items()):
            count = self.sc.role(role).count
            spares = [RoleInstance(self.sc.role(role), 0, f"{role}-{count + k}") for k in range(n)]
            for inst in spares:
                self._launch(inst)
            self._standby[role] = spares
            out += spares
        self.launched += out
        return out

    def _reap(self, writer: hist.HistoryWriter) -> None:
        for inst in self.instances:
            if inst.proc is None or inst.exit_recorded:
                continue
            code = inst.proc.exitcode
            if code is None:
                continue
            inst.exit_recorded = True
            _close_pidfd(inst)
            # Written under the child's own process name so history.complete() can stamp its
            # unfinished invokes at the exit time.
            writer.record("process", phase="exit", role=inst.role, kind=inst.spec.kind,
                          index=inst.index, exitcode=code, child=inst.process,
                          child_pid=inst.pid, process_of=inst.process)
            how = f"killed by {signal.Signals(-code).name}" if code < 0 else f"exit {code}"
            if code == GATE_LOST_EXIT:
                how += " (its start gate broke before it ran: a toolkit defect, see its log)"
            self.say(f"exit  [bold]{escape(inst.process)}[/] pid {inst.pid}: {how}")

    def _fire(self, step: NemesisStep, env: NemesisEnv, writer: hist.HistoryWriter) -> bool:
        """Apply one step's fault; record ``start`` then ``done`` or ``error``. True if done."""
        params = dataclasses.asdict(step.params)
        writer.record("nemesis", fault=step.fault, phase="start", step=step.index, **params)
        try:
            details = FAULTS[step.fault](env, step.params)
        except (NemesisError, OSError) as exc:
            writer.record("nemesis", fault=step.fault, phase="error", step=step.index,
                          error=str(exc), **params)
            self.say(f"[yellow]nemesis {step.fault} failed: {markup_safe(exc)}[/]")
            return False
        merged = {**params, **details}
        writer.record("nemesis", fault=step.fault, phase="done", step=step.index, **merged)
        text = json.dumps(details, default=str)
        if len(text) > 400:  # e.g. plant_quarantine_copies' hundreds of names: in the history
            text = f"{text[:400]}... ({len(text)} characters; the whole record is in the history)"
        self.say(f"[magenta]nemesis {step.fault}[/] {markup_safe(text)}")
        return True

    # ------------------------------------------------------------------ the run
    def run(self) -> RunResult:
        preflight(self.sc, self.run_dir)
        for d in (self.home, self.hist_dir, self.log_dir):
            d.mkdir(parents=True, exist_ok=True)
        store.write_json(self.dirs.scenario, self.sc.to_dict())
        self.console.print(header(self.sc))
        self._say_exposure(self.wal_reset())
        self.console.print(f"run directory {self.run_dir}", soft_wrap=True, highlight=False,
                           markup=False)
        missing = upstream_missing(self.sc)
        if missing:
            return self._skipped(missing)
        try:
            store_details = self._prepare_store()
        except fixtures.TmpfsUnavailable as exc:
            return self._skipped(f"the store's tmpfs is unavailable: {exc}")
        except FsUnavailable as exc:
            return self._skipped(f"the faulty filesystem is unavailable: {exc}")
        pending_roles = [RoleInstance(spec, i, f"{spec.name}-{i}")
                         for spec in self.sc.roles for i in range(spec.count)]
        pending_roles.sort(key=lambda r: r.spec.start_at)
        self.launched = list(pending_roles)
        for inst in pending_roles:
            self._launch(inst)
        self._await_ready(pending_roles + self._launch_standby())
        started_load = measure("start")  # every role launched and idle: the machine's own load
        self.t0 = time.monotonic()
        writer = self.writer = hist.HistoryWriter(self.dirs.process_history(store.RUNNER_PROCESS),
                                                  store.RUNNER_PROCESS)
        tail = self.tail = HistoryTail(self.hist_dir)
        env = NemesisEnv(self.db_path, lambda: list(self.instances), restart=self._restart,
                         fs=self.fs)
        writer.record("phase", phase="warm-up", store=store_details)
        writer.record(hist.LOAD_RECORD, **started_load)
        self.sampler = Sampler(self.db_path, self.hist_dir,
                               self._sampled_processes)
        self.sampler.start()
        schedule = Schedule(self.sc.nemesis)
        heal_at = self.sc.heal_at if self.sc.heal_at is not None else self.sc.duration
        healed = False
        chaos_started = False
        last_status = 0.0
        while True:
            now = self.elapsed()
            if now >= self.sc.duration:
                break
            if not healed and now >= heal_at:
                healed = True
                self._heal_phase(env, writer, schedule)
            while pending_roles and pending_roles[0].spec.start_at <= now:
                self._release(pending_roles.pop(0), writer)
            tail.poll()
            for step in ([] if healed else schedule.due(now, tail.seen)):
                if not chaos_started:
                    writer.record("phase", phase="chaos")
                    chaos_started = True
                if self._fire(step, env, writer):
                    tail.seen.steps_done.add(step.index)
            for inst in self.instances:
                if (inst.spec.stop_at is not None and now >= inst.spec.stop_at
                        and not inst.term_sent and inst.alive()):
                    inst.term_sent = True
                    signal_instance(inst, signal.SIGTERM)
            self._reap(writer)
            for note in tail.new_notes:
                self.say(f"[cyan]{markup_safe(note)}[/]")
            tail.new_notes.clear()
            if now - last_status >= 1.0:
                last_status = now
                c = tail.counts
                live = sum(1 for i in self.instances if i.alive())
                self.say(f"live {live}  ok {c['ok']}  fail {c['fail']}  info {c['info']}  "
                         f"retries {c['retry']}  checkpoints {c['checkpoint']}  "
                         f"refusals {c['refusal']}")
            if (not pending_roles and (healed or not schedule.pending) and self.instances
                    and not any(i.alive() for i in self.instances)):
                self._reap(writer)
                self.say("every role process exited and nothing is left to happen")
                break
            time.sleep(TICK_S)
        if not healed:
            self._heal_phase(env, writer, schedule)
        self._discard(self.launched)
        self._stop_roles(writer)
        self.sampler.stop()
        writer.record(hist.LOAD_RECORD, **measure("end"))
        tail.poll()
        self._import_fs_log(writer)
        writer.record("phase", phase="recover")
        writer.close()
        return self._check()

    def _import_fs_log(self, writer: hist.HistoryWriter) -> None:
        """Copy the faulty filesystem's power cuts, fired faults and store-file fsyncs into the
        history as ``event`` records (``fs_power_cut``, ``fs_<fault kind>``, ``fs_fsync``) on the
        history clock, for ``must_observe`` and the durability checker."""
        if self.fs is None:
            return
        for rec in read_fs_log(self.fs.log_path):
            ev = rec.get("ev")
            if ev == "fault":
                name = f"fs_{rec.get('kind')}"
            elif ev == "power_cut" or (ev == "fsync" and "state.db" in str(rec.get("path", ""))):
                name = f"fs_{ev}"
            else:
                continue
            fields = {k: v for k, v in rec.items() if k not in ("ev", "t", "mono", "kind")}
            if ev == "fault":
                fields["fault_kind"] = rec.get("kind")
            writer.record("event", event=name, t=rec["mono"], wall=rec["t"], **fields)

    def _sampled_processes(self) -> list[tuple[str, int]]:
        """Role processes for the sampler thread (no waitpid from that thread: no reaping race)."""
        return [(i.process, i.pid) for i in list(self.instances)
                if i.pid is not None and not i.exit_recorded]

    def abandon(self) -> None:
        """SIGCONT then SIGKILL every role still alive (interrupted runs); reaps them."""
        if self.sampler is not None:
            self.sampler.stop()
        self._discard(self.launched)
        for inst in self.instances:
            if inst.alive():
                for sig in (signal.SIGCONT, signal.SIGKILL):
                    signal_instance(inst, sig)
        for inst in self.instances:
            # (a process whose start() raised was never started: nothing to join)
            if inst.proc is not None and inst.proc.pid is not None and inst.proc.exitcode is None:
                inst.proc.join(5)
            _close_pidfd(inst)

    def _heal_phase(self, env: NemesisEnv, writer: hist.HistoryWriter,
                    schedule: Schedule) -> None:
        """Start the heal phase (SPEC §16.3): steps not fired by now never fire; every heal
        action of ``chaos.nemesis.HEALS`` runs; one ``phase`` record carries what each did."""
        for step in schedule.pending:
            writer.record("nemesis", fault=step.fault, phase="never", step=step.index)
            self.say(f"[yellow]nemesis step {step.index} ({step.fault}) never fired[/]")
        schedule.pending.clear()
        started, started_wall = time.monotonic(), time.time()  # before its effects
        done: dict = {}
        for name, heal in HEALS.items():
            try:
                done[name] = heal(env)
            except (NemesisError, OSError) as exc:
                done[name] = {"error": str(exc)}
        writer.record("phase", phase="heal", heal=done, t=started, wall=started_wall)
        self.say(f"[green]heal[/] {markup_safe(json.dumps(done, default=str))}")

    def _stop_roles(self, writer: hist.HistoryWriter) -> None:
        """Stop every role at the end: SIGCONT, let them exit at their deadline, SIGTERM the
        rest, SIGKILL what does not exit within :data:`STOP_GRACE_S`."""
        for inst in self.instances:
            if inst.alive():
                signal_instance(inst, signal.SIGCONT)
        # Roles stop by themselves at their deadline; only signal those that do not. (A SIGTERM
        # that lands during interpreter shutdown would kill with the default action and look
        # like a crash.)
        natural = time.monotonic() + NATURAL_EXIT_S
        while time.monotonic() < natural and any(i.alive() for i in self.instances):
            self._reap(writer)
            time.sleep(TICK_S)
        for inst in self.instances:
            if inst.alive() and not inst.term_sent:
                inst.term_sent = True
                signal_instance(inst, signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE_S
        while time.monotonic() < deadline and any(i.alive() for i in self.instances):
            self._reap(writer)
            time.sleep(TICK_S)
        for inst in self.instances:
            if inst.alive():
                self.say(f"[yellow]{escape(inst.process)} did not stop within {STOP_GRACE_S:g}s: "
                         "SIGKILL[/]")
                signal_instance(inst, signal.SIGKILL)
                inst.proc.join(5)
        for inst in self.instances:
            if inst.proc is not None:
                inst.proc.join(5)
        self._reap(writer)
        for inst in self.instances:
            _close_pidfd(inst)

    def _snapshot_final(self) -> Path:
        final = self.dirs.final
        final.mkdir(exist_ok=True)
        for suffix in ("", "-wal", "-shm"):
            src = Path(f"{self.db_path}{suffix}")
            if src.exists():
                shutil.copy2(src, final / src.name)
        return final / store.DB_NAME

    def _check(self) -> RunResult:
        final = self._snapshot_final()
        records = hist.load_run_history(self.hist_dir)
        hist.write_merged(records, self.dirs.history)
        ctx = CheckContext(history=records, store_path=final, home=self.home,
                           run_dir=self.run_dir, scenario=self.sc.to_dict())
        verdicts = run_checkers(ctx, self.sc.expect)
        verdicts += run_verdicts(self.sc.must_observe, records)  # must_observe, liveness
        outcome = outcome_fields(verdicts)  # INCONCLUSIVE is not green, all SKIPPED is not a pass
        code = outcome["exit_code"]
        results = {
            "scenario": self.sc.name, "seed": self.sc.seed, "run_dir": str(self.run_dir),
            "duration_s": self.sc.duration, "sqlite": sqlite3.sqlite_version,
            "wal_reset_exposure": wal_reset_exposure(), "wal_reset": self.wal_reset(records),
            **outcome, "load": hist.load_summary(records),
            "verdicts": [v.to_dict() for v in verdicts],
            "processes": [{"process": i.process, "pid": i.pid,
                           "exitcode": i.proc.exitcode if i.proc else None}
                          for i in self.instances],
        }
        store.write_results(self.dirs.results, results)
        self._say_exposure(results["wal_reset"])
        self._write_report()
        return RunResult(self.run_dir, verdicts, code, results)

    def wal_reset(self, records: list[dict] | None = None) -> dict:
        """Issue 12's line for this run: ``exposed, mitigated by the checkpoint lock``,
        ``exposed, NOT mitigated (reason)`` (a role that logged the degraded mode counts), or
        not exposed; ``{"line", "mitigated", "reason"}``."""
        exposure = wal_reset_exposure()
        line, reason = exposure_line(self.db_path, exposure)
        degraded = [r for r in records or [] if r.get("type") == "event"
                    and r.get("event") == "checkpoint_lock" and r.get("status") == "degraded"]
        if exposure and degraded and reason is None:
            reason = f"{degraded[0].get('reason')} in {degraded[0].get('process')}"
            line = f"exposed, NOT mitigated ({reason})"
        return {"line": line, "mitigated": exposure is not None and reason is None,
                "reason": reason, "exposure": exposure}

    def _say_exposure(self, info: dict) -> None:
        colour = "yellow" if info["reason"] else "green"
        self.console.print(f"SQLite {sqlite3.sqlite_version}: [{colour}]{escape(info['line'])}[/]"
                           + (f" [dim]({escape(str(info['exposure']))})[/]" if info["exposure"]
                              else ""))

    def _write_report(self) -> None:
        """``report.html`` from the files just written (rebuildable: ``python -m chaos report``)."""
        from .report.html import write_report

        try:
            path = write_report(self.run_dir)
        except Exception as exc:  # noqa: BLE001 - the verdicts stand; say how to rebuild the page
            self.console.print(f"[red]report.html could not be written: {type(exc).__name__}: "
                               f"{escape(str(exc))}[/] (rebuild: python -m chaos report "
                               f"{escape(str(self.run_dir))})", highlight=False)
            return
        self.console.print(f"report {path}", highlight=False, soft_wrap=True, markup=False)


def run_scenario(scenario: Scenario, *, out_dir: str | os.PathLike = store.DEFAULT_OUT,
                 console: Console | None = None, roles: dict | None = None) -> RunResult:
    """Run ``scenario`` once and return its :class:`RunResult` (SPEC §16.5).

    Writes ``<out_dir>/<name>-<UTCSTAMP>-seed<N>/`` (the files of :mod:`chaos.store`). An
    interrupted run (SIGINT, SIGTERM) is marked ``INTERRUPTED.json`` and leaves no role process
    behind. One run only: a scenario's ``sweep`` block is driven by :func:`chaos.sweep.run`.

    Args:
        roles: ``{role name: fn(ctx)}``, the functions of the scenario's ``callable`` roles
            (:mod:`chaos.roles.python_callable`; closures welcome).
    Raises:
        ValueError: the scenario has a ``sweep`` block; ``CallableRoleError`` (a ValueError): a
            callable role without its function, a function for no such role, no multiprocess.
        OSError: ``out_dir`` cannot be written.
    """
    if scenario.sweep is not None:
        raise ValueError(f"scenario {scenario.name!r} has a sweep block: run it with "
                         "chaos.sweep.run (one run per crash hit)")
    check_bindings({r.name: r.kind for r in scenario.roles}, roles)  # before any directory
    console = console or Console()
    run_dir = store.make_run_dir(Path(out_dir), scenario.name, scenario.seed)
    runner = Runner(scenario, run_dir, console, roles)
    try:
        result = runner.run()
    except KeyboardInterrupt:  # SIGINT, or SIGTERM via chaos.__main__: mark the run dir
        store.mark_interrupted(run_dir, runner.elapsed() if runner.t0 else 0.0)
        raise
    finally:
        runner.abandon()  # an interrupted run leaves no role process behind (not even a stopped one)
        runner.release_store()
    print_verdicts(console, result.verdicts, f"{scenario.name} (seed {scenario.seed})")
    return result
