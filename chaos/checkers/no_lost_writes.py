"""``no_lost_writes``: every acknowledged append survives (SPEC §16.3, §10.1, §10.3).

SPEC §16.3: "every ``ok`` append is in the final store (after all roles stopped), or — where the
scenario allows — in a retired-wal capture or the spool; every ``fail`` append is absent; ``info``
appends may be either. Reports counts of each class."

Appends are classified by their completion (a payload id with several ops takes the strongest:
ok > info > fail). Payload ids are read from ``messages.platform_message_id`` of a copy of the
final store, of every capture directory's ``state.db`` + ``state.db-wal`` (copied, SPEC §10.3), and
of the spool lines ``<home>/sessions/*.jsonl`` (SPEC §10.1).

One case function per rule (Elle's ``*-cases``), each returning its violating cases:

* :func:`lost_cases`: an ``ok`` append is nowhere allowed;
* :func:`phantom_cases`: a ``fail`` append is in the store or a capture. A ``fail`` with
  ``spooled: true`` may be in the store only if the history shows a spool replay (``sessions
  replay-spool`` imports it, SPEC §10.1);
* :func:`spooled_missing_cases`: a ``fail`` with ``spooled: true`` is not in the spool;
* :func:`unexpected_cases`: the store holds a payload id no history record mentions;
* :func:`duplicated_cases`: the store holds one payload id more than once (a write applied twice);
* :func:`unreplayed_cases`: a ``fail`` with ``spooled: true`` that is in the spool before a spool
  replay began (``sessions replay-spool`` exiting 0, or a role's ``replay_spool`` op that ended
  ``ok``) is not in the final store: "exactly once" is also "at least once" (SPEC §10.1). Not
  judged when the store was replaced, zeroed, truncated or restored after that replay began.

Params (:class:`Params`): ``allow_in`` (subset of ``["capture", "spool", "pre_restore"]``;
``pre_restore``: the copy ``backup restore`` keeps of the store it overwrites,
``state-snapshots/*-pre-restore*/state.db``, SPEC §13: a write acknowledged before a restore
rolled the store back lives there); ``expect_loss``: the
scenario destroys acknowledged writes on purpose (e.g. the user deletes the WAL after a crash).
Then the verdict is PASS only if a loss is detected, and it lists exactly the lost payload ids
(``figures["lost_payload_ids"]``, complete, in natural order; ``lost_by_process``); no loss is
INCONCLUSIVE (the run never reached the state it targets). Phantom, unexpected and duplicated
payloads fail in both modes. INCONCLUSIVE when the history has no append at all, or none was
acknowledged (``ok``).
"""

from __future__ import annotations

import re
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from typing import Literal

from ..history import Op, brief, nemesis_steps, pair_ops
from ..params import param
from .base import (
    CheckContext,
    Verdict,
    params_of,
    verdict_from,
)
from .store import (
    find_captures,
    payload_ids_in_capture,
    payload_ids_in_db,
    pre_restore_payload_ids,
    spool_payload_ids,
)


@dataclass(frozen=True, kw_only=True)
class Params:
    """Every ok append is in the final store (or in an allowed place); every failed append is
    absent."""

    allow_in: list[Literal["capture", "spool", "pre_restore"]] = param(
        [], "Where an ok append may be instead of the final store (pre_restore: the copy "
        "`backup restore` keeps of the store it overwrites).", uniqueItems=True,
        items={"title": "place"})
    expect_loss: bool = param(False, "The scenario destroys acknowledged writes on purpose (e.g. "
                              "the WAL deleted after a crash): PASS only if a loss is detected; "
                              "the verdict lists exactly the lost payload ids.")
    max_loss: int | None = param(None, "With expect_loss: at most this many acknowledged appends "
                                 "may be lost (e.g. the rows one damaged page can hold: recover "
                                 "salvages row by row, SPEC §14); more is a FAIL.", minimum=1)


NAME = "no_lost_writes"
APPEND_OPS = ("append", "append_message")
ALLOWED_SOURCES = ("capture", "spool", "pre_restore")
_RANK = {"ok": 3, "info": 2, "fail": 1}
_DIGITS = re.compile(r"(\d+)")


def natural_key(payload_id: str) -> list:
    """Sort key putting ``gateway-0-9`` before ``gateway-0-10``."""
    return [int(p) if p.isdigit() else p for p in _DIGITS.split(payload_id)]


@dataclass
class Places:
    """Where payload ids were found: ``{payload id: rows}`` per place."""

    store: Counter = field(default_factory=Counter)
    capture: Counter = field(default_factory=Counter)
    spool: Counter = field(default_factory=Counter)
    pre_restore: Counter = field(default_factory=Counter)

    def found_in(self, pid: str, places: tuple[str, ...]) -> list[str]:
        return [p for p in places if pid in getattr(self, p)]


