"""``single_wal_generation``: nobody commits into a retired WAL (SPEC §16.3, §10.1).

SPEC §16.3: "(continuous): sampled during the run, no role process writes while it holds a
``-wal`` inode that is not the one at the path."

From the sampler's records (:mod:`chaos.sampler`): for each role process, the samples where its
``wal`` entry has ``current: false`` (deleted, or another inode now at the path) are the times it
held a retired generation. An ``ok`` write op (``WRITE_OPS``) of that process is a **violation**
when the last sample before its ``invoke`` and the first sample after its ``ok`` both show the
process holding the same retired ``-wal`` inode: the whole call ran while it held the retired
generation, and it committed (split brain: a second WAL). When only one side shows it (the
generation changed during the call, or the process exited before the next sample) the write is
counted as ``ambiguous`` and not judged. Store ``write`` events of the process are judged the same
way (their ``t`` on both sides).

Figures: samples, samples in which some role held a retired WAL, the processes that did, their
ok writes inside and around those windows. Evidence: each violating write record with the two
samples' entries for its process.

Params: ``min_samples`` (default 5): fewer samples in which a role process held the store is
INCONCLUSIVE (the sampler saw nothing). SKIPPED when the sampler could not sample (no ``/proc``).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..history import Samples, brief, fmt_t, pair_ops, proc_entry, run_start
from ..params import param
from .base import (
    CheckContext,
    Verdict,
    params_of,
    verdict_from,
)


@dataclass(frozen=True, kw_only=True)
class Params:
    """From the sampler: no role process commits a write while it holds a -wal inode that is not
    the one at the path."""

    min_samples: int = param(5, "Fewer samples with a role holding the store is inconclusive.",
                             minimum=1)


NAME = "single_wal_generation"


def _retired_wal(sample: dict | None, process: str):
    """The retired ``-wal`` inode the process holds in ``sample``, else None."""
    entry = proc_entry(sample, process)
    wal = (entry or {}).get("wal")
    if wal and not wal.get("current"):
        return (wal.get("dev"), wal.get("ino"))
    return None


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    min_samples = p.min_samples
    samples = Samples(ctx.history)
    if samples.unavailable:
        return verdict_from(NAME, {}, {"samples": 0}, summary="",
                            skipped=f"the sampler could not sample: {samples.unavailable}")
    holding_samples = [s for s in samples.records
                       if any(p.get("db") or p.get("wal") for p in s.get("procs") or [])]
    def retired(p: dict) -> bool:
        return bool(p.get("wal")) and not p["wal"].get("current") and p.get("parent") is None

    retired_samples = [s for s in samples.records if any(map(retired, s.get("procs") or []))]
    retired_procs = sorted({p["process"] for s in retired_samples for p in s.get("procs") or []
                            if retired(p)})
    fig: dict = {"samples": len(samples), "samples_with_a_holder": len(holding_samples),
                 "samples_with_a_retired_wal": len(retired_samples),
                 "processes_holding_a_retired_wal": retired_procs}
    if len(holding_samples) < min_samples:
        return verdict_from(NAME, {}, fig, summary="",
                            inconclusive=f"only {len(holding_samples)} sample(s) with a role "
                            f"holding the store (< min_samples {min_samples}): the run was not "
                            "observed")

    # (start t, end t, process, record) for every committed write to judge
    writes = [(op.t_invoke, op.t_done, op.process, op.record()) for op in pair_ops(ctx.history)
              if op.is_write() and op.kind == "ok" and op.t_done is not None
              and op.process in retired_procs]
    writes += [(float(r["t"]), float(r["t"]), r.get("process"), r) for r in ctx.history
               if r.get("type") == "event" and r.get("event") == "write"
               and r.get("process") in retired_procs]
    violations, ambiguous, judged = [], 0, 0
    for t0, t1, process, rec in writes:
        before = samples.at_or_before(t0)
        after = samples.at_or_after(t1)
        a, b = _retired_wal(before, process), _retired_wal(after, process)
        if a is None and b is None:
            continue
        judged += 1
        if a is not None and a == b:
            violations.append({
                "violation": "write while holding a retired -wal", "process": process,
                "retired_wal": {"dev": a[0], "ino": a[1]},
                "sample_before": {"t": before["t"], "entry": proc_entry(before, process),
                                  "at_path": (before.get("path") or {}).get("wal")},
                "sample_after": {"t": after["t"], "entry": proc_entry(after, process),
                                 "at_path": (after.get("path") or {}).get("wal")},
                "record": brief(rec)})
        else:
            ambiguous += 1
    fig.update({"writes_near_a_retired_wal": judged, "violations": len(violations),
                "ambiguous": ambiguous})
    fail = None
    if violations:
        v = violations[0]
        fail = (f"{len(violations)} write(s) committed while the writer held a retired -wal; "
                f"first: {v['process']} at t={fmt_t(v['record'].get('t'), run_start(ctx.history))}"
                f" holding inode {v['retired_wal']['ino']} (path has "
                f"{(v['sample_before']['at_path'] or {}).get('ino', 'no -wal')})")
    summary = (f"{len(samples)} samples; {len(retired_samples)} with a retired -wal held "
               f"({', '.join(retired_procs) or 'by nobody'}); 0 writes committed into it"
               + (f", {ambiguous} ambiguous" if ambiguous else ""))
    return verdict_from(NAME, {"retired_write": violations}, fig, summary=summary,
                        fail_summary=fail, evidence=violations, cases_as_evidence=False)
