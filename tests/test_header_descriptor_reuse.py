"""Hostile test of the write path's header read (issue 24 item 4, decision 0023 second pass):
the descriptor the generation check reads ``state.db``'s header through is the lowest one of
this process on that inode, which need not be SQLite's. Closed by its owner and its number
reused by a copy of the store, it reads a header with this store's application_id; a
``cp other.db state.db`` (same inode, new content) must still be refused (SPEC §10.1)."""

from __future__ import annotations

import shutil

import pytest

from hermes_state import SessionDB, StateDbReplacedError


def test_a_copy_over_state_db_is_refused_after_a_reused_descriptor_number(tmp_path):
    p = tmp_path / "state.db"
    other = tmp_path / "other" / "state.db"
    other.parent.mkdir()
    o = SessionDB(other)
    o.create_session("x", "cli")
    o.close()
    s = SessionDB(p)
    s.create_session("s1", "cli")
    s.close()
    backup = tmp_path / "backup.db"
    shutil.copy(p, backup)
    probe = open(p, "rb")  # other code of the process has state.db open while the store opens
    db = SessionDB(p)
    try:
        db.append_message("s1", "user", "hello")
        number = probe.fileno()
        probe.close()
        copy = open(backup, "rb")  # the process reads a backup copy: often the same number
        try:
            if copy.fileno() != number:
                pytest.skip("the descriptor number was not reused")
            # state.db overwritten in place by another store (same inode, new header)
            with open(other, "rb") as src, open(p, "r+b") as dst:
                dst.write(src.read())
                dst.truncate()
            with pytest.raises(StateDbReplacedError):
                db.append_message("s1", "user", "into the replaced file")
        finally:
            copy.close()
    finally:
        db.close()


def test_the_wal_index_is_read_through_the_shm_itself_after_a_reused_descriptor_number(
        tmp_path):
    """The same class for ``-shm``: the descriptor the write path reads the wal-index header
    through (which decides the checkpoint lock's mode, SPEC §4) is identity-checked, so a
    number reused by another file is dropped and the ``-shm`` itself found again."""
    import os

    p = tmp_path / "state.db"
    with SessionDB(p) as s:
        s.create_session("s1", "cli")
    db = SessionDB(p)
    try:
        db.append_message("s1", "user", "hello")
        shm = db.connection.generation.shm
        probe_number = os.open(f"{p}-shm", os.O_RDONLY)  # lower than any later descriptor?
        db.connection._shm.fd = probe_number  # the cached number is this one ...
        os.close(probe_number)  # ... whose owner closes it ...
        decoy = tmp_path / "decoy"
        decoy.write_bytes(b"\0" * 4096)
        reused = os.open(decoy, os.O_RDONLY)  # ... and another file gets the number
        try:
            if reused != probe_number:
                pytest.skip("the descriptor number was not reused")
            db.append_message("s1", "user", "after the reuse")
            fd = db.connection._shm.fd
            assert fd is not None and fd != reused
            st = os.fstat(fd)
            assert (st.st_dev, st.st_ino) == tuple(shm)
        finally:
            os.close(reused)
    finally:
        db.close()
