"""Shared pieces of the nemesis: the fault value, the environment faults act on, the error they
raise, and the parameters every fault aimed at a role shares.

A fault is a value (Jepsen's nemesis protocol): :class:`Fault` carries its name, its parameters
(a :mod:`chaos.params` dataclass, declared once), the function that applies it and, when it
leaves something to undo, its heal (run by the runner's heal phase, SPEC §16.3).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Protocol

from ..params import build, param


class NemesisError(Exception):
    """A fault could not be applied (e.g. no live instance of the role)."""


class Instance(Protocol):
    """What a fault needs of a live role instance: its names and pid, and whether it is alive."""
    process: str
    role: str
    index: int
    pid: int | None

    def alive(self) -> bool: ...


#: :func:`open_pidfd` of a process already gone at its start: no signal reaches anything.
GONE = -1


def open_pidfd(pid: int | None) -> int | None:
    """A pidfd of ``pid`` (Linux 5.3+), taken right after the process started: signals sent
    through it reach that process or none, never one that reused its pid. :data:`GONE` when
    the process had already exited and been reaped (its pid may be anyone's now); None where
    there is no pidfd (signals then go by pid)."""
    opener = getattr(os, "pidfd_open", None)
    if pid is None or opener is None:
        return None
    try:
        return opener(pid)
    except ProcessLookupError:
        return GONE
    except OSError:
        return None


def signal_instance(inst: Instance, sig: int) -> bool:
    """Send ``sig`` to a role instance; False when the process is gone. A role process can exit
    and be reaped between any ``alive()`` and the signal (its parent is the fork server, which
    reaps it at once, decision 0027): that is not an error of the run. Through the instance's
    pidfd when it has one (``pidfd``, :func:`open_pidfd`): its pid may already name another
    process by then. Other errors raise."""
    if inst.pid is None:
        return False
    pidfd = getattr(inst, "pidfd", None)
    if pidfd == GONE:
        return False
    try:
        if pidfd is not None:
            signal.pidfd_send_signal(pidfd, sig)
        else:
            os.kill(inst.pid, sig)
        return True
    except ProcessLookupError:
        return False


@dataclass
class NemesisEnv:
    """What faults act on: the store path and the role instances.

    ``instances()`` lists every instance ever started (dead ones too); ``restart(role, index)``
    starts the next instance of a role's slot and returns it, or None when the role is past its
    ``stop_at`` (``restart`` itself None: restarts unavailable).
    ``fs``: the run's :class:`chaos.fs.FaultyMount` when the scenario has ``fs: {kind: faulty}``.
    """

    db_path: Path
    instances: Callable[[], list]  # -> list[Instance]
    restart: Callable[[str, int], object] | None = None
    fs: object | None = None


@dataclass(frozen=True, kw_only=True)
class RoleTarget:
    """The instances of a role a fault is aimed at."""

    role: str = param(description="The role whose instances receive the signal (must name a "
                      "role).")
    index: int | None = param(None, "Only this instance of the role (0-based, < the role's "
                              "count); default: every instance.", minimum=0)


@dataclass(frozen=True, kw_only=True)
class NoParams:
    """A fault without parameters."""


@dataclass(frozen=True)
class Fault:
    """One fault (SPEC §16.2): ``apply(env, params) -> details`` for the nemesis ``done`` record.

    Attributes:
        name: the scenario's ``fault:`` value.
        Params: its parameters (a :mod:`chaos.params` dataclass).
        apply: applies it now; raises :class:`NemesisError` when it cannot.
        summary: one line for the scenario reference.
        heal: ``(name, heal(env) -> details)`` undoing what the fault may leave (SIGCONT, free
            the disk), or None.
        corrupting: it damages the store's content (``error_taxonomy`` allows corruption
            errors after it).
    """

    name: str
    Params: type
    apply: Callable[[NemesisEnv, Any], dict]
    summary: str
    heal: tuple[str, Callable[[NemesisEnv], dict]] | None = None
    corrupting: bool = False

    @property
    def aims_at_role(self) -> bool:
        """True when the fault targets a role's instances (``role`` required)."""
        return issubclass(self.Params, RoleTarget)

    def __call__(self, env: NemesisEnv, params: Any) -> dict:
        """Apply the fault; ``params`` is a :attr:`Params` instance or a dict (defaults filled)."""
        if not isinstance(params, self.Params):
            params = build(self.Params, dict(params or {}))
        return self.apply(env, params)


def targets(env: NemesisEnv, params: RoleTarget) -> list:
    """Live instances named by ``params.role`` (and ``params.index`` if given).

    Raises:
        NemesisError: no live instance matches.
    """
    role = params.role
    index = params.index
    found = [i for i in env.instances() if i.role == role and (index is None or i.index == index)
             and i.alive()]
    if not found:
        raise NemesisError(f"no live instance of role {role!r}"
                           + (f" index {index}" if index is not None else ""))
    return found
