"""Rules of reference and consistency a scenario's structure cannot express (SPEC §16.4):
role names and references, instance indexes, command flags, checker parameters, ``must_observe``,
store parameters, and every path a scenario names (it must stay inside the run: issue 11). Rules
of time (durations, start/stop times, when a step fires) are in :mod:`chaos.scenario.timing`.

Each function takes the parsed document (any structure: where the structure is wrong the schema
already reported it and the check is skipped) and an ``emit_at(path, message, key=False)``
callback.
"""

from __future__ import annotations

import os
import re
from typing import Any

from hermes_state import failpoints

from .. import fixtures
from ..checkers import CHECKERS
from ..files import names
from ..nemesis import FAULTS, FS_FAULT_NAMES, ROLE_FAULTS
from ..nemesis.commands import COMMANDS as MAINTENANCE_COMMANDS
from ..nemesis.commands import DRY_RUN, GATED_COMMANDS, path_args
from ..params import defaults
from ..roles import ROLES
from .problems import hint
from .schema import EVENT_KINDS, MAX_COUNT, MAX_NAME, NAME_PATTERN
from .timing import duration_of, fmt_s, is_int

_JITTER = defaults(CHECKERS["retry_jitter"].Params)
_COMMAND_DEFAULT = defaults(ROLES["maintenance"].Params)["command"]


def command_flags(params: dict, path: list, emit_at) -> None:
    """``force`` only on gated commands, ``dry_run`` only where there is a preview (§11); a
    command left to its default (``doctor``) is judged as that default."""
    command = params.get("command", _COMMAND_DEFAULT)
    if not isinstance(command, str) or command not in MAINTENANCE_COMMANDS:
        return
    if params.get("force") is True and command not in GATED_COMMANDS:
        emit_at(path + ["force"], f"force applies only to the gated commands "
                f"{', '.join(GATED_COMMANDS)}, not {command!r}")
    if params.get("dry_run") is True and command not in DRY_RUN:
        emit_at(path + ["dry_run"], f"dry_run applies only to {', '.join(DRY_RUN)}, "
                f"not {command!r}")
    fp = params.get("failpoints")
    if isinstance(fp, str) and fp:
        try:
            failpoints.parse(fp)
        except ValueError as e:
            emit_at(path + ["failpoints"], f"bad failpoint spec: {e}")
    t = params.get("timeout")
    if t is not None and not isinstance(t, bool):
        d = duration_of(t)
        if d is not None and d <= 0:
            emit_at(path + ["timeout"], f"timeout must be > 0, got {fmt_s(d)}")


def _roles(data: dict) -> dict[str, dict]:
    """``{name: role}`` of the well-formed roles (the first of a duplicated name)."""
    out: dict[str, dict] = {}
    roles = data.get("roles")
    for role in roles if isinstance(roles, list) else []:
        if isinstance(role, dict) and isinstance(role.get("name"), str):
            out.setdefault(role["name"], role)
    return out


def _role_ref(roles: dict[str, dict], path: list, name: Any, what: str, emit_at) -> dict | None:
    """The role ``name`` refers to; reports a name that is not a role."""
    if not isinstance(name, str):
        return None
    if name in roles:
        return roles[name]
    known = ", ".join(roles) if roles else "no roles defined"
    emit_at(path, f"{what} {name!r} is not a role (roles: {known}){hint(name, roles)}")
    return None


def _steps(data: dict):
    """``(index, step)`` of the nemesis steps that are mappings."""
    steps = data.get("nemesis")
    return [(i, s) for i, s in enumerate(steps if isinstance(steps, list) else [])
            if isinstance(s, dict)]


def name_rules(data: Any, emit_at) -> None:
    """The scenario's name and every role's name become file names (run directory, history,
    log and arm files): whatever the schema's pattern let through (``"run\\n"``: ``$`` matches
    before a final newline) must also pass :func:`chaos.files.names.check`."""
    if not isinstance(data, dict):
        return
    spots: list[tuple[list, Any]] = [(["name"], data.get("name"))]
    roles = data.get("roles")
    for i, role in enumerate(roles if isinstance(roles, list) else []):
        if isinstance(role, dict):
            spots.append((["roles", i, "name"], role.get("name")))
    for path, value in spots:
        if (isinstance(value, str) and len(value) <= MAX_NAME
                and re.search(NAME_PATTERN, value)):  # else the schema said it already
            why = names.why_not(value)
            if why is not None:
                emit_at(path, f"{names.shown(value)} cannot name a file: {why}")


