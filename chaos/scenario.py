"""Scenario files: load, validate and resolve a chaos scenario (SPEC §16.4).

A scenario (YAML) names **roles** (processes running a workload against the store), a
**nemesis** schedule (faults) and the **checkers** to run (``expect``). Files are validated
before anything starts: the structure with the published JSON Schema (:data:`SCHEMA`, also
written to ``chaos/scenario.schema.json``), then semantic checks the schema cannot express
(times past ``duration``, references to roles that do not exist, duplicate role names,
failpoint specs, ...). Every problem is reported — not only the first — with the file, the
1-based line of the offending YAML node and the dotted field path (``roles[1].kind``), sorted by
line. A file with any problem raises :class:`ScenarioError` (``python -m chaos`` exits 2 and
nothing runs).

The returned :class:`Scenario` is *resolved*: defaults are filled in (every workload key of the
role's kind, every checker parameter, ``store``, ``seed``, ``nemesis``...), durations are float
seconds, and :meth:`Scenario.to_dict` gives a JSON document that is itself a valid scenario.

Regenerate the published schema after editing :data:`SCHEMA`::

    python -m chaos.scenario --write-schema
"""

from __future__ import annotations

import copy
import difflib
import json
import math
import re
import reprlib
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, NamedTuple

import jsonschema
import yaml

from .params import _DURATION_RE, DURATION_PATTERN, MAX_DURATION_S, parse_duration

__all__ = [
    "Problem",
    "ScenarioError",
    "RoleSpec",
    "NemesisStep",
    "Scenario",
    "parse_duration",
    "load_scenario",
    "load_scenario_text",
    "validate_text",
    "schema_json",
    "SCHEMA",
    "SCHEMA_PATH",
    "ROLE_KINDS",
    "FAULTS",
    "SIGNAL_FAULTS",
    "CHECKERS",
    "EVENT_KINDS",
    "SAMPLED_STATES",
]

# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------

#: Role kinds implemented by ``chaos/roles`` (SPEC §16.1 names more; they are rejected for now).
ROLE_KINDS = ("gateway", "cli", "lock_holder", "worktree", "maintenance", "long_reader")
#: Nemesis faults implemented (SPEC §16.2 names more; they are rejected for now).
FAULTS = ("delete_sidecars", "kill", "terminate", "stop", "cont", "run", "arm_failpoint",
          "restart")
#: Faults that send a signal to the instances of a role (they take ``role`` and ``index``).
SIGNAL_FAULTS = ("kill", "terminate", "stop", "cont")
#: How ``restart`` stops the live instance of a slot before starting the new one.
RESTART_STOPS = ("kill", "terminate", "none")
#: Operation outcomes an ``after`` trigger may count.
AFTER_OUTCOMES = ("ok", "fail", "info")
#: The keys that choose an ``after`` trigger (exactly one per trigger).
AFTER_TRIGGERS = AFTER_OUTCOMES + ("event", "step")
#: Maintenance commands of the ``maintenance`` role and the ``run`` fault (SPEC §15, §16.2);
#: kept equal to ``chaos.nemesis.commands.COMMANDS`` (a test checks it).
MAINTENANCE_COMMANDS = ("optimize", "optimize-storage", "prune", "backup", "doctor", "recover",
                        "replay-spool")
#: Commands behind the live-writer gate (SPEC §11): the only ones taking ``force``.
GATED_COMMANDS = ("optimize", "optimize-storage", "prune")
#: Commands with a ``--dry-run`` preview.
DRY_RUN_COMMANDS = ("optimize", "optimize-storage", "prune", "replay-spool")
#: File and disk faults on the store's files (``chaos/nemesis/files.py``, ``disk.py``).
FILE_FAULTS = ("rename_sidecars", "replace_db", "zero_db", "truncate_db", "corrupt_page",
               "corrupt_fts", "fill_disk", "free_disk", "foreign_open_close")
FAULTS = FAULTS + FILE_FAULTS
#: Faults aimed at the instances of a role (``role`` required, ``index`` optional): signals,
#: failpoints armed at run time, restarts (``chaos/nemesis/process.py``), foreign_open_close.
ROLE_FAULTS = SIGNAL_FAULTS + ("foreign_open_close", "arm_failpoint", "restart")
#: Store fixtures (SPEC §16.4); ``schema_v1`` .. ``schema_v22`` too (chaos/fixtures.py).
STORE_FIXTURES = ("empty", "generated", "zeroed", "empty_file", "not_sqlite")
SCHEMA_FIXTURES = tuple(f"schema_v{n}" for n in range(1, 23))
#: Checkers that may appear under ``expect`` (SPEC §16.3).
CHECKERS = (
    "no_lost_writes",
    "stale_wal_refusal",
    "integrity",
    "retry_jitter",
    "checkpoint_cadence",
    "recovery",
    "maintenance_refusal",
    "no_lockup",
    "latency",
    "single_wal_generation",
    "liveness_after_heal",
    "error_taxonomy",
    "fixture_preserved",
)
#: States of the store the sampler can witness (chaos/sampler.py) for ``must_observe``: a role
#: process holding a -wal that is not the one at the path, a write-lock owner, a process waiting.
SAMPLED_STATES = ("retired_wal_held", "write_lock_held", "lock_wait")
#: Store event kinds (``hermes_state.events``) a scenario may list in ``must_observe``.
EVENT_KINDS = ("retry", "checkpoint", "refusal", "capture", "write_gave_up", "quarantine",
               "foreign_open_close", "failpoint")
#: Sidecar files ``delete_sidecars`` may delete.
SIDECARS = ("wal", "shm")
#: Places ``no_lost_writes`` may accept an ``ok`` append in besides the final store.
ALLOW_IN = ("capture", "spool")

NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
MAX_COUNT = 32

#: Path of the published JSON Schema (kept identical to :data:`SCHEMA`; a test checks it).
SCHEMA_PATH = Path(__file__).with_name("scenario.schema.json")

# --------------------------------------------------------------------------------------------
# The published JSON Schema (draft 2020-12). Only JSON types in here (lists, not tuples) so
# that ``json.loads(schema_json()) == SCHEMA``.
# --------------------------------------------------------------------------------------------

_DUR = "#/$defs/duration"


def _dur(description: str, **extra: Any) -> dict:
    return {"$ref": _DUR, "description": description, **extra}


def _workload(kind: str, description: str, properties: dict) -> dict:
    return {
        "title": f"{kind} workload",
        "description": description,
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }


def _step_then(fault: str, properties: dict, required: list[str]) -> dict:
    then: dict = {
        "title": f"{fault} step",
        "additionalProperties": False,
        "properties": {"at": True, "after": True, "fault": True, **properties},
    }
    if required:
        then["required"] = required
    return {
        "if": {"properties": {"fault": {"const": fault}}, "required": ["fault"]},
        "then": then,
    }


def _checker(
    name: str, description: str, properties: dict, required: tuple[str, ...] = ()
) -> dict:
    out: dict = {
        "title": f"{name} parameters",
        "description": description,
        "type": "object",
        "additionalProperties": False,
        "properties": properties,
    }
    if required:
        out["required"] = list(required)
    return out


def _share(description: str, default: float) -> dict:
    return {"type": "number", "minimum": 0, "maximum": 1, "default": default,
            "description": description}


def _message_props(default_bytes: int = 200, tool_share: float = 0.2) -> dict:
    """Message shape keys shared by the writing roles (SPEC §16.1)."""
    return {
        "message_bytes": {
            "type": "integer",
            "minimum": 1,
            "maximum": 1_000_000,
            "default": default_bytes,
            "description": "Size of each message's content (characters).",
        },
        "cjk_share": _share("Share of messages written in CJK (Han, Kana, Hangul) words.", 0.0),
        "tool_call_share": _share("Share of assistant messages carrying 1-3 tool calls.",
                                  tool_share),
    }


def _command_props(where: str) -> dict:
    """Properties of a maintenance command (``maintenance`` workload and ``run`` step)."""
    return {
        "command": {
            "title": "maintenance command",
            "enum": list(MAINTENANCE_COMMANDS),
            "default": "doctor",
            "description": "The CLI command run as `python -m hermes_state --home H ...`: "
            "optimize / optimize-storage / prune (`sessions ...`, gated, SPEC §11), backup, "
            "doctor, recover (default `--source state.db --inspect-only`), replay-spool.",
        },
        "force": {
            "type": "boolean",
            "default": False,
            "description": "Add --force (gated commands only: skips the live-writer gate).",
        },
        "dry_run": {
            "type": "boolean",
            "default": False,
            "description": "Add --dry-run (optimize, optimize-storage, prune, replay-spool).",
        },
        "args": {
            "type": "array",
            "default": [],
            "items": {"type": "string"},
            "description": "Extra CLI words, e.g. [\"--older-than\", \"0\", \"--source\", "
            "\"cli\"] for prune (default --older-than 90; --yes is always given).",
        },
        "timeout": _dur(f"The command is killed after this long ({where}).", default=60),
    }


_SIGNAL_STEP_PROPS = {
    "role": {
        "type": "string",
        "description": "The role whose instances receive the signal (must name a role).",
    },
    "index": {
        "type": "integer",
        "minimum": 0,
        "description": "Only this instance of the role (0-based, < the role's count); "
        "default: every instance.",
    },
}

_SIDECAR_LIST = {
    "type": "array",
    "minItems": 1,
    "uniqueItems": True,
    "items": {"title": "sidecar", "enum": list(SIDECARS)},
}
_SEED_PROP = {"type": "integer", "minimum": 0, "default": 0,
              "description": "Seed of the garbage bytes."}
