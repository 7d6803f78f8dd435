"""Opening a store: CPU per open beside upstream's, and with 1,000 idle processes (issue 24 item 2).

``open``: each side opens and closes its own store ``n`` times in a new process and reports the
CPU time (``process_time``: user + system, the import excluded) per open + close; ours
(``SessionDB(path)``: the refusal scan, pragmas, the settled check, the generation) beside
upstream Hermes 0.19.0's ``SessionDB`` (fetched once with ``pip download hermes-agent==0.19.0
--no-deps`` into the cache and imported alone from there), alternately.

``open-procs``: ours with 1,000 idle processes holding open files (``sleep`` children, five
files each, no locks) beside ours without them, alternately; the old scan of every process
(``holders.scan``) is timed in the same children for contrast.

    python -m benchmarks.bench_open [--runs 5] [-n 40]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
UPSTREAM_VERSION = "0.19.0"
#: What upstream's hermes_state.py needs to import (agent.memory_manager pulls in the rest).
UPSTREAM_PARTS = ("hermes_state.py", "hermes_constants.py", "agent/", "hermes_cli/", "tools/",
                  "utils")


class Unavailable(Exception):
    """Upstream's package could not be fetched or imported (the row is skipped, with why)."""


def upstream_dir(cache: Path) -> Path:
    """A directory holding upstream's ``hermes_state.py`` and what it imports (cached)."""
    dest = cache / f"upstream-{UPSTREAM_VERSION}"
    if (dest / "hermes_state.py").exists():
        return dest
    dl = cache / "upstream-wheels"
    dl.mkdir(parents=True, exist_ok=True)
    wheel = next(dl.glob(f"hermes_agent-{UPSTREAM_VERSION}-*.whl"), None)
    if wheel is None:
        proc = subprocess.run([sys.executable, "-m", "pip", "download",
                               f"hermes-agent=={UPSTREAM_VERSION}", "--no-deps", "-d", str(dl)],
                              capture_output=True, text=True, timeout=600)
        wheel = next(dl.glob(f"hermes_agent-{UPSTREAM_VERSION}-*.whl"), None)
        if wheel is None:
            raise Unavailable(f"pip download hermes-agent=={UPSTREAM_VERSION} failed: "
                              f"{proc.stderr.strip()[-300:]}")
    tmp = dest.with_name(dest.name + f".partial-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if name.startswith(UPSTREAM_PARTS):
                zf.extract(name, tmp)
    os.replace(tmp, dest)
    return dest


_CHILD = r"""
import json, os, sys, tempfile, time
from pathlib import Path
side, n = sys.argv[1], int(sys.argv[2])
t0 = time.perf_counter()
if side == "upstream":
    sys.path.insert(0, sys.argv[3])
from hermes_state import SessionDB
import_s = time.perf_counter() - t0
home = Path(tempfile.mkdtemp(prefix="bench-open-"))
path = home / "state.db"
db = SessionDB(path)
db.close()
t = time.process_time()
w = time.perf_counter()
for _ in range(n):
    SessionDB(path).close()
cpu = (time.process_time() - t) / n
wall = (time.perf_counter() - w) / n
full = None
if side == "ours":
    from hermes_state.processes import holders
    t = time.process_time()
    for _ in range(5):
        holders.scan(path, include_self=True)
    full = (time.process_time() - t) / 5
print(json.dumps({"cpu_ms": cpu * 1e3, "wall_ms": wall * 1e3, "import_s": import_s,
                  "full_scan_ms": None if full is None else full * 1e3,
                  "procs": sum(1 for d in os.listdir("/proc") if d.isdigit())}))
"""


def _child(side: str, n: int, upstream: Path | None = None) -> dict:
    env = dict(os.environ)
    if side == "ours":
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    else:
        env.pop("PYTHONPATH", None)
    env.pop("HERMES_HOME", None)
    argv = [sys.executable, "-c", _CHILD, side, str(n)] + ([str(upstream)] if upstream else [])
    cwd = tempfile.gettempdir() if side == "upstream" else str(ROOT)
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    if proc.returncode != 0:
        if side == "upstream":
            raise Unavailable(f"upstream's SessionDB did not open: {proc.stderr.strip()[-300:]}")
        raise RuntimeError(proc.stderr.strip()[-800:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def measure_upstream(runs: int, n: int, cache: Path) -> dict:
    """``{"ours": [child dicts], "upstream": [child dicts]}``, alternating."""
    up = upstream_dir(cache)
    out: dict = {"ours": [], "upstream": []}
    for k in range(runs):
        for side in (("ours", "upstream") if k % 2 == 0 else ("upstream", "ours")):
            out[side].append(_child(side, n, up if side == "upstream" else None))
    return out


class IdleProcesses:
    """``count`` idle ``sleep`` processes, each holding ``files`` open files (no locks)."""

    def __init__(self, count: int = 1000, files: int = 5) -> None:
        self.count, self.files = count, files
        self.procs: list[subprocess.Popen] = []
        self.dir = Path(tempfile.mkdtemp(prefix="bench-idle-"))

    def __enter__(self) -> "IdleProcesses":
        paths = [self.dir / f"f{i}" for i in range(self.files)]
        for p in paths:
            p.write_text("x")
        fds = [os.open(p, os.O_RDONLY) for p in paths]
        try:
            for _ in range(self.count):
                self.procs.append(subprocess.Popen(["sleep", "3600"], pass_fds=fds,
                                                   stdin=subprocess.DEVNULL,
                                                   stdout=subprocess.DEVNULL))
        finally:
            for fd in fds:
                os.close(fd)
        return self

    def __exit__(self, *exc) -> None:
        for p in self.procs:
            p.kill()
        for p in self.procs:
            p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def measure_procs(runs: int, n: int, count: int = 1000) -> dict:
    """``{"quiet": [child dicts], "busy": [child dicts]}``: ours without and with ``count``
    idle processes, alternating (the processes are started once, stopped between runs)."""
    out: dict = {"quiet": [], "busy": []}
    for k in range(runs):
        for side in (("quiet", "busy") if k % 2 == 0 else ("busy", "quiet")):
            if side == "busy":
                with IdleProcesses(count):
                    out[side].append(_child("ours", n))
            else:
                out[side].append(_child("ours", n))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("-n", type=int, default=40)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "bench-cache")
    args = ap.parse_args(argv)
    up = measure_upstream(args.runs, args.n, args.cache)
    med = {k: statistics.median(r["cpu_ms"] for r in v) for k, v in up.items()}
    print(f"open+close CPU: ours {med['ours']:.2f} ms, upstream {UPSTREAM_VERSION} "
          f"{med['upstream']:.2f} ms ({med['ours'] / med['upstream']:.2f}x)")
    pr = measure_procs(args.runs, args.n)
    med = {k: statistics.median(r["cpu_ms"] for r in v) for k, v in pr.items()}
    print(f"with 1,000 idle processes {med['busy']:.2f} ms, without {med['quiet']:.2f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
