"""Checker case functions (Elle's ``*-cases``), each on a history of five records: the rule
finds its case, and the same history without the fault finds none (SPEC §16.3)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from chaos.checkers import checkpoint_cadence as cc
from chaos.checkers import no_lost_writes as nlw
from chaos.checkers import retry_jitter as rj
from chaos.checkers import stale_wal_refusal as swr
from chaos.checkers.base import FAIL, INCONCLUSIVE, PASS, verdict_from
from chaos.checkers.store import Capture

REFUSAL = "DeletedWalGenerationError"


def rec(t, type_, process="gateway-0", **fields):
    return {"t": t, "wall": t, "process": process, "pid": 100 if process == "gateway-0" else 200,
            "type": type_, **fields}


def op(t0, t1, outcome, n, process="gateway-0", op_="append", **fields):
    """An invoke at ``t0`` and its ``outcome`` at ``t1`` (two records)."""
    common = {"op": op_, "op_id": f"{process}:{n}", **fields}
    return [rec(t0, "invoke", process, **common), rec(t1, outcome, process, **common)]


# ------------------------------------------------------------------------------ no_lost_writes
def appends_history():
    """a: ok, b: fail (spooled), c: invoked only (info): five records."""
    return (op(1, 2, "ok", 1, payload_id="a") + op(3, 4, "fail", 2, payload_id="b", spooled=True)
            + [rec(5, "invoke", op="append", op_id="gateway-0:3", payload_id="c")])


def test_lost_cases_find_an_ok_append_missing_everywhere_allowed():
    h = appends_history()
    assert len(h) == 5
    by_pid = nlw.appends(h)
    assert {p: o.kind for p, o in by_pid.items()} == {"a": "ok", "b": "fail", "c": "info"}
    (case,) = nlw.lost_cases(by_pid, nlw.Places(capture=Counter({"a": 1})), [])
    assert (case["payload_id"], case["also_in_not_allowed"]) == ("a", ["capture"])
    assert nlw.lost_cases(by_pid, nlw.Places(capture=Counter({"a": 1})), ["capture"]) == []
    assert nlw.lost_cases(by_pid, nlw.Places(store=Counter({"a": 1})), []) == []


def test_phantom_cases_find_a_failed_append_in_the_store():
    by_pid = nlw.appends(appends_history())
    (case,) = nlw.phantom_cases(by_pid, nlw.Places(store=Counter({"a": 1, "b": 1})), False)
    assert (case["payload_id"], case["found_in"]) == ("b", ["store"])
    # spooled and replayed from the spool: allowed in the store, never in a capture
    assert nlw.phantom_cases(by_pid, nlw.Places(store=Counter({"b": 1})), True) == []
    assert nlw.phantom_cases(by_pid, nlw.Places(capture=Counter({"b": 1})), True)


def test_replay_seen_reads_record_fields_never_words_in_their_text():
    """A search for the word "replay" or a message about replays is not a spool replay (issue
    26): only a ``replay_spool`` op or a ``replay-spool`` command is."""
    h = appends_history() + op(6, 7, "ok", 4, op_="run", command="search",
                               args=["sessions", "search", "replay"], output="no replay here")
    h += op(8, 9, "ok", 5, op_="append", payload_id="d", content="please replay the spool")
    assert nlw.replay_seen(h) is False
    assert nlw.replay_seen(h + op(10, 11, "fail", 6, op_="run", command="replay-spool")) is True
    assert nlw.replay_seen(h + op(10, 11, "ok", 6, op_="replay_spool")) is True
    assert nlw.replay_seen(h + [rec(12, "nemesis", "nemesis", fault="run", phase="start",
                                    step=0, command="replay-spool")]) is True


def test_spooled_missing_cases_find_a_spooled_append_not_in_the_spool():
    by_pid = nlw.appends(appends_history())
    assert [c["payload_id"] for c in nlw.spooled_missing_cases(by_pid, nlw.Places())] == ["b"]
    assert nlw.spooled_missing_cases(by_pid, nlw.Places(spool=Counter({"b": 1}))) == []


def test_unexpected_and_duplicated_cases_read_the_store():
    h = appends_history()
    places = nlw.Places(store=Counter({"a": 2, "z": 1}))
    assert [c["payload_id"] for c in nlw.unexpected_cases(h, places)] == ["z"]
    assert [(c["payload_id"], c["rows"]) for c in nlw.duplicated_cases(places)] == [("a", 2)]
    assert nlw.unexpected_cases(h, nlw.Places(store=Counter({"a": 1}))) == []


def test_unreplayed_cases_find_a_spooled_append_a_successful_replay_did_not_import():
    """Exactly once is also at least once: b was spooled before a replay that exited 0."""
    h = (op(1, 2, "fail", 1, payload_id="b", spooled=True)
         + [rec(3, "nemesis", "nemesis", fault="run", phase="start", step=0,
                command="replay-spool"),
            rec(4, "nemesis", "nemesis", fault="run", phase="done", step=0,
                command="replay-spool", exit_code=0)])
    h.append(rec(5, "ok", op="append", op_id="gateway-0:2", payload_id="c"))
    assert len(h) == 5
    by_pid, spool = nlw.appends(h), Counter({"b": 1})
    (case,) = nlw.unreplayed_cases(by_pid, nlw.Places(spool=spool), h)
    assert (case["violation"], case["payload_id"]) == ("unreplayed", "b")
    assert nlw.unreplayed_cases(by_pid, nlw.Places(spool=spool, store=Counter({"b": 1})), h) == []
    failed = [dict(r, exit_code=1) if r.get("phase") == "done" else r for r in h]
    assert nlw.unreplayed_cases(by_pid, nlw.Places(spool=spool), failed) == []  # no replay ran
    swapped = h + [rec(6, "nemesis", "nemesis", fault="replace_db", phase="start", step=1)]
    assert nlw.unreplayed_cases(by_pid, nlw.Places(spool=spool), swapped) == []
    # rows removed on purpose after the replay: a prune run by the CLI, or handed to a gateway
    pruned = h + op(6, 7, "ok", 3, process="prune-0", op_="run", command="prune", exit_code=0)
    assert nlw.unreplayed_cases(by_pid, nlw.Places(spool=spool), pruned) == []
    handed = h + op(6, 7, "ok", 3, process="gateway-1", op_="maintenance",
                    value={"requests": [{}], "pruned": 2})
    assert nlw.unreplayed_cases(by_pid, nlw.Places(spool=spool), handed) == []
    idle = h + op(6, 7, "ok", 3, process="gateway-1", op_="maintenance",
                  value={"requests": [], "pruned": 0})  # the gateway's idle poll, every second
    assert len(nlw.unreplayed_cases(by_pid, nlw.Places(spool=spool), idle)) == 1
    # a command that removes nothing does not excuse it
    listed = h + op(6, 7, "ok", 3, process="cli-0", op_="run", command="backup", exit_code=0)
    assert len(nlw.unreplayed_cases(by_pid, nlw.Places(spool=spool), listed)) == 1


# ------------------------------------------------------------------------------ stale_wal_refusal
T = 2.0


def fault():
    return rec(T, "nemesis", "nemesis", fault="delete_sidecars", phase="done")


def test_ok_after_fault_cases_find_a_commit_into_the_retired_wal():
    h = [*op(1, 1.5, "ok", 1), fault(), *op(3, 3.5, "ok", 2)]
    assert len(h) == 5
    run = swr.observe(h, "gateway", T)
    assert run.holders == ["gateway-0"]
    (case,) = swr.ok_after_fault_cases(run)
    assert case["record"]["op_id"] == "gateway-0:2"
    assert swr.ok_after_fault_cases(swr.observe([*h[:3], *op(3, 3.5, "fail", 2, error=REFUSAL)],
                                                "gateway", T)) == []


def test_unrefused_cases_find_a_write_failing_for_another_reason():
    h = [*op(1, 1.5, "ok", 1), fault(), *op(3, 3.5, "fail", 2, error="OperationalError")]
    (case,) = swr.unrefused_cases(swr.observe(h, "gateway", T))
    assert "never got DeletedWalGenerationError" in case["why"]
    h[-1]["error"] = REFUSAL
    assert swr.unrefused_cases(swr.observe(h, "gateway", T)) == []


def test_write_after_refusal_cases_find_a_commit_after_the_sticky_refusal():
    h = [rec(1, "event", event="write", seq=1), fault(), *op(3, 3.5, "fail", 1, error=REFUSAL),
         rec(4, "event", event="write", seq=2)]
    assert len(h) == 5
    (case,) = swr.write_after_refusal_cases(swr.observe(h, "gateway", T))
    assert case["record"]["seq"] == 2
    h[4]["t"] = 3.2  # before the refusal: not a violation
    assert swr.write_after_refusal_cases(swr.observe(h, "gateway", T)) == []


def test_capture_cases_need_a_valid_capture_of_the_refused_holder():
    h = [*op(1, 1.5, "ok", 1), fault(), *op(3, 3.5, "fail", 2, error=REFUSAL)]
    run = swr.observe(h, "gateway", T)
    (case,) = swr.capture_cases(run, [])
    assert case["pids"] == [100]
    good = Capture(Path("state.db.retired-wal-x-100"), {"pid": 100})
    assert swr.capture_cases(run, [good]) == []
    bad = Capture(Path("state.db.retired-wal-x-100"), {"pid": 100}, ["wal.sha256 differs"])
    assert swr.capture_cases(run, [bad])


def test_open_cases_find_an_open_allowed_while_the_holder_lives():
    gw = op(1, 3.5, "fail", 1, error=REFUSAL)  # the holder lives until 3.5 at least
    h = [gw[0], fault(), *op(2.5, 2.6, "ok", 1, process="cli-0", op_="open"), gw[1]]
    assert len(h) == 5
    (case,) = swr.open_cases(swr.observe(h, "gateway", T))
    assert case["record"]["process"] == "cli-0"
    h[3].update(type="fail", error=REFUSAL)
    assert swr.open_cases(swr.observe(h, "gateway", T)) == []


def test_open_cases_judge_the_holders_own_reopen():
    """SPEC §10.4 counts this process too: the holder opening again beside its own retired
    generation must be refused like anyone else."""
    gw = op(1, 3.5, "fail", 1, error=REFUSAL)  # the holder lives until 3.5 at least
    h = [*op(0.1, 0.2, "ok", 0, op_="open"), gw[0], fault(),
         *op(2.5, 2.6, "ok", 2, op_="open", reopen=True), gw[1]]
    run = swr.observe(h, "gateway", T)
    assert run.holders == ["gateway-0"]
    (case,) = swr.open_cases(run)
    assert case["record"]["process"] == "gateway-0" and case["record"]["reopen"] is True
    h[5].update(type="fail", error=REFUSAL)
    assert swr.open_cases(swr.observe(h, "gateway", T)) == []


def test_after_exit_cases_find_no_writer_after_the_holder_exited():
    h = [*op(1, 1.5, "ok", 1), fault(),
         rec(3, "process", "runner", phase="exit", role="gateway", index=0, exitcode=0),
         rec(4, "fail", "cli-0", op="open", op_id="cli-0:1", error="StateDbCorruptError")]
    run = swr.observe(h, "gateway", T)
    assert run.all_exited and run.end_window == 3
    (case,) = swr.after_exit_cases(run)
    assert "none ok" in case["why"]
    h[-1].update(type="ok", error=None)
    assert swr.after_exit_cases(swr.observe(h, "gateway", T)) == []


# ------------------------------------------------------------------------------ the builder
def test_verdict_from_assembles_cases_into_one_verdict():
    fail = verdict_from("x", {"a": [], "b": [{"why": "b broke", "n": 1}]}, {"k": 1},
                        summary="s")
    assert fail.status == FAIL and fail.summary == "b broke (1 violation(s)); s"
    assert fail.figures == {"k": 1, "violations": {"b": 1}}
    assert fail.evidence == [{"why": "b broke", "n": 1, "violation": "b"}]
    assert verdict_from("x", {"a": []}, {}, summary="s", inconclusive="nothing").status == \
        INCONCLUSIVE
    assert verdict_from("x", {"a": []}, {}, summary="s").status == PASS


# ------------------------------------------------------------------------------ checkpoint_cadence
def writes_and_checkpoint(mode="PASSIVE", seq=2, exitcode=0):
    """Four writes on one connection (every=2) with one cadence checkpoint, then an exit."""
    h = [rec(k, "event", event="write", seq=k) for k in range(1, 4)]
    h.append(rec(3.5, "event", event="checkpoint", mode=mode, trigger="cadence", seq=seq))
    h.append(rec(4, "process", "runner", phase="exit", role="gateway", index=0,
                 exitcode=exitcode))
    return h


def test_mode_cases_find_a_checkpoint_that_is_not_passive():
    h = writes_and_checkpoint(mode="TRUNCATE")
    assert len(h) == 5
    (case,) = cc.mode_cases(h)
    assert "TRUNCATE" in case["why"]
    assert cc.mode_cases(writes_and_checkpoint()) == []


def test_missing_extra_and_repeated_cases_judge_each_connection():
    h = writes_and_checkpoint(seq=3)  # writes 1..3, every 2: seq 2 expected, 3 is off cadence
    conns = cc.connections(h)
    assert [(c.number, c.max_seq, len(c.cadence)) for c in conns] == [(1, 3, 1)]
    (missing,) = cc.missing_cases(conns, 2, cc.killed(h))
    assert missing["missing_seq"] == [2]
    (extra,) = cc.extra_cases(conns, 2)
    assert extra["record"]["seq"] == 3
    ok = cc.connections(writes_and_checkpoint(seq=2))
    assert cc.missing_cases(ok, 2, set()) == cc.extra_cases(ok, 2) == []
    twice = writes_and_checkpoint(seq=2)
    twice.insert(3, dict(twice[3], t=3.4))
    assert [c["seq"] for c in cc.repeated_cases(cc.connections(twice), 2)] == [[2]]


def test_a_kill_right_after_the_last_write_may_miss_only_that_checkpoint():
    h = [rec(1, "event", event="write", seq=1), rec(2, "event", event="write", seq=2),
         rec(2.5, "event", event="checkpoint", mode="PASSIVE", trigger="cadence", seq=2),
         rec(3, "event", event="write", seq=3), rec(4, "event", event="write", seq=4)]
    conns = cc.connections(h)  # every 2: the checkpoint at seq 4 is due, the process was killed
    assert cc.allowed_final(conns[0], 2, {"gateway-0"})
    assert cc.missing_cases(conns, 2, {"gateway-0"}) == []
    (case,) = cc.missing_cases(conns, 2, set())  # a clean exit has no excuse
    assert case["missing_seq"] == [4]


def test_emptied_cases_find_a_passive_checkpoint_that_found_an_empty_wal():
    """A cadence checkpoint right after its own commit that found log 0 ran TRUNCATE."""
    h = [rec(1, "event", event="write", seq=1), rec(2, "event", event="write", seq=2),
         rec(2.1, "event", event="checkpoint", mode="PASSIVE", trigger="cadence", seq=2, log=0,
             checkpointed=0, busy=0),
         rec(3, "event", event="write", seq=3), rec(4, "event", event="write", seq=4)]
    (case,) = cc.emptied_cases(h)
    assert case["record"]["seq"] == 2 and "TRUNCATE" in case["why"]
    assert cc.emptied_cases([dict(r, log=7, checkpointed=7) if r["event"] == "checkpoint"
                             else r for r in h]) == []
    # a maintenance command between the commit and the checkpoint may have truncated the WAL
    busy = h[:2] + op(2.02, 2.2, "ok", 9, process="maint-0", op_="run") + h[2:]
    assert cc.emptied_cases(busy) == []
    # so may another process's housekeeping VACUUM + TRUNCATE checkpoint (in-process)
    vacuum = rec(2.06, "event", "gateway-1", event="checkpoint", mode="TRUNCATE",
                 trigger="vacuum", t_start=2.03, t_end=2.05, log=0, checkpointed=0, busy=0)
    assert cc.emptied_cases(h[:2] + [vacuum] + h[2:]) == []
    # ... but not one that ended before the commit
    early = dict(vacuum, t=0.9, t_start=0.5, t_end=0.8)
    assert len(cc.emptied_cases([early, *h])) == 1


# ------------------------------------------------------------------------------ retry_jitter
def retries(*sleeps, attempts=None):
    return [rec(k, "event", event="retry", sleep_s=s, attempt=(attempts or {}).get(k, 1))
            for k, s in enumerate(sleeps, 1)]


def test_out_of_range_and_attempt_cases_read_each_retry():
    h = retries(0.03, 0.2, 0.05, 0.01, 0.1, attempts={5: 15})
    assert len(h) == 5
    assert [c["sleep_s"] for c in rj.out_of_range_cases(h, 0.02, 0.15)] == [0.2, 0.01]
    assert [c["attempt"] for c in rj.attempt_cases(h, 15)] == [15]
    assert rj.attempt_cases(h, 16) == []


def test_gave_up_cases_are_justified_only_by_one_long_lock_hold():
    h = [*op(0, 20, "ok", 1, process="lock-0", op_="hold_lock"),
         rec(17, "event", event="write_gave_up", waited_s=16.0), *retries(0.05, 0.06)]
    assert len(h) == 5
    assert rj.gave_up_cases(h, rj.lock_holds(h), 15.0) == []  # held 20 s across the wait
    (case,) = rj.gave_up_cases(h, rj.lock_holds(h[2:]), 15.0)  # nobody held it
    assert case["event"] == "write_gave_up"


def test_uniform_and_fixed_backoff_cases_need_enough_sleeps():
    assert rj.uniform_cases([0.05] * 5, 0.02, 0.15) == rj.fixed_backoff_cases([0.05] * 5) == []
    fixed = [0.05] * rj.MIN_FOR_KS
    assert "KS" in rj.uniform_cases(fixed, 0.02, 0.15)[0]["why"]
    assert rj.fixed_backoff_cases(fixed)[0]["largest_1ms_cluster"] == rj.MIN_FOR_KS
    spread = [0.02 + 0.13 * k / (rj.MIN_FOR_KS - 1) for k in range(rj.MIN_FOR_KS)]
    assert rj.uniform_cases(spread, 0.02, 0.15) == rj.fixed_backoff_cases(spread) == []


def test_repeated_draw_cases_find_two_processes_drawing_the_same_sleep():
    h = retries(0.0731, 0.1203, 0.0412)
    h += [dict(r, process="gateway-1") for r in retries(0.0731, 0.0999)]
    assert len(h) == 5
    (case,) = rj.repeated_draw_cases(h)
    assert case["process"] == "gateway-1" and "fixed seed" in case["why"]
    assert rj.repeated_draw_cases(h[:3] + h[4:]) == []


def test_long_attempt_cases_find_a_first_attempt_that_rode_out_a_stall():
    """A 30 s busy timeout: the append invoked at t=1 got BEGIN IMMEDIATE at t=6, one attempt."""
    slow = [*op(1.0, 6.2, "ok", 1)[:1],
            rec(6.1, "event", event="write", op="append_message", attempts=1, met=0, t_begin=6.0)]
    (case,) = rj.long_attempt_cases(slow, 3.0)
    assert case["t"] == 6.1 and "waited 5.00 s" in case["why"]
    assert rj.long_attempt_cases(slow, 0.0) == []  # the rule is off by default
    # the 1 s busy timeout: a lock error and a retry, then a later attempt - not this rule
    retried = [slow[0], dict(slow[1], attempts=5)]
    assert rj.long_attempt_cases(retried, 3.0) == []
    # a wait for a checkpoint (met) is not a busy wait; a quick first attempt is fine
    assert rj.long_attempt_cases([slow[0], dict(slow[1], met=2)], 3.0) == []
    assert rj.long_attempt_cases([slow[0], dict(slow[1], t_begin=1.9)], 3.0) == []
    # another process's invoke does not start this process's attempt
    other = [*op(5.5, 6.2, "ok", 2, process="gateway-1")[:1], slow[1]]
    assert rj.long_attempt_cases([slow[0], *other], 3.0) != []
    assert rj.long_attempt_cases(other, 3.0) == []


def test_slept_short_cases_find_an_attempt_begun_before_the_declared_sleep_ended():
    """retry at t=1 declares 0.1 s; the next attempt began 0.02 s later (t - waited_s)."""
    h = [rec(1.0, "event", event="retry", op="append_message", attempt=1, sleep_s=0.1,
             waited_s=0.0),
         rec(1.5, "event", event="retry", op="append_message", attempt=2, sleep_s=0.12,
             waited_s=0.48),
         rec(1.53, "event", event="write", op="append_message", attempts=3, t_begin=1.53),
         rec(2.0, "event", event="retry", op="append_message", attempt=1, sleep_s=0.05,
             waited_s=0.0),
         rec(2.2, "event", event="write", op="append_message", attempts=2, t_begin=2.19)]
    slept = rj.slept_short_cases(h)
    assert [c["t"] for c in slept] == [1.0, 1.5]  # 0.02 s < 0.1 s, then 0.03 s < 0.12 s
    honest = [dict(h[1], waited_s=0.3), dict(h[2], t_begin=1.65)]
    assert rj.slept_short_cases([h[0], *honest, *h[3:]]) == []
    # another write of the process (other op) is not this write's next attempt
    assert rj.slept_short_cases([h[0], dict(h[2], op="set_title", attempts=2)]) == []


def test_lock_error_cases_skip_adversaries_and_justified_waits():
    h = [*op(1, 2, "fail", 1, error="WriteContentionError", latency_s=1.0),
         *op(1, 2, "fail", 1, process="lock-0", op_="hold_lock", error="OperationalError",
             message="database is locked"),
         rec(3, "info", "cli-0", op="append", op_id="cli-0:1", message="database is locked",
             latency_s=0.5)]
    assert len(h) == 5
    reached, justified = rj.lock_errors(h, {"lock": "lock_holder"}, [], 15.0)
    assert [r["process"] for r in reached] == ["gateway-0", "cli-0"] and justified == []
    assert len(rj.lock_error_cases(reached)) == 2
    reached, justified = rj.lock_errors(h, {}, [(0.0, 30.0, "pid 1")], 0.5)
    assert reached == [] and len(justified) == 2


# ------------------------------------------------------------------------------ write_exclusion
def test_write_exclusion_finds_a_transaction_begun_inside_another():
    """Deferred BEGIN: gateway-1's transaction started while gateway-0 held the write lock."""
    from chaos.checkers import isolation as we

    def write(t0, t1, process):
        return rec(t1 + 0.001, "event", process, event="write", t_begin=t0, t_precommit=t1,
                   t_commit=t1 + 0.001)

    h = [write(1.0, 1.5, "gateway-0"), write(1.2, 1.8, "gateway-1"), write(2.0, 2.1, "gateway-0"),
         write(2.2, 2.3, "gateway-1"), rec(3, "invoke", op="append", op_id="gateway-0:9")]
    assert len(h) == 5
    (case,) = we.write_overlap_cases(we.locked_intervals(h))
    assert (case["first"]["process"], case["second"]["process"]) == ("gateway-0", "gateway-1")
    assert case["overlap_s"] == 0.3
    # the same history with gateway-1 beginning after gateway-0's COMMIT: no case
    h[1] = write(1.6, 1.8, "gateway-1")
    assert we.write_overlap_cases(we.locked_intervals(h)) == []
    h[1] = write(1.2, 1.8, "gateway-1")
    assert we.check_writes(_ctx(h), {}).status == FAIL
    h[1] = write(1.6, 1.8, "gateway-1")
    assert we.check_writes(_ctx(h), {}).status == PASS
    assert we.check_writes(_ctx([write(1.0, 1.5, "gateway-0")]), {}).status == INCONCLUSIVE


