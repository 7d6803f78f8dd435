"""``python -m benchmarks`` runs end to end on tiny sizes and writes the results JSON (SPEC §17).

Shape only: speed is measured by the benchmarks themselves, never asserted in tests.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def test_quick_harness_writes_results_json(tmp_path):
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--scale", "0.02", "--only",
         "append,search,migration", "--out", str(out), "--cache", str(tmp_path / "cache")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert res.returncode in (0, 1, 3), res.stderr  # 3: LOADED (benchmarks/verdicts.py)
    data = json.loads(out.read_text())
    verdicts = [r["verdict"] for r in data["rows"]]
    assert set(verdicts) <= {"PASS", "FAIL", "EXPLAINED", "LOADED", "info"}
    assert res.returncode == (1 if "FAIL" in verdicts else 3 if "LOADED" in verdicts else 0)
    assert data["mode"] == "quick" and data["total_s"] > 0
    assert {"cpu_count", "python", "sqlite", "packages"} <= set(data["machine"])
    assert [r["id"] for r in data["rows"]] == ["append", "search", "migration"]
    for row in data["rows"]:
        assert {"what", "reference", "unit", "ours", "ref", "ratio", "target", "pass"} <= set(row)
        assert {"median", "min", "max"} <= set(row["ours"]) and row["ours"]["median"] > 0
        assert row["ref"]["min"] <= row["ref"]["median"] <= row["ref"]["max"]
        assert row["pass"] in (True, False)
    assert "append" in res.stdout and str(out) in res.stdout


def test_unknown_row_is_a_usage_error(tmp_path):
    res = subprocess.run([sys.executable, "-m", "benchmarks", "--only", "nope"], cwd=REPO,
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and "nope" in res.stderr


def test_lock_rows_compare_with_and_without_the_checkpoint_lock(tmp_path):
    """Issue 12: the lock's cost rows run on tiny sizes, each with its 'off' reference."""
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--scale", "0.1", "--only",
         "lock-append,lock-writers8,lock-stall", "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["id"] for r in rows] == ["lock-append", "lock-writers8", "lock-stall"]
    for row in rows:
        assert "HERMES_STATE_CHECKPOINT_LOCK=off" in row["reference"] and row["pass"] is None
        assert row["ours"]["median"] > 0 and row["ref"]["median"] > 0
    assert rows[1]["extra"]["errors"] == 0 and rows[2]["extra"]["errors"] == 0


def test_a_skipped_rows_install_hint_keeps_its_brackets():
    """Rich markup must not eat ``[bench]`` from ``pip install -e '.[bench]'`` (issue 16)."""
    import io

    from rich.console import Console

    sys.path.insert(0, str(REPO))
    try:
        from benchmarks.rows import row as make_row
        from benchmarks.table import render
    finally:
        sys.path.remove(str(REPO))
    row = make_row("peer", "append_message (peer comparison)", "sqlite-utils insert + FTS", "msg/s",
               [float("nan")], [float("nan")], float("nan"), "none", None,
               skipped="No module named 'sqlite_utils': pip install -e '.[bench]'")
    buf = io.StringIO()
    render({"machine": {"cpu_count": 2, "python": "3.11", "sqlite": "3.40.1"}, "mode": "quick",
            "rows": [row], "total_s": 0.1, "command": "python -m benchmarks"},
           Console(file=buf, width=200))
    assert "pip install -e '.[bench]'" in buf.getvalue(), buf.getvalue()


@pytest.mark.parametrize("args, says", [
    (["--only", ","], "--only names no row"),
    (["--scale", "nan"], "finite number > 0"),
    (["--scale", "inf"], "finite number > 0"),
    (["--out", "{fifo}", "--only", "append"], "not a regular file"),
    (["--out", "{db}", "--only", "append"], "SQLite database"),
    (["--out", "{db}-wal", "--only", "append"], "write-ahead log"),
    (["--out", "{dir}", "--only", "append"], "not a regular file"),
    (["--markdown", "{fifo}"], "not a results file"),
    (["--markdown", "{dir}/missing.json"], "not a results file"),
    (["--readme", "{db}"], "not a results file"),
    (["--merge", "{list}", "--only", "append"], "not a results file"),
    (["--cache", "{db}", "--only", "append"], "not a directory"),
])
def test_bad_arguments_are_usage_errors_that_write_nothing_and_never_block(
        tmp_path, capsys, args, says):
    """Found by trying to break it: --out naming a store replaced it, a FIFO blocked forever,
    nan/inf and malformed results files ended in tracebacks (after the rows had run)."""
    import sqlite3

    import benchmarks.__main__ as bench_main

    fifo, db, lst = tmp_path / "fifo", tmp_path / "state.db", tmp_path / "list.json"
    os.mkfifo(fifo)
    sqlite3.connect(db).execute("CREATE TABLE t(x)").connection.close()
    lst.write_text("[1, 2]")
    before = {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()}
    argv = [a.format(fifo=fifo, db=db, dir=tmp_path, list=lst) for a in args]
    with pytest.raises(SystemExit) as exc:
        bench_main.main(argv)
    assert exc.value.code == 2 and says in capsys.readouterr().err
    assert {p.name: p.stat().st_mtime_ns for p in tmp_path.iterdir()} == before
