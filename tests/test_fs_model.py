"""The faulty filesystem's model without FUSE: unsynced data per file, the namespace journal and
its undo, fault specs. These run everywhere; tests/test_fs_mount.py runs the real mount."""

from __future__ import annotations

import os

import pytest

from chaos.fs.faults import parse_fault
from chaos.fs.journal import Entry, Journal
from chaos.fs.unsynced import PAGE, FileState


@pytest.fixture
def backing_file(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"A" * 10000)
    fd = os.open(path, os.O_RDWR)
    yield path, fd
    try:
        os.close(fd)
    except OSError:
        pass


def test_unsynced_overwrite_is_visible_but_not_durable(backing_file):
    path, fd = backing_file
    fs = FileState(os.dup(fd))
    fs.write(5000, b"B" * 100)
    assert fs.read(4990, 20) == b"A" * 10 + b"B" * 10
    assert path.read_bytes() == b"A" * 10000          # the backing file is the disk
    assert fs.unsynced_bytes() == PAGE
    assert fs.flush() == PAGE
    assert path.read_bytes()[5000:5100] == b"B" * 100 and fs.is_clean()
    fs.close()


def test_extend_then_drop_keeps_the_durable_size(backing_file):
    path, fd = backing_file
    fs = FileState(os.dup(fd))
    fs.write(12000, b"C" * 10)
    assert fs.size == 12010 and fs.read(10000, 2000) == b"\0" * 2000
    fs.close()   # a power cut: the state is dropped, the backing never saw it
    assert path.stat().st_size == 10000


def test_truncate_then_extend_never_resurrects_old_bytes(backing_file):
    path, fd = backing_file
    fs = FileState(os.dup(fd))
    fs.truncate(100)
    fs.truncate(9000)
    assert fs.read(0, 9000) == b"A" * 100 + b"\0" * 8900
    fs.write(8000, b"D")
    assert fs.read(7999, 3) == b"\0D\0"
    fs.flush()
    data = path.read_bytes()
    assert len(data) == 9000 and data[:100] == b"A" * 100 and data[100:8000] == b"\0" * 7900
    fs.close()


def test_unsynced_truncate_is_undone_by_dropping_it(backing_file):
    path, fd = backing_file
    fs = FileState(os.dup(fd))
    fs.truncate(0)
    assert fs.size == 0 and fs.read(0, 10) == b""
    fs.close()
    assert path.stat().st_size == 10000


def test_failed_fsync_forgets_data_and_a_later_fsync_leaves_a_hole(backing_file):
    path, fd = backing_file
    fs = FileState(os.dup(fd))
    fs.write(10000, b"E" * PAGE)                        # page 2 (partial) and page 3
    assert fs.forget() > 0
    assert fs.read(10000, 4) == b"EEEE"                  # still readable (the page cache)
    fs.write(20000, b"F" * 10)                          # later data, synced fine
    fs.flush()
    data = path.read_bytes()
    assert data[20000:20010] == b"F" * 10
    assert data[10000:10000 + PAGE] == b"\0" * PAGE      # fsyncgate: the forgotten write is a hole
    fs.close()


def test_torn_write_persists_earlier_data_and_a_prefix(backing_file):
    path, fd = backing_file
    fs = FileState(os.dup(fd))
    fs.write(0, b"G" * 10)
    fs.persist_prefix(10000, b"H" * 7)
    fs.close()
    data = path.read_bytes()
    assert data[:10] == b"G" * 10 and data[10000:] == b"H" * 7


def _journal(tmp_path):
    backing = tmp_path / "b"
    backing.mkdir()
    return backing, Journal(backing, tmp_path / "stash")


def test_create_without_directory_fsync_is_undone_even_if_the_file_was_fsynced(tmp_path):
    backing, j = _journal(tmp_path)
    (backing / "new").write_text("data")
    j.record(Entry("create", "new"))
    assert j.undo_all()[0]["op"] == "create"
    assert not (backing / "new").exists()


