"""``wal_growth``: the WAL stays bounded; when it does not, who pinned it (SPEC §16.3; issue 25).

SPEC §16.3 (``checkpoint_cadence``): "WAL size stays bounded when no reader pins it". This checker
judges the bound itself, whoever keeps it from holding: the user's symptom "state.db-wal grows
without end" (a long read transaction, readers that always overlap, a checkpointer that never
gets its turn). From the store's ``checkpoint`` events (``log``: frames in the WAL when the
checkpoint ran; ``checkpointed``: frames it copied back) and, with ``max_bytes``, the sampler's
``wal_bytes``:

* a checkpoint that saw more than ``max_frames`` frames in the WAL: FAIL;
* a sample of a WAL file larger than ``max_bytes``: FAIL.

The evidence names the read transactions open at that moment (the sampler's lock table: every
process holding a ``read mark N`` lock on ``-shm``, and since when it held one without a break),
the first checkpoint over the bound and what it could copy. INCONCLUSIVE when no checkpoint
reported the WAL's size and no sample was judged (nothing wrote, or the cadence never came).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..history import Samples, brief, fmt_t, run_start
from ..params import param
from .base import (
    CheckContext,
    Verdict,
    params_of,
    problems_as_cases,
    verdict_from,
)

NAME = "wal_growth"


@dataclass(frozen=True, kw_only=True)
class Params:
    """The WAL stays under `max_frames` frames at every checkpoint (and under `max_bytes` on
    disk when given); a failure names the read transactions that pinned it."""

    max_frames: int = param(1000, "Most frames a checkpoint may find in the WAL (the store "
                            "checkpoints every 50 writes: about 600 frames of small messages).",
                            minimum=1)
    max_bytes: int | None = param(None, "Optional: most bytes the sampled state.db-wal may "
                                  "have.", minimum=1)


def readers(sample: dict | None) -> dict[str, dict]:
    """``{process: {"pid", "marks": [...]}}`` of the processes holding a read-mark lock (read,
    not waiting) on ``-shm`` in ``sample``."""
    out: dict[str, dict] = {}
    for lk in (sample or {}).get("locks") or []:
        name = str(lk.get("lock") or "")
        if not name.startswith("read mark") or lk.get("write") or lk.get("waiting"):
            continue
        proc = lk.get("process") or f"PID {lk.get('pid')}"
        item = out.setdefault(proc, {"pid": lk.get("pid"), "marks": []})
        item["marks"].append(name)
    return out


def held_since(samples: Samples, process: str, t: float) -> float | None:
    """When ``process`` began holding a read mark without a break up to time ``t`` (the time of
    the first sample of that unbroken run), or None when it holds none at ``t``."""
    since = None
    for s in samples.between(float("-inf"), t):
        since = (since if since is not None else float(s["t"])) if process in readers(s) else None
    return since


def check(ctx: CheckContext, params) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    hist = ctx.history
    start = run_start(hist)
    samples = Samples(hist)
    cps = [r for r in hist if r.get("type") == "event" and r.get("event") == "checkpoint"
           and isinstance(r.get("log"), int) and r["log"] >= 0]
    biggest = max((r["log"] for r in cps), default=None)
    over = next((r for r in cps if r["log"] > p.max_frames), None)
    size_over = None
    largest_bytes = None
    if p.max_bytes is not None:
        for s in samples.records:
            size = s.get("wal_bytes")
            if isinstance(size, int):
                largest_bytes = max(largest_bytes or 0, size)
                if size_over is None and size > p.max_bytes:
                    size_over = s
    figures = {"checkpoints": len(cps), "largest_log_frames": biggest,
               "max_frames": p.max_frames, "max_bytes": p.max_bytes,
               "largest_wal_bytes": largest_bytes}
    if over is None and size_over is None:
        if not cps and largest_bytes is None:
            return verdict_from(NAME, {}, figures, summary="",
                                inconclusive="no checkpoint reported the WAL's size and no WAL "
                                "size was sampled: nothing to judge")
        return verdict_from(NAME, {}, figures,
                            summary=f"{len(cps)} checkpoint(s); the WAL held at most {biggest} "
                            f"frame(s) <= {p.max_frames}"
                            + (f", at most {largest_bytes} bytes on disk"
                               if largest_bytes is not None else ""))
    t = float(over["t"]) if over is not None else float(size_over["t"])
    if size_over is not None and over is not None:
        t = min(t, float(size_over["t"]))
    at = samples.at_or_before(t) or samples.nearest(t)
    open_readers = readers(at)
    named = []
    for proc, info in sorted(open_readers.items()):
        since = held_since(samples, proc, float(at["t"])) if at else None
        named.append({"process": proc, "pid": info["pid"], "read_marks": info["marks"],
                      "held_since": fmt_t(since, start), "t": since})
    figures["readers_at_failure"] = [f"{n['process']} (PID {n['pid']}) since {n['held_since']}"
                                     for n in named]
    what = (f"the WAL held {over['log']} frames at a checkpoint (bound {p.max_frames}; it copied "
            f"{over.get('checkpointed')} back)" if over is not None and (
                size_over is None or float(over["t"]) <= float(size_over["t"]))
            else f"state.db-wal reached {size_over['wal_bytes']} bytes (bound {p.max_bytes})")
    who = ("; read transactions open then: " + ", ".join(
        f"{n['process']} (PID {n['pid']}, {', '.join(n['read_marks'])}) since {n['held_since']}"
        for n in named)) if named else "; no read transaction was open at that moment"
    evidence = []
    if over is not None:
        evidence.append(brief(over, ("t", "process", "pid", "event", "mode", "trigger", "log",
                                     "checkpointed", "busy")))
    if size_over is not None:
        evidence.append({"t": size_over["t"], "wal_bytes": size_over["wal_bytes"]})
    evidence += [{"t": n["t"] if n["t"] is not None else t, "reader": n["process"],
                  "pid": n["pid"], "read_marks": n["read_marks"]} for n in named]
    why = f"{what} at {fmt_t(t, start)}{who}"
    return verdict_from(NAME, problems_as_cases("wal_growth", [why]), figures, summary="",
                        fail_summary=why, evidence=evidence, cases_as_evidence=False)
