"""The rows of ``python -m benchmarks``: each runs its workload beside its reference.

A row is a dict (see :func:`row`): ``id``, ``what``, ``reference``, ``unit``, ``ours`` and
``ref`` (median, min, max, samples), ``ratio``, ``target``, ``pass`` (True/False, None for an
information row), ``extra`` (the figures that decide or explain it) and optionally ``detail``
(a small table: ``{"title", "columns", "rows"}``). Row functions take the run's
:class:`Sizes` and the cache directory and return a list of rows (rows measured together are
returned together).
"""

from __future__ import annotations

import os
import statistics
from dataclasses import dataclass
from pathlib import Path

from hermes_state.schema.tables import SCHEMA_VERSION

from . import (
    bench_append,
    bench_chaos,
    bench_contention,
    bench_fs,
    bench_growth,
    bench_lock,
    bench_migration,
    bench_open,
    bench_ops,
    bench_peer,
    bench_search,
    bench_suite,
    bench_upstream,
    bigstore,
)


@dataclass
class Sizes:
    """Workload sizes of one run (``FULL`` follows issue 18 and SPEC §17; ``QUICK`` fits in
    2 minutes and covers every row)."""

    append_n: int
    append_runs: int
    per_writer: int
    contention_runs: int
    stall_s: float
    stall_runs: int
    search_messages: int
    search_runs: int
    migration_messages: int
    migration_runs: int
    chaos_runs: int
    peer_n: int
    peer_runs: int
    big_mb: int
    ops_runs: int
    growth_sizes: tuple
    growth_appends: int
    quick_suites: bool
    open_runs: int = 5
    open_n: int = 40
    open_procs: int = 1000
    sync_n: int = 5000
    out_dir: str = ""  # where the run's results (and the growth plot) go

    def scaled(self, factor: float) -> "Sizes":
        """Every count times ``factor`` (with floors); runs unchanged."""
        def s(v: int, low: int = 50) -> int:
            return max(low, int(v * factor))
        return Sizes(s(self.append_n), self.append_runs, s(self.per_writer, 10),
                     self.contention_runs, max(bench_contention.FIRST_HOLD_S
                                               + bench_contention.HOLD_S + 0.5,
                                               self.stall_s * factor), self.stall_runs,
                     s(self.search_messages, 200), self.search_runs,
                     s(self.migration_messages, 200), self.migration_runs, self.chaos_runs,
                     s(self.peer_n), self.peer_runs, s(self.big_mb, 8), self.ops_runs,
                     tuple(s(n, 200) for n in self.growth_sizes), s(self.growth_appends, 100),
                     self.quick_suites, self.open_runs, s(self.open_n, 10), self.open_procs,
                     s(self.sync_n, 200), self.out_dir)


FULL = Sizes(append_n=5000, append_runs=5, per_writer=500, contention_runs=5, stall_s=15.0,
             stall_runs=3, search_messages=1_000_000, search_runs=7, migration_messages=100_000,
             migration_runs=3, chaos_runs=3, peer_n=5000, peer_runs=3, big_mb=1024, ops_runs=3,
             growth_sizes=bench_growth.SIZES_FULL, growth_appends=1000, quick_suites=False)
#: --quick: small sizes, but every ratio a median of several interleaved runs (issue 24 item 5)
QUICK = Sizes(append_n=1000, append_runs=5, per_writer=250, contention_runs=3, stall_s=3.5,
              stall_runs=1, search_messages=20_000, search_runs=5, migration_messages=10_000,
              migration_runs=3, chaos_runs=1, peer_n=1000, peer_runs=2, big_mb=24, ops_runs=3,
              growth_sizes=bench_growth.SIZES_QUICK, growth_appends=200, quick_suites=True,
              open_runs=3, open_n=20, open_procs=1000, sync_n=2000)


def stats(vals: list[float]) -> dict:
    """``{"median", "min", "max", "samples"}`` (NaN for an empty list)."""
    if not vals:
        nan = float("nan")
        return {"median": nan, "min": nan, "max": nan, "samples": []}
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "samples": vals}


def row(id_: str, what: str, reference: str, unit: str, ours: list[float], ref: list[float],
        ratio: float, target: str, passed: bool | None, detail: dict | None = None,
        **extra) -> dict:
    """One row of the table (module docstring)."""
    out = {"id": id_, "what": what, "reference": reference, "unit": unit, "ours": stats(ours),
           "ref": stats(ref), "ratio": ratio, "target": target, "pass": passed, "extra": extra}
    if detail is not None:
        out["detail"] = detail
    return out


def _med(vals) -> float:
    vals = list(vals)
    return statistics.median(vals) if vals else float("nan")


# ------------------------------------------------------------------------------- append

#: issue 24 item 4 (SPEC §17 asked <= 1.3x; the issue wins)
APPEND_TARGET = 1.15


