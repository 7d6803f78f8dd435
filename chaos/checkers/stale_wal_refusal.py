"""``stale_wal_refusal``: a holder of a retired WAL stops writing; others refuse (SPEC §16.3).

SPEC §16.3: "after the sidecars of a live holder are deleted or replaced, the holder has no ``ok``
write, raises ``DeletedWalGenerationError``, leaves a capture with a valid manifest; processes that
open while it lives refuse; once it exits, a new writer works." (SPEC §10.1, §10.3, §10.4.)

Let T be the time of the first nemesis ``fault`` (default ``delete_sidecars``) ``done`` record and
*holders* the processes of role ``holder`` that had the store open at T. One case function per
rule (Elle's ``*-cases``):

* :func:`ok_after_fault_cases`: a holder has an ``ok`` write op invoked after T (ops invoked
  before T and completed after are concurrent with the fault: allowed, counted);
* :func:`unrefused_cases`: a holder wrote after T but never got ``DeletedWalGenerationError``;
* :func:`write_after_refusal_cases`: a holder emitted a ``write`` store event after its first
  refusal (the refusal is sticky);
* :func:`capture_cases`: a refused holder left no capture ``state.db.retired-wal-*`` whose
  ``manifest.json`` is JSON, version 1, its pid, ``wal.bytes`` > 0 and ``wal.sha256`` matching;
* :func:`open_cases`: an ``open`` invoked after T (by another process, or a holder's own reopen:
  it holds the retired generation itself) completed other than with
  ``DeletedWalGenerationError`` while a holder surely still held its descriptors (before its
  ``close`` was invoked, else before its last own record). Opens that straddle a holder's
  release may go either way and are only counted;
* :func:`after_exit_cases`: after every holder exited, no ``open`` or write op is ``ok``; if no
  process opened after that, the checker opens a COPY of the final store with ``SessionDB`` and
  writes a session (a fresh writer works).

INCONCLUSIVE when the fault never fired, no holder was alive at T, or no holder attempted a
write after T (nothing was tested). Params in :class:`Params`.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Literal

from ..history import (
    TOOLKIT_PROCESSES,
    Op,
    brief,
    events_of,
    exit_records,
    fmt_t,
    of_type,
    pair_ops,
    proc_name,
    role_of,
    run_start,
)
from ..params import param
from .base import CheckContext, Verdict, params_of, verdict_from
from .store import Capture, copied_store, find_captures


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


@dataclass
class Run:
    """What the rules read: the fault time, the holders and their facts, the paired ops."""

    T: float
    holders: list[str]
    ops: list[Op]
    history: list[dict]
    exits: dict[str, dict]
    pids: dict[str, set]
    last_own: dict[str, float]

    def writes_after(self, holder: str) -> list[Op]:
        """The holder's write ops invoked after T."""
        return [o for o in self.ops if o.process == holder and o.is_write() and o.t_invoke > self.T]

    def refused(self, holder: str) -> list[Op]:
        return [o for o in self.writes_after(holder) if o.kind == "fail" and o.error == REFUSAL]

    def release(self, holder: str) -> float:
        """When the holder surely still held its descriptors: its first ``close`` after T, else
        its last own record."""
        closes = [o.t_invoke for o in self.ops
                  if o.process == holder and o.op == "close" and o.t_invoke > self.T]
        return min(closes) if closes else self.last_own.get(holder, self.T)

    @property
    def held_until(self) -> float:
        return max(self.release(h) for h in self.holders)

    @property
    def all_exited(self) -> bool:
        return all(h in self.exits for h in self.holders)

    @property
    def end_window(self) -> float:
        """When the last holder exited (infinity while one has no exit record)."""
        if not self.all_exited:
            return float("inf")
        return max(float(self.exits[h]["t"]) for h in self.holders)


def holding_at(ops: list[Op], name: str, T: float) -> bool:
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


def observe(history: list[dict], holder_role: str, T: float) -> Run:
    """The :class:`Run` of the rules: processes of ``holder_role`` with the store open at T."""
    first_seen: dict[str, float] = {}
    last_own: dict[str, float] = {}
    pids: dict[str, set] = {}
    for r in history:
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
    exits = exit_records(history)
    ops = pair_ops(history)
    holders = sorted(n for n in first_seen if role_of(n) == holder_role and first_seen[n] <= T
                     and (n not in exits or float(exits[n]["t"]) > T) and holding_at(ops, n, T))
    return Run(T, holders, ops, history, exits, pids, last_own)


