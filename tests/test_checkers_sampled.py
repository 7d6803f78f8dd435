"""The SPEC §16.3 checkers that read samples and timing: each fed violating and clean histories.

Histories are hand-made (``H`` from test_checkers: every record 10 ms after the previous one,
``H.at(t)`` jumps the clock) so each test states exactly the situation it judges. Sample records
follow the format of :mod:`chaos.sampler`.
"""

from __future__ import annotations

import pytest

from chaos.checkers import CHECKERS
from chaos.checkers.base import FAIL, INCONCLUSIVE, PASS, SKIPPED
from chaos.checkers.error_taxonomy import crash_class
from chaos.checkers.latency import percentile
from chaos.params import build
from chaos.history import Samples, moment
from test_checkers import H, make_ctx

WAL_NOW = {"dev": 1, "ino": 500, "bytes": 4096}
DB_NOW = {"dev": 1, "ino": 100, "bytes": 8192}


def held(ino_wal=500, current=True, deleted=False, ino_db=100):
    return {"db": {"dev": 1, "ino": ino_db, "deleted": False, "current": True},
            "wal": {"dev": 1, "ino": ino_wal, "deleted": deleted, "current": current},
            "shm": {"dev": 1, "ino": ino_wal + 1, "deleted": deleted, "current": current}}


def sample(h: H, procs=(), write_lock=None, waiting=(), path=None, wal_bytes=4096):
    """One sample record; ``procs`` = [(process, pid, status, held-dict)]."""
    entries = []
    for name, pid, status, files in procs:
        entries.append({"process": name, "pid": pid, "status": status, **files})
    return h.add("sample", "sampler", seq=len([r for r in h.records if r["type"] == "sample"]),
                 path=path or {"db": DB_NOW, "wal": WAL_NOW, "shm": WAL_NOW},
                 wal_bytes=wal_bytes, write_lock=write_lock, locks=[], procs=entries,
                 in_flight=[], waiting=list(waiting))


def at(h: H, t: float) -> None:
    """Move the clock so the next record is at 1000 + t."""
    h.t = 1000.0 + t - 0.01


def run(tmp_path, name, h: H, params=None, scenario=None):
    ctx = make_ctx(tmp_path, h.history())
    if scenario is not None:
        ctx.scenario = scenario
    return CHECKERS[name](ctx, params or {})


# ======================================================================================= samples
def test_duration_params_and_sample_lookups():
    p = CHECKERS["no_lockup"].Params
    assert build(p, {"bound": "500ms"}).bound == 0.5 and build(p, {"bound": 2}).bound == 2.0
    assert build(p, {}).bound == 5.0 and build(CHECKERS["latency"].Params, {}).p99_bound is None
    with pytest.raises(ValueError, match="soon"):
        build(p, {"bound": "soon"})
    h = H()
    for _ in range(3):
        sample(h)
    s = Samples(h.records)
    ts = [r["t"] for r in s.records]
    assert s.at_or_after(ts[0] + 0.001)["t"] == ts[1]
    assert s.at_or_before(ts[1] - 0.001)["t"] == ts[0]
    assert s.at_or_after(ts[2] + 1) is None and s.at_or_before(ts[0] - 1) is None
    assert [r["t"] for r in s.between(ts[0], ts[1])] == ts[:2]


def test_moment_names_holders_lock_owner_and_stopped():
    h = H()
    rec = sample(h, [("gateway-0", 1001, "sleeping", held(current=False, deleted=True)),
                     ("lock-0", 3001, "stopped", held())],
                 write_lock={"pid": 3001, "process": "lock-0", "command": "python locker"},
                 waiting=["gateway-1"])
    m = moment(rec)
    assert m["write_lock_owner"] == "PID 3001 lock-0 (python locker)"
    assert m["holders"][0] == "PID 1001 gateway-0: db, wal (retired), shm (retired)"
    assert m["stopped"] == ["PID 3001 lock-0"] and m["waiting"] == ["gateway-1"]


# ======================================================================================= latency
def test_percentile_is_nearest_rank():
    vals = [float(i) for i in range(1, 101)]
    assert percentile(vals, 50) == 50.0 and percentile(vals, 99) == 99.0
    assert percentile(vals, 100) == 100.0 and percentile([7.0], 99) == 7.0


