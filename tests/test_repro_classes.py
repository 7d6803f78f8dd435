"""From a real lockup to a failing scenario (issue 25, "Done when"): for each lockup class, real
processes on this machine make the state, ``doctor --bundle`` takes a bundle, ``chaos repro``
makes a scenario of it, and the scenario's run FAILS with the checker that names the user's
symptom. Every wait is on an event (a line from a process, a lock in /proc/locks, a wal-index
field), never on time; the timeouts are hang guards.
"""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chaos.repro import make_repro
from hermes_state import SessionDB, failpoints
from hermes_state.files import sqlite_format as fmt
from hermes_state.testing import lock_holders

REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 90.0

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="needs /proc and /proc/locks (Linux)")


def wait_for(pred, what: str, guard: float = HANG_GUARD_S):
    end = time.monotonic() + guard
    while time.monotonic() < end:
        got = pred()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"hang guard: {what} did not happen")


def wait_json(child, pred, what: str) -> dict:
    while True:
        line = child.readline()
        if line is None:
            raise AssertionError(f"child {child.pid} ended before {what}: {child.stderr()}")
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and pred(rec):
            return rec


def wal_index(db: Path) -> dict | None:
    try:
        with open(f"{db}-shm", "rb") as fh:
            return fmt.wal_index_header(fh.read(fmt.WAL_INDEX_HEADER_SIZE))
    except OSError:
        return None


def env() -> dict:
    out = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
    out["PYTHONPATH"] = str(REPO) + os.pathsep + out.get("PYTHONPATH", "")
    return out


def bundle_of(home: Path, tmp_path: Path) -> Path:
    out = tmp_path / "bundle.json"
    proc = subprocess.run([sys.executable, "-m", "hermes_state", "--home", str(home), "doctor",
                           "--bundle", str(out)], capture_output=True, text=True, env=env(),
                          timeout=HANG_GUARD_S)
    assert proc.returncode == 0, proc.stderr
    return out


def reproduce(bundle: Path, run_scenario, kind: str, checker: str):
    """Make the scenario, check its class and comments, run it: ``checker`` must FAIL."""
    repro = make_repro(bundle)
    assert (repro.kind, repro.checker) == (kind, checker), repro.text
    assert "processes.processes[" in repro.text or kind == "full_disk"
    assert "(line " in repro.text and "Could not be inferred" in repro.text
    result = run_scenario(repro.text)
    verdicts = {v.checker: v for v in result.verdicts}
    assert verdicts[checker].status == "FAIL", (
        f"{checker}: {verdicts[checker].status}: {verdicts[checker].summary}\n"
        + "\n".join(f"{v.checker} {v.status} {v.summary}" for v in result.verdicts)
        + "\n" + repro.text)
    reproduce.last_run_dir = result.run_dir
    return repro, verdicts


@pytest.fixture
def home(tmp_path):
    h = tmp_path / "home"
    h.mkdir()
    SessionDB(h / "state.db").close()
    return h


def test_a_stopped_lock_owner(home, tmp_path, spawn, run_scenario):
    db = home / "state.db"
    gw = spawn("bundle_gateway.py", db, "s-gw", "50", "hello",
               env_extra={failpoints.ENV_VAR: "write.before_commit=sleep(60000)@20"})
    wait_json(gw, lambda r: r.get("event") == "failpoint", "the gateway inside its 20th write")
    os.kill(gw.pid, signal.SIGSTOP)
    try:
        cron = spawn("cron_writer.py", db, "s-cron", "from cron")
        wait_json(cron, lambda r: r.get("event") == "retry", "the cron job waiting for the lock")
        bundle = bundle_of(home, tmp_path)
    finally:
        os.kill(gw.pid, signal.SIGCONT)
    repro, verdicts = reproduce(bundle, run_scenario, "stopped_owner", "no_lockup")
    assert "write.before_commit" in repro.text and "kind: cli" in repro.text  # the cron job
    assert "write lock" in verdicts["no_lockup"].summary


def test_a_long_read_transaction(home, tmp_path, spawn, run_scenario):
    db = home / "state.db"
    gw = spawn("bundle_gateway.py", db, "s-gw", "0", "hello")
    wait_json(gw, lambda r: r.get("ok") == 5, "the first appends")
    reader = spawn("dashboard_reader.py", db)
    reader.send("begin")
    wait_json(reader, lambda r: "reading" in r, "the read transaction")
    mark = wait_for(lambda: (wal_index(db) or {}).get("read_marks"), "a wal-index")
    # frames no checkpoint could copy because of the reader (whether its snapshot took read
    # slot 0, reading the database file, or a slot with a mark)
    pinned = wait_for(lambda: (i := wal_index(db)) and i["mx_frame"] - i["n_backfill"] >= 1500
                      and i, "1500 frames pinned")
    assert pinned and mark
    bundle = bundle_of(home, tmp_path)
    repro, verdicts = reproduce(bundle, run_scenario, "long_reader", "wal_growth")
    assert "kind: long_reader" in repro.text
    assert "reader-0" in verdicts["wal_growth"].summary


