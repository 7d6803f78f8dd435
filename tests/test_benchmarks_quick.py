"""``python -m benchmarks --quick`` as a smoke gate that holds under load (issue 24 item 5): a
row that misses its target is measured once more and judged by the rerun, both kept; the
operator rows show their fixed costs apart. The harness logic on hand-made rows (speed itself
is never asserted in tests)."""

from __future__ import annotations

import os

import benchmarks.__main__ as bench_main
from benchmarks.rows import QUICK, p99_spec_bound, row, search_judged, spec_bound
from benchmarks.table import note


def _row(ratio: float, passed: bool) -> dict:
    r = row("x", "thing", "reference", "s", [ratio], [1.0], ratio, "<= 1.3x", passed)
    r["load"] = [9.5, 9.0, 8.0]
    return r


def test_a_miss_that_passes_on_the_rerun_passes_and_keeps_both(monkeypatch):
    calls = []

    def group(sizes, cache):
        calls.append(1)
        return [_row(1.1, True)]

    monkeypatch.setattr(bench_main, "ROWS", {"x": ("g", group)})
    out = bench_main.rerun_misses([_row(1.6, False)], QUICK, None)
    assert len(calls) == 1 and out[0]["pass"] is True and out[0]["ratio"] == 1.1
    rerun = out[0]["extra"]["rerun"]
    assert rerun["first_ratio"] == 1.6 and rerun["verdict"].startswith("missed once")
    assert "first run 1.60x at load 9.5, rerun 1.10x" in note(out[0])


def test_a_miss_that_repeats_fails(monkeypatch):
    monkeypatch.setattr(bench_main, "ROWS", {"x": ("g", lambda s, c: [_row(1.7, False)])})
    out = bench_main.rerun_misses([_row(1.6, False)], QUICK, None)
    assert out[0]["pass"] is False and out[0]["extra"]["rerun"]["verdict"] == "missed twice"


def test_rows_that_passed_are_not_measured_again(monkeypatch):
    monkeypatch.setattr(bench_main, "ROWS", {"x": ("g", lambda s, c: 1 / 0)})
    ok = _row(1.0, True)
    assert bench_main.rerun_misses([ok], QUICK, None) == [ok]


def test_quick_ratios_are_medians_of_several_interleaved_runs():
    assert QUICK.append_runs >= 3 and QUICK.ops_runs >= 3 and QUICK.contention_runs >= 3
    assert QUICK.open_runs >= 3 and QUICK.migration_runs >= 3


def test_an_operator_rows_fixed_costs_are_shown_apart():
    r = row("doctor", "doctor", "integrity_check", "s", [0.6], [0.15], 1.5, "<= 1.3x", False,
            rss_mb=30.0, bare_rss_mb=20.0, exits=[0], raw_ratio=4.0, fixed_ours_s=0.45,
            fixed_bare_s=0.05)
    assert "past each side's fixed cost (the same command on a 1 MiB store: ours 0.45 s, " \
           "bare 0.05 s), 4.00x with it" in note(r)


# ------------------------------------------------------------------ verdicts (benchmarks/verdicts.py)
from benchmarks.verdicts import LOADED_PER_CPU, counts, judge, verdict  # noqa: E402


def _missed_twice(first_load: float, rerun_load: float) -> dict:
    r = _row(1.7, False)
    r["load"] = [rerun_load, 1, 1]
    r["extra"]["rerun"] = {"verdict": "missed twice", "first_ratio": 1.6,
                           "first": {"ratio": 1.6, "load": [first_load, 1, 1]}}
    return r


def test_a_repeated_miss_on_a_machine_too_busy_to_judge_it_is_loaded_never_a_pass():
    busy = 2 * LOADED_PER_CPU + 1
    r = _missed_twice(busy, busy)
    assert verdict(r, cpus=2) == "LOADED"
    assert judge([r, _row(1.0, True)], cpus=2) == 3
    assert counts([r, _row(1.0, True)]) == "1 PASS, 1 LOADED"