def test_latency_reports_percentiles_per_op_kind(tmp_path):
    h = H()
    for i in range(1, 101):
        h.append("gateway-0", f"p{i}", latency_s=i / 1000)
    h.op("cli-0", "open", latency_s=0.5)
    h.op("lock-0", "hold_lock", latency_s=9.0)
    v = run(tmp_path, "latency", h)
    assert v.status == PASS, v.to_dict()
    row = v.figures["ops"]["append"]
    assert (row["n"], row["p50_s"], row["p95_s"], row["p99_s"], row["max_s"]) == \
        (100, 0.05, 0.095, 0.099, 0.1)
    assert v.figures["ops"]["open"]["max_s"] == 0.5


def test_latency_fails_past_a_bound_with_the_slowest_ops(tmp_path):
    h = H()
    for i in range(1, 101):
        h.append("gateway-0", f"p{i}", latency_s=i / 1000)
    h.op("lock-0", "hold_lock", latency_s=9.0)   # long by design: not bounded
    v = run(tmp_path, "latency", h, {"p99_bound": "50ms"})
    assert v.status == FAIL and v.summary.startswith("append: p99 99.0 ms > 50.0 ms")
    assert [e["record"]["payload_id"] for e in v.evidence] == ["p100", "p99", "p98"]
    assert run(tmp_path, "latency", h, {"max_bound": 0.2}).status == PASS
    assert run(tmp_path, "latency", h, {"max_bound": 0.2, "ops": ["hold_lock"]}).status == FAIL


def test_latency_inconclusive_without_completed_ops(tmp_path):
    h = H()
    h.invoke("gateway-0", "append", payload_id="p")
    assert run(tmp_path, "latency", h).status == INCONCLUSIVE


# ===================================================================================== no_lockup
def lockup_history(*, stall=True, stop=False, finish=True):
    """gateway-0's append waits from t=1 to t=8 while lock-0 owns the write lock."""
    h = H()
    at(h, 0.5)
    h.append("gateway-0", "a")
    at(h, 1.0)
    op = h.invoke("gateway-0", "append", payload_id="b", session_id="s1")
    if stop:
        h.nemesis("stop", processes=["gateway-0"], pids=[1001])
    for t in (2.0, 6.0, 7.5):
        at(h, t)
        sample(h, [("gateway-0", 1001, "stopped" if stop else "sleeping", held()),
                   ("lock-0", 3001, "sleeping", held())],
               write_lock={"pid": 3001, "process": "lock-0", "command": "python locker"},
               waiting=["gateway-0"])
    at(h, 8.0 if stall else 1.5)
    if stop:
        h.nemesis("cont", processes=["gateway-0"], pids=[1001])
    if finish:
        h.complete("gateway-0", op, "ok")
    else:
        at(h, 9.0)
        h.exit("gateway-0", -9)
    return h


def test_no_lockup_passes_quick_ops(tmp_path):
    v = run(tmp_path, "no_lockup", lockup_history(stall=False))
    assert v.status == PASS, v.to_dict()
    assert v.figures["stalls"] == 0 and v.figures["ops_judged"] == 2


def test_no_lockup_fails_a_stall_and_names_the_lock_owner(tmp_path):
    v = run(tmp_path, "no_lockup", lockup_history(), {"bound": "5s"})
    assert v.status == FAIL, v.to_dict()
    assert "gateway-0 append 7.00 s" in v.summary
    assert "write lock: PID 3001 lock-0 (python locker)" in v.summary
    ev = v.evidence[0]
    assert ev["at_that_moment"]["sample_t"] == pytest.approx(1006.0)  # first sample past 1 + 5
    assert ev["at_that_moment"]["waiting"] == ["gateway-0"]
    assert "PID 3001 lock-0: db, wal, shm" in ev["at_that_moment"]["holders"]
    assert run(tmp_path, "no_lockup", lockup_history(), {"bound": 7.5}).status == PASS


