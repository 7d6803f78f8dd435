"""Terminal output fits 80 columns without a TTY, never with a zero-width column, never cutting a
run's scenario, seed or run directory; ``--json`` wherever a table is printed (issue 16 item 2).

The tables are rendered at 80 columns as a CI log renders them; the CLI is run in a subprocess
without a TTY and without ``COLUMNS`` (rich then uses 80 columns).
"""

from __future__ import annotations

import argparse
import io
import json
import os
import subprocess
import sys
from pathlib import Path

from rich.cells import cell_len
from rich.console import Console

from chaos.__main__ import build_parser as chaos_parser
from chaos.gate import GateRow, verdict_table as gate_table
from chaos.matrix import build_parser as matrix_parser
from chaos.report.terminal import comparison_table, runs_table, verdict_table
from hermes_state.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
CAPTURE = "state.db.retired-wal-20261201T180913Z-2345567"
LONG_RUN = "tiny-with-a-rather-long-scenario-name-to-test-width-20261201T191455Z-seed123456789"
VERDICTS = [
    {"checker": "single_wal_generation", "status": "INCONCLUSIVE",
     "summary": "75 samples; 38 with a retired -wal held (gateway-0); 0 writes committed"},
    {"checker": "stale_wal_refusal", "status": "PASS",
     "summary": f"T=1.951s: 1 holder(s), 0 ok writes after T, 225 refused, capture {CAPTURE}; "
                "2 opens refused; 24 ok after exit"},
    {"checker": "no_lost_writes", "status": "FAIL", "summary": "16 lost " * 20},
]


def render(renderable, width: int = 80, crop: bool = True) -> str:
    buf = io.StringIO()
    Console(file=buf, width=width, force_terminal=False, color_system=None).print(
        renderable, crop=crop)
    return buf.getvalue()


def assert_fits(text: str, width: int = 80, allow: tuple[str, ...] = ()) -> None:
    for line in text.splitlines():
        if any(a in line for a in allow):
            continue
        assert cell_len(line) <= width, f"{cell_len(line)} columns: {line!r}"


def assert_no_empty_column(text: str) -> None:
    for line in text.splitlines():
        for squeezed in ("┃┃", "││", "┃ ┃", "│ │", "╇╇", "┼┼"):
            assert squeezed not in line, f"a zero-width column: {line!r}"


def test_the_verdict_table_fits_80_columns_and_folds_long_words():
    text = render(verdict_table(VERDICTS, "stale-wal (seed 42)", width=80))
    assert_fits(text)
    assert_no_empty_column(text)
    assert "single_wal_generation" in text and "INCONCLUSIVE" in text
    assert "…" not in text  # nothing is cut: a long word is folded onto the next line
    assert CAPTURE[:30] in text.replace("\n", "").replace(" ", "")
    assert render(verdict_table(VERDICTS, "x")).count("┃") > 0  # the wide layout still has boxes


def test_the_side_by_side_table_fits_80_columns():
    other = [dict(v, status="PASS") for v in VERDICTS]
    text = render(comparison_table(VERDICTS, other, "original", "replay", width=80))
    assert_fits(text)
    assert_no_empty_column(text)
    assert "INCONCLUSIVE → PASS" in text and "original: " in text and "replay: " in text


def test_the_list_of_runs_never_cuts_the_scenario_the_seed_or_the_run_directory():
    results = [{"scenario": "tiny-with-a-rather-long-scenario-name-to-test-width",
                "seed": 123456789, "run_dir": f"/tmp/runs/{LONG_RUN}",
                "verdicts": [{"checker": "checkpoint_cadence", "status": "FAIL"},
                             {"checker": "integrity", "status": "PASS"}]},
               {"scenario": "stale-wal", "seed": 42, "run_dir": "/tmp/runs/stale-wal-1-seed42",
                "verdicts": [{"checker": "integrity", "status": "PASS"}]}]
    text = render(runs_table(results, width=80), crop=False)
    assert_fits(text, allow=(LONG_RUN,))
    assert "FAIL tiny-with-a-rather-long-scenario-name-to-test-width seed 123456789" in text
    assert f"     {LONG_RUN}\n" in text  # whole, on its own line
    assert "not passing: checkpoint_cadence FAIL" in text
    assert "PASS stale-wal seed 42" in text
    # A console too narrow for the table gets the lines too; a wide one keeps the table, with
    # a column for what did not pass that is never empty.
    assert render(runs_table(results, width=160), width=160, crop=False) == render(
        runs_table(results, width=80), width=160, crop=False)
    wide = render(runs_table(results, width=230), width=230)
    assert "┏" in wide and "checkpoint_cadence FAIL" in wide and LONG_RUN in wide
    assert_no_empty_column(wide)


