"""Faults of the faulty filesystem (issue 15): ``power_cut``, ``torn_write``, ``io_error``,
``slow_io``. The scenario mounts it with ``fs: {kind: faulty}``; the runner hands the mount to
these faults as ``env.fs`` (a :class:`chaos.fs.FaultyMount`).

- ``power_cut {restart}``: SIGKILL every live role process and wait until each is gone, drop
  every unsynced byte (the filesystem undoes namespace changes never committed by a directory
  fsync), power on, then (``restart``, default true) start a new instance of every slot that was
  running: the machine reboots and the agent comes back on what was durable.
- ``torn_write {path, nth, keep_bytes, within, restart}``: arm; wait up to ``within`` for the
  write to happen (the filesystem tears it and cuts the power itself); then the same kill, power
  on and restart. Fails (the step is an error: the run is INCONCLUSIVE) if it never happened.
- ``io_error`` / ``slow_io``: arm (see :mod:`chaos.fs.faults`); they fire as the roles work.
The heal phase (:func:`heal`) disarms every fault and powers the filesystem on.
Every firing is in the filesystem's log; the runner imports it into the history
(``fs_power_cut``, ``fs_torn_write``, ``fs_io_error``, ``fs_slow_io``, ``fs_fsync`` events).
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from typing import Literal

from ..params import Duration, param
from .base import Fault, NemesisEnv, NemesisError, signal_instance

KILL_WAIT_S = 30.0
_PATH_HELP = ("Regular expression searched in the file's path relative to the home (e.g. "
              "'-wal$', '^state\\.db$').")


def _mount(env: NemesisEnv):
    fs = getattr(env, "fs", None)
    if fs is None:
        raise NemesisError("no faulty filesystem is mounted: add fs: {kind: faulty}")
    return fs


def _kill_roles(env: NemesisEnv) -> list:
    """SIGKILL every live role instance; wait until each is gone. Returns the killed ones."""
    live = [i for i in env.instances() if i.alive()]
    for inst in live:
        for sig in (signal.SIGKILL, signal.SIGCONT):
            signal_instance(inst, sig)
    deadline = time.monotonic() + KILL_WAIT_S
    while any(i.alive() for i in live):
        if time.monotonic() > deadline:
            raise NemesisError("role processes did not die after SIGKILL: "
                               + ", ".join(i.process for i in live if i.alive()))
        time.sleep(0.01)
    return live


def _reboot(env: NemesisEnv, killed: list, restart: bool) -> list[str]:
    """Power on and restart the killed slots (a role past its ``stop_at`` is not restarted:
    ``env.restart`` returns None)."""
    _mount(env).power_on()
    started = []
    if restart and env.restart is not None:
        for inst in killed:
            new = env.restart(inst.role, inst.index)
            if new is not None:
                started.append(getattr(new, "process", str(new)))
    return started


@dataclass(frozen=True, kw_only=True)
class PowerCutParams:
    """SIGKILL every role, drop every unsynced byte, power on, restart."""

    restart: bool = param(True, "After the power comes back, start a new instance of every role "
                          "slot that was running (the machine reboots and the agent restarts).")


def power_cut(env: NemesisEnv, params: PowerCutParams) -> dict:
    """Kill the roles, drop unsynced data, power on, restart. Returns ``{"killed", "dropped",
    "undone", "cut_t", "restarted"}`` (``cut_t`` on the history clock)."""
    fs = _mount(env)
    killed = _kill_roles(env)
    cut = fs.power_cut()
    restarted = _reboot(env, killed, params.restart)
    return {"killed": [i.process for i in killed], "dropped": cut["dropped"],
            "undone": cut["undone"], "cut_t": cut["mono"], "restarted": restarted}


@dataclass(frozen=True, kw_only=True)
class TornParams:
    """The nth write to a matching file keeps its first bytes, then the power is cut."""

    path: str = param("-wal$", _PATH_HELP)
    nth: int = param(1, "The nth matching write (counted from this step) is torn.", minimum=1)
    keep_bytes: int = param(0, "Bytes of the torn write that reach the disk.", minimum=0)
    within: Duration = param(10.0, "How long the step waits for that write to happen.")
    restart: bool = param(True, "Restart every role slot after the power cut.")


def torn_write(env: NemesisEnv, params: TornParams) -> dict:
    """Arm the torn write, wait for it (``within``), then kill, power on, restart.

    Raises:
        NemesisError: the write never happened within ``within`` (the step is not applied).
    """
    fs = _mount(env)
    fault = fs.arm(kind="torn_write", path=params.path, nth=params.nth,
                   keep_bytes=params.keep_bytes)
    if not fs.wait_down(params.within):
        fs.disarm(fault["id"])
        raise NemesisError(f"torn_write never happened within {params.within:g}s")
    killed = _kill_roles(env)
    final = fs.disarm(fault["id"])
    restarted = _reboot(env, killed, params.restart)
    return {"armed": final[0] if final else fault, "killed": [i.process for i in killed],
            "restarted": restarted}


@dataclass(frozen=True, kw_only=True)
class IoErrorParams:
    """An operation on a matching file fails with an errno."""

    op: Literal["write", "fsync", "read", "open"] = param("fsync", "The operation that fails.")
    path: str = param("-wal$", _PATH_HELP)
    errno: Literal["EIO", "ENOSPC", "EROFS", "EDQUOT"] = param("EIO", "The error returned.")
    nth: int | None = param(None, "The nth matching operation fails (default 1).", minimum=1)
    probability: float | None = param(None, "Fail each matching operation with this probability "
                                      "(seeded by `seed`) instead of the nth.",
                                      exclusiveMinimum=0, maximum=1)
    persistent: bool = param(False, "Once fired, every later matching operation fails too.")
    extending: bool = param(False, "write only: count only writes that grow the file.")
    seed: int = param(0, "Seed of the probability draws.", minimum=0)


def io_error(env: NemesisEnv, params: IoErrorParams) -> dict:
    """Arm an errno fault; returns its description (``armed``)."""
    if params.nth is not None and params.probability is not None:
        raise NemesisError("io_error: give nth or probability, not both")
    spec = {"kind": "io_error", "op": params.op, "path": params.path, "errno": params.errno,
            "persistent": params.persistent, "extending": params.extending}
    if params.probability is not None:
        spec.update(probability=params.probability, seed=params.seed)
    else:
        spec["nth"] = params.nth or 1
    return {"armed": _mount(env).arm(**spec)}


@dataclass(frozen=True, kw_only=True)
class SlowParams:
    """Writes or fsyncs of a matching file stall."""

    delay: Duration = param(description="How long each stalled operation sleeps first.")
    op: Literal["write", "fsync"] = param("fsync", "The operation that stalls.")
    path: str = param("-wal$", _PATH_HELP)
    nth: int | None = param(None, "Stall from the nth matching operation on.", minimum=1)
    count: int | None = param(None, "Stall this many operations (default: all).", minimum=1)


def slow_io(env: NemesisEnv, params: SlowParams) -> dict:
    """Arm a stall; returns its description (``armed``)."""
    spec = {"kind": "slow_io", "op": params.op, "path": params.path, "delay": params.delay}
    spec.update({k: v for k, v in (("nth", params.nth), ("count", params.count)) if v})
    return {"armed": _mount(env).arm(**spec)}


def heal(env: NemesisEnv) -> dict:
    """Heal phase: disarm every filesystem fault (with its final counters), power on."""
    fs = getattr(env, "fs", None)
    if fs is None:
        return {"fs": None}
    return {"disarmed": fs.disarm(None), "power_on": fs.power_on()}


FS_FAULTS = (
    Fault("power_cut", PowerCutParams, power_cut, "SIGKILL every role, drop every unsynced byte "
          "of the faulty filesystem, power on, restart", heal=("fs", heal)),
    Fault("torn_write", TornParams, torn_write, "the nth write to a file keeps its first "
          "`keep_bytes`, then a power cut"),
    Fault("io_error", IoErrorParams, io_error, "an errno from write, fsync, read or open"),
    Fault("slow_io", SlowParams, slow_io, "stall writes or fsyncs"),
)
#: Names of the faults that need ``fs: {kind: faulty}``.
FS_FAULT_NAMES = tuple(f.name for f in FS_FAULTS)
