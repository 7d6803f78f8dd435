"""Process faults (SPEC §16.2): real signals to role processes, failpoints armed at run time,
and restarts.

* ``kill`` — SIGKILL (a real ``kill -9``) every live instance of ``role`` (or ``index``). With
  ``failpoint: NAME`` it SIGKILLs nobody: it arms ``NAME=crash@hit`` in the instances so each
  kills *itself* at the ``hit``-th time (default 1: the next time) it reaches that crash point
  (e.g. ``write.before_commit``: the statements ran, COMMIT not issued).
* ``terminate`` (SIGTERM, the clean shutdown; an instance spawned so recently that it has not
  written its first history record yet is waited for, up to :data:`RESTART_GRACE_S`, since a
  SIGTERM before its handler is set would kill it), ``stop`` (SIGSTOP: a frozen process keeps its
  locks), ``cont`` (SIGCONT).
* ``arm_failpoint`` — arms any action at a named failpoint:
  ``{failpoint: NAME, action: "sleep(2000)"}``
  (``crash``, ``crash@N``, ``sleep(MS)``, ``sleep(MS)@N``, ``error(KIND)``, ``off``).
* ``restart`` — starts a new instance in each slot of ``role`` (or slot ``index``). A live
  instance is first stopped as ``stop`` says: ``kill`` (default, SIGKILL), ``terminate``
  (SIGTERM, then SIGKILL after :data:`RESTART_GRACE_S`) or ``none`` (left running beside the new
  one). The new instance has its own process name (``<role>-<n>``, a number no instance used) and
  history file; its spawn record names the slot, the generation and the instance it replaces.

Arming at run time: each role process runs with ``HERMES_STATE_FAILPOINTS_FILE`` naming its own
arm file (``Instance.failpoints_file``); arming rewrites that file atomically (a new file renamed
over the old one) and the process picks it up at its next failpoint hit
(:mod:`hermes_state.failpoints`). When the armed action fires the role's history gets an
``event`` ``failpoint`` record (name, action, hit) before the crash.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hermes_state import failpoints

from ..params import param
from .base import Fault, NemesisEnv, NemesisError, RoleTarget, signal_instance, targets

#: What a failpoint name is, for every parameter that takes one.
FAILPOINT_DOC = ("A failpoint name (hermes_state.failpoints.NAMES, e.g. write.before_commit, "
                 "write.after_commit, checkpoint.before, close.before_checkpoint, "
                 "capture.mid_copy, migrate.v20.before_commit).")


@dataclass(frozen=True, kw_only=True)
class KillParams(RoleTarget):
    """SIGKILL a role's instances now, or arm a crash point in them."""

    failpoint: str | None = param(None, "Instead of SIGKILL now: arm `crash@hit` at this "
                                  "failpoint so the role kills itself there (SPEC §16.2 named "
                                  "crash points). " + FAILPOINT_DOC, pattern="\\S")
    hit: int | None = param(None, "With `failpoint`: crash at the hit-th hit counted from the "
                            "arming (default 1: the next one).", minimum=1)


@dataclass(frozen=True, kw_only=True)
class ArmParams(RoleTarget):
    """Arm an action at a named failpoint in a role's instances."""

    failpoint: str = param(description=FAILPOINT_DOC, pattern="\\S")
    action: str = param("crash", "crash, crash@N, sleep(MS), sleep(MS)@N, error(ioerr|busy|"
                        "locked|full|corrupt) or off; hits are counted from the arming.")


@dataclass(frozen=True, kw_only=True)
class RestartParams(RoleTarget):
    """Start a new instance in each slot of a role."""

    stop: Literal["kill", "terminate", "none"] = param(
        "kill", "How a live instance of the slot is stopped first: kill (SIGKILL), terminate "
        "(SIGTERM, SIGKILL after 5 s) or none (left running beside the new one).",
        title="restart stop")

#: Seconds a ``restart`` with ``stop: terminate`` waits for the SIGTERMed instance to exit.
RESTART_GRACE_S = 5.0
#: Seconds to wait for a SIGKILLed instance to be reaped before the new one starts.
KILL_WAIT_S = 5.0


def _wait_ready(inst, seconds: float) -> None:
    """Wait (bounded) until a freshly spawned instance handles SIGTERM (``Instance.ready``)."""
    ready = getattr(inst, "ready", None)
    deadline = time.monotonic() + seconds
    while ready is not None and not ready() and inst.alive() and time.monotonic() < deadline:
        time.sleep(0.01)


def _send(env: NemesisEnv, params: RoleTarget, sig: int) -> dict:
    sent = []
    for inst in targets(env, params):
        if sig == signal.SIGTERM:
            _wait_ready(inst, RESTART_GRACE_S)
        if signal_instance(inst, sig):
            sent.append({"process": inst.process, "pid": inst.pid})
    if not sent:
        raise NemesisError(f"every instance of {params.role!r} exited before the signal")
    return {"signal": signal.Signals(sig).name, "role": params.role,
            "pids": [s["pid"] for s in sent], "processes": [s["process"] for s in sent]}


def _signal(name: str, sig: int, summary: str) -> Fault:
    def fault(env: NemesisEnv, params: RoleTarget) -> dict:
        return _send(env, params, sig)
    fault.__doc__ = f"Send {signal.Signals(sig).name} to the live instances of ``params.role``."
    heal = ("sigcont", resume_all) if sig == signal.SIGSTOP else None
    return Fault(name, RoleTarget, fault, summary, heal)