def appends(history: list[dict]) -> dict[str, Op]:
    """``{payload id: the append op with the strongest completion}`` (ok > info > fail)."""
    by_pid: dict[str, Op] = {}
    for op in pair_ops(history):
        if op.op not in APPEND_OPS or op.payload_id is None:
            continue
        pid = str(op.payload_id)
        cur = by_pid.get(pid)
        if cur is None or _RANK[op.kind] > _RANK[cur.kind]:
            by_pid[pid] = op
    return by_pid


def replay_seen(history: list[dict]) -> bool:
    """True when the history shows a spool replay attempt, whatever its outcome: a role op
    ``replay_spool``, or ``sessions replay-spool`` run by a role or a nemesis ``run`` step
    (its ``command`` field). Judged by the records' fields, never by words in their text."""
    for o in pair_ops(history):
        rec = {**(o.invoke or {}), **(o.done or {})}
        if o.op == "replay_spool" or rec.get("command") == "replay-spool":
            return True
    return any(start.get("command") == "replay-spool" or (done or {}).get("command") == "replay-spool"
               for start, done in nemesis_steps(history))


def _spooled(op: Op) -> bool:
    return bool(op.done and op.done.get("spooled"))


# ------------------------------------------------------------------------------ cases
def lost_cases(by_pid: dict[str, Op], places: Places, allow: list[str]) -> list[dict]:
    """``ok`` appends found neither in the store nor in an allowed place."""
    out = []
    for pid, op in by_pid.items():
        if op.kind != "ok" or pid in places.store:
            continue
        if any(pid in getattr(places, a) for a in allow):
            continue
        out.append({"violation": "lost", "payload_id": pid,
                    "also_in_not_allowed": places.found_in(pid, ALLOWED_SOURCES),
                    "record": brief(op.record())})
    return out


def _where_lost(lost: list[dict]) -> str:
    """Where a person finds the lost appends again: `` (N of them in a capture: ...)``."""
    captured = sum(1 for c in lost if "capture" in (c.get("also_in_not_allowed") or []))
    if not captured:
        return ""
    return (f" ({captured} of them in a retired-WAL capture: `hermes-state sessions salvage "
            "CAPTURE_DIR --apply` brings them back)")


def phantom_cases(by_pid: dict[str, Op], places: Places, replayed: bool) -> list[dict]:
    """``fail`` appends found in a capture, or in the store (unless spooled and replayed)."""
    return [{"violation": "phantom", "payload_id": pid,
             "found_in": places.found_in(pid, ("store", "capture")), "record": brief(op.record())}
            for pid, op in by_pid.items() if op.kind == "fail"
            and (pid in places.capture
                 or (pid in places.store and not (_spooled(op) and replayed)))]


def spooled_missing_cases(by_pid: dict[str, Op], places: Places) -> list[dict]:
    """``fail`` appends recorded as spooled that are not in the spool."""
    return [{"violation": "spooled_missing", "payload_id": pid, "record": brief(op.record())}
            for pid, op in by_pid.items()
            if op.kind == "fail" and _spooled(op) and pid not in places.spool]


def unexpected_cases(history: list[dict], places: Places) -> list[dict]:
    """Payload ids in the final store that no history record mentions."""
    mentioned = {str(r["payload_id"]) for r in history if r.get("payload_id") is not None}
    return [{"violation": "unexpected", "payload_id": p,
             "detail": "in the final store but no history record mentions it"}
            for p in sorted(places.store) if p not in mentioned]


def duplicated_cases(places: Places) -> list[dict]:
    """Payload ids the final store holds more than once (a write applied twice)."""
    return [{"violation": "duplicated", "payload_id": p, "rows": n}
            for p, n in sorted(places.store.items()) if n > 1]


#: Nemesis faults and commands after which the final store need not hold what a replay imported
#: (the store replaced, or rows removed on purpose: a prune, a delete, a recover's new store).
STORE_REPLACED = ("replace_db", "zero_db", "truncate_db", "restore", "prune", "delete",
                  "recover")


def _pruned(rec: dict) -> bool:
    """A gateway ``maintenance`` op that pruned sessions (it runs every second, mostly idle)."""
    value = rec.get("value")
    return isinstance(value, dict) and bool(value.get("pruned"))