def row_append(sz: Sizes, cache: Path) -> list[dict]:
    res = bench_append.measure(sz.append_n, sz.append_runs)
    ratio = _med(res["ours"]) / _med(res["bare"])
    cpu_ratio = _med(res["ours_cpu"]) / _med(res["bare_cpu"])
    spec_ratio = _med(res["ours"]) / _med(res["bound"])
    n = sz.append_n
    ok = ratio <= APPEND_TARGET
    # The SPEC bound (bare + the system calls of the per-write checks): a miss within the
    # target of it is the checks' own cost, EXPLAINED (benchmarks/verdicts.py)
    explained = ({"explained": f"within {APPEND_TARGET}x of its SPEC bound ({spec_ratio:.2f}x)"}
                 if not ok and spec_ratio <= APPEND_TARGET else {})
    return [row("append", f"append_message x{n}, one process",
                "same SQL via bare sqlite3 (same pragmas, FTS triggers)", "s", res["ours"],
                res["bare"], ratio, f"<= {APPEND_TARGET}x", ok,
                cpu_ratio=cpu_ratio, ours_cpu_us=_med(res["ours_cpu"]) / n * 1e6,
                bare_cpu_us=_med(res["bare_cpu"]) / n * 1e6,
                spec_s=stats(res["bound"]), spec_ratio=spec_ratio,
                spec_what=bench_append.BOUND_WHAT,
                spec_cpu_ratio=_med(res["ours_cpu"]) / _med(res["bound_cpu"]), **explained,
                note=f"CPU per append {_med(res['ours_cpu']) / n * 1e6:.0f} us vs "
                     f"{_med(res['bare_cpu']) / n * 1e6:.0f} us ({cpu_ratio:.2f}x); SPEC "
                     f"bound ({bench_append.BOUND_WHAT}): "
                     f"{_med(res['bound']) / n * 1e6:.0f} us per append, ours "
                     f"{spec_ratio:.2f}x of it"
                     + (f" (EXPLAINED: {explained['explained']})" if explained else ""))]


def row_walsync(sz: Sizes, cache: Path) -> list[dict]:
    """The loss window's time bound at its cost (issue 24 item 1)."""
    res = bench_append.measure_sync(sz.sync_n, sz.append_runs)
    ratio = _med(res["on"]) / _med(res["off"])
    return [row("walsync", f"append_message x{sz.sync_n}, one process, WAL synced at most 1 s "
                "after a commit (NORMAL's time bound)", "the same with HERMES_STATE_WAL_SYNC_S=off",
                "s", res["on"], res["off"], ratio, "<= 1.05x", ratio <= 1.05,
                syncs=res["syncs"],
                note=f"{_med(res['syncs']):.0f} WAL syncs per run (a sync thread, outside "
                     "every lock a writer takes)")]


def row_open(sz: Sizes, cache: Path) -> list[dict]:
    """``open`` beside upstream 0.19.0, ``open-procs`` with 1,000 idle processes (issue 24
    item 2): CPU per open + close, in new processes, alternating."""
    out = []
    try:
        res = bench_open.measure_upstream(sz.open_runs, sz.open_n, cache)
        ours = [r["cpu_ms"] for r in res["ours"]]
        up = [r["cpu_ms"] for r in res["upstream"]]
        ratio = _med(ours) / _med(up)
        out.append(row("open", "SessionDB open + close of a settled store, CPU (refusal scan, "
                       "pragmas, settled check, generation)",
                       f"upstream Hermes {bench_open.UPSTREAM_VERSION}'s SessionDB, same",
                       "ms CPU", ours, up, ratio, "<= 1.5x", ratio <= 1.5,
                       wall_ms=_med(r["wall_ms"] for r in res["ours"]),
                       upstream_wall_ms=_med(r["wall_ms"] for r in res["upstream"]),
                       full_scan_ms=_med(r["full_scan_ms"] for r in res["ours"]),
                       procs=_med(r["procs"] for r in res["ours"]),
                       note=f"the scan of every process (doctor's) costs "
                            f"{_med(r['full_scan_ms'] for r in res['ours']):.1f} ms here "
                            f"({_med(r['procs'] for r in res['ours']):.0f} processes)"))
    except bench_open.Unavailable as exc:
        nan = float("nan")
        out.append(row("open", "SessionDB open + close, CPU", "upstream's SessionDB", "ms CPU",
                       [nan], [nan], nan, "<= 1.5x", None, skipped=str(exc)))
    pr = bench_open.measure_procs(sz.open_runs, sz.open_n, sz.open_procs)
    busy = [r["cpu_ms"] for r in pr["busy"]]
    quiet = [r["cpu_ms"] for r in pr["quiet"]]
    ratio = _med(busy) / _med(quiet)
    out.append(row("open-procs", f"SessionDB open + close, CPU, beside {sz.open_procs:,} idle "
                   "processes holding open files", "the same without them", "ms CPU", busy,
                   quiet, ratio, "<= 1.2x (flat)", ratio <= 1.2,
                   full_scan_busy_ms=_med(r["full_scan_ms"] for r in pr["busy"]),
                   full_scan_quiet_ms=_med(r["full_scan_ms"] for r in pr["quiet"]),
                   note=f"the scan of every process: "
                        f"{_med(r['full_scan_ms'] for r in pr['busy']):.1f} ms beside them, "
                        f"{_med(r['full_scan_ms'] for r in pr['quiet']):.1f} ms without"))
    return out


