"""Benchmark: ``search_messages`` vs a bare FTS5 MATCH + snippet() query (SPEC §17).

Target (SPEC §17): on 1 M messages, ``search_messages`` (sanitising, filters, context included)
takes at most 1.5x the time of a bare FTS5 query on the same index::

    SELECT m.id, snippet(messages_fts, -1, '>>>', '<<<', '...', 40)
    FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid
    WHERE messages_fts MATCH ? ORDER BY rank LIMIT 20

Both run side by side on the same connection of the same store, interleaved, after warm-up;
each query's time is the median of ``--runs`` runs. The store is built through ``SessionDB``
(schema, triggers) with bulk ``INSERT``s inside ``SessionDB``'s own write path, so every FTS
trigger fires exactly as for ``append_message``.

Usage::

    python benchmarks/bench_search.py                 # 100 000 messages
    python benchmarks/bench_search.py -n 1000000      # the SPEC target size
    python benchmarks/bench_search.py --db /tmp/b/state.db --keep   # reuse a built store

Exit status 0 when the overall ratio meets the target, 1 otherwise.
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hermes_state import SessionDB  # noqa: E402
from hermes_state.fts.query import sanitize_fts5_query  # noqa: E402

TARGET_RATIO = 1.5
BARE_SQL = ("SELECT m.id, snippet(messages_fts, -1, '>>>', '<<<', '...', 40) "
            "FROM messages_fts JOIN messages m ON m.id = messages_fts.rowid "
            "WHERE messages_fts MATCH ? ORDER BY rank LIMIT 20")

# Latin queries of different selectivity, all served by messages_fts (SPEC §6.2).
QUERIES = ["deploy", "docker deployment", "kubernetes OR terraform", '"build failed"',
           "python NOT java", "migrat*", "chat-send", "error timeout retry", "zebra"]

_WORDS = ("the a to of and in is for on with that this it be are as at by from or an was not "
          "deploy deployment docker kubernetes terraform build failed error timeout retry python "
          "java rust session message agent tool memory search index query database sqlite "
          "server client request response token model prompt context cache config file path "
          "migrate migration backup restore snapshot commit branch merge test pipeline release "
          "user assistant system gateway telegram discord channel thread update version chat-send "
          "alpha beta gamma delta epsilon latency throughput benchmark profile trace log metric "
          "zebra").split()


def _make_text(rng: random.Random, weights: list[float]) -> str:
    n = rng.randint(8, 60)
    words = rng.choices(_WORDS, weights=weights, k=n)
    if rng.random() < 0.05:
        words.append("记忆断裂问题复现了")
    return " ".join(words)


def build_store(path: Path, n_messages: int, seed: int = 7, quiet: bool = False) -> None:
    """Create ``path`` with ``n_messages`` messages in ``n_messages // 40`` sessions."""
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) ** 0.9 for i in range(len(_WORDS))]
    weights[-1] = 0.0005  # 'zebra' is rare
    sources = ["cli", "telegram", "discord", "slack"]
    n_sessions = max(1, n_messages // 40)
    t0 = time.perf_counter()
    with SessionDB(path) as db:
        for s in range(n_sessions):
            db._write(lambda c, s=s: c.execute(
                "INSERT INTO sessions (id, source, model, started_at) VALUES (?, ?, ?, ?)",
                (f"s{s}", sources[s % len(sources)], "bench-model", 1_700_000_000.0 + s)))
        chunk = 5_000
        ts = 1_700_000_000.0
        done = 0
        while done < n_messages:
            rows = []
            for i in range(done, min(done + chunk, n_messages)):
                ts += rng.random()
                rows.append((f"s{rng.randrange(n_sessions)}",
                             rng.choice(("user", "assistant", "assistant", "tool")),
                             _make_text(rng, weights), ts))
            db._write(lambda c, rows=rows: c.executemany(
                "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
                rows), op="bench_fill")
            done += len(rows)
            if not quiet:
                print(f"\r  built {done:,}/{n_messages:,} messages", end="", flush=True)
        db.checkpoint("PASSIVE")
    if not quiet:
        print(f"\r  built {n_messages:,} messages in {time.perf_counter() - t0:.1f} s" + " " * 10)


def _time(fn, runs: int) -> float:
    """Median wall time of ``fn()`` over ``runs`` runs, seconds."""
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples)


