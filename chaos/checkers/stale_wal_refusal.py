"""``stale_wal_refusal``: a holder of a retired WAL stops writing; others refuse (SPEC §16.3).

SPEC §16.3: "after the sidecars of a live holder are deleted or replaced, the holder has no ``ok``
write, raises ``DeletedWalGenerationError``, leaves a capture with a valid manifest; processes that
open while it lives refuse; once it exits, a new writer works." (SPEC §10.1, §10.3, §10.4.)

Let T be the time of the first nemesis ``delete_sidecars`` ``done`` record and *holders* the
processes of role ``holder`` alive at T. Checked:

(a) no holder has an ``ok`` write op invoked after T (ops invoked before T and completed after are
    concurrent with the fault: allowed, counted), and no holder emits a ``write`` store event
    after its first refusal (the refusal is sticky);
(b) every holder that attempted a write after T got a ``fail`` with ``DeletedWalGenerationError``;
(c) each refused holder left a capture ``state.db.retired-wal-*`` under home whose
    ``manifest.json`` is JSON, version 1, its pid, ``wal.bytes`` > 0 and ``wal.sha256`` matching;
(d) every ``open`` of another process invoked after T that completed while a holder surely still
    held its descriptors (before its ``close`` was invoked, else before its last own record) is a
    ``fail`` with ``DeletedWalGenerationError``. Opens that straddle a holder's release (between
    that point and its exit record) may go either way and are only counted;
(e) after every holder exited, at least one ``open`` or write op is ``ok``; if no process opened
    after that, the checker opens a COPY of the final store with ``SessionDB`` and writes a
    session (a fresh writer works).

INCONCLUSIVE when the fault never fired, no holder was alive at T, or no holder attempted a
write after T (nothing was tested). Params: ``holder`` (role name, required), ``fault`` (default
``delete_sidecars``).
"""

from __future__ import annotations

import uuid
from typing import Literal

from dataclasses import dataclass

from ..history import (
    TOOLKIT_PROCESSES,
    WRITE_OPS,
    brief,
    exit_records,
    fmt_t,
    pair_ops,
    proc_name,
    role_of,
)
from ..params import param

from .base import params_of, FAIL, INCONCLUSIVE, PASS, CheckContext, Verdict
from .store import copied_store, find_captures

@dataclass(frozen=True, kw_only=True)
class Params:
    """After the sidecars of a live holder are deleted, the holder stops writing, leaves a
    capture, new processes refuse, and a new writer works after it exits."""

    holder: str = param(description="The role holding the store when the sidecars go (must name "
                        "a role).")
    fault: Literal["delete_sidecars", "rename_sidecars"] = param(
        "delete_sidecars", "The nemesis fault that retires the WAL (T = its first done record).")


NAME = "stale_wal_refusal"
REFUSAL = "DeletedWalGenerationError"


def _fresh_writer_works(store_path) -> tuple[bool, str]:
    """Open a copy of the store with SessionDB, create a session, append, read back (SPEC §10.4)."""
    from hermes_state import SessionDB

    try:
        with copied_store(store_path) as copy:
            db = SessionDB(db_path=copy)
            try:
                sid = f"chaos-check-{uuid.uuid4().hex[:12]}"
                db.create_session(sid, source="chaos-check")
                db.append_message(sid, "user", "stale_wal_refusal probe")
                if len(db.get_messages(sid)) != 1:
                    return False, "the probe message did not read back"
            finally:
                db.close()
        return True, "ok"
    except Exception as exc:  # noqa: BLE001 - the failure is the verdict
        return False, f"{type(exc).__name__}: {exc}"


