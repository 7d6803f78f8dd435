"""Rules of time and order a scenario's structure cannot express (SPEC §16.2, §16.4): every
duration (usable, positive, within the run: the run's own, the roles' start/stop times, the
workloads' periods), when a step fires (``at`` before the end, or an ``after`` trigger), failpoint
specs, ``phases`` and ``sweep``.

Like every rule module here, each function takes the parsed document (any structure: where the
structure is wrong the schema already reported it and the check is skipped) and an
``emit_at(path, message, key=False)`` callback.
"""

from __future__ import annotations

import re
from typing import Any

from hermes_state import failpoints

from ..checkers import CHECKERS
from ..params import MAX_DURATION_S, declared, is_duration_text, parse_duration
from ..roles import ROLES
from .problems import hint, short
from .schema import AFTER_OUTCOMES, AFTER_TRIGGERS


def fmt_s(seconds: float) -> str:
    return f"{seconds:g}s"


def duration_of(value: Any) -> float | None:
    """Seconds of a duration value, or None when it is not one (the schema reports it)."""
    try:
        return parse_duration(value)
    except ValueError:
        return None


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


#: Workload keys that are durations, per role kind (from the declarations).
WORKLOAD_DURATIONS = {k: tuple(d.name for d in declared(r.Params) if d.duration)
                      for k, r in ROLES.items()}


#: Workload durations that must be > 0, per role kind (declared by the role's ``Params``).
POSITIVE_DURATIONS = {k: tuple(getattr(r.Params, "POSITIVE", ())) for k, r in ROLES.items()}


def _duration(data: dict) -> float | None:
    """The scenario's usable duration in seconds, or None."""
    d = duration_of(data.get("duration"))
    return d if d is not None and d > 0 else None


def schedule_rules(data: Any, emit_at) -> None:
    """A positive duration; every role starts before the end and stops after it starts and
    before the end; workload periods that must be > 0; every step has exactly one of
    ``at``/``after``, and ``at`` before the end."""
    if not isinstance(data, dict):
        return
    raw = duration_of(data.get("duration"))
    if raw is not None and raw <= 0:
        emit_at(["duration"], f"duration must be > 0, got {fmt_s(raw)}")
    duration = _duration(data)
    roles = data.get("roles")
    for i, role in enumerate(roles if isinstance(roles, list) else []):
        if not isinstance(role, dict):
            continue
        _role_times(role, ["roles", i], duration, emit_at)
        wl, kind = role.get("workload"), role.get("kind")
        if isinstance(wl, dict) and isinstance(kind, str) and kind in POSITIVE_DURATIONS:
            for key in POSITIVE_DURATIONS[kind]:
                d = duration_of(wl[key]) if key in wl else None
                if d is not None and d <= 0:
                    emit_at(["roles", i, "workload", key], f"{key} must be > 0, got {fmt_s(d)}")
    for i, step in enumerate(_steps(data)):
        if not isinstance(step, dict):
            continue
        has_at, has_after = "at" in step, "after" in step
        if has_at and has_after:
            emit_at(["nemesis", i, "after"], "give exactly one of 'at' or 'after', not both",
                    key=True)
        elif not has_at and not has_after:
            emit_at(["nemesis", i], "missing 'at' or 'after': schedule the step at a time offset "
                    "or after an event count (exactly one)")
        at = duration_of(step["at"]) if has_at else None
        if at is not None and duration is not None and at >= duration:
            emit_at(["nemesis", i, "at"], f"at {fmt_s(at)} is past duration {fmt_s(duration)} "
                    "(a fault must be scheduled before the end of the run)")


def _role_times(role: dict, path: list, duration: float | None, emit_at) -> None:
    start = duration_of(role.get("start_at", 0))
    if start is not None and duration is not None and start >= duration:
        emit_at(path + ["start_at"], f"start_at {fmt_s(start)} is not before duration "
                f"{fmt_s(duration)} (a role must start before the run ends)")
    if "stop_at" not in role:
        return
    stop = duration_of(role["stop_at"])
    if stop is not None and start is not None and stop <= start:
        emit_at(path + ["stop_at"], f"stop_at {fmt_s(stop)} must be after start_at "
                f"{fmt_s(start)}")
    elif stop is not None and duration is not None and stop > duration:
        emit_at(path + ["stop_at"], f"stop_at {fmt_s(stop)} is past duration {fmt_s(duration)}")


