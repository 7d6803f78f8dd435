"""The write path's per-write work (issue 24 item 4): every SPEC check still made, cheaper.

* the generation check (SPEC §10.1) stats the store's directory once instead of ``lstat``-ing
  the three files while the directory is unchanged, and still refuses a deleted or replaced
  sidecar, a replaced ``state.db`` and a moved directory;
* text parameters are cleaned once (SPEC §2.2): ASCII text is never scanned, and the values
  ``append_message`` cleaned are not scanned a second time by the cleaning connection.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from hermes_state import DeletedWalGenerationError, SessionDB, StateDbReplacedError
from hermes_state.api import text as text_mod
from hermes_state.processes import generation


@pytest.fixture
def settle_now(monkeypatch):
    """Trust a directory stamp at once (the 2 s settle margin is for real clocks)."""
    monkeypatch.setattr(generation, "DIR_SETTLE_NS", 0)
    monkeypatch.setattr(generation, "FINE_SETTLE_NS", 0)


def wait_clock_past(ns: int, probe_dir: Path) -> None:
    """Wait until the filesystem's own clock (a probe file's ctime, in a directory other than
    the store's) is past ``ns``: a later change in the store's directory gets a later stamp.
    An event of the filesystem, not a sleep; bounded by a hang guard."""
    probe = probe_dir / "clock-probe"
    for _ in range(200_000):
        probe.write_bytes(b"x")
        if os.stat(probe).st_ctime_ns > ns:
            return
    raise AssertionError("the filesystem clock did not move")


def _counting(monkeypatch, name: str, wanted) -> list[str]:
    """Record the paths ``os.<name>`` is called with for which ``wanted(path)`` is true."""
    seen: list[str] = []
    real = getattr(os, name)

    def counting(path, *a, **kw):
        if wanted(os.fspath(path)):
            seen.append(os.fspath(path))
        return real(path, *a, **kw)

    monkeypatch.setattr(os, name, counting)
    return seen


def _store_lstats(monkeypatch, db_path: Path) -> list[str]:
    return _counting(monkeypatch, "lstat", lambda p: p.startswith(str(db_path)))


def test_a_write_in_an_unchanged_directory_makes_no_lstat_of_the_store_files(
        tmp_path, monkeypatch, settle_now):
    path = tmp_path / "home" / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "first: a full check keeps the directory's stamp")
        seen = _store_lstats(monkeypatch, path)
        for i in range(5):
            db.append_message("s", "user", f"then one stat of the directory ({i})")
        assert seen == []  # before: 3 per write (state.db, -wal, -shm)
        assert db.message_count("s") == 6


@pytest.mark.parametrize("change", ["delete_wal", "delete_shm", "rename_wal_aside"])
def test_a_sidecar_changed_after_fast_checks_is_still_refused(tmp_path, monkeypatch,
                                                              settle_now, change):
    path = tmp_path / "home" / "state.db"
    probe_dir = tmp_path / "elsewhere"
    probe_dir.mkdir()
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "kept")
        kept = db.connection._dir_stamp.kept
        assert kept is not None
        wait_clock_past(max(kept[2], kept[3]), probe_dir)
        if change == "delete_wal":
            os.unlink(f"{path}-wal")
        elif change == "delete_shm":
            os.unlink(f"{path}-shm")
        else:
            os.rename(f"{path}-wal", f"{path}-wal.aside")
        with pytest.raises(DeletedWalGenerationError):
            db.append_message("s", "user", "refused")


def test_a_moved_directory_and_a_replaced_main_file_are_still_refused(tmp_path, settle_now):
    home = tmp_path / "home"
    path = home / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "kept")
        assert db.connection._dir_stamp.kept is not None
        os.rename(home, tmp_path / "moved")
        with pytest.raises(StateDbReplacedError):
            db.append_message("s", "user", "refused: the path names nothing now")
        # moved back before the close, so its capture of the retired WAL can be written (no
        # "exiting without a capture" warning at the worker's exit)
        os.rename(tmp_path / "moved", home)
    home2 = tmp_path / "home2"
    path2 = home2 / "state.db"
    with SessionDB(path2) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "kept")
        other = tmp_path / "other.db"
        shutil.copyfile(path2, other)
        os.rename(other, path2)  # a new inode at the path (the directory changes)
        with pytest.raises(StateDbReplacedError):
            db.append_message("s", "user", "refused")


def test_an_unsettled_directory_stamp_is_not_kept(tmp_path):
    """With the real margin, a directory changed within the last 2 s is stat-ed three times."""
    path = tmp_path / "home" / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "x")
        st = os.stat(path.parent)
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        if time.time_ns() - max(st.st_mtime_ns, st.st_ctime_ns) < generation.settle_ns(stamp):
            assert db.connection._dir_stamp.kept is None


def test_cleaned_parameters_are_not_scanned_twice_and_others_still_are(monkeypatch):
    calls = []
    real = text_mod._SURROGATE

    class Counting:
        def search(self, s):
            calls.append(s)
            return real.search(s)

        def sub(self, *a):
            return real.sub(*a)

    monkeypatch.setattr(text_mod, "_SURROGATE", Counting())
    args = text_mod.cleaned(["ascii", "caf\u00e9", 3, None])
    assert calls == ["caf\u00e9"]  # ASCII text is never scanned
    assert text_mod.clean_params(args) is args
    assert calls == ["caf\u00e9"]  # not scanned again
    assert text_mod.clean_params(["a\ud835b"]) == ("a\ufffdb",)


def test_every_text_field_of_an_append_is_still_cleaned(tmp_path):
    with SessionDB(tmp_path / "state.db") as db:
        db.create_session("s\ud800", source="cli")
        mid = db.append_message("s\ud800", "user\udfff", "a\ud835b", tool_name="t\ud800",
                                token_count="7\ud800", reasoning="r\udc00")
        row = db.connection.read(lambda c: c.execute(
            "SELECT session_id, role, content, tool_name, token_count, reasoning FROM messages "
            "WHERE id = ?", (mid,)).fetchone())
        assert tuple(row) == ("s\ufffd", "user\ufffd", "a\ufffdb", "t\ufffd", "7\ufffd",
                              "r\ufffd")


def _calls_of_writes(monkeypatch, db, path: Path, n: int) -> tuple[list[str], list[str]]:
    """``(directory stats, store-file lstats)`` made by ``n`` appends."""
    stats = _counting(monkeypatch, "stat", lambda p: p == os.fspath(path.parent))
    lstats = _store_lstats(monkeypatch, path)
    for i in range(n):
        db.append_message("s", "user", f"write {i}")
    return stats, lstats


def test_the_lock_and_the_generation_check_share_one_directory_stat_per_write(
        tmp_path, monkeypatch, settle_now):
    path = tmp_path / "home" / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "first: full checks keep the stamp")
        stats, lstats = _calls_of_writes(monkeypatch, db, path, 4)
        # before: 2 per write (the lock's identity check, then the generation check's)
        assert len(stats) == 4 and lstats == []


def test_while_no_stamp_can_settle_every_write_compares_files_without_a_directory_stat(
        tmp_path, monkeypatch):
    monkeypatch.setattr(generation, "DIR_SETTLE_NS", 3_600 * 10**9)
    monkeypatch.setattr(generation, "FINE_SETTLE_NS", 3_600 * 10**9)
    path = tmp_path / "home" / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "the directory just changed")
        stats, lstats = _calls_of_writes(monkeypatch, db, path, 3)
        assert stats == []  # the stamp could not be kept: not taken
        # state.db, -wal, -shm and the lock file, at every write
        assert len(lstats) == 4 * 3
        os.unlink(f"{path}-wal")
        with pytest.raises(DeletedWalGenerationError):
            db.append_message("s", "user", "refused")


def test_the_settle_margin_follows_the_timestamps_resolution():
    fine = (1, 2, 1_700_000_000_123_456_789, 1_700_000_000_123_456_789)
    whole_ms = (1, 2, 1_700_000_000_123_000_000, 1_700_000_000_123_000_000)
    whole_s = (1, 2, 1_700_000_000_000_000_000, 1_700_000_000_000_000_000)
    if os.uname().sysname == "Linux":
        assert generation.settle_ns(fine) == generation.FINE_SETTLE_NS
    assert generation.settle_ns(whole_ms) == generation.DIR_SETTLE_NS
    assert generation.settle_ns(whole_s) == generation.DIR_SETTLE_NS


def test_a_change_after_the_fine_margin_is_still_refused(tmp_path):
    """The real 100 ms margin (no fixture): once the stamp is kept, a sidecar deleted later
    changes the directory's stamp and the next write is refused."""
    path = tmp_path / "home" / "state.db"
    probe_dir = tmp_path / "elsewhere"
    probe_dir.mkdir()
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        st = os.stat(path.parent)
        stamp = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
        if generation.settle_ns(stamp) != generation.FINE_SETTLE_NS:
            pytest.skip("this filesystem stores coarse timestamps: the 2 s margin applies")
        wait_clock_past(max(stamp[2], stamp[3]) + generation.FINE_SETTLE_NS, probe_dir)
        db.append_message("s", "user", "a full check keeps the stamp")
        assert db.connection._dir_stamp.kept is not None
        os.unlink(f"{path}-shm")
        with pytest.raises(DeletedWalGenerationError):
            db.append_message("s", "user", "refused")


@pytest.mark.parametrize("content", ["hello", "caf\u00e9 \ud83d", ["a", {"b": 1}], 3, b"raw"])
@pytest.mark.parametrize("observed", [False, True])
def test_a_plain_message_is_the_row_the_general_path_writes(tmp_path, content, observed):
    """append_message's plain-message path (no optional field) writes the row the general
    path writes (forced here by an empty ``display_kind``-free extra: tool_calls=[] is falsy
    and so stored NULL, like no tool calls)."""
    from hermes_state.api import messages

    fast = messages.build_append("s", "user", content, observed=observed, timestamp=5.0)
    general = messages.build_append("s", "user", content, tool_calls=[], observed=observed,
                                    timestamp=5.0)
    rows = []
    for i, fn in enumerate((fast, general)):
        with SessionDB(tmp_path / f"s{i}" / "state.db") as db:
            db.create_session("s", source="cli")
            db.connection.execute_write(fn)
            rows.append({k: v for k, v in db.get_messages("s")[0].items() if k != "id"})
            assert db.get_session("s")["message_count"] == 1
    assert rows[0] == rows[1]