def _ctx(history):
    from chaos.checkers.base import CheckContext

    return CheckContext(history=history, store_path=Path("/nonexistent/state.db"),
                        home=Path("/nonexistent"), run_dir=Path("/nonexistent"), scenario={})


# ------------------------------------------------------------------------- prune_respects_turns
def test_prune_respects_turns_finds_a_busy_session_deleted_by_the_prune():
    from chaos.checkers import prune_respects_turns as prt

    def maint(t, busy, pruned, n):
        return op(t, t + 0.1, "ok", n, op_="maintenance", busy_ended=busy,
                  result={"pruned": pruned})

    h = maint(1, ["p1"], 3, 1) + maint(2, ["p1"], 0, 2) + [rec(3, "invoke", op="append")]
    assert len(h) == 5
    ops = prt.pruning_ops(h)
    assert len(ops) == 1  # the op that pruned nothing is not a pruning op
    (case,) = prt.deleted_busy_cases(ops, sessions={"other"})
    assert case["session"] == "p1"
    assert prt.deleted_busy_cases(ops, sessions={"p1"}) == []
    # a later prune that no longer protected p1 (its turn ended) may have taken it
    later = prt.pruning_ops(h + maint(4, [], 1, 3))
    assert prt.deleted_busy_cases(later, sessions=set()) == []


