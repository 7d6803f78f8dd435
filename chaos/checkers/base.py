"""What every checker shares: verdicts, the check context, and history helpers (SPEC §16.3).

A checker is a pure function ``check(ctx: CheckContext, params: dict) -> Verdict`` of the run's
history and its final store: it starts no process and never modifies the store (it works on
copies, see :mod:`chaos.checkers.store`). SPEC §16.3: each checker returns pass/fail with figures
and the evidence (history excerpts); INCONCLUSIVE when the run never reached the state the checker
targets (a chaos run that tested nothing must not look green), SKIPPED when a stated requirement is
unmet.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterable

PASS, FAIL, INCONCLUSIVE, SKIPPED = "PASS", "FAIL", "INCONCLUSIVE", "SKIPPED"
STATUSES = (PASS, FAIL, INCONCLUSIVE, SKIPPED)

#: A verdict carries at most this many evidence items (history records or small dicts).
MAX_EVIDENCE = 20

#: Operations that write to the store (SPEC §16.1 role workloads). ``open`` and ``close`` are
#: not writes for these checkers; ``hold_lock`` is an adversary's bare transaction.
WRITE_OPS = frozenset({
    "append", "append_message", "create_session", "end_session", "reopen_session",
    "set_title", "set_session_title", "set_auto_title", "update_token_counts", "set_meta",
    "delete_session", "clear_messages", "prune_sessions", "replay_spool",
})

#: Process names that are not role instances.
TOOLKIT_PROCESSES = frozenset({"runner", "nemesis", "sampler"})


@dataclass
class Verdict:
    """One checker's result.

    Attributes:
        checker: the checker name (key of ``CHECKERS``).
        status: PASS, FAIL, INCONCLUSIVE or SKIPPED.
        summary: one line with the key figure.
        figures: numbers and short facts (JSON-serialisable).
        evidence: at most :data:`MAX_EVIDENCE` history records (or small dicts) proving it.
    """

    checker: str
    status: str
    summary: str
    figures: dict = field(default_factory=dict)
    evidence: list = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown verdict status {self.status!r}; use one of {STATUSES}")
        if len(self.evidence) > MAX_EVIDENCE:
            self.figures.setdefault("evidence_total", len(self.evidence))
            self.evidence = list(self.evidence[:MAX_EVIDENCE])

    def to_dict(self) -> dict:
        """A JSON-safe dict (non-JSON values become strings)."""
        return json.loads(json.dumps(asdict(self), default=str))


@dataclass
class CheckContext:
    """Everything a checker may read.

    Attributes:
        history: the merged history sorted by ``t``, already completed
            (:func:`chaos.history.complete`).
        store_path: the final ``state.db`` (maybe with ``state.db-wal`` beside it). Never modified:
            checkers copy it first.
        home: the run's HERMES_HOME (retired-WAL captures and ``sessions/<sid>.jsonl`` spools).
        run_dir: the run directory.
        scenario: the resolved scenario dict (``roles``, ``nemesis``, ``expect``).
    """

    history: list
    store_path: Path
    home: Path
    run_dir: Path
    scenario: dict


# ------------------------------------------------------------------------------ history helpers
_INDEX_SUFFIX = re.compile(r"-\d+$")


def role_of(process: str | None) -> str:
    """``gateway-0`` -> ``gateway`` (the role name is the process name without ``-<i>``)."""
    return _INDEX_SUFFIX.sub("", process or "")


def proc_name(rec: dict) -> str | None:
    """The role process a record is about.

    Lifecycle (``process``) records may be written by the runner with ``role``/``index`` fields;
    every other record carries the emitting process in ``process``.
    """
    name = rec.get("process")
    if rec.get("type") == "process" and (name in TOOLKIT_PROCESSES or not name):
        if rec.get("role") is not None and rec.get("index") is not None:
            return f"{rec['role']}-{rec['index']}"
    return name


def exit_records(history: Iterable[dict]) -> dict[str, dict]:
    """``{process: its (last) exit record}``."""
    out: dict[str, dict] = {}
    for r in history:
        if r.get("type") == "process" and r.get("phase") == "exit":
            name = proc_name(r)
            if name:
                out[name] = r
    return out


def spawn_records(history: Iterable[dict]) -> dict[str, dict]:
    """``{process: its (first) spawn record}``."""
    out: dict[str, dict] = {}
    for r in history:
        if r.get("type") == "process" and r.get("phase") == "spawn":
            name = proc_name(r)
            if name and name not in out:
                out[name] = r
    return out


def role_kinds(scenario: dict | None) -> dict[str, str]:
    """``{role name: kind}`` from the scenario's ``roles`` list."""
    out = {}
    for role in (scenario or {}).get("roles") or []:
        if isinstance(role, dict) and role.get("name"):
            out[role["name"]] = role.get("kind", role["name"])
    return out


