"""Hostile test of the cached process id (issue 24 item 4): ``os.register_at_fork`` runs only
for forks made through Python (``os.fork``, ``os.forkpty``, multiprocessing). A child made by
``fork(2)`` called directly (ctypes here; a C extension alike) that then runs Python code must
still get ForkedHandleError from a parent's handle, as it did with ``os.getpid()``."""

from __future__ import annotations

import ctypes
import os
import sys

import pytest

from hermes_state import SessionDB
from hermes_state.errors import ForkedHandleError


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="fork(2) through libc: Linux")
def test_a_child_of_a_libc_fork_cannot_write_through_the_parents_handle(tmp_path):
    db = SessionDB(tmp_path / "state.db")
    try:
        db.create_session("s", "cli")
        libc = ctypes.CDLL(None, use_errno=True)
        pid = libc.fork()
        if pid == 0:  # the child: no Python at-fork hook ran
            code = 4
            try:
                db.append_message("s", "user", "from the child")
                code = 3
            except ForkedHandleError:
                code = 0
            finally:
                os._exit(code)
        assert pid > 0
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the child wrote through the parent's handle"
        assert db.message_count("s") == 0
    finally:
        db.close()
