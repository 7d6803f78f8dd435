"""``durability``: after a power cut, every acknowledged write is present or inside the loss
window the store's ``synchronous`` level allows (issue 15; SPEC §4, §16.3).

Reads the history only: the appends (``ok`` with payload ids), the power cuts and WAL fsyncs the
faulty filesystem logged (imported by the runner as ``event`` records ``fs_power_cut`` and
``fs_fsync``, ``t`` on the history's CLOCK_MONOTONIC), the store's ``checkpoint`` events, and a
copy of the final store.

Each acknowledged append is judged against the first power cut after its ack:

* ``FULL``: nothing acknowledged may be lost (each commit fsyncs the WAL before it returns).
* ``NORMAL`` (WAL): a commit may roll back unless a **sync point** came between its ack and the
  cut: a successful fsync of the ``-wal`` (everything written before it is on the disk), or a
  complete checkpoint (``busy == 0``, ``log == checkpointed >= 0``, no error; SQLite syncs the WAL before copying and
  the database after) that started after the ack (the start is the invoke of the operation that
  ran it, so a commit racing the checkpoint is never counted as covered). After a *failed* WAL
  fsync, a later successful WAL fsync no longer covers writes acknowledged before the failure
  (Linux forgets the pages whose writeback failed: "fsyncgate"); a complete checkpoint still does.

The window of NORMAL is bounded in time too (issue 24 item 1): the store syncs the WAL at most
1 s after a commit, so a write acknowledged more than ``window_s`` before the cut may not be
lost whatever the sync points seen (``lost_past_time_bound``); ``max_lost`` caps the lost
writes per run (an idle pause before the cut: 0).

Rules (cases): ``lost_acknowledged`` (an acknowledged write lost outside the window),
``acked_failed_fsync`` (FULL: a write acknowledged although its own commit's WAL fsync, the
first one of its process during the operation, failed), ``lost_after_failed_fsync`` (a write the
store reported durable after a failed fsync on the WAL was lost: the fsyncgate hazard), and
``integrity`` (``PRAGMA integrity_check`` of the final store). Every lost write is listed with
``allowed`` and why; the figures quantify what the level costs per power cut.

Judged against the history after the last ``backup restore`` (issue 27): a restore replaces
the store with an older image, so the final store legitimately lacks every write acknowledged
before it (``no_lost_writes`` finds those in the pre-restore snapshot). Only the appends
acknowledged after the last restore ended, and the power cuts after it, are judged; a restore
is a ``run`` of ``restore`` (a maintenance role's op or a nemesis step, not ``--dry-run``) that
exited 0 or whose outcome is unknown (killed, timed out).

Params: ``synchronous`` (default: the scenario's ``store.synchronous``, else NORMAL).
INCONCLUSIVE when no power cut happened (after the last restore) or nothing was acknowledged
before one.
"""

from __future__ import annotations

import bisect
import sqlite3
from dataclasses import dataclass
from typing import Literal

from ..history import brief, events_of, nemesis_steps, pair_ops, run_start
from ..params import param
from .base import CheckContext, Verdict, params_of, verdict_from
from .no_lost_writes import APPEND_OPS, natural_key
from .store import connect_copy, copied_store, payload_ids_in_db


@dataclass(frozen=True, kw_only=True)
class Params:
    """After a power cut every acknowledged write is present or inside the loss window of the
    store's synchronous level; never an acknowledgement after a failed fsync; integrity_check
    ok."""

    synchronous: Literal["NORMAL", "FULL", "OFF"] | None = param(
        None, "Judge against this level (default: the scenario's store.synchronous, else NORMAL).")
    window_s: float | None = param(
        2.0, "NORMAL: no write acknowledged longer than this before a power cut may be lost (the "
        "store's bound, a WAL sync at most 1 s after a commit, plus 1 s for its thread to run "
        "on a loaded machine); 0: no time bound.", minimum=0)
    max_lost: int | None = param(
        None, "At most this many acknowledged writes lost in the run (e.g. 0 after an idle "
        "pause); null: no cap.", minimum=0)


NAME = "durability"
LEVELS = ("FULL", "NORMAL", "OFF")
MAX_LISTED = 200


def last_restore(history: list, ops=None) -> tuple[float, dict] | None:
    """``(end time, record)`` of the last ``backup restore`` that may have replaced the store
    (module docstring), or None."""
    ends: list[tuple[float, dict]] = []
    for o in ops if ops is not None else pair_ops(history):
        rec = {**(o.invoke or {}), **(o.done or {})}
        if o.op != "run" or rec.get("command") != "restore" or rec.get("dry_run"):
            continue
        if o.kind == "info" or (o.kind == "ok" and rec.get("exit_code", 0) == 0):
            ends.append((o.t_done if o.t_done is not None else o.t_invoke, o.record()))
    for start, done in nemesis_steps(history):
        rec = done or start
        if start.get("fault") != "run" or start.get("command") != "restore" \
                or start.get("dry_run"):
            continue
        code = rec.get("exit_code") if done is not None else None
        if done is None or code is None or code == 0:  # applied, or outcome unknown
            ends.append((float(rec.get("t", start.get("t", 0.0))), rec))
    return max(ends, key=lambda e: e[0]) if ends else None