def test_directory_fsync_commits_the_journal_up_to_its_last_entry(tmp_path):
    backing, j = _journal(tmp_path)
    (backing / "d").mkdir()
    j.record(Entry("mkdir", "d"))
    (backing / "d" / "x").write_text("1")
    j.record(Entry("create", "d/x"))
    (backing / "y").write_text("2")
    j.record(Entry("create", "y"))
    assert j.commit_dir("d") == 2                       # mkdir d and d/x, not y
    j.undo_all()
    assert (backing / "d" / "x").exists() and not (backing / "y").exists()


def test_unlink_and_rename_over_are_undone_with_the_old_inodes(tmp_path):
    backing, j = _journal(tmp_path)
    (backing / "a").write_text("old a")
    (backing / "b").write_text("old b")
    stash = j.before_remove("b")
    os.rename(backing / "a", backing / "b")
    j.record(Entry("rename", "a", dest="b", stash=stash))
    stash = j.before_remove("b")
    os.unlink(backing / "b")
    j.record(Entry("unlink", "b", stash=stash))
    undone = j.undo_all()
    assert [u["op"] for u in undone] == ["unlink", "rename"]
    assert (backing / "a").read_text() == "old a" and (backing / "b").read_text() == "old b"
    assert not list((tmp_path / "stash").iterdir())


def test_committed_entries_release_their_stash(tmp_path):
    backing, j = _journal(tmp_path)
    (backing / "a").write_text("x")
    stash = j.before_remove("a")
    os.unlink(backing / "a")
    j.record(Entry("unlink", "a", stash=stash))
    assert j.commit_all() == 1
    assert j.undo_all() == [] and not (backing / "a").exists()
    assert not list((tmp_path / "stash").iterdir())


@pytest.mark.parametrize("spec, field", [
    ({"kind": "nope"}, "kind"),
    ({"kind": "io_error", "op": "chmod"}, "op"),
    ({"kind": "io_error", "errno": "EPERM"}, "errno"),
    ({"kind": "io_error", "nth": 0}, "nth"),
    ({"kind": "io_error", "nth": 2, "probability": 0.5}, "nth"),
    ({"kind": "io_error", "probability": 2}, "probability"),
    ({"kind": "io_error", "op": "fsync", "extending": True}, "extending"),
    ({"kind": "torn_write", "keep_bytes": -1}, "keep_bytes"),
    ({"kind": "torn_write", "path": "("}, "path"),
    ({"kind": "slow_io", "delay": 0}, "delay"),
    ({"kind": "slow_io", "delay": 1, "op": "read"}, "op"),
    ({"kind": "slow_io", "delay": 1, "bogus": 1}, "bogus"),
])
def test_bad_fault_specs_name_the_field(spec, field):
    with pytest.raises(ValueError, match=f"^{field}:"):
        parse_fault(1, spec)


def test_nth_fires_once_and_persistent_keeps_failing():
    once = parse_fault(1, {"kind": "io_error", "op": "fsync", "path": "-wal$", "nth": 2})
    assert not once.matches("fsync", "state.db")
    assert [once.decide() for _ in range(4)] == [False, True, False, False]
    dead = parse_fault(2, {"kind": "io_error", "op": "fsync", "nth": 2, "persistent": True})
    assert [dead.decide() for _ in range(4)] == [False, True, True, True]


def test_probability_is_seeded_and_extending_filters_writes():
    a = parse_fault(1, {"kind": "io_error", "probability": 0.5, "seed": 7})
    b = parse_fault(1, {"kind": "io_error", "probability": 0.5, "seed": 7})
    seq = [a.decide() for _ in range(50)]
    assert seq == [b.decide() for _ in range(50)] and any(seq) and not all(seq)
    grow = parse_fault(3, {"kind": "io_error", "errno": "ENOSPC", "extending": True})
    assert not grow.matches("write", "state.db-wal", extends=False)
    assert grow.matches("write", "state.db-wal", extends=True)


def test_slow_io_window():
    every = parse_fault(1, {"kind": "slow_io", "delay": 0.1})
    assert all(every.decide() for _ in range(5))
    window = parse_fault(2, {"kind": "slow_io", "delay": 0.1, "nth": 2, "count": 2})
    assert [window.decide() for _ in range(5)] == [False, True, True, False, False]