def bench(path: Path, runs: int, quiet: bool = False) -> dict:
    """Run every query both ways; print a table unless ``quiet``.

    Returns:
        ``{"messages": int, "queries": [{"query", "hits", "bare_s", "search_s", "ratio"}],
        "bare_s": sum of medians, "search_s": sum of medians, "ratio": overall ratio,
        "geomean": geometric mean of the per-query ratios}``.
    """
    say = (lambda *a, **k: None) if quiet else print
    per_query: list[dict] = []
    with SessionDB(path, read_only=True) as db:
        conn = db.connection.conn
        n = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        say(f"store: {path} ({n:,} messages), {runs} runs per query, median times")
        say(f"{'query':28} {'hits':>8} {'bare ms':>9} {'search ms':>10} {'ratio':>6}")
        total_bare = total_search = 0.0
        ratios = []
        for query in QUERIES:
            expr = sanitize_fts5_query(query)
            hits = conn.execute("SELECT count(*) FROM messages_fts WHERE messages_fts MATCH ?",
                                (expr,)).fetchone()[0]
            bare = lambda: conn.execute(BARE_SQL, (expr,)).fetchall()  # noqa: E731
            search = lambda: db.search_messages(query)  # noqa: E731
            for _ in range(2):  # warm-up: page cache, statement cache
                bare()
                search()
            assert len(search()) == len(bare()), query
            # interleave, alternating which side goes first, so drift (cache, allocator, CPU
            # frequency) hits both sides alike
            b_samples, s_samples = [], []
            for i in range(runs):
                if i % 2:
                    s_samples.append(_time(search, 1))
                    b_samples.append(_time(bare, 1))
                else:
                    b_samples.append(_time(bare, 1))
                    s_samples.append(_time(search, 1))
            b, s = statistics.median(b_samples), statistics.median(s_samples)
            total_bare += b
            total_search += s
            ratios.append(s / b)
            per_query.append({"query": query, "hits": hits, "bare_s": b, "search_s": s,
                              "ratio": s / b})
            say(f"{query:28} {hits:>8,} {b * 1e3:>9.2f} {s * 1e3:>10.2f} {s / b:>6.2f}")
        overall = total_search / total_bare
        geo = statistics.geometric_mean(ratios)
        say(f"overall (sum of medians): {total_search * 1e3:.1f} ms / {total_bare * 1e3:.1f} ms"
              f" = {overall:.2f}x   geometric mean of ratios {geo:.2f}x   "
              f"target <= {TARGET_RATIO}x")
        return {"messages": n, "queries": per_query, "bare_s": total_bare,
                "search_s": total_search, "ratio": overall, "geomean": geo}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-n", "--messages", type=int, default=100_000,
                    help="messages in the store (default 100000; SPEC target 1000000)")
    ap.add_argument("--runs", type=int, default=9, help="timed runs per query (median)")
    ap.add_argument("--db", type=Path, help="store path; reused when it already exists")
    ap.add_argument("--keep", action="store_true", help="keep the temporary store")
    args = ap.parse_args(argv)
    tmp = None
    if args.db is None:
        tmp = Path(tempfile.mkdtemp(prefix="bench-search-"))
        path = tmp / "state.db"
    else:
        path = args.db.absolute()
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        if not path.exists():
            build_store(path, args.messages)
        ratio = bench(path, args.runs)["ratio"]
    finally:
        if tmp is not None and not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        elif tmp is not None:
            print(f"kept {path}")
    return 0 if ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
