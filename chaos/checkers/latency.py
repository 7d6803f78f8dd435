"""``latency``: p50/p95/p99/max per op kind, with optional bounds (SPEC §16.3).

SPEC §16.3: "``latency``: p50/p95/p99/max per op kind (reported; an optional bound)."

The latency of an operation is its completion's ``latency_s`` (measured by the role around the
call), else ``t(completion) - t(invoke)``. Only completed operations count (``ok`` and ``fail``;
an ``info`` has no known end). Percentiles use the nearest-rank method (p-th percentile = the
``ceil(p/100 * n)``-th smallest value), so every reported figure is a latency that was observed.

Params (seconds or a duration string): ``p99_bound``, ``max_bound`` (FAIL when an op kind's
p99 / max exceeds it, each multiplied by the run's measured load factor unless
``scale_with_load: false``, :func:`chaos.history.history_load_factor`; evidence: the slowest operations of that kind), ``ops`` (the op kinds the
bounds apply to; default every op kind except the adversaries' ``hold_lock``/``hold_read``/
``long_read``, which are long by design). Without a bound the verdict is PASS with the figures.
INCONCLUSIVE when no operation completed.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from ..history import ADVERSARY_OPS, brief, pair_ops
from ..params import Duration, param
from .base import (
    CheckContext,
    Verdict,
    load_factor_for,
    params_of,
    problems_as_cases,
    scale_with_load_param,
    verdict_from,
)


@dataclass(frozen=True, kw_only=True)
class Params:
    """p50/p95/p99/max latency per op kind; FAIL only past an optional bound."""

    p99_bound: Duration | None = param(None, "Optional: FAIL when an op kind's p99 exceeds it.")
    max_bound: Duration | None = param(None, "Optional: FAIL when an op kind's max exceeds it.")
    ops: list[str] | None = param(None, "Op kinds the bounds apply to (default: all).",
                                  uniqueItems=True)
    scale_with_load: bool = scale_with_load_param()


NAME = "latency"
#: Its FAIL may be the machine's load (a wall-clock bound): the gate reruns such a row once.
TIMING_BOUND = True


def percentile(sorted_values: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending, non-empty list (``p`` in (0, 100])."""
    k = max(1, math.ceil(p / 100.0 * len(sorted_values)))
    return sorted_values[k - 1]


def latency_of(op) -> float | None:
    """Seconds an op took, or None for an op without a known end (``info``)."""
    if op.done is None or op.kind == "info":
        return None
    lat = op.done.get("latency_s")
    if isinstance(lat, (int, float)) and not isinstance(lat, bool):
        return float(lat)
    if op.invoke is None:
        return None
    return max(0.0, float(op.done["t"]) - float(op.invoke["t"]))


def check(ctx: CheckContext, params: dict) -> Verdict:
    """``check(ctx, params) -> Verdict`` as :mod:`chaos.checkers` defines it; the rules are in
    this module's docstring, the parameters in :class:`Params`."""
    p = params_of(Params, params)
    factor = load_factor_for(ctx.history, p.scale_with_load)
    p99_bound, max_bound = (None if b is None else b * factor for b in (p.p99_bound, p.max_bound))
    only = set(p.ops or ())
    per_op: dict[str, list] = defaultdict(list)
    for op in pair_ops(ctx.history):
        lat = latency_of(op)
        if lat is not None:
            per_op[op.op].append((lat, op))
    if not per_op:
        return verdict_from(NAME, {}, {}, summary="",
                            inconclusive="no operation completed: no latency to report")
    table = {}
    for name, items in sorted(per_op.items()):
        items.sort(key=lambda x: x[0])
        vals = [x[0] for x in items]
        table[name] = {"n": len(vals), "p50_s": round(percentile(vals, 50), 6),
                       "p95_s": round(percentile(vals, 95), 6),
                       "p99_s": round(percentile(vals, 99), 6), "max_s": round(vals[-1], 6),
                       "ok": sum(1 for _, o in items if o.kind == "ok"),
                       "fail": sum(1 for _, o in items if o.kind == "fail")}
    fig: dict = {"ops": table, "p99_bound_s": p99_bound, "max_bound_s": max_bound,
                 "load_factor": factor}
    problems: list[str] = []
    evidence: list = []
    for name, row in table.items():
        if (only and name not in only) or (not only and name in ADVERSARY_OPS):
            continue
        over = []
        if p99_bound is not None and row["p99_s"] > p99_bound:
            over.append(f"p99 {row['p99_s'] * 1000:.1f} ms > {p99_bound * 1000:.1f} ms")
        if max_bound is not None and row["max_s"] > max_bound:
            over.append(f"max {row['max_s'] * 1000:.1f} ms > {max_bound * 1000:.1f} ms")
        if over:
            problems.append(f"{name}: {', '.join(over)}")
            for lat, op in per_op[name][-3:][::-1]:
                evidence.append({"violation": f"slow {name}", "latency_s": round(lat, 6),
                                 "record": brief(op.record())})
    summary = "; ".join(f"{name} n={r['n']} p50 {r['p50_s'] * 1000:.1f} ms, "
                        f"p99 {r['p99_s'] * 1000:.1f} ms, max {r['max_s'] * 1000:.1f} ms"
                        for name, r in sorted(table.items(), key=lambda kv: -kv[1]["n"])[:4])
    if problems:
        fig["violations"] = problems
    return verdict_from(NAME, problems_as_cases("bound", problems), fig, summary=summary,
                        fail_summary="; ".join(problems), evidence=evidence,
                        cases_as_evidence=False)
