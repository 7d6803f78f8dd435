"""The issue-18 rows of ``python -m benchmarks`` run end to end on tiny sizes (shape only).

Speed is what the benchmarks measure, never what a test asserts: these tests check that every
row runs beside its reference and records what the README table is made from (errors, causes,
peak RSS, the stall's configurations, the growth points, the generated README section).
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import bench_suite, bigstore, table  # noqa: E402


def _run(tmp_path, rows: str) -> dict:
    out = tmp_path / "r.json"
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    res = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--no-rerun-misses", "--scale", "0.02",
         "--only", rows,
         "--out", str(out), "--cache", str(tmp_path / "cache")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert res.returncode in (0, 1), res.stderr[-3000:]
    assert out.exists(), f"no results written (exit {res.returncode}): {res.stderr[-3000:]}"
    data = json.loads(out.read_text())
    assert data["loadavg_at_end"] is not None and data["machine"]["loadavg_at_start"]
    for row in data["rows"]:
        assert row["load"] and row["pass"] in (True, False, None)
        assert row["ours"]["median"] == row["ours"]["median"]  # not NaN
    return data


def test_contention_and_stall_rows(tmp_path):
    data = _run(tmp_path, "writers8,writers8-p99,stall")
    w8, p99, stall = data["rows"]
    assert (w8["id"], p99["id"], stall["id"]) == ("writers8", "writers8-p99", "stall")
    assert w8["extra"]["errors"] == 0
    causes = w8["extra"]["causes"]
    assert {"retries", "met_writes", "checkpoints", "writes"} <= set(causes)
    assert causes["writes"] > 0 and causes["checkpoints"]["n"] > 0
    # ours with the checkpoint lock off beside it (the p99 analysis)
    e = p99["extra"]
    assert e["p99_nolock_ms"] > 0 and e["nolock_throughput"] > 0
    assert "lock off" in table.note(p99)
    # and its SPEC bound (busy30 + the per-write checks' system calls and lock) in the same run
    assert e["spec_p99_ms"] > 0 and e["spec_throughput"] > 0 and e["spec_errors"] == 0
    assert "SPEC bound" in table.note(p99) and e["spec_ratio"] > 0
    configs = [r[0] for r in stall["detail"]["rows"]]
    assert len(configs) == 4 and any("timeout 1 s, no retry" in c for c in configs)
    assert stall["extra"]["holds"] >= 1 and stall["extra"]["errors"] == 0


def test_operator_command_and_growth_rows(tmp_path):
    data = _run(tmp_path, "doctor,backup,optimize,optimize-storage,recover,prune,export,"
                          "growth-append,growth-search")
    ids = [r["id"] for r in data["rows"]]
    assert ids == ["doctor", "backup", "optimize", "optimize-storage", "recover", "prune",
                   "export", "growth-append", "growth-search"]
    for row in data["rows"][:7]:
        e = row["extra"]
        assert e["exits"] and set(e["exits"]) == {0} and 0 < e["rss_mb"] and \
            0 < e["bare_rss_mb"], row
        # --quick: the ratio is of the work past each side's fixed cost, shown apart
        assert e["fixed_ours_s"] > 0 and e["fixed_bare_s"] > 0 and e["raw_ratio"] > 0, row
    # the rows whose issue reference covers part of the command's work carry its SPEC bound
    spec = {r["id"] for r in data["rows"] if "spec_ratio" in r["extra"]}
    assert spec == {"backup", "optimize", "recover", "export"}
    assert all(r["extra"]["spec_s"]["median"] > 0 for r in data["rows"] if r["id"] in spec)
    growth = data["rows"][7]
    assert len(growth["detail"]["rows"]) == 3 and growth["extra"]["points"]


def test_slowest_cases_are_read_from_junit(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text('<?xml version="1.0"?><testsuites><testsuite name="a">'
                   '<testcase classname="t.a" name="x" time="1.5"/>'
                   '<testcase classname="t.a" name="y" time="0.2"/>'
                   '<testcase classname="t.b" name="x" time="3"/>'
                   '</testsuite></testsuites>')
    assert bench_suite._slowest(xml, 2) == [(3.0, "t.b::x"), (1.5, "t.a::x")]
    assert bench_suite._slowest(tmp_path / "missing.xml") == []


def test_readme_section_is_regenerated_between_its_markers_only(tmp_path):
    result = {"command": "python -m benchmarks", "mode": "full", "started": "2026-12-01",
              "total_s": 12.0, "loadavg_at_end": [1.5, 1, 1],
              "machine": {"cpu_count": 2, "python": "3.11", "sqlite": "3.40.1",
                          "loadavg_at_start": [1.0, 1, 1]},
              "rows": [{"id": "append", "what": "w", "reference": "r", "unit": "s",
                        "ours": {"median": 2.0, "min": 1.0, "max": 3.0},
                        "ref": {"median": 1.0, "min": 1.0, "max": 1.0}, "ratio": 2.0,
                        "target": "<= 1.3x", "pass": False, "extra": {}, "load": [1.2, 1, 1],
                        "detail": {"title": "d", "columns": ["a", "b"], "rows": [[1, "x|y"]]}}]}
    res = tmp_path / "latest.json"
    res.write_text(json.dumps(result))
    readme = tmp_path / "README.md"
    readme.write_text(f"intro\n{table.BEGIN}\nold table\n{table.END}\noutro\n")
    assert table.update_readme(res, readme) is True
    text = readme.read_text()
    assert text.startswith("intro\n") and text.endswith("outro\n") and "old table" not in text
    assert "| append | w | r | 2.00 s (1.00-3.00)" in text and "FAIL" in text
    assert "load average 1.0 at the start and 1.5 at the end" in text and "x/y" in text
    assert table.update_readme(res, readme) is False  # the same results: no change
    readme.write_text("no markers\n")
    with pytest.raises(ValueError):
        table.update_readme(res, readme)


def test_the_generated_store_is_deterministic_and_shaped_like_users_stores(tmp_path):
    a = bigstore.build(tmp_path / "a" / "state.db", 3 << 20, seed=5)
    b = bigstore.build(tmp_path / "b" / "state.db", 3 << 20, seed=5)
    assert (a["sessions"], a["messages"]) == (b["sessions"], b["messages"])
    conn = sqlite3.connect(tmp_path / "a" / "state.db")
    roles = dict(conn.execute("SELECT role, count(*) FROM messages GROUP BY role").fetchall())
    assert set(roles) == {"user", "assistant", "tool"}
    largest = conn.execute("SELECT session_id FROM messages GROUP BY session_id "
                           "ORDER BY count(*) DESC LIMIT 1").fetchone()[0]
    assert largest == a["largest_session"] == "s00000"
    cjk = conn.execute("SELECT count(*) FROM messages WHERE content GLOB '*[一-龥]*' "
                       "OR content GLOB '*[ぁ-ん]*'").fetchone()[0]
    assert cjk > 0
    counts = conn.execute("SELECT count(*) FROM sessions s WHERE message_count != (SELECT "
                          "count(*) FROM messages m WHERE m.session_id = s.id)").fetchone()[0]
    assert counts == 0  # the session counters match the rows, as append_message keeps them
    assert conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH "
                        "'deploy'").fetchone()[0] > 0
    with pytest.raises(FileExistsError):
        bigstore.build(tmp_path / "a" / "state.db", 1 << 20)


def test_merging_results_replaces_rows_of_the_same_id_and_keeps_both_commands():
    from benchmarks.__main__ import merge_results

    def res(cmd, started, rows, total):
        return {"command": cmd, "started": started, "total_s": total, "loadavg_at_end": [1.0],
                "machine": {"cpu_count": 2}, "rows": [{"id": i, "v": v} for i, v in rows]}

    merged = merge_results(res("python -m benchmarks --only append,pytest", "t0",
                               [("append", 1), ("pytest", 1)], 10.0),
                           res("python -m benchmarks --only pytest,gate", "t1",
                               [("gate", 2), ("pytest", 2)], 5.0))
    assert [(r["id"], r["v"]) for r in merged["rows"]] == [("append", 1), ("gate", 2),
                                                           ("pytest", 2)]
    assert merged["command"] == ("python -m benchmarks --only append,pytest; then "
                                 "python -m benchmarks --only pytest,gate")
    assert merged["started"] == "t0" and merged["merged_started"] == "t1"
    assert merged["total_s"] == 15.0 and merged["machine"] == {"cpu_count": 2}
    assert merged["sources"] == [
        {"started": "t0", "command": "python -m benchmarks --only append,pytest",
         "rows": ["append"]},
        {"started": "t1", "command": "python -m benchmarks --only pytest,gate",
         "rows": ["gate", "pytest"]}]