def test_no_lockup_bound_can_count_from_the_retry_budget_measured_in_the_run(tmp_path):
    """long_stall: writes wait out their whole retry budget by design, and that budget's wall
    time is the machine's (16 s nominal, 19 s seen under load). The bound then counts from the
    longest budget a write gave up after in the run; a wait past it still fails."""
    def with_budget(waited_s):
        h = lockup_history()  # an append waiting 7 s
        at(h, 8.5)
        h.add("event", "gateway-0", event="write_gave_up", attempts=15, waited_s=waited_s)
        return h

    params = {"bound": "2s", "after_retry_budget": True}
    v = run(tmp_path, "no_lockup", with_budget(5.5), params)
    assert v.status == PASS and v.figures["retry_budget_s"] == 5.5, v.to_dict()
    assert v.figures["bound_s"] == 7.5
    v = run(tmp_path, "no_lockup", with_budget(4.5), params)
    assert v.status == FAIL and v.evidence[0]["waited_s"] == pytest.approx(7.0, abs=0.05)
    assert run(tmp_path, "no_lockup", lockup_history(), params).status == FAIL  # no give-up
    assert run(tmp_path, "no_lockup", with_budget(5.5), {"bound": "2s"}).status == FAIL


def test_no_lockup_fails_an_op_that_never_returned(tmp_path):
    v = run(tmp_path, "no_lockup", lockup_history(finish=False))
    assert v.status == FAIL and v.evidence[0]["completed"] is False
    assert v.evidence[0]["waited_s"] == pytest.approx(8.0, abs=0.05)


def test_no_lockup_does_not_count_the_time_its_own_process_was_frozen(tmp_path):
    v = run(tmp_path, "no_lockup", lockup_history(stop=True))
    assert v.status == PASS, v.to_dict()
    assert v.figures["frozen_time_excluded_s"] > 6.5


def test_no_lockup_ignores_adversaries_and_listed_ops(tmp_path):
    h = H()
    h.op("lock-0", "hold_lock", latency_s=30)
    at(h, 1.0)
    op = h.invoke("gateway-0", "search")
    at(h, 20.0)
    h.complete("gateway-0", op)
    assert run(tmp_path, "no_lockup", h).status == FAIL
    v = run(tmp_path, "no_lockup", h, {"ignore_ops": ["search"]})
    assert v.status == INCONCLUSIVE and v.figures["ops_judged"] == 0


# ========================================================================= single_wal_generation
def split_brain_history(*, ok_after=True, both_sides=True):
    h = H()
    for _ in range(4):
        sample(h, [("gateway-0", 1001, "sleeping", held())])
    h.append("gateway-0", "a")                                    # before: current generation
    h.nemesis("delete_sidecars", files=["wal", "shm"])
    sample(h, [("gateway-0", 1001, "sleeping", held(current=False, deleted=True))],
           path={"db": DB_NOW, "wal": {"dev": 1, "ino": 900, "bytes": 32}, "shm": None})
    h.append("gateway-0", "b", "ok" if ok_after else "fail",
             **({} if ok_after else {"error": "DeletedWalGenerationError"}))
    if both_sides:
        sample(h, [("gateway-0", 1001, "sleeping", held(current=False, deleted=True))])
    else:
        sample(h, [("gateway-0", 1001, "sleeping", held(ino_wal=900))])
    return h


def test_single_wal_generation_fails_a_commit_into_a_retired_wal(tmp_path):
    v = run(tmp_path, "single_wal_generation", split_brain_history())
    assert v.status == FAIL, v.to_dict()
    assert "gateway-0" in v.summary and "inode 500 (path has 900)" in v.summary
    ev = v.evidence[0]
    assert ev["record"]["payload_id"] == "b" and ev["retired_wal"]["ino"] == 500
    assert ev["sample_before"]["entry"]["wal"]["current"] is False
    assert v.figures["processes_holding_a_retired_wal"] == ["gateway-0"]


def test_single_wal_generation_passes_when_the_holder_only_fails(tmp_path):
    v = run(tmp_path, "single_wal_generation", split_brain_history(ok_after=False))
    assert v.status == PASS, v.to_dict()
    assert v.figures["samples_with_a_retired_wal"] == 2 and v.figures["violations"] == 0


def test_single_wal_generation_one_sided_evidence_is_ambiguous(tmp_path):
    # "a" straddles the deletion (current before, retired after); "b" straddles the holder's
    # move to the new generation (retired before, current after): neither is judged
    v = run(tmp_path, "single_wal_generation", split_brain_history(both_sides=False))
    assert v.status == PASS and v.figures["ambiguous"] == 2


