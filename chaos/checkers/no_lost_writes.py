"""``no_lost_writes``: every acknowledged append survives (SPEC §16.3, §10.1, §10.3).

SPEC §16.3: "every ``ok`` append is in the final store (after all roles stopped), or — where the
scenario allows — in a retired-wal capture or the spool; every ``fail`` append is absent; ``info``
appends may be either. Reports counts of each class."

Appends are classified by their completion (a payload id with several ops takes the strongest:
ok > info > fail). Payload ids are read from ``messages.platform_message_id`` of a copy of the
final store, of every capture directory's ``state.db`` + ``state.db-wal`` (copied, SPEC §10.3), and
of the spool lines ``<home>/sessions/*.jsonl`` (SPEC §10.1).

FAIL when:

* an ``ok`` append is nowhere allowed (``lost``);
* a ``fail`` append is in the store or a capture (``phantom``). A ``fail`` with
  ``spooled: true`` must be in the spool; it may be in the store only if the history shows a spool
  replay (``sessions replay-spool`` imports it, SPEC §10.1);
* the store holds a payload id no history record mentions (``unexpected``), or holds one payload id
  more than once (``duplicated``: a write applied twice).

Params: ``allow_in``: subset of ``["capture", "spool"]`` (default ``[]``); ``expect_loss``
(default false): the scenario destroys acknowledged writes on purpose (e.g. the user deletes the
WAL after a crash). Then the verdict is PASS only if a loss is detected, and it lists exactly the
lost payload ids (``figures["lost_payload_ids"]``, complete, in natural order; ``lost_by_process``);
no loss is INCONCLUSIVE (the run never reached the state it targets, e.g. the WAL held no
acknowledged frame when it was deleted: not green either). Phantom, unexpected and duplicated
payloads fail in both modes.
INCONCLUSIVE when the history has no append at all, or none was acknowledged (``ok``).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from typing import Literal

from dataclasses import dataclass

from ..history import brief, pair_ops
from ..params import param

from .base import params_of, FAIL, INCONCLUSIVE, PASS, CheckContext, Verdict
from .store import find_captures, payload_ids_in_capture, payload_ids_in_db, spool_payload_ids

@dataclass(frozen=True, kw_only=True)
class Params:
    """Every ok append is in the final store (or in an allowed place); every failed append is
    absent."""

    allow_in: list[Literal["capture", "spool"]] = param(
        [], "Where an ok append may be instead of the final store.", uniqueItems=True,
        items={"title": "place"})
    expect_loss: bool = param(False, "The scenario destroys acknowledged writes on purpose (e.g. "
                              "the WAL deleted after a crash): PASS only if a loss is detected; "
                              "the verdict lists exactly the lost payload ids.")


NAME = "no_lost_writes"
_DIGITS = re.compile(r"(\d+)")


def natural_key(payload_id: str) -> list:
    """Sort key putting ``gateway-0-9`` before ``gateway-0-10``."""
    return [int(p) if p.isdigit() else p for p in _DIGITS.split(payload_id)]

APPEND_OPS = ("append", "append_message")
ALLOWED_SOURCES = ("capture", "spool")
_RANK = {"ok": 3, "info": 2, "fail": 1}


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    allow = list(p.allow_in)
    expect_loss = p.expect_loss
    bad = [a for a in allow if a not in ALLOWED_SOURCES]
    if bad:
        raise ValueError(f"no_lost_writes: allow_in accepts {list(ALLOWED_SOURCES)}, not {bad}")

    # -- classify appends by payload id
    by_pid: dict[str, object] = {}
    for op in pair_ops(ctx.history):
        if op.op not in APPEND_OPS:
            continue
        pid = op.payload_id
        if pid is None:
            continue
        pid = str(pid)
        cur = by_pid.get(pid)
        if cur is None or _RANK[op.kind] > _RANK[cur.kind]:
            by_pid[pid] = op
    if not by_pid:
        return Verdict(NAME, INCONCLUSIVE, "no append in the history: nothing to check",
                       {"ok": 0, "fail": 0, "info": 0})
    mentioned = {str(r["payload_id"]) for r in ctx.history if r.get("payload_id") is not None}
    replay_seen = any("replay" in json.dumps(r.get(k, "")) for r in ctx.history
                      for k in ("op", "command", "args", "cmd") if r.get(k))

    # -- where the payloads are
    store = payload_ids_in_db(ctx.store_path)
    captures = find_captures(ctx.home, ctx.store_path.parent)
    in_capture: Counter = Counter()
    capture_errors = []
    for cap in captures:
        try:
            in_capture.update(payload_ids_in_capture(cap))
        except Exception as exc:  # noqa: BLE001 - an unreadable capture is a figure, not a crash
            capture_errors.append(f"{cap.path.name}: {type(exc).__name__}: {exc}")
    spool, spool_problems = spool_payload_ids(ctx.home)

    counts = Counter(op.kind for op in by_pid.values())
    fig = {"ok": counts["ok"], "fail": counts["fail"], "info": counts["info"],
           "found_in_store": 0, "found_only_in_capture": 0, "found_only_in_spool": 0,
           "lost": 0, "phantom": 0, "spooled_missing": 0, "replayed_from_spool": 0,
           "info_in_store": 0, "unexpected": 0, "duplicated": 0,
           "store_payload_ids": len(store), "captures": len(captures),
           "capture_payload_ids": len(in_capture), "spool_payload_ids": len(spool),
           "allow_in": allow}
    if capture_errors:
        fig["capture_errors"] = capture_errors[:10]
    if spool_problems:
        fig["spool_problems"] = spool_problems[:10]
    evidence: list = []
    lost, phantom = [], []

    for pid, op in by_pid.items():
        if op.kind == "ok":
            if pid in store:
                fig["found_in_store"] += 1
            elif "capture" in allow and pid in in_capture:
                fig["found_only_in_capture"] += 1
            elif "spool" in allow and pid in spool:
                fig["found_only_in_spool"] += 1
            else:
                lost.append(pid)
                where = [s for s, c in (("capture", in_capture), ("spool", spool)) if pid in c]
                evidence.append({"violation": "lost", "payload_id": pid,
                                 "also_in_not_allowed": where, "record": brief(op.record())})
        elif op.kind == "fail":
            spooled = bool(op.done and op.done.get("spooled"))
            if spooled and pid not in spool:
                fig["spooled_missing"] += 1
                evidence.append({"violation": "spooled_missing", "payload_id": pid,
                                 "record": brief(op.record())})
            if pid in in_capture or (pid in store and not (spooled and replay_seen)):
                phantom.append(pid)
                where = [s for s, c in (("store", store), ("capture", in_capture)) if pid in c]
                evidence.append({"violation": "phantom", "payload_id": pid, "found_in": where,
                                 "record": brief(op.record())})
            elif pid in store:
                fig["replayed_from_spool"] += 1
        else:
            if pid in store:
                fig["info_in_store"] += 1
    fig["lost"] = len(lost)
    fig["phantom"] = len(phantom)
    if lost:
        lost.sort(key=natural_key)
        fig["lost_payload_ids"] = lost if expect_loss else lost[:50]
        by_proc: dict[str, int] = {}
        for pid in lost:
            name = by_pid[pid].process
            by_proc[name] = by_proc.get(name, 0) + 1
        fig["lost_by_process"] = by_proc
    fig["expect_loss"] = expect_loss
    if phantom:
        fig["phantom_payload_ids"] = phantom[:50]

    unexpected = sorted(p for p in store if p not in mentioned)
    dup = sorted(p for p, n in store.items() if n > 1)
    fig["unexpected"] = len(unexpected)
    fig["duplicated"] = len(dup)
    for p in unexpected[:5]:
        evidence.append({"violation": "unexpected", "payload_id": p,
                         "detail": "in the final store but no history record mentions it"})
    for p in dup[:5]:
        evidence.append({"violation": "duplicated", "payload_id": p, "rows": store[p]})

    failed = (lost and not expect_loss) or phantom or unexpected or dup or fig["spooled_missing"]
    summary = (f"{fig['ok']} ok appends: {fig['found_in_store']} in store"
               + (f", {fig['found_only_in_capture']} only in capture" if "capture" in allow else "")
               + (f", {fig['found_only_in_spool']} only in spool" if "spool" in allow else "")
               + f", {fig['lost']} lost; {fig['fail']} fail ({fig['phantom']} phantom)"
               + f", {fig['info']} info")
    extra = []
    if unexpected:
        extra.append(f"{len(unexpected)} unexpected")
    if dup:
        extra.append(f"{len(dup)} duplicated")
    if fig["spooled_missing"]:
        extra.append(f"{fig['spooled_missing']} spooled but not in spool")
    if extra:
        summary += "; " + ", ".join(extra)
    if expect_loss:
        if failed:
            return Verdict(NAME, FAIL, summary, fig, evidence)
        if not lost:
            return Verdict(NAME, INCONCLUSIVE, "expect_loss: no acknowledged write was lost: the "
                           "run never reached the state it targets (no acknowledged write lived "
                           "only where the fault destroyed it); " + summary, fig, evidence)
        return Verdict(NAME, PASS, f"expected loss detected: {len(lost)} acknowledged append(s) "
                       f"lost ({', '.join(lost[:10])}{', ...' if len(lost) > 10 else ''}); "
                       + summary, fig, evidence)
    if not failed and fig["ok"] == 0:
        # Every append failed or has an unknown outcome: nothing acknowledged, nothing proven.
        return Verdict(NAME, INCONCLUSIVE, "no append was acknowledged: " + summary, fig, evidence)
    return Verdict(NAME, FAIL if failed else PASS, summary, fig, evidence)