def _holding(ops, name: str, T: float) -> bool:
    """Did ``name`` have the store open at T? True when it has no ``open`` op at all (its open is
    not recorded); else its last open/close before T decides (an open that completed ok by T and
    no ``close`` invoked since)."""
    mine = [o for o in ops if o.process == name and o.op in ("open", "close")]
    if not any(o.op == "open" for o in mine):
        return True
    state = False
    for o in mine:
        if o.op == "open" and o.kind == "ok" and o.t_done is not None and o.t_done <= T:
            state = True
        elif o.op == "close" and o.t_invoke <= T:
            state = False
    return state


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    holder_role = p.holder
    if not holder_role:
        raise ValueError("stale_wal_refusal needs params.holder (a role name)")
    fault = p.fault
    write_ops = WRITE_OPS
    hist = ctx.history

    fired = [r for r in hist if r.get("type") == "nemesis" and r.get("fault") == fault
             and r.get("phase") == "done"]
    if not fired:
        errors = [brief(r) for r in hist if r.get("type") == "nemesis" and r.get("fault") == fault]
        return Verdict(NAME, INCONCLUSIVE, f"the fault never fired (no {fault} done record)",
                       {"T": None}, errors)
    fault_rec = fired[0]
    T = float(fault_rec["t"])

    # -- processes: first sighting, exit, own records
    first_seen: dict[str, float] = {}
    last_own: dict[str, float] = {}
    pids: dict[str, set] = {}
    for r in hist:
        name = proc_name(r)
        if not name or name in TOOLKIT_PROCESSES:
            continue
        t = float(r.get("t", 0.0))
        first_seen.setdefault(name, t)
        if r.get("type") in ("invoke", "ok", "fail", "info", "event") and r.get("process") == name:
            if not r.get("synthesized"):
                last_own[name] = max(last_own.get(name, t), t)
            if r.get("pid") is not None:
                pids.setdefault(name, set()).add(r["pid"])
    exits = exit_records(hist)
    ops = pair_ops(hist)
    holders = sorted(n for n in first_seen if role_of(n) == holder_role and first_seen[n] <= T
                     and (n not in exits or float(exits[n]["t"]) > T) and _holding(ops, n, T))
    fig: dict = {"T": round(T, 6), "fault": fault, "files": fault_rec.get("files"),
                 "holder_role": holder_role}
    if not holders:
        return Verdict(NAME, INCONCLUSIVE,
                       f"no process of role {holder_role!r} had the store open when {fault} fired at "
                       f"T={fmt_t(T)}", fig, [brief(fault_rec)])

    holder_set = set(holders)
    evidence: list = []
    violations: list[str] = []
    per_holder: dict[str, dict] = {}

    # (a) + (b)
    concurrent = 0
    refused_total = 0
    attempted_any = False
    for h in holders:
        mine = [o for o in ops if o.process == h and o.op in write_ops]
        before = [o for o in mine if o.t_invoke <= T]
        after = [o for o in mine if o.t_invoke > T]
        concurrent += sum(1 for o in before if o.t_done is None or o.t_done > T)
        oks = [o for o in after if o.kind == "ok"]
        refused = [o for o in after if o.kind == "fail" and o.error == REFUSAL]
        other_fail = [o for o in after if o.kind == "fail" and o.error != REFUSAL]
        refused_total += len(refused)
        if after:
            attempted_any = True
        for o in oks:
            evidence.append({"violation": "ok write after T", "record": brief(o.record())})
        if oks:
            violations.append(f"{h}: {len(oks)} ok write(s) invoked after T")
        if after and not refused:
            violations.append(f"{h}: wrote after T but never got {REFUSAL}")
            evidence.extend({"violation": f"no {REFUSAL}", "record": brief(o.record())}
                            for o in after[:3])
        # sticky refusal: no committed write after the first refusal
        first_refusal = min([o.t_done for o in refused if o.t_done is not None]
                            + [float(r["t"]) for r in hist if r.get("type") == "event"
                               and r.get("event") == "refusal" and r.get("process") == h
                               and float(r.get("t", 0)) > T], default=None)
        late_writes = [] if first_refusal is None else [
            r for r in hist if r.get("type") == "event" and r.get("event") == "write"
            and r.get("process") == h and float(r.get("t", 0)) > first_refusal]
        if late_writes:
            violations.append(f"{h}: {len(late_writes)} write event(s) after its refusal")
            evidence.extend({"violation": "write committed after refusal", "record": brief(r)}
                            for r in late_writes[:3])
        ex = exits.get(h)
        per_holder[h] = {"pids": sorted(pids.get(h, ())), "writes_after_T": len(after),
                         "ok_after_T": len(oks), "refused": len(refused),
                         "other_failures": len(other_fail),
                         "exit_t": None if ex is None else ex.get("t"),
                         "exitcode": None if ex is None else ex.get("exitcode")}

    # (c) captures
    captures = find_captures(ctx.home, ctx.store_path.parent)
    fig["capture_dirs"] = [c.path.name for c in captures]
    for h in holders:
        hp = pids.get(h, set())
        mine = [c for c in captures if c.pid in hp]
        good = [c for c in mine if c.valid]
        per_holder[h]["capture"] = good[0].path.name if good else None
        if per_holder[h]["refused"] and not good:
            violations.append(f"{h}: refused but left no valid capture")
            evidence.append({"violation": "no valid capture", "process": h, "pids": sorted(hp),
                             "captures": [{"dir": c.path.name, "pid": c.pid,
                                           "problems": c.problems} for c in captures][:5]})

    # (d) opens of other processes while a holder lived
    release = {}
    for h in holders:
        closes = [o.t_invoke for o in ops if o.process == h and o.op == "close" and o.t_invoke > T]
        release[h] = min(closes) if closes else last_own.get(h, T)
    held_until = max(release.values())
    exit_ts = [float(exits[h]["t"]) for h in holders if h in exits]
    all_exited = len(exit_ts) == len(holders)
    end_window = max(exit_ts) if all_exited else float("inf")
    opens_refused = opens_ambiguous = opens_unknown = 0
    for o in ops:
        if o.op != "open" or o.process in holder_set or o.t_invoke <= T:
            continue
        if o.invoke and (o.invoke.get("read_only") or o.invoke.get("mode") == "ro"):
            continue
        if o.t_invoke >= end_window:
            continue
        done = o.t_done
        if o.kind == "info":
            opens_unknown += 1
        elif o.kind == "fail" and o.error == REFUSAL:
            opens_refused += 1
        elif done is not None and done < held_until:
            violations.append(f"{o.process}: open {o.kind} ({o.error or 'opened'}) while a "
                              f"holder of the retired WAL was alive")
            evidence.append({"violation": f"open {o.kind} while holder alive",
                             "record": brief(o.record())})
        else:
            opens_ambiguous += 1

    # (e) a new writer works after every holder exited
    if all_exited:
        post = [o for o in ops if o.t_invoke > end_window and o.process not in holder_set
                and (o.op == "open" or o.op in write_ops)]
        post_ok = [o for o in post if o.kind == "ok"]
        fig["ops_after_exit"] = len(post)
        fig["opens_after_exit_ok"] = len(post_ok)
        if post and not post_ok:
            violations.append(f"{len(post)} open/write op(s) after every holder exited, none ok")
            evidence.extend({"violation": "no ok after exit", "record": brief(o.record())}
                            for o in post[:5])
    else:
        post = []
        fig["holder_exit"] = "not recorded for every holder"
    if not post:
        ok, detail = _fresh_writer_works(ctx.store_path)
        fig["fresh_writer_on_copy"] = detail
        if not ok:
            violations.append(f"a fresh writer on a copy of the final store failed: {detail}")
            evidence.append({"violation": "fresh writer failed", "error": detail})

    fig.update({"holders": per_holder,
                "holder_pids": sorted(p for h in holders for p in pids.get(h, ())),
                "writes_refused": refused_total, "concurrent_writes": concurrent,
                "opens_refused": opens_refused, "opens_ambiguous": opens_ambiguous,
                "opens_unknown": opens_unknown, "held_until": round(held_until, 6),
                "violations": violations[:20]})
    caps = ", ".join(str(per_holder[h]["capture"]) for h in holders)
    summary = (f"T={fmt_t(T)}: {len(holders)} holder(s), "
               f"{sum(v['ok_after_T'] for v in per_holder.values())} ok writes after T, "
               f"{refused_total} refused, capture {caps}; {opens_refused} opens refused")
    if "opens_after_exit_ok" in fig and post:
        summary += f"; {fig['opens_after_exit_ok']} ok after exit"
    elif "fresh_writer_on_copy" in fig:
        summary += f"; fresh writer on copy: {fig['fresh_writer_on_copy']}"
    if violations:
        return Verdict(NAME, FAIL, f"{violations[0]} ({len(violations)} violation(s)); " + summary,
                       fig, evidence)
    if not attempted_any:
        return Verdict(NAME, INCONCLUSIVE,
                       f"the holder never attempted a write after T={fmt_t(T)}; " + summary,
                       fig, evidence)
    return Verdict(NAME, PASS, summary, fig, evidence)
