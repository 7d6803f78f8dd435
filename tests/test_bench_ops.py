"""How ``benchmarks/bench_ops.py`` prepares the store each timed run measures (issue 24).

Speed is never asserted here: these tests check that every side of a row runs on a store in
the state a user's is in, prepared the same way for all of them.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks import bench_ops, bigstore  # noqa: E402
from hermes_state.operator.recover_source import CTIME_SLACK_NS  # noqa: E402


def test_a_store_an_op_only_reads_is_older_than_recovers_rehash_window_at_every_timed_run(
        tmp_path, monkeypatch):
    # ``sessions recover`` re-hashes a source whose ctime is within CTIME_SLACK_NS of its
    # start; a user's store was not copied a second earlier, so no side may be timed on a copy
    # that fresh: neither right after the first copy (doctor) nor after a copy made for a
    # command that changed the store before (optimize, then recover).
    store = tmp_path / "src" / "state.db"
    info = bigstore.build(store, 1 << 20)
    home_db = tmp_path / "work" / "home" / "state.db"
    started: list[tuple[str, str, float]] = []
    real_child = bench_ops._child

    def child(argv: list[str], env: dict):
        op = next(a for a in argv if a in ("doctor", "optimize", "recover"))
        side = "ours" if "-c" in argv else argv[argv.index("-m") + 2].lstrip("-")
        started.append((op, side, (time.time_ns() - os.stat(home_db).st_ctime_ns) / 1e9))
        return real_child(argv, env)

    monkeypatch.setattr(bench_ops, "_child", child)
    res = bench_ops.measure(store, runs=1, only=["doctor", "optimize", "recover"],
                            work=tmp_path / "work", largest=info["largest_session"])
    assert [(op, side) for op, side, _ in started] == [
        ("doctor", "ours"), ("doctor", "bare"), ("optimize", "ours"), ("optimize", "bare"),
        ("optimize", "spec"), ("recover", "ours"), ("recover", "bare"), ("recover", "spec")]
    window = CTIME_SLACK_NS / 1e9
    for op, side, age in started:
        if op != "optimize":  # a changing command runs on a fresh copy: no such rule there
            assert age > window, (op, side, age)
    assert res["recover"]["exits"] == [0] and res["doctor"]["exits"] == [0]
