"""The holder scan fails closed for a root reader without CAP_SYS_PTRACE (SPEC §10.2, §11).

Such a reader (a container's default root, or a role with ``ptrace_cap: false``) can list
``/proc/<pid>/fd`` of a process that is not dumpable (the directory's mode lets root in) but not
read its links: the scan must report that process as unreadable, never skip it as "no holder".
Needs root (a non-root reader cannot even list the directory: tests/test_gate_incomplete_scan.py).
"""

from __future__ import annotations

import os

import pytest

from chaos.nemesis.commands import named_pids
from chaos.roles import procfs
from hermes_state import SessionDB

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (CAP_SETPCAP to drop "
                                "CAP_SYS_PTRACE from the bounding set)")


@pytest.fixture
def store(tmp_path):
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
    return path


@pytest.mark.parametrize("command", [["optimize"], ["optimize-storage"]])
def test_gate_refuses_beside_an_undumpable_holder_it_cannot_read(store, spawn, command):
    hidden = spawn("blind_scan.py", "hold", store)
    assert hidden.readline() == "HOLDING", hidden.stderr()
    gate = spawn("blind_scan.py", "cli", "--home", store.parent, "sessions", *command)
    assert gate.wait() == 1
    err = gate.proc.stderr.read()
    assert "cannot prove the store is quiet: could not inspect PID(s)" in err
    assert hidden.pid in named_pids(err)


def test_root_with_ptrace_reads_the_undumpable_holder(store, spawn):
    """The control: with CAP_SYS_PTRACE the same holder is seen and named as a holder."""
    hidden = spawn("blind_scan.py", "hold", store)
    assert hidden.readline() == "HOLDING", hidden.stderr()
    from hermes_state.processes import holders

    scan = holders.scan(store)
    assert hidden.pid in [h.pid for h in scan.holders]
    assert hidden.pid not in scan.unreadable


def test_named_pids_reads_the_unreadable_list():
    text = "Refusing ...\n  cannot prove the store is quiet: could not inspect PID(s) 12, 345\n"
    assert named_pids(text) == [12, 345]
    assert named_pids("held by PID 7 (gateway)\n" + text) == [7, 12, 345]


def test_procfs_options_are_refused_rather_than_faked(monkeypatch):
    """A drop the kernel refuses while the process keeps CAP_SYS_PTRACE raises (the scenario
    would not test what it says)."""
    def refuse(option, arg):
        raise OSError(1, "refused")

    monkeypatch.setattr(procfs, "_prctl", refuse)
    monkeypatch.setattr(procfs, "_has_effective", lambda cap: True)
    with pytest.raises(OSError):
        procfs.apply(undumpable=False, ptrace_cap=False)
    monkeypatch.setattr(procfs, "_has_effective", lambda cap: False)
    procfs.apply(undumpable=False, ptrace_cap=False)  # nothing to drop: fine
