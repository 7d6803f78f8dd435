"""The published JSON Schema of a scenario, generated from the declarations (SPEC §16.4).

The top-level structure (name, duration, store, roles, nemesis, expect, phases, sweep, tags,
must_observe) is declared here; every role workload, fault and checker parameter comes from its
own module's ``Params`` (:mod:`chaos.params`) through the registries :data:`chaos.roles.ROLES`,
:data:`chaos.nemesis.FAULTS` and :data:`chaos.checkers.CHECKERS`. ``chaos/scenario.schema.json``
is this schema written out (``python -m chaos.scenario --write-schema``; a test keeps it equal).
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import fixtures
from ..checkers import CHECKERS
from ..history import SAMPLED_STATES
from ..nemesis import FAULTS
from ..nemesis.process import FAILPOINT_DOC
from ..params import DURATION_PATTERN, DURATION_REF, object_schema
from ..roles import ROLES
from ..roles.upstream import Release

#: Role kinds, faults and checkers, from their registries.
ROLE_KINDS = tuple(ROLES)
FAULT_NAMES = tuple(FAULTS)
CHECKER_NAMES = tuple(CHECKERS)
#: Store event kinds (``hermes_state.events``) a scenario may count or list in ``must_observe``.
EVENT_KINDS = ("retry", "checkpoint", "refusal", "capture", "write_gave_up", "quarantine",
               "foreign_open_close", "failpoint",
               # the faulty filesystem's log, imported into the history by the runner
               "fs_power_cut", "fs_torn_write", "fs_io_error", "fs_slow_io")
#: ``store.synchronous`` levels (OFF only to prove the durability checker fails).
SYNCHRONOUS_LEVELS = ("NORMAL", "FULL", "OFF")
#: Operation outcomes an ``after`` trigger may count; the keys that choose a trigger.
AFTER_OUTCOMES = ("ok", "fail", "info")
AFTER_TRIGGERS = AFTER_OUTCOMES + ("event", "step")
NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
#: Longest scenario, role or tag name: names become run-directory and history file names
#: (with a timestamp, a seed or an instance number), which must fit in 255 bytes.
MAX_NAME = 100
MAX_COUNT = 32

#: Path of the published JSON Schema (kept identical to :data:`SCHEMA`; a test checks it).
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "scenario.schema.json"


def _dur(description: str, **extra) -> dict:
    return {"$ref": DURATION_REF, "description": description, **extra}


def _step_branch(fault) -> dict:
    then = object_schema(fault.Params, title=f"{fault.name} step")
    then.pop("type")
    then.pop("description", None)
    then["properties"] = {"at": True, "after": True, "fault": True, **then["properties"]}
    return {"if": {"properties": {"fault": {"const": fault.name}}, "required": ["fault"]},
            "then": then}


def _store() -> dict:
    return {
        "title": "store",
        "description": "The store the run starts from.",
        "type": "object",
        "additionalProperties": False,
        "default": {"fixture": "empty"},
        "properties": {
            "fixture": {
                "title": "store fixture",
                "enum": list(fixtures.FIXTURES) + list(fixtures.SCHEMA_FIXTURES),
                "default": "empty",
                "description": "`empty`: a fresh current-schema store; `generated`: one with "
                "`sessions` sessions and `messages` messages (deterministic from the seed); "
                "`schema_v1`..`schema_v22`: a store at that historical schema version with "
                "deterministic data (SPEC §16.6); `zeroed`: `bytes` zero bytes; `empty_file`: "
                "0 bytes; `not_sqlite`: a text file (SPEC §12 quarantine).",
            },
            "sessions": {"type": "integer", "minimum": 1, "maximum": 100_000,
                         "description": "`generated` only: number of sessions (default "
                         f"{fixtures.FIXTURE_DEFAULTS['generated']['sessions']})."},
            "messages": {"type": "integer", "minimum": 0, "maximum": 1_000_000,
                         "description": "`generated` only: messages, spread round-robin over the "
                         "sessions (default "
                         f"{fixtures.FIXTURE_DEFAULTS['generated']['messages']})."},
            "bytes": {"type": "integer", "minimum": 1, "maximum": 64 * 1024 * 1024,
                      "description": "`zeroed` only: size of the all-zero state.db (default "
                      f"{fixtures.FIXTURE_DEFAULTS['zeroed']['bytes']})."},
            "synchronous": {"enum": list(SYNCHRONOUS_LEVELS),
                            "description": "`PRAGMA synchronous` of every role's store (SPEC "
                            "§4), default NORMAL: on power loss the commits after the last WAL "
                            "sync may roll back; FULL: none may. OFF is not a store option: it is "
                            "forced in the role processes to prove the durability checker fails "
                            "(quote it: 'OFF' is a YAML boolean)."},
            "tmpfs": {"type": "string", "pattern": "^[1-9][0-9]*[KMG]$",
                      "description": "Put the home on a tmpfs of this size (e.g. '16M', 1M..1G), "
                      "mounted by the runner (root only); needed by fill_disk/free_disk. When it "
                      "cannot be mounted every checker is SKIPPED with the reason."},
        },
    }


def _role() -> dict:
    kinds = "; ".join(f"{k}: {r.summary}" for k, r in ROLES.items())
    return {
        "title": "role",
        "description": "A role: `count` OS processes of one kind (SPEC §16.1).",
        "type": "object",
        "required": ["name", "kind"],
        "additionalProperties": False,
        "properties": {
            "name": {"$ref": "#/$defs/name",
                     "description": "Unique among roles; instances are named <name>-<index>."},
            "kind": {"title": "role kind", "enum": list(ROLE_KINDS), "description": kinds + "."},
            "count": {"type": "integer", "minimum": 1, "maximum": MAX_COUNT, "default": 1,
                      "description": "Number of instances."},
            "start_at": _dur("When the instances start (< duration).", default=0),
            "stop_at": _dur("When the instances are stopped (> start_at, <= duration); default: "
                            "they run until the end of the chaos phase (cli: until their burst "
                            "is done)."),
            "workload": {"type": "object",
                         "description": "Workload parameters; the keys depend on `kind`."},
            "failpoints": {"type": "string",
                           "description": "HERMES_STATE_FAILPOINTS for the instances, e.g. "
                           "'write.before_commit=crash@3' (SPEC §4 failpoints)."},
            "undumpable": {"type": "boolean", "default": False,
                           "description": "The instances mark themselves not dumpable "
                           "(PR_SET_DUMPABLE 0, as after a setuid): a process of the same user "
                           "without CAP_SYS_PTRACE cannot read their /proc/<pid>/fd (SPEC §10.2)."},
            "upstream": {**object_schema(Release, title="upstream release"),
                         "description": "The upstream release an `upstream` role runs (required "
                         "by that kind, refused on others), e.g. {version: \"0.19.0\"}: fetched "
                         "once with `python -m chaos upstream fetch VERSION`; a run whose release "
                         "is not cached is SKIPPED with that command."},
            "ptrace_cap": {"type": "boolean", "default": True,
                           "description": "false: the instances drop CAP_SYS_PTRACE from their "
                           "bounding set, so the commands they run read /proc like an ordinary "
                           "user of the same uid (root would read every process's descriptors)."},
        },
        "allOf": [{"if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
                   "then": {"properties": {"workload": {"$ref": f"#/$defs/{kind}_workload"}}}}
                  for kind in ROLE_KINDS],
    }


def _after() -> dict:
    return {
        "title": "after trigger",
        "description": "Fire after an event count (SPEC §16.2), exactly one of: `ok`/`fail`/"
        "`info`: N -- the role's N-th operation `op` with that outcome (all its instances "
        "together); `event`: KIND -- the `count`-th store event of that kind (of `role` if given, "
        "else of any process); `step`: I -- nemesis step I is done. `delay` waits that long "
        "after the trigger.",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "role": {"type": "string", "description": "The role counted (must name a role; "
                     "required with ok/fail/info)."},
            "ok": {"type": "integer", "minimum": 1,
                   "description": "Count of the role's successful `op`."},
            "fail": {"type": "integer", "minimum": 1,
                     "description": "Count of the role's failed `op`."},
            "info": {"type": "integer", "minimum": 1,
                     "description": "Count of the role's `op` with an unknown outcome."},
            "op": {"type": "string", "pattern": "\\S",
                   "description": "The operation counted with ok/fail/info (default: append)."},
            "event": {"title": "store event", "enum": list(EVENT_KINDS),
                      "description": "A store event kind (`failpoint`: an armed failpoint "
                      "fired)."},
            "count": {"type": "integer", "minimum": 1,
                      "description": "With `event`: how many such events (default 1)."},
            "step": {"type": "integer", "minimum": 0,
                     "description": "Index of another nemesis step: fire once it is done."},
            "delay": _dur("Wait this long after the trigger before firing (default 0)."),
        },
    }


def _step() -> dict:
    return {
        "title": "nemesis step",
        "description": "One fault, scheduled with exactly one of `at` or `after`; the other keys "
        "depend on `fault`.",
        "type": "object",
        "required": ["fault"],
        "properties": {
            "at": _dur("Time offset from the start of the chaos phase (< duration)."),
            "after": {"$ref": "#/$defs/after"},
            "fault": {"title": "fault", "enum": list(FAULT_NAMES),
                      "description": "; ".join(f"{n}: {f.summary}" for n, f in FAULTS.items())
                      + "."},
        },
        "allOf": [_step_branch(f) for f in FAULTS.values()],
    }


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
    """The whole scenario schema (draft 2020-12), from the declarations and registries."""
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "chaos scenario",
        "description": "A chaos scenario for hermes-state (SPEC §16.4): roles (OS processes "
        "running a workload against the real store), a nemesis schedule (faults) and the "
        "checkers (invariants) that decide the verdict. Semantic rules the schema cannot express "
        "are checked by chaos/scenario/rules.py: times must lie before `duration`, `stop_at` "
        "after `start_at`, role names are unique, every role reference names a role, a nemesis "
        "`index` is below the role's `count`, each nemesis step has exactly one of "
        "`at`/`after`, `failpoints` parse, a `must_observe` fault is used by the nemesis, and "
        "every path a scenario names stays inside the run directory.",
        "type": "object",
        "required": ["name", "description", "duration", "roles", "expect"],
        "additionalProperties": False,
        "properties": {
            "name": {"$ref": "#/$defs/name", "description": "Scenario name: lowercase letters, "
                     "digits, '-' and '_'; used in run directory names."},
            "description": {"type": "string", "pattern": "\\S",
                            "description": "What the scenario reproduces (non-empty)."},
            "seed": {"type": "integer", "minimum": 0, "maximum": 2**63 - 1, "default": 0,
                     "description": "Seed of every random choice (workload and faults); the "
                     "same seed replays the same run. `--seed` overrides it."},
            "duration": _dur("Length of the chaos phase (> 0)."),
            "store": _store(),
            "fs": {
                "title": "filesystem",
                "description": "Put the home on the faulty FUSE filesystem (chaos/fs, issue 15), "
                "mounted before the roles start, unmounted at the end (its backing directory "
                "stays as fs-backing/, its log as fs.jsonl); needed by power_cut, torn_write, "
                "io_error and slow_io. Where FUSE cannot be mounted every checker is SKIPPED "
                "with the reason.",
                "type": "object",
                "additionalProperties": False,
                "required": ["kind"],
                "properties": {"kind": {"enum": ["faulty"],
                                        "description": "faulty: LazyFS-style (unsynced data in "
                                        "its own cache)."}},
            },
            "roles": {"type": "array", "minItems": 1, "items": {"$ref": "#/$defs/role"},
                      "description": "The processes of the run (at least one)."},
            "nemesis": {"type": "array", "default": [], "items": {"$ref": "#/$defs/step"},
                        "description": "The fault schedule."},
            "expect": _expect(),
            "phases": {
                "title": "phases",
                "description": "Run phases (SPEC §16.3): warm-up until the first fault, chaos, "
                "heal (SIGCONT every process, free the disk) and recover (checks after every "
                "role stopped).",
                "type": "object",
                "additionalProperties": False,
                "properties": {"heal_at": _dur(
                    "When the heal phase starts (> 0, <= duration; default: duration). Roles "
                    "keep running after it until `duration`, so a checker can see them commit "
                    "again; nemesis steps not fired by then never fire.")},
            },
            "sweep": {
                "title": "sweep",
                "description": "Sweep mode (SPEC §16.2, SQLite's fault loops): run the scenario "
                "again and again with `failpoint=crash@N` armed in `role` for N = 1, 2, ... "
                "until a run where the role never reached hit N (the operation completed), "
                "checking the invariants after each run. Exit 1 if any N fails.",
                "type": "object",
                "required": ["failpoint", "role"],
                "additionalProperties": False,
                "properties": {
                    "failpoint": {"type": "string", "pattern": "\\S",
                                  "description": FAILPOINT_DOC},
                    "role": {"type": "string", "description": "The role whose instances get the "
                             "crash (must name a role)."},
                    "max": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50,
                            "description": "Highest N tried; a sweep still crashing at N = max "
                            "is INCONCLUSIVE."},
                },
            },
            "tags": {"type": "array", "uniqueItems": True, "default": [],
                     "items": {"title": "tag", "$ref": "#/$defs/name"},
                     "description": "Labels for selecting scenarios: `ci` = part of the default "
                     "pytest run (the pytest plugin collects only `ci` scenarios unless "
                     "--chaos-all); `exclusive` = `python -m chaos gate` runs it alone, never "
                     "beside another job."},
            "must_observe": {
                "type": "array", "default": [],
                "items": {"title": "observable",
                          "enum": list(FAULT_NAMES) + list(EVENT_KINDS) + list(SAMPLED_STATES)},
                "description": "Faults (used by this scenario's nemesis), store events, or "
                "states the sampler must witness (`retired_wal_held`: a role holds a -wal that "
                "is not the one at the path; `write_lock_held`: some process owns the WAL write "
                "lock; `lock_wait`: a process waits on a lock another owns; "
                "`checkpoint_lock_held`: a process holds the checkpoint lock exclusively) that "
                "must happen, "
                "else the verdict is INCONCLUSIVE (the run never reached the state it targets).",
            },
        },
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
            "after": _after(),
            "step": _step(),
        },
    }


SCHEMA: dict = build_schema()


def schema_json() -> str:
    """:data:`SCHEMA` serialised as the published ``chaos/scenario.schema.json`` text
    (2-space indent, trailing newline); ``json.loads`` of it equals :data:`SCHEMA`."""
    return json.dumps(SCHEMA, indent=2, ensure_ascii=False) + "\n"