_FILE_STEPS = [
    _step_then("rename_sidecars", {
        "files": {**_SIDECAR_LIST, "default": ["wal"], "description": "Which sidecars to rename."},
        "suffix": {"type": "string", "pattern": "^[A-Za-z0-9._-]+$", "default": ".aside",
                   "description": "Appended to the sidecar's name (same directory)."},
    }, []),
    _step_then("replace_db", {
        "how": {"enum": ["mv", "cp"], "default": "mv",
                "description": "mv: rename a copy over state.db (new inode); cp: rewrite "
                "state.db in place (same inode)."},
        "source": {"enum": ["other", "empty", "backup", "file"], "default": "other",
                   "description": "other: a small store with its own generation token; empty: "
                   "a fresh empty store; backup: a copy of the fixture taken before the run "
                   "(same token; mv only); file: the store at `path`."},
        "path": {"type": "string", "pattern": "\\S",
                 "description": "source file: a store path relative to the home (e.g. "
                 "'../recovered.db', written by a `run` recover step)."},
        "sidecars": {"enum": ["keep", "aside"], "default": "keep",
                     "description": "keep: leave state.db-wal/-shm at the path (a bare mv/cp); "
                     "aside: rename them out of the way (the careful operator's swap)."},
    }, []),
    _step_then("zero_db", {}, []),
    _step_then("truncate_db", {
        "bytes": {"type": "integer", "minimum": 0, "default": 0,
                  "description": "The size to truncate state.db to."},
    }, []),
    _step_then("corrupt_page", {
        "page": {"type": "integer", "minimum": 2,
                 "description": "Garble this page number (default: a page of `table`)."},
        "table": {"type": "string", "default": "messages",
                  "description": "Garble a page of this table's b-tree (found with dbstat; "
                  "never a page with a frame in the current WAL)."},
        "pick": {"enum": ["leaf", "interior"], "default": "leaf",
                 "description": "Which kind of b-tree page of `table`."},
        "seed": _SEED_PROP,
    }, []),
    _step_then("corrupt_fts", {
        "table": {"enum": ["messages_fts_data", "messages_fts_trigram_data"],
                  "default": "messages_fts_data",
                  "description": "The FTS5 shadow table whose index data is garbled."},
        "pages": {"type": "integer", "minimum": 0, "default": 0,
                  "description": "Leaf pages to garble; 0 = every page outside the WAL."},
        "seed": _SEED_PROP,
    }, []),
    _step_then("fill_disk", {
        "leave": {"type": "integer", "minimum": 0, "default": 0,
                  "description": "Bytes left free on the store's tmpfs."},
    }, []),
    _step_then("free_disk", {}, []),
]
_FAILPOINT_NAME = {
    "type": "string",
    "pattern": "\\S",
    "description": "A failpoint name (hermes_state.failpoints.NAMES, e.g. write.before_commit, "
    "write.after_commit, checkpoint.before, close.before_checkpoint, capture.mid_copy, "
    "migrate.v20.before_commit).",
}
_KILL_STEP_PROPS = {
    "failpoint": {
        **_FAILPOINT_NAME,
        "description": "Instead of SIGKILL now: arm `crash@hit` at this failpoint so the role "
        "kills itself there (SPEC §16.2 named crash points). " + _FAILPOINT_NAME["description"],
    },
    "hit": {
        "type": "integer",
        "minimum": 1,
        "description": "With `failpoint`: crash at the hit-th hit counted from the arming "
        "(default 1: the next one).",
    },
}
_FAILPOINT_STEP_PROPS = {
    "failpoint": _FAILPOINT_NAME,
    "action": {
        "type": "string",
        "default": "crash",
        "description": "crash, crash@N, sleep(MS), sleep(MS)@N, error(ioerr|busy|locked|full|"
        "corrupt) or off; hits are counted from the arming.",
    },
}
_RESTART_STEP_PROPS = {
    "stop": {
        "title": "restart stop",
        "enum": list(RESTART_STOPS),
        "default": "kill",
        "description": "How a live instance of the slot is stopped first: kill (SIGKILL), "
        "terminate (SIGTERM, SIGKILL after 5 s) or none (left running beside the new one).",
    },
}

