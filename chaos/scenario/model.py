"""The resolved scenario: typed, every default filled, what the run executes (SPEC §16.4).

:func:`build` turns a document that passed validation into a :class:`Scenario`: each role's
workload is its kind's ``Params`` (:mod:`chaos.roles`), each nemesis step carries its fault's
``Params`` (:mod:`chaos.nemesis`), each checker under ``expect`` its ``Params``
(:mod:`chaos.checkers`): the same declarations the schema and the validation came from.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

import yaml

from .. import fixtures
from ..checkers import CHECKERS
from ..nemesis import FAULTS
from ..params import as_dict, parse_duration
from ..params import build as build_params
from ..roles import ROLES
from ..roles.upstream import Release
from .loading import line_of
from .schema import AFTER_OUTCOMES, SCHEMA


@dataclass
class RoleSpec:
    """One resolved role of a scenario (SPEC §16.1, §16.4).

    Attributes:
        name: unique role name; instances are ``<name>-<index>``.
        kind: a key of :data:`chaos.roles.ROLES`.
        count: number of instances (1..32).
        start_at: start offset in seconds.
        stop_at: stop offset in seconds, or ``None`` (run to the end of the chaos phase).
        workload: the kind's ``Params`` (every default filled, durations in seconds).
        failpoints: ``HERMES_STATE_FAILPOINTS`` spec for the instances (``""``: none).
        line: 1-based line of the role in the file.
        undumpable: the instances make themselves not dumpable (``/proc/<pid>/fd`` unreadable to
            a same-user process without CAP_SYS_PTRACE).
        ptrace_cap: False: the instances drop CAP_SYS_PTRACE from their bounding set (the
            commands they run see ``/proc`` like an ordinary user).
        upstream: the release an ``upstream`` role runs
            (:class:`chaos.roles.upstream.Release`), else None.
    """

    name: str
    kind: str
    count: int
    start_at: float
    stop_at: float | None
    workload: Any
    failpoints: str
    line: int | None
    undumpable: bool = False
    ptrace_cap: bool = True
    upstream: Any = None


@dataclass
class NemesisStep:
    """One resolved nemesis step (SPEC §16.2, §16.4).

    Attributes:
        index: position in the ``nemesis`` list.
        fault: a key of :data:`chaos.nemesis.FAULTS`.
        at: time offset in seconds, or ``None`` when the step fires ``after`` an event count.
        after: the trigger or ``None``: ``{"role", "ok"|"fail"|"info": N, "op"}`` (``op``
            defaults to ``"append"``), ``{"event", "count", "role"?}`` (``count`` defaults to 1)
            or ``{"step": I}``; each may carry ``"delay"`` (float seconds).
        params: the fault's ``Params`` (every default filled).
        line: 1-based line of the step in the file.
    """

    index: int
    fault: str
    at: float | None
    after: dict | None
    params: Any
    line: int | None


@dataclass
class Scenario:
    """A validated, resolved scenario (SPEC §16.4). Build with :func:`chaos.scenario.load_scenario`.

    Attributes:
        name, description, seed: as in the file (``seed`` defaults to 0).
        duration: length of the chaos phase in seconds.
        store: ``{"fixture": ...}`` with the fixture's defaults filled.
        roles: the roles in file order.
        nemesis: the steps in file order.
        expect: checker name -> its ``Params`` (defaults filled).
        must_observe: faults/events/sampled states that must happen for a conclusive verdict.
        heal_at: start of the heal phase in seconds (``phases.heal_at``), ``None``: at duration.
        sweep: ``{"failpoint", "role", "max"}`` (sweep mode, :mod:`chaos.sweep`) or ``None``.
        tags: selection labels (``ci``: collected by the default pytest run; ``exclusive``:
            the gate runs it alone).
        fs: ``{"kind": "faulty"}`` when the home is on the faulty filesystem, else ``None``.
        source: the file path (or the ``source`` given to ``load_scenario_text``).
        raw: the document as parsed from YAML (no defaults).
    """

    name: str
    description: str
    seed: int
    duration: float
    store: dict
    roles: list[RoleSpec]
    nemesis: list[NemesisStep]
    expect: dict[str, Any]
    must_observe: list[str]
    source: str
    raw: dict = field(repr=False)
    heal_at: float | None = None
    sweep: dict | None = None
    tags: list[str] = field(default_factory=list)
    fs: dict | None = None

    def role(self, name: str) -> RoleSpec:
        """Return the role called ``name``.

        Raises:
            KeyError: no role has that name.
        """
        for r in self.roles:
            if r.name == name:
                return r
        raise KeyError(name)

    def with_seed(self, seed: int) -> "Scenario":
        """Return a deep copy of this scenario with another seed (``--seed``).

        Raises:
            ValueError: ``seed`` is not an int >= 0.
        """
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seed must be an int >= 0, got {seed!r}")
        new = copy.deepcopy(self)
        new.seed = seed
        if isinstance(new.raw, dict):
            new.raw["seed"] = seed
        return new

    def to_dict(self) -> dict:
        """The resolved scenario as plain JSON data (``scenario.resolved.json``).

        Durations are float seconds and every default is filled. The result is itself a valid
        scenario document: ``load_scenario_text(json.dumps(s.to_dict()))`` gives an equal
        scenario. ``source``, ``raw`` and line numbers are not included.
        """
        roles = []
        for r in self.roles:
            d: dict = {"name": r.name, "kind": r.kind, "count": r.count, "start_at": r.start_at}
            if r.stop_at is not None:
                d["stop_at"] = r.stop_at
            d["workload"] = as_dict(r.workload)
            d["failpoints"] = r.failpoints
            if r.undumpable:
                d["undumpable"] = True
            if not r.ptrace_cap:
                d["ptrace_cap"] = False
            if r.upstream is not None:
                d["upstream"] = as_dict(r.upstream)
            roles.append(d)
        steps = []
        for s in self.nemesis:
            d = {"fault": s.fault}
            if s.at is not None:
                d["at"] = s.at
            if s.after is not None:
                d["after"] = copy.deepcopy(s.after)
            d.update(as_dict(s.params))
            steps.append(d)
        return {
            "name": self.name,
            "description": self.description,
            "seed": self.seed,
            "duration": self.duration,
            "store": copy.deepcopy(self.store),
            "roles": roles,
            "nemesis": steps,
            "expect": {name: as_dict(p) for name, p in self.expect.items()},
            "must_observe": list(self.must_observe),
            **({"fs": dict(self.fs)} if self.fs else {}),
            **({"phases": {"heal_at": self.heal_at}} if self.heal_at is not None else {}),
            **({"sweep": copy.deepcopy(self.sweep)} if self.sweep is not None else {}),
            "tags": list(self.tags),
        }


def _store(given: dict) -> dict:
    """``store:`` with its fixture's defaults filled (and only those)."""
    out = copy.deepcopy(given)
    out.setdefault("fixture", "empty")
    for key, value in fixtures.FIXTURE_DEFAULTS.get(out["fixture"], {}).items():
        out.setdefault(key, value)
    return out