# --------------------------------------------------------------------------- contention

def _causes_note(c: dict) -> str:
    retries = ", ".join(f"{k}: {v}" for k, v in sorted(c["retries"].items())) or "none"
    ck = c["checkpoints"]
    return (f"retries by statement: {retries}; writes that met a checkpoint holding the lock: "
            f"{c['met_writes']} of {c['writes']} ({c['met_total']} meetings); checkpoints "
            f"{ck.get('n', 0)} ({ck.get('skipped', 0)} skipped), "
            f"{ck.get('s', 0.0) * 1e3:.0f} ms inside wal_checkpoint (max "
            f"{ck.get('max_s', 0.0) * 1e3:.0f} ms)")


#: issue 24 item 3: 8-writer p99 <= 1.3x the busy handler's, msg/s >= 0.85x of it
P99_TARGET = 1.3
P99_MSGS_TARGET = 0.85


def p99_spec_bound(p99_ms: float, msgs: float, bound_p99_ms: float, bound_msgs: float,
                   errors: int, *, ok: bool, bound_errors: int = 0) -> dict:
    """The writers8-p99 row beside its SPEC bound (``bench_contention`` config ``bound``:
    busy30 + what SPEC's per-write checks cannot do without). A miss (``ok`` False) within the
    row's targets of the bound, with no error on either side (``errors``: ours,
    ``bound_errors``: the bound's; a bound whose writes failed measured something else), is
    the checks' own cost: ``explained`` is set (benchmarks/verdicts.py EXPLAINED).

    Returns:
        ``{"spec_what", "spec_p99_ms", "spec_throughput", "spec_ratio", "throughput_vs_spec"}``
        and ``"explained"`` when explained.
    """
    out = {"spec_what": bench_contention.BOUND_WHAT, "spec_p99_ms": bound_p99_ms,
           "spec_throughput": bound_msgs,
           "spec_ratio": p99_ms / bound_p99_ms if bound_p99_ms > 0 else float("nan"),
           "throughput_vs_spec": msgs / bound_msgs if bound_msgs > 0 else float("nan")}
    if not ok and errors == 0 and bound_errors == 0 and out["spec_ratio"] <= P99_TARGET \
            and out["throughput_vs_spec"] >= P99_MSGS_TARGET:
        out["explained"] = (f"p99 within {P99_TARGET}x of its SPEC bound "
                            f"({out['spec_ratio']:.2f}x), msg/s {out['throughput_vs_spec']:.2f}x "
                            f"of it")
    return out


def row_contention(sz: Sizes, cache: Path) -> list[dict]:
    """``writers8`` and ``writers8-p99`` from one measurement (the lock's cost with 8 writers is
    the ``lock-writers8`` row)."""
    res = bench_contention.measure_writers8(
        sz.per_writer, sz.contention_runs, configs=("ours", "ours-nolock", "busy30", "bound"))
    n = sz.per_writer * bench_contention.WRITERS
    tp1 = [r["throughput"] for r in res["single"]]
    busy = res["busy30"]
    p99_busy = [r["p99"] * 1e3 for r in busy]
    samples = res["ours"]  # timed as a user's process runs: no event listener
    instrumented = res["ours-events"]  # the same workload, its writers counting retry causes
    tp = [r["throughput"] for r in samples]
    agg = _med(tp) / _med(tp1)
    errors = sum(r["errors"] for r in samples + instrumented)
    p99 = [r["p99"] * 1e3 for r in samples]
    p99_ratio = _med(p99) / _med(p99_busy)
    causes = bench_contention.merged_causes(instrumented)
    extra = dict(errors=errors, p50_ms=_med(r["p50"] for r in samples) * 1e3,
                 p99_ms=_med(p99), max_ms=_med(r["max"] for r in samples) * 1e3,
                 p99_busy30_ms=_med(p99_busy), p99_ratio=p99_ratio,
                 busy30_throughput=_med(r["throughput"] for r in busy),
                 busy30_errors=sum(r["errors"] for r in busy), causes=causes,
                 p99_without_ckpt_ms=_med(r["p99_without_ckpt"] for r in samples) * 1e3,
                 busy30_checkpoints_busy=sum(r["bare_checkpoints"].get("busy", 0) for r in busy),
                 busy30_checkpoints_ran=sum(r["bare_checkpoints"].get("ran", 0) for r in busy),
                 busy30_p99_without_ckpt_ms=_med(r["p99_without_ckpt"] for r in busy) * 1e3,
                 causes_note=(f"counted in the runs with an event listener (the timed runs "
                              f"have none, as a user's process; these ran "
                              f"{_med(r['throughput'] for r in instrumented):,.0f} msg/s, p99 "
                              f"{_med(r['p99'] for r in instrumented) * 1e3:.1f} ms): "
                              + _causes_note(causes)),
                 error_samples=[e for r in samples + instrumented
                                for e in r["error_samples"]][:3],
                 events_p99_ms=_med(r["p99"] for r in instrumented) * 1e3,
                 events_throughput=_med(r["throughput"] for r in instrumented),
                 p99_nolock_ms=_med(r["p99"] for r in res["ours-nolock"]) * 1e3,
                 nolock_throughput=_med(r["throughput"] for r in res["ours-nolock"]))
    extra["p99_nolock_ratio"] = extra["p99_nolock_ms"] / extra["p99_busy30_ms"]
    extra["throughput_vs_busy30"] = _med(tp) / extra["busy30_throughput"]
    extra["write_locks"] = bench_contention.merged_write_locks(instrumented)
    bound = res["bound"]
    p99_ok = p99_ratio <= P99_TARGET and extra["throughput_vs_busy30"] >= P99_MSGS_TARGET \
        and errors == 0
    spec_errors = sum(r["errors"] for r in bound)
    spec = p99_spec_bound(extra["p99_ms"], _med(tp), _med(r["p99"] for r in bound) * 1e3,
                          _med(r["throughput"] for r in bound), errors, ok=p99_ok,
                          bound_errors=spec_errors)
    # "explained" goes on the p99 row only (the writers8 row shares ``extra``): taken out first
    explained = {"explained": spec.pop("explained")} if "explained" in spec else {}
    extra.update(spec, spec_errors=spec_errors)
    return [
        row("writers8", f"append_message, 8 writer processes, {n} msgs total",
            f"one process, same {n} msgs", "msg/s", tp, tp1, agg, ">= 0.8x, 0 errors",
            agg >= 0.8 and errors == 0, **extra),
        row("writers8-p99", "p99 append latency, 8 writer processes (SessionDB)",
            "same workload, bare sqlite3 timeout=30 s, busy handler only", "ms p99", p99,
            p99_busy, p99_ratio, f"<= {P99_TARGET}x, msg/s >= {P99_MSGS_TARGET}x, 0 errors",
            p99_ok, **extra, **explained),
    ]