def role_rules(data: Any, emit_at) -> None:
    """Unique role names; failpoint specs; the upstream release of an upstream role; command
    flags of a maintenance workload. (Times and durations: :mod:`chaos.scenario.timing`.)"""
    if not isinstance(data, dict):
        return
    first: dict[str, int] = {}
    roles = data.get("roles")
    for i, role in enumerate(roles if isinstance(roles, list) else []):
        if not isinstance(role, dict):
            continue
        name = role.get("name")
        if isinstance(name, str) and name in first:
            emit_at(["roles", i, "name"],
                    f"duplicate role name {name!r} (already used by roles[{first[name]}])")
        elif isinstance(name, str):
            first[name] = i
        fp = role.get("failpoints")
        if isinstance(fp, str):
            try:
                failpoints.parse(fp)
            except ValueError as e:
                emit_at(["roles", i, "failpoints"], f"bad failpoint spec: {e}")
        wl, kind = role.get("workload"), role.get("kind")
        if kind == "upstream" and "upstream" not in role:
            emit_at(["roles", i], "an upstream role names its release: upstream: {version: "
                    "\"0.19.0\"}")
        elif kind != "upstream" and "upstream" in role and isinstance(kind, str):
            emit_at(["roles", i, "upstream"], f"upstream: applies only to kind upstream, not "
                    f"{kind!r}", key=True)
        if kind == "maintenance" and isinstance(wl, dict):
            command_flags({k: v for k, v in wl.items() if k != "timeout"},
                          ["roles", i, "workload"], emit_at)


def step_rules(data: Any, emit_at) -> None:
    """Role references and instance indexes of the faults aimed at a role, command flags of a
    ``run`` step. (When a step fires: :mod:`chaos.scenario.timing`.)"""
    if not isinstance(data, dict):
        return
    roles = _roles(data)
    for i, step in _steps(data):
        after = step.get("after")
        if isinstance(after, dict):
            _role_ref(roles, ["nemesis", i, "after", "role"], after.get("role"), "after.role",
                      emit_at)
        fault = step.get("fault")
        if fault == "run":
            command_flags(step, ["nemesis", i], emit_at)
        if fault in ROLE_FAULTS:
            target = _role_ref(roles, ["nemesis", i, "role"], step.get("role"), "role", emit_at)
            index, count = step.get("index"), (target or {}).get("count", 1)
            if (target is not None and is_int(index) and index >= 0 and is_int(count)
                    and 1 <= count <= MAX_COUNT and index >= count):
                emit_at(["nemesis", i, "index"], f"index {index} is out of range: role "
                        f"{step['role']!r} has count {count} (index 0..{count - 1})")


def expect_rules(data: Any, emit_at) -> None:
    """Checker parameters that name a role or bound each other; ``must_observe`` faults that
    this scenario's nemesis injects."""
    if not isinstance(data, dict):
        return
    expect = data.get("expect")
    if isinstance(expect, dict):
        swr = expect.get("stale_wal_refusal")
        if isinstance(swr, dict):
            _role_ref(_roles(data), ["expect", "stale_wal_refusal", "holder"], swr.get("holder"),
                      "holder", emit_at)
        rj = expect.get("retry_jitter")
        if isinstance(rj, dict):
            lo, hi = rj.get("lo", _JITTER["lo"]), rj.get("hi", _JITTER["hi"])
            numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (lo, hi))
            if numbers and lo > hi:
                emit_at(["expect", "retry_jitter", "hi" if "hi" in rj else "lo"],
                        f"lo ({lo}) must be <= hi ({hi})")
    used = [s.get("fault") for _, s in _steps(data)
            if isinstance(s.get("fault"), str) and s.get("fault") in FAULTS]
    observe = data.get("must_observe")
    for i, item in enumerate(observe if isinstance(observe, list) else []):
        if isinstance(item, str) and item in FAULTS and item not in used:
            faults = ", ".join(dict.fromkeys(used)) or "none"
            emit_at(["must_observe", i], f"fault {item!r} is not in this scenario's nemesis "
                    f"(nemesis faults: {faults}; store events: {', '.join(EVENT_KINDS)})")