def test_no_lost_writes_max_loss_fails_a_loss_larger_than_the_damage():
    from chaos.history import Op

    cases = {"lost": [{"payload_id": f"p{i}"} for i in range(5)], "phantom": [],
             "spooled_missing": [], "unexpected": [], "duplicated": [], "unreplayed": []}
    by_pid = {f"p{i}": Op(f"gateway-0:{i}", "append", "gateway-0", {"type": "invoke"},
                          {"type": "ok"}) for i in range(5)}
    fig = {"ok": 5, "found_in_store": 0, "fail": 0, "info": 0}
    assert nlw._verdict(cases, dict(fig), by_pid, [], True, 10).status == PASS
    assert nlw._verdict(cases, dict(fig), by_pid, [], True, 5).status == PASS
    assert nlw._verdict(cases, dict(fig), by_pid, [], True, 4).status == FAIL
    assert nlw._verdict(cases, dict(fig), by_pid, [], True).status == PASS


# ---------------------------------------------------------------------------- snapshot_complete
def test_snapshot_complete_finds_an_append_acked_before_the_backup_missing_from_its_image():
    from chaos.checkers import snapshot_complete as sc

    out = "snapshot /run/home/state-snapshots/20261201T000000Z-manual/state.db: verified=True\n"
    h = (op(1, 2, "ok", 1, payload_id="a")
         + op(3, 6, "ok", 1, process="backup-0", op_="run", command="backup", exit_code=0,
              stdout=out)
         + [rec(4, "ok", op="append", op_id="gateway-0:2", payload_id="late")])
    assert len(h) == 5
    (b,) = sc.backups(h)
    assert (b.t0, b.image) == (3, "/run/home/state-snapshots/20261201T000000Z-manual/state.db")
    acked = sc.acked_appends(h)
    assert [pid for _, pid, _ in acked] == ["a", "late"]  # "late": acknowledged at t=4
    b.payloads = Counter()
    (case,) = sc.missing_cases([b], acked)
    assert case["payload_id"] == "a" and case["violation"] == "missing_from_snapshot"
    b.payloads = Counter({"a": 1})  # "late" was acknowledged after the backup began: not owed
    assert sc.missing_cases([b], sc.acked_appends(h)) == []
    failed = h[:2] + op(3, 6, "fail", 1, process="backup-0", op_="run", command="backup",
                        exit_code=1, stdout=out)
    assert sc.backups(failed) == []  # a failed backup promises nothing


