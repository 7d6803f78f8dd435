"""``retry_jitter``: lock retries sleep a uniform random 20–150 ms, bounded (SPEC §16.3, §4).

SPEC §16.3: "every retry sleep within [0.020, 0.150] s, at most 15 attempts per write, the sleeps
spread like a uniform distribution (not a fixed back-off), no error reached a caller while the
lock was held for less than the retry budget."

From the ``retry`` store events (``attempt`` = the failed attempt, 1-based; ``sleep_s``):

* every ``sleep_s`` in ``[lo, hi]``;
* no ``attempt`` above ``max_attempts - 1`` (the last attempt does not sleep: it gives up);
* no ``write_gave_up`` event (cited as evidence);
* spread, with at least 20 sleeps: a one-sample Kolmogorov–Smirnov test against
  Uniform(lo, hi), ``D = max |F_n - F|``, rejected when ``D > 1.95 / sqrt(n)`` (alpha 0.001,
  ``docs/decisions/0012-chaos-faults-and-checks.md``); and
  no fixed back-off: FAIL when more than half of the sleeps lie within 1 ms of one another.
  Fewer than 20 sleeps: "too few to test the distribution", no verdict on spread;
* no draw repeated: two retries (in any processes) reporting the very same ``sleep_s`` float
  mean the generators follow one seed, so writers that collide sleep alike and collide again
  (two independent uniform doubles are equal with probability about 2^-53);
* no sleep shorter than declared: the next attempt of the same write starts (the next
  ``retry`` event's ``t - waited_s``, or the ``write`` event's ``t_begin``) at least ``sleep_s``
  after the ``retry`` event was recorded (recorded before the sleep, on the same monotonic
  clock; load only makes the gap longer), so a sleep that ignores its draw is seen even when
  the telemetry reports the draw;
* (``max_attempt_wait_s`` > 0) no write committed at its first attempt after waiting longer
  than that for ``BEGIN IMMEDIATE`` (:func:`long_attempt_cases`): with the 1 s busy timeout a
  stall longer than that shows as retries, never as one long attempt;
* no ``fail``/``info`` of a store client carrying ``WriteContentionError`` or "database is locked"
  (an adversary's own ``hold_lock`` ops and processes of kind ``lock_holder``/``long_reader`` are
  not store clients) -- unless the lock really was held for the whole retry budget: a give-up
  (error or ``write_gave_up`` event) whose wait window ``[t - latency, t]`` overlaps one lock
  hold by at least ``budget_s`` is *justified* and counted apart. Lock holds come from the
  adversaries' ``hold_lock`` ops (invoke to completion) and from runs of consecutive sampler
  records naming the same write-lock owner (``/proc/locks``), so a frozen (SIGSTOP) holder counts.

Params: ``min_retries`` (0; fewer retry events ⇒ INCONCLUSIVE), ``max_attempts`` (15),
``lo`` (0.020), ``hi`` (0.150), ``budget_s`` (15.0: 15 attempts of the 1 s busy timeout, the
least a writer waits before it gives up, SPEC §4).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

from ..history import ADVERSARY_OPS, brief, events_of, role_of
from ..params import param
from ..roles import ADVERSARY_KINDS
from .base import (
    CheckContext,
    Verdict,
    params_of,
    role_kinds,
    verdict_from,
)


@dataclass(frozen=True, kw_only=True)
class Params:
    """Retry sleeps within [lo, hi], spread uniformly, at most max_attempts."""

    min_retries: int = param(0, "Fewer retries observed than this is inconclusive.", minimum=0)
    max_attempts: int = param(15, "At most this many attempts per write.", minimum=1)
    lo: float = param(0.020, "Lowest allowed retry sleep (seconds).", minimum=0)
    hi: float = param(0.150, "Highest allowed retry sleep (seconds, >= lo).", minimum=0)
    budget_s: float = param(15.0, "A lock error is justified only when one process held the "
                            "write lock this long during the wait (seconds; 15 attempts x 1 s "
                            "busy timeout).", minimum=0)
    max_attempt_wait_s: float = param(0.0, "When > 0: FAIL a write whose one and only attempt "
                                      "waited longer than this for BEGIN IMMEDIATE (a busy "
                                      "timeout longer than the declared 1 s rides out a stall "
                                      "without retrying); only for scenarios whose writers are "
                                      "never frozen (seconds, 0 = off).", minimum=0)


NAME = "retry_jitter"
MIN_FOR_KS = 20
FIXED_WINDOW_S = 0.001
#: Slack (s) when a measured retry sleep is compared with the declared one (clock rounding).
SLEEP_TOLERANCE_S = 0.001


def ks_uniform(samples: list[float], lo: float, hi: float) -> float:
    """Kolmogorov–Smirnov statistic ``D = sup |F_n(x) - F(x)|`` against Uniform(lo, hi)."""
    xs = sorted(samples)
    n = len(xs)
    if n == 0:
        return 0.0
    width = hi - lo
    d = 0.0
    for i, x in enumerate(xs, 1):
        f = min(1.0, max(0.0, (x - lo) / width))
        d = max(d, i / n - f, f - (i - 1) / n)
    return d


def ks_threshold(n: int) -> float:
    """Critical value of D at alpha 0.001 (asymptotic): ``1.95 / sqrt(n)``."""
    return 1.95 / math.sqrt(n)


def largest_cluster(samples: list[float], width: float = FIXED_WINDOW_S) -> int:
    """The most samples that fit in one window of ``width`` (a fixed back-off piles up there)."""
    xs = sorted(samples)
    best = j = 0
    for i in range(len(xs)):
        while xs[i] - xs[j] > width:
            j += 1
        best = max(best, i - j + 1)
    return best


def lock_holds(history: list[dict]) -> list[tuple[float, float, str]]:
    """Spans ``(start_t, end_t, holder)`` (monotonic seconds) during which one process held the
    write lock: adversary ``hold_lock`` ops from invoke to completion, and runs of consecutive
    ``sample`` records with the same ``write_lock`` pid (from the first to the last sighting)."""
    spans: list[tuple[float, float, str]] = []
    started: dict[str, dict] = {}
    for r in history:
        if r.get("op") != "hold_lock":
            continue
        if r.get("type") == "invoke":
            started[r.get("op_id")] = r
        elif r.get("type") in ("ok", "fail", "info") and r.get("op_id") in started:
            inv = started.pop(r["op_id"])
            spans.append((float(inv["t"]), float(r["t"]), str(r.get("process"))))
    run_pid, run_start, run_last = None, 0.0, 0.0
    for r in history:
        if r.get("type") != "sample":
            continue
        owner = (r.get("write_lock") or {}).get("pid")
        t = float(r["t"])
        if owner != run_pid:
            if run_pid is not None:
                spans.append((run_start, run_last, f"pid {run_pid}"))
            run_pid, run_start = owner, t
        run_last = t
    if run_pid is not None:
        spans.append((run_start, run_last, f"pid {run_pid}"))
    return spans


def _justified(r: dict, waited: float | None, holds: list, budget_s: float) -> bool:
    """True when the wait ending at ``r['t']`` overlaps a single lock hold by ``budget_s``."""
    if waited is None:
        return False
    end = float(r["t"])
    start = end - float(waited)
    return any(min(end, h1) - max(start, h0) >= budget_s for h0, h1, _ in holds)


# ------------------------------------------------------------------------------ cases
def _case(r: dict, why: str) -> dict:
    return {**brief(r), "why": why}


def out_of_range_cases(retries: list[dict], lo: float, hi: float) -> list[dict]:
    """Retry sleeps outside ``[lo, hi]``."""
    return [_case(r, f"sleep {r['sleep_s']} s outside [{lo}, {hi}] s") for r in retries
            if r.get("sleep_s") is not None and not lo <= float(r["sleep_s"]) <= hi]


def attempt_cases(retries: list[dict], max_attempts: int) -> list[dict]:
    """Retries beyond attempt ``max_attempts - 1`` (the last attempt gives up, never sleeps)."""
    return [_case(r, f"retry beyond attempt {max_attempts - 1} (at most {max_attempts} "
                     "attempts per write)") for r in retries
            if r.get("attempt") is not None and int(r["attempt"]) > max_attempts - 1]


def gave_up_cases(history: list[dict], holds: list, budget_s: float) -> list[dict]:
    """``write_gave_up`` events not justified by one process holding the lock ``budget_s``."""
    return [_case(r, f"a write gave up after the retry budget while no process held the lock "
                     f"for {budget_s:g} s") for r in events_of(history, "write_gave_up")
            if not _justified(r, r.get("waited_s"), holds, budget_s)]


def uniform_cases(sleeps: list[float], lo: float, hi: float) -> list[dict]:
    """With at least :data:`MIN_FOR_KS` sleeps: not uniform on ``[lo, hi]`` (one-sample KS)."""
    if len(sleeps) < MIN_FOR_KS:
        return []
    d, thr = ks_uniform(sleeps, lo, hi), ks_threshold(len(sleeps))
    return [{"why": f"sleeps not uniform on [{lo}, {hi}]: KS D={d:.3f} > {thr:.3f}",
             "ks_d": round(d, 4), "ks_threshold": round(thr, 4)}] if d > thr else []


def fixed_backoff_cases(sleeps: list[float]) -> list[dict]:
    """With at least :data:`MIN_FOR_KS` sleeps: a fixed back-off (more than half of the sleeps
    within 1 ms of one another)."""
    cluster = largest_cluster(sleeps)
    if len(sleeps) < MIN_FOR_KS or cluster * 2 <= len(sleeps):
        return []
    return [{"why": f"fixed back-off: {cluster} of {len(sleeps)} sleeps within 1 ms",
             "largest_1ms_cluster": cluster}]


def repeated_draw_cases(retries: list[dict]) -> list[dict]:
    """Retry sleeps whose exact value was drawn before (in any process): a seeded generator."""
    first: dict[float, dict] = {}
    out = []
    for r in retries:
        if r.get("sleep_s") is None:
            continue
        s = float(r["sleep_s"])
        if s in first:
            prior = first[s]
            out.append(_case(r, f"sleep {s!r} s drawn again (first by {prior.get('process')} at "
                                f"t={float(prior['t']):.3f}): the retry jitter follows a fixed "
                                "seed, so colliding writers retry in lockstep"))
        else:
            first[s] = r
    return out


def slept_short_cases(history: list[dict], tolerance: float = SLEEP_TOLERANCE_S) -> list[dict]:
    """Retries whose write's next attempt began before the declared ``sleep_s`` was over.

    Pairs each ``retry`` event with the next ``retry`` (``attempt`` + 1, same ``op``; the attempt
    began at its ``t - waited_s``) or ``write`` (``attempts`` = ``attempt`` + 1, same ``op``; began
    by ``t_begin``) event of the same process; a ``write_gave_up`` ends the write.
    """
    out = []
    pending: dict[str, dict] = {}

    def judge(prev: dict, start: float) -> None:
        slept = start - float(prev["t"])
        declared = float(prev["sleep_s"])
        if 0 <= slept < declared - tolerance:
            out.append(_case(prev, f"declared a {declared:.3f} s sleep but the next attempt "
                                   f"began {slept:.3f} s later"))

    for r in history:
        if r.get("type") != "event":
            continue
        kind, proc = r.get("event"), str(r.get("process"))
        prev = pending.get(proc)
        if kind == "retry":
            if (prev is not None and r.get("op") == prev.get("op")
                    and r.get("attempt") == prev.get("attempt", 0) + 1
                    and r.get("waited_s") is not None):
                judge(prev, float(r["t"]) - float(r["waited_s"]))
            if r.get("sleep_s") is not None and isinstance(r.get("attempt"), int):
                pending[proc] = r
            else:
                pending.pop(proc, None)
        elif kind in ("write", "write_gave_up"):
            pending.pop(proc, None)
            if (kind == "write" and prev is not None and r.get("op") == prev.get("op")
                    and r.get("attempts") == prev.get("attempt", 0) + 1
                    and r.get("t_begin") is not None):
                judge(prev, float(r["t_begin"]))
    return out


def long_attempt_cases(history: list[dict], bound_s: float) -> list[dict]:
    """Writes that committed at their first attempt after waiting more than ``bound_s`` for it.

    A ``write`` event with ``attempts`` 1 and no checkpoint met (``met`` 0) began its attempt
    when its process's last op was invoked (the role records ``invoke`` before it calls the
    store; a role process runs one op at a time); ``t_begin`` is when BEGIN IMMEDIATE returned.
    With the 1 s busy timeout of SPEC §4 that wait is about 1 s at most before a lock error
    and a retry event; much longer means a longer busy timeout. 0 = the rule is off.
    """
    if bound_s <= 0:
        return []
    out = []
    last_invoke: dict[str, float] = {}
    for r in history:
        proc = str(r.get("process"))
        if r.get("type") == "invoke":
            last_invoke[proc] = float(r["t"])
        elif (r.get("type") == "event" and r.get("event") == "write"
              and r.get("attempts") == 1 and not r.get("met") and r.get("t_begin") is not None
              and proc in last_invoke):
            waited = float(r["t_begin"]) - last_invoke[proc]
            if waited > bound_s:
                out.append(_case(r, f"the write's only attempt waited {waited:.2f} s for BEGIN "
                                    f"IMMEDIATE (> {bound_s:g} s) without a lock error: the busy "
                                    "timeout is longer than SPEC §4's 1 s"))
    return out


def lock_errors(history: list[dict], kinds: dict, holds: list,
                budget_s: float) -> tuple[list[dict], list[dict]]:
    """``(reached, justified)``: lock errors (``WriteContentionError``, "database is locked")
    of store clients, split by whether one process held the lock for the whole budget."""
    reached, justified = [], []
    for r in history:
        if r.get("type") not in ("fail", "info") or r.get("synthesized"):
            continue
        if r.get("op") in ADVERSARY_OPS or kinds.get(role_of(r.get("process"))) in ADVERSARY_KINDS:
            continue
        if r.get("error") == "WriteContentionError" or \
                "database is locked" in str(r.get("message", "")).lower():
            (justified if _justified(r, r.get("latency_s"), holds, budget_s)
             else reached).append(r)
    return reached, justified


def lock_error_cases(reached: list[dict]) -> list[dict]:
    """Lock errors that reached a caller without a justifying lock hold."""
    return [_case(r, "a lock error reached a caller") for r in reached]


# ------------------------------------------------------------------------------ verdict
def check(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    lo, hi, budget_s = float(p.lo), float(p.hi), float(p.budget_s)
    holds = lock_holds(ctx.history)
    retries = events_of(ctx.history, "retry")
    sleeps = [float(r["sleep_s"]) for r in retries if r.get("sleep_s") is not None]
    reached, justified = lock_errors(ctx.history, role_kinds(ctx.scenario), holds, budget_s)
    cases = {"sleep_out_of_range": out_of_range_cases(retries, lo, hi),
             "too_many_attempts": attempt_cases(retries, p.max_attempts),
             "write_gave_up": gave_up_cases(ctx.history, holds, budget_s),
             "not_uniform": uniform_cases(sleeps, lo, hi),
             "fixed_backoff": fixed_backoff_cases(sleeps),
             "repeated_draw": repeated_draw_cases(retries),
             "slept_short": slept_short_cases(ctx.history),
             "attempt_waited_too_long": long_attempt_cases(ctx.history,
                                                           float(p.max_attempt_wait_s)),
             "lock_error_reached_caller": lock_error_cases(reached)}
    fig = _figures(ctx.history, retries, sleeps, cases, lo, hi, holds, budget_s)
    fig.update(lock_errors_reaching_callers=len(reached), lock_errors_justified=len(justified))
    summary = _summary(fig, retries, sleeps, len(reached), len(justified), budget_s)
    inconclusive = None
    if len(retries) < p.min_retries:
        inconclusive = (f"only {len(retries)} retry event(s) < min_retries {p.min_retries}: the "
                        "run never produced enough lock contention")
    return verdict_from(NAME, cases, fig, summary=summary, inconclusive=inconclusive,
                        evidence=[brief(r) for r in justified[:2]])


def _figures(history, retries, sleeps, cases, lo, hi, holds, budget_s) -> dict:
    attempts = [int(r["attempt"]) for r in retries if r.get("attempt") is not None]
    gave_up = events_of(history, "write_gave_up")
    fig: dict = {"retries": len(retries), "sleeps": len(sleeps),
                 "min_sleep_s": min(sleeps) if sleeps else None,
                 "max_sleep_s": max(sleeps) if sleeps else None,
                 "mean_sleep_s": (sum(sleeps) / len(sleeps)) if sleeps else None,
                 "max_attempt": max(attempts) if attempts else None,
                 "write_gave_up": len(gave_up),
                 "write_gave_up_justified": len(gave_up) - len(cases["write_gave_up"]),
                 "processes_with_retries": dict(Counter(r.get("process") for r in retries)),
                 "bounds_s": [lo, hi], "sleeps_out_of_range": len(cases["sleep_out_of_range"])}
    if len(sleeps) >= MIN_FOR_KS:
        fig["ks_d"] = round(ks_uniform(sleeps, lo, hi), 4)
        fig["ks_threshold"] = round(ks_threshold(len(sleeps)), 4)
        fig["largest_1ms_cluster"] = largest_cluster(sleeps)
    else:
        fig["distribution"] = f"too few to test the distribution ({len(sleeps)} < {MIN_FOR_KS})"
    return fig


def _summary(fig: dict, retries, sleeps, reached: int, justified: int, budget_s: float) -> str:
    mean = fig["mean_sleep_s"]
    return (f"{len(retries)} retries in {len(fig['processes_with_retries'])} process(es)"
            + (f", sleeps {fig['min_sleep_s'] * 1000:.0f}–{fig['max_sleep_s'] * 1000:.0f} ms "
               f"(mean {mean * 1000:.0f})" if sleeps else "")
            + (f", KS D={fig['ks_d']} (≤ {fig['ks_threshold']})" if "ks_d" in fig else
               ", too few to test the distribution")
            + f", max attempt {fig['max_attempt']}, {reached} lock errors to callers"
            + (f" ({justified} more after the lock was held >= {budget_s:g} s)"
               if justified else ""))
