"""The run's own liveness judgement and the load factor of machine-time bounds (issue 27 items
1, 3, 5), on hand-made histories: every role process performed an operation, every restart one
after its restart, every declared step fired; a bound about the machine stretches with the load
measured in the run, a rule about the store never does.
"""

from __future__ import annotations

import pytest

from chaos.checkers import CHECKERS, TIMING_BOUND
from chaos.checkers.base import FAIL, INCONCLUSIVE, PASS, run_status
from chaos.checkers.observed import liveness, run_verdicts
from chaos.history import MAX_LOAD_FACTOR, factor_of, history_load_factor
from chaos.sampler import calibrate
from test_checkers import H, make_ctx
from test_checkers_sampled import at, heal_history, lockup_history


def spawn(h: H, process: str, generation: int = 0) -> dict:
    role, index = process.rsplit("-", 1)
    extra = {"generation": generation, "replaces": f"{role}-0"} if generation else {}
    return h.add("process", "runner", phase="spawn", role=role, kind="gateway", index=0,
                 child=process, child_pid=4000 + int(index), process_of=process, **extra)


def exit_(h: H, process: str, code: int = 0) -> dict:
    role, index = process.rsplit("-", 1)
    return h.add("process", "runner", phase="exit", role=role, kind="gateway", index=0,
                 exitcode=code, child=process, process_of=process)


def power_cut_history(*, restarts_work: bool, step: str = "done") -> list[dict]:
    """gateway-0 appends, a power cut, gateway-1 restarts the slot (and appends, or not)."""
    h = H()
    spawn(h, "gateway-0")
    h.append("gateway-0", "gateway-0-1")
    h.add("nemesis", "runner", fault="power_cut", phase="start", step=0)
    if step == "done":
        h.add("nemesis", "runner", fault="power_cut", phase="done", step=0)
        exit_(h, "gateway-0", -9)
        spawn(h, "gateway-1", generation=1)
        if restarts_work:
            h.append("gateway-1", "gateway-1-1")
        exit_(h, "gateway-1", 0)
    else:
        h.add("nemesis", "runner", fault="power_cut", phase=step, step=0,
              error="no faulty filesystem is mounted")
    return h.history()


def test_liveness_passes_when_every_process_and_restart_worked():
    (v,) = liveness(power_cut_history(restarts_work=True))
    assert v.status == PASS, v.summary
    assert v.figures["processes"] == 2 and v.figures["restarts"] == 1
    assert v.figures["least_ops"] == 1 and v.figures["steps_fired"] == 1


def test_a_restart_that_never_ran_makes_the_run_inconclusive():
    """The issue's fs_power_cut_writers: the restarts exited 0 with no history; the run passed."""
    history = power_cut_history(restarts_work=False)
    (v,) = liveness(history)
    assert v.status == INCONCLUSIVE
    assert "gateway-1 (restart #1 of slot 0) performed no operation, exit 0" in v.summary
    assert v.figures["idle_processes"] == ["gateway-1"]
    assert {e.get("idle") for e in v.evidence} == {"gateway-1"}
    assert run_status(run_verdicts([], history)) == INCONCLUSIVE


def test_a_role_that_never_performed_an_operation_makes_the_run_inconclusive():
    h = H()
    spawn(h, "gateway-0")
    spawn(h, "cli-0")
    h.append("gateway-0", "p1")
    exit_(h, "cli-0", 0)
    (v,) = liveness(h.history())
    assert v.status == INCONCLUSIVE and "cli-0 performed no operation" in v.summary
    assert "gateway-0" not in v.summary


@pytest.mark.parametrize("phase, words", [("error", "step 0 power_cut failed: no faulty"),
                                          ("never", "step 0 power_cut never fired")])
def test_a_declared_step_that_did_not_fire_makes_the_run_inconclusive(phase, words):
    (v,) = liveness(power_cut_history(restarts_work=True, step=phase))
    assert v.status == INCONCLUSIVE and words in v.summary, v.summary
    assert v.figures["steps_not_fired"] == 1