SCHEMA: dict = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "title": "chaos scenario",
    "description": "A chaos scenario for hermes-state (SPEC §16.4): roles (OS processes running a "
    "workload against the real store), a nemesis schedule (faults) and the checkers "
    "(invariants) that decide the verdict. Semantic rules the schema cannot express are checked "
    "by chaos/scenario.py: times must lie before `duration`, `stop_at` after `start_at`, role "
    "names are unique, every role reference names a role, a nemesis `index` is below the role's "
    "`count`, each nemesis step has exactly one of `at`/`after`, `failpoints` parse, and a "
    "`must_observe` fault is used by the nemesis.",
    "type": "object",
    "required": ["name", "description", "duration", "roles", "expect"],
    "additionalProperties": False,
    "properties": {
        "name": {
            "$ref": "#/$defs/name",
            "description": "Scenario name: lowercase letters, digits, '-' and '_'; used in run "
            "directory names.",
        },
        "description": {
            "type": "string",
            "pattern": "\\S",
            "description": "What the scenario reproduces (non-empty).",
        },
        "seed": {
            "type": "integer",
            "minimum": 0,
            "maximum": 2**63 - 1,
            "default": 0,
            "description": "Seed of every random choice (workload and faults); the same seed "
            "replays the same run. `--seed` overrides it.",
        },
        "duration": _dur("Length of the chaos phase (> 0)."),
        "store": {
            "title": "store",
            "description": "The store the run starts from.",
            "type": "object",
            "additionalProperties": False,
            "default": {"fixture": "empty"},
            "properties": {
                "fixture": {
                    "title": "store fixture",
                    "enum": list(STORE_FIXTURES) + list(SCHEMA_FIXTURES),
                    "default": "empty",
                    "description": "`empty`: a fresh current-schema store; `generated`: one "
                    "with `sessions` sessions and `messages` messages (deterministic from the "
                    "seed); `schema_v1`..`schema_v22`: a store at that historical schema version "
                    "with deterministic data (SPEC §16.6); `zeroed`: `bytes` zero bytes; "
                    "`empty_file`: 0 bytes; `not_sqlite`: a text file (SPEC §12 quarantine).",
                },
                "sessions": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100_000,
                    "description": "`generated` only: number of sessions (default 20).",
                },
                "messages": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 1_000_000,
                    "description": "`generated` only: messages, spread round-robin over the "
                    "sessions (default 1000).",
                },
                "bytes": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 64 * 1024 * 1024,
                    "description": "`zeroed` only: size of the all-zero state.db (default 16384).",
                },
                "tmpfs": {
                    "type": "string",
                    "pattern": "^[1-9][0-9]*[KMG]$",
                    "description": "Put the home on a tmpfs of this size (e.g. '16M', 1M..1G), "
                    "mounted by the runner (root only); needed by fill_disk/free_disk. When it "
                    "cannot be mounted every checker is SKIPPED with the reason.",
                },
            },
        },
        "roles": {
            "type": "array",
            "minItems": 1,
            "items": {"$ref": "#/$defs/role"},
            "description": "The processes of the run (at least one).",
        },
        "nemesis": {
            "type": "array",
            "default": [],
            "items": {"$ref": "#/$defs/step"},
            "description": "The fault schedule.",
        },
        "expect": {
            "title": "expect",
            "description": "Checker name -> parameters ({} for none); at least one checker.",
            "type": "object",
            "minProperties": 1,
            "additionalProperties": False,
            "properties": {
                "no_lost_writes": _checker(
                    "no_lost_writes",
                    "Every ok append is in the final store (or in an allowed place); every "
                    "failed append is absent.",
                    {
                        "allow_in": {
                            "type": "array",
                            "uniqueItems": True,
                            "default": [],
                            "items": {"title": "place", "enum": list(ALLOW_IN)},
                            "description": "Where an ok append may be instead of the final store.",
                        },
                        "expect_loss": {
                            "type": "boolean",
                            "description": "The scenario destroys acknowledged writes on "
                            "purpose (e.g. the WAL deleted after a crash): PASS only if a loss is "
                            "detected; the verdict lists exactly the lost payload ids. Default "
                            "false.",
                        },
                    },
                ),
                "stale_wal_refusal": _checker(
                    "stale_wal_refusal",
                    "After the sidecars of a live holder are deleted, the holder stops writing, "
                    "leaves a capture, new processes refuse, and a new writer works after it "
                    "exits.",
                    {
                        "holder": {
                            "type": "string",
                            "description": "The role holding the store when the sidecars go "
                            "(must name a role).",
                        },
                        "fault": {
                            "enum": ["delete_sidecars", "rename_sidecars"],
                            "description": "The nemesis fault that retires the WAL (T = its "
                            "first done record); default delete_sidecars.",
                        },
                    },
                    ("holder",),
                ),
                "integrity": _checker(
                    "integrity",
                    "integrity_check, foreign_key_check, FTS integrity and message counts.",
                    {},
                ),
                "retry_jitter": _checker(
                    "retry_jitter",
                    "Retry sleeps within [lo, hi], spread uniformly, at most max_attempts.",
                    {
                        "min_retries": {
                            "type": "integer",
                            "minimum": 0,
                            "default": 0,
                            "description": "Fewer retries observed than this is inconclusive.",
                        },
                        "max_attempts": {
                            "type": "integer",
                            "minimum": 1,
                            "default": 15,
                            "description": "At most this many attempts per write.",
                        },
                        "lo": {
                            "type": "number",
                            "minimum": 0,
                            "default": 0.020,
                            "description": "Lowest allowed retry sleep (seconds).",
                        },
                        "hi": {
                            "type": "number",
                            "minimum": 0,
                            "default": 0.150,
                            "description": "Highest allowed retry sleep (seconds, >= lo).",
                        },
                        "budget_s": {
                            "type": "number",
                            "minimum": 0,
                            "default": 15.0,
                            "description": "A lock error is justified only when one process "
                                           "held the write lock this long during the wait "
                                           "(seconds; 15 attempts x 1 s busy timeout).",
                        },
                    },
                ),
                "checkpoint_cadence": _checker(
                    "checkpoint_cadence",
                    "A PASSIVE checkpoint after every `every`-th write of each writer.",
                    {
                        "every": {
                            "type": "integer",
                            "minimum": 1,
                            "default": 50,
                            "description": "Writes between cadence checkpoints.",
                        }
                    },
                ),
                "recovery": _checker(
                    "recovery",
                    "After the run, doctor reports what is expected and a fresh writer writes.",
                    {},
                ),
                "maintenance_refusal": _checker(
                    "maintenance_refusal",
                    "A gated maintenance command without --force under a live writer exits 1 "
                    "naming the holder PIDs and rewrites nothing; --dry-run works (SPEC §11).",
                    {
                        "role": {
                            "type": "string",
                            "description": "Only judge the commands of this maintenance role "
                            "(default: every maintenance command of the run).",
                        },
                        "min_refusals": {
                            "type": "integer",
                            "minimum": 0,
                            "default": 1,
                            "description": "Fewer refusals under a live writer than this is "
                            "inconclusive.",
                        },
                    },
                ),
                "no_lockup": _checker(
                    "no_lockup",
                    "No operation waits longer than `bound` without progress; a stall names "
                    "the holders and the write-lock owner of that moment (from samples).",
                    {
                        "bound": _dur("Longest wait without progress.", default="5s"),
                        "ignore_ops": {
                            "type": "array",
                            "uniqueItems": True,
                            "default": [],
                            "items": {"type": "string"},
                            "description": "Ops that are long by design (besides hold_lock "
                            "and the adversary roles').",
                        },
                    },
                ),
                "latency": _checker(
                    "latency",
                    "p50/p95/p99/max latency per op kind; FAIL only past an optional bound.",
                    {
                        "p99_bound": _dur("Optional: FAIL when an op kind's p99 exceeds it."),
                        "max_bound": _dur("Optional: FAIL when an op kind's max exceeds it."),
                        "ops": {
                            "type": "array",
                            "uniqueItems": True,
                            "items": {"type": "string"},
                            "description": "Op kinds the bounds apply to (default: all).",
                        },
                    },
                ),
                "single_wal_generation": _checker(
                    "single_wal_generation",
                    "From the sampler: no role process commits a write while it holds a -wal "
                    "inode that is not the one at the path.",
                    {
                        "min_samples": {
                            "type": "integer",
                            "minimum": 1,
                            "default": 5,
                            "description": "Fewer samples with a role holding the store is "
                            "inconclusive.",
                        }
                    },
                ),
                "liveness_after_heal": _checker(
                    "liveness_after_heal",
                    "After the heal phase begins, every writer still alive commits again "
                    "within `deadline`.",
                    {
                        "deadline": _dur("Time after the heal starts to commit again.",
                                         default="3s"),
                        "roles": {
                            "type": "array",
                            "uniqueItems": True,
                            "items": {"type": "string"},
                            "description": "Writer roles that must commit (default: every "
                            "role that wrote during the run and was alive at the heal).",
                        },
                    },
                ),
                "error_taxonomy": _checker(
                    "error_taxonomy",
                    "Only the allowed error classes reach the roles; corruption errors fail "
                    "unless a corrupting fault was injected.",
                    {
                        "allow": {
                            "type": "array",
                            "uniqueItems": True,
                            "default": [],
                            "items": {"type": "string"},
                            "description": "Error class names a role may see (e.g. "
                            "DeletedWalGenerationError).",
                        }
                    },
                ),
                "fixture_preserved": _checker(
                    "fixture_preserved",
                    "Every row of the schema_vN fixture survived the migration to version 23 "
                    "and is searchable (SPEC §16.6).",
                    {},
                ),
            },
        },
        "phases": {
            "title": "phases",
            "description": "Run phases (SPEC §16.3): warm-up until the first fault, chaos, heal "
            "(SIGCONT every process, free the disk) and recover (checks after every role "
            "stopped).",
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "heal_at": _dur(
                    "When the heal phase starts (> 0, <= duration; default: duration). Roles keep "
                    "running after it until `duration`, so a checker can see them commit again; "
                    "nemesis steps not fired by then never fire."
                ),
            },
        },
        "sweep": {
            "title": "sweep",
            "description": "Sweep mode (SPEC §16.2, SQLite's fault loops): run the scenario again "
            "and again with `failpoint=crash@N` armed in `role` for N = 1, 2, ... until a run "
            "where the role never reached hit N (the operation completed), checking the "
            "invariants after each run. Exit 1 if any N fails.",
            "type": "object",
            "required": ["failpoint", "role"],
            "additionalProperties": False,
            "properties": {
                "failpoint": _FAILPOINT_NAME,
                "role": {"type": "string",
                         "description": "The role whose instances get the crash (must name a "
                         "role)."},
                "max": {"type": "integer", "minimum": 1, "maximum": 1000, "default": 50,
                        "description": "Highest N tried; a sweep still crashing at N = max is "
                        "INCONCLUSIVE."},
            },
        },
        "tags": {
            "type": "array",
            "uniqueItems": True,
            "default": [],
            "items": {"title": "tag", "$ref": "#/$defs/name"},
            "description": "Labels for selecting scenarios: `ci` = part of the default pytest "
            "run (the pytest plugin collects only `ci` scenarios unless --chaos-all); "
            "`exclusive` = `python -m chaos gate` runs it alone, never beside another job.",
        },
        "must_observe": {
            "type": "array",
            "default": [],
            "items": {"title": "observable",
                      "enum": list(FAULTS) + list(EVENT_KINDS) + list(SAMPLED_STATES)},
            "description": "Faults (used by this scenario's nemesis), store events, or states "
            "the sampler must witness (`retired_wal_held`: a role holds a -wal that is not the "
            "one at the path; `write_lock_held`: some process owns the WAL write lock; "
            "`lock_wait`: a process waits on a lock another owns) that must happen, else the "
            "verdict is INCONCLUSIVE (the run never reached the state it targets).",
        },
    },
    "$defs": {
        "name": {
            "title": "name",
            "type": "string",
            "pattern": NAME_PATTERN,
        },
        "duration": {
            "title": "duration",
            "description": "A time span: a number of seconds (>= 0) or a string 'Ns', 'Nms' or "
            "'Nm' (e.g. '10s', '500ms', '1.5s', '2m').",
            "anyOf": [
                {"type": "number", "minimum": 0},
                {"type": "string", "pattern": DURATION_PATTERN},
            ],
        },
        "role": {
            "title": "role",
            "description": "A role: `count` OS processes of one kind (SPEC §16.1).",
            "type": "object",
            "required": ["name", "kind"],
            "additionalProperties": False,
            "properties": {
                "name": {
                    "$ref": "#/$defs/name",
                    "description": "Unique among roles; instances are named <name>-<index>.",
                },
                "kind": {
                    "title": "role kind",
                    "enum": list(ROLE_KINDS),
                    "description": "gateway: long-lived, many sessions, appends at a rate; cli: "
                    "short-lived burst (or a cron-like repeated writer); lock_holder: holds BEGIN "
                    "IMMEDIATE periodically; worktree: a sub-agent with child sessions, token "
                    "usage and lineage titles; maintenance: runs a CLI command as a subprocess; "
                    "long_reader: holds a read transaction (checkpoint starvation).",
                },
                "count": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_COUNT,
                    "default": 1,
                    "description": "Number of instances.",
                },
                "start_at": _dur("When the instances start (< duration).", default=0),
                "stop_at": _dur(
                    "When the instances are stopped (> start_at, <= duration); default: they "
                    "run until the end of the chaos phase (cli: until their burst is done)."
                ),
                "workload": {
                    "type": "object",
                    "description": "Workload parameters; the keys depend on `kind`.",
                },
                "failpoints": {
                    "type": "string",
                    "description": "HERMES_STATE_FAILPOINTS for the instances, e.g. "
                    "'write.before_commit=crash@3' (SPEC §4 failpoints).",
                },
            },
            "allOf": [
                {
                    "if": {"properties": {"kind": {"const": kind}}, "required": ["kind"]},
                    "then": {"properties": {"workload": {"$ref": f"#/$defs/{kind}_workload"}}},
                }
                for kind in ROLE_KINDS
            ],
        },
        "gateway_workload": _workload(
            "gateway",
            "Long-lived sessions receiving user/assistant/tool messages.",
            {
                "appends_per_s": {
                    "type": "number",
                    "minimum": 0,
                    "default": 20,
                    "description": "Appends per second per instance; 0 = as fast as possible.",
                },
                "sessions": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 100,
                    "default": 3,
                    "description": "Concurrent sessions per instance.",
                },
                **_message_props(200, 0.2),
                "burst_size": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                    "description": "Appends sent back to back (ignoring the rate) at every "
                    "burst; 0 = no bursts.",
                },
                "burst_every": _dur("Period between bursts (0 = no bursts).", default=0),
                "split_every": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                    "description": "Messages before a compression split ends the session and "
                    "starts a child (parent_session_id); 0 = never.",
                },
                "turn_s": _dur(
                    "How long a split parent stays busy (its turn in progress: a handed-over "
                    "prune skips it).",
                    default=1,
                ),
                "titles": {
                    "type": "boolean",
                    "default": False,
                    "description": "Title each session by hand; a split's child takes its "
                    "compression ancestor's title (lineage, SPEC §7).",
                },
                "token_usage": {
                    "type": "boolean",
                    "default": False,
                    "description": "A token-usage update after every acknowledged assistant "
                    "message.",
                },
                "search_every": _dur("Period between searches (0 = never).", default=0),
                "replay_spool_at_start": {
                    "type": "boolean",
                    "default": False,
                    "description": "Once open, import the spool (`replay-spool`, SPEC §10.1): "
                    "a gateway restart.",
                },
            },
        ),
        "cli_workload": _workload(
            "cli",
            "Open, create one session, append a burst, set a title, search, close.",
            {
                "burst": {
                    "type": "integer",
                    "minimum": 0,
                    "maximum": 10_000,
                    "default": 20,
                    "description": "Messages appended per run (0: an empty session, created "
                    "and ended).",
                },
                **_message_props(120, 0.0),
                "search": {
                    "type": "boolean",
                    "default": False,
                    "description": "Search for a generated word before closing.",
                },
                "repeat": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 10_000,
                    "default": 1,
                    "description": "Runs (open, write, close) per instance: > 1 is a cron-like "
                    "transient writer.",
                },
                "every": _dur("Pause between runs.", default=1),
                "appends_per_s": {
                    "type": "number",
                    "minimum": 0,
                    "default": 0,
                    "description": "Rate of the burst; 0 = as fast as possible.",
                },
                "title": {
                    "type": "boolean",
                    "default": True,
                    "description": "Set a session title after the burst.",
                },
            },
        ),
        "lock_holder_workload": _workload(
            "lock_holder",
            "Holds BEGIN IMMEDIATE for `hold` every `every`, first at `first_at`.",
            {
                "hold": _dur("How long the write lock is held (> 0).", default=0.5),
                "every": _dur("Period between lock acquisitions (> 0).", default=2),
                "first_at": _dur(
                    "Delay before the first acquisition, from the instance's start.", default=1
                ),
            },
        ),
        "worktree_workload": _workload(
            "worktree",
            "A sub-agent: a parent session and child sessions (parent_session_id) one after "
            "another, each with messages, token-usage updates and a lineage title (`title`, "
            "`title #2`, ...).",
            {
                "children": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 1000,
                    "default": 3,
                    "description": "Child sessions per instance.",
                },
                "messages_per_child": {
                    "type": "integer",
                    "minimum": 1,
                    "maximum": 10_000,
                    "default": 10,
                    "description": "Messages appended to each child.",
                },
                "appends_per_s": {
                    "type": "number",
                    "minimum": 0,
                    "default": 10,
                    "description": "Appends per second; 0 = as fast as possible.",
                },
                **_message_props(200, 0.3),
                "usage_every": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 3,
                    "description": "Acknowledged messages between token-usage updates; 0 = none.",
                },
                "title": {
                    "type": "string",
                    "pattern": "\\S",
                    "maxLength": 60,
                    "default": "worktree",
                    "description": "Base title of the lineage (the process name is appended).",
                },
            },
        ),
        "maintenance_workload": _workload(
                "maintenance",
                "Runs `python -m hermes_state --home H <command>` as a subprocess, first at "
                "`first_at`, then every `every` (0 = once), at most `times` times; records exit "
                "code and output.",
                {
                    **_command_props("the op is recorded as info"),
                    "first_at": _dur("Delay before the first run, from the instance's start.",
                                     default=0),
                    "every": _dur("Period between runs (0 = run once).", default=0),
                    "times": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": 10_000,
                        "default": 1,
                        "description": "Runs at most (with `every` > 0).",
                    },
                },
        ),
        "long_reader_workload": _workload(
            "long_reader",
            "Holds a read transaction for `hold` every `every`, first at `first_at`: the WAL "
            "cannot be checkpointed past it (checkpoint starvation); then samples the WAL size.",
            {
                "hold": _dur("How long the read transaction stays open (> 0).", default=3),
                "every": _dur("Period between read transactions (> 0).", default=5),
                "first_at": _dur(
                    "Delay before the first read transaction, from the instance's start.",
                    default=1,
                ),
                "holds": {
                    "type": "integer",
                    "minimum": 0,
                    "default": 0,
                    "description": "Read transactions in total; 0 = until stopped.",
                },
                "sample_every": _dur(
                    "Period of the WAL-size samples after the last hold (> 0).", default=0.5
                ),
            },
        ),
        "after": {
            "title": "after trigger",
            "description": "Fire after an event count (SPEC §16.2), exactly one of: `ok`/`fail`/"
            "`info`: N -- the role's N-th operation `op` with that outcome (all its instances "
            "together); `event`: KIND -- the `count`-th store event of that kind (of `role` if "
            "given, else of any process); `step`: I -- nemesis step I is done. `delay` waits "
            "that long after the trigger.",
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "role": {
                    "type": "string",
                    "description": "The role counted (must name a role; required with "
                    "ok/fail/info).",
                },
                "ok": {"type": "integer", "minimum": 1,
                       "description": "Count of the role's successful `op`."},
                "fail": {"type": "integer", "minimum": 1,
                         "description": "Count of the role's failed `op`."},
                "info": {"type": "integer", "minimum": 1,
                         "description": "Count of the role's `op` with an unknown outcome."},
                "op": {
                    "type": "string",
                    "pattern": "\\S",
                    "description": "The operation counted with ok/fail/info (default: append).",
                },
                "event": {
                    "title": "store event",
                    "enum": list(EVENT_KINDS),
                    "description": "A store event kind (`failpoint`: an armed failpoint fired).",
                },
                "count": {
                    "type": "integer",
                    "minimum": 1,
                    "description": "With `event`: how many such events (default 1).",
                },
                "step": {
                    "type": "integer",
                    "minimum": 0,
                    "description": "Index of another nemesis step: fire once it is done.",
                },
                "delay": _dur("Wait this long after the trigger before firing (default 0)."),
            },
        },
        "step": {
            "title": "nemesis step",
            "description": "One fault, scheduled with exactly one of `at` or `after`; the other "
            "keys depend on `fault`.",
            "type": "object",
            "required": ["fault"],
            "properties": {
                "at": _dur("Time offset from the start of the chaos phase (< duration)."),
                "after": {"$ref": "#/$defs/after"},
                "fault": {
                    "title": "fault",
                    "enum": list(FAULTS),
                    "description": "delete_sidecars: unlink state.db-wal/-shm; kill: SIGKILL; "
                    "terminate: SIGTERM; stop: SIGSTOP; cont: SIGCONT; run: a maintenance "
                    "command (optionally --force), waited for; rename_sidecars: mv a "
                    "sidecar aside; replace_db: mv/cp another store over state.db; zero_db: "
                    "zero every byte; truncate_db: truncate to `bytes`; corrupt_page: garble a "
                    "b-tree page; corrupt_fts: garble FTS5 index data; fill_disk/free_disk: a "
                    "balloon file on the store's tmpfs; foreign_open_close: a role process "
                    "opens, reads and closes state.db with plain file calls; arm_failpoint: arm an "
                    "action at a named failpoint; restart: start a new instance of the role.",
                },
            },
            "allOf": [
                _step_then(
                    "delete_sidecars",
                    {
                        "files": {
                            "type": "array",
                            "minItems": 1,
                            "uniqueItems": True,
                            "default": list(SIDECARS),
                            "items": {"title": "sidecar", "enum": list(SIDECARS)},
                            "description": "Which sidecars to delete.",
                        }
                    },
                    [],
                ),
                *(_step_then(f, _SIGNAL_STEP_PROPS, ["role"]) for f in ROLE_FAULTS
                  if f not in ("kill", "arm_failpoint", "restart")),
                _step_then("kill", {**_SIGNAL_STEP_PROPS, **_KILL_STEP_PROPS}, ["role"]),
                _step_then("arm_failpoint", {**_SIGNAL_STEP_PROPS, **_FAILPOINT_STEP_PROPS},
                           ["role", "failpoint"]),
                _step_then("restart", {**_SIGNAL_STEP_PROPS, **_RESTART_STEP_PROPS}, ["role"]),
                _step_then("run", _command_props("the runner records the exit as null"),
                           ["command"]),
                *_FILE_STEPS,
            ],
        },
    },
}


