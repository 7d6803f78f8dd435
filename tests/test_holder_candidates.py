"""The open's holder scan reads only the processes on the kernel's lock table (issue 24 item 2;
SPEC §10.2, §10.4; docs/decisions/0003-doctor-and-holders.md).

Every process attached to a WAL generation holds POSIX locks on its files (deleted or not); the
open's refusal scan reads the descriptors of those processes only (and its own), flat in the
number of processes on the machine. It falls back to every process when the lock table cannot
be trusted. doctor and the maintenance gates still read every process.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys

import pytest

from hermes_state import DeletedWalGenerationError, SessionDB
from hermes_state.cli import main as cli
from hermes_state.processes import holders, lock_table

pytestmark = pytest.mark.skipif(not holders.HAVE_PROC, reason="needs /proc (Linux)")


@pytest.fixture
def closed_store(tmp_path):
    path = tmp_path / "home" / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
    return path


@pytest.fixture
def idle_processes(tmp_path):
    """20 idle processes holding open files (none of the store's, no locks)."""
    files = [tmp_path / f"f{i}" for i in range(5)]
    for f in files:
        f.write_text("x")
    code = ("import sys,time; fs=[open(p) for p in sys.argv[1:]]; print('up', flush=True); "
            "sys.stdin.readline()")
    procs = [subprocess.Popen([sys.executable, "-c", code, *map(str, files)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for _ in range(20)]
    for p in procs:
        assert p.stdout.readline().strip() == "up"
    yield [p.pid for p in procs]
    for p in procs:
        p.kill()
        p.wait()


def listed_fd_dirs(monkeypatch) -> list[int]:
    seen: list[int] = []
    real = os.listdir

    def recording(path="."):
        text = os.fspath(path)
        if text.startswith("/proc/") and text.endswith("/fd") and text != "/proc/self/fd":
            seen.append(int(text.split("/")[2]))
        return real(path)

    monkeypatch.setattr(os, "listdir", recording)
    return seen


def test_the_open_reads_only_processes_on_the_lock_table(closed_store, idle_processes,
                                                         monkeypatch, spawn):
    holder = spawn("store_child.py")
    holder.ok("open", path=str(closed_store))  # a live writer: on the lock table
    seen = listed_fd_dirs(monkeypatch)
    with SessionDB(closed_store) as db:
        db.append_message("s", "user", "x")
    assert holder.pid in seen and os.getpid() in seen
    assert not set(idle_processes) & set(seen)  # before: every process of the machine
    seen.clear()
    result = holders.scan(closed_store)  # doctor's and the gates' scan: every process
    assert set(idle_processes) <= set(seen) and holder.pid in [h.pid for h in result.holders]


def test_an_attached_holder_of_a_deleted_shm_is_found_on_the_lock_table(closed_store, spawn):
    holder = spawn("last_closer.py", closed_store, "--no-lock")
    assert holder.readline() == "CLOSING"
    found = lock_table.candidates(*holders._watched(closed_store))
    assert found is not None and holder.pid in found
    with pytest.raises(DeletedWalGenerationError) as info:
        SessionDB(closed_store)
    assert holder.pid in [h[0] for h in info.value.holders]


def test_a_raw_open_without_locks_is_not_an_attached_connection(closed_store, spawn, capsys):
    """A plain open() of a deleted -shm (no SQLite connection, no lock) is attached to no WAL
    generation: the open goes on; doctor, which reads every process, still names it."""
    holder = spawn("last_closer.py", closed_store, "--raw")
    assert holder.readline() == "CLOSING"
    with SessionDB(closed_store) as db:
        db.append_message("s", "user", "opened beside a raw reader")
    cli(["--home", str(closed_store.parent), "doctor", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert str(holder.pid) in json.dumps(report)


def test_an_unreadable_lock_table_falls_back_to_every_process(closed_store, idle_processes,
                                                              monkeypatch):
    monkeypatch.setattr(lock_table, "read", lambda: None)
    seen = listed_fd_dirs(monkeypatch)
    holders.scan(closed_store, locked_only=True)
    assert set(idle_processes) <= set(seen)


def test_an_ofd_lock_on_the_store_falls_back_to_every_process(closed_store):
    """An OFD lock names no process (pid -1): the candidates cannot be narrowed."""
    fd = os.open(closed_store, os.O_RDONLY)
    try:
        fcntl.fcntl(fd, fcntl.F_OFD_SETLK,
                    __import__("struct").pack("hhqqi", fcntl.F_RDLCK, 0,
                                              lock_table.PENDING_BYTE + 2, 1, 0))
        assert lock_table.candidates(*holders._watched(closed_store)) is None
    finally:
        os.close(fd)
    assert lock_table.candidates(*holders._watched(closed_store)) is not None


def test_the_lock_tables_device_numbers_are_shown_before_they_are_trusted(closed_store,
                                                                         monkeypatch):
    monkeypatch.setattr(lock_table, "_keying_ok", set())
    assert lock_table.candidates(*holders._watched(closed_store)) is not None  # probed
    monkeypatch.setattr(lock_table, "_keying_ok", set())
    os.unlink(f"{closed_store}.checkpoint.lock")
    assert lock_table.candidates(*holders._watched(closed_store)) is None  # nothing to show it