def test_a_history_without_spawned_processes_gets_no_liveness_verdict():
    h = H()
    h.append("gateway-0", "p1")  # a hand-made history of ops only: nothing to judge
    assert liveness(h.history()) == []


# ===================================================================================== load
def load(h: H, ratio: float, when: str = "start") -> dict:
    return h.add("load", "runner", when=when, ratio=ratio, cpu_s=0.08, wall_s=0.08 * ratio,
                 loadavg_per_cpu=ratio, cpus=2)


def test_the_load_factor_is_the_larger_measured_ratio_clamped():
    assert factor_of([]) == 1.0
    assert factor_of([{"ratio": 0.9}]) == 1.0
    assert factor_of([{"ratio": 1.4}, {"ratio": 2.2}]) == 2.2
    assert factor_of([{"ratio": 40.0}]) == MAX_LOAD_FACTOR
    m = calibrate(0.02)
    assert m["ratio"] >= 1.0 and m["cpu_s"] >= 0.02 and m["wall_s"] >= m["cpu_s"] * 0.99


def test_no_lockup_scales_its_bound_with_the_load_measured_in_the_run(tmp_path):
    """The issue's loaded-machine FAIL: a 7 s wait against a 5 s bound, the lock owner waiting
    for a CPU. Measured at 1.6 the bound is 8 s: PASS; quiet (1.0) it still FAILs; and with
    ``scale_with_load: false`` the bound stays 5 s."""
    def loaded(ratio):
        h = lockup_history()
        at(h, 8.5)
        load(h, ratio, "end")
        return h

    ctx = make_ctx(tmp_path, loaded(1.6).history())
    assert history_load_factor(ctx.history) == 1.6
    v = CHECKERS["no_lockup"](ctx, {"bound": "5s"})
    assert v.status == PASS, v.summary
    assert v.figures["bound_s"] == 8.0 and v.figures["load_factor"] == 1.6
    assert "5 s x load 1.6 = 8.00 s" in v.summary
    assert CHECKERS["no_lockup"](make_ctx(tmp_path, loaded(1.0).history()),
                                 {"bound": "5s"}).status == FAIL
    v = CHECKERS["no_lockup"](ctx, {"bound": "5s", "scale_with_load": False})
    assert v.status == FAIL and v.figures["bound_s"] == 5.0
    # a machine-time bound is never stretched past MAX_LOAD_FACTOR: a real lockup still fails
    assert CHECKERS["no_lockup"](make_ctx(tmp_path, loaded(50).history()),
                                 {"bound": "2s"}).status == FAIL


def test_liveness_after_heal_and_latency_scale_their_bounds_too(tmp_path):
    h = H()
    load(h, 2.0)
    for lat in (0.01, 0.02, 0.3):
        h.append("gateway-0", f"p{lat}", latency_s=lat)
    ctx = make_ctx(tmp_path, h.history())
    v = CHECKERS["latency"](ctx, {"max_bound": "200ms"})
    assert v.status == PASS and v.figures["max_bound_s"] == 0.4, v.summary
    assert CHECKERS["latency"](ctx, {"max_bound": "200ms",
                                     "scale_with_load": False}).status == FAIL
    assert TIMING_BOUND == {"no_lockup", "latency", "liveness_after_heal"}
    # the writers commit 0.5 s after the heal: late for a 0.3 s deadline, in time at load 2
    h = heal_history()
    quiet = make_ctx(tmp_path, h.history())
    assert CHECKERS["liveness_after_heal"](quiet, {"deadline": 0.3}).status == FAIL
    load(h, 2.0, "end")
    v = CHECKERS["liveness_after_heal"](make_ctx(tmp_path, h.history()), {"deadline": 0.3})
    assert v.status == PASS and v.figures["deadline_s"] == 0.6, v.summary
