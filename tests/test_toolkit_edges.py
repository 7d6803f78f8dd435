"""Issue 22 item 8, the toolkit's edges: a role's home is the run's, a tmpfs never outlives its
run, the faulty filesystem's control socket answers its owner only, and ``--stores`` survives a
store that is not one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 120.0  # hang guard only

HOME_SCENARIO = """\
name: role-home
description: a role that opens SessionDB() with no path must open the run's store
duration: 30s
roles:
  - {name: plugin, kind: callable}
expect:
  integrity: {}
"""


def test_a_role_calling_sessiondb_without_a_path_opens_the_run_store(run_scenario, tmp_path,
                                                                     monkeypatch):
    """Issue 22 item 8: role processes did not get HERMES_HOME, so ``SessionDB()`` in role code
    wrote to the user's real ~/.hermes/state.db (here a decoy home the test points at)."""
    users = tmp_path / "users-hermes"
    monkeypatch.setenv("HERMES_HOME", str(users))
    monkeypatch.setenv("HOME", str(tmp_path / "user"))

    def plugin(ctx):
        from hermes_state import SessionDB

        def touch():
            with SessionDB() as db:
                db.create_session("from-role", source="cli")
                return {"db": str(db.db_path), "home": os.environ.get("HERMES_HOME")}

        ctx.op("open_default", touch)

    result = run_scenario(HOME_SCENARIO, roles={"plugin": plugin})
    history = (result.run_dir / "history" / "plugin-0.jsonl").read_text()
    ok = next(json.loads(line) for line in history.splitlines() if '"type": "ok"' in line)
    home = result.run_dir / "home"
    assert ok["result"]["home"] == str(home), ok
    assert Path(ok["result"]["db"]).resolve() == (home / "state.db").resolve()
    assert not users.exists() and not (tmp_path / "user" / ".hermes").exists()


# ------------------------------------------------------------------ the tmpfs lifeline
TMPFS_SCENARIO = """\
name: tmpfs-lifeline
description: a run on its own tmpfs, killed with SIGKILL while its gateway appends
duration: 40s
store: {fixture: empty, tmpfs: 4M}
roles:
  - {name: gw, kind: gateway, workload: {appends_per_s: 20}}
expect:
  integrity: {}
"""


def _needs_tmpfs():
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")


def _wait(predicate, what: str, bound_s: float = HANG_GUARD_S):
    """Poll ``predicate`` until true; the bound is a hang guard, not a speed claim."""
    import time

    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"{what}: not within the {bound_s:g}s hang guard")


def _mounts_under(root: Path) -> list[Path]:
    """Every tmpfs mounted under ``root`` (read from /proc/self/mountinfo, whoever mounted it)."""
    out = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        head, _, tail = line.partition(" - ")
        point = head.split()[4].replace("\\040", " ")
        if tail.split()[0] == "tmpfs" and point.startswith(str(root)):
            out.append(Path(point))
    return out


def test_a_run_killed_with_sigkill_leaves_no_tmpfs_mounted(tmp_path):
    """Issue 22 item 8: ``store: {tmpfs: ...}`` and the runner SIGKILLed: the tmpfs stayed
    mounted. Now its guard sees the lifeline close, keeps the files and unmounts it."""
    import signal

    _needs_tmpfs()
    sc = tmp_path / "tmpfs.yaml"
    sc.write_text(TMPFS_SCENARIO)
    out = tmp_path / "runs"
    proc = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(sc), "--out", str(out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, cwd=tmp_path)
    try:
        (mountpoint,) = _wait(lambda: _mounts_under(out), "the run's tmpfs mounted")
        _wait(lambda: list(out.glob("*/history/gw-0.jsonl")), "the gateway started")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=HANG_GUARD_S)
        # unmounted, and the evidence kept in place (the copy is put back after the unmount)
        _wait(lambda: not _mounts_under(out) and (mountpoint / "state.db").is_file(),
              "the guard unmounted the tmpfs and put its files back")
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the orphaned role processes
        except ProcessLookupError:
            pass
        for m in _mounts_under(out):
            subprocess.run(["umount", "-l", str(m)], check=False)


