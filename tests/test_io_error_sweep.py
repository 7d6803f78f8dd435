"""The I/O error sweep, SQLite-harness style (issue 22: make the suite find the next edge).

For each workload that writes (append, capture after a sidecar deletion, capture after state.db
is replaced, spool divert and replay, backup, restore, quarantine, salvage, optimize, import, export), the store lives on the
faulty FUSE filesystem (``chaos/fs``) and the Nth operation that opens a file or changes the
filesystem fails with ENOSPC, then with EIO (``io_error {op: any, nth: N}``), for every N the
workload performs. After each run (tests/io_sweep_workloads.py): the failure is named (no
traceback), no acknowledged write and no evidence is lost, the store reopens and passes
``integrity_check``, and a retry with the fault gone succeeds.

CI runs a sample of every (workload, errno): the first and the last operation and
:data:`SAMPLE` more at seeded positions (``HERMES_IO_SWEEP_SEED``, default fixed). The full
sweep, every N, is the ``io_sweep_full`` tier: ``pytest -m io_sweep_full
tests/test_io_error_sweep.py`` (about an hour on 2 cores); it records its figures in
``benchmarks/results/io_sweep.json``. Every run's operation count is a site swept; the terminal
summary prints the sites and runs per workload (tests/conftest.py).

Skipped, with the reason, where FUSE cannot be mounted.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path

import pytest

import io_sweep_workloads as sweep
from chaos.fs import FaultyMount, FsUnavailable, fuse_unavailable_reason

ERRNOS = ("ENOSPC", "EIO")
SAMPLE = 3
SEED = int(os.environ.get("HERMES_IO_SWEEP_SEED", "22"))
GENERATOR_CASES = "generator_cases"  # summed by tests/conftest.py
CASES = [(w, e) for w in sweep.WORKLOADS for e in ERRNOS]


@pytest.fixture(scope="module")
def fs(tmp_path_factory):
    reason = fuse_unavailable_reason()
    if reason:
        pytest.skip(f"the I/O error sweep needs the FUSE tier: {reason}")
    base = tmp_path_factory.mktemp("io-sweep")
    mount = FaultyMount(base / "backing", base / "mnt", base / "fs.jsonl")
    try:
        mount.start()
    except FsUnavailable as exc:
        pytest.skip(f"the I/O error sweep needs the FUSE tier: {exc}")
    mount.base = base  # type: ignore[attr-defined]
    yield mount
    mount.close()


@pytest.fixture(scope="module")
def templates(tmp_path_factory):
    """Each workload's template store, built once per worker (off the faulty mount)."""
    root = tmp_path_factory.mktemp("io-sweep-templates")
    made: dict[str, Path] = {}

    def get(name: str) -> Path:
        if name not in made:
            made[name] = root / name
            sweep.WORKLOADS[name].prepare(made[name] / "home")
        return made[name]

    return get


def _positions(total: int, name: str, errno_name: str, full: bool) -> list[int]:
    if full:
        return list(range(1, total + 1))
    rng = random.Random(f"{SEED}:{name}:{errno_name}")
    middle = rng.sample(range(2, total), min(SAMPLE, max(0, total - 2))) if total > 2 else []
    return sorted({1, total, *middle})


def _sweep(fs, templates, name: str, errno_name: str, full: bool, record_property) -> None:
    w = sweep.WORKLOADS[name]
    template = templates(name)
    counter = iter(range(10 ** 6))

    def dirs() -> tuple[Path, Path]:
        run = f"{name}-{errno_name}-{os.getpid()}-{next(counter)}"
        return fs.mountpoint / run, fs.backing / run

    t0 = time.monotonic()
    _, findings, total, _ = sweep.run_case(fs, w, template, *dirs(), errno_name, None)
    assert not findings, f"{name} fails without any fault: {findings}"
    assert total > 0, f"{name} performed no file operation on the faulty filesystem"
    found: list[str] = []
    runs = fired = failed = 0
    for n in _positions(total, name, errno_name, full):
        out, findings, _matched, hit = sweep.run_case(fs, w, template, *dirs(), errno_name, n)
        runs += 1
        fired += hit
        failed += out.exc is not None or out.code not in (None, 0)
        found += [f"{name} {errno_name} N={n}/{total}: {f}" for f in findings]
    record_property("io_sweep", {"workload": name, "errno": errno_name, "sites": total,
                                 "runs": runs, "faults_fired": fired, "failed_runs": failed,
                                 "findings": len(found),
                                 "full": full, "seconds": round(time.monotonic() - t0, 1)})
    record_property(GENERATOR_CASES, ("I/O error sweep (runs)", runs))
    assert not found, "\n".join(found[:40]) + (f"\n... {len(found) - 40} more"
                                               if len(found) > 40 else "")


@pytest.mark.parametrize("name, errno_name", CASES, ids=[f"{w}-{e}" for w, e in CASES])
def test_io_error_sweep_sample(fs, templates, name, errno_name, record_property):
    _sweep(fs, templates, name, errno_name, False, record_property)