def schema_json() -> str:
    """Return :data:`SCHEMA` serialised as the published ``chaos/scenario.schema.json`` text.

    Returns:
        JSON text (2-space indent, trailing newline); ``json.loads`` of it equals :data:`SCHEMA`.
    """
    return json.dumps(SCHEMA, indent=2, ensure_ascii=False) + "\n"


_VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

# --------------------------------------------------------------------------------------------
# Problems
# --------------------------------------------------------------------------------------------


class Problem(NamedTuple):
    """One validation problem of a scenario file (SPEC §16.4).

    Attributes:
        file: the scenario file (or the ``source`` given to :func:`load_scenario_text`).
        line: 1-based line of the offending YAML node, ``None`` when unknown (unreadable file).
        field: dotted field path such as ``roles[1].kind``; ``(root)``, ``(yaml)`` or ``(file)``
            for problems of the whole document, its syntax or the file itself.
        message: what is wrong and what is allowed.
    """

    file: str
    line: int | None
    field: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.field}: {self.message}"


class ScenarioError(Exception):
    """A scenario file is invalid (SPEC §16.4; ``python -m chaos`` exits 2).

    Attributes:
        problems: every problem found, sorted by line; ``str(error)`` is one per line.
    """

    def __init__(self, problems: Iterable[Problem]):
        self.problems: list[Problem] = list(problems)
        super().__init__("\n".join(str(p) for p in self.problems))

    def __str__(self) -> str:
        return "\n".join(str(p) for p in self.problems)


# --------------------------------------------------------------------------------------------
# Durations
# --------------------------------------------------------------------------------------------


def _fmt_s(seconds: float) -> str:
    return f"{seconds:g}s"


# --------------------------------------------------------------------------------------------
# Resolved scenario
# --------------------------------------------------------------------------------------------