def test_snapshot_complete_reports_an_unreadable_image():
    from chaos.checkers import snapshot_complete as sc

    b = sc.Backup(3.0, "/nowhere/state.db", {}, None, "FileNotFoundError: no store")
    (case,) = sc.missing_cases([b], [])
    assert case["violation"] == "snapshot_unreadable"


# ------------------------------------------------------------------------------- sticky_refusal
def test_sticky_refusal_finds_a_write_on_a_handle_after_it_refused():
    from chaos.checkers import sticky_refusal as sr

    h = (op(1, 2, "ok", 1, op_="open")
         + op(3, 4, "fail", 2, op_="search", error="StateDbCorruptError")
         + [rec(5, "ok", op="append", op_id="gateway-0:3", payload_id="a", latency_s=0.5)])
    assert len(h) == 5
    (case,) = sr.written_after_refusal_cases(sr.handles(h))
    assert case["process"] == "gateway-0" and case["writes"] == 1
    # a new handle (another open) starts clean
    again = h[:4] + op(4.2, 4.3, "ok", 4, op_="open") + h[4:]
    assert sr.written_after_refusal_cases(sr.handles(again)) == []
    # a write refused after the first refusal is what the rule asks for
    refused = h[:4] + op(5, 6, "fail", 3, payload_id="a", error="DeletedWalGenerationError")
    assert sr.written_after_refusal_cases(sr.handles(refused)) == []