def test_a_repeated_miss_is_a_failure_when_either_run_was_on_a_judgeable_machine():
    busy = 2 * LOADED_PER_CPU + 1
    for first, rerun in ((busy, 2.0), (2.0, busy), (2.0, 2.0)):
        r = _missed_twice(first, rerun)
        assert verdict(r, cpus=2) == "FAIL", (first, rerun)
    # a single miss (no rerun asked for) is judged as measured, whatever the load
    single = _row(1.7, False)
    single["load"] = [50.0, 1, 1]
    assert verdict(single, cpus=2) == "FAIL"
    assert judge([single, _missed_twice(busy, busy)], cpus=2) == 1  # a FAIL outranks LOADED


def test_a_miss_within_its_spec_bound_is_explained_and_does_not_fail_the_run():
    r = _row(1.7, False)
    r["extra"]["explained"] = "within 1.3x of its SPEC bound (1.10x)"
    assert verdict(r, cpus=2) == "EXPLAINED"
    info = _row(1.0, None)
    assert judge([r, info, _row(1.0, True)], cpus=2) == 0
    assert counts([r, info, _row(1.0, True)]) == "1 PASS, 1 EXPLAINED, 1 info"


def test_results_written_before_verdicts_are_judged_from_pass_alone():
    old = _row(1.7, False)
    assert "verdict" not in old and counts([old]) == "1 FAIL"


def _point(n: int, ours_ms: float, bare_ms: float) -> dict:
    return {"messages": n, "search": {"ratio": ours_ms / bare_ms, "sum_ours_ms": ours_ms,
                                      "sum_bare_ms": bare_ms}}


def test_growth_search_judges_sizes_where_a_query_is_long_enough_and_can_still_fail():
    # 1,000 msgs: a 0.3 ms query beside ours' fixed per-query cost; shown, with that cost
    pts = [_point(1_000, 4.5, 2.7), _point(5_000, 9.9, 8.1), _point(20_000, 29.0, 28.0)]
    judged, shown = search_judged(pts)
    assert [p["messages"] for p in judged] == [5_000, 20_000]
    assert shown == [{"messages": 1_000, "ratio": 1.667, "fixed_ms_per_query": 0.2,
                      "bare_ms_per_query": 0.3}]
    assert "1,000 msgs 1.67x, ours' fixed cost 0.20 ms/query" in note(
        row("growth-search", "w", "r", "ratio", [1.0], [1.0], 1.2, "t", True, not_judged=shown))
    # a regression at a judged size still fails the row: 5,000 msgs at 1.6x
    judged, _ = search_judged([_point(1_000, 2.8, 2.7), _point(5_000, 13.0, 8.1)])
    assert max(p["search"]["ratio"] for p in judged) > 1.5
    # every size of the full run is judged; a run of small sizes only judges its largest
    assert search_judged([_point(n, 2, 1) for n in (10_000, 100_000)])[1] == []
    assert [p["messages"] for p in search_judged([_point(200, 2, 1), _point(400, 2, 1)])[0]] \
        == [400]


def _op(ours: float, bare: float, spec: float) -> dict:
    return {"ours": [ours], "bare": [bare], "spec": [spec], "spec_rss_mb": [20.0]}


