"""Shared fixtures for the store tests: real child processes, event capture, failpoint env.

Children are real OS processes (``sys.executable`` running a script from ``tests/helpers``);
every one started through :func:`spawn` is SIGKILLed and reaped at teardown if still alive.
Timeouts below are hang guards only (a stuck child fails the test instead of hanging the run),
never assertions about speed.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from hermes_state import SessionDB, events, failpoints

HELPERS = Path(__file__).resolve().parent / "helpers"
REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 90.0


class Child:
    """A helper script in a subprocess with line-oriented stdin/stdout."""

    def __init__(self, script: str, *args: str, env_extra: dict | None = None):
        env = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
        env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
        env.update(env_extra or {})
        self.proc = subprocess.Popen(
            [sys.executable, str(HELPERS / script), *map(str, args)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True, env=env, cwd=str(REPO))
        self.pid = self.proc.pid
        self._lines: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._pump, daemon=True)
        self._reader.start()

    def _pump(self) -> None:
        try:
            for line in self.proc.stdout:
                self._lines.put(line.rstrip("\n"))
        except (ValueError, OSError):
            pass  # the test closed the pipe (teardown) while this thread read it: EOF
        self._lines.put(None)  # EOF

    def readline(self, timeout: float = HANG_GUARD_S) -> str | None:
        """The next stdout line, or None at EOF."""
        try:
            return self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(
                f"child {self.pid} produced no output within the hang guard; "
                f"stderr so far unavailable while it runs") from None

    def read_all(self) -> list[str]:
        """Every remaining stdout line until EOF."""
        out = []
        while (line := self.readline()) is not None:
            out.append(line)
        return out

    def send(self, text: str) -> None:
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()

    def call(self, op: str, **kw) -> dict:
        """store_child.py protocol: send one command, return the decoded reply."""
        self.send(json.dumps({"op": op, **kw}))
        line = self.readline()
        if line is None:
            self.proc.wait(timeout=HANG_GUARD_S)
            raise AssertionError(f"child {self.pid} exited ({self.proc.returncode}) during {op}: "
                                 f"{self.proc.stderr.read()}")
        return json.loads(line)

    def ok(self, op: str, **kw) -> dict:
        reply = self.call(op, **kw)
        assert reply["ok"], f"{op} failed in child {self.pid}: {reply}"
        return reply

    def wait(self) -> int:
        return self.proc.wait(timeout=HANG_GUARD_S)

    def stderr(self) -> str:
        return self.proc.stderr.read() if self.proc.poll() is not None else ""

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGKILL)
        self.proc.wait(timeout=HANG_GUARD_S)


@pytest.fixture
def spawn():
    """Factory ``spawn(script, *args, env_extra=None) -> Child``; leftovers are SIGKILLed."""
    children: list[Child] = []

    def _spawn(script: str, *args, env_extra: dict | None = None) -> Child:
        child = Child(script, *args, env_extra=env_extra)
        children.append(child)
        return child

    yield _spawn
    for child in children:
        try:
            child.kill()
        except Exception:  # noqa: BLE001 - teardown must reap every child
            pass
        for stream in (child.proc.stdin, child.proc.stdout, child.proc.stderr):
            try:
                stream.close()
            except Exception:  # noqa: BLE001
                pass


@pytest.fixture
def event_log():
    """Events the store emits in this process during the test (a list of dicts)."""
    seen: list[dict] = []
    events.add_listener(seen.append)
    yield seen
    events.remove_listener(seen.append)


@pytest.fixture
def armed(monkeypatch):
    """``armed(spec)`` sets HERMES_STATE_FAILPOINTS in this process and reloads; reset after."""

    def _arm(spec: str) -> None:
        monkeypatch.setenv(failpoints.ENV_VAR, spec)
        failpoints.reload()

    yield _arm
    os.environ.pop(failpoints.ENV_VAR, None)
    failpoints.reload()


@pytest.fixture
def db(tmp_path):
    """A :class:`SessionDB` on a fresh temporary store, closed at teardown (a module may
    override it, also by requesting it: ``def db(db): ...``)."""
    with SessionDB(tmp_path / "state.db") as store:
        yield store


# ---------------------------------------------------------------------- generator figures
#: ``record_property(GENERATOR_CASES, (generator, cases))`` in a test: the session's closing
#: summary adds the cases each generator ran (issue 22: "quote how many cases each ran");
#: ``record_property(GENERATOR_FINDINGS, (generator, [finding, ...]))`` what it found
#: (``tests/sweep.py``'s ``tally`` records both).
GENERATOR_CASES = "generator_cases"
GENERATOR_FINDINGS = "generator_findings"


#: Full-sweep cases this run left out (``tests/sweep.py``), for the closing summary.
_SWEEP_DESELECTED: list[int] = [0]


def pytest_collection_modifyitems(config, items):
    """Leave the full-sweep cases (``sweep`` marker) out of an ordinary run: deselected, so
    pytest's own summary counts them apart from passed and skipped, and the closing summary
    says how to run them. ``HERMES_FULL_SWEEP=1`` (or ``-m`` naming ``sweep``) keeps them."""
    from sweep import FULL

    if FULL or "sweep" in (config.getoption("markexpr", "") or ""):
        return
    kept, left = [], []
    for item in items:
        (left if item.get_closest_marker("sweep") else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept
        _SWEEP_DESELECTED[0] += len(left)


def pytest_sessionfinish(session):
    """An xdist worker hands its count of deselected full-sweep cases to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["sweep_deselected"] = _SWEEP_DESELECTED[0]


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """The controller keeps the largest count a worker reported (each collects every case)."""
    n = getattr(node, "workeroutput", {}).get("sweep_deselected", 0)
    _SWEEP_DESELECTED[0] = max(_SWEEP_DESELECTED[0], n)