@pytest.mark.sweep  # deselected in an ordinary run, like every generator's full sweep
@pytest.mark.io_sweep_full
@pytest.mark.parametrize("name, errno_name", CASES, ids=[f"{w}-{e}" for w, e in CASES])
def test_io_error_sweep_full(fs, templates, name, errno_name, record_property, request):
    if "io_sweep_full" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the full I/O error sweep (every N) runs with `-m io_sweep_full`")
    _sweep(fs, templates, name, errno_name, True, record_property)


# --------------------------------------------------------------------------- what it found
# Each test below is one finding of the sweep, pinned with a fault aimed at one operation.

def _home(fs, name: str) -> Path:
    home = fs.mountpoint / f"{name}-{os.getpid()}" / "home"
    home.mkdir(parents=True)
    return home


def test_restore_refuses_when_the_pre_restore_copy_is_cut_short_by_a_full_disk(fs):
    """Found by the sweep (restore, ENOSPC, N=68..93 of 245): the pre-restore copy could not be
    verified (or its online backup failed part-way); the restore went on as if the store were
    damaged and overwrote it, losing the write made after the snapshot. Now: not restored,
    the store unchanged."""
    home = _home(fs, "restore-precopy")
    sweep._restore_prepare(home)
    sid = sweep._snapshot_id(home)
    before = sweep.messages(home / "state.db")
    # The verification of the pre-restore copy opens it and SQLite extends its -shm: that
    # write fails, quick_check cannot run, and the copy is not verified.
    fault = fs.arm(kind="io_error", op="write", path=rf"{home.parent.name}/home/state-snapshots/"
                   r".*pre-restore.*/state\.db-shm$", errno="ENOSPC", nth=1)
    try:
        code, _, err = sweep.cli("--home", home, "backup", "restore", sid)
    finally:
        (gone,) = fs.disarm(fault["id"])
    assert gone["fired"] >= 1
    assert code == 1 and "not restored" in err and "Traceback" not in err, err
    assert sweep.messages(home / "state.db") == before  # "after-snapshot" is still there
    assert "after-snapshot" in before


def test_a_header_read_that_fails_is_named_not_a_traceback(fs):
    """Found by the sweep (spool, quarantine; EIO and ENOSPC at N=6): opening the store read its
    header through a descriptor whose open failed, and a bare OSError escaped SessionDB()."""
    from hermes_state import SessionDB
    from hermes_state.errors import StoreIOError

    home = _home(fs, "header-read")
    sweep.make_store(home / "state.db")
    fault = fs.arm(kind="io_error", op="open", path=rf"{home.parent.name}/home/state\.db$",
                   errno="EIO", nth=1)
    try:
        with pytest.raises(StoreIOError) as info:
            SessionDB(home / "state.db")
    finally:
        fs.disarm(fault["id"])
    assert "Input/output error" in info.value.user_message
    assert str(home / "state.db") in info.value.user_message
    with SessionDB(home / "state.db") as db:  # the retry after the fault
        assert db.get_session("s") is not None


def test_an_open_that_cannot_create_the_wal_is_named(fs):
    """Found by the sweep (append at N=4-6): SQLite's "unable to open database file" and
    "attempt to write a readonly database" escaped without the path or the cause."""
    from hermes_state import SessionDB
    from hermes_state.errors import StoreIOError

    home = _home(fs, "wal-create")
    sweep.make_store(home / "state.db")
    fault = fs.arm(kind="io_error", op="open", path=rf"{home.parent.name}/home/state\.db-wal$",
                   errno="ENOSPC", nth=1)
    try:
        with pytest.raises(StoreIOError) as info:
            with SessionDB(home / "state.db") as db:
                db.append_message("s", "user", "x")
    finally:
        fs.disarm(fault["id"])
    assert str(home / "state.db") in info.value.user_message
    assert info.value.errno_name.startswith("SQLITE_")


def _replaced_under_a_writer(fs, name: str):
    """A writer with 3 acknowledged appends whose state.db is then replaced by another store's
    file (``os.replace``, as a user restoring a copy would): ``(home, writer)``."""
    from hermes_state import SessionDB

    home = _home(fs, name)
    other = home.parent / "other"
    other.mkdir()
    with SessionDB(other / "state.db") as o:
        o.create_session("o", source="cli")
        o.append_message("o", "user", "other-1")
    writer = SessionDB(home / "state.db")
    writer.create_session("s", source="cli")
    for i in range(3):
        writer.append_message("s", "user", f"acked-{i}")
    os.replace(other / "state.db", home / "state.db")
    return home, writer


def _sees_the_new_store(home: Path) -> None:
    from hermes_state import SessionDB

    with SessionDB(home / "state.db") as db:
        assert [m["content"] for m in db.get_messages("o")] == ["other-1"]
        assert db.get_messages("s") == []
    assert sweep.integrity(home / "state.db") == ["ok"]