def store_rules(data: Any, emit_at) -> None:
    """``store:`` parameters that belong to another fixture, tmpfs sizes, faults that need a
    tmpfs or a detectable replacement (SPEC §16.2, §16.4, §10.1)."""
    if not isinstance(data, dict):
        return
    raw_steps = data.get("nemesis")
    store = data.get("store")
    store = store if isinstance(store, dict) else {}
    fixture = store.get("fixture", "empty")
    for owner, params in fixtures.FIXTURE_DEFAULTS.items():
        for key in params:
            if key in store and isinstance(fixture, str) and fixture != owner:
                emit_at(["store", key], f"{key!r} applies to fixture {owner!r} only, not "
                        f"{fixture!r}", key=True)
    tmpfs = store.get("tmpfs")
    if isinstance(tmpfs, str) and re.match(r"^[1-9][0-9]*[KMG]$", tmpfs):
        size = fixtures.parse_size(tmpfs)
        if not fixtures.TMPFS_MIN <= size <= fixtures.TMPFS_MAX:
            emit_at(["store", "tmpfs"], f"tmpfs {tmpfs} is outside 1M..1G")
    if tmpfs is not None and isinstance(data.get("fs"), dict):
        emit_at(["fs"], "fs and store.tmpfs both mount on the home: pick one", key=True)
    for i, step in enumerate(raw_steps if isinstance(raw_steps, list) else []):
        if not isinstance(step, dict):
            continue
        fault = step.get("fault")
        if fault in FS_FAULT_NAMES and not isinstance(data.get("fs"), dict):
            emit_at(["nemesis", i, "fault"], f"{fault} needs the faulty filesystem: add "
                    "fs: {kind: faulty}")
        if fault == "io_error" and "nth" in step and "probability" in step:
            emit_at(["nemesis", i, "probability"], "give nth or probability, not both")
        if fault in ("fill_disk", "free_disk") and "tmpfs" not in store:
            emit_at(["nemesis", i, "fault"], f"{fault} needs the store on its own tmpfs: add "
                    "store: {tmpfs: 16M} (never fills the machine's disk)")
        if fault == "replace_db" and (step.get("source") == "file") != ("path" in step):
            emit_at(["nemesis", i, "source"], "source: file needs `path` (and `path` needs "
                    "source: file)")
        if (fault == "replace_db" and step.get("how") == "cp"
                and step.get("source") == "backup"):
            emit_at(["nemesis", i, "source"], "cp of the fixture's own backup keeps the inode "
                    "and the generation token: SPEC §10.1 cannot detect it; use how: mv or "
                    "source: other")


def path_problem(value: Any, under: tuple[str, ...] = ("home",)) -> str | None:
    """Why a path a scenario names would leave the run directory, or None when it stays inside.

    Paths are resolved as the run resolves them: relative to the run's home (``<run>/home``,
    the cwd of maintenance commands), or below it (``under``). An absolute path is refused: the
    run directory is created at run time, so no absolute path can be known to lie in it.
    """
    if not isinstance(value, str) or not value:
        return None
    if os.path.isabs(value) or value.startswith("~"):
        return (f"{value!r} is an absolute path: a scenario's paths stay inside its run "
                "directory (name it relative to the home, e.g. '../recovered.db')")
    joined = os.path.normpath(os.path.join(*under, value))
    if joined == os.pardir or joined.startswith(os.pardir + os.sep):
        return (f"{value!r} leaves the run directory (paths are relative to the run's home; "
                "at most one '..', e.g. '../recovered.db')")
    return None


def path_rules(data: Any, emit_at) -> None:
    """Every path a scenario names must stay inside the run directory (issue 11): maintenance
    ``args`` (role workloads and ``run`` steps) and ``replace_db``'s ``path``."""
    if not isinstance(data, dict):
        return
    spots: list[tuple[list, Any, Any]] = []
    roles = data.get("roles")
    for i, role in enumerate(roles if isinstance(roles, list) else []):
        if isinstance(role, dict) and isinstance(role.get("workload"), dict):
            spots.append((["roles", i, "workload", "args"], role["workload"].get("args"),
                          role["workload"].get("command")))
    steps = data.get("nemesis")
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        if not isinstance(step, dict):
            continue
        spots.append((["nemesis", i, "args"], step.get("args"), step.get("command")))
        if step.get("fault") == "replace_db":
            why = path_problem(step.get("path"))
            if why:
                emit_at(["nemesis", i, "path"], why)
    for where, args, command in spots:
        for index, flag, value, base in path_args(args, command if isinstance(command, str)
                                                  else None):
            why = path_problem(value, base)
            if why:
                emit_at(where + [index], f"{flag}: {why}")