def test_the_next_run_sweeps_a_stale_tmpfs_of_a_dead_run(tmp_path, run_scenario):
    """A tmpfs whose runner is gone (its guard killed too) is rescued and unmounted by the
    next run, whatever scenario it runs."""
    _needs_tmpfs()
    from chaos.fs import tmpfs_guard

    stale = tmp_path / "old-run" / "home"
    stale.mkdir(parents=True)
    dead = f"{tmpfs_guard.SOURCE_TAG}:{os.getpid()}:0"  # this pid, another start: not alive
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", dead, str(stale)], check=True)
    try:
        (stale / "state.db").write_text("the earlier run's store\n")
        assert _mounts_under(tmp_path)
        run_scenario(HOME_SCENARIO.replace("kind: callable", "kind: gateway").replace(
            "duration: 30s", "duration: 1s"))
        assert not _mounts_under(tmp_path / "old-run")
        assert (stale / "state.db").read_text() == "the earlier run's store\n"
    finally:
        for m in _mounts_under(tmp_path / "old-run"):
            subprocess.run(["umount", "-l", str(m)], check=False)


# ------------------------------------------------------------------ the FUSE control socket
NOBODY = 65534


def _as_nobody(address: str, request: dict) -> str:
    """Connect to the control socket ``address`` as uid 65534 (a forked child) and send
    ``request``; returns the reply line, or ``"error: ..."`` when it could not connect."""
    import socket

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: another local user
        try:
            os.close(r)
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
                sock.settimeout(30)
                sock.connect(address if address.startswith("/") else "\0" + address)
                sock.sendall((json.dumps(request) + "\n").encode())
                reply = sock.makefile("rb").readline().decode() or "error: no reply"
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            reply = f"error: {type(exc).__name__}: {exc}"
        os.write(w, reply.encode()[:4000])
        os._exit(0)
    os.close(w)
    chunks = []
    while chunk := os.read(r, 4096):
        chunks.append(chunk)
    os.close(r)
    os.waitpid(pid, 0)
    return b"".join(chunks).decode()


def test_another_user_cannot_command_the_faulty_filesystem(tmp_path):
    """Issue 22 item 8: the control socket was in the abstract namespace: any local user could
    send ``power_cut`` to a root run. Now it is 0600 in a 0700 directory, and the server checks
    the peer's uid (SO_PEERCRED) even if the modes were loosened."""
    from chaos.fs import FaultyMount, FsUnavailable

    if os.geteuid() != 0:
        pytest.skip("needs root to run a second user")
    fs = FaultyMount(tmp_path / "backing", tmp_path / "mnt", tmp_path / "fs.jsonl")
    try:
        fs.start()
    except FsUnavailable as exc:
        pytest.skip(f"FUSE unavailable: {exc}")
    try:
        reply = _as_nobody(fs.address, {"cmd": "power_cut", "reason": "an intruder"})
        assert fs.status()["down"] is False, f"another user cut the power: {reply}"
        assert reply.startswith("error:") and "Permission denied" in reply, reply
        sock = Path(fs.address)
        assert sock.is_socket() and (sock.stat().st_mode & 0o777) == 0o600
        assert (sock.parent.stat().st_mode & 0o777) == 0o700
        os.chmod(sock.parent, 0o755)  # loosened by hand: the peer check still refuses
        os.chmod(sock, 0o666)
        reply = _as_nobody(fs.address, {"cmd": "power_cut", "reason": "an intruder"})
        assert "refused: peer uid 65534" in reply, reply
        assert fs.status()["down"] is False  # the owner still commands it
    finally:
        fs.close()
    assert not Path(fs.address).exists()


# ------------------------------------------------------------------ --stores DIR
def _stores_dir(tmp_path: Path) -> tuple[Path, Path]:
    """A directory of stores: one good, and one of each kind that is not a store."""
    from hermes_state.testing import FIXTURE_ROOT

    root = tmp_path / "stores"
    good = root / "good"
    good.mkdir(parents=True)
    (good / "state.db").write_bytes((FIXTURE_ROOT / "v2" / "state.db").read_bytes())
    (root / "text").mkdir()
    (root / "text" / "state.db").write_text("not a database at all\n")
    damaged = bytearray((FIXTURE_ROOT / "v2" / "state.db").read_bytes())
    damaged[100:4096] = b"\xa5" * (4096 - 100)  # the schema page, garbled
    (root / "damaged").mkdir()
    (root / "damaged" / "state.db").write_bytes(bytes(damaged))
    (root / "fifo").mkdir()
    os.mkfifo(root / "fifo" / "state.db")
    victim = tmp_path / "victim.db"
    victim.write_bytes((FIXTURE_ROOT / "v2" / "state.db").read_bytes())
    (root / "link").mkdir()
    (root / "link" / "state.db").symlink_to(victim)
    (root / "dumpfifo").mkdir()
    (root / "dumpfifo" / "state.db").write_bytes((FIXTURE_ROOT / "v2" / "state.db").read_bytes())
    os.mkfifo(root / "dumpfifo" / "dump.json")
    return root, victim