def test_single_wal_generation_inconclusive_and_skipped(tmp_path):
    h = H()
    h.append("gateway-0", "a")
    sample(h, [("gateway-0", 1001, "sleeping", held())])
    v = run(tmp_path, "single_wal_generation", h)
    assert v.status == INCONCLUSIVE and "min_samples 5" in v.summary
    h.add("sample", "sampler", seq=0, unavailable="no /proc on this platform")
    v = run(tmp_path, "single_wal_generation", h)
    assert v.status == SKIPPED and "no /proc" in v.summary


# =========================================================================== liveness_after_heal
def heal_history(*, commit_after=True, exit_early=False):
    h = H()
    h.spawn("gateway-0")
    h.spawn("gateway-1")
    h.append("gateway-0", "a")
    h.append("gateway-1", "b")
    at(h, 5.0)
    h.add("phase", "runner", phase="heal")
    at(h, 5.5)
    if commit_after:
        h.append("gateway-0", "c")
        h.append("gateway-1", "d")
    else:
        h.append("gateway-0", "c")
        h.append("gateway-1", "d", "fail", error="WriteContentionError")
        at(h, 7.9)
        sample(h, [("gateway-1", 1002, "sleeping", held()), ("lock-0", 3001, "stopped", held())],
               write_lock={"pid": 3001, "process": "lock-0", "command": "locker"})
    if exit_early:
        at(h, 6.0)
        h.exit("gateway-1")
    at(h, 9.0)
    h.exit("gateway-0")
    return h


def test_liveness_after_heal_passes_when_every_writer_commits(tmp_path):
    v = run(tmp_path, "liveness_after_heal", heal_history())
    assert v.status == PASS, v.to_dict()
    assert set(v.figures["first_commit_after_heal_s"]) == {"gateway-0", "gateway-1"}


def test_liveness_after_heal_fails_a_writer_that_stays_stuck(tmp_path):
    v = run(tmp_path, "liveness_after_heal", heal_history(commit_after=False), {"deadline": "3s"})
    assert v.status == FAIL, v.to_dict()
    assert "gateway-1" in v.summary and "write lock: PID 3001 lock-0 (locker)" in v.summary
    assert "stopped: PID 3001 lock-0" in v.summary
    assert v.evidence[0]["writes_after_heal"][0]["error"] == "WriteContentionError"
    assert v.figures["no_commit"] == ["gateway-1"]


def test_liveness_after_heal_late_commit_fails(tmp_path):
    v = run(tmp_path, "liveness_after_heal", heal_history(), {"deadline": 0.2})
    assert v.status == FAIL and set(v.figures["no_commit"]) == {"gateway-0", "gateway-1"}


def test_liveness_after_heal_inconclusive_without_heal_or_writers(tmp_path):
    h = H()
    h.append("gateway-0", "a")
    assert run(tmp_path, "liveness_after_heal", h).status == INCONCLUSIVE
    h = H()
    h.spawn("gateway-0")
    h.append("gateway-0", "a")
    h.add("phase", "runner", phase="heal")
    h.exit("gateway-0")
    v = run(tmp_path, "liveness_after_heal", h)
    assert v.status == INCONCLUSIVE and v.figures["not_tested"] == ["gateway-0"]


# ================================================================================ error_taxonomy
def test_error_taxonomy_allows_only_listed_classes(tmp_path):
    h = H()
    h.append("gateway-0", "a")
    h.append("gateway-0", "b", "fail", error="DeletedWalGenerationError", message="deleted wal")
    h.invoke("gateway-0", "append", payload_id="c")     # killed: synthesized info, no error
    v = run(tmp_path, "error_taxonomy", h, {"allow": ["DeletedWalGenerationError"]})
    assert v.status == PASS, v.to_dict()
    assert v.figures["errors_by_class"] == {"DeletedWalGenerationError": 1}
    v = run(tmp_path, "error_taxonomy", h)
    assert v.status == FAIL and "1 DeletedWalGenerationError reached gateway-0" in v.summary
    assert v.evidence[0]["record"]["payload_id"] == "b"


def test_error_taxonomy_fails_uninjected_corruption(tmp_path):
    h = H()
    h.append("gateway-0", "a", "info", error="DatabaseError",
             message="database disk image is malformed")
    v = run(tmp_path, "error_taxonomy", h, {"allow": ["DatabaseError"]})
    assert v.status == FAIL and "no corrupting fault" in v.summary