@dataclass
class Op:
    """One operation: its ``invoke`` and its completion (``ok``/``fail``/``info``)."""

    op_id: str
    op: str
    process: str
    invoke: dict | None = None
    done: dict | None = None

    @property
    def kind(self) -> str:
        """``ok``, ``fail`` or ``info`` (no completion at all counts as ``info``)."""
        return self.done["type"] if self.done is not None else "info"

    @property
    def t_invoke(self) -> float:
        if self.invoke is not None:
            return float(self.invoke.get("t", 0.0))
        d = self.done or {}
        return float(d.get("t", 0.0)) - float(d.get("latency_s") or 0.0)

    @property
    def t_done(self) -> float | None:
        """Completion time; None when the outcome is unknown and no record says when."""
        return None if self.done is None else float(self.done.get("t", 0.0))

    @property
    def payload_id(self):
        for rec in (self.done, self.invoke):
            if rec is not None and rec.get("payload_id") is not None:
                return rec["payload_id"]
        return None

    @property
    def error(self) -> str | None:
        return None if self.done is None else self.done.get("error")

    @property
    def pid(self):
        for rec in (self.invoke, self.done):
            if rec is not None and rec.get("pid") is not None:
                return rec["pid"]
        return None

    def record(self) -> dict:
        """The most telling record for evidence: the completion, else the invoke."""
        return self.done if self.done is not None else (self.invoke or {})


def pair_ops(history: Iterable[dict]) -> list[Op]:
    """Pair every ``invoke`` with its completion by ``op_id`` (first completion wins).

    A completion whose invoke is missing still yields an :class:`Op`. Ops are returned in invoke
    order.
    """
    ops: dict[str, Op] = {}
    order: list[str] = []
    for r in history:
        typ = r.get("type")
        if typ not in ("invoke", "ok", "fail", "info"):
            continue
        op_id = r.get("op_id")
        if op_id is None:
            continue
        op = ops.get(op_id)
        if op is None:
            op = ops[op_id] = Op(op_id=op_id, op=r.get("op", "?"), process=r.get("process", "?"))
            order.append(op_id)
        if typ == "invoke":
            if op.invoke is None:
                op.invoke = r
        elif op.done is None:
            op.done = r
    out = [ops[i] for i in order]
    out.sort(key=lambda o: o.t_invoke)
    return out


def events_of(history: Iterable[dict], kind: str) -> list[dict]:
    """Store events of one kind (``retry``, ``write``, ``checkpoint``, ...)."""
    return [r for r in history if r.get("type") == "event" and r.get("event") == kind]


def brief(rec: dict, keys: Iterable[str] | None = None) -> dict:
    """A record without bulky fields (long messages cut), for evidence."""
    out = {}
    for k, v in rec.items():
        if keys is not None and k not in keys:
            continue
        if isinstance(v, str) and len(v) > 300:
            v = v[:297] + "..."
        out[k] = v
    return out


def fmt_t(t: float | None) -> str:
    """A monotonic time ``t`` as text with 3 decimals (seconds)."""
    return "?" if t is None else f"{t:.3f}"