def replay_starts(history: list[dict]) -> tuple[float | None, float | None]:
    """``(start of the first replay that succeeded, start of the first store replacement)``:
    a replay is ``sessions replay-spool`` that exited 0 (a role ``run`` op or a nemesis ``run``
    step) or a role ``replay_spool`` op that ended ``ok``; a replacement is a nemesis step or
    command of :data:`STORE_REPLACED` or a gateway's ``maintenance`` op that pruned (a handed-over
    prune).
    None when there is none."""
    replays: list[float] = []
    replaced: list[float] = []
    for o in pair_ops(history):
        rec = {**(o.invoke or {}), **(o.done or {})}
        what = "replay" if o.op == "replay_spool" or rec.get("command") == "replay-spool" else (
            "replaced" if (o.op == "run" and rec.get("command") in STORE_REPLACED)
            or (o.op == "maintenance" and _pruned(rec)) else None)
        if what == "replaced":
            replaced.append(o.t_invoke)
        elif what == "replay" and o.kind == "ok" and rec.get("exit_code", 0) == 0:
            replays.append(o.t_invoke)
    for start, done in nemesis_steps(history):
        t = float(start.get("t", 0.0))
        if start.get("fault") in STORE_REPLACED or start.get("command") in STORE_REPLACED:
            replaced.append(t)
        elif (done is not None and done.get("fault") == "run"
              and done.get("command") == "replay-spool" and done.get("exit_code") == 0):
            replays.append(t)
    return (min(replays) if replays else None), (min(replaced) if replaced else None)


def unreplayed_cases(by_pid: dict[str, Op], places: Places, history: list[dict]) -> list[dict]:
    """Spooled ``fail`` appends in the spool before a successful replay began, absent from the
    final store (module docstring)."""
    start, replaced = replay_starts(history)
    if start is None or (replaced is not None and replaced >= start):
        return []
    return [{"violation": "unreplayed", "payload_id": pid, "record": brief(op.record()),
             "why": f"{pid} was spooled before a spool replay that succeeded began, but it is "
                    "not in the final store"}
            for pid, op in by_pid.items()
            if op.kind == "fail" and _spooled(op) and pid in places.spool
            and op.t_done is not None and op.t_done < start and pid not in places.store]


# ------------------------------------------------------------------------------ verdict
def _places(ctx: CheckContext, fig: dict) -> Places:
    captures = find_captures(ctx.home, ctx.store_path.parent)
    places = Places(store=payload_ids_in_db(ctx.store_path))
    errors = []
    for cap in captures:
        try:
            places.capture.update(payload_ids_in_capture(cap))
        except Exception as exc:  # noqa: BLE001 - an unreadable capture is a figure, not a crash
            errors.append(f"{cap.path.name}: {type(exc).__name__}: {exc}")
    places.spool, spool_problems = spool_payload_ids(ctx.home)
    places.pre_restore = pre_restore_payload_ids(ctx.home)
    fig.update({"store_payload_ids": len(places.store), "captures": len(captures),
                "capture_payload_ids": len(places.capture),
                "spool_payload_ids": len(places.spool),
                "pre_restore_payload_ids": len(places.pre_restore)})
    if errors:
        fig["capture_errors"] = errors[:10]
    if spool_problems:
        fig["spool_problems"] = spool_problems[:10]
    return places


def _figures(by_pid: dict[str, Op], places: Places, allow: list[str], replayed: bool) -> dict:
    counts = Counter(op.kind for op in by_pid.values())
    ok = [pid for pid, op in by_pid.items() if op.kind == "ok"]
    fails = [pid for pid, op in by_pid.items() if op.kind == "fail"]
    in_store = [pid for pid in ok if pid in places.store]
    only_capture = [pid for pid in ok if pid not in places.store and "capture" in allow
                    and pid in places.capture]
    only_spool = [pid for pid in ok if pid not in places.store and pid not in only_capture
                  and "spool" in allow and pid in places.spool]
    only_pre_restore = [pid for pid in ok if pid not in places.store
                        and pid not in only_capture and pid not in only_spool
                        and "pre_restore" in allow and pid in places.pre_restore]
    return {"ok": counts["ok"], "fail": counts["fail"], "info": counts["info"],
            "found_in_store": len(in_store), "found_only_in_capture": len(only_capture),
            "found_only_in_spool": len(only_spool),
            "found_only_in_pre_restore": len(only_pre_restore),
            "replayed_from_spool": sum(1 for pid in fails if pid in places.store
                                       and pid not in places.capture
                                       and _spooled(by_pid[pid]) and replayed),
            "info_in_store": sum(1 for pid, op in by_pid.items()
                                 if op.kind == "info" and pid in places.store),
            "allow_in": allow}