def test_a_spec_bound_is_compared_like_the_reference_past_each_sides_fixed_cost():
    # ours 0.58 s (0.27 s of it its CLI start-up on 1 MiB), the bound 0.37 s (0.08 s on 1 MiB)
    r, tiny = _op(0.58, 0.24, 0.37), _op(0.27, 0.08, 0.08)
    fixed = {"raw_ratio": 2.4, "fixed_ours_s": 0.27, "fixed_bare_s": 0.08}
    spec = spec_bound("optimize", r, tiny, fixed, ok=False, sound=True)
    assert round(spec["spec_ratio"], 2) == 1.07 and round(spec["spec_raw_ratio"], 2) == 1.57
    assert spec["fixed_spec_s"] == 0.08 and spec["explained"]
    assert "past each side's fixed cost (the bound's 0.08 s on 1 MiB), 1.57x with it" in note(
        row("optimize", "w", "r", "s", [0.58], [0.24], 2.4, "t", False, rss_mb=30,
            bare_rss_mb=25, exits=[0], **fixed, **spec))
    # a regression past the bound still fails: 0.3 s more of ours on the big store only
    spec = spec_bound("optimize", _op(0.88, 0.24, 0.37), tiny, fixed, ok=False, sound=True)
    assert spec["spec_ratio"] > 1.3 and "explained" not in spec
    # the full run (no 1 MiB store) compares whole commands, as before
    spec = spec_bound("optimize", r, None, {}, ok=False, sound=True)
    assert round(spec["spec_ratio"], 2) == 1.57 and "explained" not in spec


def test_writers8_p99_is_explained_only_within_both_targets_of_its_spec_bound():
    # ours 30 ms at 1,800 msg/s, the busy handler 20 ms (a miss); the bound 25 ms at 2,000
    spec = p99_spec_bound(30.0, 1800.0, 25.0, 2000.0, 0, ok=False)
    assert round(spec["spec_ratio"], 2) == 1.2 and spec["throughput_vs_spec"] == 0.9
    assert spec["explained"] == "p99 within 1.3x of its SPEC bound (1.20x), msg/s 0.90x of it"
    r = row("writers8-p99", "w", "r", "ms p99", [30.0], [20.0], 1.5, "t", False,
            **{k: v for k, v in spec.items() if k != "explained"}, explained=spec["explained"])
    assert verdict(r, cpus=2) == "EXPLAINED"
    assert "ours 1.20x of its p99, 0.90x of its msg/s (EXPLAINED: p99 within" in note(r)
    # past the bound's p99, below its msg/s, or with an error: still a FAIL
    assert "explained" not in p99_spec_bound(40.0, 1800.0, 25.0, 2000.0, 0, ok=False)
    assert "explained" not in p99_spec_bound(30.0, 1600.0, 25.0, 2000.0, 0, ok=False)
    assert "explained" not in p99_spec_bound(30.0, 1800.0, 25.0, 2000.0, 1, ok=False)
    # a bound whose own writes failed (its p99 of the writes that got through, or of timeouts)
    # explains nothing; nor does a bound that measured nothing
    assert "explained" not in p99_spec_bound(30.0, 1800.0, 25.0, 2000.0, 0, ok=False,
                                             bound_errors=3)
    assert "explained" not in p99_spec_bound(30.0, 1800.0, 0.0, 0.0, 0, ok=False)
    # a row that passed its own target is never "explained"
    assert "explained" not in p99_spec_bound(30.0, 1800.0, 25.0, 2000.0, 0, ok=True)


def test_the_p99_bound_takes_the_checkpoint_lock_in_the_mode_the_wal_index_asks(tmp_path):
    import fcntl
    import sqlite3

    from benchmarks.bench_contention import INSERT, UPDATE, SpecChecks, _fresh_store

    path = str(_fresh_store(tmp_path, "s", ["w0"]))
    conn = sqlite3.connect(path, isolation_level=None)
    checks = SpecChecks(path, conn, 30.0)
    other = os.open(f"{path}.bound.lock", os.O_RDONLY)

    def mode_inside_a_write() -> str:
        conn.execute("BEGIN IMMEDIATE")
        checks.enter()
        try:
            fcntl.flock(other, fcntl.LOCK_SH | fcntl.LOCK_NB)
            fcntl.flock(other, fcntl.LOCK_UN)
            return "shared"
        except BlockingIOError:
            return "exclusive"
        finally:
            conn.execute(INSERT, ("w0", "user", "x", 1.0))
            conn.execute(UPDATE, (0, "w0"))
            conn.execute("COMMIT")
            checks.leave()

    try:
        assert mode_inside_a_write() == "shared"  # frames not yet backfilled
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")  # the whole log backfilled
        assert mode_inside_a_write() == "exclusive"  # this write may restart the WAL
        assert mode_inside_a_write() == "shared"
    finally:
        os.close(other)
        conn.close()
        checks.close()


