"""Unwritable and suspicious store files are refused with an error naming the path (SPEC §1, §4)."""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
from pathlib import Path

import pytest

from hermes_state import HermesStateError, SessionDB, StorePermissionError


@pytest.mark.parametrize("suffix", ["-wal", "-shm"])
def test_symlinked_store_file_is_refused(tmp_path, suffix):
    path = tmp_path / "home" / "state.db"
    SessionDB(path).close()
    link = Path(f"{path}{suffix}")
    elsewhere = tmp_path / f"elsewhere{suffix}"
    elsewhere.write_bytes(b"")
    os.symlink(elsewhere, link)
    before = sorted(p.name for p in path.parent.iterdir())
    with pytest.raises(StorePermissionError) as info:
        SessionDB(path)
    err = info.value
    assert isinstance(err, PermissionError) and isinstance(err, HermesStateError)
    assert str(link) in str(err)
    assert "symbolic link" in str(err)
    assert sorted(p.name for p in path.parent.iterdir()) == before  # nothing was created


def _chattr(flag: str, path: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", flag, str(path)], capture_output=True).returncode == 0


@pytest.fixture
def immutable(tmp_path):
    """``immutable(path)`` sets chattr +i (root ignores mode bits); undone at teardown."""
    done: list[Path] = []

    def _set(path: Path) -> None:
        if not _chattr("+i", path):
            pytest.skip("chattr +i is unavailable on this filesystem: as root, mode bits alone "
                        "cannot make a directory unwritable")
        done.append(path)

    yield _set
    for path in reversed(done):
        _chattr("-i", path)


def test_unwritable_directory_names_path_and_fix(tmp_path, immutable):
    home = tmp_path / "locked"
    home.mkdir()
    immutable(home)
    with pytest.raises(StorePermissionError) as info:
        SessionDB(home / "state.db")
    text = str(info.value)
    assert str(home) in text
    assert "chmod" in text
    assert "delete the -wal" not in text.replace("never delete the -wal", "")
    assert list(home.iterdir()) == []


def test_uncreatable_home_names_path(tmp_path, immutable):
    parent = tmp_path / "parent"
    parent.mkdir()
    immutable(parent)
    with pytest.raises(StorePermissionError) as info:
        SessionDB(parent / "home" / "state.db")
    assert str(parent / "home") in str(info.value)


def test_unwritable_store_file_names_path_and_fix(tmp_path, immutable):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
    immutable(path)
    with pytest.raises(StorePermissionError) as info:
        SessionDB(path)
    text = str(info.value)
    assert str(path) in text
    assert f"chmod u+rw {path}" in text
    assert "never delete the -wal" in text.lower()
    assert f"chattr -i {path}" in text  # root ignores the mode: the usual cause is immutability


def test_read_only_open_never_creates_a_store(tmp_path):
    path = tmp_path / "nothing" / "state.db"
    with pytest.raises(sqlite3.OperationalError):
        SessionDB(path, read_only=True)
    assert not path.exists()
    assert not Path(f"{path}-wal").exists()


def test_read_only_handle_refuses_writes_and_reads(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "hello")
    with SessionDB(path, read_only=True) as ro:
        assert [m["content"] for m in ro.get_messages("s")] == ["hello"]
        with pytest.raises(sqlite3.OperationalError):
            ro.append_message("s", "user", "no")
    with SessionDB(path) as db:
        assert db.get_session("s")["message_count"] == 1