def _after(given: dict) -> dict:
    """An ``after`` trigger with its defaults: ``op`` (append) with ok/fail/info, ``count`` (1)
    with ``event``; ``delay`` as float seconds when given."""
    out = copy.deepcopy(given)
    if any(k in out for k in AFTER_OUTCOMES):
        out.setdefault("op", "append")
    if "event" in out:
        out.setdefault("count", 1)
    if "delay" in out:
        out["delay"] = parse_duration(out["delay"])
    return out


def build(data: dict, root: yaml.Node, source: str) -> Scenario:
    """The :class:`Scenario` of a document that passed validation (no problem reported)."""
    roles = []
    for i, r in enumerate(data["roles"]):
        stop = r.get("stop_at")
        roles.append(RoleSpec(
            name=r["name"], kind=r["kind"], count=r.get("count", 1),
            start_at=parse_duration(r.get("start_at", 0)),
            stop_at=parse_duration(stop) if stop is not None else None,
            workload=build_params(ROLES[r["kind"]].Params, r.get("workload", {})),
            failpoints=r.get("failpoints", ""), line=line_of(root, ["roles", i]),
            undumpable=bool(r.get("undumpable", False)),
            ptrace_cap=bool(r.get("ptrace_cap", True)),
            upstream=build_params(Release, r["upstream"]) if "upstream" in r else None))
    steps = []
    for i, s in enumerate(data.get("nemesis", [])):
        given = {k: v for k, v in s.items() if k not in ("at", "after", "fault")}
        steps.append(NemesisStep(
            index=i, fault=s["fault"], at=parse_duration(s["at"]) if "at" in s else None,
            after=_after(s["after"]) if "after" in s else None,
            params=build_params(FAULTS[s["fault"]].Params, given),
            line=line_of(root, ["nemesis", i])))
    heal_at = (data.get("phases") or {}).get("heal_at")
    sweep = None
    if "sweep" in data:
        sweep = {"max": SCHEMA["properties"]["sweep"]["properties"]["max"]["default"],
                 **data["sweep"]}
    return Scenario(
        name=data["name"], description=data["description"], seed=data.get("seed", 0),
        duration=parse_duration(data["duration"]), store=_store(data.get("store", {})),
        roles=roles, nemesis=steps,
        expect={name: build_params(CHECKERS[name].Params, params)
                for name, params in data["expect"].items()},
        must_observe=list(data.get("must_observe", [])), source=source, raw=data,
        heal_at=parse_duration(heal_at) if heal_at is not None else None, sweep=sweep,
        tags=list(data.get("tags", [])), fs=dict(data["fs"]) if "fs" in data else None)
