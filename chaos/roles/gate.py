"""The start gate of a role process: launched before the run's clock, released at its start.

The runner starts every role process before its clock starts (:mod:`chaos.runner`); each one
imports, sets itself up and reports ``ready`` on its gate (one end of a ``Pipe``), then blocks
until the runner sends the run's clock (``{"t0", "deadline", "index"}``) at the role's
``start_at``, or :data:`DISCARD` (the run ended first: the process ends without running). So
the seconds an interpreter needs to start on a loaded machine are never taken out of a
scenario's timeline.

The handshake has one order, on every launch path (the scenario's roles, the spare processes of
``restart``/``power_cut``/``torn_write``, a restart with no spare left): the runner reads
``ready`` (:func:`await_ready`, bounded, :class:`RoleStartError` naming the processes) before it
sends the clock (:func:`release`). A child whose gate breaks in any other way (closed before it
said ready, closed without a clock or a discard, nothing within its guard) never exits 0
silently: :func:`wait_for_start` raises :class:`GateLost` and the process exits
:data:`GATE_LOST_EXIT` with the reason in its log.
"""

from __future__ import annotations

import multiprocessing.connection
import time

#: Hang guard only: the longest wait for launched role processes to report ready (a start-up
#: that never reports is a toolkit defect, not a slow machine).
READY_GUARD_S = 300.0
#: What the runner sends instead of the clock to a launched process it will not run.
DISCARD = "discard"
#: The exit status of a role process whose start gate broke (:class:`GateLost`).
GATE_LOST_EXIT = 71


class RoleStartError(RuntimeError):
    """Launched role processes did not report ready within the guard (names them)."""


class GateLost(RuntimeError):
    """Child side: the start gate broke before the run's clock or a discard arrived."""


def await_ready(gates: dict, guard_s: float = READY_GUARD_S) -> set:
    """Block until every gate in ``gates`` (``{connection: process name}``) said ready or was
    closed by a process that died while starting (its exit is recorded once released).

    Returns:
        The connections that said ready (the others belong to processes that died starting).
    Raises:
        RoleStartError: some did neither within ``guard_s`` seconds (hang guard); the message
            names them.
    """
    waiting = dict(gates)
    ready = set()
    guard = time.monotonic() + guard_s
    while waiting:
        left = guard - time.monotonic()
        if left <= 0:
            raise RoleStartError(f"role processes {sorted(waiting.values())} did not report "
                                 f"ready within {guard_s:g}s")
        for conn in multiprocessing.connection.wait(list(waiting), timeout=left):
            waiting.pop(conn)
            try:
                if conn.recv() == "ready":
                    ready.add(conn)
            except (EOFError, OSError):
                pass
    return ready


def release(gate, start: dict) -> None:
    """Send ``start`` (the run's clock) through ``gate`` and close it. Call it only after the
    process said ready (:func:`await_ready`); a process that died meanwhile is reaped like any
    exit."""
    try:
        gate.send(start)
    except (BrokenPipeError, OSError):
        pass
    finally:
        gate.close()


def discard(gate) -> None:
    """Tell a launched process it will not run (:data:`DISCARD`) and close its gate."""
    try:
        gate.send(DISCARD)
    except (BrokenPipeError, OSError):
        pass
    finally:
        gate.close()


def wait_for_start(gate, guard_s: float | None = None) -> dict | None:
    """Child side: report ready, return what :func:`release` sent, or None when the runner
    discarded this process (:func:`discard`: the run ended before its start).

    Args:
        guard_s: the longest wait for the clock after saying ready (None: until the runner
            sends or its end of the gate closes).
    Raises:
        GateLost: the gate was closed before this process said ready, closed without a clock or
            a discard, or nothing came within ``guard_s`` (the message says which).
    """
    try:
        try:
            gate.send("ready")
        except OSError as exc:
            raise GateLost(f"the runner closed the start gate before this process said ready "
                           f"({type(exc).__name__}): it was released without waiting for "
                           "ready") from None
        try:
            if guard_s is not None and not gate.poll(guard_s):
                raise GateLost(f"no start from the runner within {guard_s:g}s of saying ready")
            start = gate.recv()
        except (EOFError, OSError) as exc:
            raise GateLost("the runner closed the start gate without sending the run's clock "
                           f"or a discard ({type(exc).__name__}): the runner died?") from None
    finally:
        gate.close()
    if start == DISCARD:
        return None
    if not isinstance(start, dict):
        raise GateLost(f"the start gate carried {start!r}, not the run's clock")
    return start
