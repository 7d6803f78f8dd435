"""Walk the recovery guide (docs/RECOVERY.md) with real processes and print a transcript.

Usage::

    python docs/demo_recovery.py [--out FILE] [--keep] [--skip-contention]

Everything happens in a fresh temporary HERMES_HOME per section (removed at the end unless
``--keep``). Each section starts real OS processes that hold the store, runs the same
``hermes-state`` commands an operator would, and prints each command, its output and its exit
code:

(a) a writer whose ``state.db-wal``/``-shm`` were deleted under it (the one forbidden operation):
    ``doctor`` names it as ``PID N (command)`` and stops; once it is stopped, ``doctor`` shows the
    retired-WAL capture it left and what to do with it;
(b) ``sessions optimize-storage`` refused by the live-writer gate while a writer runs, and its
    ``--dry-run`` preview that is never refused;
(c) ``sessions recover --inspect-only`` on a store with a damaged page: the JSON report, and
    proof (sha256 of every file) that no byte changed;
(d) a write that gives up behind a ``BEGIN IMMEDIATE`` held by another process and names that
    process from /proc/locks (takes about 16 s: 15 attempts of a 1 s busy timeout).

Exit code 0 when every step behaved as the guide says, 1 otherwise (the failed expectation is
printed). Linux only (/proc).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

WRITER = r"""
import sys, time
from hermes_state import SessionDB
db = SessionDB(sys.argv[1])
db.create_session("gw-1", source="gateway")
print("ready", flush=True)
i = 0
while True:
    try:
        db.append_message("gw-1", "user", f"turn {i}")
        i += 1
    except Exception as exc:
        print(type(exc).__name__, flush=True)
        print(str(exc), flush=True)
        sys.stdout.flush()
        time.sleep(3600)
    time.sleep(0.2)
"""

READER = r"""
import sys, time
from hermes_state import SessionDB
db = SessionDB(sys.argv[1], read_only=True)
db.list_sessions()
print("ready", flush=True)
while True:
    time.sleep(1.0)
    db.list_sessions()
"""

LOCK_HOLDER = r"""
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None, timeout=30)
conn.execute("BEGIN IMMEDIATE")
print("LOCKED", flush=True)
sys.stdin.readline()
"""


class Demo:
    """Prints commands and their output to stdout and to the transcript file."""

    def __init__(self, out: Path | None) -> None:
        self.out = open(out, "w", encoding="utf-8") if out else None
        self.failed: list[str] = []
        self.env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep
                        + os.environ.get("PYTHONPATH", ""))
        self.procs: list[subprocess.Popen] = []
        self.scripts: Path | None = None  # where the helper programs are written

    def say(self, text: str = "") -> None:
        print(text, flush=True)
        if self.out:
            self.out.write(text + "\n")
            self.out.flush()

    def expect(self, ok: bool, what: str) -> None:
        if not ok:
            self.failed.append(what)
            self.say(f"!! expectation failed: {what}")

    def cli(self, home: Path | None, *args: str) -> tuple[int, str, str]:
        """Run ``hermes-state [--home H] ARGS`` as a real process; print it like a terminal."""
        argv = ([sys.executable, "-m", "hermes_state"] + (["--home", str(home)] if home else [])
                + list(args))
        shown = "hermes-state " + " ".join((["--home", str(home)] if home else []) + list(args))
        self.say(f"$ {shown}")
        proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=300)
        for stream in (proc.stdout, proc.stderr):
            if stream:
                self.say(stream.rstrip("\n"))
        self.say(f"[exit {proc.returncode}]")
        self.say()
        return proc.returncode, proc.stdout, proc.stderr

    def spawn(self, name: str, code: str, *args: str,
              stdin=subprocess.DEVNULL) -> subprocess.Popen:
        """Start ``<this interpreter> <scripts>/<name> ARGS`` (a file, so ``ps`` shows a
        readable name). ``sys.executable``, never ``python`` from ``PATH``: run without the venv's
        ``bin/`` on ``PATH`` (an IDE, a CI calling ``.venv/bin/pytest``) that would be another
        interpreter, without this one's packages (issue 27 item 13)."""
        script = self.scripts / name
        script.write_text(code, encoding="utf-8")
        proc = subprocess.Popen([sys.executable, name, *args], cwd=self.scripts,
                                stdout=subprocess.PIPE, stdin=stdin, text=True, env=self.env)
        self.procs.append(proc)
        return proc

    def stop(self, proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)

    def close(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=60)
        if self.out:
            self.out.close()


