"""From a matched lockup class to a scenario: roles, store, fault, checkers, each with the
fields of the bundle it came from (issue 25).

Every scenario the repro writes has the same shape: the roles the bundle shows (same kinds and
counts, capped at :data:`MAX_INSTANCES`), a store at the same schema version, FTS layout and size
class, the fault that makes the class's state, the checker that names the user's symptom FIRST
under ``expect`` (``chaos shrink`` preserves the first failing checker), the checkers that show
nothing is lost after it, and ``terminate`` steps after the fault so the run ends as soon as the
state was shown (``duration`` is only a safety bound). Every trigger is an event count (``after``),
never a time: a loaded machine changes when the fault fires, not whether.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hermes_state.testing import CURRENT_VERSION, VERSIONS

from .cases import CLIENT_ROLES, Case
from .source import Bundle

#: Instances per role at most (the bundle's count is kept up to this; a 2-core CI runs it).
MAX_INSTANCES = 4
#: Messages of a ``generated`` store at most (a bigger store changes timings, not the lockup).
MAX_FIXTURE_MESSAGES = 2000
#: The safety bound of every generated scenario (the terminate steps end it long before).
DURATION = "30s"
#: Workloads standing for each role the bundle tells (``role -> (kind, workload)``).
ROLE_KINDS = {
    "gateway": ("gateway", {"appends_per_s": 20}),
    "desktop": ("gateway", {"appends_per_s": 5}),
    "cli": ("cli", {"burst": 5, "repeat": 10000, "every": "0.2s"}),
    "cron": ("cli", {"burst": 3, "repeat": 10000, "every": "0.3s", "title": False}),
}
NOT_INFERRED = [
    "the user's write rates and message sizes (a bundle counts messages, it does not time "
    "them): the rates here reach the state within seconds",
    "how long the state lasted before the bundle was taken",
]


@dataclass
class Entry:
    """One YAML item (a role, a nemesis step, a checker) and the comment lines above it."""

    value: Any
    why: list[str]


@dataclass
class Draft:
    """The scenario being written, with its comments."""

    case: Case
    name: str
    description: str
    checker: str
    symptom: str
    store: Entry = None  # type: ignore[assignment]
    roles: list[Entry] = field(default_factory=list)
    nemesis: list[Entry] = field(default_factory=list)
    expect: list[tuple[str, dict, list[str]]] = field(default_factory=list)
    must_observe: list[str] = field(default_factory=list)
    not_inferred: list[str] = field(default_factory=lambda: list(NOT_INFERRED))
    not_modeled: list[str] = field(default_factory=list)
    fix: str = ""

    def role_names(self) -> list[str]:
        return [r.value["name"] for r in self.roles]


# ------------------------------------------------------------------------------ the store

def store_entry(b: Bundle, *, tmpfs: str | None = None, cap: int = MAX_FIXTURE_MESSAGES
                ) -> tuple[dict, list[str], list[str]]:
    """``(store mapping, why, not inferred)``: the fixture at the bundle's schema version, FTS
    layout and size class."""
    version = b.get("contents", "schema_version")
    layout = b.get("contents", "fts", "fts_layout")
    messages = b.get("contents", "messages", "count")
    sessions = b.get("contents", "sessions", "count")
    size = b.get("contents", "size_class")
    if isinstance(version, int):
        why = [f"schema version {version}: {b.ref('contents', 'schema_version')}",
               f"FTS layout {layout}: {b.ref('contents', 'fts', 'fts_layout')}",
               f"{messages} messages in {sessions} sessions (size class {size}): "
               f"{b.ref('contents', 'messages', 'count')}"]
    else:
        why = ["the store's contents are not in the bundle: "
               + (b.ref("not_collected") if b.get("not_collected") else b.ref("contents"))]
    note = b.get("contents", "image", "note")
    if isinstance(note, str):
        why.append(f"{note}: {b.ref('contents', 'image', 'note')}")
    missing: list[str] = []
    store: dict
    if not isinstance(version, int):
        store = {"fixture": "empty"}
        missing.append("the store's schema version (contents unreadable: see not_collected): "
                       "a current empty store stands in")
    elif version > CURRENT_VERSION:
        store = {"fixture": "empty"}
        missing.append(f"a store at schema {version} (newer than this toolkit's "
                       f"{CURRENT_VERSION}): a current store stands in")
    elif version < CURRENT_VERSION:
        store = {"fixture": f"schema_v{version}"}
        expected = VERSIONS[version].fts_layout if version in VERSIONS else None
        if layout not in (None, expected):
            missing.append(f"the FTS layout {layout} on a schema-{version} store (the fixture "
                           f"has {expected})")
        missing.append("the size of a historical store (schema_vN fixtures have fixed "
                       "contents)")
    elif layout not in (None, "external-v23"):
        older = max((v for v, s in VERSIONS.items() if s.fts_layout == layout), default=None)
        store = {"fixture": f"schema_v{older}"} if older else {"fixture": "empty"}
        why.append(f"a current store still on the legacy layout {layout}: the schema_v{older} "
                   "fixture is migrated by the first opener and keeps that layout"
                   if older else f"no fixture has the layout {layout}")
    elif not isinstance(messages, int) or messages == 0:
        store = {"fixture": "empty"}
    else:
        n = min(messages, cap)
        store = {"fixture": "generated", "sessions": max(1, min(int(sessions or 1), n, 200)),
                 "messages": n}
        if n < messages:
            why.append(f"generated with {n} of its {messages} messages (a bigger store changes "
                       "timings, not the lockup)")
    if tmpfs:
        store["tmpfs"] = tmpfs
    return store, why, missing


# ------------------------------------------------------------------------------ roles

def _role_entry(name: str, role: str, members: list[int], b: Bundle, draft: Draft,
                rate: float | None = None) -> Entry:
    kind, workload = ROLE_KINDS[role]
    workload = dict(workload)
    if rate is not None and role == "gateway":
        workload["appends_per_s"] = rate
    else:
        rate = None
    count = min(len(members), MAX_INSTANCES)
    why = [f"{len(members)} {role} process(es): " + "; ".join(
        f"PID {b.get('processes', 'processes', i, 'pid')} "
        f"{b.ref('processes', 'processes', i, 'role')} "
        f"(from {b.get('processes', 'processes', i, 'role_from')})" for i in members[:4])]
    if count < len(members):
        why.append(f"{count} instances stand for {len(members)} (at most {MAX_INSTANCES})")
    if role == "desktop":
        why.append("a desktop app writes like a slow gateway")
    if rate is not None:
        why.append(f"appends_per_s {rate:g}: the state needs many writes; the user's rate is "
                   "not in the bundle")
    return Entry({"name": name, "kind": kind, "count": count, "workload": workload}, why)


def client_roles(b: Bundle, draft: Draft, exclude: set[int], *, rate: float | None = None
                 ) -> list[str]:
    """Add a role for each client role the bundle shows (gateway, cli, cron, desktop), leaving
    out the processes in ``exclude``; others are listed as not modeled. Returns the names."""
    groups: dict[str, list[int]] = {}
    for i, p in enumerate(b.processes):
        if i in exclude:
            continue
        role = p.get("role")
        if role in CLIENT_ROLES:
            groups.setdefault(role, []).append(i)
        else:
            draft.not_modeled.append(f"PID {p.get('pid')} ({role}, {p.get('command')}): "
                                     f"{b.ref('processes', 'processes', i)}")
    names = []
    for role in CLIENT_ROLES:
        if role in groups:
            name = _unique(role, draft)
            draft.roles.append(_role_entry(name, role, groups[role], b, draft, rate))
            names.append(name)
    return names


def ensure_writer(draft: Draft, names: list[str], *, rate: float = 20,
                  gateway: bool = False) -> list[str]:
    """When the bundle shows no writer beside the key process (with ``gateway``: no gateway),
    add one gateway first in ``names`` (the user's symptom needs someone who writes)."""
    kinds = {r.value["name"]: r.value["kind"] for r in draft.roles}
    if names and not (gateway and not any(kinds.get(n) == "gateway" for n in names)):
        return sorted(names, key=lambda n: kinds.get(n) != "gateway")
    name = _unique("writer", draft)
    why = (["the bundle shows no other writer at that moment; one gateway stands for whatever "
            "wrote and hung (the user's own commands)"] if not names else
           ["a steady writer makes the state within seconds (the bundle's writers write in "
            "bursts)"])
    draft.roles.append(Entry({"name": name, "kind": "gateway", "count": 1,
                              "workload": {"appends_per_s": rate}}, why))
    return [name] + names


def _unique(base: str, draft: Draft) -> str:
    names = set(draft.role_names())
    if base not in names:
        return base
    k = 2
    while f"{base}-{k}" in names:
        k += 1
    return f"{base}-{k}"


def terminate_all(draft: Draft, after_step: int, delay: str, names: list[str]) -> None:
    """``terminate`` every role in ``names`` once step ``after_step`` is done (+ ``delay``)."""
    for k, name in enumerate(names):
        draft.nemesis.append(Entry(
            {"after": {"step": after_step, "delay": delay}, "fault": "terminate", "role": name},
            ["end the run once the state was shown (duration is only a safety bound)"]
            if k == 0 else []))


def proc_ref(b: Bundle, i: int, *fields: str) -> str:
    p = b.processes[i]
    return f"PID {p.get('pid')} ({p.get('role')}, {p.get('command')}): " + ", ".join(
        b.ref("processes", "processes", i, f) for f in fields)
