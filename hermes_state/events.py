"""Structured events from the store to registered listeners (SPEC §4 "Observability").

An event is a plain dict with at least ``{"event": kind, "pid": int, "t": monotonic seconds,
"wall": epoch seconds}`` plus fields per kind:

====================  =========================================================================
kind                  fields
====================  =========================================================================
``retry``             ``attempt`` (1-based, the attempt that failed), ``sleep_s``, ``error``,
                      ``op``, ``stage`` (the statement that met the lock error: ``begin``,
                      ``statement``, ``commit`` or ``checkpoint lock``), ``code`` (SQLite error
                      name), ``waited_s`` (how long that attempt waited before the error)
``checkpoint_wait``   a write met a checkpoint holding the checkpoint lock right after its
                      BEGIN IMMEDIATE: ``op``, ``attempt``, ``met`` (meetings so far in this
                      write), ``waited_s`` (in this attempt); it rolls back and waits for
                      the lock, holding nothing, up to the busy timeout: not a failed attempt
``write``             ``seq`` (successful writes on this connection), ``attempts``, ``op``,
                      ``met`` (checkpoints this write waited for), ``t_begin``, ``t_commit``,
                      ``lock``
``checkpoint``        ``mode``, ``trigger`` (``cadence``/``close``/...), ``seq``, ``busy``,
                      ``log``, ``checkpointed`` (frames) or ``error``
``refusal``           ``reason`` (``retired_wal``/``replaced_db``/``open_scan``/...), ``detail``
``capture``           ``dir``, ``trigger``, ``wal_bytes``, ``frames``
``write_gave_up``     ``attempts``, ``waited_s``, ``lock_owner``, ``lock_owner_seen_s``
``migration``         ``step``, ``from_version``, ``to_version``
``open``              ``db``, ``journal_mode``, ``sqlite``
``failpoint``         ``name``, ``action`` (``crash``/``sleep``/``error``), ``hit`` (1-based)
====================  =========================================================================

Emitting costs one truthiness test when no listener is registered. Listeners run synchronously
in the emitting thread; an exception in a listener is swallowed (observability must never break a
write).
"""

from __future__ import annotations

import os
import time
from typing import Callable

Listener = Callable[[dict], None]

_listeners: list[Listener] = []


def add_listener(fn: Listener) -> None:
    """Register ``fn(event_dict)``; registering the same function twice is a no-op."""
    if fn not in _listeners:
        _listeners.append(fn)


def remove_listener(fn: Listener) -> None:
    """Unregister ``fn``; unknown functions are ignored."""
    try:
        _listeners.remove(fn)
    except ValueError:
        pass


def enabled() -> bool:
    """True when at least one listener is registered (call sites test this before building)."""
    return bool(_listeners)


def emit(kind: str, **fields) -> None:
    """Deliver one event to every listener. No-op without listeners."""
    if not _listeners:
        return
    event = {"event": kind, "pid": os.getpid(), "t": time.monotonic(), "wall": time.time()}
    event.update(fields)
    for fn in list(_listeners):
        try:
            fn(event)
        except Exception:  # noqa: BLE001 - a listener must never break the store
            pass