def test_sticky_refusal_finds_a_second_capture_on_one_handle():
    from chaos.checkers import sticky_refusal as sr

    h = (op(1, 2, "ok", 1, op_="open") + [rec(3, "event", event="capture", dir="c1")]
         + op(3, 4, "fail", 2, payload_id="a", error="DeletedWalGenerationError"))
    assert sr.recaptured_cases(sr.handles(h)) == []
    twice = h + [rec(5, "event", event="capture", dir="c2")]
    assert len(h) == 5
    (case,) = sr.recaptured_cases(sr.handles(twice))
    assert case["captures"] == 2
    # a capture by a new handle is its own evidence
    reopened = h + op(4.5, 4.6, "ok", 3, op_="open") + [rec(5, "event", event="capture")]
    assert sr.recaptured_cases(sr.handles(reopened)) == []


# -------------------------------------------------------------------------- quarantine_evidence
def test_quarantine_evidence_finds_sidecars_left_behind_and_an_overwritten_copy():
    from chaos.checkers import quarantine_evidence as qe
    from chaos.history import Samples

    wal = {"db": {"bytes": 4096}, "wal": {"bytes": 8192}, "shm": {"bytes": 32768}}
    h = [rec(1, "sample", process="sampler", path=wal),
         rec(2, "event", event="quarantine", db="/h/state.db", backup="/h/q1.bak"),
         rec(3, "sample", process="sampler", path={"db": {"bytes": 0}}),
         rec(4, "event", event="quarantine", db="/h/state.db", backup="/h/q1.bak"),
         rec(5, "ok", op="append", op_id="gateway-0:1", payload_id="a")]
    events = qe.quarantines(h)
    before = {i: qe.sidecars_before(Samples(h), ev["t"]) for i, ev in enumerate(events)}
    assert before == {0: ["wal", "shm"], 1: []}
    kept = {"/h/q1.bak", "/h/q1.bak-wal", "/h/q1.bak-shm"}
    assert qe.sidecars_left_cases(events, before, kept.__contains__) == []
    (case,) = qe.sidecars_left_cases(events, before, {"/h/q1.bak", "/h/q1.bak-shm"}.__contains__)
    assert case["sidecar"] == "wal"
    (twice,) = qe.overwritten_cases(events, kept.__contains__)
    assert twice["violation"] == "quarantine_overwritten"
    assert qe.overwritten_cases(events[:1], kept.__contains__) == []
    (gone,) = qe.overwritten_cases(events[:1], set().__contains__)
    assert gone["violation"] == "quarantine_gone"


