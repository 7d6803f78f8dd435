"""Sweep mode (SPEC §16.2, SQLite's fault loops): crash at every hit of a failpoint in turn.

A scenario with a ``sweep: {failpoint: F, role: R, max: M}`` block is run again and again: run
N (N = 1, 2, ...) arms ``F=crash@N`` in every instance of role ``R`` from its start, so each run
kills the role (a real SIGKILL) at a later hit of ``F``; the checkers judge every run. The sweep
stops at the first run in which no instance of ``R`` reached hit N — the operation completed
without reaching the crash point — or after N = M.

Output: ``<out>/<name>-<UTCSTAMP>-seed<S>/`` holding one ordinary run directory per N
(``n001/``, ``n002/``, ...), the ``scenario.resolved.json`` with its ``sweep`` block (so
``python -m chaos replay`` reruns the whole sweep) and a ``results.json`` with every N (``reached``, exit code, each
checker's verdict) and the aggregated verdicts: per checker the worst status over every N (FAIL >
INCONCLUSIVE > PASS > SKIPPED) naming the N that failed, plus a ``sweep`` verdict that is PASS
when the sweep completed and the crash point was reached at least once, INCONCLUSIVE otherwise
(N = 1 never reached it: nothing was tested; or still crashing at N = M). Exit code 1 if any
aggregated verdict is not PASS/SKIPPED.
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from . import history as hist
from . import store
from .checkers.base import (EXIT_SKIPPED, FAIL, INCONCLUSIVE, PASS, SKIPPED, Verdict,
                           outcome_fields)
from .report import print_verdicts
from .runner import Runner, RunResult, run_scenario
from .scenario import Scenario

_WORST = {FAIL: 3, INCONCLUSIVE: 2, PASS: 1, SKIPPED: 0}


def scenario_for(scenario: Scenario, n: int) -> Scenario:
    """The scenario of sweep run ``n``: ``failpoint=crash@n`` added to the swept role's
    failpoints, no ``sweep`` block. ``scenario`` is unchanged.

    Raises:
        ValueError: the scenario has no ``sweep`` block or ``n`` < 1.
    """
    if scenario.sweep is None:
        raise ValueError(f"scenario {scenario.name!r} has no sweep block")
    if n < 1:
        raise ValueError(f"sweep hits start at 1, got {n}")
    sc = copy.deepcopy(scenario)
    sc.sweep = None
    role = sc.role(scenario.sweep["role"])
    arm = f"{scenario.sweep['failpoint']}=crash@{n}"
    role.failpoints = f"{role.failpoints},{arm}" if role.failpoints else arm
    return sc


def reached(records: list[dict], failpoint: str, role_processes: set[str]) -> bool:
    """True if a process of the swept role crashed at ``failpoint`` (its ``failpoint`` event with
    action ``crash`` is in ``records``)."""
    return any(r.get("type") == "event" and r.get("event") == "failpoint"
               and r.get("name") == failpoint and r.get("action") == "crash"
               and r.get("process") in role_processes for r in records)


def _aggregate(runs: list[dict], per_run_verdicts: list[list[Verdict]]) -> list[Verdict]:
    order: list[str] = []
    for verdicts in per_run_verdicts:
        for v in verdicts:
            if v.checker not in order:
                order.append(v.checker)
    out = []
    for name in order:
        statuses = {}
        first_bad = None
        for run, verdicts in zip(runs, per_run_verdicts):
            for v in verdicts:
                if v.checker == name:
                    statuses[run["n"]] = v.status
                    if v.status in (FAIL, INCONCLUSIVE) and first_bad is None:
                        first_bad = (run["n"], v)
        worst = max(statuses.values(), key=_WORST.__getitem__)
        ns = sorted(statuses)
        if first_bad is None:
            summary = f"{worst} at every N = {ns[0]}..{ns[-1]}"
        else:
            bad = [n for n in ns if statuses[n] in (FAIL, INCONCLUSIVE)]
            summary = (f"{worst} at N = {', '.join(map(str, bad))} (N = {first_bad[0]}: "
                       f"{first_bad[1].summary})")
        out.append(Verdict(name, worst, summary, {"per_n": {str(n): statuses[n] for n in ns}},
                           list(first_bad[1].evidence) if first_bad else []))
    return out


def run(scenario: Scenario, *, out_dir: str | os.PathLike = store.DEFAULT_OUT,
        console: Console | None = None, roles: dict | None = None) -> RunResult:
    """Run ``scenario`` as its file asks (SPEC §16.5): sweep mode when it has a ``sweep`` block
    (:func:`run_sweep`, verdict table printed), else one run (:func:`chaos.runner.run_scenario`,
    ``roles``: the functions of its ``callable`` roles). What ``python -m chaos run``,
    ``replay`` and the pytest plugin call.

    Raises:
        ValueError: ``roles`` given to a sweep (a sweep runs the scenario's own roles).
    """
    console = console or Console()
    if scenario.sweep is None:
        return run_scenario(scenario, out_dir=out_dir, console=console, roles=roles)
    if roles:
        raise ValueError("callable roles (roles=) are not supported in sweep mode")
    result = run_sweep(scenario, out_dir=out_dir, console=console)
    print_verdicts(console, result.verdicts, f"{scenario.name} sweep (seed {scenario.seed})")
    return result


def run_sweep(scenario: Scenario, *, out_dir: str | os.PathLike = store.DEFAULT_OUT,
              console: Console | None = None) -> RunResult:
    """Run ``scenario`` in sweep mode (see the module doc) and return a
    :class:`chaos.runner.RunResult` for the whole sweep (its ``run_dir`` is the sweep directory,
    its ``verdicts`` the aggregated ones, ``results`` the content of its ``results.json``).

    Raises:
        ValueError: the scenario has no ``sweep`` block.
        OSError: ``out_dir`` cannot be written.
    """
    if scenario.sweep is None:
        raise ValueError(f"scenario {scenario.name!r} has no sweep block")
    console = console or Console()
    spec = scenario.sweep
    fp, role, top = spec["failpoint"], spec["role"], int(spec.get("max", 50))
    sweep_dir = store.make_run_dir(Path(out_dir), scenario.name, scenario.seed)
    store.write_json(store.RunDir(sweep_dir).scenario, scenario.to_dict())  # replay: whole sweep
    console.print(f"[bold]sweep[/] {escape(f'{fp}=crash@N in role {role}')}, N = 1..{top} "
                  f"(until a run completes without reaching it): {escape(str(sweep_dir))}")
    runs: list[dict] = []
    per_run: list[list[Verdict]] = []
    completed = False
    for n in range(1, top + 1):
        sc_n = scenario_for(scenario, n)
        run_dir = sweep_dir / f"n{n:03d}"
        run_dir.mkdir()
        runner = Runner(sc_n, run_dir, console)
        try:
            result = runner.run()
        finally:
            runner.abandon()
        procs = {i.process for i in runner.instances if i.role == role}
        records = hist.read_file(store.RunDir(run_dir).history)
        hit = reached(records, fp, procs)
        statuses = {v.checker: v.status for v in result.verdicts}
        runs.append({"n": n, "run_dir": str(run_dir), "reached": hit,
                     "exit_code": result.exit_code, "verdicts": statuses,
                     **({"skipped": result.results["skipped"]}
                        if result.results.get("skipped") else {})})
        per_run.append(result.verdicts)
        bad = [f"{k} {s}" for k, s in statuses.items() if s not in (PASS, SKIPPED)]
        console.print(f"[bold]sweep N={n}[/]: "
                      + ("crashed at hit N" if hit else "completed without reaching hit N")
                      + (f", [red]{escape('; '.join(bad))}[/]" if bad
                         else ", every checker passed"))
        if not hit:
            completed = True
            break
    verdicts = _aggregate(runs, per_run)
    crashed = [r["n"] for r in runs if r["reached"]]
    if all(r["exit_code"] == EXIT_SKIPPED for r in runs):
        status, summary = SKIPPED, f"every run was SKIPPED: {runs[0].get('skipped') or '?'}"
    elif not completed:
        status, summary = INCONCLUSIVE, (f"still crashing at N = {top} (max): the operation "
                                         "never completed; raise sweep.max")
    elif not crashed:
        status, summary = INCONCLUSIVE, (f"{fp} was never reached by role {role}: the sweep "
                                         "tested nothing")
    else:
        status, summary = PASS, (f"crashed at every hit N = 1..{len(crashed)}, completed at "
                                 f"N = {runs[-1]['n']}")
    verdicts.append(Verdict("sweep", status, summary,
                            {"failpoint": fp, "role": role, "max": top, "crashed": crashed,
                             "runs": len(runs)}))
    outcome = outcome_fields(verdicts)
    code = outcome["exit_code"]
    results = {
        "scenario": scenario.name, "seed": scenario.seed, "run_dir": str(sweep_dir),
        "sweep": dict(spec), **outcome, "runs": runs,
        "verdicts": [v.to_dict() for v in verdicts],
    }
    store.write_results(store.RunDir(sweep_dir).results, results)
    return RunResult(sweep_dir, verdicts, code, results)