def test_the_gate_table_fits_80_columns():
    rows = [GateRow("scenario", "stale_wal.yaml", "seed42", "PASS", "9 checkers passed",
                    seconds=12.3),
            GateRow("scenario", "a_rather_long_scenario_file_name.yaml", "seed7", "FAIL",
                    "no_lost_writes FAIL: " + "16 lost; " * 12, seconds=9.1)]
    text = render(gate_table(rows, 80))
    assert_fits(text)
    assert_no_empty_column(text)
    assert "stale_wal.yaml seed42" in text and "scenario, 12.3s" in text


def test_chaos_run_output_fits_80_columns_in_a_ci_log(tmp_path):
    sc = tmp_path / "width.yaml"
    sc.write_text("""\
name: tiny-with-a-rather-long-scenario-name-to-test-width
description: One gateway appends until its 20th ack (an event, not a time); a cadence nobody meets fails.
seed: 123456789
duration: 60s
roles:
  - {name: g, kind: gateway, workload: {appends_per_s: 20}}
nemesis:
  - {after: {role: g, ok: 20}, fault: terminate, role: g}
expect:
  no_lost_writes: {}
  checkpoint_cadence: {every: 3}
""")
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.run([sys.executable, "-m", "chaos", "run", str(sc), "--repeat", "2",
                           "--out", str(tmp_path / "runs")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    dirs = sorted(d.name for d in (tmp_path / "runs").iterdir())
    assert len(dirs) == 2
    # Only a line carrying a whole run directory may be longer than the log.
    assert_fits(out, allow=tuple(dirs))
    assert_no_empty_column(out)
    for name in dirs:
        assert f"     {name}\n" in out  # the list of runs: whole
    assert "seed 123456789" in out and "seed 123456790" in out
    assert out.count("not passing: checkpoint_cadence") == 2  # FAIL
    # --json: one results.json object per run on stdout, the console on stderr.
    proc = subprocess.run([sys.executable, "-m", "chaos", "run", str(sc), "--json",
                           "--out", str(tmp_path / "json-runs")], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env=env, stdin=subprocess.DEVNULL)
    (line,) = proc.stdout.strip().splitlines()
    assert json.loads(line)["scenario"] == "tiny-with-a-rather-long-scenario-name-to-test-width"


def _leaves(parser: argparse.ArgumentParser, prog: str):
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prog, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaves(sub, f"{prog} {name}")


#: Commands that print no table: their output is JSON or a file already.
NO_TABLE = {"hermes-state sessions export": "--format json|jsonl|md",
            "hermes-state sessions recover": "its report is JSON",
            "python -m chaos shrink": "writes a scenario file",
            "python -m chaos repro": "writes a scenario file (YAML, to stdout or -o FILE)",
            "python -m chaos matrix": "parsed by chaos.matrix (checked below)"}


def test_json_everywhere_a_table_is_printed():
    missing = []
    for tree, prog in ((build_parser(), "hermes-state"), (chaos_parser(), "python -m chaos"),
                       (matrix_parser(), "python -m chaos matrix")):
        for name, leaf in _leaves(tree, prog):
            opts = {o for a in leaf._actions for o in a.option_strings}
            if "--json" not in opts and name not in NO_TABLE:
                missing.append(name)
    assert missing == []


def test_matrix_json_is_one_array(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "chaos.matrix", "--versions", "22", "--modes",
                           "plain", "--no-real", "--json"], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    rows = json.loads(proc.stdout)
    assert [r["status"] for r in rows] == ["PASS"] and proc.returncode == 0
    assert "PASS" in proc.stderr  # the progress lines went to stderr