def row_stall(sz: Sizes, cache: Path) -> list[dict]:
    res = bench_contention.measure_stall(sz.stall_s, sz.stall_runs)
    hold = bench_contention.HOLD_S
    limit = hold + 0.5
    ours = res["ours"]
    max_ours = [r["max"] for r in ours]
    max_busy = [r["max"] for r in res["busy30"]]
    errors = sum(r["errors"] for r in ours)
    ok = errors == 0 and max(max_ours) <= limit
    names = {"ours": "SessionDB (1 s busy timeout + jittered retry)",
             "ours-nolock": "SessionDB, checkpoint lock off",
             "naive": "bare sqlite3, timeout 1 s, no retry",
             "busy30": "bare sqlite3, timeout 30 s (busy handler only)"}
    detail_rows = []
    for cfg, samples in res.items():
        detail_rows.append([names.get(cfg, cfg), sum(r["errors"] for r in samples),
                            round(_med(r["p99"] for r in samples) * 1e3, 1),
                            round(max(r["max"] for r in samples) * 1e3, 1),
                            round(min(r["fairness"] for r in samples), 2),
                            round(_med(r["throughput"] for r in samples))])
    holds = [b - a for r in ours for a, b in r["holds"]]
    causes = bench_contention.merged_causes(ours)
    return [row("stall", f"8 writers for {sz.stall_s:g} s while one process holds the write "
                f"lock {hold:g} s every {bench_contention.PERIOD_S:g} s: worst append latency",
                "the same with the 30 s busy handler alone", "s max", max_ours, max_busy,
                _med(max_ours) / _med(max_busy),
                f"0 errors, max <= {limit:g} s", ok, errors=errors,
                holds=len(holds), hold_s=_med(holds), causes=causes,
                causes_note=_causes_note(causes),
                detail={"title": "stall: every configuration (worst run; fairness = slowest "
                                 "writer's appends / fastest's)",
                        "columns": ["configuration", "caller errors", "p99 ms", "max ms",
                                    "fairness", "msg/s"],
                        "rows": detail_rows})]