@dataclass
class RoleSpec:
    """One resolved role of a scenario (SPEC §16.1, §16.4).

    Attributes:
        name: unique role name; instances are ``<name>-<index>``.
        kind: one of :data:`ROLE_KINDS`.
        count: number of instances (1..32).
        start_at: start offset in seconds.
        stop_at: stop offset in seconds, or ``None`` (run to the end of the chaos phase).
        workload: every workload key of the kind, defaults filled (lock_holder durations as
            float seconds).
        failpoints: ``HERMES_STATE_FAILPOINTS`` spec for the instances (``""``: none).
        line: 1-based line of the role in the file.
    """

    name: str
    kind: str
    count: int
    start_at: float
    stop_at: float | None
    workload: dict
    failpoints: str
    line: int | None


@dataclass
class NemesisStep:
    """One resolved nemesis step (SPEC §16.2, §16.4).

    Attributes:
        index: position in the ``nemesis`` list.
        fault: one of :data:`FAULTS`.
        at: time offset in seconds, or ``None`` when the step fires ``after`` an event count.
        after: the trigger or ``None``: ``{"role", "ok"|"fail"|"info": N, "op"}`` (``op``
            defaults to ``"append"``), ``{"event", "count", "role"?}`` (``count`` defaults to 1)
            or ``{"step": I}``; each may carry ``"delay"`` (float seconds).
        params: every other key of the step, defaults filled: ``delete_sidecars`` ->
            ``{"files": [...]}``; signal faults -> ``{"role": str, "index": int | None}``
            (``None``: every instance); ``kill`` may add ``failpoint``/``hit``; ``arm_failpoint``
            -> ``{"role", "index", "failpoint", "action"}``; ``restart`` -> ``{"role", "index",
            "stop"}``.
        line: 1-based line of the step in the file.
    """

    index: int
    fault: str
    at: float | None
    after: dict | None
    params: dict
    line: int | None


@dataclass
class Scenario:
    """A validated, resolved scenario (SPEC §16.4). Build with :func:`load_scenario`.

    Attributes:
        name, description, seed: as in the file (``seed`` defaults to 0).
        duration: length of the chaos phase in seconds.
        store: ``{"fixture": ...}`` with defaults filled.
        roles: the roles in file order.
        nemesis: the steps in file order.
        expect: checker name -> parameters with defaults filled.
        must_observe: faults/events that must happen for a conclusive verdict.
        heal_at: start of the heal phase in seconds (``phases.heal_at``), ``None``: at duration.
        sweep: ``{"failpoint", "role", "max"}`` (sweep mode, :mod:`chaos.sweep`) or ``None``.
        tags: selection labels (``ci``: collected by the default pytest run; ``exclusive``:
            the gate runs it alone).
        source: the file path (or the ``source`` given to :func:`load_scenario_text`).
        raw: the document as parsed from YAML (no defaults).
    """

    name: str
    description: str
    seed: int
    duration: float
    store: dict
    roles: list[RoleSpec]
    nemesis: list[NemesisStep]
    expect: dict[str, dict]
    must_observe: list[str]
    source: str
    raw: dict = field(repr=False)
    heal_at: float | None = None
    sweep: dict | None = None
    tags: list[str] = field(default_factory=list)

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

        Args:
            seed: an int >= 0.

        Returns:
            A new :class:`Scenario`; ``raw["seed"]`` is updated too. ``self`` is unchanged.

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
        """Return the resolved scenario as plain JSON data (for ``scenario.resolved.json``).

        Durations are float seconds and every default is filled. The result is itself a valid
        scenario document: ``load_scenario_text(json.dumps(s.to_dict()))`` gives an equal
        scenario. ``source``, ``raw`` and line numbers are not included.

        Returns:
            A JSON-serialisable dict.
        """
        roles = []
        for r in self.roles:
            d: dict = {"name": r.name, "kind": r.kind, "count": r.count, "start_at": r.start_at}
            if r.stop_at is not None:
                d["stop_at"] = r.stop_at
            d["workload"] = copy.deepcopy(r.workload)
            d["failpoints"] = r.failpoints
            roles.append(d)
        steps = []
        for s in self.nemesis:
            d = {"fault": s.fault}
            if s.at is not None:
                d["at"] = s.at
            if s.after is not None:
                d["after"] = copy.deepcopy(s.after)
            d.update({k: copy.deepcopy(v) for k, v in s.params.items() if v is not None})
            steps.append(d)
        return {
            "name": self.name,
            "description": self.description,
            "seed": self.seed,
            "duration": self.duration,
            "store": copy.deepcopy(self.store),
            "roles": roles,
            "nemesis": steps,
            "expect": copy.deepcopy(self.expect),
            "must_observe": list(self.must_observe),
            **({"phases": {"heal_at": self.heal_at}} if self.heal_at is not None else {}),
            **({"sweep": copy.deepcopy(self.sweep)} if self.sweep is not None else {}),
            "tags": list(self.tags),
        }


# --------------------------------------------------------------------------------------------
# Loading
# --------------------------------------------------------------------------------------------


def load_scenario(path: str | Path) -> Scenario:
    """Read, validate and resolve a scenario file (SPEC §16.4).

    Args:
        path: the YAML file.

    Returns:
        The resolved :class:`Scenario` (``source`` = ``str(path)``).

    Raises:
        ScenarioError: the file cannot be read or is not UTF-8, has a YAML syntax error (with
            its line), or has any structural/semantic problem — all of them are reported.
    """
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise ScenarioError([Problem(source, None, "(file)", f"cannot read: {e.strerror or e}")])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[: e.start].count(b"\n") + 1
        raise ScenarioError(
            [Problem(source, line, "(file)", f"not UTF-8 text: byte {data[e.start]:#04x}")]
        ) from None
    return load_scenario_text(text, source)


def load_scenario_text(text: str, source: str = "<string>") -> Scenario:
    """Validate and resolve a scenario given as YAML text (SPEC §16.4).

    Args:
        text: the YAML document.
        source: the name used in problems and in :attr:`Scenario.source`.

    Returns:
        The resolved :class:`Scenario`.

    Raises:
        ScenarioError: with every problem found (YAML syntax, schema, semantic), sorted by line.
    """
    problems, data, root = _validate(text, source)
    if problems:
        raise ScenarioError(problems)
    return _build(data, root, source)


def validate_text(text: str, source: str = "<string>") -> list[Problem]:
    """Return every problem of a scenario given as YAML text (empty list: valid).

    Same checks as :func:`load_scenario_text` (SPEC §16.4) without building the scenario;
    never raises for bad input.
    """
    return _validate(text, source)[0]


# --------------------------------------------------------------------------------------------
# YAML node helpers (line numbers)
# --------------------------------------------------------------------------------------------

class _Loader(yaml.SafeLoader):
    """SafeLoader without implicit timestamps: a scenario has no dates, and ``2020-13-45``
    must be a string the schema rejects, not a constructor crash."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}

_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_ROOT = "(root)"


def _field(path: Iterable[Any]) -> str:
    out = ""
    for p in path:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out or _ROOT


def _child(node: yaml.Node | None, key: Any) -> tuple[yaml.Node | None, yaml.Node] | None:
    if isinstance(node, yaml.MappingNode) and isinstance(key, str):
        found = None
        for k, v in node.value:  # last one wins, as in the constructed data
            if isinstance(k, yaml.ScalarNode) and k.tag == _STR_TAG and k.value == key:
                found = (k, v)
        return found
    if isinstance(node, yaml.SequenceNode) and isinstance(key, int) and 0 <= key < len(node.value):
        return None, node.value[key]
    return None


def _line_of(root: yaml.Node | None, path: Iterable[Any], key: bool = False) -> int:
    """1-based line of the node at ``path`` (of its key node if ``key``); the deepest existing
    ancestor's line when the path does not exist (e.g. a missing required key)."""
    node = root
    path = list(path)
    for i, p in enumerate(path):
        hit = _child(node, p)
        if hit is None:
            break
        knode, node = hit
        if key and i == len(path) - 1 and knode is not None:
            return knode.start_mark.line + 1
    return node.start_mark.line + 1 if node is not None else 1


def _yaml_error_line(e: Exception, text: str) -> int:
    mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
    if mark is not None:
        return mark.line + 1
    pos = getattr(e, "position", None)  # yaml.reader.ReaderError
    if isinstance(pos, int):
        return text[:pos].count("\n") + 1
    return 1


def _yaml_error_message(e: Exception) -> str:
    if isinstance(e, yaml.MarkedYAMLError):
        context = e.context or ""
        if context and e.context_mark is not None and e.problem_mark is not None:
            cm = e.context_mark
            if (cm.line, cm.column) != (e.problem_mark.line, e.problem_mark.column):
                context += f" (from line {cm.line + 1}, column {cm.column + 1})"
        parts = [p for p in (context, e.problem) if p]
        msg = "; ".join(parts) if parts else " ".join(str(e).split())
        mark = e.problem_mark or e.context_mark
        if mark is not None:
            msg += f" (column {mark.column + 1})"
        return f"YAML syntax error: {msg}"
    return f"YAML error: {' '.join(str(e).split())}"


def _scan_nodes(root: yaml.Node, emit) -> None:
    """Report non-string and duplicate mapping keys (PyYAML silently keeps the last duplicate)."""
    seen_nodes: set[int] = set()
    stack: list[tuple[yaml.Node, list]] = [(root, [])]
    while stack:
        node, path = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if isinstance(node, yaml.MappingNode):
            keys: dict[str, int] = {}
            for k, v in node.value:
                if k.tag == _MERGE_TAG:
                    continue
                line = k.start_mark.line + 1
                if not isinstance(k, yaml.ScalarNode):
                    emit(path, line, "a mapping key must be a plain string, not a list or mapping")
                    continue
                if k.tag != _STR_TAG:
                    kind = k.tag.rsplit(":", 1)[-1]
                    emit(
                        path,
                        line,
                        f"key {k.value!r} is not a string (YAML reads it as {kind}; quote it)",
                    )
                    continue
                if k.value in keys:
                    emit(
                        path + [k.value],
                        line,
                        f"duplicate key {k.value!r} (first on line {keys[k.value]}; "
                        "YAML keys must be unique)",
                    )
                keys.setdefault(k.value, line)
                stack.append((v, path + [k.value]))
        elif isinstance(node, yaml.SequenceNode):
            for i, v in enumerate(node.value):
                stack.append((v, path + [i]))


