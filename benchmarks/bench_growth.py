"""Growth curves: append and search latency as the store grows (issue 18).

At each size (10 k, 100 k and 1 M messages in the full run) a store built by
:func:`benchmarks.bench_search.build_store` (cached, shared with the ``search`` row) is copied,
then:

* **append**: ``SessionDB.append_message`` to an existing session, beside the same SQL through
  bare ``sqlite3`` (same pragmas, the FTS triggers fire), on the same copy, alternating in
  blocks of :data:`BLOCK` appends; every call timed;
* **search**: the queries of :mod:`benchmarks.bench_search`, ``search_messages`` beside a bare
  FTS5 ``MATCH`` + ``snippet()``, interleaved; every call timed.

Per size and side: p50 and p95 (ms). Targets: ours' append p50 at the largest size <= 1.2x
at the smallest; search (sum of per-query medians) within 1.5x bare at every size. The plot
(``benchmarks/results/growth.png``, needs matplotlib from the ``bench`` extra) shows the four
curves on log-scaled sizes.

Usage: ``python -m benchmarks.bench_growth [--sizes 10000,100000,1000000] [--cache DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_state.schema.tables import SCHEMA_VERSION  # noqa: E402

from benchmarks import bench_search  # noqa: E402
from benchmarks.bench_append import TEXT  # noqa: E402
from benchmarks.bench_contention import INSERT, UPDATE  # noqa: E402
from hermes_state import SessionDB  # noqa: E402
from hermes_state.fts.query import sanitize_fts5_query  # noqa: E402

BLOCK = 100  # appends per side before switching
SIZES_FULL = (10_000, 100_000, 1_000_000)
SIZES_QUICK = (1_000, 5_000, 20_000)


def cached_store(cache: Path, n: int) -> tuple[Path, float | None]:
    """The search store of ``n`` messages under ``cache`` (built once); ``(path, build_s)``."""
    path = cache / f"search-{n}-v{SCHEMA_VERSION}" / "state.db"
    if path.exists():
        return path, None
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"building-{os.getpid()}.db")
    for suffix in ("", "-wal", "-shm"):
        Path(f"{tmp}{suffix}").unlink(missing_ok=True)
    t = time.perf_counter()
    bench_search.build_store(tmp, n, quiet=True)
    os.replace(tmp, path)  # closed cleanly: WAL checkpointed and removed
    return path, time.perf_counter() - t


def _pcts(vals: list[float]) -> dict:
    v = sorted(vals)
    return {"p50": v[len(v) // 2] * 1e3, "p95": v[min(len(v) - 1, int(len(v) * 0.95))] * 1e3,
            "n": len(v)}


def measure_append(path: Path, appends: int) -> dict:
    """Ours and bare appends to session ``s0`` of a copy of ``path``, alternating blocks."""
    root = Path(tempfile.mkdtemp(prefix="bench-growth-"))
    try:
        db_path = root / "state.db"
        shutil.copyfile(path, db_path)
        ours: list[float] = []
        bare: list[float] = []
        db = SessionDB(db_path)
        conn = sqlite3.connect(db_path, timeout=1.0, isolation_level=None)
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("PRAGMA synchronous=NORMAL")
        bare_writes = 0
        try:
            i = 0
            while len(ours) < appends:
                for _ in range(BLOCK):
                    t = time.perf_counter()
                    db.append_message("s0", "user" if i % 2 else "assistant", f"{i} {TEXT}")
                    ours.append(time.perf_counter() - t)
                    i += 1
                for _ in range(BLOCK):
                    t = time.perf_counter()
                    conn.execute("BEGIN IMMEDIATE")
                    conn.execute(INSERT, ("s0", "user" if i % 2 else "assistant", f"{i} {TEXT}",
                                          time.time()))
                    conn.execute(UPDATE, (0, "s0"))
                    conn.execute("COMMIT")
                    bare_writes += 1
                    if bare_writes % 50 == 0:
                        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")
                    bare.append(time.perf_counter() - t)
                    i += 1
        finally:
            conn.close()
            db.close()
        return {"ours": _pcts(ours), "bare": _pcts(bare)}
    finally:
        shutil.rmtree(root, ignore_errors=True)


def measure_search(path: Path, runs: int) -> dict:
    """Every query of bench_search ``runs`` times each way, interleaved, after a warm-up."""
    ours: list[float] = []
    bare: list[float] = []
    med_ours = med_bare = 0.0
    with SessionDB(path, read_only=True) as db:
        conn = db.connection.conn
        for query in bench_search.QUERIES:
            expr = sanitize_fts5_query(query)
            b_fn = lambda: conn.execute(bench_search.BARE_SQL, (expr,)).fetchall()  # noqa: E731
            s_fn = lambda: db.search_messages(query)  # noqa: E731
            b_fn(), s_fn()
            qb, qs = [], []
            for k in range(runs):
                for side in ((b_fn, qb), (s_fn, qs))[::1 if k % 2 else -1]:
                    t = time.perf_counter()
                    side[0]()
                    side[1].append(time.perf_counter() - t)
            ours += qs
            bare += qb
            med_ours += statistics.median(qs)
            med_bare += statistics.median(qb)
    return {"ours": _pcts(ours), "bare": _pcts(bare), "ratio": med_ours / med_bare,
            "sum_ours_ms": med_ours * 1e3, "sum_bare_ms": med_bare * 1e3}


def measure(sizes: tuple[int, ...], cache: Path, appends: int = 1000,
            search_runs: int = 5) -> dict:
    """Both curves at every size. Returns ``{"sizes": [...], "points": [{"messages",
    "append": {...}, "search": {...}, "build_s"}]}``."""
    points = []
    for n in sizes:
        path, build_s = cached_store(cache, n)
        points.append({"messages": n, "build_s": build_s,
                       "append": measure_append(path, appends),
                       "search": measure_search(path, search_runs)})
    return {"sizes": list(sizes), "points": points}


def plot(res: dict, out: Path) -> Path | None:
    """The four curves (p50 solid, p95 dashed) as a PNG; None when matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    xs = [p["messages"] for p in res["points"]]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4))
    for ax, what in zip(axes, ("append", "search")):
        for side, colour in (("ours", "tab:blue"), ("bare", "tab:grey")):
            for q, style in (("p50", "-"), ("p95", "--")):
                ax.plot(xs, [p[what][side][q] for p in res["points"]], style, color=colour,
                        marker="o", label=f"{'hermes-state' if side == 'ours' else 'bare'} {q}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("messages in the store")
        ax.set_ylabel("ms per call")
        ax.set_title("append_message" if what == "append" else "search_messages vs FTS5")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default=",".join(map(str, SIZES_FULL)))
    ap.add_argument("--cache", type=Path,
                    default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                    / "hermes-state-bench")
    ap.add_argument("--appends", type=int, default=1000)
    ap.add_argument("--png", type=Path, default=None)
    args = ap.parse_args(argv)
    res = measure(tuple(int(x) for x in args.sizes.split(",")), args.cache, args.appends)
    print(json.dumps(res, indent=1))
    if args.png:
        print(plot(res, args.png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
