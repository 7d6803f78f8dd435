"""Whether a run reached the mutated code (issue 27 item 7): the statements a rewrite marks
(:mod:`chaos.audit.reach`), and the probe that plants the marks at import and records the first
time each runs (:mod:`chaos.audit.probe`), in real child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from chaos.audit import probe, reach

SOURCE = textwrap.dedent('''\
    """A module."""

    from __future__ import annotations

    LIMIT = 15


    def f(x):
        """Doc."""
        y = x + 1
        if x > 10:
            y = y * 2
        elif x > 5:
            y = y * 3
        else:
            y = -y
        z = y
        return z


    def g():
        return 0
''')


def _site_lines(text: str, start: int, end: int, indent: int | None = None) -> list[tuple]:
    lines = text.splitlines()
    return [(s["where"], lines[s["line"] - 1].strip())
            for s in reach.sites(text, start, end, indent)]


def _rewrite(old: str, new: str) -> tuple[str, int, int, int]:
    at = SOURCE.index(old)
    text = SOURCE[:at] + new + SOURCE[at + len(old):]
    start, end, indent = reach.changed(SOURCE, at, old, new)
    return text, start, end, indent


def test_a_changed_expression_marks_its_statement_only():
    text, s, e, i = _rewrite("y = y * 2", "y = y * 4")
    assert _site_lines(text, s, e, i) == [("before", "y = y * 4")]


def test_a_changed_elif_condition_marks_the_elif_not_the_if():
    text, s, e, i = _rewrite("elif x > 5:", "elif x > 6:")
    assert _site_lines(text, s, e, i) == [("before", "elif x > 6:")]


def test_removed_text_inside_a_line_marks_that_statement():
    text, s, e, i = _rewrite("y = x + 1", "y = x")
    assert (s, e) == (SOURCE.index("y = x + 1") + len("y = x"),) * 2
    assert _site_lines(text, s, e, i) == [("before", "y = x")]


def test_a_removed_statement_marks_the_place_it_ran():
    text, s, e, i = _rewrite("    z = y\n", "")
    # the deleted statement was in f's body: the mark is the if statement before it, in the
    # same block (never the else branch's last line, which runs only for x <= 5)
    assert _site_lines(text, s, e, i) == [("after", "if x > 10:")]
    text, s, e, i = _rewrite("    return 0\n", "    pass\n")
    assert _site_lines(text, s, e, i) == [("before", "pass")]


def test_a_removed_first_statement_of_a_block_marks_the_next_one():
    text, s, e, i = _rewrite("    y = x + 1\n", "")
    assert _site_lines(text, s, e, i) == [("after", '"""Doc."""')]


def test_a_module_constant_marks_its_assignment_and_a_docstring_alone_its_docstring():
    text, s, e, i = _rewrite("LIMIT = 15", "LIMIT = 3")
    assert _site_lines(text, s, e, i) == [("before", "LIMIT = 3")]
    text, s, e, i = _rewrite('"""Doc."""', '"""Other."""')
    assert _site_lines(text, s, e, i) == [("before", '"""Other."""')]


def _fake_store(tmp_path: Path, text: str, sites: dict) -> Path:
    root = tmp_path / "copy"
    pkg = root / "hermes_state"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text(text)
    probe.install(root, sites)
    return root


def _run(root: Path, code: str, log: Path) -> str:
    env = {**os.environ, "PYTHONPATH": str(root), probe.ENV_LOG: str(log)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_probe_records_a_marked_statement_only_when_a_process_runs_it(tmp_path):
    text, s, e, i = _rewrite("y = y * 3", "y = y * 5")
    sites = {"hermes_state/mod.py": reach.sites(text, s, e, i)}
    root = _fake_store(tmp_path, text, sites)
    log = tmp_path / "probe.jsonl"
    # imported and called, but the elif branch not taken: not reached
    assert _run(root, "import hermes_state.mod as m; print(m.f(1), m.f(20))", log) == "-2 42"
    assert probe.reached(log) == []
    assert [r["origin"] for r in probe.records(log) if "origin" in r] == [
        str(root / "hermes_state" / "__init__.py")]
    # the branch taken, twice, in a second process: one record (the first time only)
    assert _run(root, "import hermes_state.mod as m; print(m.f(7), m.f(8), m.__doc__)",
                log) == "40 45 A module."
    line = text.splitlines().index("        y = y * 5") + 1
    assert probe.reached(log) == [f"hermes_state/mod.py:{line}"]
    assert sum("reached" in r for r in probe.records(log)) == 1
    # the file on disk is the mutant, unmarked; no byte code was left behind for it
    assert (root / "hermes_state" / "mod.py").read_text() == text
    assert not list((root / "hermes_state").rglob("mod*.pyc"))


def test_a_mark_before_the_future_import_keeps_the_module_importable(tmp_path):
    text = SOURCE.replace("from __future__ import annotations",
                          "from __future__ import annotations  # changed")
    at = text.index("from __future__")
    sites = {"hermes_state/mod.py": reach.sites(text, at, at + 10)}
    assert sites["hermes_state/mod.py"][0]["line"] == 3
    root = _fake_store(tmp_path, text, sites)
    log = tmp_path / "probe.jsonl"
    assert _run(root, "import hermes_state.mod as m; print(m.g())", log) == "0"
    assert probe.reached(log) == ["hermes_state/mod.py:3"]


def test_reached_records_are_not_imports_for_the_verifier(tmp_path):
    log = tmp_path / "probe.jsonl"
    pkg = tmp_path / "copy" / "hermes_state"
    pkg.mkdir(parents=True)
    log.write_text(json.dumps({"pid": 7, "origin": str(pkg / "__init__.py"), "argv": []})
                   + "\n" + json.dumps({"pid": 7, "reached": "hermes_state/x.py:3"}) + "\n"
                   + json.dumps({"pid": 9, "reached": "hermes_state/x.py:3"}) + "\n")
    assert probe.verify(log, pkg, [7]) == []
    # a role that only left a reached record did not prove where it imported from
    assert probe.verify(log, pkg, [9]) == [
        "role process pid 9 recorded no import of hermes_state from the copy"]
    assert probe.reached(log) == ["hermes_state/x.py:3"]