def row_lock(sz: Sizes, cache: Path) -> list[dict]:
    """Rows ``lock-append``, ``lock-writers8``, ``lock-stall``: with the checkpoint lock vs
    without it (issue 12), alternating on fresh stores (:mod:`benchmarks.bench_lock`)."""
    a = bench_lock.measure_append(sz.append_n, sz.append_runs)
    w = bench_lock.measure_writers(sz.per_writer, sz.contention_runs)
    st = bench_lock.measure_writers(sz.per_writer, sz.contention_runs,
                                    bench_lock.STALL_WRITERS, stall=True)
    tp = {m: [r["throughput"] for r in w[m]] for m in w}
    p99 = {m: [r["p99"] * 1e3 for r in w[m]] for m in w}
    sp99 = {m: [r["p99"] * 1e3 for r in st[m]] for m in st}
    stp = {m: [r["throughput"] for r in st[m]] for m in st}
    off = "the same, HERMES_STATE_CHECKPOINT_LOCK=off"
    return [
        row("lock-append", f"append_message x{sz.append_n}, one process, with the lock", off,
            "s", a["on"], a["off"], bench_lock.ratio(a["on"], a["off"]), "none (cost)", None),
        row("lock-writers8", f"8 writer processes, {sz.per_writer} msgs each, with the lock",
            off, "msg/s", tp["on"], tp["off"], bench_lock.ratio(tp["on"], tp["off"]),
            "none (cost)", None, p99_on_ms=_med(p99["on"]), p99_off_ms=_med(p99["off"]),
            errors=sum(r["errors"] for m in w for r in w[m])),
        row("lock-stall", f"{bench_lock.STALL_WRITERS} writers beside a BEGIN IMMEDIATE "
            f"holder ({bench_lock.STALL_HOLD_S:g} s every {bench_lock.STALL_EVERY_S:g} s), "
            "p99, with the lock", off, "ms p99", sp99["on"], sp99["off"],
            bench_lock.ratio(sp99["on"], sp99["off"]), "none (cost)", None,
            throughput_on=_med(stp["on"]), throughput_off=_med(stp["off"]),
            errors=sum(r["errors"] for m in st for r in st[m])),
    ]


# ---------------------------------------------------------------------------- big store

#: --quick: the least time the extra size must add to a reference's run for the ratio of the
#: size-dependent parts to be judged (below it, both differences are mostly noise).
NET_MIN_S = 0.05


def spec_bound(name: str, r: dict, fixed_r: dict | None, fixed_extra: dict,
               ok: bool | None, sound: bool) -> dict:
    """The SPEC bound's figures of op ``name`` (``{}`` for an op without one).

    ``r`` and ``fixed_r``: the op's measurements (``bench_ops.measure``) on the store and on
    the 1 MiB store (--quick; None in the full run). The ratio is of whole commands, or, when
    the row's ratio is of the size-dependent parts (``fixed_extra`` has ``raw_ratio`` and no
    ``unmeasured``), of the size-dependent parts too: ours' CLI start-up is not compared with
    a bound that has none of it. A failed row (``ok is False``) that is ``sound`` and within
    the target of its bound gets ``explained`` (the miss is the work SPEC asks beyond the
    issue's reference: benchmarks/verdicts.py EXPLAINED).
    """
    if not r.get("spec"):
        return {}
    spec = {"spec_s": stats(r["spec"]), "spec_ratio": _med(r["ours"]) / _med(r["spec"]),
            "spec_what": bench_ops.SPEC_WHAT[name], "spec_rss_mb": max(r["spec_rss_mb"])}
    if fixed_r and fixed_r.get("spec") and "raw_ratio" in fixed_extra \
            and "unmeasured" not in fixed_extra:
        net_spec = _med(r["spec"]) - _med(fixed_r["spec"])
        if net_spec >= NET_MIN_S:
            spec["fixed_spec_s"] = _med(fixed_r["spec"])
            spec["spec_raw_ratio"] = spec["spec_ratio"]
            spec["spec_ratio"] = (_med(r["ours"]) - _med(fixed_r["ours"])) / net_spec
    if ok is False and sound and spec["spec_ratio"] <= bench_ops.TARGET:
        spec["explained"] = (f"within {bench_ops.TARGET}x of its SPEC bound "
                             f"({spec['spec_ratio']:.2f}x)")
    return spec