def _wal_fsyncs(history: list) -> list[dict]:
    return sorted((r for r in events_of(history, "fs_fsync") if str(r.get("path", "")).endswith("-wal")),
                  key=lambda r: float(r["t"]))


def sync_points(history: list, ops) -> tuple[list[float], list[float], list[tuple[float, float]]]:
    """``(fsync_times, failed_fsync_times, checkpoint_starts)``: successful and failed WAL fsyncs
    and complete checkpoints as ``(start, end)``, all on the history clock."""
    fsyncs = _wal_fsyncs(history)
    ok = [float(r["t"]) for r in fsyncs if not r.get("err")]
    failed = [float(r["t"]) for r in fsyncs if r.get("err")]
    by_proc: dict[str, list] = {}
    for op in ops:
        by_proc.setdefault(op.process, []).append(op)
    ckpts = []
    for ev in events_of(history, "checkpoint"):
        log = ev.get("log")
        if ev.get("error") or ev.get("busy") or not isinstance(log, int) or log < 0 \
                or log != ev.get("checkpointed"):
            continue
        t = float(ev["t"])
        enclosing = [o for o in by_proc.get(ev.get("process"), [])
                     if o.t_invoke <= t and (o.t_done is None or o.t_done >= t)]
        if enclosing:
            ckpts.append((max(o.t_invoke for o in enclosing), t))
    return ok, failed, sorted(ckpts)


def _covered(ack: float, cut: float, ok: list[float], failed: list[float],
             ckpts: list[tuple[float, float]], t0: float = 0.0) -> str | None:
    """Why a NORMAL commit acknowledged at ``ack`` had to survive a cut at ``cut``; None if it
    was inside the loss window. Times in the text are seconds since ``t0`` (the run start)."""
    for start, end in ckpts:
        if ack < start and end < cut:
            return f"a complete checkpoint ran from {start - t0:.3f}s to {end - t0:.3f}s"
    i = bisect.bisect_right(ok, ack)
    for t in ok[i:]:
        if t >= cut:
            break
        if not any(ack < f < t for f in failed):
            return f"the WAL was fsynced at {t - t0:.3f}s"
    return None


def acked_failed_fsync_cases(history: list, ops) -> list[dict]:
    """FULL: ``ok`` appends whose process's first WAL fsync during the operation failed."""
    fsyncs = _wal_fsyncs(history)
    out = []
    for op in ops:
        if op.kind != "ok" or op.pid is None or op.t_done is None:
            continue
        mine = [r for r in fsyncs if r.get("pid") == op.pid and op.t_invoke <= float(r["t"]) <= op.t_done]
        if mine and mine[0].get("err"):
            out.append({"why": "a write was acknowledged although its WAL fsync failed",
                        "payload_id": op.payload_id, "process": op.process,
                        "fsync": brief(mine[0]), "ok": brief(op.done)})
    return out


def integrity_cases(store_path) -> tuple[list[dict], str]:
    """``PRAGMA integrity_check`` of a copy of the final store; ``(cases, result)``."""
    try:
        with copied_store(store_path) as copy:
            conn = connect_copy(copy)
            try:
                rows = [r[0] for r in conn.execute("PRAGMA integrity_check")]
            finally:
                conn.close()
    except Exception as exc:  # noqa: BLE001 - an unreadable store is the finding
        return [{"why": f"the store cannot be checked: {type(exc).__name__}: {exc}"}], "error"
    if rows == ["ok"]:
        return [], "ok"
    return [{"why": "integrity_check is not ok", "integrity_check": rows[:10]}], "; ".join(rows[:3])


