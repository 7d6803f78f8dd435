"""A role process that exits, and is reaped by the fork server that started it, between the
runner's ``alive()`` and its signal is not an error of the run (found under load: ``chaos run``
ended with "chaos: [Errno 3] No such process" right after its heal phase)."""

from __future__ import annotations

import multiprocessing
import signal
import types

from chaos.nemesis.base import signal_instance
from chaos.runner import RoleInstance, Runner


class _LiesOnce(RoleInstance):
    """A real role-like process already gone whose first ``alive()`` still says True (the
    answer a check gives just before the process exits and its parent reaps it)."""

    calls = 0

    def alive(self) -> bool:
        self.calls += 1
        return self.calls == 1


def _gone_instance() -> _LiesOnce:
    ctx = multiprocessing.get_context("forkserver")
    proc = ctx.Process(target=int)  # exits at once
    proc.start()
    proc.join(30)
    assert proc.exitcode == 0  # exited and reaped by the fork server: its pid is free
    return _LiesOnce(spec=types.SimpleNamespace(name="w", kind="gateway", stop_at=None),
                     index=0, process="w-0", proc=proc)


def test_signalling_a_gone_role_says_so_instead_of_raising():
    inst = _gone_instance()
    assert signal_instance(inst, signal.SIGCONT) is False
    inst.proc = None  # never started: nothing to signal
    assert signal_instance(inst, signal.SIGTERM) is False


def test_the_stop_phase_goes_on_past_a_role_gone_between_check_and_signal(tmp_path):
    inst = _gone_instance()
    said: list[str] = []
    runner = types.SimpleNamespace(instances=[inst], _reap=lambda writer: None,
                                   say=said.append)
    Runner._stop_roles(runner, writer=None)  # SIGCONT to the gone pid: ESRCH, not a crash
    assert inst.calls >= 2 and not any("did not stop" in s for s in said)


def test_a_signal_goes_through_the_pidfd_to_that_process_or_to_none():
    """The pid of a reaped role can name another process by the time the runner signals it;
    through the pidfd taken at its start the signal reaches that role or nothing. (A pid cannot
    be made to be reused on demand: this proves the pidfd path delivers to the live process and
    reports the reaped one as gone.)"""
    import os

    from chaos.nemesis.base import open_pidfd

    if not hasattr(os, "pidfd_open"):
        import pytest

        pytest.skip("no pidfd on this platform: signals go by pid")
    inst = _gone_instance()
    ctx = multiprocessing.get_context("forkserver")
    live = ctx.Process(target=signal.pause)
    live.start()
    try:
        inst.proc, inst.pidfd = live, open_pidfd(live.pid)
        assert inst.pidfd is not None
        assert signal_instance(inst, signal.SIGTERM) is True  # reaches it while it lives
        live.join(30)
        assert live.exitcode == -signal.SIGTERM
        # gone and reaped: the pidfd still names it, never whoever has its pid now
        assert signal_instance(inst, signal.SIGKILL) is False
    finally:
        if live.is_alive():
            live.kill()
        if inst.pidfd is not None:
            os.close(inst.pidfd)


def test_a_role_gone_before_its_pidfd_was_taken_is_never_signalled_by_pid():
    import os

    from chaos.nemesis.base import GONE, open_pidfd

    if not hasattr(os, "pidfd_open"):
        import pytest

        pytest.skip("no pidfd on this platform: signals go by pid")
    with open("/proc/sys/kernel/pid_max") as fh:
        pid_max = int(fh.read())
    free = next(p for p in range(pid_max - 1, 1, -1) if not os.path.exists(f"/proc/{p}"))
    assert open_pidfd(free) == GONE  # exited and reaped before the runner could take it
    inst = _gone_instance()
    inst.pidfd = GONE
    assert signal_instance(inst, signal.SIGKILL) is False  # never by its (free) pid