def row_ops(sz: Sizes, cache: Path) -> list[dict]:
    store, info = bigstore.cached(cache, sz.big_mb)
    build_s = info["build_s"] if info["built_now"] else None
    inline = bench_ops.inline_store(store, store.parent.with_name(store.parent.name + "-inline"))
    res = bench_ops.measure(store, sz.ops_runs, inline=inline, largest=info["largest_session"])
    meta = res.pop("_meta")
    refs = {"doctor": "PRAGMA integrity_check", "backup": "the online backup API (one step)",
            "optimize": "VACUUM", "optimize-storage": "VACUUM INTO + FTS rebuild (v23 tables)",
            "recover": "SELECT rowid, * of every canonical table",
            "prune": "the same sessions deleted with bare DELETEs (FTS triggers fire)",
            "export": "bare SELECT of its row and messages written as JSON objects"}
    whats = {"doctor": "doctor --json", "backup": "backup",
             "optimize": "sessions optimize", "optimize-storage":
             "sessions optimize-storage (upstream inline FTS layout -> v23)",
             "recover": "sessions recover --inspect-only",
             "prune": f"sessions prune of {meta['prune_sessions']} sessions (10 %)",
             "export": f"sessions export of the largest session ({meta['largest']})"}
    out = []
    size = f"{meta['store_bytes'] / 2**20:,.0f} MiB store"
    fixed = None
    if sz.quick_suites:
        # --quick: on a small store each command's fixed cost (process start, imports, the
        # scans and checks it makes whatever the size) dominates: the same commands run on a
        # 1 MiB store, in the same alternation, and the ratio is of what the extra size costs
        # each side (issue 24 item 5); the fixed costs are shown apart.
        tiny, tiny_info = bigstore.cached(cache, 1)
        fixed = bench_ops.measure(tiny, sz.ops_runs, largest=tiny_info["largest_session"])
        fixed.pop("_meta")
    for name, r in res.items():
        ratio = _med(r["ours"]) / _med(r["bare"])
        fixed_extra = {}
        if fixed is not None and name in fixed:
            f = fixed[name]
            net_ours = _med(r["ours"]) - _med(f["ours"])
            net_bare = _med(r["bare"]) - _med(f["bare"])
            fixed_extra = {"raw_ratio": ratio, "fixed_ours_s": _med(f["ours"]),
                           "fixed_bare_s": _med(f["bare"])}
            if net_bare >= NET_MIN_S and net_ours > 0:
                ratio = net_ours / net_bare
            else:
                # What the size adds to bare's time is within its noise here: a ratio of two
                # small differences says nothing (issue 24 item 5). Shown, not judged.
                fixed_extra["unmeasured"] = (
                    f"the size adds {net_bare * 1000:.0f} ms to the reference here (under "
                    f"{NET_MIN_S * 1000:.0f} ms): not judged at this size, the full run judges it")
        rss = max(r["ours_rss_mb"])
        sound = rss <= bench_ops.RSS_LIMIT_MB and all(e == 0 for e in r["exits"])
        ok = (ratio <= bench_ops.TARGET and sound) if "unmeasured" not in fixed_extra \
            else (None if sound else False)
        spec = spec_bound(name, r, fixed.get(name) if fixed is not None else None,
                          fixed_extra, ok, sound)
        if name == "recover":
            # issue 24: the source is measured in the state a user's is in (bench_ops.settle)
            fixed_extra["prep"] = (
                f"the source was copied into place, then left until its ctime was "
                f"{bench_ops.SETTLE_S:g} s old before any side's first run (the youngest at a "
                f"timed run: {min(r['source_age_s']):.1f} s): ours re-hashes a source changed "
                f"within 1 s of its start, which a user's store is not and SPEC §14 does not ask")
        out.append(row(name, f"{whats[name]}, {size}", refs[name], "s", r["ours"], r["bare"],
                       ratio, f"<= {bench_ops.TARGET}x, RSS <= {bench_ops.RSS_LIMIT_MB:g} MB",
                       ok, rss_mb=rss, bare_rss_mb=max(r["bare_rss_mb"]), exits=r["exits"],
                       stderr_tail=r["stderr"][-300:], store_build_s=build_s,
                       sessions=info.get("sessions"), messages=info.get("messages"), **spec,
                       **fixed_extra))
    return out


# ------------------------------------------------------------------------------- growth

#: growth-search is judged at stores of at least this many messages. Below it a bare query
#: costs ~0.3 ms (1,000 msgs, 20 hits) and ours' fixed per-query work SPEC §6.1 asks for (the
#: snapshot, the meta reads, three context messages per hit: ~0.15 ms) is the ratio, not the
#: store's growth; that point is shown (``not_judged``) with its fixed cost per query. The full
#: run's sizes (10 k -> 1 M) are all judged.
SEARCH_JUDGED_FROM = 5_000
#: --quick: runs of every query per size (a query of ~1 ms on a loaded machine: the median of
#: five was one preempted run away from a miss; 21 cost about a second more in all).
QUICK_SEARCH_RUNS = 21

def search_judged(points: list[dict]) -> tuple[list[dict], list[dict]]:
    """``(judged, shown)``: the growth points growth-search is judged on (stores of at least
    :data:`SEARCH_JUDGED_FROM` messages; the largest when none is that big) and, for the others,
    ``{"messages", "ratio", "fixed_ms_per_query", "bare_ms_per_query"}`` (ours' fixed cost
    per query: ours' summed medians minus bare's, over the queries)."""
    judged = [p for p in points if p["messages"] >= SEARCH_JUDGED_FROM] or points[-1:]
    n = len(bench_search.QUERIES)
    shown = [{"messages": p["messages"], "ratio": round(p["search"]["ratio"], 3),
              "fixed_ms_per_query": round((p["search"]["sum_ours_ms"]
                                           - p["search"]["sum_bare_ms"]) / n, 3),
              "bare_ms_per_query": round(p["search"]["sum_bare_ms"] / n, 3)}
             for p in points if p not in judged]
    return judged, shown


