"""``python -m chaos shrink RUN_DIR``: a smaller scenario that still fails the same checker.

From a failing run (its ``scenario.resolved.json`` and ``results.json``), search for a smaller
scenario whose run gives the SAME checker the SAME verdict (FAIL, or INCONCLUSIVE), in the manner
of delta debugging (Zeller's ddmin) over the scenario's parts. Reductions, tried in this order
and repeated while any is accepted:

1. checkers that do not judge the failure are dropped from ``expect`` (a checker is a pure
   function of the history: this needs no run);
2. nemesis steps, removed in chunks (ddmin: halves, then quarters, ... then one by one);
3. roles, removed in chunks with the nemesis steps that target them;
4. role instance counts: to 1, else halved;
5. duration: halved (never below ``--min-duration`` nor past the last scheduled time);
6. workload rates: ``appends_per_s`` 0 (as fast as possible) -> 50, then halved; ``burst`` and
   ``sessions`` halved.

A candidate that is not a valid scenario (e.g. a role still referenced by a checker) is skipped
without a run. Every run counts against ``--max-runs``; the search stops when it is spent or
nothing more can be removed. The result is ``RUN_DIR/shrunk.yaml``, a valid scenario with a
comment header naming what was removed and the run that confirmed it; the candidate runs are
under ``RUN_DIR/shrink/`` and the log of every attempt in ``RUN_DIR/shrink.json``.

Exit codes: 0 ``shrunk.yaml`` written, 2 the run directory is unusable (missing files, or the
run failed no checker), 3 the toolkit failed.
"""

from __future__ import annotations

import copy
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from rich.console import Console
from rich.markup import escape

from . import store
from .commands import SHRINK_MAX_RUNS, SHRINK_MIN_DURATION_S
from .files import inputs
from .scenario import ScenarioError, load_scenario_text

PASSING = ("PASS", "SKIPPED")
DEFAULT_MAX_RUNS = SHRINK_MAX_RUNS
DEFAULT_MIN_DURATION_S = SHRINK_MIN_DURATION_S

#: ``appends_per_s: 0`` means "as fast as possible"; the first finite rate tried.
FIRST_FINITE_RATE = 50.0


class ShrinkError(Exception):
    """The run directory cannot be shrunk (missing files, nothing failed)."""


@dataclass
class Target:
    """The failure to preserve: ``checker`` gave ``status``."""

    checker: str
    status: str


@dataclass
class Attempt:
    """One candidate: what it removes, whether it was run, and the verdict of the target."""

    change: str
    ran: bool
    status: str | None = None
    accepted: bool = False
    run_dir: str | None = None
    reason: str = ""


@dataclass
class ShrinkResult:
    """Outcome: the smallest failing scenario found (as a document), the removals, the log."""

    scenario: dict
    removed: list[str]
    attempts: list[Attempt] = field(default_factory=list)
    runs: int = 0
    confirmed_by: str | None = None


def load_failure(run_dir: Path, checker: str | None = None) -> tuple[dict, Target]:
    """Read a run directory: the resolved scenario and the failure to preserve.

    Args:
        run_dir: a directory written by ``python -m chaos run``.
        checker: the checker to preserve (default: the first that did not pass).
    Returns:
        ``(scenario document, Target)``.
    Raises:
        ShrinkError: a file is missing or unreadable, or no checker (or not ``checker``) failed.
    """
    run = store.RunDir(Path(run_dir))
    try:
        doc = json.loads(inputs.read_text(run.scenario, store.MAX_JSON_BYTES))
        results = json.loads(inputs.read_text(run.results, store.MAX_JSON_BYTES))
    except (OSError, ValueError) as exc:
        raise ShrinkError(f"{run_dir} is not a finished run directory: {exc}") from None
    bad = [v for v in results.get("verdicts", []) if v.get("status") not in PASSING]
    if checker is not None:
        bad = [v for v in bad if v.get("checker") == checker]
    if not bad:
        what = f"checker {checker!r} did not fail" if checker else "every checker passed"
        raise ShrinkError(f"{run_dir}: {what}; nothing to shrink")
    return doc, Target(bad[0]["checker"], bad[0]["status"])


