"""pytest plugin: scenario files as test items, and store fixtures (SPEC §16.7).

Registered through the ``pytest11`` entry point ``chaos.pytest_plugin`` (pyproject.toml), so any
pytest run in an environment where hermes-state is installed has it.

Collection: a ``*.yaml``/``*.yml`` file becomes one item per seed, named
``<file>::<scenario name>[seed<N>]``, when it is named on the command line (any path: ``pytest
my/repro.yaml``), lies in a directory named ``scenarios`` that pytest visits (the project lists
``scenarios`` in ``testpaths``), or lies in a directory named on the command line and has a
top-level ``roles:`` key (other YAML there is left alone). ``pytest -n auto`` spreads the items
over xdist workers. Found by a directory walk, only scenarios tagged ``ci`` are collected (CI runs
on 2 cores and must stay under 15 min): the others are reported as skipped, in one summary line
naming them and how to include them (``tags: [ci]`` in the file, or ``--chaos-all``); a file named
on the command line always runs. ``--chaos-seeds K`` runs seeds ``seed .. seed+K-1`` of each. An
invalid scenario file is a failing item that lists every problem. An item runs the scenario in
its own temporary directory and fails unless every checker passed (exit code 0), showing the
verdict table, the failed verdicts' evidence and the run directory.

After a run whose checkers all passed the hook ``pytest_chaos_scenario_result(item, result)`` is
called (implement it in a
``conftest.py`` beside the scenarios to assert more about one scenario's run; ``result`` is a
:class:`chaos.runner.RunResult`).

Fixtures: ``hermes_home`` (a temporary ``HERMES_HOME``, set in the environment for the test),
``session_db`` (a :class:`hermes_state.SessionDB` on ``<hermes_home>/state.db``, closed after the
test) and ``run_scenario`` (run a scenario given as a path, YAML text or
:class:`chaos.scenario.Scenario` in a temporary directory; returns the ``RunResult``).
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

CI_TAG = "ci"


class ChaosHookspecs:
    """Hooks this plugin adds."""

    def pytest_chaos_scenario_result(self, item, result):
        """Called after a scenario item ran and every checker passed.

        Args:
            item: the :class:`ScenarioItem` (``item.scenario`` is the resolved scenario).
            result: the :class:`chaos.runner.RunResult` (``run_dir``, ``verdicts``,
                ``exit_code``, ``results``).
        Raise ``AssertionError`` to fail the item.
        """


def pytest_addhooks(pluginmanager):
    """Register :class:`ChaosHookspecs`."""
    pluginmanager.add_hookspecs(ChaosHookspecs)


def pytest_addoption(parser):
    """``--chaos-all`` and ``--chaos-seeds K``."""
    group = parser.getgroup("chaos", "hermes-state chaos scenarios (SPEC §16.7)")
    group.addoption("--chaos-all", action="store_true", default=False,
                    help="collect every scenarios/*.yaml, not only those tagged 'ci'")
    group.addoption("--chaos-seeds", type=int, default=1, metavar="K",
                    help="run seeds seed..seed+K-1 of each scenario (default 1)")


def pytest_terminal_summary(terminalreporter):
    """One line for every untagged scenario file that was not run, instead of one line each:
    which files, and how to include them (``tags: [ci]``, ``--chaos-all``). They still count
    in the final line ("N untagged scenarios not run"), so a run of untagged files alone does not
    end in a bare "no tests ran"."""
    skipped = terminalreporter.stats.get("skipped") or []
    mine = [r for r in skipped if _untagged_report(r)]
    if not mine:
        return
    terminalreporter.stats["skipped"] = [r for r in skipped if not _untagged_report(r)]
    if not terminalreporter.stats["skipped"]:
        del terminalreporter.stats["skipped"]
    terminalreporter.stats.setdefault("untagged scenarios not run", []).extend(mine)
    names = sorted({Path(str(getattr(r, "nodeid", "") or r.fspath)).name for r in mine})
    shown = ", ".join(names[:12]) + (f", ... ({len(names) - 12} more)" if len(names) > 12 else "")
    terminalreporter.write_line(
        f"chaos: {len(names)} scenario file(s) not run because they are not tagged 'ci': "
        f"{shown}. Include one with `tags: [ci]` in the file or by naming it on the command "
        "line; all of them with --chaos-all.")


def _untagged_report(report) -> bool:
    longrepr = getattr(report, "longrepr", None)
    return (getattr(report, "when", None) == "collect" or not hasattr(report, "when")) and \
        isinstance(longrepr, tuple) and len(longrepr) == 3 and UNTAGGED_REASON in str(longrepr[2])


#: Every marker the plugin puts on its items, registered in :func:`pytest_configure` so a run
#: with ``--strict-markers`` or ``-W error`` collects scenario files (issue 27 item 9).
MARKERS = {
    "chaos": "a chaos scenario run (real processes, seconds)",
    "slow": "runs real chaos scenarios (seconds each)",
}


def pytest_configure(config):
    """Register every marker of :data:`MARKERS` (each scenario item carries them all)."""
    for name, text in MARKERS.items():
        config.addinivalue_line("markers", f"{name}: {text}")


#: The reason of the collection skip of an untagged scenario (found again in the summary).
UNTAGGED_REASON = "chaos scenario not tagged 'ci'"
_SCENARIO_SUFFIXES = (".yaml", ".yml")
#: Only this much of a YAML file outside ``scenarios/`` is read to see if it is a scenario.
_SNIFF_BYTES = 64 * 1024


def _named_on_command_line(file_path: Path, parent) -> bool:
    return parent.session.isinitpath(file_path)


def _under_named_directory(file_path: Path, config) -> bool:
    """True when a directory given on the command line (not ``testpaths``) contains
    ``file_path``."""
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        return False
    for arg in config.args:
        base = Path(str(arg).split("::", 1)[0])
        base = base if base.is_absolute() else Path(config.invocation_params.dir, base)
        try:
            if base.is_dir() and file_path.resolve().is_relative_to(base.resolve()):
                return True
        except OSError:
            continue
    return False


def _looks_like_scenario(file_path: Path) -> bool:
    """A top-level ``roles:`` key in the first 64 KiB (a cheap look, never a full parse)."""
    import re

    try:
        with open(file_path, "rb") as fh:
            head = fh.read(_SNIFF_BYTES).decode("utf-8", "replace")
    except OSError:
        return False
    return re.search(r"(?m)^roles\s*:", head) is not None


def pytest_collect_file(file_path: Path, parent):
    """A scenario file -> :class:`ScenarioFile` (see the module docstring for which files)."""
    if file_path.suffix not in _SCENARIO_SUFFIXES:
        return None
    if _named_on_command_line(file_path, parent):
        return ScenarioFile.from_parent(parent, path=file_path, explicit=True)
    if file_path.parent.name == "scenarios" or (
            _under_named_directory(file_path, parent.config) and _looks_like_scenario(file_path)):
        return ScenarioFile.from_parent(parent, path=file_path)
    return None


class ScenarioFile(pytest.File):
    """A scenario file: one :class:`ScenarioItem` per seed, or one failing item if invalid.

    ``explicit``: the file was named on the command line (it runs whatever its tags).
    """

    def __init__(self, *, explicit: bool = False, **kw):
        super().__init__(**kw)
        self.explicit = explicit

    def collect(self):
        from .scenario import ScenarioError, load_scenario

        try:
            sc = load_scenario(self.path)
        except ScenarioError as exc:
            yield InvalidScenarioItem.from_parent(self, name="invalid", problems=exc.problems)
            return
        if any(r.kind == "callable" for r in sc.roles):
            pytest.skip(f"{self.path.name}: it has callable roles, whose Python functions a test "
                        "passes to run_scenario(..., roles={...})")
        if CI_TAG not in sc.tags and not self.config.getoption("chaos_all") and not self.explicit:
            # The file is in the reason: xdist merges the workers' skip reports by their text.
            pytest.skip(f"{UNTAGGED_REASON}: {self.path.name}: add `tags: [ci]` to it, run "
                        "pytest with --chaos-all, or name the file on the command line")
        for k in range(max(1, self.config.getoption("chaos_seeds"))):
            seed = sc.seed + k
            yield ScenarioItem.from_parent(self, name=f"{sc.name}[seed{seed}]",
                                           scenario=sc.with_seed(seed))


class InvalidScenarioItem(pytest.Item):
    """Fails with the scenario's problems (file, line, field)."""

    def __init__(self, *, problems, **kw):
        super().__init__(**kw)
        self.problems = problems

    def runtest(self):
        raise ScenarioItemFailure("invalid scenario:\n" + "\n".join(map(str, self.problems)))

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ScenarioItemFailure):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: invalid"


