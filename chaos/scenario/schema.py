"""The published JSON Schema of a scenario, generated from the declarations (SPEC §16.4).

The outer structure (name, duration, store, roles, nemesis, phases, sweep, tags, must_observe, fs)
is declared in :mod:`chaos.scenario.outer`; every role workload, fault and checker parameter comes
from its own module's ``Params`` (:mod:`chaos.params`) through the registries
:data:`chaos.roles.ROLES`, :data:`chaos.nemesis.FAULTS` and :data:`chaos.checkers.CHECKERS`. ``chaos/scenario.schema.json``
is this schema written out (``python -m chaos.scenario --write-schema``; a test keeps it equal).
"""

from __future__ import annotations

import json
from pathlib import Path

from ..checkers import CHECKERS
from ..history import SAMPLED_STATES  # noqa: F401  (re-exported)
from ..nemesis import FAULTS
from ..params import DURATION_PATTERN, object_schema
from ..roles import ROLES
from ..roles.upstream import Release
from .outer import (  # noqa: F401  (EVENT_KINDS, MAX_*, NAME_PATTERN, SYNCHRONOUS_LEVELS re-exported)
    EVENT_KINDS,
    MAX_COUNT,
    MAX_NAME,
    NAME_PATTERN,
    SYNCHRONOUS_LEVELS,
    AfterDecl,
    FsDecl,
    PhasesDecl,
    RoleDecl,
    ScenarioDecl,
    StepDecl,
    StoreDecl,
    SweepDecl,
)

#: Role kinds, faults and checkers, from their registries.
ROLE_KINDS = tuple(ROLES)
FAULT_NAMES = tuple(FAULTS)
CHECKER_NAMES = tuple(CHECKERS)
#: Operation outcomes an ``after`` trigger may count; the keys that choose a trigger.
AFTER_OUTCOMES = ("ok", "fail", "info")
AFTER_TRIGGERS = AFTER_OUTCOMES + ("event", "step")

#: Path of the published JSON Schema (kept identical to :data:`SCHEMA`; a test checks it).
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "scenario.schema.json"


def _step_branch(fault) -> dict:
    then = object_schema(fault.Params, title=f"{fault.name} step")
    then.pop("type")
    then.pop("description", None)
    then["properties"] = {"at": True, "after": True, "fault": True, **then["properties"]}
    return {"if": {"properties": {"fault": {"const": fault.name}}, "required": ["fault"]},
            "then": then}


def _role() -> dict:
    """A role's object: its declared keys (:class:`~chaos.scenario.outer.RoleDecl`), the
    upstream release, and the workload of its kind (from the roles' registry)."""
    out = object_schema(RoleDecl, title="role")
    out["properties"]["workload"] = {"type": "object", "description": "Workload parameters; "
                                     "the keys depend on `kind`."}
    out["properties"]["upstream"] = {
        **object_schema(Release, title="upstream release"),
        "description": "The upstream release an `upstream` role runs (required by that kind, "
        "refused on others), e.g. {version: \"0.19.0\"}: fetched once with `python -m chaos "
        "upstream fetch VERSION`; a run whose release is not cached is SKIPPED with that "
        "command."}
    order = ("name", "kind", "count", "start_at", "stop_at", "workload", "failpoints",
             "undumpable", "upstream", "ptrace_cap")  # as a user writes a role
    out["properties"] = {k: out["properties"][k] for k in order}
    out["allOf"] = [{"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
                     "then": {"properties": {"workload": {"$ref": f"#/$defs/{kind}_workload"}}}}
                    for kind in ROLE_KINDS]
    return out


def _step() -> dict:
    """A nemesis step: the scheduling keys (:class:`~chaos.scenario.outer.StepDecl`), then the
    parameters of its fault (from the faults' registry)."""
    out = object_schema(StepDecl, title="nemesis step")
    out.pop("additionalProperties")  # each fault's branch refuses its own unknown keys
    out["properties"]["after"] = {"$ref": "#/$defs/after"}
    out["allOf"] = [_step_branch(f) for f in FAULTS.values()]
    return out


def _expect() -> dict:
    return {
        "title": "expect",
        "description": "Checker name -> parameters ({} for none); at least one checker.",
        "type": "object",
        "minProperties": 1,
        "additionalProperties": False,
        "properties": {n: object_schema(c.Params, title=f"{n} parameters")
                       for n, c in CHECKERS.items()},
    }


def build_schema() -> dict:
    """The whole scenario schema (draft 2020-12): the outer structure from
    :mod:`chaos.scenario.outer`'s declarations, the workloads, faults and checkers from their
    registries' declarations."""
    top = object_schema(ScenarioDecl, title="chaos scenario")
    props = top["properties"]
    props["store"] = {**object_schema(StoreDecl, title="store"), "default": {"fixture": "empty"}}
    props["fs"] = object_schema(FsDecl, title="filesystem")
    props["expect"] = _expect()
    props["phases"] = object_schema(PhasesDecl, title="phases")
    props["sweep"] = object_schema(SweepDecl, title="sweep")
    top["required"] = [*top["required"], "expect"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        **top,
        "$defs": {
            "name": {"title": "name", "type": "string", "pattern": NAME_PATTERN,
                     "maxLength": MAX_NAME},
            "duration": {
                "title": "duration",
                "description": "A time span: a number of seconds (>= 0) or a string 'Ns', 'Nms' "
                "or 'Nm' (e.g. '10s', '500ms', '1.5s', '2m').",
                "anyOf": [{"type": "number", "minimum": 0},
                          {"type": "string", "pattern": DURATION_PATTERN}],
            },
            "role": _role(),
            **{f"{k}_workload": object_schema(r.Params, title=f"{k} workload")
               for k, r in ROLES.items()},
            "after": object_schema(AfterDecl, title="after trigger"),
            "step": _step(),
        },
    }


SCHEMA: dict = build_schema()


def schema_json() -> str:
    """:data:`SCHEMA` serialised as the published ``chaos/scenario.schema.json`` text
    (2-space indent, trailing newline); ``json.loads`` of it equals :data:`SCHEMA`."""
    return json.dumps(SCHEMA, indent=2, ensure_ascii=False) + "\n"
