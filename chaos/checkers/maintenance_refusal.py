"""``maintenance_refusal``: the live-writer gate refuses, names the holders, changes nothing
(SPEC §16.3, §11).

SPEC §16.3: "a gated command without ``--force`` under a live writer exits 1 and names the holder
PIDs; ``--dry-run`` works; nothing was rewritten."

Commands come from two sources (:mod:`chaos.nemesis.commands` runs both): the ``maintenance``
role's ``run`` ops (``invoke`` … ``ok``/``fail``/``info``) and the nemesis ``run`` fault
(``start`` … ``done`` records). Fields read: ``command`` (scenario name: ``optimize``,
``optimize-storage``, ``prune``, ...), ``force``, ``dry_run``, ``exit_code``, ``stdout``,
``stderr``, ``named_pids`` (else every ``PID N`` in the output), and the child's pid
(``child_pid``, else the nemesis record's ``pid``/the role record's ``pid`` when it differs from
the role process's own pid).

*Live writers* of one command: the role processes (other than the one running the command) that
hold a store file in the sample taken at or before its start AND in the sample taken at or after
its end (:mod:`chaos.sampler`); without samples, the role processes with an ``ok`` write before
the start and after the end.

Judged, for each gated command (``optimize``, ``optimize-storage``, ``prune``):

* without ``--force``/``--dry-run`` under live writers: ``exit_code`` 1, the output says
  "Refusing", and every live writer's PID is named. A ``prune`` whose live writers include a
  ``gateway`` role is handed off to the gateway (SPEC §11): counted; it may be refused (another
  holder beside the gateway), but one that exits 0 without saying it handed the deletion to the
  gateway ran it itself under the live gateway (sessions with a turn in progress go with it):
  a violation;
* with ``--dry-run``: ``exit_code`` 0 (a preview is never refused);
* both: nothing was rewritten. The evidence is what the sampler saw at the store's paths: the
  ``state.db`` inode is the same before and after; the command's child never owned the WAL write
  lock in any sample of its window; and when no other process wrote during the window (no ``ok``
  write op completed in it), ``state.db`` and ``-wal`` sizes are unchanged too.

``--force`` runs and commands on a quiet store are reported, not judged.

Params: ``role`` (only that maintenance role's commands; default every command, nemesis ``run``
included), ``min_refusals`` (default 1): fewer judged refusals under a live writer is
INCONCLUSIVE (the run never put the gate to the test).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..history import (
    WRITE_OPS,
    Samples,
    brief,
    fmt_t,
    holding,
    pair_ops,
    role_of,
    run_start,
)
from ..nemesis.commands import GATED_COMMANDS, named_pids
from ..params import param
from .base import (
    CheckContext,
    Verdict,
    params_of,
    problems_as_cases,
    role_kinds,
    verdict_from,
)


@dataclass(frozen=True, kw_only=True)
class Params:
    """A gated maintenance command without --force under a live writer exits 1 naming the holder
    PIDs and rewrites nothing; --dry-run works (SPEC §11)."""

    role: str | None = param(None, "Only judge the commands of this maintenance role (default: "
                             "every maintenance command of the run).")
    min_refusals: int = param(1, "Fewer refusals under a live writer than this is "
                              "inconclusive.", minimum=0)


NAME = "maintenance_refusal"
#: What a prune handed to the owning gateway prints (text, or ``--json``'s action).
HANDED_OFF = re.compile(r'handed to it|"action": "handoff"')


@dataclass
class Command:
    """One maintenance command run: when, by whom, with what result."""

    source: str          # "role" or "nemesis"
    process: str         # the role process, or "nemesis"
    command: str
    force: bool
    dry_run: bool
    t0: float
    t1: float
    exit_code: int | None
    output: str
    named: list = field(default_factory=list)
    child_pid: int | None = None
    record: dict = field(default_factory=dict)


def _words(rec: dict) -> str:
    cmd = rec.get("command")
    if isinstance(cmd, list):
        return " ".join(map(str, cmd))
    return str(cmd or "")


def _command_name(rec: dict) -> str:
    text = _words(rec)
    for name in ("optimize-storage", "optimize", "prune"):
        if re.search(rf"(^|\s){re.escape(name)}(\s|$)", text):
            return name
    return text.split()[-1] if text.split() else "?"


def _flag(rec: dict, key: str, word: str) -> bool:
    if rec.get(key) is not None:
        return bool(rec.get(key))
    argv = rec.get("argv") or rec.get("args") or []
    return word in argv or word in _words(rec).split()


def _child(rec: dict, own_pid) -> int | None:
    for key in ("child_pid", "pid"):
        v = rec.get(key)
        if isinstance(v, int) and v != own_pid:
            return v
    return None


def _named(rec: dict, output: str) -> list:
    """``named_pids`` of the record (parsed from the whole output), else parsed from the
    excerpts."""
    if isinstance(rec.get("named_pids"), list):
        return list(rec["named_pids"])
    return named_pids(output)


def _exit_code(rec: dict):
    for key in ("exit_code", "exitcode", "returncode"):
        if rec.get(key) is not None:
            return rec[key]
    return None


def collect(history: list[dict], role: str | None) -> list[Command]:
    """Every maintenance command of the run (role ``run`` ops and nemesis ``run`` faults)."""
    out: list[Command] = []
    for op in pair_ops(history):
        if op.op != "run" or op.done is None or op.synthesized:
            continue
        if role is not None and role_of(op.process) != role:
            continue
        rec = {**(op.invoke or {}), **op.done}
        output = f"{rec.get('stdout') or ''}\n{rec.get('stderr') or ''}"
        own = (op.invoke or {}).get("pid")
        out.append(Command("role", op.process, _command_name(rec),
                           _flag(rec, "force", "--force"), _flag(rec, "dry_run", "--dry-run"),
                           op.t_invoke, float(op.done["t"]), _exit_code(rec), output,
                           _named(rec, output),
                           _child(op.done, own), op.done))
    if role is None:
        starts = {r.get("step"): r for r in history if r.get("type") == "nemesis"
                  and r.get("fault") == "run" and r.get("phase") == "start"}
        for r in history:
            if r.get("type") != "nemesis" or r.get("fault") != "run" or r.get("phase") != "done":
                continue
            start = starts.get(r.get("step"), r)
            output = f"{r.get('stdout') or ''}\n{r.get('stderr') or ''}"
            out.append(Command("nemesis", "nemesis", _command_name(r),
                               _flag(r, "force", "--force"), _flag(r, "dry_run", "--dry-run"),
                               float(start["t"]), float(r["t"]), _exit_code(r), output,
                               _named(r, output),
                               _child(r, start.get("pid")), r))
    out.sort(key=lambda c: c.t0)
    return out


def _live_writers(cmd: Command, samples: Samples, ops,
                  kinds: dict | None = None) -> tuple[dict[str, int], str]:
    """``({process: pid}, how)`` of the role processes holding the store across ``cmd``; an
    ``upstream`` role holds it through its child (the release's own process, issue 23)."""
    before, after = samples.at_or_before(cmd.t0), samples.at_or_after(cmd.t1)
    if before is not None and after is not None:
        def holders(sample):
            return {p["process"]: p["pid"] for p in sample.get("procs") or []
                    if (p.get("parent") is None
                        or (kinds or {}).get(role_of(p["process"])) == "upstream")
                    and holding(p) and p["process"] != cmd.process}
        a, b = holders(before), holders(after)
        # A process seen holding after the command that had opened the store before it began
        # held it across the command, although the last sample before it (up to one sampler
        # interval old) predates that open: a step triggered by the open itself lands there.
        opened = {o.process: o.pid for o in ops
                  if o.op == "open" and o.kind == "ok" and o.t_done is not None
                  and o.t_done < cmd.t0 and o.process != cmd.process}
        return {n: pid for n, pid in b.items()
                if a.get(n) == pid or opened.get(n) == pid}, "samples"
    live = {}
    for o in ops:
        if o.kind != "ok" or o.op not in WRITE_OPS or o.process == cmd.process:
            continue
        if o.t_done is not None and o.t_done < cmd.t0:
            live.setdefault(o.process, set()).add("before")
        if o.t_invoke > cmd.t1:
            live.setdefault(o.process, set()).add("after")
    pids = {o.process: o.pid for o in ops}
    return {n: pids.get(n) for n, s in live.items() if s == {"before", "after"}}, "history"


def _rewritten(cmd: Command, samples: Samples, ops, history: list[dict]) -> list[str]:
    """Why the store looks rewritten across ``cmd`` (empty: nothing was)."""
    before, after = samples.at_or_before(cmd.t0), samples.at_or_after(cmd.t1)
    if before is None or after is None:
        return []
    why = []
    pa, pb = before.get("path") or {}, after.get("path") or {}
    da, db = pa.get("db"), pb.get("db")
    if da and db and (da.get("dev"), da.get("ino")) != (db.get("dev"), db.get("ino")):
        why.append(f"state.db inode changed {da.get('ino')} -> {db.get('ino')}")
    if cmd.child_pid is not None:
        owned = [s for s in samples.between(before["t"], after["t"])
                 if (s.get("write_lock") or {}).get("pid") == cmd.child_pid]
        if owned:
            why.append(f"the command (PID {cmd.child_pid}) owned the WAL write lock in "
                       f"{len(owned)} sample(s)")
    others_wrote = any(o.kind == "ok" and o.is_write() and o.t_done is not None
                       and cmd.t0 <= o.t_done <= cmd.t1 for o in ops) or any(
        r.get("type") == "event" and r.get("event") in ("write", "checkpoint")
        and cmd.t0 <= float(r.get("t", 0.0)) <= cmd.t1 for r in history)
    if not others_wrote and da and db:
        wa, wb = (pa.get("wal") or {}).get("bytes"), (pb.get("wal") or {}).get("bytes")
        if da.get("bytes") != db.get("bytes"):
            why.append(f"state.db size changed {da.get('bytes')} -> {db.get('bytes')} bytes "
                       "with no other writer")
        if wa != wb:
            why.append(f"state.db-wal size changed {wa} -> {wb} bytes with no other writer")
    return why


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    role, min_refusals = p.role, p.min_refusals
    hist = ctx.history
    samples = Samples(hist)
    ops = pair_ops(hist)
    kinds = role_kinds(ctx.scenario)
    cmds = collect(hist, role)
    fig: dict = {"commands": len(cmds), "refusals_judged": 0, "refused_ok": 0,
                 "dry_runs_judged": 0, "handed_off": 0, "forced": 0, "quiet_runs": 0,
                 "not_gated": 0, "samples": len(samples), "runs": []}
    evidence: list = []
    problems: list[str] = []
    for cmd in cmds:
        row = {"t": round(cmd.t0, 3), "process": cmd.process, "command": cmd.command,
               "force": cmd.force, "dry_run": cmd.dry_run, "exit_code": cmd.exit_code,
               "named_pids": cmd.named}
        fig["runs"].append(row)
        if cmd.command not in GATED_COMMANDS:
            fig["not_gated"] += 1
            continue
        if cmd.force:
            fig["forced"] += 1
            continue
        live, how = _live_writers(cmd, samples, ops, kinds)
        row["live_writers"] = live
        row["live_writers_from"] = how
        rewritten = _rewritten(cmd, samples, ops, hist)
        bad: list[str] = []
        if cmd.dry_run:
            fig["dry_runs_judged"] += 1
            if cmd.exit_code != 0:
                bad.append(f"--dry-run exited {cmd.exit_code}, not 0")
        elif not live:
            fig["quiet_runs"] += 1
            continue
        elif cmd.command == "prune" and any(kinds.get(role_of(n)) == "gateway" for n in live):
            fig["handed_off"] += 1
            if cmd.exit_code != 0 or HANDED_OFF.search(cmd.output):
                continue
            bad.append("exit 0 without handing the deletion to the gateway (no 'handed to it' "
                       "in the output): the prune ran itself under live writer(s) "
                       + ", ".join(f"{n} (PID {p})" for n, p in live.items()))
        else:
            fig["refusals_judged"] += 1
            if cmd.exit_code != 1:
                bad.append(f"exit {cmd.exit_code}, not 1, under live writer(s) "
                           f"{', '.join(f'{n} (PID {p})' for n, p in live.items())}")
            if "Refusing" not in cmd.output:
                bad.append("the output does not say 'Refusing'")
            missing = [f"{n} (PID {p})" for n, p in live.items() if p not in cmd.named]
            if missing:
                bad.append(f"the output does not name {', '.join(missing)}")
        bad.extend(rewritten)
        if bad:
            problems.append(f"{cmd.command} at t={fmt_t(cmd.t0, run_start(hist))} by {cmd.process}: "
                            + "; ".join(bad))
            evidence.append({"violation": "; ".join(bad), "command": cmd.command,
                             "live_writers": live, "named_pids": cmd.named,
                             "record": brief(cmd.record)})
        elif not cmd.dry_run:
            fig["refused_ok"] += 1
            evidence.append({"refused": cmd.command, "live_writers": live,
                             "named_pids": cmd.named, "record": brief(cmd.record, (
                                 "t", "process", "type", "op", "exit_code", "stdout",
                                 "stderr", "named_pids"))})
    fig["runs"] = fig["runs"][:20]
    summary = (f"{len(cmds)} command(s): {fig['refused_ok']}/{fig['refusals_judged']} refused "
               f"correctly under a live writer, {fig['dry_runs_judged']} dry-run(s), "
               f"{fig['handed_off']} prune hand-off(s), {fig['forced']} forced, "
               f"{fig['quiet_runs']} on a quiet store")
    if problems:
        fig["violations"] = problems[:20]
    untested = (None if fig["refusals_judged"] >= min_refusals else
                f"only {fig['refusals_judged']} gated command(s) ran under a live writer "
                f"(< min_refusals {min_refusals}): the gate was not tested")
    return verdict_from(NAME, problems_as_cases("gate", problems), fig, summary=summary,
                        fail_summary=(f"{problems[0]} ({len(problems)} violation(s)); " + summary
                                      if problems else None),
                        inconclusive=untested, evidence=evidence, cases_as_evidence=False)
