"""``checkpoint_cadence``: a PASSIVE checkpoint after every 50th write (SPEC §16.3, §4).

SPEC §16.3: "a PASSIVE checkpoint after every 50th write of each writer and no other checkpoint
mode in normal operation". SPEC §4: every 50th successful write on a connection runs
``PRAGMA wal_checkpoint(PASSIVE)``; ``close()`` also runs a PASSIVE checkpoint.

From the ``write`` (``seq`` = successful writes on the connection) and ``checkpoint`` (``mode``,
``trigger``, ``seq``) store events of each process. A connection's ``seq`` restarts at 1, so a
``write`` whose seq does not exceed the previous one starts a new connection (:func:`connections`).
Per connection with highest write seq W, the ``cadence`` checkpoints must have seq exactly
every, 2·every, ... up to the highest multiple ≤ W. One case function per rule:

* :func:`mode_cases`: a checkpoint (cadence, close or other) that is not PASSIVE;
* :func:`missing_cases`: a multiple of ``every`` without its cadence checkpoint. A process killed
  (negative exit code) right after its last write may miss only that final checkpoint (seq == W
  on its last connection: :func:`allowed_final`);
* :func:`extra_cases`: a cadence checkpoint at a seq that is not a multiple ≤ W;
* :func:`repeated_cases`: a multiple with two cadence checkpoints;
* :func:`emptied_cases`: a cadence checkpoint reported PASSIVE whose result says the WAL was
  empty (``log`` 0). It runs right after its connection's own commit, whose frames a PASSIVE
  checkpoint leaves in the WAL (it never resets or truncates it), so only a TRUNCATE can have
  emptied it: the mode the event reports is not the one SQLite ran. Excused when a maintenance
  command (a ``run`` op), a nemesis step or a checkpoint reported in another mode (a gateway's
  housekeeping VACUUM + TRUNCATE) overlaps the time from that commit to the checkpoint.

Figures also report the largest WAL size (``log`` frames) a checkpoint saw.
INCONCLUSIVE when no connection reached ``every`` writes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from ..history import brief, exit_records, nemesis_steps, pair_ops
from ..params import param
from .base import CheckContext, Verdict, params_of, verdict_from


@dataclass(frozen=True, kw_only=True)
class Params:
    """A PASSIVE checkpoint after every `every`-th write of each writer."""

    every: int = param(50, "Writes between cadence checkpoints.", minimum=1)


NAME = "checkpoint_cadence"


@dataclass
class Connection:
    """One connection of a process: its writes and its cadence checkpoints."""

    process: str
    number: int  # 1-based, per process
    max_seq: int = 0
    writes: int = 0
    cadence: list = field(default_factory=list)
    last: bool = False

    def expected(self, every: int) -> set[int]:
        return set(range(every, self.max_seq + 1, every))


def checkpoints(history: list[dict]) -> list[dict]:
    """Every ``checkpoint`` store event."""
    return [r for r in history if r.get("type") == "event" and r.get("event") == "checkpoint"]


def connections(history: list[dict]) -> list[Connection]:
    """The connections of every process, from its ``write`` and ``checkpoint`` events."""
    out: list[Connection] = []
    current: dict[str, Connection] = {}
    for r in history:
        if r.get("type") != "event" or r.get("event") not in ("write", "checkpoint"):
            continue
        proc = r.get("process") or "?"
        cur = current.get(proc)
        if r["event"] == "write":
            seq = int(r.get("seq", 0))
            if cur is None or seq <= cur.max_seq:
                cur = current[proc] = Connection(proc, (cur.number + 1) if cur else 1)
                out.append(cur)
            cur.max_seq, cur.writes = seq, cur.writes + 1
        elif r.get("trigger") == "cadence":
            if cur is None:
                cur = current[proc] = Connection(proc, 1)
                out.append(cur)
            cur.cadence.append(r)
    for cur in current.values():
        cur.last = True
    return out


def killed(history: list[dict]) -> set[str]:
    """Processes whose exit record shows a signal (negative exit code)."""
    return {p for p, ex in exit_records(history).items()
            if isinstance(ex.get("exitcode"), int) and ex["exitcode"] < 0}


def allowed_final(conn: Connection, every: int, killed_procs: set[str]) -> bool:
    """True when the connection's only gap may be its final checkpoint: the process was killed
    right after its last write, which was a multiple of ``every``."""
    seen = {int(r.get("seq", -1)) for r in conn.cadence}
    return (conn.last and conn.process in killed_procs
            and sorted(conn.expected(every) - seen) == [conn.max_seq])


# ------------------------------------------------------------------------------ cases
def mode_cases(history: list[dict]) -> list[dict]:
    """Checkpoints of any trigger whose mode is not PASSIVE."""
    return [{"violation": "non-PASSIVE checkpoint", "why": f"{r.get('process')}: "
             f"{r.get('mode')} checkpoint ({r.get('trigger')})", "record": brief(r)}
            for r in checkpoints(history) if str(r.get("mode", "")).upper() != "PASSIVE"]


def missing_cases(conns: list[Connection], every: int, killed_procs: set[str]) -> list[dict]:
    """Multiples of ``every`` without a cadence checkpoint (but :func:`allowed_final`)."""
    out = []
    for c in conns:
        missing = sorted(c.expected(every) - {int(r.get("seq", -1)) for r in c.cadence})
        if missing and not allowed_final(c, every, killed_procs):
            out.append({"violation": "missing cadence checkpoint", "process": c.process,
                        "connection": c.number, "writes": c.max_seq, "missing_seq": missing[:20],
                        "why": f"{c.process}: cadence checkpoint missing at write seq "
                               f"{missing[:5]} (connection {c.number}, {c.max_seq} writes)"})
    return out


def extra_cases(conns: list[Connection], every: int) -> list[dict]:
    """Cadence checkpoints at a seq that is not a multiple of ``every`` up to the writes."""
    return [{"violation": "unexpected cadence checkpoint", "record": brief(r),
             "why": f"{c.process}: cadence checkpoint at seq {r.get('seq')}, not a multiple of "
                    f"{every} ≤ {c.max_seq}"}
            for c in conns for r in c.cadence if int(r.get("seq", -1)) not in c.expected(every)]


def repeated_cases(conns: list[Connection], every: int) -> list[dict]:
    """Multiples of ``every`` with more than one cadence checkpoint."""
    out = []
    for c in conns:
        seen = Counter(int(r.get("seq", -1)) for r in c.cadence)
        twice = sorted(s for s, n in seen.items() if n > 1 and s in c.expected(every))
        if twice:
            out.append({"violation": "repeated cadence checkpoint", "process": c.process,
                        "seq": twice[:20], "why": f"{c.process}: cadence checkpoint repeated "
                        f"at seq {twice[:5]}"})
    return out


def _busy_windows(history: list[dict]) -> list[tuple[float, float]]:
    """``(start, end)`` of every maintenance command (``run`` op), nemesis step and checkpoint
    reported in another mode than PASSIVE (a gateway's own housekeeping VACUUM ends with a
    TRUNCATE one, in-process: it may empty the WAL between another process's commit and its
    cadence checkpoint)."""
    out = [(o.t_invoke, o.t_done if o.t_done is not None else float("inf"))
           for o in pair_ops(history) if o.op == "run"]
    out += [(float(r.get("t_start", r.get("t", 0.0))), float(r.get("t_end", r.get("t", 0.0))))
            for r in history if r.get("type") == "event" and r.get("event") == "checkpoint"
            and str(r.get("mode", "")).upper() != "PASSIVE"]
    return out + [(float(start.get("t", 0.0)),
                   float(done.get("t", 0.0)) if done is not None else float("inf"))
                  for start, done in nemesis_steps(history)]


def emptied_cases(history: list[dict]) -> list[dict]:
    """Cadence checkpoints reported PASSIVE that found the WAL empty right after their own
    connection's commit (module docstring), outside maintenance and nemesis steps."""
    windows = _busy_windows(history)
    last_write: dict[str, float] = {}
    out = []
    for r in history:
        if r.get("type") != "event":
            continue
        proc = str(r.get("process"))
        if r.get("event") == "write":
            last_write[proc] = float(r.get("t", 0.0))
            continue
        if (r.get("event") != "checkpoint" or r.get("trigger") != "cadence"
                or str(r.get("mode", "")).upper() != "PASSIVE" or r.get("log") != 0
                or proc not in last_write):
            continue
        t0, t1 = last_write[proc], float(r.get("t", 0.0))
        if any(a <= t1 and b >= t0 for a, b in windows):
            continue
        out.append({"violation": "PASSIVE checkpoint emptied the WAL", "record": brief(r),
                    "why": f"{proc}: cadence checkpoint at write seq {r.get('seq')} reported "
                           "PASSIVE but found an empty WAL (log 0) right after its own commit: "
                           "only a TRUNCATE checkpoint empties it"})
    return out


