"""Every text from a run that rich renders is escaped once, where it is rendered (issue 27 item
10): ``pip install -e '.[fs]'`` printed as ``pip install -e '.'`` (rich read ``[fs]`` as markup),
as ``[bench]`` did before. Each table and line the toolkit prints is rendered here with texts
carrying brackets, and must show them verbatim (and show no markup as text).
"""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from chaos.checkers.base import Verdict
from chaos.report.gate import GateRow, short_summary, verdict_table as gate_table
from chaos.report import comparison_table, runs_table, total_line, verdict_table
from chaos.watch import print_summary

HINT = "mfusepy is not importable: pip install -e '.[fs]' [bold]not bold[/bold]"


def render(thing, width: int = 250) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, color_system=None).print(thing)
    return buf.getvalue()


def _one_line(text: str) -> str:
    return " ".join(text.split())


@pytest.mark.parametrize("width", [250, 80])  # the wide table and the compact (CI log) layout
def test_verdict_and_comparison_tables_show_brackets_verbatim(width):
    v = [Verdict("durability", "SKIPPED", HINT), Verdict("liveness", "PASS", "[x] ok")]
    out = _one_line(render(verdict_table(v, "fs [seed1]", width), width))
    assert "pip install -e '.[fs]'" in out and "[bold]not bold[/bold]" in out
    assert "fs [seed1]" in out and "[x] ok" in out
    out = _one_line(render(comparison_table(v, v, "original", "replay", width=width), width))
    assert "'.[fs]'" in out


@pytest.mark.parametrize("width", [250, 80])
def test_runs_table_and_total_line_show_brackets_verbatim(width):
    res = {"scenario": "fs[1]", "seed": 3, "run_dir": "/runs/x[fs]-seed3", "exit_code": 4,
           "verdict": "SKIPPED", "skipped": HINT,
           "verdicts": [{"checker": "durability", "status": "SKIPPED", "summary": HINT}]}
    out = _one_line(render(runs_table([res, dict(res, seed=4)], width=width), width))
    assert "fs[1]" in out and "x[fs]-seed3" in out
    out = render(total_line([res], 1.0, 4))
    assert "pip install -e '.[fs]'" in out and "fs[1] seed 3" in out


def test_gate_table_and_short_summary_show_brackets_verbatim():
    row = GateRow("scenario", "fs[a].yaml", "seed1", "SKIPPED", "every checker SKIPPED: " + HINT,
                  run_dir="/runs/[fs]")
    out = _one_line(render(gate_table([row], 250)))
    assert "fs[a].yaml seed1" in out and "pip install -e '.[fs]'" in out
    lines = "".join(render(t) for t in short_summary([row]))
    assert "pip install -e '.[fs]'" in lines and "/runs/[fs]" in lines


def test_watch_summary_shows_a_holders_command_verbatim():
    out = _one_line(print_summary_text({"db": "/h/[x]/state.db", "observations": {
        "holders": "PID 7 (python -c 'a[1]') [red]"}}))
    assert "python -c 'a[1]') [red]" in out and "/h/[x]/state.db" in out


def print_summary_text(results: dict):
    buf = io.StringIO()
    print_summary(Console(file=buf, width=250, color_system=None), results)
    return buf.getvalue()
