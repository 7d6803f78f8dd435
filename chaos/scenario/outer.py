"""The outer structure of a scenario (SPEC §16.4), declared once with :func:`chaos.params.param`
as the roles', faults' and checkers' parameters are: every key of the document, the store, a
role, an ``after`` trigger, a nemesis step's scheduling keys, ``phases``, ``sweep`` and ``fs``.
:mod:`chaos.scenario.schema` generates the JSON Schema from these classes (and composes the
per-kind workloads, faults and checkers from their registries); the reference and the defaults
follow from the same declarations.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from .. import fixtures
from ..history import SAMPLED_STATES
from ..nemesis import FAULTS
from ..nemesis.process import FAILPOINT_DOC
from ..params import Duration, param
from ..roles import ROLES

#: Store event kinds (``hermes_state.events``) a scenario may count or list in ``must_observe``.
EVENT_KINDS = ("retry", "checkpoint", "refusal", "capture", "write_gave_up", "quarantine",
               "foreign_open_close", "failpoint",
               # the faulty filesystem's log, imported into the history by the runner
               "fs_power_cut", "fs_torn_write", "fs_io_error", "fs_slow_io")
#: ``store.synchronous`` levels (OFF only to prove the durability checker fails).
SYNCHRONOUS_LEVELS = ("NORMAL", "FULL", "OFF")
NAME_PATTERN = r"^[a-z0-9][a-z0-9_-]*$"
#: Longest scenario, role or tag name: names become run-directory and history file names
#: (with a timestamp, a seed or an instance number), which must fit in 255 bytes.
MAX_NAME = 100
MAX_COUNT = 32
NAME_REF = "#/$defs/name"
_DEFAULTS = fixtures.FIXTURE_DEFAULTS


@dataclass(frozen=True, kw_only=True)
class StoreDecl:
    """The store the run starts from."""

    fixture: str = param("empty", "`empty`: a fresh current-schema store; `generated`: one with "
                         "`sessions` sessions and `messages` messages (deterministic from the "
                         "seed); `schema_v1`..`schema_v22`: a store at that historical schema "
                         "version with deterministic data (SPEC §16.6); `zeroed`: `bytes` zero "
                         "bytes; `empty_file`: 0 bytes; `not_sqlite`: a text file (SPEC §12 "
                         "quarantine); `duplicate_fts`: a current store whose FTS insert trigger "
                         "was created twice under two names (SPEC §8: the open replaces the "
                         "trigger set); `newer_not_null`: a schema-32 store whose messages have "
                         "a NOT NULL column this code does not write (issue 10).", title="store fixture",
                         enum=list(fixtures.FIXTURES) + list(fixtures.SCHEMA_FIXTURES))
    sessions: int | None = param(None, "`generated` only: number of sessions (default "
                                 f"{_DEFAULTS['generated']['sessions']}).", minimum=1,
                                 maximum=100_000)
    messages: int | None = param(None, "`generated` only: messages, spread round-robin over the "
                                 f"sessions (default {_DEFAULTS['generated']['messages']}).",
                                 minimum=0, maximum=1_000_000)
    bytes: int | None = param(None, "`zeroed` only: size of the all-zero state.db (default "
                              f"{_DEFAULTS['zeroed']['bytes']}).", minimum=1,
                              maximum=64 * 1024 * 1024)
    synchronous: Literal[SYNCHRONOUS_LEVELS] | None = param(  # type: ignore[valid-type]
        None, "`PRAGMA synchronous` of every role's store (SPEC §4), default NORMAL: on power "
        "loss the commits after the last WAL sync may roll back; FULL: none may. OFF is not a "
        "store option: it is forced in the role processes to prove the durability checker fails "
        "(quote it: 'OFF' is a YAML boolean).")
    tmpfs: str | None = param(None, "Put the home on a tmpfs of this size (e.g. '16M', 1M..1G), "
                              "mounted by the runner (root only); needed by fill_disk/free_disk. "
                              "When it cannot be mounted every checker is SKIPPED with the "
                              "reason.", pattern="^[1-9][0-9]*[KMG]$")


@dataclass(frozen=True, kw_only=True)
class FsDecl:
    """Put the home on the faulty FUSE filesystem (chaos/fs, issue 15), mounted before the roles
    start, unmounted at the end (its backing directory stays as fs-backing/, its log as
    fs.jsonl); needed by power_cut, torn_write, io_error and slow_io. Where FUSE cannot be
    mounted every checker is SKIPPED with the reason."""

    kind: Literal["faulty"] = param(description="faulty: LazyFS-style (unsynced data in its own "
                                    "cache).")


@dataclass(frozen=True, kw_only=True)
class RoleDecl:
    """A role: `count` OS processes of one kind (SPEC §16.1)."""

    name: str = param(description="Unique among roles; instances are named <name>-<index>.",
                      **{"$ref": NAME_REF})
    kind: Literal[tuple(ROLES)] = param(  # type: ignore[valid-type]
        description="; ".join(f"{k}: {r.summary}" for k, r in ROLES.items()) + ".",
        title="role kind")
    count: int = param(1, "Number of instances.", minimum=1, maximum=MAX_COUNT)
    start_at: Duration = param(0, "When the instances start (< duration).")
    stop_at: Duration | None = param(None, "When the instances are stopped (> start_at, <= "
                                     "duration); default: they run until the end of the chaos "
                                     "phase (cli: until their burst is done).")
    failpoints: str | None = param(None, "HERMES_STATE_FAILPOINTS for the instances, e.g. "
                                   "'write.before_commit=crash@3' (SPEC §4 failpoints).")
    undumpable: bool = param(False, "The instances mark themselves not dumpable "
                             "(PR_SET_DUMPABLE 0, as after a setuid): a process of the same user "
                             "without CAP_SYS_PTRACE cannot read their /proc/<pid>/fd "
                             "(SPEC §10.2).")
    ptrace_cap: bool = param(True, "false: the instances drop CAP_SYS_PTRACE from their "
                             "bounding set, so the commands they run read /proc like an "
                             "ordinary user of the same uid (root would read every process's "
                             "descriptors).")


@dataclass(frozen=True, kw_only=True)
class AfterDecl:
    """Fire after an event count (SPEC §16.2), exactly one of: `ok`/`fail`/`info`: N -- the
    role's N-th operation `op` with that outcome (all its instances together); `event`: KIND --
    the `count`-th store event of that kind (of `role` if given, else of any process); `step`: I
    -- nemesis step I is done. `delay` waits that long after the trigger."""

    role: str | None = param(None, "The role counted (must name a role; required with "
                             "ok/fail/info).")
    ok: int | None = param(None, "Count of the role's successful `op`.", minimum=1)
    fail: int | None = param(None, "Count of the role's failed `op`.", minimum=1)
    info: int | None = param(None, "Count of the role's `op` with an unknown outcome.", minimum=1)
    op: str | None = param(None, "The operation counted with ok/fail/info (default: append).",
                           pattern="\\S")
    event: Literal[EVENT_KINDS] | None = param(  # type: ignore[valid-type]
        None, "A store event kind (`failpoint`: an armed failpoint fired).", title="store event")
    count: int | None = param(None, "With `event`: how many such events (default 1).", minimum=1)
    step: int | None = param(None, "Index of another nemesis step: fire once it is done.",
                             minimum=0)
    delay: Duration | None = param(None, "Wait this long after the trigger before firing "
                                   "(default 0).")


@dataclass(frozen=True, kw_only=True)
class StepDecl:
    """One fault, scheduled with exactly one of `at` or `after`; the other keys depend on
    `fault`."""

    at: Duration | None = param(None, "Time offset from the start of the chaos phase "
                                "(< duration).")
    fault: Literal[tuple(FAULTS)] = param(  # type: ignore[valid-type]
        description="; ".join(f"{n}: {f.summary}" for n, f in FAULTS.items()) + ".",
        title="fault")


@dataclass(frozen=True, kw_only=True)
class PhasesDecl:
    """Run phases (SPEC §16.3): warm-up until the first fault, chaos, heal (SIGCONT every
    process, free the disk) and recover (checks after every role stopped)."""

    heal_at: Duration | None = param(None, "When the heal phase starts (> 0, <= duration; "
                                     "default: duration). Roles keep running after it until "
                                     "`duration`, so a checker can see them commit again; "
                                     "nemesis steps not fired by then never fire.")


@dataclass(frozen=True, kw_only=True)
class SweepDecl:
    """Sweep mode (SPEC §16.2, SQLite's fault loops): run the scenario again and again with
    `failpoint=crash@N` armed in `role` for N = 1, 2, ... until a run where the role never
    reached hit N (the operation completed), checking the invariants after each run. Exit 1 if
    any N fails."""

    failpoint: str = param(description=FAILPOINT_DOC, pattern="\\S")
    role: str = param(description="The role whose instances get the crash (must name a role).")
    max: int = param(50, "Highest N tried; a sweep still crashing at N = max is INCONCLUSIVE.",
                     minimum=1, maximum=1000)


@dataclass(frozen=True, kw_only=True)
class ScenarioDecl:
    """A chaos scenario for hermes-state (SPEC §16.4): roles (OS processes running a workload
    against the real store), a nemesis schedule (faults) and the checkers (invariants) that
    decide the verdict. Semantic rules the schema cannot express are checked by
    chaos/scenario/rules.py and timing.py: times must lie before `duration`, `stop_at` after
    `start_at`, role names are unique, every role reference names a role, a nemesis `index` is
    below the role's `count`, each nemesis step has exactly one of `at`/`after`, `failpoints`
    parse, a `must_observe` fault is used by the nemesis, and every path a scenario names stays
    inside the run directory."""

    name: str = param(description="Scenario name: lowercase letters, digits, '-' and '_'; used "
                      "in run directory names.", **{"$ref": NAME_REF})
    description: str = param(description="What the scenario reproduces (non-empty).",
                             pattern="\\S")
    seed: int = param(0, "Seed of every random choice (workload and faults); the same seed "
                      "replays the same run. `--seed` overrides it.", minimum=0,
                      maximum=2**63 - 1)
    duration: Duration = param(description="Length of the chaos phase (> 0).")
    roles: list[dict] = param(description="The processes of the run (at least one).",
                             minItems=1, items={"$ref": "#/$defs/role"})
    nemesis: list[dict] = param([], "The fault schedule.", items={"$ref": "#/$defs/step"})
    tags: list[str] = param([], "Labels for selecting scenarios: `ci` = part of the default "
                            "pytest run (the pytest plugin collects only `ci` scenarios unless "
                            "--chaos-all); `exclusive` = `python -m chaos gate` runs it alone, "
                            "never beside another job.", uniqueItems=True,
                            items={"title": "tag", "$ref": NAME_REF})
    must_observe: list[str] = param(
        [], "Faults (used by this scenario's nemesis), store events, or states the sampler must "
        "witness (`retired_wal_held`: a role holds a -wal that is not the one at the path; "
        "`write_lock_held`: some process owns the WAL write lock; `lock_wait`: a process waits "
        "on a lock another owns; `checkpoint_lock_held`: a process holds the checkpoint lock "
        "in either mode) that must happen, else the verdict is INCONCLUSIVE (the run never reached "
        "the state it targets).",
        items={"title": "observable",
               "enum": list(FAULTS) + list(EVENT_KINDS) + list(SAMPLED_STATES)})
