"""The schema-migration matrix (SPEC §16.6): its cells, real runs of a few, and that it can fail.

The whole matrix (297 cells, about a minute) runs in ``python -m chaos gate``; here a handful of
real cells per mode, and the ways a cell must FAIL.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import matrix
from chaos.matrix import Cell, Fixtures
from hermes_state import SessionDB

REPO = Path(__file__).resolve().parent.parent


def test_cells_cover_every_version_mode_and_step():
    cells = matrix.cells()
    names = [c.name for c in cells]
    assert len(names) == len(set(names))
    assert {c.version for c in cells if c.mode == "plain"} == set(range(1, 23))
    assert {c.version for c in cells if c.mode == "writer"} == set(range(1, 23))
    crash = {(c.version, c.step) for c in cells if c.mode == "crash"}
    assert crash == {(v, n) for v in range(1, 23) for n in range(v + 1, 24)}
    assert len(cells) == 22 + 22 + 253
    quick = matrix.cells(quick=True)
    assert {c.version for c in quick if c.mode == "plain"} == set(range(1, 23))
    assert {c.version for c in quick if c.mode == "crash"} == set(matrix.QUICK_CRASH_VERSIONS)
    assert matrix.cells([22], ["crash"]) == [Cell(22, "crash", 23)]
    with pytest.raises(ValueError, match="not a historical version"):
        matrix.cells([23])
    with pytest.raises(ValueError, match="unknown matrix mode"):
        matrix.cells([1], ["sideways"])


@pytest.mark.parametrize("cell", [Cell(1, "plain"), Cell(17, "plain"), Cell(1, "crash", 11),
                                  Cell(15, "crash", 18), Cell(19, "crash", 22)],
                         ids=lambda c: c.name)
def test_real_cells_pass(tmp_path, cell):
    row = matrix.run_cell(cell, Fixtures(tmp_path))
    assert row.status == "PASS", row.problems
    assert row.name == cell.name


@pytest.mark.parametrize("version", [3, 21])
def test_old_schema_writer_interleaves_with_the_migration_and_keeps_working(tmp_path, version):
    row = matrix.run_cell(Cell(version, "writer"), Fixtures(tmp_path))
    assert row.status == "PASS", row.problems
    seen = row.figures["versions_seen_during"]
    assert len(seen) >= 2 and seen[-1] == 23  # writes landed between steps and after the last
    assert row.figures["old_writes"] > row.figures["during_migration"] > 0


def test_a_crash_point_that_is_never_reached_fails_the_cell(tmp_path):
    # From v20 the v5 step never runs: the child survives, which the cell must not call a crash.
    row = matrix.run_cell(Cell(20, "crash", 5), Fixtures(tmp_path))
    assert row.status == "FAIL"
    assert "was not killed at migrate.v5.before_commit" in row.problems[0]


def test_a_migration_error_fails_the_plain_cell(tmp_path, armed):
    armed("migrate.v18.before_commit=error(ioerr)")
    row = matrix.run_cell(Cell(15, "plain"), Fixtures(tmp_path))
    assert row.status == "FAIL"
    assert "disk I/O error" in row.problems[0]


def test_lost_rows_and_a_second_migration_are_reported(tmp_path):
    path, m = Fixtures(tmp_path).copy(9)
    SessionDB(path).close()
    victim = m["rows"]["messages"][5]
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("DELETE FROM messages WHERE id = ?", (victim["id"],))
    conn.execute("UPDATE schema_version SET version = 22")
    conn.close()
    with SessionDB(path) as db:  # migrates 22 -> 23 again
        pass
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("UPDATE schema_version SET version = 22")
    conn.close()
    assert any("second open migrated again" in p for p in matrix.second_open_problems(path))
    with SessionDB(path) as db:
        probs = matrix.api_problems(db, m)
    assert any(f"missing ids [{victim['id']}]" in p for p in probs), probs
    assert any(p.startswith("search_messages(") and p.endswith(f"message {victim['id']}")
               for p in probs), probs


def test_command_line_prints_one_json_row_per_cell(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "chaos.matrix", "--versions", "21-22",
                           "--no-real", "--modes", "plain,crash", "--jsonl"], cwd=REPO,
                          capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    rows = [json.loads(line) for line in proc.stdout.splitlines()]
    assert [r["name"] for r in rows] == ["v21/plain", "v21/crash@v22", "v21/crash@v23",
                                         "v22/plain", "v22/crash@v23"]
    assert {r["status"] for r in rows} == {"PASS"}
    bad = subprocess.run([sys.executable, "-m", "chaos.matrix", "--versions", "0-3"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "versions must lie in 1-22" in bad.stderr