def duration_rules(data: Any, emit_at) -> None:
    """A duration that has the right shape but no usable value (``1000...0s``, beyond 7 days)."""
    if not isinstance(data, dict):
        return
    spots: list[tuple[list, Any]] = [(["duration"], data.get("duration"))]
    roles = data.get("roles")
    for i, role in enumerate(roles if isinstance(roles, list) else []):
        if isinstance(role, dict):
            for key in ("start_at", "stop_at"):
                spots.append((["roles", i, key], role.get(key)))
            wl = role.get("workload")
            if isinstance(wl, dict):
                kind = role.get("kind")
                for key in WORKLOAD_DURATIONS.get(kind if isinstance(kind, str) else "", ()):
                    spots.append((["roles", i, "workload", key], wl.get(key)))
    steps = data.get("nemesis")
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        if isinstance(step, dict):
            spots.append((["nemesis", i, "at"], step.get("at")))
            spots.append((["nemesis", i, "timeout"], step.get("timeout")))
    expect = data.get("expect")
    for name, params in (expect.items() if isinstance(expect, dict) else ()):
        checker = CHECKERS.get(name) if isinstance(name, str) else None
        if checker is not None and isinstance(params, dict):
            # a checker's duration parameters too (a bound of 2e17 minutes resolved to a
            # number of seconds no reader takes back: found by the schema property test)
            for d in declared(checker.Params):
                if d.duration:
                    spots.append((["expect", name, d.name], params.get(d.name)))
    for path, value in spots:
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, str) and not is_duration_text(value):
            continue  # the schema reported the shape
        if not isinstance(value, (str, int, float)):
            continue
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            emit_at(path, str(exc))
            continue
        if seconds > MAX_DURATION_S:
            emit_at(path, f"{short(value)} is longer than the 7-day limit of a chaos run")


def failpoint_problem(name: Any, action: str) -> str | None:
    """The reason ``name=action`` is not a failpoint spec, or ``None``."""
    if not isinstance(name, str) or not isinstance(action, str):
        return None  # the schema reported the type
    try:
        failpoints.parse(f"{name}={action}")
    except ValueError as e:
        return str(e)
    return None


def _heal_at(data: dict, duration: float | None, emit_at=None) -> float | None:
    """``phases.heal_at`` in seconds when usable, else None (reported through ``emit_at``)."""
    phases = data.get("phases")
    if not isinstance(phases, dict) or "heal_at" not in phases:
        return None
    heal_at = duration_of(phases["heal_at"])
    report = emit_at or (lambda *a, **k: None)
    if heal_at is not None and heal_at <= 0:
        report(["phases", "heal_at"], f"heal_at must be > 0, got {fmt_s(heal_at)}")
        return None
    if heal_at is not None and duration is not None and heal_at > duration:
        report(["phases", "heal_at"], f"heal_at {fmt_s(heal_at)} is past duration "
               f"{fmt_s(duration)}")
        return None
    return None if heal_at is not None and heal_at > MAX_DURATION_S else heal_at


def _steps(data: dict) -> list:
    steps = data.get("nemesis")
    return steps if isinstance(steps, list) else []


def phases_rules(data: Any, emit_at) -> None:
    """``phases.heal_at`` within the run, and no step scheduled ``at`` or after it."""
    if not isinstance(data, dict):
        return
    duration = duration_of(data.get("duration"))
    heal_at = _heal_at(data, duration, emit_at)
    if heal_at is None:
        return
    for i, step in enumerate(_steps(data)):
        at = duration_of(step["at"]) if isinstance(step, dict) and "at" in step else None
        if at is not None and at >= heal_at and (duration is None or at < duration):
            emit_at(["nemesis", i, "at"], f"at {fmt_s(at)} is not before phases.heal_at "
                    f"{fmt_s(heal_at)} (no fault fires once the heal phase started)")


def _trigger_rules(after: dict, i: int, n: int, emit_at) -> int | None:
    """One ``after`` trigger's rules; returns the step it waits for (``{step: I}``), if valid."""
    where = ["nemesis", i, "after"]
    chosen = [k for k in AFTER_TRIGGERS if k in after]
    if len(chosen) != 1:
        emit_at(where, ("give exactly one trigger of " if not chosen else
                        f"give exactly one trigger, not {' and '.join(chosen)}: one of ")
                + ", ".join(AFTER_TRIGGERS) + " (e.g. {role: gateway, ok: 100}, "
                "{event: checkpoint, count: 2}, {step: 0, delay: 1s})")
    kind = chosen[0] if len(chosen) == 1 else None
    if kind in AFTER_OUTCOMES and "role" not in after:
        emit_at(where, f"'{kind}' counts a role's operations: add 'role'")
    if "op" in after and kind not in AFTER_OUTCOMES and kind is not None:
        emit_at(where + ["op"], "'op' goes with ok/fail/info, not with " + repr(kind), key=True)
    if "count" in after and kind != "event" and kind is not None:
        emit_at(where + ["count"], "'count' goes with 'event' (ok/fail/info carry their own "
                "count)", key=True)
    if kind == "step" and "role" in after:
        emit_at(where + ["role"], "'role' does not go with 'step'", key=True)
    if "delay" in after:
        d = duration_of(after["delay"])
        if d is not None and d > MAX_DURATION_S:
            emit_at(where + ["delay"], f"{short(after['delay'])} is longer than the 7-day limit "
                    "of a chaos run")
    target = after.get("step")
    if kind != "step" or not is_int(target) or target < 0:
        return None
    if target >= n:
        emit_at(where + ["step"], f"step {target} does not exist (nemesis has {n} "
                f"step{'s' if n != 1 else ''}: 0..{n - 1})")
        return None
    if target == i:
        emit_at(where + ["step"], f"a step cannot wait for itself (step {i})")
        return None
    return target