def digest(directory: Path) -> dict:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def section_a(demo: Demo, home: Path) -> None:
    db = home / "state.db"
    demo.say("== (a) a writer still holds a retired WAL: doctor names it and stops ==")
    writer = demo.spawn("gateway.py", WRITER, str(db))
    demo.expect(writer.stdout.readline().strip() == "ready", "the writer started")
    time.sleep(1.0)
    demo.say(f"# a writer (PID {writer.pid}) is appending; now its state.db-wal and "
             "state.db-shm are deleted")
    demo.say("$ rm state.db-wal state.db-shm    # the one operation the guide forbids")
    os.unlink(f"{db}-wal")
    os.unlink(f"{db}-shm")
    kind = writer.stdout.readline().strip()
    message = writer.stdout.readline().strip()
    demo.say(f"# the writer's next write is refused ({kind}):")
    demo.say(f"#   {message}")
    demo.expect(kind == "DeletedWalGenerationError", "the writer refused its next write")
    demo.say()
    code, out, _ = demo.cli(home, "doctor")
    demo.expect(code == 1, "doctor exits 1 while a retired holder lives")
    demo.expect(f"PID {writer.pid} (" in out, "doctor names the holder as PID N (command)")
    demo.expect("quick_check" not in out, "doctor stops before any health check")
    demo.say(f"# step 1 of the guide: stop that process (kill {writer.pid})")
    demo.stop(writer)
    demo.say()
    code, out, _ = demo.cli(home, "doctor")
    demo.expect(code == 1, "doctor exits 1 while messages exist only in the capture")
    first = out.splitlines()[1] if len(out.splitlines()) > 1 else ""
    demo.expect(first.startswith("[issue]") and "exist only in the capture" in first,
                "doctor's first finding is the conversation that exists only in the capture")
    captures = sorted(home.glob("state.db.retired-wal-*"))
    if captures:
        demo.say("# step 3 of the guide, before starting anything: bring them back")
        code, out, _ = demo.cli(home, "sessions", "salvage", str(captures[0]))
        demo.expect(code == 0 and "--apply" in out, "salvage previews what it would bring back")
        code, out, _ = demo.cli(home, "sessions", "salvage", str(captures[0]), "--apply")
        demo.expect(code == 0, "salvage --apply brings the messages back")
    code, out, _ = demo.cli(home, "doctor")
    demo.expect(code == 0, "doctor exits 0 once the holder is gone and nothing is left behind")
    demo.expect("retired-wal-" in out and "nothing to salvage" in out,
                "doctor lists the capture, with nothing left to salvage")


def section_b(demo: Demo, home: Path) -> None:
    db = home / "state.db"
    demo.say("== (b) the live-writer gate refuses optimize-storage under a writer ==")
    writer = demo.spawn("gateway.py", WRITER, str(db))
    demo.expect(writer.stdout.readline().strip() == "ready", "the writer started")
    reader = demo.spawn("dashboard.py", READER, str(db))
    demo.expect(reader.stdout.readline().strip() == "ready", "the reader started")
    demo.say(f"# a writer (PID {writer.pid}) is appending; a read-only dashboard (PID "
             f"{reader.pid}) lists sessions")
    before = digest(home)
    code, _, err = demo.cli(home, "sessions", "optimize-storage")
    demo.expect(code == 1, "optimize-storage is refused (exit 1)")
    demo.expect(f"PID {reader.pid} (" in err, "the refusal names the read-only holder too")
    demo.expect(f"PID {writer.pid} (" in err and "Nothing is lost." in err and "--force" in err,
                "the refusal names the holder, says nothing is lost and names --force")
    code, _, _ = demo.cli(home, "sessions", "optimize-storage", "--dry-run")
    demo.expect(code == 0, "--dry-run is never refused")
    demo.stop(writer)
    demo.stop(reader)
    demo.say("# the writer was appending meanwhile, so only the gate's own effect is checked: "
             "the store is still one image and readable")
    demo.expect(set(before) <= set(digest(home)) | {"state.db-wal", "state.db-shm"},
                "no file disappeared")