def test_the_p99_bounds_checkpoints_exclude_restarting_writes_and_keep_the_wal_bounded(
        tmp_path, monkeypatch):
    import fcntl
    import sqlite3

    from benchmarks import bench_contention
    from benchmarks.bench_contention import INSERT, UPDATE, SpecChecks, _fresh_store

    monkeypatch.setattr(bench_contention, "DRAIN_FRAMES", 3)  # a small WAL is "long"
    path = str(_fresh_store(tmp_path, "s", ["w0"]))
    conn = sqlite3.connect(path, isolation_level=None)
    checks = SpecChecks(path, conn, 30.0)
    other = os.open(f"{path}.bound.lock", os.O_RDONLY)
    reader = sqlite3.connect(path, isolation_level=None)

    def write(k: int) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(INSERT, ("w0", "user", f"{k}", 1.0))
        conn.execute(UPDATE, (0, "w0"))
        conn.execute("COMMIT")

    try:
        fcntl.flock(other, fcntl.LOCK_EX)  # a write that may restart the WAL holds it
        assert checks.checkpoint() == "skipped"
        fcntl.flock(other, fcntl.LOCK_UN)
        write(0)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM messages").fetchone()  # pins this snapshot
        for k in range(1, 4):
            write(k)  # frames the reader keeps the checkpoint from copying
        assert checks.checkpoint() == "drained"
        reader.execute("COMMIT")
        assert checks.checkpoint() == "ran"  # the whole log copied: nothing left to drain
        assert not checks._log_extended()
        write(4)
        assert checks._log_extended()  # a frame no checkpoint copied: what a drain is for
        # frames written beside a checkpoint (seen right after it) are drained by it
        monkeypatch.setattr(SpecChecks, "_log_extended", lambda self: True)
        assert checks.checkpoint() == "drained"
    finally:
        os.close(other)
        reader.close()
        conn.close()
        checks.close()


def test_an_explained_writers8_p99_row_is_built_and_only_it_is_explained(monkeypatch):
    """The EXPLAINED path of row_contention runs end to end on hand-made measurements (it
    raised "got multiple values for keyword argument 'explained'" whenever it was taken)."""
    from benchmarks import bench_contention, rows

    def run(p99_ms: float, msgs: float) -> dict:
        return {"throughput": msgs, "p99": p99_ms / 1e3, "p50": 1e-4, "max": 0.05, "errors": 0,
                "error_samples": [], "p99_without_ckpt": p99_ms / 1e3, "causes": None,
                "bare_checkpoints": {"busy": 0, "ran": 1}}

    fake = {"single": [run(5, 2000)] * 3, "ours": [run(30, 1800)] * 3,
            "busy30": [run(20, 2000)] * 3, "bound": [run(25, 2000)] * 3,
            "ours-nolock": [run(28, 1800)] * 3, "ours-events": [run(30, 1800)] * 3}
    monkeypatch.setattr(bench_contention, "measure_writers8", lambda *a, **k: fake)
    monkeypatch.setattr(bench_contention, "merged_causes", lambda s: {
        "retries": {}, "met_writes": 0, "met_total": 0, "checkpoints": {}, "writes": 0})
    monkeypatch.setattr(bench_contention, "merged_write_locks", lambda s: {})
    w8, p99 = rows.row_contention(rows.QUICK, None)
    assert p99["pass"] is False and verdict(p99, cpus=2) == "EXPLAINED"
    assert "explained" not in w8["extra"]