BAD_STORES = {"text": "not a SQLite database", "damaged": "SQLite cannot read it",
              "fifo": "not a regular file (a FIFO)", "link": "a symbolic link",
              "dumpfifo": "dump.json: not a regular file (a FIFO)"}


def test_matrix_stores_skips_what_is_not_a_store_and_tests_the_rest(tmp_path):
    """Issue 22 item 8: ``chaos matrix --stores DIR`` died with a traceback on the first
    ``*.db`` that is not SQLite; a FIFO would have hung it. Now each such store gets one SKIPPED
    row saying why, and the good store is tested."""
    root, victim = _stores_dir(tmp_path)
    before = victim.read_bytes()
    proc = subprocess.run([sys.executable, "-m", "chaos", "matrix", "--no-generated",
                           "--no-real", "--stores", str(root), "--modes", "plain", "--jsonl"],
                          capture_output=True, text=True, timeout=HANG_GUARD_S * 3, cwd=REPO)
    assert "Traceback" not in proc.stderr, proc.stderr
    rows = {r["name"].split("/")[0].rsplit(".", 1)[1]: r for r in
            map(json.loads, proc.stdout.splitlines())}
    assert rows["good"]["status"] == "PASS", rows["good"]
    for name, why in BAD_STORES.items():
        assert rows[name]["status"] == "SKIPPED" and why in rows[name]["problems"][0], \
            rows[name]
    assert proc.returncode == 0, proc.stderr
    assert victim.read_bytes() == before


def test_gate_stores_skips_what_is_not_a_store(tmp_path):
    root, _ = _stores_dir(tmp_path)
    for name in ("damaged", "fifo", "link", "dumpfifo"):
        __import__("shutil").rmtree(root / name)
    proc = subprocess.run([sys.executable, "-m", "chaos", "gate", "--no-scenarios",
                           "--no-generated", "--no-real", "--stores", str(root), "--modes",
                           "plain", "--jobs", "2", "--out", str(tmp_path / "gate"), "--json"],
                          capture_output=True, text=True, timeout=HANG_GUARD_S * 3, cwd=REPO)
    assert "Traceback" not in proc.stderr, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    statuses = {r["suite"] + "/" + r["name"]: r["status"] for r in result["rows"]}
    assert any(k.endswith("good/plain") and v == "PASS" for k, v in statuses.items()), statuses
    assert any(k.endswith("text/skipped") and v == "SKIPPED" for k, v in statuses.items()), \
        statuses
    assert result["exit_code"] == 0 and proc.returncode == 0, proc.stderr[-2000:]


def test_the_copy_goes_back_even_when_a_live_process_wrote_after_the_unmount(tmp_path,
                                                                           monkeypatch):
    """Found under load (a new user's full run): the SIGKILLed runner's gateway, still alive,
    re-created its lock file in the mount point right after ``umount -l``; the guard then left
    the evidence in ``home.from-tmpfs`` and ``home`` without ``state.db``. Now both are kept
    and the copy is in place."""
    _needs_tmpfs()
    from chaos.fs import tmpfs_guard

    home = tmp_path / "run" / "home"
    home.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "chaos-test", str(home)],
                   check=True)
    real_run = subprocess.run

    def umount_then_a_late_write(argv, *a, **kw):
        done = real_run(argv, *a, **kw)
        if argv[:2] == ["umount", "-l"]:
            (home / "state.db.checkpoint.lock").write_text("")  # the orphan's next lock op
        return done

    try:
        (home / "state.db").write_text("the run's store\n")
        monkeypatch.setattr(tmpfs_guard.subprocess, "run", umount_then_a_late_write)
        out = tmpfs_guard.rescue(home)
        assert out["unmounted"] and "error" not in out, out
        assert not _mounts_under(tmp_path)
        assert (home / "state.db").read_text() == "the run's store\n"
        assert (Path(out["after_unmount"]) / "state.db.checkpoint.lock").is_file()
    finally:
        for m in _mounts_under(tmp_path):
            real_run(["umount", "-l", str(m)], check=False)
