"""``python -m benchmarks``: every row, ours beside its reference, in one run (issue 18, SPEC §17).

Usage::

    python -m benchmarks                 # full sizes (1 GB store, 1 M messages, whole suites)
    python -m benchmarks --quick         # small sizes, every row: the smoke gate
    python -m benchmarks --only search   # some rows (comma-separated)
    python -m benchmarks --readme        # regenerate docs/BENCHMARKS.md from latest.json

Rows (``--only`` names) are listed in :data:`benchmarks.rows.ROWS`. Each row runs its workload
and its reference alternately in the same run, several times, and reports medians with min-max
and the machine's 1-minute load while it ran. The table shows what was measured, our figure,
the reference, the ratio, the target and PASS/FAIL (``info`` for rows without a target); the
same figures plus the machine (CPU count, Python, SQLite, package versions, load at the start
and the end) go to a JSON file (``benchmarks/results/latest.json`` for a full run,
``quick.json`` with ``--quick``).

Stores that take minutes to build (the 1 GB store of realistic sessions, the 10 k / 100 k /
1 M-message stores) are cached under ``--cache`` (default ``$XDG_CACHE_HOME/hermes-state-bench``
or ``~/.cache/hermes-state-bench``), keyed by size, generator and schema version; their build
time is reported apart from the measurement.

``--quick`` is meant as a smoke gate that holds under load (issue 24 item 5; beside two CPU
burners on 2026-12-05 it still misses writers8-p99, docs/BENCHMARKS.md): every ratio is the median
of several interleaved runs, the operator rows run on a 1 MiB store too and their ratio is of
what the extra size costs each side (the fixed costs shown apart), the contention rows start
their processes together once every one has opened the store, every row records the load it
ran under, and a row that misses its target is measured once more and judged by that rerun
(``--rerun-misses``; both kept in the results).

Exit status (``benchmarks/verdicts.py``): 0 when every row with a target passes or its miss is
EXPLAINED by its SPEC bound, 1 when a row FAILs, 3 when the only misses are LOADED (missed
twice on a machine too busy to judge them), 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import platform
import sqlite3
import sys
import time
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from .rows import FULL, QUICK, ROWS, Sizes, loadavg  # noqa: E402,F401
from .table import RESULTS, markdown, render, update_readme  # noqa: E402,F401
from .verdicts import counts, judge  # noqa: E402


def byte_compile() -> str:
    """Byte-compile ``hermes_state``, ``chaos`` and ``benchmarks`` (what ``pip install`` does),
    so that every interpreter a row starts loads bytecode as a user's does, also where
    ``PYTHONDONTWRITEBYTECODE`` is set (then every start would compile every module it imports
    from source: about 45 % of ``import chaos.runner``). Returns what was done, for the
    results' ``machine``."""
    import compileall

    root = Path(__file__).resolve().parents[1]
    ok = all(compileall.compile_dir(str(root / pkg), quiet=2, workers=1)
             for pkg in ("hermes_state", "chaos", "benchmarks") if (root / pkg).is_dir())
    return "compiled at the start" if ok else "compiled at the start (some files failed)"