def _size(doc: dict) -> tuple:
    instances = sum(r.get("count", 1) for r in doc["roles"])
    return (len(doc["roles"]), instances, len(doc.get("nemesis", [])), doc["duration"])


def _step_label(step: dict) -> str:
    target = f" {step['role']}" if "role" in step else ""
    when = f" at {step['at']:g}s" if "at" in step else ""
    return f"nemesis step {step['fault']}{target}{when}"


class Shrinker:
    """The search. ``run(doc) -> (status of the target checker, run dir)`` does one real run."""

    def __init__(self, doc: dict, target: Target, run, *, max_runs: int = DEFAULT_MAX_RUNS,
                 min_duration: float = DEFAULT_MIN_DURATION_S, say=lambda text: None) -> None:
        self.best = copy.deepcopy(doc)
        self.target = target
        self.run_fn = run
        self.max_runs = max_runs
        self.min_duration = min_duration
        self.say = say
        self.removed: list[str] = []
        self.attempts: list[Attempt] = []
        self.runs = 0
        self.confirmed_by: str | None = None

    # ------------------------------------------------------------------ one candidate
    def budget_left(self) -> bool:
        return self.runs < self.max_runs

    def try_candidate(self, doc: dict, change: str) -> bool:
        """Validate, run and judge ``doc``; adopt it when the target fails the same way."""
        try:
            load_scenario_text(json.dumps(doc), "<candidate>")
        except ScenarioError as exc:
            self.attempts.append(Attempt(change, False, reason=str(exc.problems[0])))
            return False
        if not self.budget_left():
            return False
        self.runs += 1
        status, run_dir = self.run_fn(doc)
        ok = status == self.target.status
        self.attempts.append(Attempt(change, True, status, ok, str(run_dir)))
        verdict = "still fails: kept" if ok else "no longer fails the same way: undone"
        self.say(f"run {self.runs}/{self.max_runs}: {change}: {self.target.checker} "
                 f"{status} -> {verdict}")
        if ok:
            self.best = doc
            self.removed.append(change)
            self.confirmed_by = str(run_dir)
        return ok

    # ------------------------------------------------------------------ reductions
    def drop_other_checkers(self) -> None:
        doc = self.best
        if self.target.checker in ("must_observe", "liveness"):  # about the run, not an
            return                                                # `expect` checker
        others = [c for c in doc["expect"] if c != self.target.checker]
        if others or doc.get("must_observe"):
            doc["expect"] = {self.target.checker: doc["expect"][self.target.checker]}
            if doc.get("must_observe"):
                others.append("must_observe")
                doc["must_observe"] = []
            self.removed.append(f"without checkers {', '.join(others)} (they do not judge this "
                                "failure)")

    def ddmin(self, key: str, remove, label) -> bool:
        """Delta debugging over ``best[key]``: remove chunks while the failure stays."""
        progress = False
        n = 2
        while self.budget_left():
            items = self.best.get(key, [])
            if not items:
                break
            size = math.ceil(len(items) / n)
            reduced = False
            for start in range(0, len(items), size):
                chunk = list(range(start, min(start + size, len(items))))
                cand = remove(copy.deepcopy(self.best), chunk)
                if cand is None:
                    continue
                if self.try_candidate(cand, "without " + ", ".join(label(self.best, i)
                                                                   for i in chunk)):
                    reduced = progress = True
                    n = max(n - 1, 2)
                    break
                if not self.budget_left():
                    break
            if not reduced:
                if n >= len(items):
                    break
                n = min(2 * n, len(items))
        return progress

    @staticmethod
    def _remove_steps(doc: dict, idx: list[int]) -> dict:
        doc["nemesis"] = [s for i, s in enumerate(doc["nemesis"]) if i not in idx]
        return doc

    @staticmethod
    def _remove_roles(doc: dict, idx: list[int]) -> dict | None:
        if len(idx) >= len(doc["roles"]):
            return None  # a scenario needs a role
        gone = {r["name"] for i, r in enumerate(doc["roles"]) if i in idx}
        doc["roles"] = [r for i, r in enumerate(doc["roles"]) if i not in idx]
        doc["nemesis"] = [s for s in doc.get("nemesis", [])
                          if s.get("role") not in gone
                          and (s.get("after") or {}).get("role") not in gone]
        return doc

    def reduce_counts(self) -> bool:
        progress = False
        for i in range(len(self.best["roles"])):
            while self.budget_left():
                role = self.best["roles"][i]
                count = role.get("count", 1)
                if count <= 1:
                    break
                for new in dict.fromkeys((1, count // 2)):
                    if new >= count:
                        continue
                    cand = copy.deepcopy(self.best)
                    cand["roles"][i]["count"] = new
                    if self.try_candidate(cand, f"role {role['name']} count {count} -> {new}"):
                        progress = True
                        break
                else:
                    break
        return progress

    def _latest_time(self, doc: dict) -> float:
        times = [s["at"] for s in doc.get("nemesis", []) if "at" in s]
        for r in doc["roles"]:
            times.append(r.get("start_at", 0))
            if r.get("stop_at") is not None:
                times.append(r["stop_at"])
        return max(times, default=0.0)

    def reduce_duration(self) -> bool:
        progress = False
        while self.budget_left():
            cur = self.best["duration"]
            floor = max(self.min_duration, self._latest_time(self.best) + 0.5)
            new = round(max(cur / 2, floor), 3)
            if new >= cur:
                break
            cand = copy.deepcopy(self.best)
            cand["duration"] = new
            # A role stopping exactly at the end may keep its stop_at only if still <= duration.
            if not self.try_candidate(cand, f"duration {cur:g}s -> {new:g}s"):
                break
            progress = True
        return progress

    def reduce_workloads(self) -> bool:
        progress = False
        for i in range(len(self.best["roles"])):
            for key in ("appends_per_s", "burst", "sessions"):
                while self.budget_left():
                    role = self.best["roles"][i]
                    value = role.get("workload", {}).get(key)
                    if value is None:
                        break
                    if key == "appends_per_s":
                        if value == 0:
                            new = FIRST_FINITE_RATE
                        elif value / 2 >= 1:
                            new = value / 2
                        else:
                            break
                    else:
                        if value <= 1:
                            break
                        new = value // 2
                    cand = copy.deepcopy(self.best)
                    cand["roles"][i]["workload"][key] = new
                    if not self.try_candidate(cand, f"role {role['name']} {key} {value:g} -> "
                                                    f"{new:g}"):
                        break
                    progress = True
        return progress

    def shrink(self) -> ShrinkResult:
        """Run the search until nothing more is removed or ``max_runs`` is spent."""
        self.drop_other_checkers()
        while self.budget_left():
            progress = self.ddmin("nemesis", self._remove_steps,
                                  lambda d, i: _step_label(d["nemesis"][i]))
            progress |= self.ddmin("roles", self._remove_roles,
                                   lambda d, i: f"role {d['roles'][i]['name']} "
                                   f"({d['roles'][i].get('count', 1)} instance(s))")
            progress |= self.reduce_counts()
            progress |= self.reduce_duration()
            progress |= self.reduce_workloads()
            if not progress:
                break
        return ShrinkResult(self.best, self.removed, self.attempts, self.runs, self.confirmed_by)


def render(result: ShrinkResult, original: dict, run_dir: Path, target: Target,
           max_runs: int) -> str:
    """``shrunk.yaml`` text: a comment header (what was removed, the confirming run), the YAML."""
    before, after = _size(original), _size(result.scenario)
    lines = [
        f"# Shrunk by `python -m chaos shrink` from {run_dir}",
        f"# (scenario {original['name']}, seed {original.get('seed', 0)}).",
        f"# Still fails: {target.checker} {target.status}"
        + (f", confirmed by the run in {result.confirmed_by}" if result.confirmed_by
           else " (no smaller scenario failed the same way: this is the original)"),
        f"# Runs: {result.runs} of --max-runs {max_runs}.",
        f"# Size: roles {before[0]} -> {after[0]}, instances {before[1]} -> {after[1]}, "
        f"nemesis steps {before[2]} -> {after[2]}, duration {before[3]:g}s -> {after[3]:g}s.",
        "# Removed or reduced:" if result.removed else "# Removed or reduced: nothing.",
    ]
    lines += [f"#   - {r}" for r in result.removed]
    doc = copy.deepcopy(result.scenario)
    doc["description"] = f"Shrunk from {original['name']}: {original['description']}"
    body = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, default_flow_style=None,
                          width=100)
    return "\n".join(lines) + "\n" + body


def shrink_run(run_dir: Path, *, max_runs: int = DEFAULT_MAX_RUNS,
               min_duration: float = DEFAULT_MIN_DURATION_S, checker: str | None = None,
               console: Console | None = None) -> tuple[Path, ShrinkResult]:
    """Shrink the failing run in ``run_dir``; write ``shrunk.yaml`` and ``shrink.json`` there.

    Args:
        run_dir: a run directory whose results show a failed (or INCONCLUSIVE) checker.
        max_runs: budget of candidate runs (each a real run of the candidate scenario).
        min_duration: never shorten the duration below this (s).
        checker: the checker to preserve (default: the first that did not pass).
        console: progress output.
    Returns:
        ``(path of shrunk.yaml, ShrinkResult)``.
    Raises:
        ShrinkError: the run directory is unusable.
    """
    from .sweep import run as run_scenario

    console = console or Console(soft_wrap=True)
    run_dir = Path(run_dir).absolute()
    doc, target = load_failure(run_dir, checker)
    console.print(f"shrinking {doc['name']} (seed {doc.get('seed', 0)}): preserving "
                  f"{target.checker} {target.status}; at most {max_runs} runs", highlight=False,
                  markup=False)
    out = run_dir / store.SHRINK_DIR

    def run(candidate: dict):
        sc = load_scenario_text(json.dumps(candidate), "<candidate>")
        result = run_scenario(sc, out_dir=out, console=Console(file=io.StringIO()))
        status = next((v.status for v in result.verdicts if v.checker == target.checker),
                      "absent")
        return status, result.run_dir

    shrinker = Shrinker(doc, target, run, max_runs=max_runs, min_duration=min_duration,
                        say=lambda t: console.print(t, highlight=False, markup=False))
    result = shrinker.shrink()
    path = run_dir / store.SHRUNK_FILE
    store.write_text_atomic(path, render(result, doc, run_dir, target, max_runs))
    store.write_json(run_dir / store.SHRINK_LOG, {
        "target": target.__dict__, "runs": result.runs, "removed": result.removed,
        "confirmed_by": result.confirmed_by,
        "attempts": [a.__dict__ for a in result.attempts]})
    console.print(f"wrote {path}: {len(result.removed)} removal(s) in {result.runs} run(s)",
                  highlight=False, markup=False)
    return path, result


# ---------------------------------------------------------------------- command line

def cmd_shrink(args, err: Console) -> int:
    """``python -m chaos shrink``: 0 written, 2 unusable run directory."""
    if args.max_runs < 1:
        err.print("[red]chaos shrink: --max-runs must be >= 1[/]")
        return 2
    try:
        shrink_run(args.run_dir, max_runs=args.max_runs, min_duration=args.min_duration,
                   checker=args.checker)
    except ShrinkError as exc:
        err.print(f"[red]chaos shrink: {escape(str(exc))}[/]", highlight=False)
        return 2
    return 0