# ------------------------------------------------------------------------------ verdict
def check(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    every = params_of(Params, params).every
    if every <= 0:
        raise ValueError("checkpoint_cadence: every must be > 0")
    conns, dead = connections(ctx.history), killed(ctx.history)
    cases = {"mode": mode_cases(ctx.history), "missing": missing_cases(conns, every, dead),
             "extra": extra_cases(conns, every), "repeated": repeated_cases(conns, every),
             "emptied": emptied_cases(ctx.history)}
    fig = _figures(ctx.history, conns, every, dead)
    summary = (f"{sum(1 for p in fig['processes'].values() if p['writes'])} writer(s), "
               f"{sum(p['writes'] for p in fig['processes'].values())} writes, "
               f"{sum(p['cadence_checkpoints'] for p in fig['processes'].values())} cadence + "
               f"{sum(p['close_checkpoints'] for p in fig['processes'].values())} close "
               f"checkpoints, {fig['frames_checkpointed']} frames checkpointed")
    reached = any(c.max_seq >= every for c in conns)
    return verdict_from(NAME, cases, fig, summary=summary,
                        inconclusive=None if reached else f"no connection reached {every} writes")


def _figures(history: list[dict], conns: list[Connection], every: int, dead: set[str]) -> dict:
    ckpts = checkpoints(history)
    per_proc: dict[str, dict] = {}
    for proc in sorted({c.process for c in conns} | {r.get("process") or "?" for r in ckpts}):
        mine = [c for c in conns if c.process == proc]
        info = {"writes": sum(c.writes for c in mine), "connections": len(mine),
                "cadence_checkpoints": sum(len(c.cadence) for c in mine),
                "close_checkpoints": sum(1 for r in ckpts if r.get("process") == proc
                                         and r.get("trigger") == "close"),
                "killed": proc in dead}
        allowed = [c.max_seq for c in mine if c.max_seq and allowed_final(c, every, dead)]
        if allowed:
            info["allowed_missing_final"] = allowed[-1]
        per_proc[proc] = info
    logs = [r["log"] for r in ckpts if isinstance(r.get("log"), int)]
    return {"every": every, "processes": per_proc, "total_checkpoints": len(ckpts),
            "frames_checkpointed": sum(r["checkpointed"] for r in ckpts
                                       if isinstance(r.get("checkpointed"), int)
                                       and r["checkpointed"] > 0),
            "max_wal_frames_seen": max(logs) if logs else None}