def test_quarantine_evidence_finds_a_planted_copy_replaced_gone_or_beside_a_backup():
    """SPEC §12: a quarantine copy never replaces an earlier one nor lands beside its sidecar."""
    from chaos.checkers import quarantine_evidence as qe

    old = "state.db.corrupt.20300101T000000Z"
    sha = {f"{old}.bak": "a" * 64, f"{old}.bak-wal": "b" * 64, f"{old}-2.bak-wal": "c" * 64}
    h = [rec(1, "nemesis", process="nemesis", fault="plant_quarantine_copies", phase="start"),
         rec(2, "nemesis", process="nemesis", fault="plant_quarantine_copies", phase="done",
             first_stamp="20291231T235959Z", last_stamp="20300101T000100Z", planted=sha),
         rec(3, "nemesis", process="nemesis", fault="zero_db", phase="done"),
         rec(4, "event", event="quarantine", db="/h/state.db", backup=f"/h/{old}-3.bak"),
         rec(5, "ok", op="open", op_id="cli-0:1")]
    copies, windows, taken = qe.planted(h)
    assert copies == sha and taken == set() and windows == [("20291231T235959Z", "20300101T000100Z")]
    assert qe.stamp_of(f"/h/{old}-3.bak") == "20300101T000000Z" == qe.stamp_of(f"{old}.bak")
    assert qe.stamp_of("/h/state.db.corrupt.x.bak") is None
    assert qe._met(qe.quarantines(h), windows) == 1
    assert qe._met(qe.quarantines(h), [("20300101T000001Z", "20300101T000100Z")]) == 0
    # clean: every planted copy keeps its bytes, the backup took a name of its own
    assert qe.planted_cases(copies, copies.get) == []
    assert qe.beside_planted_cases([f"{old}-3.bak", f"{old}.bak"], copies) == []
    # the quarantine moved the zeroed file over the earlier copy (os.replace), and its -wal over
    # the lone -wal of -2.bak; another earlier -wal is gone
    now = dict(copies, **{f"{old}.bak": "0" * 64, f"{old}-2.bak-wal": "d" * 64})
    now[f"{old}.bak-wal"] = None
    cases = qe.planted_cases(copies, now.get)
    assert [(c["violation"], c["copy"]) for c in cases] == [
        ("planted_copy_replaced", f"{old}-2.bak-wal"), ("planted_copy_replaced", f"{old}.bak"),
        ("planted_copy_gone", f"{old}.bak-wal")]
    # the quarantine took -2.bak although -2.bak-wal was an earlier copy's sidecar
    (beside,) = qe.beside_planted_cases([f"{old}-2.bak", f"{old}.bak"], copies)
    assert beside["violation"] == "backup_beside_earlier_sidecar"
    assert beside["sidecar"] == f"{old}-2.bak-wal"