def section_c(demo: Demo, home: Path) -> None:
    sys.path.insert(0, str(REPO))
    from hermes_state import SessionDB

    db = home / "state.db"
    demo.say("== (c) recover --inspect-only on a damaged store ==")
    with SessionDB(db) as handle:
        for s in range(3):
            handle.create_session(f"s{s}", source="cli")
            for i in range(150):
                handle.append_message(f"s{s}", "user", f"session {s} message {i} " + "x" * 200)
    raw = sqlite3.connect(str(db))
    pages = [r[0] for r in raw.execute("SELECT pageno FROM dbstat WHERE name = 'messages' "
                                       "AND pagetype = 'leaf' ORDER BY pageno")]
    page_size = raw.execute("PRAGMA page_size").fetchone()[0]
    raw.close()
    victim = pages[len(pages) // 2]
    demo.say(f"# 450 messages written; leaf page {victim} of `messages` is overwritten with "
             f"0xA5 bytes")
    with open(db, "r+b") as fh:
        fh.seek((victim - 1) * page_size)
        fh.write(b"\xa5" * page_size)
    code, out, _ = demo.cli(home, "doctor")
    demo.expect(code == 1 and "[issue] the store is damaged" in out,
                "doctor reports the damage (exit 1)")
    demo.say("# (doctor's read-only open of a WAL store left empty -wal/-shm sidecars: SQLite "
             "creates them; they are part of the store)")
    before = digest(home)
    demo.say("$ sha256sum state.db*   # before recover")
    for name, sha in before.items():
        demo.say(f"{sha}  {name}")
    demo.say()
    code, out, _ = demo.cli(None, "sessions", "recover", str(db), "--inspect-only")
    after = digest(home)
    demo.say("$ sha256sum state.db*   # after recover --inspect-only")
    for name, sha in after.items():
        demo.say(f"{sha}  {name}")
    demo.say()
    demo.expect(after == before, "--inspect-only changed no byte")
    demo.expect('"operation": "inspect"' in out and '"source_unchanged": true' in out,
                "the JSON report says inspect and source_unchanged")
    salvaged = home.parent / f"{home.name}-salvaged.db"
    code, _, _ = demo.cli(None, "sessions", "recover", str(db), "--output",
                          str(salvaged), "--allow-partial", "--report",
                          str(home.parent / f"{home.name}-report.json"))
    demo.expect(code == 0, "--output --allow-partial salvages the readable rows")
    demo.expect(digest(home) == before, "the source is still unchanged")


def section_d(demo: Demo, home: Path) -> None:
    db = home / "state.db"
    demo.say("== (d) a write that gives up names the write-lock owner ==")
    writer = demo.spawn("gateway.py", WRITER, str(db))
    demo.expect(writer.stdout.readline().strip() == "ready", "the writer started")
    holder = demo.spawn("lock_holder.py", LOCK_HOLDER, str(db), stdin=subprocess.PIPE)
    demo.expect(holder.stdout.readline().strip() == "LOCKED", "the lock holder holds the lock")
    demo.say(f"# PID {holder.pid} holds BEGIN IMMEDIATE; the writer (PID {writer.pid}) retries "
             "15 times, then gives up with:")
    kind = writer.stdout.readline().strip()
    lines = [kind]
    while True:
        line = writer.stdout.readline()
        if not line.strip():
            break
        lines.append(line.rstrip("\n"))
        if line.startswith("last error:"):
            break
    for line in lines:
        demo.say(f"  {line}")
    demo.say()
    text = "\n".join(lines)
    demo.expect(kind == "WriteContentionError", "the write gave up")
    demo.expect(f"write lock held by PID {holder.pid} (" in text, "it names the lock owner")
    demo.expect("seen holding it at" in text and "this writer waited" in text,
                "it says what it saw, not how long the owner has held the lock")
    demo.stop(writer)
    demo.stop(holder)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, help="also write the transcript to this file")
    ap.add_argument("--keep", action="store_true", help="keep the temporary homes")
    ap.add_argument("--skip-contention", action="store_true", help="skip section (d) (~16 s)")
    args = ap.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="hermes-recovery-demo-"))
    demo = Demo(args.out)
    demo.scripts = root
    import platform
    demo.say(f"# recovery-guide demo, {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())}, "
             f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}")
    demo.say(f"# homes under {root}")
    demo.say()
    try:
        for name, section in (("a", section_a), ("b", section_b), ("c", section_c),
                              ("d", section_d)):
            if name == "d" and args.skip_contention:
                continue
            home = root / f"home-{name}"
            home.mkdir()
            section(demo, home)
            demo.say()
    finally:
        demo.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    if demo.failed:
        print(f"{len(demo.failed)} expectation(s) failed: {demo.failed}", file=sys.stderr)
        return 1
    print("every step behaved as the guide says", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