def _sanitize(data: Any, emit_path) -> None:
    """Drop non-string keys (already reported) and report non-finite numbers, in place."""
    seen: set[int] = set()
    stack: list[tuple[Any, list]] = [(data, [])]
    while stack:
        obj, path = stack.pop()
        if isinstance(obj, float) and not math.isfinite(obj):
            emit_path(path, f"{obj!r} is not a finite number")
            continue
        if not isinstance(obj, (dict, list)) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            for k in [k for k in obj if not isinstance(k, str)]:
                del obj[k]
            stack.extend((v, path + [k]) for k, v in obj.items())
        else:
            stack.extend((v, path + [i]) for i, v in enumerate(obj))


# --------------------------------------------------------------------------------------------
# Schema error -> problem
# --------------------------------------------------------------------------------------------

_TYPE_NAMES = {
    "integer": "an integer",
    "number": "a number",
    "string": "a string",
    "object": "a mapping",
    "array": "a list",
    "boolean": "true or false",
    "null": "null",
}
_UNKNOWN_KEY_NOUN = {"expect": "checker"}
_PLAIN_TITLES = {"chaos scenario", "role", "nemesis step"}


def _hint(value: Any, options: Iterable[Any]) -> str:
    """`` - did you mean 'x'?`` for a near miss among ``options``, else ``""``."""
    if not isinstance(value, str):
        return ""
    close = difflib.get_close_matches(value, [o for o in options if isinstance(o, str)], n=1)
    return f" - did you mean {close[0]!r}?" if close else ""


_REPR = reprlib.Repr()
_REPR.maxstring, _REPR.maxother, _REPR.maxlevel = 60, 60, 2
_REPR.maxlist = _REPR.maxdict = _REPR.maxset = _REPR.maxtuple = 4


def _short(value: Any) -> str:
    """A bounded repr: YAML aliases can build huge shared structures."""
    try:
        r = _REPR.repr(value)
    except Exception:  # noqa: BLE001 - a repr of untrusted YAML data must never break reporting
        r = f"<{type(value).__name__}>"
    return r if len(r) <= 80 else r[:77] + "..."


def _kind_of(value: Any) -> str:
    if value is None:
        return "an empty value (null)"
    if isinstance(value, bool):
        return f"boolean {value!r}"
    if isinstance(value, int):
        return f"integer {_short(value)}"
    if isinstance(value, float):
        return f"number {_short(value)}"
    if isinstance(value, str):
        return f"string {_short(value)}"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {_short(value)}"


def _schema_problems(err: jsonschema.ValidationError) -> list[tuple[list, int | None, str, bool]]:
    """Translate one jsonschema error into ``(path, line_override, message, at_key)`` items."""
    path = list(err.absolute_path)
    v, inst = err.validator, err.instance
    schema = err.schema if isinstance(err.schema, dict) else {}
    title = schema.get("title")
    if v == "additionalProperties" and isinstance(inst, dict):
        allowed = list(schema.get("properties", {}))
        noun = _UNKNOWN_KEY_NOUN.get(title, "key")
        where = f" in {title}" if title and noun == "key" and title not in _PLAIN_TITLES else ""
        allowed_s = ", ".join(allowed) if allowed else "none"
        return [
            (
                path + [k],
                None,
                f"unknown {noun} {k!r}{where} (allowed: {allowed_s}){_hint(k, allowed)}",
                True,
            )
            for k in inst
            if k not in schema.get("properties", {})
        ]
    if v == "required" and isinstance(inst, dict):
        missing = [k for k in err.validator_value if k not in inst]
        return [(path + [k], None, f"missing required key {k!r}", False) for k in missing]
    if v == "anyOf" and title == "duration":
        msg = (
            f"bad duration {_short(inst)}: expected a number of seconds >= 0 or a string like "
            "'10s', '500ms', '1.5s', '2m'"
        )
        return [(path, None, msg, False)]
    if v == "type":
        types = err.validator_value
        types = types if isinstance(types, list) else [types]
        want = " or ".join(_TYPE_NAMES.get(t, t) for t in types)
        msg = f"expected {want}, got {_kind_of(inst)}"
        if inst is None and "object" in types:
            msg += " (write {} for no parameters)"
        return [(path, None, msg, False)]
    if v == "enum":
        allowed = ", ".join(str(x) for x in err.validator_value)
        if title:
            hint = _hint(inst, err.validator_value)
            msg = f"unknown {title} {_short(inst)} (allowed: {allowed}){hint}"
            return [(path, None, msg, False)]
        return [(path, None, f"{_short(inst)} is not one of: {allowed}", False)]
    if v == "pattern":
        if title == "name":
            msg = (
                f"bad name {_short(inst)}: use lowercase letters, digits, '-' and '_', "
                "starting with a letter or digit"
            )
        elif err.validator_value == "\\S":
            msg = "must not be empty or blank"
        else:
            msg = f"{_short(inst)} does not match {err.validator_value}"
        return [(path, None, msg, False)]
    if v == "minimum":
        return [(path, None, f"must be >= {err.validator_value}, got {_short(inst)}", False)]
    if v == "maximum":
        return [(path, None, f"must be <= {err.validator_value}, got {_short(inst)}", False)]
    if v == "minItems":
        n = err.validator_value
        return [(path, None, f"must have at least {n} item{'s' if n != 1 else ''}", False)]
    if v == "minProperties":
        if title == "expect":
            msg = f"name at least one checker (allowed: {', '.join(CHECKERS)})"
        else:
            msg = f"must have at least {err.validator_value} key(s)"
        return [(path, None, msg, False)]
    if v == "uniqueItems" and isinstance(inst, list):
        dups = list(dict.fromkeys(_short(x) for i, x in enumerate(inst) if x in inst[:i]))
        return [(path, None, f"items must be unique (repeated: {', '.join(dups)})", False)]
    return [(path, None, err.message, False)]


# --------------------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------------------


def _validate(text: str, source: str) -> tuple[list[Problem], Any, yaml.Node | None]:
    problems: list[Problem] = []
    root: yaml.Node | None = None

    def emit(path: list, line: int | None, message: str) -> None:
        problems.append(Problem(source, line, _field(path), message))

    def emit_at(path: list, message: str, key: bool = False) -> None:
        emit(path, _line_of(root, path, key), message)

    if not isinstance(text, str):
        msg = f"expected text, got {type(text).__name__}"
        return [Problem(source, None, "(file)", msg)], None, None

    # 1. YAML syntax (composed once; the data is constructed from the same node tree).
    loader = None
    try:
        try:
            loader = _Loader(text)
            root = loader.get_single_node()
        except (yaml.YAMLError, RecursionError) as e:
            line = _yaml_error_line(e, text)
            msg = (
                "YAML nesting too deep"
                if isinstance(e, RecursionError)
                else _yaml_error_message(e)
            )
            return [Problem(source, line, "(yaml)", msg)], None, None
        if root is None:
            msg = (
                "the document is empty: expected a mapping with "
                + ", ".join(SCHEMA["required"])
            )
            return [Problem(source, 1, _ROOT, msg)], None, None
        expanded = _expanded_size(root)
        if expanded > MAX_EXPANDED_NODES:
            msg = (f"the document expands to more than {MAX_EXPANDED_NODES} nodes through YAML "
                   "aliases (an alias bomb?); write the values out")
            return [Problem(source, _line_of(root, []), _ROOT, msg)], None, root
        _scan_nodes(root, emit)
        try:
            data = loader.construct_document(root)
        except Exception as e:  # noqa: BLE001 - PyYAML constructors raise assorted errors
            line = _yaml_error_line(e, text)
            problems.append(Problem(source, line, "(yaml)", _yaml_error_message(e)))
            return _sorted(problems), None, root
    finally:
        if loader is not None:
            loader.dispose()

    # 2. Structure (JSON Schema), then 3. semantics.
    _sanitize(data, emit_at)
    try:
        for err in _VALIDATOR.iter_errors(data):
            for path, line, message, at_key in _schema_problems(err):
                emit(path, line if line is not None else _line_of(root, path, at_key), message)
        _semantic(data, emit_at)
        _semantic_schedule(data, emit_at)
        _check_durations(data, emit_at)
    except RecursionError:
        emit([], _line_of(root, []), "the document is nested too deeply or is recursive (aliases)")
    return _sorted(problems), data, root


MAX_EXPANDED_NODES = 10_000


def _expanded_size(root: yaml.Node) -> int:
    """Nodes the document would have with every alias expanded (memoized: linear in the file)."""
    memo: dict[int, int] = {}
    order: list[yaml.Node] = []
    stack = [root]
    while stack:  # post-order without recursion
        node = stack.pop()
        if id(node) in memo:
            continue
        memo[id(node)] = -1
        order.append(node)
        if isinstance(node, yaml.MappingNode):
            stack.extend(n for kv in node.value for n in kv)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    for node in reversed(order):
        if isinstance(node, yaml.MappingNode):
            kids = [n for kv in node.value for n in kv]
        elif isinstance(node, yaml.SequenceNode):
            kids = node.value
        else:
            kids = []
        memo[id(node)] = min(1 + sum(max(memo.get(id(k), 1), 1) for k in kids),
                             MAX_EXPANDED_NODES + 1)
    return memo[id(root)]