# ------------------------------------------------------------------------------ recovery: doctor
def _report(*findings, exit_code=None):
    found = [{"level": lvl, "title": title, "detail": []} for lvl, title in findings]
    code = exit_code if exit_code is not None else int(any(f["level"] == "issue" for f in found))
    return {"exit_code": code, "findings": found}


CAPTURE_ISSUE = ("issue", "30 message(s) in 2 session(s) exist only in the capture "
                 "state.db.retired-wal-1, not in the store")
SPOOL_ISSUE = ("issue", "59 spooled message(s) in /h/sessions are not in the store yet (1 file(s))")


def test_doctor_cases_find_capture_only_messages_not_said_first_as_an_issue():
    from chaos.checkers import recovery

    only, none = Counter({"g-1": 1}), Counter()
    assert recovery.doctor_cases(_report(CAPTURE_ISSUE, ("ok", "files")), "", only, none) == []
    # said, but after another finding; said as a warning (exit 0); not said at all
    for report in (_report(("ok", "files"), CAPTURE_ISSUE),
                   _report(("warn", CAPTURE_ISSUE[1]), ("ok", "files")),
                   _report(("ok", "files"))):
        cases = recovery.doctor_cases(report, "", only, none)
        assert [c["violation"] for c in cases] == ["capture_only_not_first_issue"], report
        assert "g-1" in cases[0]["why"]
    # claimed although the store has every captured payload
    cases = recovery.doctor_cases(_report(CAPTURE_ISSUE), "", none, none)
    assert [c["violation"] for c in cases] == ["capture_only_claimed"]