def test_error_taxonomy_corruption_after_an_injected_fault_passes(tmp_path):
    h = H()
    h.append("gateway-0", "a")
    h.nemesis("corrupt_page", phase="start", page=3)
    h.append("gateway-0", "b", "fail", error="StateDbCorruptError", message="malformed")
    h.event("gateway-0", "refusal", reason="corrupt", detail="database disk image is malformed")
    v = run(tmp_path, "error_taxonomy", h)
    assert v.status == PASS, v.to_dict()
    assert v.figures["corruption_signals_injected"] == 2


def test_error_taxonomy_corruption_before_the_fault_is_not_explained(tmp_path):
    h = H()
    h.append("gateway-0", "a", "fail", error="StateDbCorruptError", message="x")
    h.nemesis("zero_db", phase="start")
    v = run(tmp_path, "error_taxonomy", h)
    assert v.status == FAIL and v.figures["corruption_signals_unexplained"] == 1


def test_error_taxonomy_role_crash_and_maintenance_output(tmp_path):
    h = H()
    h.append("gateway-0", "a")
    h.event("cli-0", "role_crashed", error="Traceback...\n  File x\nKeyError: 'sid'\n")
    v = run(tmp_path, "error_taxonomy", h, {"allow": []})
    assert v.status == FAIL and "KeyError reached cli-0" in v.summary
    assert crash_class("Traceback\nsqlite3.OperationalError: database is locked") == \
        "OperationalError"
    h = H()
    h.op("maint-0", "run", stdout="doctor: file is not a database", exit_code=1)
    assert run(tmp_path, "error_taxonomy", h).status == FAIL


# =========================================================================== maintenance_refusal
REFUSAL_TEXT = ("Refusing `sessions optimize-storage`: another process is using {db}.\n"
                "  PID {pid} (python gateway): state.db, state.db-shm, state.db-wal\n")
MAINT_SCENARIO = {"roles": [{"name": "gateway", "kind": "gateway", "count": 1},
                            {"name": "maint", "kind": "maintenance", "count": 1}]}


def maint_history(*, exit_code=1, named=(1001,), text=True, dry_run=False, force=False,
                  command="optimize-storage", new_db_ino=None, child_lock=False,
                  holder_alive=True, stdout=""):
    h = H()
    sample(h, [("gateway-0", 1001, "sleeping", held())])
    h.append("gateway-0", "a")
    op = h.invoke("maint-0", "run", command=command, force=force, dry_run=dry_run, args=[])
    if child_lock:
        sample(h, [("gateway-0", 1001, "sleeping", held())],
               write_lock={"pid": 4242, "process": None, "command": "python -m hermes_state"})
    out = REFUSAL_TEXT.format(db="/h/state.db", pid=1001) if text else ""
    h.complete("maint-0", op, "fail" if exit_code else "ok", exit_code=exit_code, stdout=stdout,
               stderr=out, named_pids=list(named), child_pid=4242,
               error=f"exit {exit_code}" if exit_code else None)
    path = {"db": {**DB_NOW, "ino": new_db_ino or DB_NOW["ino"]}, "wal": WAL_NOW, "shm": WAL_NOW}
    sample(h, [("gateway-0", 1001, "sleeping", held())] if holder_alive else [], path=path)
    h.append("gateway-0", "b")
    return h


def maint(tmp_path, h, params=None):
    return run(tmp_path, "maintenance_refusal", h, params, scenario=MAINT_SCENARIO)


def test_maintenance_refusal_passes_a_correct_refusal(tmp_path):
    v = maint(tmp_path, maint_history())
    assert v.status == PASS, v.to_dict()
    assert v.figures["refused_ok"] == 1 and v.figures["runs"][0]["live_writers"] == {
        "gateway-0": 1001}
    assert v.evidence[0]["named_pids"] == [1001]


@pytest.mark.parametrize("kwargs, words", [
    ({"exit_code": 0}, "exit 0, not 1, under live writer(s) gateway-0 (PID 1001)"),
    ({"named": ()}, "does not name gateway-0 (PID 1001)"),
    ({"text": False}, "does not say 'Refusing'"),
    ({"new_db_ino": 777}, "state.db inode changed 100 -> 777"),
    ({"child_lock": True}, "(PID 4242) owned the WAL write lock in 1 sample(s)"),
])
def test_maintenance_refusal_fails_a_wrong_refusal(tmp_path, kwargs, words):
    v = maint(tmp_path, maint_history(**kwargs))
    assert v.status == FAIL, v.to_dict()
    assert words in v.summary