#: Workload keys that are durations (any kind), checked for usable values.
_WORKLOAD_DURATIONS = ("hold", "every", "first_at", "burst_every", "turn_s", "search_every",
                       "sample_every", "timeout")
#: Workload durations that must be > 0, per role kind.
_POSITIVE_DURATIONS = {"lock_holder": ("hold", "every"), "long_reader": ("hold", "every",
                                                                          "sample_every"),
                       "maintenance": ("timeout",)}


def _command_flags(params: dict, path: list, emit_at) -> None:
    """``force`` only on gated commands, ``dry_run`` only where there is a preview (§11)."""
    command = params.get("command")
    if not isinstance(command, str) or command not in MAINTENANCE_COMMANDS:
        return
    if params.get("force") is True and command not in GATED_COMMANDS:
        emit_at(path + ["force"], f"force applies only to the gated commands "
                f"{', '.join(GATED_COMMANDS)}, not {command!r}")
    if params.get("dry_run") is True and command not in DRY_RUN_COMMANDS:
        emit_at(path + ["dry_run"], f"dry_run applies only to {', '.join(DRY_RUN_COMMANDS)}, "
                f"not {command!r}")
    t = params.get("timeout")
    if t is not None and not isinstance(t, bool):
        d = _duration_of(t)
        if d is not None and d <= 0:
            emit_at(path + ["timeout"], f"timeout must be > 0, got {_fmt_s(d)}")


def _check_durations(data: Any, emit_at) -> None:
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
                for key in _WORKLOAD_DURATIONS:
                    spots.append((["roles", i, "workload", key], wl.get(key)))
    steps = data.get("nemesis")
    for i, step in enumerate(steps if isinstance(steps, list) else []):
        if isinstance(step, dict):
            spots.append((["nemesis", i, "at"], step.get("at")))
            spots.append((["nemesis", i, "timeout"], step.get("timeout")))
    for path, value in spots:
        if value is None or isinstance(value, bool):
            continue
        if isinstance(value, str) and not _DURATION_RE.match(value):
            continue  # the schema reported the shape
        if not isinstance(value, (str, int, float)):
            continue
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            emit_at(path, str(exc))
            continue
        if seconds > MAX_DURATION_S:
            emit_at(path, f"{_short(value)} is longer than the 7-day limit of a chaos run")


def _failpoint_problem(name: Any, action: str) -> str | None:
    """The reason ``name=action`` is not a failpoint spec, or ``None``."""
    if not isinstance(name, str) or not isinstance(action, str):
        return None  # the schema reported the type
    from hermes_state import failpoints  # lazy: keeps `import chaos.scenario` light

    try:
        failpoints.parse(f"{name}={action}")
    except ValueError as e:
        return str(e)
    return None


def _semantic_schedule(data: Any, emit_at) -> None:
    """Checks of the schedule (SPEC §16.2, §16.3): ``after`` triggers, failpoint steps, restart,
    ``phases`` and ``sweep``. Role references of steps are checked by :func:`_semantic`."""
    if not isinstance(data, dict):
        return
    duration = _duration_of(data.get("duration"))
    raw_roles = data.get("roles") if isinstance(data.get("roles"), list) else []
    roles = {r["name"]: r for r in raw_roles if isinstance(r, dict)
             and isinstance(r.get("name"), str)}
    heal_at = None
    phases = data.get("phases")
    if isinstance(phases, dict) and "heal_at" in phases:
        heal_at = _duration_of(phases["heal_at"])
        if heal_at is not None and heal_at <= 0:
            emit_at(["phases", "heal_at"], f"heal_at must be > 0, got {_fmt_s(heal_at)}")
            heal_at = None
        elif heal_at is not None and duration is not None and heal_at > duration:
            emit_at(["phases", "heal_at"],
                    f"heal_at {_fmt_s(heal_at)} is past duration {_fmt_s(duration)}")
            heal_at = None
        elif heal_at is not None and heal_at > MAX_DURATION_S:
            heal_at = None
    end = heal_at if heal_at is not None else duration
    steps = data.get("nemesis") if isinstance(data.get("nemesis"), list) else []
    n = len(steps)
    deps: dict[int, int] = {}
    for i, step in enumerate(steps):
        if not isinstance(step, dict):
            continue
        fault = step.get("fault")
        if heal_at is not None and "at" in step:
            at = _duration_of(step["at"])
            if at is not None and at >= heal_at and (duration is None or at < duration):
                emit_at(["nemesis", i, "at"], f"at {_fmt_s(at)} is not before phases.heal_at "
                        f"{_fmt_s(heal_at)} (no fault fires once the heal phase started)")
        after = step.get("after")
        if isinstance(after, dict):
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
                emit_at(where + ["op"], "'op' goes with ok/fail/info, not with " + repr(kind),
                        key=True)
            if "count" in after and kind != "event" and kind is not None:
                emit_at(where + ["count"], "'count' goes with 'event' (ok/fail/info carry their "
                        "own count)", key=True)
            if kind == "step" and "role" in after:
                emit_at(where + ["role"], "'role' does not go with 'step'", key=True)
            target = after.get("step")
            if kind == "step" and _is_int(target) and target >= 0:
                if target >= n:
                    emit_at(where + ["step"], f"step {target} does not exist (nemesis has {n} "
                            f"step{'s' if n != 1 else ''}: 0..{n - 1})")
                elif target == i:
                    emit_at(where + ["step"], f"a step cannot wait for itself (step {i})")
                else:
                    deps[i] = target
            if "delay" in after:
                d = _duration_of(after["delay"])
                if d is not None and d > MAX_DURATION_S:
                    emit_at(where + ["delay"], f"{_short(after['delay'])} is longer than the "
                            "7-day limit of a chaos run")
        if fault == "kill" and "hit" in step and "failpoint" not in step:
            emit_at(["nemesis", i, "hit"], "'hit' goes with 'failpoint' (kill at the hit-th hit "
                    "of that failpoint)", key=True)
        if fault in ("kill", "arm_failpoint") and "failpoint" in step:
            action = step.get("action", "crash") if fault == "arm_failpoint" else "crash"
            why = _failpoint_problem(step["failpoint"], action if isinstance(action, str) else "")
            if why:
                field_ = "action" if fault == "arm_failpoint" and "action" in step and \
                    _failpoint_problem(step["failpoint"], "crash") is None else "failpoint"
                emit_at(["nemesis", i, field_], f"bad failpoint: {why}")
    # Step chains: no cycle; an `at` root plus the delays must fire before the end.
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
        if "at" in root and end is not None:
            t = _duration_of(root["at"])
            k = i
            while t is not None and k in deps:
                after = steps[k].get("after", {})
                t = t + (_duration_of(after.get("delay", 0)) or 0)
                k = deps[k]
            if t is not None and t >= end:
                emit_at(["nemesis", i, "after"],
                        f"fires at {_fmt_s(t)} (step {j} at {_fmt_s(_duration_of(root['at']))} "
                        f"plus the delays), not before "
                        f"{'phases.heal_at' if heal_at else 'duration'} {_fmt_s(end)}")
    sweep = data.get("sweep")
    if isinstance(sweep, dict):
        name = sweep.get("role")
        if isinstance(name, str) and name not in roles:
            known = ", ".join(str(r) for r in roles) or "no roles defined"
            emit_at(["sweep", "role"], f"sweep.role {name!r} is not a role (roles: {known})"
                    f"{_hint(name, [r for r in roles if isinstance(r, str)])}")
        why = _failpoint_problem(sweep.get("failpoint"), "crash@1")
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


def _sorted(problems: list[Problem]) -> list[Problem]:
    """Deduplicate; sort by line, then by field (``roles[2]`` before ``roles[10]``)."""

    def key(p: Problem) -> tuple:
        parts = re.split(r"(\d+)", p.field)
        natural = tuple((0, int(x), "") if x.isdigit() else (1, 0, x) for x in parts)
        return (p.line if p.line is not None else 0, natural)

    return sorted(dict.fromkeys(problems), key=key)


