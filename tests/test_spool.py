"""Refused writes are diverted to the spool and replayed exactly once (SPEC §10.1)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from hermes_state import DeletedWalGenerationError, SessionDB
from hermes_state.api.spool import read_spool, replay_spool
from hermes_state.cli import main as cli


def test_divert_then_replay_imports_each_message_once(tmp_path):
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s", source="gateway")
        path = db.divert_to_spool("s", [{"role": "user", "content": "refused one",
                                         "platform_message_id": "p1"},
                                        {"role": "assistant", "content": "refused two",
                                         "tool_calls": [{"id": "c1"}]}])
        assert path == tmp_path / "sessions" / "s.jsonl"
        assert len(read_spool(path)) == 2
        first = replay_spool(db)
        second = replay_spool(db)
        assert (first["imported"], first["skipped"]) == (2, 0)
        assert (second["imported"], second["skipped"]) == (0, 2)
        msgs = db.get_messages("s")
        assert [m["content"] for m in msgs] == ["refused one", "refused two"]
        assert db.get_session("s")["message_count"] == 2
        assert db.get_session("s")["tool_call_count"] == 1
    assert path.exists()  # spool files are never deleted


def test_replay_creates_a_missing_session_and_skips_garbage(tmp_path):
    with SessionDB(tmp_path / "state.db") as db:
        db.divert_to_spool("ghost", [{"role": "user", "content": "x"}])
        with open(tmp_path / "sessions" / "ghost.jsonl", "a") as fh:
            fh.write('{"torn": \n')
            fh.write(json.dumps({"spool_id": "z", "session_id": "ghost",
                                 "message": {"role": "user", "bogus_field": 1}}) + "\n")
        result = replay_spool(db)
        assert result["imported"] == 1 and result["failed"] == 1
        assert db.get_session("ghost")["source"] == "spool"


def test_spool_refuses_only_an_empty_session_id(tmp_path):
    with SessionDB(tmp_path / "state.db") as db:
        with pytest.raises(ValueError):
            db.divert_to_spool("", [{"role": "user", "content": "x"}])


@pytest.mark.parametrize("odd", ["../escape", "a/b", "..", "a\x00b", "x" * 300, "sid-\ud83d",
                                 "a\nb"])
def test_any_session_id_can_be_spooled_inside_the_spool_dir_and_replayed(tmp_path, odd):
    """Refused messages must never be dropped: an id that is not a file name is hashed."""
    with SessionDB(tmp_path / "state.db") as db:
        path = db.divert_to_spool(odd, [{"role": "user", "content": "kept"}])
        assert path.parent == tmp_path / "sessions" and path.name.endswith(".jsonl")
        assert replay_spool(db)["imported"] == 1
        assert [m["content"] for m in db.get_messages(odd)] == ["kept"]
    assert not (tmp_path / "escape.jsonl").exists()


def test_crash_during_replay_neither_loses_nor_duplicates(tmp_path):
    """A replayer killed by SIGKILL right before a COMMIT: a rerun imports every record once."""
    home = tmp_path
    with SessionDB(home / "state.db") as db:
        db.create_session("s", source="gateway")
        db.divert_to_spool("s", [{"role": "user", "content": f"m{i}"} for i in range(5)])
    code = ("import sys; from hermes_state import SessionDB; from hermes_state.api.spool import "
            "replay_spool; replay_spool(SessionDB(sys.argv[1]))")
    env = dict(os.environ, HERMES_STATE_FAILPOINTS="write.before_commit=crash@3")
    proc = subprocess.run([sys.executable, "-c", code, str(home / "state.db")], env=env,
                          timeout=60)
    assert proc.returncode == -signal.SIGKILL
    with SessionDB(home / "state.db") as db:
        assert len(db.get_messages("s")) == 2
        replay_spool(db)
        assert [m["content"] for m in db.get_messages("s")] == [f"m{i}" for i in range(5)]


def test_refused_append_spooled_and_replayed_by_the_cli(tmp_path):
    """The whole path: a retired writer spools, a new process replays through the CLI."""
    db = SessionDB(tmp_path / "state.db")
    db.create_session("s", source="gateway")
    db.append_message("s", "user", "before")
    os.unlink(tmp_path / "state.db-wal")
    os.unlink(tmp_path / "state.db-shm")
    msg = {"role": "user", "content": "after the delete"}
    with pytest.raises(DeletedWalGenerationError):
        db.append_message("s", **msg)
    db.divert_to_spool("s", [msg])
    db.close()
    assert cli(["--home", str(tmp_path), "sessions", "replay-spool"]) == 0
    assert cli(["--home", str(tmp_path), "sessions", "replay-spool", "--json"]) == 0
    with SessionDB(tmp_path / "state.db") as fresh:
        contents = [m["content"] for m in fresh.get_messages("s")]
    assert contents.count("after the delete") == 1


def test_replay_spool_never_creates_a_store(tmp_path, capsys):
    assert cli(["--home", str(tmp_path / "typo"), "sessions", "replay-spool"]) == 1
    err = capsys.readouterr().err
    assert "no session store at" in err and "next: check --home" in err
    assert not (tmp_path / "typo").exists()


def test_replay_spool_skips_bad_records_by_line_and_imports_the_rest(tmp_path):
    import subprocess
    import sys

    from hermes_state import SessionDB

    db = SessionDB(tmp_path / "state.db")
    db.create_session("a", source="cli")
    db.close()
    spool = tmp_path / "sessions"
    spool.mkdir()
    (spool / "a.jsonl").write_text(
        '{"spool_id":"s1","session_id":"a","message":{"role":"user","content":"x",'
        '"timestamp":"yesterday"}}\n'
        '[1, 2]\n'
        '"str"\n'
        '{"spool_id": 5, "session_id": "a", "message": {"role": "user", "content": "y"}}\n'
        '{"spool_id":"s9","session_id":["a"],"message":{"role":"user","content":"z"}}\n'
        '{"bad\n')
    (spool / "b.jsonl").write_text(
        '{"spool_id":"s2","session_id":"b","message":{"role":"user","content":"precious spooled"}}\n')
    doctor = subprocess.run([sys.executable, "-m", "hermes_state", "--home", str(tmp_path),
                             "doctor"], capture_output=True, text=True, timeout=60)
    assert "Traceback" not in doctor.stderr, doctor.stderr
    proc = subprocess.run([sys.executable, "-m", "hermes_state", "--home", str(tmp_path),
                           "sessions", "replay-spool"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "imported 1 message(s)" in proc.stdout and "5 failed" in proc.stdout
    for where in ("a.jsonl:1", "a.jsonl:2", "a.jsonl:3", "a.jsonl:4", "a.jsonl:5"):
        assert where in proc.stderr, (where, proc.stderr)
    with SessionDB(tmp_path / "state.db") as db:
        assert [m["content"] for m in db.get_messages("b")] == ["precious spooled"]
        assert db.get_messages("a") == []
    again = subprocess.run([sys.executable, "-m", "hermes_state", "--home", str(tmp_path),
                            "sessions", "replay-spool"], capture_output=True, text=True, timeout=60)
    assert "imported 0 message(s), 1 already imported" in again.stdout


# --------------------------------------------------------------------------- issue 22 item 1
def test_a_torn_last_line_does_not_swallow_the_next_append(tmp_path):
    """A spool append cut short (a full disk, a crash) leaves a line without its newline; the
    next append must start a line of its own, or its message is glued to the torn one and
    never replayed."""
    from hermes_state.api.spool import divert_to_spool

    home = tmp_path
    (home / "sessions").mkdir()
    (home / "sessions" / "s.jsonl").write_text('{"spool_id": "torn", "session_id": "s", "mess')
    divert_to_spool(home, "s", [{"role": "user", "content": "after the tear"}])
    with SessionDB(home / "state.db") as db:
        res = replay_spool(db)
        assert res["imported"] == 1 and res["torn"] == 1, res
        assert [m["content"] for m in db.get_messages("s")] == ["after the tear"]


def test_a_spool_that_cannot_be_written_is_named_and_retried_with_the_same_records(tmp_path):
    """The disk is full (a real one: a 1 MiB tmpfs filled by a file): the spool append is named,
    with the file and the messages at stake, and ``retry()`` appends the same records once
    space is back; replay imports each message once."""
    import shutil
    import subprocess

    from hermes_state.api.spool import SpoolWriteError, divert_to_spool
    from hermes_state.errors import EvidenceWriteError

    mnt = tmp_path / "small"
    mnt.mkdir()
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("a real full disk needs a tmpfs mount (root and mount(8))")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        home = mnt / "home"
        (home / "sessions").mkdir(parents=True)
        (home / "sessions" / "s.jsonl").write_text("")
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
        for size in (1 << 16, 1 << 12, 1):
            try:
                while True:
                    os.write(fd, b"\0" * size)
            except OSError:
                pass
        os.close(fd)
        msgs = [{"role": "user", "content": "x" * 5000 + str(i)} for i in range(3)]
        with pytest.raises(SpoolWriteError) as info:
            divert_to_spool(home, "s", msgs)
        err = info.value
        assert isinstance(err, EvidenceWriteError) and err.count == 3
        assert "3 refused message(s)" in err.user_message
        assert str(home / "sessions" / "s.jsonl") in err.user_message
        assert "No space left on device" in err.user_message
        os.unlink(mnt / "filler")
        err.retry()
        with SessionDB(home / "state.db") as db:
            res = replay_spool(db)
            assert res["imported"] == 3 and not res["failed"], res
            assert sorted(m["content"][-1] for m in db.get_messages("s")) == ["0", "1", "2"]
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
