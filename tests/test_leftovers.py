"""Leftovers of a killed command are cleaned by its next run, or reported by doctor (issue 11.12).

Each command is really killed (SIGKILL from a ``cmd.*`` failpoint) part-way: ``backup`` with its
image in ``state-snapshots/<name>.partial/``, ``sessions recover`` with a full private copy of
the store in the temporary directory, ``sessions export -o FILE`` with ``FILE.partial``. doctor
names what is left; the next run of the same command removes it and does its work. A capture
interrupted by a crash may hold the only copy of a WAL: doctor reports it, nothing removes it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_state import SessionDB, failpoints

REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 120


@pytest.fixture
def env(tmp_path) -> dict:
    """The CLI's environment: a private temporary directory (recover's copies go there)."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    base = {k: v for k, v in os.environ.items() if k != failpoints.ENV_VAR}
    return dict(base, PYTHONPATH=str(REPO), TMPDIR=str(tmp))


@pytest.fixture
def home(tmp_path) -> Path:
    h = tmp_path / "home"
    with SessionDB(h / "state.db") as db:
        db.create_session("s", source="cli")
        for i in range(20):
            db.append_message("s", "user", f"message {i} " + "x" * 200)
    return h


def cli(env: dict, *args, crash_at: str | None = None) -> subprocess.CompletedProcess:
    run_env = dict(env)
    if crash_at:
        run_env[failpoints.ENV_VAR] = f"{crash_at}=crash"
    return subprocess.run([sys.executable, "-m", "hermes_state", *map(str, args)],
                          capture_output=True, text=True, timeout=HANG_GUARD_S, env=run_env)


def doctor(env: dict, home: Path) -> dict:
    out = cli(env, "--home", home, "doctor", "--json")
    assert "Traceback" not in out.stderr, out.stderr
    return json.loads(out.stdout)


def finding(report: dict, words: str) -> dict | None:
    return next((f for f in report["findings"] if words in f["title"]), None)


def test_killed_backup_leaves_a_partial_that_doctor_names_and_the_next_backup_removes(env, home):
    killed = cli(env, "--home", home, "backup", crash_at="cmd.backup.before_publish")
    assert killed.returncode == -signal.SIGKILL, killed
    root = home / "state-snapshots"
    left = [p.name for p in root.iterdir()]
    assert len(left) == 1 and left[0].endswith(".partial"), left
    assert (root / left[0] / "state.db").stat().st_size > 0  # a full copy of the store
    report = doctor(env, home)
    found = finding(report, "unfinished snapshot")
    assert found and left[0] in found["detail"], report["findings"]
    assert report["stats"]["leftovers"]["snapshots"] == left
    again = cli(env, "--home", home, "backup")
    assert again.returncode == 0, again.stderr
    names = [p.name for p in root.iterdir()]
    assert len(names) == 1 and not names[0].endswith(".partial"), names
    assert finding(doctor(env, home), "unfinished snapshot") is None


def test_killed_recover_leaves_a_store_copy_that_the_next_recover_removes(env, home, tmp_path):
    out = tmp_path / "out" / "new.db"
    out.parent.mkdir()
    killed = cli(env, "sessions", "recover", "--source", home / "state.db", "--output", out,
                 crash_at="cmd.recover.after_copy")
    assert killed.returncode == -signal.SIGKILL, killed
    tmp = Path(env["TMPDIR"])
    copies = [p for p in tmp.iterdir() if p.name.startswith("hermes-recover")]
    assert len(copies) == 1 and (copies[0] / "state.db").stat().st_size > 0, copies
    beside = [p.name for p in out.parent.iterdir()]
    assert beside == [".new.db.recover.partial"], beside
    report = doctor(env, home)
    found = finding(report, "left by a killed `sessions recover`")
    assert found and copies[0].name in found["detail"], report["findings"]
    again = cli(env, "sessions", "recover", "--source", home / "state.db", "--output", out)
    assert again.returncode == 0, again.stderr
    assert [p.name for p in tmp.iterdir() if p.name.startswith("hermes-recover")] == []
    assert [p.name for p in out.parent.iterdir()] == ["new.db"]
    with SessionDB(out, read_only=True) as db:
        assert len(db.get_messages("s")) == 20
    assert finding(doctor(env, home), "left by a killed") is None


def test_a_running_recover_is_never_cleaned_by_another(env, home, tmp_path):
    """Only copies nobody holds are removed: a live recover's directory is flock-ed."""
    import fcntl

    tmp = Path(env["TMPDIR"])
    live = tmp / "hermes-recover.partial"
    live.mkdir()
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # this test plays the running recover
    try:
        ok = cli(env, "sessions", "recover", "--source", home / "state.db", "--inspect-only")
        assert ok.returncode == 0, ok.stderr
        assert live.exists()
        assert finding(doctor(env, home), "left by a killed") is None
    finally:
        os.close(fd)


def test_killed_export_leaves_a_partial_that_the_next_export_removes(env, home, tmp_path):
    target = tmp_path / "exports" / "all.json"
    target.parent.mkdir()
    target.write_text("the previous export")
    killed = cli(env, "--home", home, "sessions", "export", "-o", target,
                 crash_at="cmd.export.before_publish")
    assert killed.returncode == -signal.SIGKILL, killed
    assert target.read_text() == "the previous export"  # never half-replaced
    assert sorted(p.name for p in target.parent.iterdir()) == ["all.json", "all.json.partial"]
    again = cli(env, "--home", home, "sessions", "export", "-o", target)
    assert again.returncode == 0, again.stderr
    assert sorted(p.name for p in target.parent.iterdir()) == ["all.json"]
    assert json.loads(target.read_text())[0]["id"] == "s"


def test_interrupted_capture_is_reported_and_kept(env, tmp_path, spawn):
    path = tmp_path / "cap" / "state.db"
    child = spawn("store_child.py", env_extra={failpoints.ENV_VAR: "capture.mid_copy=crash"})
    child.ok("open", path=str(path))
    child.ok("create", sid="s")
    os.unlink(f"{path}-wal")
    child.send(json.dumps({"op": "append", "sid": "s", "n": 1}))
    assert child.wait() == -signal.SIGKILL
    partial = [p for p in path.parent.iterdir() if p.name.endswith(".partial")]
    assert len(partial) == 1 and (partial[0] / "state.db-wal").exists(), partial
    report = doctor(env, path.parent)
    found = finding(report, partial[0].name)
    assert found and "interrupted" in " ".join(found["detail"]), report["findings"]
    SessionDB(path).close()
    cli(env, "--home", path.parent, "backup")
    assert partial[0].exists()  # evidence: never removed by the product


def test_a_killed_repairs_copies_are_named_by_doctor_and_removed_by_the_next_repair(env, home):
    from hermes_state.operator.schema_repair import repair_state_db_schema

    left = home / ".state.db.repair.partial"  # what a repair killed part-way leaves
    left.mkdir()
    (left / "state.db").write_bytes((home / "state.db").read_bytes())
    found = finding(doctor(env, home), "left by a killed schema repair")
    assert found and left.name in found["detail"]
    assert repair_state_db_schema(home / "state.db")["strategy"] == "already_healthy"
    assert not left.exists()
    assert finding(doctor(env, home), "left by a killed schema repair") is None