def _duration_of(value: Any) -> float | None:
    try:
        return parse_duration(value)
    except ValueError:
        return None  # the schema reports it


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _semantic(data: Any, emit_at) -> None:
    """Checks the schema cannot express (SPEC §16.4). Tolerates any structure: where the
    structure is wrong the schema already reported it, and the check is skipped."""
    if not isinstance(data, dict):
        return
    duration = _duration_of(data.get("duration"))
    if duration is not None and duration <= 0:
        emit_at(["duration"], f"duration must be > 0, got {_fmt_s(duration)}")
        duration = None

    # Roles: unique names, times, failpoints, lock_holder durations.
    roles: dict[str, dict] = {}
    role_lines: dict[str, list] = {}
    raw_roles = data.get("roles")
    for i, role in enumerate(raw_roles if isinstance(raw_roles, list) else []):
        if not isinstance(role, dict):
            continue
        name = role.get("name")
        if isinstance(name, str):
            if name in roles:
                first = role_lines[name]
                emit_at(
                    ["roles", i, "name"],
                    f"duplicate role name {name!r} (already used by roles[{first[1]}])",
                )
            else:
                roles[name] = role
                role_lines[name] = ["roles", i, "name"]
        start = _duration_of(role.get("start_at", 0))
        if start is not None and duration is not None and start >= duration:
            emit_at(
                ["roles", i, "start_at"],
                f"start_at {_fmt_s(start)} is not before duration {_fmt_s(duration)} "
                "(a role must start before the run ends)",
            )
        if "stop_at" in role:
            stop = _duration_of(role["stop_at"])
            if stop is not None and start is not None and stop <= start:
                emit_at(
                    ["roles", i, "stop_at"],
                    f"stop_at {_fmt_s(stop)} must be after start_at {_fmt_s(start)}",
                )
            elif stop is not None and duration is not None and stop > duration:
                emit_at(
                    ["roles", i, "stop_at"],
                    f"stop_at {_fmt_s(stop)} is past duration {_fmt_s(duration)}",
                )
        fp = role.get("failpoints")
        if isinstance(fp, str):
            from hermes_state import failpoints  # lazy: keeps `import chaos.scenario` light

            try:
                failpoints.parse(fp)
            except ValueError as e:
                emit_at(["roles", i, "failpoints"], f"bad failpoint spec: {e}")
        wl = role.get("workload")
        if role.get("kind") == "maintenance" and isinstance(wl, dict):
            _command_flags({k: v for k, v in wl.items() if k != "timeout"},
                           ["roles", i, "workload"], emit_at)
        kind = role.get("kind")
        if isinstance(wl, dict) and isinstance(kind, str) and kind in _POSITIVE_DURATIONS:
            for key in _POSITIVE_DURATIONS[kind]:
                if key in wl:
                    d = _duration_of(wl[key])
                    if d is not None and d <= 0:
                        emit_at(
                            ["roles", i, "workload", key], f"{key} must be > 0, got {_fmt_s(d)}"
                        )

    def role_ref(path: list, name: Any, what: str) -> dict | None:
        if not isinstance(name, str):
            return None
        if name in roles:
            return roles[name]
        known = ", ".join(roles) if roles else "no roles defined"
        emit_at(path, f"{what} {name!r} is not a role (roles: {known}){_hint(name, roles)}")
        return None

    # Nemesis.
    used_faults: list[str] = []
    raw_steps = data.get("nemesis")
    for i, step in enumerate(raw_steps if isinstance(raw_steps, list) else []):
        if not isinstance(step, dict):
            continue
        fault = step.get("fault")
        if isinstance(fault, str) and fault in FAULTS:
            used_faults.append(fault)
        has_at, has_after = "at" in step, "after" in step
        if has_at and has_after:
            emit_at(
                ["nemesis", i, "after"],
                "give exactly one of 'at' or 'after', not both",
                key=True,
            )
        elif not has_at and not has_after:
            emit_at(
                ["nemesis", i],
                "missing 'at' or 'after': schedule the step at a time offset or after an "
                "event count (exactly one)",
            )
        if has_at:
            at = _duration_of(step["at"])
            if at is not None and duration is not None and at >= duration:
                emit_at(
                    ["nemesis", i, "at"],
                    f"at {_fmt_s(at)} is past duration {_fmt_s(duration)} (a fault must be "
                    "scheduled before the end of the run)",
                )
        after = step.get("after")
        if isinstance(after, dict):
            role_ref(["nemesis", i, "after", "role"], after.get("role"), "after.role")
        if fault == "run":
            _command_flags(step, ["nemesis", i], emit_at)
        if fault in ROLE_FAULTS:
            target = role_ref(["nemesis", i, "role"], step.get("role"), "role")
            index = step.get("index")
            if target is not None and _is_int(index) and index >= 0:
                count = target.get("count", 1)
                if _is_int(count) and 1 <= count <= MAX_COUNT and index >= count:
                    emit_at(
                        ["nemesis", i, "index"],
                        f"index {index} is out of range: role {step['role']!r} has count "
                        f"{count} (index 0..{count - 1})",
                    )

    _semantic_store(data, raw_steps, emit_at)

    # Expect.
    expect = data.get("expect")
    if isinstance(expect, dict):
        swr = expect.get("stale_wal_refusal")
        if isinstance(swr, dict):
            role_ref(["expect", "stale_wal_refusal", "holder"], swr.get("holder"), "holder")
        rj = expect.get("retry_jitter")
        if isinstance(rj, dict):
            lo, hi = rj.get("lo", 0.020), rj.get("hi", 0.150)
            numbers = all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in (lo, hi))
            if numbers and lo > hi:
                emit_at(
                    ["expect", "retry_jitter", "hi" if "hi" in rj else "lo"],
                    f"lo ({lo}) must be <= hi ({hi})",
                )

    # must_observe: a fault must be one this scenario's nemesis injects.
    observe = data.get("must_observe")
    for i, item in enumerate(observe if isinstance(observe, list) else []):
        if isinstance(item, str) and item in FAULTS and item not in used_faults:
            faults = ", ".join(dict.fromkeys(used_faults)) or "none"
            emit_at(
                ["must_observe", i],
                f"fault {item!r} is not in this scenario's nemesis (nemesis faults: {faults}; "
                f"store events: {', '.join(EVENT_KINDS)})",
            )


_STORE_PARAM_OF = {"sessions": ("generated",), "messages": ("generated",), "bytes": ("zeroed",)}


def _semantic_store(data: dict, raw_steps: Any, emit_at) -> None:
    """``store:`` parameters that belong to another fixture, tmpfs sizes, faults that need a
    tmpfs or a detectable replacement (SPEC §16.2, §16.4, §10.1)."""
    store = data.get("store")
    store = store if isinstance(store, dict) else {}
    fixture = store.get("fixture", "empty")
    for key, owners in _STORE_PARAM_OF.items():
        if key in store and isinstance(fixture, str) and fixture not in owners:
            emit_at(["store", key], f"{key!r} applies to fixture {owners[0]!r} only, not "
                    f"{fixture!r}", key=True)
    tmpfs = store.get("tmpfs")
    if isinstance(tmpfs, str) and re.match(r"^[1-9][0-9]*[KMG]$", tmpfs):
        from . import fixtures  # lazy: keeps `import chaos.scenario` light

        size = fixtures.parse_size(tmpfs)
        if not fixtures.TMPFS_MIN <= size <= fixtures.TMPFS_MAX:
            emit_at(["store", "tmpfs"], f"tmpfs {tmpfs} is outside 1M..1G")
    for i, step in enumerate(raw_steps if isinstance(raw_steps, list) else []):
        if not isinstance(step, dict):
            continue
        fault = step.get("fault")
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


# --------------------------------------------------------------------------------------------
# Build (valid data only)
# --------------------------------------------------------------------------------------------


def _fill(obj_schema: dict, given: dict) -> dict:
    """Defaults of ``obj_schema``'s properties overlaid with ``given``; durations -> float."""
    out: dict = {}
    for key, prop in obj_schema.get("properties", {}).items():
        if key in given:
            out[key] = copy.deepcopy(given[key])
        elif isinstance(prop, dict) and "default" in prop:
            out[key] = copy.deepcopy(prop["default"])
        else:
            continue
        if isinstance(prop, dict) and prop.get("$ref") == _DUR:
            out[key] = parse_duration(out[key])
    return out


_FIXTURE_DEFAULTS = {"generated": {"sessions": 20, "messages": 1000}, "zeroed": {"bytes": 16384}}


def _store(schema: dict, given: dict) -> dict:
    """``store:`` with the defaults of its fixture filled (and only those)."""
    out = _fill(schema, given)
    for key, value in _FIXTURE_DEFAULTS.get(out.get("fixture", "empty"), {}).items():
        out.setdefault(key, value)
    return out


def _resolve_after(given: dict) -> dict:
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


def _build(data: dict, root: yaml.Node, source: str) -> Scenario:
    defs = SCHEMA["$defs"]
    props = SCHEMA["properties"]
    roles = []
    for i, r in enumerate(data["roles"]):
        stop = r.get("stop_at")
        roles.append(
            RoleSpec(
                name=r["name"],
                kind=r["kind"],
                count=r.get("count", 1),
                start_at=parse_duration(r.get("start_at", 0)),
                stop_at=parse_duration(stop) if stop is not None else None,
                workload=_fill(defs[f"{r['kind']}_workload"], r.get("workload", {})),
                failpoints=r.get("failpoints", ""),
                line=_line_of(root, ["roles", i]),
            )
        )
    steps = []
    for i, s in enumerate(data.get("nemesis", [])):
        fault = s["fault"]
        then = next(
            b["then"]
            for b in defs["step"]["allOf"]
            if b["if"]["properties"]["fault"]["const"] == fault
        )
        params = {
            k: v
            for k, v in _fill(then, s).items()
            if k not in ("at", "after", "fault")
        }
        if fault in ROLE_FAULTS:
            params.setdefault("index", None)
        after = _resolve_after(s["after"]) if "after" in s else None
        steps.append(
            NemesisStep(
                index=i,
                fault=fault,
                at=parse_duration(s["at"]) if "at" in s else None,
                after=after,
                params=params,
                line=_line_of(root, ["nemesis", i]),
            )
        )
    expect_props = props["expect"]["properties"]
    expect = {name: _fill(expect_props[name], params) for name, params in data["expect"].items()}
    return Scenario(
        name=data["name"],
        description=data["description"],
        seed=data.get("seed", 0),
        duration=parse_duration(data["duration"]),
        store=_store(props["store"], data.get("store", {})),
        roles=roles,
        nemesis=steps,
        expect=expect,
        must_observe=list(data.get("must_observe", [])),
        source=source,
        raw=data,
        heal_at=_fill(props["phases"], data.get("phases", {})).get("heal_at"),
        sweep=_fill(props["sweep"], data["sweep"]) if "sweep" in data else None,
        tags=list(data.get("tags", [])),
    )


def _main(argv: list[str]) -> int:
    """``python -m chaos.scenario [--write-schema | FILE...]``: write the schema or validate."""
    if argv == ["--write-schema"]:
        SCHEMA_PATH.write_text(schema_json(), encoding="utf-8")
        print(f"wrote {SCHEMA_PATH}")
        return 0
    if not argv:
        sys.stdout.write(schema_json())
        return 0
    rc = 0
    for f in argv:
        try:
            load_scenario(f)
            print(f"{f}: ok")
        except ScenarioError as e:
            print(e, file=sys.stderr)
            rc = 2
    return rc


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