# ------------------------------------------------------------------------------ cases
def ok_after_fault_cases(run: Run) -> list[dict]:
    """(a) ``ok`` writes of a holder invoked after T."""
    return [{"violation": "ok write after T", "why": f"{h}: ok write(s) invoked after T",
             "record": brief(o.record())}
            for h in run.holders for o in run.writes_after(h) if o.kind == "ok"]


def unrefused_cases(run: Run) -> list[dict]:
    """(b) holders that wrote after T without ever getting ``DeletedWalGenerationError``."""
    out = []
    for h in run.holders:
        after = run.writes_after(h)
        if after and not run.refused(h):
            out += [{"violation": f"no {REFUSAL}",
                     "why": f"{h}: wrote after T but never got {REFUSAL}",
                     "record": brief(o.record())} for o in after[:3]]
    return out


def write_after_refusal_cases(run: Run) -> list[dict]:
    """(a) ``write`` store events of a holder after its first refusal (sticky refusal)."""
    out = []
    for h in run.holders:
        first = min([o.t_done for o in run.refused(h) if o.t_done is not None]
                    + [float(r["t"]) for r in events_of(run.history, "refusal")
                       if r.get("process") == h and float(r.get("t", 0)) > run.T], default=None)
        if first is None:
            continue
        late = [r for r in events_of(run.history, "write")
                if r.get("process") == h and float(r.get("t", 0)) > first]
        out += [{"violation": "write committed after refusal",
                 "why": f"{h}: {len(late)} write event(s) after its refusal",
                 "record": brief(r)} for r in late[:3]]
    return out


def capture_cases(run: Run, captures: list[Capture]) -> list[dict]:
    """(c) refused holders without a valid capture of their own."""
    out = []
    for h in run.holders:
        hp = run.pids.get(h, set())
        if run.refused(h) and not [c for c in captures if c.pid in hp and c.valid]:
            out.append({"violation": "no valid capture", "why": f"{h}: refused but left no "
                        "valid capture", "process": h, "pids": sorted(hp),
                        "captures": [{"dir": c.path.name, "pid": c.pid, "problems": c.problems}
                                     for c in captures][:5]})
    return out


def _judged_opens(run: Run) -> list[Op]:
    """Writable opens invoked after T and before the last holder exited: other processes' and
    the holders' own reopens (a holder's first open precedes T)."""
    return [o for o in run.ops if o.op == "open"
            and run.T < o.t_invoke < run.end_window
            and not (o.invoke and (o.invoke.get("read_only") or o.invoke.get("mode") == "ro"))]


def open_cases(run: Run) -> list[dict]:
    """(d) opens that completed other than refused while a holder surely held the WAL."""
    held = run.held_until
    return [{"violation": f"open {o.kind} while holder alive",
             "why": f"{o.process}: open {o.kind} ({o.error or 'opened'}) while a holder of the "
                    "retired WAL was alive", "record": brief(o.record())}
            for o in _judged_opens(run)
            if o.kind != "info" and not (o.kind == "fail" and o.error == REFUSAL)
            and o.t_done is not None and o.t_done < held]


def after_exit_ops(run: Run) -> list[Op]:
    """Open or write ops of other processes invoked after every holder exited."""
    if not run.all_exited:
        return []
    return [o for o in run.ops if o.t_invoke > run.end_window and o.process not in run.holders
            and (o.op == "open" or o.is_write())]


def after_exit_cases(run: Run) -> list[dict]:
    """(e) after every holder exited, ops that tried to open or write but none was ``ok``."""
    post = after_exit_ops(run)
    if not post or any(o.kind == "ok" for o in post):
        return []
    return [{"violation": "no ok after exit", "why": f"{len(post)} open/write op(s) after every "
             "holder exited, none ok", "record": brief(o.record())} for o in post[:5]]


def fresh_writer_works(store_path) -> tuple[bool, str]:
    """Open a copy of the store with SessionDB, create a session, append, read back (SPEC
    §10.4). Returns ``(ok, "ok" or the error)``."""
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