def test_a_sidecar_deleted_under_a_live_holder(home, tmp_path, spawn, run_scenario):
    db = home / "state.db"
    gw = spawn("bundle_gateway.py", db, "s-gw", "50", "hello")
    wait_json(gw, lambda r: r.get("ok") == 60, "60 appends")
    os.unlink(f"{db}-wal")
    wait_json(gw, lambda r: r.get("fail") == "DeletedWalGenerationError", "the refusal")
    bundle = bundle_of(home, tmp_path)
    repro, verdicts = reproduce(bundle, run_scenario, "sidecar", "error_taxonomy")
    assert "fault: delete_sidecars, files: [wal]" in repro.text
    assert "DeletedWalGenerationError" in verdicts["error_taxonomy"].summary
    assert verdicts["stale_wal_refusal"].status == "PASS"


def test_a_starved_checkpointer(home, tmp_path, spawn, run_scenario):
    db = home / "state.db"
    gw = spawn("bundle_gateway.py", db, "s-gw", "100", "hello")
    wait_json(gw, lambda r: r.get("ok") == 5, "the first appends")
    readers = [spawn("dashboard_reader.py", db), spawn("dashboard_reader.py", db)]
    readers[0].send("begin")
    wait_json(readers[0], lambda r: "reading" in r, "the first reader")
    done = threading.Event()
    failed: list = []

    def overlap() -> None:
        # Readers that always overlap: the next begins before the previous ends, each after the
        # gateway wrote 200 more frames; the WAL never gets a moment without a reader.
        k = 0
        try:
            while not done.is_set():
                last = wal_index(db)["mx_frame"]
                wait_for(lambda: done.is_set() or wal_index(db)["mx_frame"] >= last + 200,
                         "200 more frames")
                nxt, cur = readers[(k + 1) % 2], readers[k % 2]
                nxt.send("begin")
                wait_json(nxt, lambda r: "reading" in r, "the next reader")
                cur.send("end")
                wait_json(cur, lambda r: r.get("ended"), "the previous reader ending")
                k += 1
        except Exception as exc:  # noqa: BLE001 - reported by the test
            failed.append(exc)

    swapper = threading.Thread(target=overlap, daemon=True)
    swapper.start()
    try:
        wait_for(lambda: failed or wal_index(db)["mx_frame"] >= 3000, "a WAL of 3000 frames")
        bundle = bundle_of(home, tmp_path)
    finally:
        done.set()
        swapper.join(HANG_GUARD_S)
    assert not failed, failed
    repro, verdicts = reproduce(bundle, run_scenario, "starved", "wal_growth")
    assert "name: reader-1" in repro.text and "name: reader-2" in repro.text


def test_maintenance_beside_a_writer(home, tmp_path, spawn, run_scenario):
    db = home / "state.db"
    gw = spawn("bundle_gateway.py", db, "s-gw", "20", "hello")
    wait_json(gw, lambda r: r.get("ok") == 5, "the gateway writing")
    maint = subprocess.Popen(
        [sys.executable, "-m", "hermes_state", "--home", str(home), "sessions", "optimize",
         "--force"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        env={**env(), failpoints.ENV_VAR: "cmd.maintenance.locked=sleep(60000)"})
    try:
        wait_for(lambda: any(h.pid == maint.pid and h.mode == "exclusive"
                             for h in lock_holders(db)), "optimize holding the store's lock")
        bundle = bundle_of(home, tmp_path)
    finally:
        maint.kill()
        maint.wait(timeout=HANG_GUARD_S)
    repro, verdicts = reproduce(bundle, run_scenario, "maintenance", "no_lockup")
    assert "fault: run, command: optimize, force: true" in repro.text
    # `chaos shrink` takes it from there: a smaller scenario failing the same checker
    import io

    from rich.console import Console

    from chaos.scenario import load_scenario
    from chaos.shrink import shrink_run

    path, _ = shrink_run(reproduce.last_run_dir, max_runs=1, checker="no_lockup",
                         console=Console(file=io.StringIO()))
    assert "# Still fails: no_lockup FAIL" in path.read_text()
    assert list(load_scenario(path).expect) == ["no_lockup"]


def test_a_full_disk(tmp_path, spawn, run_scenario):
    from chaos.fixtures import TmpfsUnavailable, mount_tmpfs

    home = tmp_path / "home"
    try:
        mount_tmpfs(home, 4 << 20)
    except TmpfsUnavailable as exc:
        pytest.skip(f"a full disk needs a small filesystem of its own: {exc}")
    try:
        db = home / "state.db"
        SessionDB(db).close()
        gw = spawn("bundle_gateway.py", db, "s-gw", "0", "x" * 2000)
        wait_json(gw, lambda r: r.get("ok") == 5, "the gateway writing")
        try:
            with open(home / "balloon", "wb") as fh:
                while True:
                    fh.write(b"\0" * (64 << 10))
                    fh.flush()
        except OSError as exc:  # ENOSPC: the filesystem is full (on a loaded machine the
            if exc.errno != errno.ENOSPC:  # gateway can fill it before the balloon is opened)
                raise
        wait_json(gw, lambda r: "full" in str(r.get("msg", "")), "a write failing: disk full")
        bundle = bundle_of(home, tmp_path)
        gw.kill()
    finally:
        subprocess.run(["umount", "-l", str(home)], capture_output=True)
    reproduce(bundle, run_scenario, "full_disk", "error_taxonomy")