class ScenarioItemFailure(Exception):
    """A scenario run whose checkers did not all pass (the message is the report)."""


class ScenarioItem(pytest.Item):
    """One run of one scenario with one seed."""

    def __init__(self, *, scenario, **kw):
        super().__init__(**kw)
        self.scenario = scenario
        for name in MARKERS:
            self.add_marker(getattr(pytest.mark, name))
        self.result = None

    def runtest(self):
        """Run the scenario in a fresh temporary directory; skip (with the reason) when every
        checker was SKIPPED (exit 4: nothing was tested, never a pass); fail unless exit 0."""
        from .checkers.base import EXIT_SKIPPED

        out = _tmp_dir(self.config, f"chaos-{self.scenario.name}")
        self.result = result = _run(self.scenario, out)
        if result.exit_code == EXIT_SKIPPED:
            pytest.skip(f"{self.scenario.name}: every checker SKIPPED: "
                        f"{result.results.get('skipped') or '?'} (run directory {result.run_dir})")
        if result.exit_code != 0:
            raise ScenarioItemFailure(_failure_report(result))
        self.ihook.pytest_chaos_scenario_result(item=self, result=result)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, ScenarioItemFailure):
            return str(excinfo.value)
        text = super().repr_failure(excinfo, style)
        if self.result is not None:
            return f"{text}\n\n{_failure_report(self.result)}"
        return text

    def reportinfo(self):
        return self.path, None, f"{self.path.name}::{self.name}"