def arm(path: str | os.PathLike, name: str, action: str) -> str:
    """Arm ``name=action`` in the arm file at ``path``; returns the file's new spec.

    Other names already armed in the file are kept; ``name``'s previous action is replaced. The
    file is replaced atomically (write a temporary file, fsync, rename), so a role process never
    reads half a spec.

    Raises:
        ValueError: ``name=action`` is not a valid failpoint spec (unknown name, bad action).
        OSError: the file cannot be written.
    """
    failpoints.parse(f"{name}={action}")  # the error names the bad part
    path = Path(path)
    entries: dict[str, str] = {}
    try:
        for item in path.read_text(encoding="utf-8").split(","):
            key, sep, value = item.partition("=")
            if sep and key.strip():
                entries[key.strip()] = value.strip()
    except FileNotFoundError:
        pass
    entries[name] = action
    spec = ",".join(f"{k}={v}" for k, v in entries.items())
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(spec)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return spec


def _arm_targets(env: NemesisEnv, params: RoleTarget, name: str, action: str) -> dict:
    armed = []
    for inst in targets(env, params):
        fp_file = getattr(inst, "failpoints_file", None)
        if not fp_file:
            raise NemesisError(f"{inst.process} has no failpoint arm file")
        try:
            arm(fp_file, name, action)
        except ValueError as exc:
            raise NemesisError(str(exc)) from None
        armed.append(inst)
    return {"role": params.role, "failpoint": name, "action": action,
            "pids": [i.pid for i in armed], "processes": [i.process for i in armed]}


def kill(env: NemesisEnv, params: KillParams) -> dict:
    """SIGKILL the live instances of ``params.role``; or, with ``params.failpoint``, arm
    ``crash@hit`` there so each instance kills itself at that crash point (SPEC §16.2).

    Returns:
        ``{"signal": "SIGKILL", "pids", "processes", "role"}`` or, when armed,
        ``{"failpoint", "action", "pids", "processes", "role"}``.
    Raises:
        NemesisError: no live instance, or a bad failpoint name.
    """
    if params.failpoint:
        return _arm_targets(env, params, params.failpoint, f"crash@{params.hit or 1}")
    return _send(env, params, signal.SIGKILL)


def arm_failpoint(env: NemesisEnv, params: ArmParams) -> dict:
    """Arm ``params.action`` at ``params.failpoint`` in the live instances of a role.

    Returns:
        ``{"failpoint", "action", "pids", "processes", "role"}``.
    Raises:
        NemesisError: no live instance, or a bad failpoint name or action.
    """
    return _arm_targets(env, params, params.failpoint, params.action or "crash")


def _wait_exit(inst, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while inst.alive():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.01)
    return True


def restart(env: NemesisEnv, params: RestartParams) -> dict:
    """Start a new instance in each slot of ``params.role`` (or slot ``params.index``),
    first stopping the slot's live instance as ``params.stop`` says (``kill``, ``terminate``
    or ``none``; default ``kill``).

    Returns:
        ``{"role", "stop", "stopped": [process...], "started": [process...],
        "pids": [new pid...]}``.
    Raises:
        NemesisError: the role has no instance yet (nothing to restart) or restarts are not
            available in this environment.
    """
    if env.restart is None:
        raise NemesisError("restart is not available here (no runner to spawn instances)")
    role, index = params.role, params.index
    stop = params.stop or "kill"
    latest: dict[int, object] = {}
    for inst in env.instances():
        if inst.role == role and (index is None or inst.index == index):
            latest[inst.index] = inst  # instances() is in spawn order: the last one wins
    if not latest:
        raise NemesisError(f"no instance of role {role!r}"
                           + (f" slot {index}" if index is not None else "") + " to restart")
    stopped, started, pids = [], [], []
    for slot, inst in sorted(latest.items()):
        if inst.alive() and stop != "none":
            if stop == "terminate":
                _wait_ready(inst, RESTART_GRACE_S)
            if signal_instance(inst, signal.SIGKILL if stop == "kill" else signal.SIGTERM) \
                    and stop == "terminate":
                signal_instance(inst, signal.SIGCONT)  # a stopped process cannot exit on SIGTERM
            if not _wait_exit(inst, KILL_WAIT_S if stop == "kill" else RESTART_GRACE_S):
                signal_instance(inst, signal.SIGKILL)
                _wait_exit(inst, KILL_WAIT_S)
            stopped.append(inst.process)
        new = env.restart(role, slot)
        if new is None:
            raise NemesisError(f"role {role!r} is past its stop_at: nothing to restart in slot "
                               f"{slot}")
        started.append(new.process)
        pids.append(new.pid)
    return {"role": role, "stop": stop, "stopped": stopped, "started": started, "pids": pids}


def resume_all(env: NemesisEnv) -> dict:
    """Heal (SPEC §16.3): SIGCONT every live instance. Returns ``{"resumed": [process...]}``."""
    resumed = []
    for inst in env.instances():
        if inst.alive() and signal_instance(inst, signal.SIGCONT):
            resumed.append(inst.process)
    return {"resumed": resumed}


#: The process faults, in the order the scenario reference lists them.
PROCESS_FAULTS = (
    Fault("kill", KillParams, kill, "SIGKILL (or a crash armed at a failpoint)"),
    _signal("terminate", signal.SIGTERM, "SIGTERM"),
    _signal("stop", signal.SIGSTOP, "SIGSTOP"),
    _signal("cont", signal.SIGCONT, "SIGCONT"),
    Fault("arm_failpoint", ArmParams, arm_failpoint, "arm an action at a named failpoint"),
    Fault("restart", RestartParams, restart, "start a new instance of the role"),
)
