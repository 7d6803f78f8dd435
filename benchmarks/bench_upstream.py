"""Peer: upstream 0.19.0's own SessionDB beside ours on the same work (issue 23 item 5).

Upstream runs in its own process (:mod:`hermes_state.testing.upstream_release`, the release
cached once with ``python -m chaos upstream fetch 0.19.0``); its workloads run inside that
process (timed there, no pipe round trip per call), ours in this one. Work: ``n`` appends to
one session (tool calls on every 5th), 4 and 8 writer processes appending ``per_writer`` each,
``search_messages`` of a word every message holds, ``get_messages`` of the session,
``list_sessions_rich`` over 200 sessions, and a second open of the filled store. Appends are
measured at the same ``synchronous`` level (NORMAL: upstream's connection gets the pragma) and
at each side's default (upstream 0.19.0 leaves SQLite's default, FULL in WAL mode on Linux).

Usage: ``python benchmarks/bench_upstream.py [-n 2000] [--per-writer 200]``
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hermes_state import SessionDB  # noqa: E402
from hermes_state.testing import upstream_release as ur  # noqa: E402

PAD = "lorem ipsum dolor sit amet " * 8
_OURS_WRITER = """
import sys, time
from hermes_state import SessionDB
path, sid, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
db = SessionDB(path)
db.create_session(sid, source="bench")
sys.stdout.write("ready\\n"); sys.stdout.flush(); sys.stdin.readline()
t = time.perf_counter()
for i in range(n):
    db.append_message(sid, "user", f"w{i} " + %r)
print(time.perf_counter() - t); db.close()
""" % PAD[:200]


def _ours_append(path: Path, n: int, sync: str) -> float:
    with SessionDB(path, synchronous=sync) as db:
        db.create_session("s", source="bench")
        t = time.perf_counter()
        for i in range(n):
            kw = {"tool_calls": [{"id": f"c{i}", "type": "function", "function": {
                "name": "terminal", "arguments": "{}"}}]} if i % 5 == 0 else {}
            db.append_message("s", "assistant" if i % 2 else "user", f"up{i} {PAD[:200]}",
                              **kw)
        return time.perf_counter() - t


def _up_append(path: Path, n: int, sync: str | None) -> float:
    with ur.UpstreamProcess(ur.BASELINE, path.parent) as up:
        up.open(path)
        if sync:
            up.run("pragma", sql=f"PRAGMA synchronous={sync}")
        up.call("create_session", "s", "bench")
        return sum(up.run("append", session_id="s", n=n, size=200, tool_every=5))


def _writers(path: Path, k: int, per: int, side: str) -> float:
    """Aggregate msg/s of ``k`` writer processes appending ``per`` each at once."""
    procs, ups, times = [], [], []
    if side == "ours":
        SessionDB(path).close()
        for j in range(k):
            p = subprocess.Popen([sys.executable, "-c", _OURS_WRITER, str(path), f"w{j}",
                                  str(per)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                 text=True)
            assert p.stdout.readline().strip() == "ready"
            procs.append(p)
        t0 = time.perf_counter()
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            p.wait(timeout=600)
        return k * per / (time.perf_counter() - t0)
    for j in range(k):
        up = ur.UpstreamProcess(ur.BASELINE, path.parent)
        up.open(path)
        up.run("pragma", sql="PRAGMA synchronous=NORMAL")
        up.call("create_session", f"w{j}", "bench")
        ups.append(up)
    threads = [threading.Thread(target=lambda up=up, j=j: times.append(
        up.run("append", session_id=f"w{j}", n=per, size=200))) for j, up in enumerate(ups)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)
    elapsed = time.perf_counter() - t0
    for up in ups:
        up.close()
    return k * per / elapsed


def _reads(root: Path, n: int) -> dict:
    """Ours and upstream reading the same filled store (written by upstream, then ours)."""
    path = root / "reads" / "state.db"
    path.parent.mkdir(parents=True)
    with ur.UpstreamProcess(ur.BASELINE, path.parent) as up:
        up.open(path)
        for j in range(200):
            up.call("create_session", f"r{j}", "cli")
            up.call("append_message", f"r{j}", "user", f"hello session {j}")
        up.call("create_session", "s", "bench")
        up.run("append", session_id="s", n=n, size=200)
    SessionDB(path).close()  # ours migrates once; both then read the same v23 store
    out: dict = {}
    reps = 20
    with ur.UpstreamProcess(ur.BASELINE, path.parent) as up:
        t = time.perf_counter()
        up.open(path)
        out["open_up"] = time.perf_counter() - t
        for key, method, args, kwargs in (
                ("search", "search_messages", ["lorem"], {"limit": 20}),
                ("get_messages", "get_messages", ["s"], {}),
                ("list_sessions_rich", "list_sessions_rich", [], {"limit": 50})):
            out[f"{key}_up"] = statistics.median(up.run(
                "timed", method=method, args=args, kwargs=kwargs, repeat=reps)["latencies"])
    t = time.perf_counter()
    db = SessionDB(path)
    out["open_ours"] = time.perf_counter() - t
    for key, fn in (("search", lambda: db.search_messages("lorem", limit=20)),
                    ("get_messages", lambda: db.get_messages("s")),
                    ("list_sessions_rich", lambda: db.list_sessions_rich(limit=50))):
        lat = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            lat.append(time.perf_counter() - t)
        out[f"{key}_ours"] = statistics.median(lat)
    db.close()
    return out


def measure(n: int = 2000, per_writer: int = 200, runs: int = 1) -> dict:
    """Every figure, ours and upstream side by side (raises :class:`ur.NotCached`)."""
    ur.require(ur.BASELINE)
    root = Path(tempfile.mkdtemp(prefix="bench-upstream-"))
    res: dict = {"n": n, "per_writer": per_writer}
    try:
        for r in range(runs):
            for label, ours_sync, up_sync in (("same", "NORMAL", "NORMAL"),
                                              ("default", "NORMAL", None)):
                d = root / f"{label}{r}"
                res.setdefault(f"append_{label}_ours", []).append(
                    n / _ours_append(d / "o" / "state.db", n, ours_sync))
                (d / "u").mkdir(parents=True)
                res.setdefault(f"append_{label}_up", []).append(
                    n / _up_append(d / "u" / "state.db", n, up_sync))
            for k in (4, 8):
                for side in ("ours", "up"):
                    d = root / f"w{k}{side}{r}"
                    d.mkdir(parents=True)
                    res.setdefault(f"writers{k}_{side}", []).append(
                        _writers(d / "state.db", k, per_writer, side))
        for key, val in _reads(root, n).items():
            res[key] = [val]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return res


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2000)
    ap.add_argument("--per-writer", type=int, default=200)
    args = ap.parse_args(argv)
    res = measure(args.n, args.per_writer)
    for key in sorted(res):
        if key.endswith("_ours"):
            base = key[:-5]
            o, u = statistics.median(res[key]), statistics.median(res[base + "_up"])
            print(f"{base:22} ours {o:10.4g}  upstream {u:10.4g}  ours/upstream {o / u:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