def machine() -> dict:
    """CPU count, Python, SQLite and package versions of this run, and the load now."""
    pkgs = {}
    for name in ("hermes-state", "rich", "PyYAML", "psutil", "sqlite-utils", "pyinstrument",
                 "matplotlib"):
        try:
            pkgs[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pkgs[name] = None
    return {"cpu_count": os.cpu_count(), "platform": platform.platform(),
            "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "sqlite": sqlite3.sqlite_version,
            "packages": pkgs, "loadavg_at_start": loadavg()}


def merge_results(earlier: dict, later: dict) -> dict:
    """``earlier`` with the rows of ``later`` added (same id: replaced in place); the commands,
    start times and total seconds of both kept, so the file says how it was made."""
    ids = {r["id"] for r in later["rows"]}
    rows = [r for r in earlier["rows"] if r["id"] not in ids] + later["rows"]
    order = {name: k for k, name in enumerate(ROWS)}
    rows.sort(key=lambda r: order.get(r["id"], len(order)))

    def sources(res: dict) -> list[dict]:
        return res.get("sources") or [{"started": res["started"], "command": res["command"],
                                       "rows": [r["id"] for r in res["rows"]]}]

    kept = [dict(src, rows=[i for i in src["rows"] if i not in ids]) for src in sources(earlier)]
    return {**earlier, "rows": rows,
            "sources": [src for src in kept if src["rows"]] + sources(later),
            "command": f"{earlier['command']}; then {later['command']}",
            "started": earlier["started"], "merged_started": later["started"],
            "total_s": earlier["total_s"] + later["total_s"],
            "loadavg_at_end": later.get("loadavg_at_end")}


def run_group(group: str, fn, sizes: Sizes, cache: Path) -> list[dict]:
    """The rows of one group, each with the run's seconds and the 1-minute load beside it
    (the higher of the start and the end)."""
    t = time.perf_counter()
    load = loadavg()
    print(f"running {group} (load {load[0] if load else '?'}) ...", file=sys.stderr, flush=True)
    rows = fn(sizes, cache)
    load_end = loadavg()
    for r in rows:
        r["seconds"] = time.perf_counter() - t
        r["load"] = [max(a, b) for a, b in zip(load, load_end)] if load and load_end else None
        r["load_start"], r["load_end"] = load, load_end
    return rows


def rerun_misses(rows: list[dict], sizes: Sizes, cache: Path) -> list[dict]:
    """Measure every group with a row that missed its target once more (issue 24 item 5: on a
    loaded machine a single miss is noise until it repeats); a row is judged by its rerun,
    and both measurements and loads are kept in ``extra["rerun"]``."""
    missed = {ROWS[r["id"]][0] for r in rows if r["pass"] is False and r["id"] in ROWS}
    again: dict[str, dict] = {}
    for group in sorted(missed):
        fn = next(f for g, f in ROWS.values() if g == group)
        for r in run_group(group, fn, sizes, cache):
            again[r["id"]] = r
    out = []
    for r in rows:
        second = again.get(r["id"])
        if second is None or r["pass"] is not False:
            out.append(r)
            continue
        second = dict(second)
        second["extra"] = dict(second["extra"], rerun={
            "verdict": "missed twice" if second["pass"] is False else "missed once, passed "
                       "on the rerun", "first_ratio": r["ratio"],
            "first_load": (r.get("load") or ["?"])[0],
            "rerun_load": (second.get("load") or ["?"])[0], "first": {
                k: r[k] for k in ("ours", "ref", "ratio", "load")}})
        out.append(second)
    return out


def results_in(path: Path, ap: argparse.ArgumentParser) -> dict:
    """A results file read and checked (a regular file, never a FIFO or a device; JSON of an
    object with ``rows`` and ``machine``); a bad one is a usage error naming it (exit 2)."""
    from hermes_state.files.atomic import read_regular

    try:
        data = json.loads(read_regular(path, limit=256 << 20, follow=True))
    except (OSError, ValueError) as exc:  # also NotRegularFileError, JSONDecodeError
        ap.error(f"{path}: not a results file ({exc})")
    if not (isinstance(data, dict) and isinstance(data.get("rows"), list)
            and isinstance(data.get("machine"), dict)):
        ap.error(f"{path}: not a results file (a JSON object with 'rows' and 'machine' "
                 f"is expected)")
    return data


def writable_results_path(path: Path, what: str, ap: argparse.ArgumentParser) -> None:
    """Refuse (exit 2) a results path that is not a regular file or a new name, or that a
    session store owns (``state.db``, its sidecars, locks, captures: issue 22 item 3)."""
    from hermes_state.files.paths import owning_store

    if path.name in ("", ".", ".."):
        ap.error(f"{what} {str(path)!r} names no file")
    if path.exists() or path.is_symlink():
        if path.is_symlink() or not path.is_file():
            ap.error(f"{what} {path} exists and is not a regular file (a directory, FIFO, "
                     f"device or symlink is never written)")
        with open(path, "rb") as fh:
            if fh.read(16) == b"SQLite format 3\x00":
                ap.error(f"{what} {path} is an SQLite database: never overwritten")
    owned = owning_store(path, path.parent / "state.db")
    if owned is not None:
        ap.error(f"{what} {path} is {owned[1]} of {owned[0]}: never written")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks",
                                 description="issue 18 / SPEC §17 benchmarks, side by side.")
    ap.add_argument("--quick", action="store_true", help="small sizes (< 2 min on 2 cores)")
    ap.add_argument("--only", default=None, help=f"rows to run, comma-separated: {', '.join(ROWS)}")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="multiply every workload size (e.g. 0.01 for a smoke run)")
    ap.add_argument("--runs", type=int, default=None,
                    help="runs of every row (overrides each row's own count; e.g. 1 on a busy "
                         "machine)")
    ap.add_argument("--out", type=Path, default=None, help="results JSON path")
    ap.add_argument("--rerun-misses", dest="rerun", action=argparse.BooleanOptionalAction,
                    default=None, help="measure a row that missed its target once more and "
                    "judge it by the rerun (default: on with --quick, off otherwise)")
    ap.add_argument("--cache", type=Path, default=None, help="where built stores are cached")
    ap.add_argument("--merge", type=Path, default=None, metavar="RESULTS_JSON",
                    help="add this run's rows to an earlier results file (a row of the same id "
                         "is replaced; each row keeps the load it ran under) and write it there")
    ap.add_argument("--markdown", type=Path, metavar="RESULTS_JSON", default=None,
                    help="print the tables of an earlier results file as markdown and exit")
    ap.add_argument("--readme", nargs="?", type=Path, const=RESULTS / "latest.json",
                    metavar="RESULTS_JSON", default=None,
                    help="regenerate docs/BENCHMARKS.md's tables from a results file "
                         "(default benchmarks/results/latest.json) and exit")
    args = ap.parse_args(argv)
    if args.markdown is not None:
        print(markdown(results_in(args.markdown, ap)))
        return 0
    if args.readme is not None:
        results_in(args.readme, ap)
        changed = update_readme(args.readme)
        print(f"docs/BENCHMARKS.md {'updated' if changed else 'unchanged'} from {args.readme}")
        return 0
    wanted = list(ROWS) if args.only is None else list(dict.fromkeys(
        x.strip() for x in args.only.split(",") if x.strip()))
    unknown = [w for w in wanted if w not in ROWS]
    if unknown or not wanted:
        ap.error(f"unknown row(s) {unknown}; choose from {', '.join(ROWS)}" if unknown
                 else f"--only names no row; choose from {', '.join(ROWS)}")
    if not (math.isfinite(args.scale) and args.scale > 0):
        ap.error(f"--scale must be a finite number > 0, not {args.scale}")
    earlier = results_in(args.merge, ap) if args.merge is not None else None  # before the rows
    for path, what in ((args.out, "--out"), (args.merge, "--merge")):
        if path is not None:
            writable_results_path(path, what, ap)
    if args.cache is not None and args.cache.exists() and not args.cache.is_dir():
        ap.error(f"--cache {args.cache} is not a directory")
    sizes: Sizes = QUICK if args.quick else FULL
    if args.scale != 1.0:
        sizes = sizes.scaled(args.scale)
    if args.runs is not None:
        if args.runs < 1:
            ap.error("--runs must be >= 1")
        sizes = dataclasses.replace(sizes, **{f.name: args.runs for f in
                                              dataclasses.fields(sizes)
                                              if f.name.endswith("_runs")})
    cache = args.cache or Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / \
        "hermes-state-bench"
    cache.mkdir(parents=True, exist_ok=True)
    out = args.out or RESULTS / ("quick.json" if args.quick else "latest.json")
    sizes = dataclasses.replace(sizes, out_dir=str(out.parent.absolute()))
    command = "python -m benchmarks" + " ".join([""] + (argv if argv is not None
                                                        else sys.argv[1:]))
    t0 = time.perf_counter()
    result = {"command": command, "mode": "quick" if args.quick else "full",
              "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "machine": {**machine(), "bytecode": byte_compile()}, "sizes": sizes.__dict__,
              "rows": []}
    done_groups: dict[str, list[dict]] = {}
    for name in wanted:
        group, fn = ROWS[name]
        if group not in done_groups:
            done_groups[group] = run_group(group, fn, sizes, cache)
        result["rows"].extend(r for r in done_groups[group] if r["id"] == name)
        # written after every row: a run stopped half way keeps what it measured
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_name(out.name + ".partial").write_text(
            json.dumps(result, indent=1, default=str) + "\n")
    if args.rerun if args.rerun is not None else args.quick:
        result["rows"] = rerun_misses(result["rows"], sizes, cache)
    result["total_s"] = time.perf_counter() - t0
    result["loadavg_at_end"] = loadavg()
    if args.merge is not None:
        out = args.merge
        result = merge_results(earlier, result)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    out.with_name(out.name + ".partial").unlink(missing_ok=True)
    status = judge(result["rows"], result["machine"]["cpu_count"] or 1)
    result["verdicts"] = counts(result["rows"])
    out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    render(result)
    print(f"verdicts: {result['verdicts']}; results: {out}"
          + ("; LOADED: repeated misses while the machine was too busy to judge them, run "
             "again on a quieter machine" if status == 3 else ""))
    return status


if __name__ == "__main__":
    sys.exit(main())
