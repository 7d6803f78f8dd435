"""Edges of the loss window's time bound (SPEC §4, issue 24 item 1), found by trying to break
it: a writer that ends without ``close()``, one killed before its sync, a handle carried
across ``fork``, and bad values of ``HERMES_STATE_WAL_SYNC_S``."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from hermes_state import SessionDB, events
from hermes_state.errors import ForkedHandleError
from hermes_state.store import wal_sync


@pytest.mark.parametrize("raw", ["nan", "inf", "-inf", "-1", "1e10", "soon", "3601"])
def test_a_delay_that_is_not_a_bound_falls_back_to_the_default_with_a_warning(
        raw, monkeypatch, caplog):
    monkeypatch.setenv(wal_sync.ENV_VAR, raw)
    with caplog.at_level(logging.WARNING, logger="hermes_state"):
        assert wal_sync.delay_s() == wal_sync.SYNC_DELAY_S
    assert wal_sync.ENV_VAR in caplog.text


@pytest.mark.parametrize("raw, want", [("off", None), ("0", None), ("2.5", 2.5),
                                       ("3600", 3600.0), ("", wal_sync.SYNC_DELAY_S)])
def test_valid_delays_and_off(raw, want, monkeypatch):
    monkeypatch.setenv(wal_sync.ENV_VAR, raw)
    assert wal_sync.delay_s() == want


def test_an_open_syncs_the_log_a_killed_writer_left_unsynced(tmp_path):
    db_path = tmp_path / "state.db"
    with SessionDB(db_path) as db:
        db.create_session("s", source="cli")
    # A writer at NORMAL commits and is killed before its 1 s sync: its frames are in the
    # page cache only. (A reader keeps the log from being checkpointed and removed.)
    child = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal
        from hermes_state import SessionDB
        db = SessionDB({str(db_path)!r})
        db.append_message('s', 'user', 'acknowledged, then killed')
        os.kill(os.getpid(), signal.SIGKILL)
    """)], timeout=120, env={**os.environ, wal_sync.ENV_VAR: "60"})
    assert child.returncode == -9
    assert os.path.getsize(f"{db_path}-wal") > 32  # the killed writer's frames
    seen: list[dict] = []
    listen = lambda e: e["event"] == "wal_sync" and seen.append(e)  # noqa: E731
    events.add_listener(listen)
    try:
        with SessionDB(db_path) as db:
            assert [e["trigger"] for e in seen][:1] == ["open"] and "error" not in seen[0]
            assert [m["content"] for m in db.get_messages("s")] == ["acknowledged, then killed"]
    finally:
        events.remove_listener(listen)


@pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")
def test_a_writer_that_exits_without_close_syncs_its_last_commits(tmp_path):
    db_path = tmp_path / "state.db"
    with SessionDB(db_path) as db:
        db.create_session("s", source="cli")
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import sys
        from hermes_state import SessionDB
        db = SessionDB({str(db_path)!r}); print('ready', flush=True); sys.stdin.read()
        db.close()
    """)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "ready"  # keeps the log alive
        trace = tmp_path / "strace.txt"
        subprocess.run(["strace", "-f", "-y", "-e", "trace=fsync,fdatasync,write", "-o",
                        str(trace), sys.executable, "-c", textwrap.dedent(f"""
            import os
            from hermes_state import SessionDB
            db = SessionDB({str(db_path)!r})
            db.append_message('s', 'user', 'acknowledged, then the process exits')
            os.write(1, b'ACKNOWLEDGED')
        """)], check=True, timeout=120, capture_output=True,
                       env={**os.environ, wal_sync.ENV_VAR: "60"})
        lines = trace.read_text().splitlines()
        after = lines[next(i for i, line in enumerate(lines) if "ACKNOWLEDGED" in line):]
        assert any("sync" in line and "state.db-wal" in line for line in after), after[-20:]
    finally:
        holder.communicate("", timeout=60)


def test_a_handle_carried_across_fork_is_refused_in_the_child_and_its_close_is_harmless(
        tmp_path):
    db_path = tmp_path / "state.db"
    db = SessionDB(db_path)
    try:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "before the fork")
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report what each use did, then leave at once
            out = {}
            for name, call in (("append", lambda: db.append_message("s", "user", "child")),
                               ("read", lambda: db.get_messages("s")),
                               ("checkpoint", lambda: db.connection.checkpoint())):
                try:
                    call()
                    out[name] = "ran"
                except ForkedHandleError as exc:
                    out[name] = "refused: " + str(exc).split(";")[-1].strip()
                except BaseException as exc:  # noqa: BLE001 - reported to the parent
                    out[name] = f"{type(exc).__name__}: {exc}"
            try:
                db.close()
                out["close"] = "returned"
            except BaseException as exc:  # noqa: BLE001
                out["close"] = f"{type(exc).__name__}: {exc}"
            os.write(w, json.dumps(out).encode())
            os._exit(0)
        os.close(w)
        with os.fdopen(r) as fh:
            out = json.loads(fh.read())
        _, status = os.waitpid(pid, 0)
        assert os.WIFEXITED(status)
        refused = f"refused: open a new SessionDB in process {pid}"
        assert out == {"append": refused, "read": refused, "checkpoint": refused,
                       "close": "returned"}
        # the parent's handle and log are untouched by the child's close
        db.append_message("s", "user", "after the child")
        assert [m["content"] for m in db.get_messages("s")] == ["before the fork",
                                                                  "after the child"]
    finally:
        db.close()
    with SessionDB(db_path) as again:
        assert len(again.get_messages("s")) == 2