def row_growth(sz: Sizes, cache: Path) -> list[dict]:
    res = bench_growth.measure(tuple(sz.growth_sizes), cache, sz.growth_appends,
                               max(sz.search_runs, QUICK_SEARCH_RUNS) if sz.quick_suites
                               else sz.search_runs)
    out_dir = Path(sz.out_dir) if sz.out_dir else Path(__file__).resolve().parent / "results"
    png = bench_growth.plot(res, out_dir / ("growth-quick.png" if sz.quick_suites
                                            else "growth.png"))
    pts = res["points"]
    first, last = pts[0], pts[-1]
    a_ratio = last["append"]["ours"]["p50"] / first["append"]["ours"]["p50"]
    judged, shown = search_judged(pts)
    s_ratios = [p["search"]["ratio"] for p in judged]
    detail = {"title": "growth: latency per call (ms) as the store grows",
              "columns": ["messages", "append p50 ours/bare", "append p95 ours/bare",
                          "search p50 ours/bare", "search p95 ours/bare", "search ratio"],
              "rows": [[f"{p['messages']:,}",
                        f"{p['append']['ours']['p50']:.3f} / {p['append']['bare']['p50']:.3f}",
                        f"{p['append']['ours']['p95']:.2f} / {p['append']['bare']['p95']:.2f}",
                        f"{p['search']['ours']['p50']:.2f} / {p['search']['bare']['p50']:.2f}",
                        f"{p['search']['ours']['p95']:.2f} / {p['search']['bare']['p95']:.2f}",
                        f"{p['search']['ratio']:.2f}x"] for p in pts]}
    s_sizes = f"{judged[0]['messages']:,} -> {judged[-1]['messages']:,} msgs"
    return [
        row("growth-append", f"append_message p50 at {last['messages']:,} msgs",
            f"the same at {first['messages']:,} msgs", "ms p50",
            [last["append"]["ours"]["p50"]], [first["append"]["ours"]["p50"]], a_ratio,
            "<= 1.2x", a_ratio <= 1.2, detail=detail, png=str(png) if png else None,
            points=pts),
        row("growth-search", f"search_messages vs bare FTS5 at every size ({s_sizes}; worst "
            "ratio of summed per-query medians)", "bare FTS5 MATCH + snippet() at each size",
            "ratio", s_ratios, [1.0], max(s_ratios),
            "<= 1.5x at every size" + (f" >= {SEARCH_JUDGED_FROM:,} msgs" if shown else ""),
            max(s_ratios) <= 1.5,
            **({"not_judged": shown} if shown else {})),
    ]


# ------------------------------------------------------------------------------ suites

def row_suites(sz: Sizes, cache: Path) -> list[dict]:
    res = bench_suite.measure(quick=sz.quick_suites)
    out = []
    for key, rid, limit in (("gate", "gate", 600.0), ("pytest", "pytest", 240.0)):
        r = res[key]
        out.append(row(rid, r["what"], f"target {limit:g} s on 2 cores", "s", [r["wall_s"]],
                       [limit], r["wall_s"] / limit, f"<= {limit:g} s" +
                       (" (quick: a subset, info)" if sz.quick_suites else ""),
                       None if sz.quick_suites else (r["wall_s"] <= limit and r["exit"] == 0),
                       exit=r["exit"], slowest=r["slowest"], command=r["command"],
                       detail={"title": f"{rid}: the ten slowest", "columns": ["s", "name"],
                               "rows": [[f"{s:.1f}", n] for s, n in r["slowest"]]}))
    return out


# ------------------------------------------------------------------ rows kept from SPEC §17

def row_search(sz: Sizes, cache: Path) -> list[dict]:
    n = sz.search_messages
    path, build_s = bench_growth.cached_store(cache, n)
    res = bench_search.bench(path, sz.search_runs, quiet=True)
    ours = [q["search_s"] * 1e3 for q in res["queries"]]
    ref = [q["bare_s"] * 1e3 for q in res["queries"]]
    return [row("search", f"search_messages, {len(ours)} queries, {res['messages']:,} msgs "
                "(ratio of the summed per-query medians)",
                "bare FTS5 MATCH + snippet() on the same index", "ms/query", ours, ref,
                res["ratio"], "<= 1.5x", res["ratio"] <= 1.5, store=str(path),
                store_build_s=build_s, sum_search_ms=res["search_s"] * 1e3,
                sum_bare_ms=res["bare_s"] * 1e3, geomean=res["geomean"],
                queries=res["queries"])]


def row_migration(sz: Sizes, cache: Path) -> list[dict]:
    res = bench_migration.measure(sz.migration_messages, runs=sz.migration_runs)
    ours = [r["migrate_s"] for r in res["runs"]]
    ref = [r["vacuum_s"] for r in res["runs"]]
    ratio = _med(ours) / _med(ref)
    last = res["runs"][-1]
    return [row("migration", f"open = migration v1 -> v{SCHEMA_VERSION}, "
                f"{res['messages']:,} msgs", "VACUUM INTO of the same store", "s", ours, ref,
                ratio, "<= 3x", ratio <= 3.0, store_bytes=res["store_bytes"],
                steps_s=last["steps"], stats=last["stats"],
                fts_pending_after_open=last["fts_pending_after_open"],
                fts_backfill_to_complete_s=last["backfill_s"])]


def row_chaos(sz: Sizes, cache: Path) -> list[dict]:
    res = bench_chaos.measure(sz.chaos_runs)
    wall = [r["wall_s"] for r in res]
    dur = [r["duration_s"] for r in res]
    over = _med(r["overhead_s"] for r in res)
    exits = [r["exit"] for r in res]
    return [row("chaos", "python -m chaos run, 3 roles, 10 s scenario (wall)",
                "the scenario's own duration", "s", wall, dur, _med(wall) / _med(dur),
                "overhead <= 2 s", over <= 2.0 and all(e == 0 for e in exits), overhead_s=over,
                exits=exits, stderr_tail=[r["stderr_tail"] for r in res if r["stderr_tail"]][:1])]