def test_maintenance_refusal_dry_run_must_work(tmp_path):
    v = maint(tmp_path, maint_history(dry_run=True, exit_code=0, text=False, named=()),
              {"min_refusals": 0})
    assert v.status == PASS and v.figures["dry_runs_judged"] == 1
    v = maint(tmp_path, maint_history(dry_run=True, exit_code=1), {"min_refusals": 0})
    assert v.status == FAIL and "--dry-run exited 1, not 0" in v.summary


def test_maintenance_refusal_inconclusive_without_a_live_writer_or_gated_command(tmp_path):
    v = maint(tmp_path, maint_history(exit_code=0, holder_alive=False))
    assert v.status == INCONCLUSIVE and v.figures["quiet_runs"] == 1
    v = maint(tmp_path, maint_history(force=True, exit_code=0))
    assert v.status == INCONCLUSIVE and v.figures["forced"] == 1
    v = maint(tmp_path, maint_history(command="doctor", exit_code=0))
    assert v.status == INCONCLUSIVE and v.figures["not_gated"] == 1


def test_maintenance_refusal_prune_under_a_gateway_is_a_hand_off(tmp_path):
    handed = ("2 ended session(s) older than 0 days would be pruned\nthe gateway (PID 1001) owns "
              "the store: prune handed to it as request 5f3c; it runs between turns\n")
    v = maint(tmp_path, maint_history(command="prune", exit_code=0, text=False, named=(),
                                      stdout=handed))
    assert v.status == INCONCLUSIVE and v.figures["handed_off"] == 1
    # refused (another holder beside the gateway): not judged either
    v = maint(tmp_path, maint_history(command="prune", exit_code=1))
    assert v.status == INCONCLUSIVE and v.figures["handed_off"] == 1


def test_maintenance_refusal_fails_a_prune_run_itself_under_the_gateway(tmp_path):
    """SPEC §11: the owning gateway executes the deletion (skipping busy sessions); a prune
    that deleted the sessions itself while the gateway lived broke that rule."""
    ran = "2 ended session(s) older than 0 days would be pruned\npruned 2 session(s)\n"
    v = maint(tmp_path, maint_history(command="prune", exit_code=0, text=False, named=(),
                                      stdout=ran))
    assert v.status == FAIL, v.to_dict()
    assert "without handing the deletion to the gateway" in v.summary
    assert "gateway-0 (PID 1001)" in v.summary


def test_maintenance_refusal_reads_the_nemesis_run_fault(tmp_path):
    h = H()
    sample(h, [("gateway-0", 1001, "sleeping", held())])
    h.nemesis("run", phase="start", command="optimize", force=False, dry_run=False)
    h.nemesis("run", phase="done", command="optimize", force=False, dry_run=False,
              exit_code=0, stdout="optimized", stderr="", named_pids=[], child_pid=4243)
    sample(h, [("gateway-0", 1001, "sleeping", held())])
    v = maint(tmp_path, h)
    assert v.status == FAIL and "optimize" in v.summary and "exit 0, not 1" in v.summary
    assert run(tmp_path, "maintenance_refusal", h, {"role": "maint"},
               scenario=MAINT_SCENARIO).status == INCONCLUSIVE


# ===================================================================================== exit code
@pytest.mark.parametrize("statuses, code", [
    (["PASS", "PASS"], 0),
    (["PASS", "SKIPPED"], 0),          # SKIPPED is neutral
    (["PASS", "INCONCLUSIVE"], 1),     # a run that tested nothing is not green
    (["PASS", "FAIL", "SKIPPED"], 1),
    (["INCONCLUSIVE", "SKIPPED"], 1),
    (["SKIPPED", "SKIPPED"], 4),       # e.g. no tmpfs: nothing tested, neither failed nor passed
])
def test_runner_exit_code_from_verdicts(statuses, code):
    from chaos.checkers.base import Verdict
    from chaos.checkers.base import exit_code_of

    assert exit_code_of([Verdict("x", s, "") for s in statuses]) == code