def check(ctx: CheckContext, params: Params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules and the
    ``params`` keys are in this module's docstring."""
    params = params_of(Params, params)
    level = str(params.synchronous or (ctx.scenario.get("store") or {}).get("synchronous")
                or "NORMAL").upper()
    if level not in LEVELS:
        raise ValueError(f"durability: synchronous must be one of {LEVELS}, not {level!r}")
    ops = pair_ops(ctx.history)
    restore = last_restore(ctx.history, ops)
    since = restore[0] if restore is not None else float("-inf")
    appends = [o for o in ops if o.op in APPEND_OPS and o.payload_id is not None]
    cuts = sorted(t for t in (float(r["t"]) for r in events_of(ctx.history, "fs_power_cut"))
                  if t > since)
    before_restore = 0
    ok_t, failed_t, ckpts = sync_points(ctx.history, ops)
    try:
        present = payload_ids_in_db(ctx.store_path)
    except (OSError, sqlite3.DatabaseError):  # unreadable: every write counts as lost, and the
        present = {}                          # integrity case below says why
    lost, per_cut = [], {c: {"acked": 0, "lost": 0, "lost_allowed": 0} for c in cuts}
    cases: dict[str, list] = {"lost_acknowledged": [], "lost_after_failed_fsync": [],
                              "lost_past_time_bound": [], "lost_beyond_max": [],
                              "acked_failed_fsync": [], "integrity": []}
    window = params.window_s if level == "NORMAL" and params.window_s else None
    for op in appends:
        if op.kind != "ok" or op.t_done is None:
            continue
        if op.t_done <= since:  # the restore rolled the store back past it: not judged here
            before_restore += 1
            continue
        i = bisect.bisect_right(cuts, op.t_done)
        if i == len(cuts):
            continue
        cut = cuts[i]
        per_cut[cut]["acked"] += 1
        if str(op.payload_id) in present:
            continue
        why = "FULL: every acknowledged commit was fsynced" if level == "FULL" else \
            _covered(op.t_done, cut, ok_t, failed_t, ckpts, run_start(ctx.history))
        item = {"payload_id": str(op.payload_id), "process": op.process,
                "ack_t": round(op.t_done, 6), "cut_t": round(cut, 6), "allowed": why is None,
                "reason": why or "acknowledged after the last sync point before the cut"}
        age = cut - op.t_done
        if why is None and window is not None and age > window:
            why = (f"acknowledged {age:.3f} s before the cut, past the time bound of "
                   f"{window:g} s (the store syncs the WAL at most 1 s after a commit)")
            item.update(allowed=False, reason=why, age_s=round(age, 3))
            lost.append(item)
            per_cut[cut]["lost"] += 1
            cases["lost_past_time_bound"].append({"why": "an acknowledged write was lost past "
                                                  "the time bound of the loss window", **item})
            continue
        lost.append(item)
        per_cut[cut]["lost"] += 1
        if why is None:
            per_cut[cut]["lost_allowed"] += 1
            continue
        rule = ("lost_after_failed_fsync" if any(f < op.t_done for f in failed_t)
                else "lost_acknowledged")
        cases[rule].append({"why": "an acknowledged write was lost outside the loss window of "
                                   f"synchronous={level}", **item})
    if params.max_lost is not None and len(lost) > params.max_lost:
        cases["lost_beyond_max"].append({
            "why": f"{len(lost)} acknowledged writes lost, more than max_lost {params.max_lost}",
            "lost": [x["payload_id"] for x in lost[:20]]})
    if level == "FULL":
        cases["acked_failed_fsync"] = acked_failed_fsync_cases(ctx.history, appends)
    cases["integrity"], integrity = integrity_cases(ctx.store_path)
    lost.sort(key=lambda x: natural_key(x["payload_id"]))
    figures = {
        "synchronous": level, "power_cuts": len(cuts),
        "acked_before_cut": sum(c["acked"] for c in per_cut.values()),
        "lost": len(lost), "lost_allowed": sum(1 for x in lost if x["allowed"]),
        "lost_forbidden": sum(1 for x in lost if not x["allowed"]),
        "lost_per_cut": [per_cut[c]["lost"] for c in cuts],
        "window_s": window, "oldest_lost_age_s": round(max(
            (x["cut_t"] - x["ack_t"] for x in lost), default=0.0), 3),
        "store_wal_syncs": sum(1 for r in events_of(ctx.history, "wal_sync")
                               if not r.get("error")),
        "wal_fsyncs": len(ok_t), "failed_wal_fsyncs": len(failed_t),
        "complete_checkpoints": len(ckpts), "integrity_check": integrity,
        "lost_writes": lost[:MAX_LISTED],
        "judged_after_restore_t": None if restore is None else round(since, 6),
        "acked_before_restore": before_restore,
    }
    summary = (f"synchronous={level}: {figures['power_cuts']} power cut(s), "
               f"{figures['acked_before_cut']} acknowledged before a cut, {figures['lost']} lost "
               f"({figures['lost_allowed']} inside the window), integrity {integrity}"
               + (f"; judged after the last backup restore at "
                  f"{since - run_start(ctx.history):.3f}s ({before_restore} acknowledged "
                  "before it not judged)" if restore is not None else ""))
    inconclusive = None
    if not cuts:
        inconclusive = ("no power cut after the last backup restore" if restore is not None
                        else "no power cut in the history")
    elif not figures["acked_before_cut"]:
        inconclusive = "no write was acknowledged before a power cut"
    return verdict_from(NAME, cases, figures, summary=summary, inconclusive=inconclusive)
