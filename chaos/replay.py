"""Working from a saved run directory: re-judge it (``report --recheck``) or run it again
(``replay``) (SPEC §16.5).

- :func:`recheck` runs the scenario's checkers again on the saved history and the saved final
  store (``final/``), without starting any process; the previous ``results.json`` is kept as
  ``results.previous.json``.
- :func:`replay` runs the same resolved scenario (``scenario.resolved.json``) with the same seed
  into a new run directory: the same workload and fault schedule, OS scheduling aside.
"""

from __future__ import annotations

import datetime as _dt
import os
import sqlite3
from pathlib import Path

from rich.console import Console

from . import store
from .files import inputs
from .checkers.base import outcome_fields


class RunDirError(Exception):
    """The directory is not a usable chaos run directory (the message says what is missing)."""


def load_resolved(run_dir: Path):
    """The :class:`chaos.scenario.Scenario` saved in ``run_dir/scenario.resolved.json``.

    Raises:
        RunDirError: the file is missing, or it no longer validates (the problems are listed).
    """
    from .scenario import ScenarioError, load_scenario_text

    path = store.RunDir(Path(run_dir)).scenario
    try:
        text = inputs.read_text(path, store.MAX_JSON_BYTES)  # no link, FIFO or device
    except inputs.InputError as exc:
        raise RunDirError(f"cannot read the resolved scenario: {exc}; replay and --recheck "
                          "need a directory written by `chaos run`") from None
    try:
        return load_scenario_text(text, source=str(path))
    except ScenarioError as exc:
        raise RunDirError(f"{path}: the saved scenario does not validate with this version:\n  "
                          + "\n  ".join(map(str, exc.problems))) from None


def recheck(run_dir: str | os.PathLike) -> dict:
    """Run the saved scenario's checkers again on the saved history and final store.

    Args:
        run_dir: a directory written by ``chaos run`` (needs ``scenario.resolved.json``,
            ``history.jsonl`` or ``history/``, and ``final/state.db``, or ``home/state.db`` for
            a run interrupted before the copy).
    Returns:
        The new results dict (also written to ``results.json``; the old one is moved to
        ``results.previous.json``). ``verdicts`` are dicts; ``rechecked_at`` is UTC ISO.
    Raises:
        RunDirError: a required file is missing (no store in ``final/`` nor ``home/``).
    """
    from .checkers import CheckContext, run_checkers
    from .checkers.observed import interrupted, run_verdicts

    run_dir = Path(run_dir).absolute()
    run = store.RunDir(run_dir)
    scenario = load_resolved(run_dir)
    try:
        records, old, _ = store.load_run(run_dir)
    except FileNotFoundError as exc:
        raise RunDirError(str(exc)) from None
    final = run.final / store.DB_NAME
    store_note = "final"
    if not final.exists():
        # An interrupted run never copied final/; its roles are dead, so the store in home/ is
        # the final state (checkers read copies, so home/ stays as it was).
        final, store_note = run.db_path, "home (no final/ copy: interrupted run)"
    if not final.exists():
        raise RunDirError(f"{run_dir}: neither final/state.db nor home/state.db exists; "
                          "nothing to recheck")
    ctx = CheckContext(history=records, store_path=final, home=run.home,
                       run_dir=run_dir, scenario=scenario.to_dict())
    verdicts = (run_checkers(ctx, scenario.expect) + run_verdicts(scenario.must_observe, records)
                + interrupted(run_dir))
    results = {k: v for k, v in old.items() if k not in ("skipped", "verdict")}
    results.update({
        "scenario": scenario.name, "seed": scenario.seed, "run_dir": str(run_dir),
        "verdicts": [v.to_dict() for v in verdicts],
        **outcome_fields(verdicts), "sqlite_recheck": sqlite3.sqlite_version,
        "rechecked_store": store_note,
        "rechecked_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    })
    store.replace_results(run, results)
    return results


def replay(run_dir: str | os.PathLike, *, out_dir: str | os.PathLike | None = None,
           console: Console | None = None):
    """Run the scenario saved in ``run_dir`` again, same seed, into a new run directory.

    Args:
        run_dir: the original run directory.
        out_dir: where the new run directory goes (default: beside the original).
        console: progress output.
    Returns:
        ``(original results dict, new RunResult)``; the original results are ``{}`` when the
        first run left no ``results.json`` (it was interrupted).
    Raises:
        RunDirError: no usable ``scenario.resolved.json``.
    """
    from .sweep import run

    run_dir = Path(run_dir).absolute()
    scenario = load_resolved(run_dir)
    original = store.read_json(store.RunDir(run_dir).results)
    target = Path(out_dir) if out_dir is not None else run_dir.parent
    result = run(scenario, out_dir=target, console=console)
    return original, result


def run_summary(run_dir: str | os.PathLike) -> dict[str, str]:
    """A few comparable lines about a run's history (for ``replay``'s side-by-side table).

    Returns:
        ``{"faults fired": "kill@1.02s, ...", "operations": "ok N, fail N, info N",
        "appends": "ok N, fail N, info N", "processes": "name:exitcode, ..."}``; times are seconds
        since the run's first phase record. Empty dict when the history cannot be read.
    """
    from .history import read_file

    path = store.RunDir(Path(run_dir)).history
    try:
        records = read_file(path)
    except OSError:
        return {}
    t0 = next((r["t"] for r in records if r.get("type") == "phase"), None)
    if t0 is None and records:
        t0 = records[0].get("t", 0.0)
    fired = [f"{r.get('fault')}@{r['t'] - t0:.2f}s" for r in records
             if r.get("type") == "nemesis" and r.get("phase") == "done"]
    never = [str(r.get("fault")) for r in records
             if r.get("type") == "nemesis" and r.get("phase") == "never"]
    counts = {"ok": 0, "fail": 0, "info": 0}
    appends = {"ok": 0, "fail": 0, "info": 0}
    for r in records:
        typ = r.get("type")
        if typ in counts:
            counts[typ] += 1
            if r.get("op") == "append":
                appends[typ] += 1
    exits = sorted(f"{r.get('process')}:{r.get('exitcode')}" for r in records
                   if r.get("type") == "process" and r.get("phase") == "exit")
    out = {"faults fired": ", ".join(fired) or "none",
           "operations": ", ".join(f"{k} {v}" for k, v in counts.items()),
           "appends": ", ".join(f"{k} {v}" for k, v in appends.items()),
           "processes (exit code)": ", ".join(exits) or "none"}
    if never:
        out["faults never fired"] = ", ".join(never)
    return out