def pytest_terminal_summary(terminalreporter):
    """The generators' case counts, then the I/O error sweep's table (issue 22)."""
    _generator_cases(terminalreporter)
    _io_sweep_summary(terminalreporter)


def _generator_cases(terminalreporter) -> None:
    totals: dict[str, int] = {}
    findings: dict[str, list] = {}
    for key in ("passed", "failed"):
        for report in terminalreporter.stats.get(key, []):
            if getattr(report, "when", "call") != "call":
                continue
            for name, value in getattr(report, "user_properties", ()):
                if name == GENERATOR_CASES:
                    generator, cases = value
                    totals[generator] = totals.get(generator, 0) + int(cases)
                elif name == GENERATOR_FINDINGS:
                    generator, found = value
                    findings.setdefault(generator, []).extend(found)
    if _SWEEP_DESELECTED[0]:
        terminalreporter.write_line(
            f"{_SWEEP_DESELECTED[0]} full-sweep generator cases deselected (the sample ran); "
            "the full sweep: HERMES_FULL_SWEEP=1 pytest -m sweep")
    if totals:
        from sweep import FULL

        terminalreporter.write_sep("-", "generator cases (issue 22)")
        terminalreporter.write_line("tier: " + ("full sweep" if FULL else "sample (the full "
                                    "sweep: HERMES_FULL_SWEEP=1 or CHAOS_GENERATORS=full)"))
        for generator, cases in sorted(totals.items()):
            found = findings.get(generator, [])
            terminalreporter.write_line(f"{generator}: {cases} cases"
                                        + (f", {len(found)} finding(s)" if generator in findings
                                           else ""))
            for finding in found[:10]:
                terminalreporter.write_line(f"    {finding}")


# --------------------------------------------------------------------------- I/O error sweep
_SWEEP_ROWS: list[dict] = []


def pytest_runtest_logreport(report):
    """Collect the I/O error sweep's rows (``record_property("io_sweep", ...)``); with xdist
    the reports reach the controller with their properties."""
    if report.when == "call":
        _SWEEP_ROWS.extend(v for k, v in report.user_properties if k == "io_sweep")


def _io_sweep_summary(terminalreporter) -> None:
    """The sweep's figure: sites swept (operations that could fail) and runs per workload;
    the full tier also records it in benchmarks/results/io_sweep.json."""
    if not _SWEEP_ROWS:
        return
    rows = sorted(_SWEEP_ROWS, key=lambda r: (r["workload"], r["errno"]))
    tr = terminalreporter
    tr.section("I/O error sweep (issue 22)")
    for r in rows:
        tr.write_line(f"{r['workload']:<11} {r['errno']:<6} sites {r['sites']:>4}  runs "
                      f"{r['runs']:>4}  faults fired {r.get('faults_fired', '-'):>4}  failed runs "
                      f"{r['failed_runs']:>4}  findings {r['findings']:>3}  "
                      f"{r['seconds']:>6.1f}s")
    sites = sum(r["sites"] for r in rows)
    runs = sum(r["runs"] for r in rows)
    import io_sweep_workloads

    every_n = all(r["full"] for r in rows)
    # the recorded figure is the whole sweep: every workload x errno ran every N (not -k)
    whole = every_n and \
        len({(r["workload"], r["errno"]) for r in rows}) == 2 * len(io_sweep_workloads.WORKLOADS)
    tier = "full sweep" if whole else "full sweep of these workloads" if every_n else "CI sample"
    tr.write_line(f"total: {sites} sites (file operations the workloads perform), {runs} of them "
                  f"failed and checked ({tier}), {sum(r['findings'] for r in rows)} findings")
    if whole:
        import time as _time

        out = REPO / "benchmarks" / "results" / "io_sweep.json"
        out.write_text(json.dumps({"recorded": _time.strftime("%Y-%m-%dT%H:%M:%SZ", _time.gmtime()),
                                   "loadavg": os.getloadavg(), "sites": sites, "runs": runs,
                                   "rows": rows}, indent=2) + "\n")
        tr.write_line(f"recorded in {out}")