@pytest.mark.parametrize("verdicts, status", [
    ([("durability", "SKIPPED"), ("integrity", "SKIPPED"), ("liveness", "PASS"),
      ("must_observe", "PASS")], "SKIPPED"),   # the run's own verdicts never make it a pass
    ([("integrity", "PASS"), ("durability", "SKIPPED")], "PASS"),
    ([("liveness", "PASS")], "SKIPPED"),        # no checker of the store judged anything
    ([], "SKIPPED"),
    ([("integrity", "SKIPPED"), ("liveness", "INCONCLUSIVE")], "INCONCLUSIVE"),
    ([("integrity", "SKIPPED"), ("no_lost_writes", "FAIL")], "FAIL"),
])
def test_a_run_that_judged_nothing_is_skipped_never_passed(verdicts, status):
    """Issue 27 item 2: all-SKIPPED used to count as PASS (exit 0)."""
    from chaos.checkers.base import Verdict, exit_code_of, outcome_fields, run_status

    vs = [Verdict(c, s, f"{c} {s.lower()}") for c, s in verdicts]
    assert run_status(vs) == status
    assert run_status([v.to_dict() for v in vs]) == status
    fields = outcome_fields(vs)
    assert fields["verdict"] == status and fields["exit_code"] == exit_code_of(vs)
    assert fields["exit_code"] == {"PASS": 0, "SKIPPED": 4}.get(status, 1)
    if status == "SKIPPED" and verdicts:
        assert "durability skipped" in fields["skipped"] or "integrity" in fields["skipped"] \
            or fields["skipped"] == "no checker was judged"


# ============================================================================ must_observe states
def test_observed_states_from_samples():
    from chaos.history import observed_states

    h = H()
    sample(h, [("gateway-0", 1001, "sleeping", held())])
    assert observed_states(h.records) == {}
    lock = sample(h, [("gateway-0", 1001, "sleeping", held())],
                  write_lock={"pid": 3001, "process": "lock-0", "command": "x"},
                  waiting=["gateway-0"])
    retired = sample(h, [("gateway-0", 1001, "sleeping", held(current=False, deleted=True))])
    got = observed_states(h.records)
    assert got["write_lock_held"] is lock and got["lock_wait"] is lock
    assert got["retired_wal_held"] is retired


def test_must_observe_a_sampled_state_or_inconclusive():
    from chaos.checkers.observed import must_observe
    from chaos.scenario import load_scenario_text

    sc = load_scenario_text(
        "name: x\ndescription: x\nduration: 2s\nroles:\n  - {name: gateway, kind: gateway}\n"
        "expect: {integrity: {}}\nmust_observe: [retired_wal_held, checkpoint]\n")
    h = H()
    h.event("gateway-0", "checkpoint", mode="PASSIVE")
    sample(h, [("gateway-0", 1001, "sleeping", held())])
    (v,) = must_observe(sc.must_observe, h.records)
    assert v.status == INCONCLUSIVE and v.figures["missing"] == ["retired_wal_held"]
    sample(h, [("gateway-0", 1001, "sleeping", held(current=False, deleted=True))])
    (v,) = must_observe(sc.must_observe, h.records)
    assert v.status == PASS
    ev = {e["observed"]: e["first"] for e in v.evidence}
    assert ev["retired_wal_held"]["holders"] == [
        "PID 1001 gateway-0: db, wal (retired), shm (retired)"]
    assert ev["checkpoint"]["mode"] == "PASSIVE"


def test_maintenance_refusal_counts_a_holder_that_opened_after_the_last_sample(tmp_path):
    """A step triggered by a role's open lands within one sampler interval of it: the last
    sample before the command predates the open, the first after it shows the holder."""
    def history(exit_code):
        h = H()
        sample(h, [])
        op = h.invoke("gateway-0", "open", pid=1001)
        h.complete("gateway-0", op, "ok", pid=1001)
        run_op = h.invoke("maint-0", "run", command="optimize-storage", force=False,
                          dry_run=False, args=[])
        out = REFUSAL_TEXT.format(db="/h/state.db", pid=1001) if exit_code else "optimized"
        h.complete("maint-0", run_op, "fail" if exit_code else "ok", exit_code=exit_code,
                   stdout="", stderr=out, named_pids=[1001] if exit_code else [],
                   child_pid=4242, error=f"exit {exit_code}" if exit_code else None)
        sample(h, [("gateway-0", 1001, "sleeping", held())])
        return h
    v = maint(tmp_path, history(1))
    assert v.status == PASS and v.figures["runs"][0]["live_writers"] == {"gateway-0": 1001}
    v = maint(tmp_path, history(0))
    assert v.status == FAIL and "exit 0, not 1" in v.summary, v.to_dict()
