"""`python -m chaos watch` against real processes on a real store (SPEC §16.5, §10.2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

from chaos.watch import checkpoint_reasons, read_shm_header, read_wal_header
from hermes_state import SessionDB
from hermes_state.processes.holders import describe_pid

ROOT = Path(__file__).resolve().parents[1]


def run_chaos(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "220"}  # rich tables: one line per row
    return subprocess.run([sys.executable, "-m", "chaos", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, env=env)


def make_store(home: Path) -> Path:
    home.mkdir(parents=True, exist_ok=True)
    SessionDB(home / "state.db").close()
    return home / "state.db"


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[dict] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(dict(attrs))


def test_watch_names_the_process_holding_begin_immediate(tmp_path, spawn):
    home = tmp_path / "home"
    db = make_store(home)
    holder = spawn("lock_holder.py", str(db))
    assert holder.readline() == "LOCKED"
    holder_command = describe_pid(holder.pid)
    out = tmp_path / "runs"
    proc = run_chaos("watch", "--home", str(home), "--duration", "1.2", "--out", str(out))
    holder.send("release")
    assert holder.readline() == "RELEASED"
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = list(out.iterdir())
    results = json.loads((run_dir / "results.json").read_text())
    assert results["kind"] == "watch"
    assert results["write_lock_at_end"] == holder.pid
    assert results["write_lock_owners"][0]["pid"] == holder.pid
    # the command line cut at 80 characters (how much of the script name shows depends on the
    # checkout's path length)
    assert results["write_lock_owners"][0]["command"] == holder_command
    assert [h["pid"] for h in results["holders_seen"]] == [holder.pid]
    # The terminal names it as the write-lock owner (SPEC §10.2 wording).
    assert f"PID {holder.pid}" in proc.stdout.split("write-lock owner", 1)[1]
    assert (f"state.db write lock held by PID {holder.pid}"
            in results["observations"]["write lock at the end"])
    # Samples went into the history, and the page has its lane with the lock span.
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    samples = [r for r in history if r["type"] == "sample"]
    assert samples and all(s["write_lock"]["pid"] == holder.pid for s in samples)
    page = Tags()
    page.feed((run_dir / "report.html").read_text())
    lane = [t for t in page.tags if t.get("data-pid") == str(holder.pid)]
    assert lane and lane[0]["data-process"] == f"pid {holder.pid}"
    assert any(t.get("data-kind") == "lock" for t in page.tags)
    # `chaos report` rebuilds a watch run too, printing what was seen.
    again = run_chaos("report", str(run_dir))
    assert again.returncode == 0, again.stderr
    assert f"PID {holder.pid}" in again.stdout


def test_watch_refuses_a_home_without_a_store_and_creates_nothing(tmp_path):
    home = tmp_path / "empty"
    home.mkdir()
    proc = run_chaos("watch", "--home", str(home), "--duration", "0.5", "--out",
                     str(tmp_path / "runs"))
    assert proc.returncode == 2
    assert "no store to watch" in proc.stderr
    assert list(home.iterdir()) == []
    assert not (tmp_path / "runs").exists()


def test_checkpoints_are_seen_from_the_wal_and_shm_headers(tmp_path, spawn):
    db = make_store(tmp_path / "home")
    writer = spawn("store_child.py")
    writer.ok("open", path=str(db))
    writer.ok("create", sid="s")  # write 1

    def look() -> dict:
        wal = Path(f"{db}-wal")
        return {"wal": read_wal_header(db), "shm": read_shm_header(db),
                "wal_bytes": wal.stat().st_size if wal.exists() else 0}

    writer.ok("append", sid="s", n=10)  # writes 2..11
    first = look()
    assert first["wal"] is not None and first["wal"]["page_size"] > 0
    assert first["shm"]["mx_frame"] > 0 and first["shm"]["n_backfill"] == 0
    writer.ok("append", sid="s", n=39)  # write 50: the cadence PASSIVE checkpoint (SPEC §4)
    second = look()
    reasons = checkpoint_reasons(first, second)
    assert len(reasons) == 1 and reasons[0].startswith("backfilled frames 0 -> "), reasons
    assert checkpoint_reasons(second, second) == []
    writer.ok("append", sid="s", n=1)  # the next writer restarts the fully backfilled WAL
    third = look()
    assert any(r.startswith("WAL restarted") for r in checkpoint_reasons(second, third))
    assert third["wal"]["checkpoint_seq"] == second["wal"]["checkpoint_seq"] + 1
    writer.ok("close")  # the last connection checkpoints and removes the WAL
    gone = look()
    assert any("truncated" in r for r in checkpoint_reasons(third, gone))


def test_watch_names_a_holder_of_a_deleted_wal_generation(tmp_path, spawn):
    home = tmp_path / "home"
    db = make_store(home)
    gateway = spawn("store_child.py")
    gateway.ok("open", path=str(db))
    gateway.ok("create", sid="s")
    for suffix in ("-wal", "-shm"):  # what a user's "cleanup" does under a live gateway
        Path(f"{db}{suffix}").unlink()
    out = tmp_path / "runs"
    proc = run_chaos("watch", "--home", str(home), "--duration", "0.5", "--out", str(out))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (run_dir,) = list(out.iterdir())
    results = json.loads((run_dir / "results.json").read_text())
    (retired,) = results["retired_holders"]
    assert retired["pid"] == gateway.pid
    assert sorted(retired["files"]) == ["state.db-shm (deleted)", "state.db-wal (deleted)"]
    assert f"PID {gateway.pid}" in results["observations"]["retired WAL generation"]
    assert f"PID {gateway.pid}" in proc.stdout and "retired WAL generation" in proc.stdout
    page = Tags()
    page.feed((run_dir / "report.html").read_text())
    assert any(t.get("data-kind") == "retired" for t in page.tags)


def test_watch_names_a_frozen_holder_of_the_checkpoint_lock(tmp_path, spawn):
    """Issue 12: a process stopped inside a checkpoint, holding the lock (shared since issue 24
    item 3: maintenance and the writes that may restart the WAL wait for it)."""
    import signal

    from hermes_state import failpoints

    home = tmp_path / "home"
    db = make_store(home)
    holder = spawn("ckpt_holder.py", str(db),
                   env_extra={failpoints.ENV_VAR: "checkpoint.locked=sleep(600000)@1"})
    while (line := holder.readline()) is not None and '"failpoint"' not in line:
        pass
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        out = tmp_path / "runs"
        proc = run_chaos("watch", "--home", str(home), "--duration", "0.6", "--out", str(out))
    finally:
        os.kill(holder.pid, signal.SIGCONT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"checkpoint lock held shared by PID {holder.pid}" in proc.stdout
    (run_dir,) = list(out.iterdir())
    results = json.loads((run_dir / "results.json").read_text())
    (seen,) = results["checkpoint_lock_holders"]
    assert seen["pid"] == holder.pid and seen["stopped"] is True
    end = results["observations"]["checkpoint lock at the end"]
    assert end.startswith(f"held shared by PID {holder.pid} (") and end.endswith(", stopped")
