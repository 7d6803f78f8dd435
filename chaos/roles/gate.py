"""The start gate of a role process: launched before the run's clock, released at its start.

The runner starts every role process before its clock starts (:mod:`chaos.runner`); each one
imports, sets itself up and reports ``ready`` on its gate (one end of a ``Pipe``), then blocks
until the runner sends the run's clock (``{"t0", "deadline", "index"}``) at the role's
``start_at``. A gate closed instead (the run ended first) ends the process without running. So
the seconds an interpreter needs to start on a loaded machine are never taken out of a
scenario's timeline.
"""

from __future__ import annotations

import multiprocessing.connection
import time

#: Hang guard only: the longest wait for launched role processes to report ready (a start-up
#: that never reports is a toolkit defect, not a slow machine).
READY_GUARD_S = 300.0


def await_ready(gates: dict, guard_s: float = READY_GUARD_S) -> None:
    """Block until every gate in ``gates`` (``{connection: process name}``) said ready or was
    closed by a process that died while starting (its exit is recorded once released).

    Raises:
        RuntimeError: some did neither within ``guard_s`` seconds (hang guard).
    """
    waiting = dict(gates)
    guard = time.monotonic() + guard_s
    while waiting:
        left = guard - time.monotonic()
        if left <= 0:
            raise RuntimeError(f"role processes {sorted(waiting.values())} did not start "
                               f"within {guard_s:g}s")
        for conn in multiprocessing.connection.wait(list(waiting), timeout=left):
            waiting.pop(conn)
            try:
                conn.recv()
            except (EOFError, OSError):
                pass


def release(gate, start: dict) -> None:
    """Send ``start`` (the run's clock) through ``gate`` and close it; a process that died
    meanwhile is reaped like any exit."""
    try:
        gate.send(start)
    except (BrokenPipeError, OSError):
        pass
    finally:
        gate.close()


def wait_for_start(gate) -> dict | None:
    """Child side: report ready, return what :func:`release` sent, or None when the gate was
    closed instead (the run ended before this process's start)."""
    try:
        gate.send("ready")
        return gate.recv()
    except (EOFError, OSError):
        return None
    finally:
        gate.close()