def test_a_replaced_stores_wal_that_could_not_be_moved_aside_is_retried_at_the_next_call(fs):
    """Found trying item 1 as a hostile user: when state.db is replaced under a writer, its
    -wal/-shm must leave the path (SQLite would replay them onto the new file). On a full disk
    the rename failed, was logged once and dropped: the next open replayed the old frames and
    showed the old store's session instead of the new file's. Now it is named in the refusal
    and retried at every later call."""
    from hermes_state.errors import StateDbReplacedError

    home, writer = _replaced_under_a_writer(fs, "replaced-retry")
    fault = fs.arm(kind="io_error", op="rename", path=rf"{home.parent.name}/home/state\.db-wal$",
                   errno="ENOSPC", nth=1)
    try:
        with pytest.raises(StateDbReplacedError) as info:
            writer.append_message("s", "user", "refused")
    finally:
        (gone,) = fs.disarm(fault["id"])
    assert gone["fired"] == 1
    assert "still at" in info.value.operator_detail and "replay" in info.value.operator_detail
    assert (home / "state.db-wal").exists()
    with pytest.raises(StateDbReplacedError) as again:  # the space is back: retried here
        writer.append_message("s", "user", "refused")
    assert not (home / "state.db-wal").exists()
    assert "moved this generation's sidecars aside" in again.value.operator_detail
    writer.close()
    _sees_the_new_store(home)


def test_an_open_moves_a_replaced_stores_wal_aside_before_sqlite_could_replay_it(fs, tmp_path):
    """The holder could not move it at any call nor at close (the disk stayed full): the next
    open finds the log at the path by its verified capture (same inode, same salts), refuses
    by name while it cannot move it, reads nothing through it, and moves it into the capture
    once it can. Nothing is deleted: the capture keeps the frames."""
    from hermes_state import SessionDB
    from hermes_state.errors import EvidenceWriteError, StateDbReplacedError

    home, writer = _replaced_under_a_writer(fs, "replaced-open")
    fault = fs.arm(kind="io_error", op="rename", path=rf"{home.parent.name}/home/state\.db-wal$",
                   errno="ENOSPC", nth=1, persistent=True)
    try:
        for _ in range(2):
            with pytest.raises(StateDbReplacedError):
                writer.append_message("s", "user", "refused")
        writer.close()
        assert (home / "state.db-wal").exists()
        with pytest.raises(StateDbReplacedError, match="still at"):
            SessionDB(home / "state.db", read_only=True)
        with pytest.raises(EvidenceWriteError, match="replay that log onto the new state.db"):
            SessionDB(home / "state.db")
    finally:
        fs.disarm(fault["id"])
    assert (home / "state.db-wal").exists()  # nothing deleted while it could not be moved
    _sees_the_new_store(home)
    (capture,) = sweep.verified_captures(home)
    assert (capture / "state.db-wal.moved-from-path").exists()
    assert set(sweep.capture_messages(capture, tmp_path)) >= {"acked-0", "acked-1", "acked-2"}


def test_a_quarantine_cut_short_never_leaves_the_damaged_files_wal_beside_a_fresh_store(fs):
    """Found trying item 1 as a hostile user: quarantine renamed state.db first, then its
    sidecars; when the -wal's rename failed (a full disk) the damaged file was gone from the
    path and its -wal was left there, so the next open created a fresh state.db beside it and
    SQLite replayed (then checkpointed and deleted) the damaged file's log: the evidence was
    lost. Now the sidecars go first and state.db last: a move cut short leaves state.db at the
    path, still damaged, and the next open moves the rest."""
    from hermes_state import SessionDB
    from hermes_state.errors import EvidenceWriteError

    home = _home(fs, "quarantine-order")
    sweep.make_store(home.parent / "src" / "state.db")
    with SessionDB(home.parent / "src" / "state.db") as db:  # a log with frames, kept open
        db.append_message("s", "user", "in-the-log")
        wal = (home.parent / "src" / "state.db-wal").read_bytes()
    assert wal
    (home / "state.db").write_bytes(b"\0" * 8192)
    (home / "state.db-wal").write_bytes(wal)
    fault = fs.arm(kind="io_error", op="rename", path=rf"{home.parent.name}/home/state\.db-wal$",
                   errno="ENOSPC", nth=1)
    try:
        with pytest.raises(EvidenceWriteError):
            SessionDB(home / "state.db")
    finally:
        (gone,) = fs.disarm(fault["id"])
    assert gone["fired"] == 1
    with SessionDB(home / "state.db") as db:  # the retry: the rest is moved, a fresh store
        db.create_session("n", source="cli")
        assert db.get_session("s") is None
    kept = [p for p in home.iterdir() if p.name.startswith("state.db.corrupt.")
            and p.name.endswith(".bak-wal")]
    assert [p.read_bytes() for p in kept] == [wal]
    assert any(p.read_bytes() == b"\0" * 8192 for p in home.iterdir()
               if p.name.startswith("state.db.corrupt.") and p.name.endswith(".bak"))
    assert sweep.integrity(home / "state.db") == ["ok"]
