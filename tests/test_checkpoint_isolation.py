"""``checkpoint_isolation`` (issue 12) on hand-made histories of a few records: it finds a write
transaction that overlapped a checkpoint in another process (so it can fail), passes the same
history with the two apart, and is INCONCLUSIVE when no checkpoint ever had a writer beside it;
and ``no_lost_writes`` accepts a write kept only by a pre-restore snapshot when allowed (issue 11).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from chaos.checkers import CHECKERS
from chaos.checkers import isolation as ci
from chaos.checkers import no_lost_writes as nlw
from chaos.checkers.base import FAIL, INCONCLUSIVE, PASS, CheckContext


def rec(t, type_, process, **fields):
    return {"t": t, "wall": t, "process": process, "pid": 100 if process == "gateway-0" else 200,
            "type": type_, **fields}


def history(write_begin: float, write_commit: float) -> list[dict]:
    """gateway-0 checkpoints over [2.0, 3.0] (held open by a failpoint); gateway-1's append is
    in flight over [1.5, 3.5] and its transaction ran over [write_begin, write_commit]."""
    return [
        rec(1.5, "invoke", "gateway-1", op="append", op_id="gateway-1:1", payload_id="p"),
        rec(3.0, "event", "gateway-0", event="checkpoint", mode="PASSIVE", trigger="cadence",
            seq=50, lock="exclusive", t_start=2.0, t_end=3.0, busy=0, log=9, checkpointed=9),
        rec(write_commit, "event", "gateway-1", event="write", seq=1, attempts=1,
            op="append_message", lock="shared", t_begin=write_begin, t_commit=write_commit),
        rec(3.5, "ok", "gateway-1", op="append", op_id="gateway-1:1", payload_id="p"),
        rec(3.6, "sample", "sampler", seq=0, checkpoint_lock=[
            {"pid": 100, "process": "gateway-0", "mode": "exclusive", "status": "stopped"}]),
    ]


def ctx(tmp_path: Path, h: list[dict]) -> CheckContext:
    return CheckContext(history=sorted(h, key=lambda r: r["t"]), store_path=tmp_path / "x.db",
                        home=tmp_path, run_dir=tmp_path, scenario={})


def test_a_write_committed_inside_a_checkpoint_is_an_overlap(tmp_path):
    h = history(2.5, 2.6)  # what the lock forbids: begun and committed mid-checkpoint
    assert len(h) == 5
    (case,) = ci.checkpoint_overlap_cases(ci.write_intervals(h), ci.checkpoint_intervals(h))
    assert case["overlap_s"] == 0.1 and "gateway-1 committed" in case["why"]
    v = CHECKERS[ci.CHECKPOINT_NAME](ctx(tmp_path, h), {})
    assert v.status == FAIL and v.figures["violations"] == {"overlap": 1}
    assert v.evidence[0]["checkpoint"]["process"] == "gateway-0"


def test_a_write_straddling_either_end_overlaps_too(tmp_path):
    for begin, commit in ((1.9, 2.1), (2.9, 3.1), (1.0, 4.0)):
        h = history(begin, commit)
        assert len(ci.checkpoint_overlap_cases(ci.write_intervals(h), ci.checkpoint_intervals(h))) == 1


def test_the_same_write_after_the_checkpoint_passes(tmp_path):
    h = history(3.0, 3.1)  # waited for the lock: begins when the checkpoint ends
    assert ci.checkpoint_overlap_cases(ci.write_intervals(h), ci.checkpoint_intervals(h)) == []
    v = CHECKERS[ci.CHECKPOINT_NAME](ctx(tmp_path, h), {})
    assert v.status == PASS, v.to_dict()
    assert v.figures["contended"] == 1 and v.figures["write_locks"] == {"shared": 1}
    assert v.figures["exclusive_holders"] == {"gateway-0 (stopped)": 1}


def test_no_writer_beside_any_checkpoint_is_inconclusive(tmp_path):
    h = [r for r in history(3.0, 3.1) if r["type"] not in ("invoke", "ok")]
    v = CHECKERS[ci.CHECKPOINT_NAME](ctx(tmp_path, h), {})
    assert v.status == INCONCLUSIVE and v.figures["contended"] == 0
    assert CHECKERS[ci.CHECKPOINT_NAME](ctx(tmp_path, h), {"min_contended": 0}).status == PASS


def test_skipped_checkpoints_have_no_interval():
    h = history(2.5, 2.6)
    h[1] = rec(3.0, "event", "gateway-0", event="checkpoint", mode="PASSIVE", trigger="close",
               seq=3, skipped="checkpoint lock busy", lock="busy")
    assert ci.checkpoint_intervals(h) == []


def test_no_lost_writes_accepts_a_pre_restore_copy_only_when_allowed():
    h = [rec(1, "invoke", "cron-0", op="append", op_id="cron-0:1", payload_id="a"),
         rec(2, "ok", "cron-0", op="append", op_id="cron-0:1", payload_id="a")]
    by_pid = nlw.appends(h)
    places = nlw.Places(pre_restore=Counter({"a": 1}))
    assert [c["payload_id"] for c in nlw.lost_cases(by_pid, places, [])] == ["a"]
    assert nlw.lost_cases(by_pid, places, ["pre_restore"]) == []
    assert nlw.lost_cases(by_pid, nlw.Places(), ["pre_restore"])  # nowhere: lost


def test_the_held_checkpoint_scenario_fails_the_checker_with_the_lock_off(tmp_path):
    """The real-run proof that the checker can fail: the same scenario that passes in CI, run
    with HERMES_STATE_CHECKPOINT_LOCK=off, and reported as NOT mitigated."""
    import json
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "HERMES_STATE_CHECKPOINT_LOCK": "off", "COLUMNS": "220"}
    proc = subprocess.run([sys.executable, "-m", "chaos", "run", "scenarios/checkpoint_held.yaml",
                           "--out", str(tmp_path), "--json"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    verdicts = {v["checker"]: v for v in results["verdicts"]}
    assert verdicts["checkpoint_isolation"]["status"] == FAIL, verdicts["checkpoint_isolation"]
    assert verdicts["checkpoint_isolation"]["figures"]["write_locks"].get("off")
    assert verdicts["no_lost_writes"]["status"] == PASS  # the race itself is rare; the overlap is not
    assert results["wal_reset"]["line"] == ("exposed, NOT mitigated (disabled by "
                                            "HERMES_STATE_CHECKPOINT_LOCK=off)")
    assert "exposed, NOT mitigated (disabled by" in proc.stdout and proc.returncode == 1


def with_wal(h: list[dict], wal: list[int] | None) -> list[dict]:
    out = []
    for r in h:
        if r.get("event") == "write":
            r = {**r, "wal": wal}
        out.append(r)
    return out


def test_a_write_that_could_not_restart_the_wal_may_run_beside_a_checkpoint(tmp_path):
    """Issue 24 item 3: the write began with frames not yet backfilled (nBackfill < mxFrame),
    so its snapshot does not use read slot 0 and walRestartLog leaves the log alone."""
    for wal in ([120, 80], [0, 0]):
        h = with_wal(history(2.5, 2.6), wal)
        v = CHECKERS[ci.CHECKPOINT_NAME](ctx(tmp_path, h), {})
        assert v.status == PASS, v.to_dict()
        assert v.figures["overlaps_of_writes_that_cannot_restart"] == 1
        assert v.figures["writes_that_may_restart"] == 0


def test_a_write_that_could_restart_the_wal_may_not(tmp_path):
    for wal in ([120, 120], None, ["?", 1]):
        h = with_wal(history(2.5, 2.6), wal)
        v = CHECKERS[ci.CHECKPOINT_NAME](ctx(tmp_path, h), {})
        assert v.status == FAIL and v.figures["violations"] == {"overlap": 1}, wal