def check(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    allow, expect_loss = list(p.allow_in), p.expect_loss
    bad = [a for a in allow if a not in ALLOWED_SOURCES]
    if bad:
        raise ValueError(f"no_lost_writes: allow_in accepts {list(ALLOWED_SOURCES)}, not {bad}")
    by_pid = appends(ctx.history)
    if not by_pid:
        return verdict_from(NAME, {}, {"ok": 0, "fail": 0, "info": 0}, summary="",
                            inconclusive="no append in the history: nothing to check")
    fig: dict = {}
    try:
        places = _places(ctx, fig)
    except sqlite3.DatabaseError as exc:
        # A damaged final store (a fault garbled a page and no step recovered it) cannot say
        # which appends it holds: not a pass, and not a loss this checker can prove.
        return verdict_from(
            NAME, {}, {"ok": sum(1 for op in by_pid.values() if op.kind == "ok"),
                       "store_error": f"{type(exc).__name__}: {exc}"}, summary="",
            inconclusive=f"the final store cannot be read ({type(exc).__name__}: {exc}): its "
            "acknowledged appends cannot be looked up; recover it in the scenario first (a "
            "`run` step of `sessions recover --allow-partial`, as page_corruption_recover does) "
            "or judge it with other checkers")
    replayed = replay_seen(ctx.history)
    fig = {**_figures(by_pid, places, allow, replayed), **fig}
    cases = {"lost": lost_cases(by_pid, places, allow),
             "spooled_missing": spooled_missing_cases(by_pid, places),
             "phantom": phantom_cases(by_pid, places, replayed),
             "unexpected": unexpected_cases(ctx.history, places),
             "duplicated": duplicated_cases(places),
             "unreplayed": unreplayed_cases(by_pid, places, ctx.history)}
    return _verdict(cases, fig, by_pid, allow, expect_loss, p.max_loss)


def _verdict(cases: dict[str, list], fig: dict, by_pid: dict[str, Op], allow: list[str],
             expect_loss: bool, max_loss: int | None = None) -> Verdict:
    lost = sorted((c["payload_id"] for c in cases["lost"]), key=natural_key)
    phantom = [c["payload_id"] for c in cases["phantom"]]
    fig.update({"lost": len(lost), "phantom": len(phantom),
                "spooled_missing": len(cases["spooled_missing"]),
                "unexpected": len(cases["unexpected"]), "duplicated": len(cases["duplicated"]),
                "unreplayed": len(cases["unreplayed"]), "expect_loss": expect_loss})
    if lost:
        fig["lost_payload_ids"] = lost if expect_loss else lost[:50]
        fig["lost_by_process"] = dict(Counter(by_pid[pid].process for pid in lost))
    if phantom:
        fig["phantom_payload_ids"] = phantom[:50]
    evidence = (cases["lost"] + cases["spooled_missing"] + cases["phantom"]
                + cases["unexpected"][:5] + cases["duplicated"][:5] + cases["unreplayed"][:5])
    summary = (f"{fig['ok']} ok appends: {fig['found_in_store']} in store"
               + (f", {fig['found_only_in_capture']} only in capture" if "capture" in allow else "")
               + (f", {fig['found_only_in_spool']} only in spool" if "spool" in allow else "")
               + (f", {fig['found_only_in_pre_restore']} only in a pre-restore snapshot"
                  if "pre_restore" in allow else "")
               + f", {fig['lost']} lost{_where_lost(cases['lost'])}; {fig['fail']} fail "
               f"({fig['phantom']} phantom)"
               + f", {fig['info']} info")
    extra = [f"{n} {what}" for n, what in ((fig["unexpected"], "unexpected"),
                                           (fig["duplicated"], "duplicated"),
                                           (fig["spooled_missing"], "spooled but not in spool"),
                                           (fig["unreplayed"], "spooled but not replayed"))
             if n]
    if extra:
        summary += "; " + ", ".join(extra)
    judged = {k: cases[k] for k in ("phantom", "unexpected", "duplicated", "spooled_missing",
                                     "unreplayed")}
    fail_summary = summary
    if not expect_loss:
        judged["lost"] = cases["lost"]
    elif max_loss is not None and len(lost) > max_loss:
        fail_summary = (f"{len(lost)} acknowledged appends lost, more than max_loss {max_loss} "
                        "(the damage the fault did): " + summary)
        judged["over_max_loss"] = [{"why": fail_summary}]
    inconclusive = None
    if expect_loss and not lost:
        inconclusive = ("expect_loss: no acknowledged write was lost: the run never reached the "
                        "state it targets (no acknowledged write lived only where the fault "
                        "destroyed it)")
    elif not expect_loss and fig["ok"] == 0:  # every append failed or is unknown: nothing proven
        inconclusive = "no append was acknowledged"
    if expect_loss and lost:
        summary = (f"expected loss detected: {len(lost)} acknowledged append(s) lost "
                   f"({', '.join(lost[:10])}{', ...' if len(lost) > 10 else ''}); " + summary)
    return verdict_from(NAME, judged, fig, summary=summary, fail_summary=fail_summary,
                        inconclusive=inconclusive, evidence=evidence, cases_as_evidence=False)