def test_doctor_cases_find_pending_spool_not_reported_and_a_false_claim():
    from chaos.checkers import recovery

    pending, none = Counter({"g-7": 1}), Counter()
    assert recovery.doctor_cases(_report(SPOOL_ISSUE), "", none, pending) == []
    cases = recovery.doctor_cases(_report(("ok", "files")), "", none, pending)
    assert [c["violation"] for c in cases] == ["spool_pending_not_reported"]
    cases = recovery.doctor_cases(_report(("warn", SPOOL_ISSUE[1])), "", none, pending)
    assert [c["violation"] for c in cases] == ["spool_pending_not_reported"]
    cases = recovery.doctor_cases(_report(SPOOL_ISSUE), "", none, none)
    assert [c["violation"] for c in cases] == ["spool_pending_claimed"]
    cases = recovery.doctor_cases(None, "doctor --json printed no JSON report (exit 2)", none, none)
    assert [c["violation"] for c in cases] == ["doctor_no_report"]


# ------------------------------------------------------------------------------ fixture_preserved
def test_shape_cases_find_a_store_migrated_in_place(tmp_path):
    """unmigrated: the fixture as built vs the final store: an object added, changed or dropped,
    or a table whose row count changed, is a case; the same store is none."""
    import sqlite3

    from chaos.checkers import fixture_preserved as fp

    db = tmp_path / "state.db"
    conn = sqlite3.connect(db)
    conn.executescript("CREATE TABLE sessions(id TEXT PRIMARY KEY); CREATE TABLE t(x);"
                       "INSERT INTO sessions VALUES ('a'); INSERT INTO t VALUES (1);")
    conn.close()
    built = fp.shape_of(db)
    assert fp.shape_cases(built, fp.shape_of(db)) == []
    conn = sqlite3.connect(db)
    conn.executescript("CREATE INDEX i ON t(x); ALTER TABLE sessions ADD COLUMN title TEXT;"
                       "INSERT INTO t VALUES (2);")
    conn.close()
    cases = fp.shape_cases(built, fp.shape_of(db))
    assert sorted((c["violation"], c.get("change") or c.get("table")) for c in cases) == [
        ("rows_changed", "t"), ("schema_changed", "added"), ("schema_changed", "changed")]
