"""The ``wal_growth`` checker (issue 25): a history whose WAL outgrows the bound FAILS and names
the reader that pinned it; the same history with the WAL kept small PASSES."""

from __future__ import annotations

from chaos.checkers import CHECKERS
from chaos.checkers.base import FAIL, INCONCLUSIVE, PASS, CheckContext


def ev(t, log, done, process="gateway-0"):
    return {"t": t, "wall": t, "process": process, "pid": 100, "type": "event",
            "event": "checkpoint", "mode": "PASSIVE", "trigger": "cadence", "log": log,
            "checkpointed": done, "busy": 0}


def sample(t, *readers, wal_bytes=0):
    locks = [{"pid": pid, "process": proc, "file": "state.db-shm", "start": 124, "end": 124,
              "lock": "read mark 1", "write": False, "waiting": False} for proc, pid in readers]
    # a lock that is not a read mark, and a read mark being set (write): neither is a reader
    locks += [{"pid": 100, "process": "gateway-0", "file": "state.db-shm", "start": 128,
               "end": 128, "lock": "dead-man switch", "write": False, "waiting": False},
              {"pid": 100, "process": "gateway-0", "file": "state.db-shm", "start": 125,
               "end": 125, "lock": "read mark 2", "write": True, "waiting": False}]
    return {"t": t, "wall": t, "process": "sampler", "pid": 1, "type": "sample",
            "seq": int(t * 10), "locks": locks, "wal_bytes": wal_bytes, "procs": []}


def judge(history, **params):
    history = [{"t": 0.0, "wall": 0.0, "process": "runner", "type": "phase",
                "phase": "warm-up"}] + sorted(history, key=lambda r: r["t"])
    ctx = CheckContext(history, store_path=None, home=None, run_dir=None, scenario={})
    return CHECKERS["wal_growth"](ctx, params)


def pinned():
    return [sample(0.5), sample(1.0, ("reader-0", 300)), sample(1.5, ("reader-0", 300)),
            ev(1.2, 600, 200), ev(1.6, 1400, 200), sample(2.0, ("reader-0", 300))]


def test_a_pinned_wal_fails_and_names_the_reader_and_since_when():
    v = judge(pinned(), max_frames=1000)
    assert v.status == FAIL
    assert "1400 frames" in v.summary and "it copied 200 back" in v.summary
    assert "reader-0 (PID 300, read mark 1) since 1.000s" in v.summary
    assert any(e.get("reader") == "reader-0" for e in v.evidence)
    assert v.figures["largest_log_frames"] == 1400


def test_the_same_history_with_a_bounded_wal_passes():
    history = [r if r["type"] != "event" else {**r, "log": min(r["log"], 600)}
               for r in pinned()]
    v = judge(history, max_frames=1000)
    assert v.status == PASS and "at most 600 frame(s)" in v.summary


def test_a_wal_file_past_max_bytes_fails_even_between_checkpoints():
    history = [sample(0.5, wal_bytes=1000), sample(1.0, ("reader-0", 300), wal_bytes=9000),
               ev(1.2, 100, 100)]
    v = judge(history, max_frames=1000, max_bytes=5000)
    assert v.status == FAIL and "state.db-wal reached 9000 bytes" in v.summary
    assert judge(history, max_frames=1000, max_bytes=10_000).status == PASS


def test_no_checkpoint_and_no_sample_is_inconclusive():
    assert judge([], max_frames=1000).status == INCONCLUSIVE


def test_a_wal_past_the_bound_with_no_reader_says_so():
    v = judge([sample(0.5), ev(1.0, 5000, 10)], max_frames=1000)
    assert v.status == FAIL and "no read transaction was open" in v.summary