def _tmp_dir(config, name: str) -> Path:
    factory = getattr(config, "_tmp_path_factory", None)
    if factory is not None:
        return factory.mktemp(name)
    import tempfile

    return Path(tempfile.mkdtemp(prefix=name))


def _run(scenario, out: Path, roles: dict | None = None):
    from rich.console import Console

    from .sweep import run as run_scenario

    buf = io.StringIO()
    result = run_scenario(scenario, out_dir=out, console=Console(file=buf, width=120),
                          roles=roles)
    result.console_text = buf.getvalue()
    return result


def _failure_report(result) -> str:
    lines = [f"scenario {result.results.get('scenario')} seed {result.results.get('seed')}: "
             f"exit {result.exit_code}", f"run directory: {result.run_dir}", ""]
    for v in result.verdicts:
        lines.append(f"  {v.status:12} {v.checker}: {v.summary}")
    from .history import load_run_history, relative_times, run_start

    try:
        start = run_start(load_run_history(result.run_dir / "history"))
    except OSError:
        start = 0.0
    for v in result.verdicts:
        if v.status not in ("PASS", "SKIPPED") and v.evidence:
            lines.append(f"\nevidence of {v.checker} (times: seconds since the run start):")
            lines += [f"  {json.dumps(relative_times(e, start), default=str)[:400]}"
                      for e in v.evidence[:10]]
    tail = getattr(result, "console_text", "").splitlines()[-40:]
    if tail:
        lines += ["", "run output (last lines):"] + [f"  {t}" for t in tail]
    return "\n".join(lines)


# ---------------------------------------------------------------------- fixtures

@pytest.fixture
def hermes_home(tmp_path, monkeypatch) -> Path:
    """A temporary HERMES_HOME (``$HERMES_HOME`` points at it for the test)."""
    home = tmp_path / "hermes-home"
    home.mkdir()
    monkeypatch.setenv("HERMES_HOME", str(home))
    return home


@pytest.fixture
def session_db(hermes_home):
    """A :class:`hermes_state.SessionDB` on ``<hermes_home>/state.db``; closed after the test."""
    from hermes_state import SessionDB

    db = SessionDB(hermes_home / "state.db")
    yield db
    db.close()


@pytest.fixture
def run_scenario(tmp_path):
    """``run_scenario(scenario, seed=None, roles=None) -> RunResult``: one run in a temporary
    directory.

    ``scenario`` is a path to a YAML file, YAML text, or a :class:`chaos.scenario.Scenario`;
    ``seed`` overrides its seed; ``roles`` maps the names of the scenario's ``kind: callable``
    roles to Python functions ``fn(ctx)`` -- closures over the test's locals too -- each run in
    its own spawned interpreter (:mod:`chaos.roles.python_callable`). An invalid scenario raises
    :class:`chaos.scenario.ScenarioError`; a callable role without its function (or a function
    for no such role) raises ``CallableRoleError`` (a ValueError). The run's console output is
    in ``result.console_text``.
    """
    from .scenario import Scenario, load_scenario, load_scenario_text

    counter = [0]

    def _run_one(scenario, seed: int | None = None, roles: dict | None = None):
        if isinstance(scenario, Scenario):
            sc = scenario
        elif isinstance(scenario, Path) or (isinstance(scenario, str) and "\n" not in scenario):
            sc = load_scenario(scenario)
        else:
            sc = load_scenario_text(scenario, "<run_scenario>")
        if seed is not None:
            sc = sc.with_seed(seed)
        counter[0] += 1
        return _run(sc, tmp_path / f"runs-{counter[0]}", roles)

    return _run_one
