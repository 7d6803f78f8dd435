"""Hostile test of the cached process id (issue 24 item 4): ``os.register_at_fork`` runs only
for forks made through Python (``os.fork``, ``os.forkpty``, multiprocessing). A child made by
``fork(2)`` called directly (ctypes here; a C extension alike) that then runs Python code must
still get ForkedHandleError from a parent's handle, as it did with ``os.getpid()``."""

from __future__ import annotations

import ctypes
import os
import signal
import sys

import pytest

from hermes_state import SessionDB
from hermes_state.errors import ForkedHandleError


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork(2) through libc: Linux")
def _child_writes(db, text: str) -> None:
    """In a forked child: one append through the parent's handle, then exit 0 when it raised
    ForkedHandleError, 3 when it wrote, 4 on anything else; a child blocked on a lock another
    thread held at the fork dies of SIGALRM (the hang guard)."""
    signal.alarm(10)
    code = 4
    try:
        db.append_message("s", "user", text)
        code = 3
    except ForkedHandleError:
        code = 0
    finally:
        os._exit(code)


def test_a_child_of_a_libc_fork_cannot_write_through_the_parents_handle(tmp_path):
    db = SessionDB(tmp_path / "state.db")
    try:
        db.create_session("s", "cli")
        libc = ctypes.CDLL(None, use_errno=True)
        pid = libc.fork()
        if pid == 0:  # the child: no Python at-fork hook ran
            _child_writes(db, "from the child")
        assert pid > 0
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the child wrote through the parent's handle"
        assert db.message_count("s") == 0
    finally:
        db.close()


def test_a_child_forked_during_a_parents_write_is_refused_not_blocked(tmp_path, armed,
                                                                      event_log):
    """A child forked while another thread of the parent is inside a write holds a copy of
    the handle's lock, locked for ever: its first write must raise ForkedHandleError (as its
    reads do), never block on that copy (no wait without a bound)."""
    import threading

    db = SessionDB(tmp_path / "state.db")
    try:
        db.create_session("s", "cli")
        inside = threading.Event()
        armed("write.after_begin=sleep(1000)@1")
        writer = threading.Thread(target=db.append_message, args=("s", "user", "parent"))
        from hermes_state import events

        def at_failpoint(event: dict) -> None:
            if event.get("event") == "failpoint":
                inside.set()

        events.add_listener(at_failpoint)
        try:
            writer.start()
            assert inside.wait(60), "the parent's write never reached the failpoint"
            pid = os.fork()
            if pid == 0:
                _child_writes(db, "child")
            _, status = os.waitpid(pid, 0)
        finally:
            events.remove_listener(at_failpoint)
            writer.join(60)
        assert os.waitstatus_to_exitcode(status) == 0, status
    finally:
        db.close()