# ------------------------------------------------------------------------------ verdict
def check(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    if not p.holder:
        raise ValueError("stale_wal_refusal needs params.holder (a role name)")
    fired = of_type(ctx.history, "nemesis", fault=p.fault, phase="done")
    if not fired:
        errors = [brief(r) for r in of_type(ctx.history, "nemesis", fault=p.fault)]
        return verdict_from(NAME, {}, {"T": None}, summary="", evidence=errors,
                            inconclusive=f"the fault never fired (no {p.fault} done record)")
    T = float(fired[0]["t"])
    run = observe(ctx.history, p.holder, T)
    fig: dict = {"T": round(T, 6), "fault": p.fault, "files": fired[0].get("files"),
                 "holder_role": p.holder}
    if not run.holders:
        return verdict_from(NAME, {}, fig, summary="", evidence=[brief(fired[0])],
                            inconclusive=f"no process of role {p.holder!r} had the store open "
                            f"when {p.fault} fired at T={fmt_t(T, run_start(ctx.history))}")
    captures = find_captures(ctx.home, ctx.store_path.parent)
    cases = {"ok_after_fault": ok_after_fault_cases(run), "unrefused": unrefused_cases(run),
             "write_after_refusal": write_after_refusal_cases(run),
             "capture": capture_cases(run, captures), "open": open_cases(run),
             "after_exit": after_exit_cases(run)}
    if not after_exit_ops(run):
        ok, detail = fresh_writer_works(ctx.store_path)
        fig["fresh_writer_on_copy"] = detail
        if not ok:
            cases["fresh_writer"] = [{"violation": "fresh writer failed", "error": detail,
                                      "why": "a fresh writer on a copy of the final store "
                                             f"failed: {detail}"}]
    fig.update(_figures(run, captures))
    tested = any(run.writes_after(h) for h in run.holders)
    return verdict_from(NAME, cases, fig, summary=_summary(run, fig),
                        inconclusive=None if tested else
                        f"the holder never attempted a write after "
                        f"T={fmt_t(T, run_start(ctx.history))}")


def _figures(run: Run, captures: list[Capture]) -> dict:
    per_holder = {}
    for h in run.holders:
        after, ex = run.writes_after(h), run.exits.get(h)
        good = [c for c in captures if c.pid in run.pids.get(h, set()) and c.valid]
        per_holder[h] = {"pids": sorted(run.pids.get(h, ())), "writes_after_T": len(after),
                         "ok_after_T": sum(o.kind == "ok" for o in after),
                         "refused": len(run.refused(h)),
                         "other_failures": sum(o.kind == "fail" and o.error != REFUSAL
                                               for o in after),
                         "exit_t": None if ex is None else ex.get("t"),
                         "exitcode": None if ex is None else ex.get("exitcode"),
                         "capture": good[0].path.name if good else None}
    opens = _judged_opens(run)
    held = run.held_until
    fig = {"capture_dirs": [c.path.name for c in captures], "holders": per_holder,
           "holder_pids": sorted(p for h in run.holders for p in run.pids.get(h, ())),
           "writes_refused": sum(v["refused"] for v in per_holder.values()),
           "concurrent_writes": sum(1 for h in run.holders for o in run.ops
                                    if o.process == h and o.is_write() and o.t_invoke <= run.T
                                    and (o.t_done is None or o.t_done > run.T)),
           "opens_refused": sum(o.kind == "fail" and o.error == REFUSAL for o in opens),
           "opens_unknown": sum(o.kind == "info" for o in opens),
           "opens_ambiguous": sum(o.kind != "info" and not (o.kind == "fail" and
                                                            o.error == REFUSAL)
                                  and (o.t_done is None or o.t_done >= held) for o in opens),
           "held_until": round(held, 6)}
    if run.all_exited:
        post = after_exit_ops(run)
        fig["ops_after_exit"] = len(post)
        fig["opens_after_exit_ok"] = sum(o.kind == "ok" for o in post)
    else:
        fig["holder_exit"] = "not recorded for every holder"
    return fig


def _summary(run: Run, fig: dict) -> str:
    holders = fig["holders"]
    caps = ", ".join(str(holders[h]["capture"]) for h in run.holders)
    out = (f"T={fmt_t(run.T, run_start(run.history))}: {len(run.holders)} holder(s), "
           f"{sum(v['ok_after_T'] for v in holders.values())} ok writes after T, "
           f"{fig['writes_refused']} refused, capture {caps}; {fig['opens_refused']} opens "
           "refused")
    if fig.get("ops_after_exit"):
        out += f"; {fig['opens_after_exit_ok']} ok after exit"
    elif "fresh_writer_on_copy" in fig:
        out += f"; fresh writer on copy: {fig['fresh_writer_on_copy']}"
    return out
