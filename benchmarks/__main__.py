"""``python -m benchmarks``: every row of SPEC §17, ours beside its reference, in one run.

Usage::

    python -m benchmarks                 # full sizes (1 M messages for search, 100 k migration)
    python -m benchmarks --quick         # small sizes, < 2 min on 2 cores
    python -m benchmarks --only search   # one row (comma-separated list allowed)

Rows (``--only`` names): ``append``, ``writers8``, ``retry``, ``search``, ``migration``,
``chaos``, ``peer``, ``faultyfs``, and the checkpoint lock's cost (issue 12: the same workload
with the lock and with ``HERMES_STATE_CHECKPOINT_LOCK=off``): ``lock-append``,
``lock-writers8``, ``lock-stall``. Each row runs its workload and the reference alternately in the same
process tree, several times, and reports medians with min-max. The table shows what was
measured, our figure, the reference, the ratio, the target and PASS/FAIL; the same figures plus
the machine (CPU count, Python, SQLite, package versions) go to a JSON file
(``benchmarks/results/latest.json`` for a full run, ``quick.json`` with ``--quick``).

The 1 M-message search store takes minutes to build; it is cached under ``--cache`` (default
``$XDG_CACHE_HOME/hermes-state-bench`` or ``~/.cache/hermes-state-bench``) keyed by size and
schema version, and its build time is reported apart from the measurement.

Exit status: 0 when every row with a target passes, 1 otherwise, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import statistics
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_state.schema import SCHEMA_VERSION  # noqa: E402

from . import bench_append, bench_chaos, bench_contention, bench_fs, bench_migration  # noqa
from . import bench_peer  # noqa: E402
from . import bench_lock, bench_search  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Sizes:
    """Workload sizes of one run (``full`` follows SPEC §17; ``quick`` fits in 2 minutes)."""

    append_n: int
    append_runs: int
    per_writer: int
    contention_runs: int
    search_messages: int
    search_runs: int
    migration_messages: int
    migration_runs: int
    chaos_runs: int
    peer_n: int
    peer_runs: int

    def scaled(self, factor: float) -> "Sizes":
        """Every count times ``factor`` (at least 1; 50 for message counts); runs unchanged."""
        def s(v: int, low: int = 50) -> int:
            return max(low, int(v * factor))
        return Sizes(s(self.append_n), self.append_runs, s(self.per_writer, 10),
                     self.contention_runs, s(self.search_messages, 200), self.search_runs,
                     s(self.migration_messages, 200), self.migration_runs, self.chaos_runs,
                     s(self.peer_n), self.peer_runs)


FULL = Sizes(append_n=5000, append_runs=5, per_writer=500, contention_runs=3,
             search_messages=1_000_000, search_runs=7, migration_messages=100_000,
             migration_runs=3, chaos_runs=3, peer_n=5000, peer_runs=3)
QUICK = Sizes(append_n=1000, append_runs=3, per_writer=100, contention_runs=2,
              search_messages=20_000, search_runs=5, migration_messages=10_000,
              migration_runs=2, chaos_runs=1, peer_n=1000, peer_runs=2)


def _stats(vals: list[float]) -> dict:
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals),
            "samples": vals}


def _row(id_: str, what: str, reference: str, unit: str, ours: list[float], ref: list[float],
         ratio: float, target: str, passed: bool | None, **extra) -> dict:
    return {"id": id_, "what": what, "reference": reference, "unit": unit,
            "ours": _stats(ours), "ref": _stats(ref), "ratio": ratio, "target": target,
            "pass": passed, "extra": extra}


# ------------------------------------------------------------------------------------- rows

def row_append(sz: Sizes, cache: Path) -> list[dict]:
    res = bench_append.measure(sz.append_n, sz.append_runs)
    ratio = statistics.median(res["ours"]) / statistics.median(res["bare"])
    return [_row("append", f"append_message x{sz.append_n}, one process",
                 "same SQL via bare sqlite3 (same pragmas, FTS triggers)", "s",
                 res["ours"], res["bare"], ratio, "<= 1.3x", ratio <= 1.3)]


def row_contention(sz: Sizes, cache: Path) -> list[dict]:
    """Rows ``writers8`` and ``retry`` share one measurement (same workload)."""
    res = bench_contention.measure(sz.per_writer, sz.contention_runs)
    tp8 = [r["throughput"] for r in res["ours"]]
    tp1 = [r["throughput"] for r in res["single"]]
    agg = statistics.median(tp8) / statistics.median(tp1)
    errors = sum(r["errors"] for r in res["ours"])
    p50 = statistics.median(r["p50"] for r in res["ours"])
    p99 = statistics.median(r["p99"] for r in res["ours"])
    spread = p99 / p50 if p50 > 0 else float("inf")
    ok8 = agg >= 0.7 and errors == 0 and spread <= 20
    p99_ours = [r["p99"] * 1e3 for r in res["ours"]]
    p99_bare = [r["p99"] * 1e3 for r in res["bare"]]
    ratio = statistics.median(p99_ours) / statistics.median(p99_bare)
    bare_errors = sum(r["errors"] for r in res["bare"])
    n = sz.per_writer * bench_contention.WRITERS
    return [
        _row("writers8", f"append_message, 8 writer processes, {n} msgs total",
             f"one process, same {n} msgs", "msg/s", tp8, tp1, agg,
             ">= 0.7x, 0 errors, p99 <= 20x p50", ok8, errors=errors, p50_ms=p50 * 1e3,
             p99_ms=p99 * 1e3, p99_over_p50=spread,
             error_samples=[e for r in res["ours"] for e in r["error_samples"]][:3]),
        _row("retry", "p99 latency, 8 writers, jittered retry (SessionDB)",
             "same workload, bare sqlite3 timeout=30 s, busy handler only", "ms p99",
             p99_ours, p99_bare, ratio, "<= 0.5x", ratio <= 0.5, bare_errors=bare_errors,
             p50_ours_ms=p50 * 1e3,
             p50_bare_ms=statistics.median(r["p50"] for r in res["bare"]) * 1e3,
             bare_throughput=statistics.median(r["throughput"] for r in res["bare"])),
    ]


def row_search(sz: Sizes, cache: Path) -> list[dict]:
    n = sz.search_messages
    path = cache / f"search-{n}-v{SCHEMA_VERSION}" / "state.db"
    build_s = None
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        t = time.perf_counter()
        tmp = path.with_name("building.db")
        for suffix in ("", "-wal", "-shm"):
            Path(f"{tmp}{suffix}").unlink(missing_ok=True)
        bench_search.build_store(tmp, n, quiet=True)
        os.replace(tmp, path)  # closed cleanly: WAL checkpointed and removed
        build_s = time.perf_counter() - t
    res = bench_search.bench(path, sz.search_runs, quiet=True)
    ours = [q["search_s"] * 1e3 for q in res["queries"]]
    ref = [q["bare_s"] * 1e3 for q in res["queries"]]
    return [_row("search", f"search_messages, {len(ours)} queries, {res['messages']:,} msgs "
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
    ratio = statistics.median(ours) / statistics.median(ref)
    last = res["runs"][-1]
    return [_row("migration", f"open = migration v1 -> v{SCHEMA_VERSION}, "
                 f"{res['messages']:,} msgs", "VACUUM INTO of the same store", "s", ours, ref,
                 ratio, "<= 3x", ratio <= 3.0, store_bytes=res["store_bytes"],
                 steps_s=last["steps"], stats=last["stats"],
                 fts_pending_after_open=last["fts_pending_after_open"],
                 fts_backfill_to_complete_s=last["backfill_s"])]


def row_chaos(sz: Sizes, cache: Path) -> list[dict]:
    res = bench_chaos.measure(sz.chaos_runs)
    wall = [r["wall_s"] for r in res]
    dur = [r["duration_s"] for r in res]
    over = statistics.median(r["overhead_s"] for r in res)
    exits = [r["exit"] for r in res]
    return [_row("chaos", "python -m chaos run, 3 roles, 10 s scenario (wall)",
                 "the scenario's own duration", "s", wall, dur,
                 statistics.median(wall) / statistics.median(dur), "overhead <= 2 s",
                 over <= 2.0 and all(e == 0 for e in exits), overhead_s=over, exits=exits,
                 stderr_tail=[r["stderr_tail"] for r in res if r["stderr_tail"]][:1])]


def row_peer(sz: Sizes, cache: Path) -> list[dict]:
    try:
        res = bench_peer.measure(sz.peer_n, sz.peer_runs)
    except ImportError as exc:
        return [_row("peer", "append_message (peer comparison)", "sqlite-utils insert + FTS",
                     "msg/s", [float("nan")], [float("nan")], float("nan"), "none", None,
                     skipped=f"{exc}: pip install -e '.[bench]'")]
    ours = [sz.peer_n / s for s in res["ours"]]
    peer = [sz.peer_n / s for s in res["peer"]]
    return [_row("peer", f"append_message x{sz.peer_n} throughput",
                 "sqlite-utils insert x1 + FTS triggers (peer)", "msg/s", ours, peer,
                 statistics.median(ours) / statistics.median(peer), "none (info)", None)]


def row_faultyfs(sz: Sizes, cache: Path) -> list[dict]:
    n = max(200, sz.append_n // 2)
    try:
        res = bench_fs.measure(n, sz.append_runs)
    except bench_fs.FsUnavailable as exc:
        return [_row("faultyfs", "append_message on the faulty FUSE filesystem", "plain disk",
                     "msg/s", [float("nan")], [float("nan")], float("nan"), "none", None,
                     skipped=str(exc))]
    ratio = statistics.median(res["fs"]) / statistics.median(res["plain"])
    return [_row("faultyfs", f"append_message x{n} on the faulty FUSE filesystem (chaos.fs)",
                 "the same on a plain directory of the same disk", "msg/s", res["fs"],
                 res["plain"], ratio, "none (info: the FUSE tier's cost)", None)]


def row_lock(sz: Sizes, cache: Path) -> list[dict]:
    """Rows ``lock-append``, ``lock-writers8``, ``lock-stall``: with the checkpoint lock vs
    without it (issue 12), alternating on fresh stores."""
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
        _row("lock-append", f"append_message x{sz.append_n}, one process, with the lock", off,
             "s", a["on"], a["off"], bench_lock.ratio(a["on"], a["off"]), "none (cost)", None),
        _row("lock-writers8", f"8 writer processes, {sz.per_writer} msgs each, with the lock",
             off, "msg/s", tp["on"], tp["off"], bench_lock.ratio(tp["on"], tp["off"]),
             "none (cost)", None, p99_on_ms=statistics.median(p99["on"]),
             p99_off_ms=statistics.median(p99["off"]),
             errors=sum(r["errors"] for m in w for r in w[m])),
        _row("lock-stall", f"{bench_lock.STALL_WRITERS} writers beside a BEGIN IMMEDIATE "
             f"holder ({bench_lock.STALL_HOLD_S:g} s every {bench_lock.STALL_EVERY_S:g} s), "
             "p99, with the lock", off, "ms p99", sp99["on"], sp99["off"],
             bench_lock.ratio(sp99["on"], sp99["off"]), "none (cost)", None,
             throughput_on=statistics.median(stp["on"]),
             throughput_off=statistics.median(stp["off"]),
             errors=sum(r["errors"] for m in st for r in st[m])),
    ]


ROWS: dict[str, tuple[str, Callable[[Sizes, Path], list[dict]]]] = {
    "append": ("append", row_append),
    "writers8": ("contention", row_contention),
    "retry": ("contention", row_contention),
    "search": ("search", row_search),
    "migration": ("migration", row_migration),
    "chaos": ("chaos", row_chaos),
    "peer": ("peer", row_peer),
    "faultyfs": ("faultyfs", row_faultyfs),
    "lock-append": ("lock", row_lock),
    "lock-writers8": ("lock", row_lock),
    "lock-stall": ("lock", row_lock),
}


# ------------------------------------------------------------------------------------ output

def machine() -> dict:
    """CPU count, Python, SQLite and package versions of this run."""
    pkgs = {}
    for name in ("hermes-state", "rich", "PyYAML", "psutil", "sqlite-utils", "pyinstrument"):
        try:
            pkgs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pkgs[name] = None
    try:
        load = os.getloadavg()
    except OSError:
        load = None
    return {"cpu_count": os.cpu_count(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
            "packages": pkgs, "loadavg_at_start": load}


def _fmt(v: float) -> str:
    if v != v:  # NaN
        return "-"
    if abs(v) >= 100:
        return f"{v:,.0f}"
    if abs(v) >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def _cells(r: dict) -> list[str]:
    o, f = r["ours"], r["ref"]
    return [r["id"], f"{_fmt(o['median'])} {r['unit']} ({_fmt(o['min'])}-{_fmt(o['max'])})",
            f"{_fmt(f['median'])} {r['unit']} ({_fmt(f['min'])}-{_fmt(f['max'])})",
            f"{_fmt(r['ratio'])}x", r["target"],
            {True: "PASS", False: "FAIL", None: "info"}[r["pass"]]]


def _note(r: dict) -> str:
    """The extra figures that decide or explain a row (errors, p99/p50, back-fill time)."""
    e = r.get("extra", {})
    if r["id"] == "writers8":
        return (f"{e['errors']} errors; p50 {e['p50_ms']:.2f} ms, p99 {e['p99_ms']:.2f} ms, "
                f"p99/p50 {e['p99_over_p50']:.0f}x")
    if r["id"] == "retry":
        return f"p50 ours {e['p50_ours_ms']:.2f} ms, bare {e['p50_bare_ms']:.2f} ms; " \
               f"bare errors {e['bare_errors']}"
    if r["id"] == "migration" and e.get("fts_backfill_to_complete_s") is not None:
        return (f"{e['stats'].get('fts_deferred', 0):,} rows left to the background FTS "
                f"back-fill, complete {e['fts_backfill_to_complete_s']:.1f} s later")
    if r["id"] == "lock-writers8":
        return (f"p99 {e['p99_on_ms']:.1f} ms with, {e['p99_off_ms']:.1f} ms without; "
                f"{e['errors']} errors")
    if r["id"] == "lock-stall":
        return (f"{e['throughput_on']:.0f} msg/s with, {e['throughput_off']:.0f} without; "
                f"{e['errors']} errors")
    if r["id"] == "chaos":
        return f"overhead {e['overhead_s']:.2f} s, exits {e['exits']}"
    if r["id"] == "search":
        return f"sum of medians {e['sum_search_ms']:.0f} / {e['sum_bare_ms']:.0f} ms"
    return e.get("skipped", "")


_HEAD = ["row", "ours: median (min-max)", "reference: median (min-max)", "ratio", "target",
         "result"]


def render(result: dict, console=None) -> None:
    """Print the rows of ``result`` as a rich table, then what each row compares."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(150, Console().width))
    m = result["machine"]
    load = m.get("loadavg_at_start")
    table = Table(title=f"SPEC §17 benchmarks ({result['mode']}): {m['cpu_count']} CPUs"
                        + (f" (load {load[0]:.1f})" if load else "")
                        + f", Python {m['python']}, SQLite {m['sqlite']}")
    for col in _HEAD:
        table.add_column(col, no_wrap=True)
    colour = {"PASS": "[green]PASS[/]", "FAIL": "[red]FAIL[/]", "info": "info"}
    for r in result["rows"]:
        cells = _cells(r)
        cells[-1] = colour[cells[-1]]
        table.add_row(*cells)
    console.print(table)
    for r in result["rows"]:
        note = _note(r)
        # Plain text, not markup: a note such as "pip install -e '.[bench]'" keeps its brackets.
        console.print(f"  {r['id']}: {r['what']}  vs  {r['reference']}"
                      + (f"  [{note}]" if note else ""), highlight=False, markup=False)
    console.print(f"total {result['total_s']:.1f} s; command: {result['command']}",
                  highlight=False)


