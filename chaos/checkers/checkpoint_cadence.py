"""``checkpoint_cadence``: a PASSIVE checkpoint after every 50th write (SPEC §16.3, §4).

SPEC §16.3: "a PASSIVE checkpoint after every 50th write of each writer and no other checkpoint
mode in normal operation". SPEC §4: every 50th successful write on a connection runs
``PRAGMA wal_checkpoint(PASSIVE)``; ``close()`` also runs a PASSIVE checkpoint.

From the ``write`` (``seq`` = successful writes on the connection) and ``checkpoint`` (``mode``,
``trigger``, ``seq``) store events of each process. A connection's ``seq`` restarts at 1, so a
``write`` whose seq does not exceed the previous one starts a new connection segment. Per segment
with highest write seq W, the ``cadence`` checkpoints must have seq exactly every, 2·every, ...
up to the highest multiple ≤ W: none missing, none extra, none twice. A process killed (negative
exit code) right after its last write may miss only that final checkpoint (seq == W on its last
connection). Every checkpoint (cadence, close or other) must be PASSIVE.

Figures also report the largest WAL size (``log`` frames) a checkpoint saw.
Params: ``every`` (50). INCONCLUSIVE when no connection reached ``every`` writes.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ..history import brief, exit_records
from ..params import param
from .base import FAIL, INCONCLUSIVE, PASS, CheckContext, Verdict, params_of


@dataclass(frozen=True, kw_only=True)
class Params:
    """A PASSIVE checkpoint after every `every`-th write of each writer."""

    every: int = param(50, "Writes between cadence checkpoints.", minimum=1)


NAME = "checkpoint_cadence"


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    every = p.every
    if every <= 0:
        raise ValueError("checkpoint_cadence: every must be > 0")
    exits = exit_records(ctx.history)
    streams: dict[str, list[dict]] = defaultdict(list)
    for r in ctx.history:
        if r.get("type") == "event" and r.get("event") in ("write", "checkpoint"):
            streams[r.get("process") or "?"].append(r)

    problems: list[str] = []
    evidence: list = []
    per_proc: dict[str, dict] = {}
    total_ckpt = frames = 0
    max_log = None
    reached = False
    for proc, recs in sorted(streams.items()):
        segments: list[dict] = []
        cur = None
        for r in recs:
            if r["event"] == "write":
                seq = int(r.get("seq", 0))
                if cur is None or seq <= cur["max_seq"]:
                    cur = {"max_seq": 0, "cadence": [], "writes": 0}
                    segments.append(cur)
                cur["max_seq"] = seq
                cur["writes"] += 1
            else:
                total_ckpt += 1
                mode = str(r.get("mode", "")).upper()
                if mode != "PASSIVE":
                    problems.append(f"{proc}: {r.get('mode')} checkpoint ({r.get('trigger')})")
                    evidence.append({"violation": "non-PASSIVE checkpoint", "record": brief(r)})
                if isinstance(r.get("checkpointed"), int) and r["checkpointed"] > 0:
                    frames += r["checkpointed"]
                if isinstance(r.get("log"), int):
                    max_log = r["log"] if max_log is None else max(max_log, r["log"])
                if r.get("trigger") == "cadence":
                    if cur is None:
                        cur = {"max_seq": 0, "cadence": [], "writes": 0}
                        segments.append(cur)
                    cur["cadence"].append(r)
        ex = exits.get(proc)
        killed = ex is not None and isinstance(ex.get("exitcode"), int) and ex["exitcode"] < 0
        info = {"writes": sum(s["writes"] for s in segments), "connections": len(segments),
                "cadence_checkpoints": sum(len(s["cadence"]) for s in segments),
                "close_checkpoints": sum(1 for r in recs if r["event"] == "checkpoint"
                                         and r.get("trigger") == "close"),
                "killed": killed}
        for i, seg in enumerate(segments):
            w = seg["max_seq"]
            if w >= every:
                reached = True
            expected = set(range(every, w + 1, every))
            seen: dict[int, int] = defaultdict(int)
            for r in seg["cadence"]:
                seen[int(r.get("seq", -1))] += 1
            missing = sorted(expected - set(seen))
            extra = [r for r in seg["cadence"] if int(r.get("seq", -1)) not in expected]
            twice = sorted(s for s, n in seen.items() if n > 1 and s in expected)
            last = i == len(segments) - 1
            if missing == [w] and last and killed:
                info["allowed_missing_final"] = w
                missing = []
            if missing:
                problems.append(f"{proc}: cadence checkpoint missing at write seq "
                                f"{missing[:5]} (connection {i + 1}, {w} writes)")
                evidence.append({"violation": "missing cadence checkpoint", "process": proc,
                                 "connection": i + 1, "writes": w, "missing_seq": missing[:20]})
            if extra:
                problems.append(f"{proc}: cadence checkpoint at seq "
                                f"{[r.get('seq') for r in extra[:5]]}, not a multiple of {every} "
                                f"≤ {w}")
                evidence.extend({"violation": "unexpected cadence checkpoint",
                                 "record": brief(r)} for r in extra[:5])
            if twice:
                problems.append(f"{proc}: cadence checkpoint repeated at seq {twice[:5]}")
        per_proc[proc] = info

    fig = {"every": every, "processes": per_proc, "total_checkpoints": total_ckpt,
           "frames_checkpointed": frames, "max_wal_frames_seen": max_log}
    writers = sum(1 for p in per_proc.values() if p["writes"])
    summary = (f"{writers} writer(s), {sum(p['writes'] for p in per_proc.values())} writes, "
               f"{sum(p['cadence_checkpoints'] for p in per_proc.values())} cadence + "
               f"{sum(p['close_checkpoints'] for p in per_proc.values())} close checkpoints, "
               f"{frames} frames checkpointed")
    if problems:
        return Verdict(NAME, FAIL, f"{problems[0]} ({len(problems)} problem(s)); " + summary,
                       fig | {"problems": problems[:20]}, evidence)
    if not reached:
        return Verdict(NAME, INCONCLUSIVE,
                       f"no connection reached {every} writes; " + summary, fig, evidence)
    return Verdict(NAME, PASS, summary, fig, evidence)
