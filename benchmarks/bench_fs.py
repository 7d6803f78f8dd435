"""append_message throughput on the faulty filesystem vs plain storage (issue 15).

Both sides use ``SessionDB`` (synchronous=NORMAL, one transaction per message, a PASSIVE
checkpoint every 50 writes); ours runs in a home on the faulty FUSE filesystem (``chaos.fs``),
the reference in a plain directory on the same disk. The runs alternate; the ratio is the
faulty filesystem's throughput over plain (what a chaos run on the FUSE tier costs).

    python benchmarks/bench_fs.py [-n 2000] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_append import fresh_store, run_ours  # noqa: E402
from chaos.fs import FaultyMount, FsUnavailable, fuse_unavailable_reason  # noqa: E402


def measure(n: int = 2000, runs: int = 3) -> dict:
    """Alternate faulty-fs / plain ``runs`` times on fresh stores of ``n`` appends.

    Returns:
        ``{"fs": [msg/s], "plain": [msg/s]}``.
    Raises:
        FsUnavailable: FUSE cannot be mounted here (the reason).
    """
    reason = fuse_unavailable_reason()
    if reason:
        raise FsUnavailable(reason)
    root = Path(tempfile.mkdtemp(prefix="bench-fs-"))
    fs, plain = [], []
    try:
        for k in range(runs):
            with FaultyMount(root / f"backing{k}", root / f"home{k}", root / f"fs{k}.jsonl") as m:
                path = fresh_store(m.mountpoint, "s")
                fs.append(n / run_ours(path, n))
            path = fresh_store(root, f"plain{k}")
            plain.append(n / run_ours(path, n))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"fs": fs, "plain": plain}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=2000, help="messages per run")
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    res = measure(args.n, args.runs)
    mf, mp = statistics.median(res["fs"]), statistics.median(res["plain"])
    print(json.dumps({"fs_msg_s": mf, "plain_msg_s": mp, "ratio": mf / mp, **res}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