def markdown(result: dict) -> str:
    """The table of ``result`` as GitHub markdown (for the README)."""
    lines = ["| " + " | ".join(_HEAD[:1] + ["what", "compared with"] + _HEAD[1:] + ["notes"])
             + " |", "|" + "---|" * (len(_HEAD) + 3)]
    for r in result["rows"]:
        c = _cells(r)
        lines.append("| " + " | ".join([c[0], r["what"], r["reference"]] + c[1:] + [_note(r)])
                     + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks",
                                 description="SPEC §17 benchmarks, side by side.")
    ap.add_argument("--quick", action="store_true", help="small sizes (< 2 min on 2 cores)")
    ap.add_argument("--only", default=None, help=f"rows to run, comma-separated: {', '.join(ROWS)}")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply every workload size (e.g. 0.01 for a smoke run)")
    ap.add_argument("--out", type=Path, default=None, help="results JSON path")
    ap.add_argument("--cache", type=Path, default=None, help="where the search store is cached")
    ap.add_argument("--markdown", type=Path, metavar="RESULTS_JSON", default=None,
                    help="print the table of an earlier results file as markdown and exit")
    args = ap.parse_args(argv)
    if args.markdown is not None:
        print(markdown(json.loads(args.markdown.read_text())))
        return 0
    wanted = list(ROWS) if not args.only else [x.strip() for x in args.only.split(",") if x]
    unknown = [w for w in wanted if w not in ROWS]
    if unknown or args.scale <= 0:
        ap.error(f"unknown row(s) {unknown}; choose from {', '.join(ROWS)}" if unknown
                 else "--scale must be > 0")
    sizes = QUICK if args.quick else FULL
    if args.scale != 1.0:
        sizes = sizes.scaled(args.scale)
    cache = args.cache or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / \
        "hermes-state-bench"
    cache.mkdir(parents=True, exist_ok=True)
    out = args.out or RESULTS / ("quick.json" if args.quick else "latest.json")
    command = "python -m benchmarks" + " ".join([""] + (argv if argv is not None
                                                        else sys.argv[1:]))
    t0 = time.perf_counter()
    result = {"command": command, "mode": "quick" if args.quick else "full",
              "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": machine(), "sizes": sizes.__dict__, "rows": []}
    done_groups: dict[str, list[dict]] = {}
    for name in wanted:
        group, fn = ROWS[name]
        if group not in done_groups:
            t = time.perf_counter()
            print(f"running {group} ...", file=sys.stderr, flush=True)
            done_groups[group] = fn(sizes, cache)
            for r in done_groups[group]:
                r["seconds"] = time.perf_counter() - t
        result["rows"].extend(r for r in done_groups[group] if r["id"] == name)
    result["total_s"] = time.perf_counter() - t0
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    render(result)
    print(f"results: {out}")
    return 0 if all(r["pass"] is not False for r in result["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