def after_rules(data: Any, emit_at) -> None:
    """``after`` triggers (SPEC §16.2): exactly one trigger and the keys that go with it; step
    chains without a cycle, whose ``at`` root plus the delays fire before the end."""
    if not isinstance(data, dict):
        return
    steps = _steps(data)
    deps: dict[int, int] = {}
    for i, step in enumerate(steps):
        if isinstance(step, dict) and isinstance(step.get("after"), dict):
            target = _trigger_rules(step["after"], i, len(steps), emit_at)
            if target is not None:
                deps[i] = target
    duration = duration_of(data.get("duration"))
    heal_at = _heal_at(data, duration)
    end = heal_at if heal_at is not None else duration
    for i in list(deps):
        seen, j = {i}, deps[i]
        while j in deps and j not in seen:
            seen.add(j)
            j = deps[j]
        if j in seen:
            emit_at(["nemesis", i, "after", "step"],
                    f"steps wait for each other in a cycle ({' -> '.join(map(str, sorted(seen)))}"
                    "): none would ever fire")
            continue
        root = steps[j] if isinstance(steps[j], dict) else {}
        if "at" not in root or end is None:
            continue
        t, k = duration_of(root["at"]), i
        while t is not None and k in deps:
            t = t + (duration_of(steps[k].get("after", {}).get("delay", 0)) or 0)
            k = deps[k]
        if t is not None and t >= end:
            emit_at(["nemesis", i, "after"],
                    f"fires at {fmt_s(t)} (step {j} at {fmt_s(duration_of(root['at']))} plus the "
                    f"delays), not before {'phases.heal_at' if heal_at else 'duration'} "
                    f"{fmt_s(end)}")


def failpoint_rules(data: Any, emit_at) -> None:
    """``kill``'s ``hit`` goes with a ``failpoint``; ``kill``/``arm_failpoint`` failpoint specs
    parse."""
    if not isinstance(data, dict):
        return
    for i, step in enumerate(_steps(data)):
        if not isinstance(step, dict):
            continue
        fault = step.get("fault")
        if fault == "kill" and "hit" in step and "failpoint" not in step:
            emit_at(["nemesis", i, "hit"], "'hit' goes with 'failpoint' (kill at the hit-th hit "
                    "of that failpoint)", key=True)
        if fault in ("kill", "arm_failpoint") and "failpoint" in step:
            action = step.get("action", "crash") if fault == "arm_failpoint" else "crash"
            why = failpoint_problem(step["failpoint"], action if isinstance(action, str) else "")
            if why:
                field_ = "action" if fault == "arm_failpoint" and "action" in step and \
                    failpoint_problem(step["failpoint"], "crash") is None else "failpoint"
                emit_at(["nemesis", i, field_], f"bad failpoint: {why}")


def sweep_rules(data: Any, emit_at) -> None:
    """``sweep`` names a role and a failpoint the role does not arm itself."""
    sweep = data.get("sweep") if isinstance(data, dict) else None
    if not isinstance(sweep, dict):
        return
    raw_roles = data.get("roles") if isinstance(data.get("roles"), list) else []
    roles = {r["name"]: r for r in raw_roles if isinstance(r, dict)
             and isinstance(r.get("name"), str)}
    name = sweep.get("role")
    if isinstance(name, str) and name not in roles:
        known = ", ".join(str(r) for r in roles) or "no roles defined"
        emit_at(["sweep", "role"], f"sweep.role {name!r} is not a role (roles: {known})"
                f"{hint(name, [r for r in roles if isinstance(r, str)])}")
    why = failpoint_problem(sweep.get("failpoint"), "crash@1")
    if why:
        emit_at(["sweep", "failpoint"], f"bad failpoint: {why}")
    elif isinstance(name, str) and name in roles:
        own = roles[name].get("failpoints")
        fp = sweep.get("failpoint")
        armed = isinstance(own, str) and isinstance(fp, str) and re.search(
            rf"(^|,)\s*{re.escape(fp)}\s*=", own)
        if armed:
            emit_at(["sweep", "failpoint"], f"role {name!r} already arms {fp} in its "
                    "failpoints; the sweep arms crash@N there itself")