def row_peer(sz: Sizes, cache: Path) -> list[dict]:
    try:
        res = bench_peer.measure(sz.peer_n, sz.peer_runs)
    except ImportError as exc:
        nan = float("nan")
        return [row("peer", "append_message (peer comparison)", "sqlite-utils insert + FTS",
                    "msg/s", [nan], [nan], nan, "none", None,
                    skipped=f"{exc}: pip install -e '.[bench]'")]
    ours = [sz.peer_n / s for s in res["ours"]]
    peer = [sz.peer_n / s for s in res["peer"]]
    return [row("peer", f"append_message x{sz.peer_n} throughput",
                "sqlite-utils insert x1 + FTS triggers (peer)", "msg/s", ours, peer,
                _med(ours) / _med(peer), "none (info)", None)]


def row_faultyfs(sz: Sizes, cache: Path) -> list[dict]:
    n = max(200, sz.append_n // 2)
    try:
        res = bench_fs.measure(n, sz.append_runs)
    except bench_fs.FsUnavailable as exc:
        nan = float("nan")
        return [row("faultyfs", "append_message on the faulty FUSE filesystem", "plain disk",
                    "msg/s", [nan], [nan], nan, "none", None, skipped=str(exc))]
    ratio = _med(res["fs"]) / _med(res["plain"])
    return [row("faultyfs", f"append_message x{n} on the faulty FUSE filesystem (chaos.fs)",
                "the same on a plain directory of the same disk", "msg/s", res["fs"],
                res["plain"], ratio, "none (info: the FUSE tier's cost)", None)]


#: ``--only`` name -> (group, function); rows of one group are measured together.
#: ``python -m benchmarks`` rows against upstream 0.19.0's own SessionDB (issue 23 item 5):
#: (row id, figure key, what, unit, higher is better).
UPSTREAM_ROWS = (
    ("upstream-append", "append_same", "append_message, synchronous=NORMAL on both", "msg/s",
     True),
    ("upstream-append-default", "append_default", "append_message, each side's default "
     "synchronous (ours NORMAL, upstream SQLite's FULL)", "msg/s", True),
    ("upstream-writers4", "writers4", "4 writer processes appending, NORMAL", "msg/s", True),
    ("upstream-writers8", "writers8", "8 writer processes appending, NORMAL", "msg/s", True),
    ("upstream-search", "search", "search_messages (a word in every message)", "s", False),
    ("upstream-get", "get_messages", "get_messages of one session", "s", False),
    ("upstream-list", "list_sessions_rich", "list_sessions_rich(limit=50), 200 sessions", "s",
     False),
    ("upstream-open", "open", "SessionDB() of a settled store", "s", False),
)


def row_upstream(sz: Sizes, cache: Path) -> list[dict]:
    """Ours beside upstream 0.19.0 on the same work (SKIPPED rows when it is not cached)."""
    from hermes_state.testing import upstream_release as ur

    try:
        res = bench_upstream.measure(sz.peer_n, sz.per_writer, 1)
    except ur.NotCached as exc:
        nan = float("nan")
        return [row(rid, what, f"upstream {ur.BASELINE}", unit, [nan], [nan], nan,
                    "none (info)", None, skipped=str(exc))
                for rid, _key, what, unit, _hi in UPSTREAM_ROWS]
    out = []
    for rid, key, what, unit, _higher in UPSTREAM_ROWS:
        ours, up = res[f"{key}_ours"], res[f"{key}_up"]
        out.append(row(rid, what, f"upstream {ur.BASELINE} SessionDB, same work", unit, ours,
                       up, _med(ours) / _med(up), "none (info)", None,
                       n=sz.peer_n, per_writer=sz.per_writer))
    return out


ROWS = {
    "append": ("append", row_append),
    "walsync": ("walsync", row_walsync),
    "open": ("open", row_open), "open-procs": ("open", row_open),
    "writers8": ("contention", row_contention), "writers8-p99": ("contention", row_contention),
    "stall": ("stall", row_stall),
    "lock-append": ("lock", row_lock), "lock-writers8": ("lock", row_lock),
    "lock-stall": ("lock", row_lock),
    **{name: ("ops", row_ops) for name in bench_ops.BARE},
    "growth-append": ("growth", row_growth), "growth-search": ("growth", row_growth),
    "search": ("search", row_search), "migration": ("migration", row_migration),
    "chaos": ("chaos", row_chaos), "gate": ("suites", row_suites),
    "pytest": ("suites", row_suites), "peer": ("peer", row_peer),
    "faultyfs": ("faultyfs", row_faultyfs),
    **{rid: ("upstream", row_upstream) for rid, *_ in UPSTREAM_ROWS},
}


def loadavg() -> list[float] | None:
    """``os.getloadavg()`` as a list (None where unavailable)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None
