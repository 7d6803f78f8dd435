"""Role kinds (SPEC §16.1): each a function ``run(ctx: RoleContext) -> None`` in its own module.

``run`` executes the role's workload in its own process until the deadline in
``ctx.cfg`` or SIGTERM; every operation is recorded through ``ctx`` as ``invoke`` then ``ok`` |
``fail`` | ``info`` with its payload id. It returns nothing: the process exit code tells the
runner how it ended. Workload keys are documented in each role's module docstring.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from dataclasses import dataclass
from typing import Callable

from hermes_state import events, failpoints

from ..nemesis.files import install_foreign_open_close
from ..params import build
from . import (cli, foreign_writer, gateway, lock_holder, long_reader, maintenance, procfs,
               python_callable, upstream, worktree)
from .base import RoleConfig, RoleContext
from .gate import GATE_LOST_EXIT, GateLost, wait_for_start


@dataclass(frozen=True)
class Role:
    """One role kind (SPEC §16.1): its workload parameters, declared once, and its ``run``.

    Attributes:
        kind: the scenario's ``kind:``; ``Params``: the workload (a :mod:`chaos.params`
            dataclass); ``run(ctx)``: the workload loop; ``summary``: one line for the reference;
        adversary: a bare ``sqlite3`` connection holding a write lock or a read transaction, not a
            client of the store (its long ops are by design, not stalls or lock errors);
        writer: it writes through the store (``liveness_after_heal`` waits for it).
    """

    kind: str
    Params: type
    run: Callable[[RoleContext], None]
    summary: str
    adversary: bool = False
    writer: bool = True


#: Every role kind by name, in the order the scenario reference lists them.
ROLES: dict[str, Role] = {m.KIND: Role(m.KIND, m.Params, m.run, m.SUMMARY,
                                        getattr(m, "ADVERSARY", False),
                                        getattr(m, "WRITER", not getattr(m, "ADVERSARY", False)))
                          for m in (gateway, cli, lock_holder, worktree, maintenance, long_reader,
                                    python_callable, foreign_writer, upstream)}
KINDS: dict[str, Callable[[RoleContext], None]] = {k: r.run for k, r in ROLES.items()}
ADVERSARY_KINDS = frozenset(k for k, r in ROLES.items() if r.adversary)
NOT_WRITER_KINDS = frozenset(k for k, r in ROLES.items() if not r.writer)

__all__ = ["ADVERSARY_KINDS", "KINDS", "NOT_WRITER_KINDS", "ROLES", "Role", "RoleConfig",
           "RoleContext", "role_main"]


def _gate_lost(cfg_dict: dict, exc: GateLost) -> None:
    """Say why a role process ends without running: on stderr and in its log file."""
    text = (f"{cfg_dict.get('process', '?')} pid {os.getpid()}: start gate lost, not running: "
            f"{exc}\n")
    sys.stderr.write(text)
    try:
        with open(cfg_dict["log_path"], "a", encoding="utf-8") as fh:
            fh.write(text)
    except (KeyError, OSError):
        pass


def role_main(cfg_dict: dict, fn: Callable[[RoleContext], None] | None = None,
              gate=None) -> None:
    """Entry point of every role process (target of the ``multiprocessing.Process`` forked from
    the fork server of :mod:`chaos.role_start`, or spawned; of a spawned ``multiprocess`` one for
    a ``callable`` role, whose function ``fn`` it calls). ``cfg_dict["environ"]`` and
    ``["cwd"]`` (optional): the runner's environment and working directory at the launch,
    applied first.

    ``gate``: the runner's start gate (a connection) or None. The process reports ready on it
    once imported, then waits for ``{"t0", "deadline", "index"}`` (the run's clock) before it
    runs; a discard instead (the run ended first) ends it without running (exit 0). A gate that
    breaks otherwise (:class:`chaos.roles.gate.GateLost`) ends it with exit status
    :data:`chaos.roles.gate.GATE_LOST_EXIT` and the reason in its log: never a silent exit 0.
    ``cfg_dict["start_guard_s"]`` (optional) bounds the wait for the clock.
    """
    # SIGTERM = clean shutdown: finish the op, close, exit 0 (set before the gate says ready)
    term: list = []
    signal.signal(signal.SIGTERM, lambda signum, frame: term.append(signum))
    procfs.set_title(procfs.role_title(cfg_dict.get("process", "?"), cfg_dict.get("kind", "?")))
    cfg_dict = dict(cfg_dict)
    # The runner's environment and working directory at launch (a forked-from-server process
    # has the server's): first, before anything reads them.
    environ = cfg_dict.pop("environ", None)
    if environ is not None:
        os.environ.clear()
        os.environ.update(environ)
    cwd = cfg_dict.pop("cwd", None)
    if cwd is not None:
        try:
            os.chdir(cwd)
        except OSError:
            pass  # gone since: the role's paths are absolute
    guard_s = cfg_dict.pop("start_guard_s", None)
    if gate is not None:
        try:
            start = wait_for_start(gate, guard_s)
        except GateLost as exc:
            _gate_lost(cfg_dict, exc)
            raise SystemExit(GATE_LOST_EXIT) from None
        if start is None:
            return
        cfg_dict = {**cfg_dict, **start}
    cfg = RoleConfig(**cfg_dict)
    # The run's home is the only home a role knows: ``SessionDB()`` in role code, and every
    # command the role runs, open the run's store, never the user's ~/.hermes (issue 22 item 8).
    os.environ["HERMES_HOME"] = cfg.home
    log_fd = os.open(cfg.log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    sys.stdout = os.fdopen(1, "w", buffering=1, closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, closefd=False)
    if cfg.failpoints:
        os.environ[failpoints.ENV_VAR] = cfg.failpoints
    else:
        os.environ.pop(failpoints.ENV_VAR, None)
    failpoints.reload()
    procfs.apply(undumpable=cfg.undumpable, ptrace_cap=cfg.ptrace_cap)
    ctx = RoleContext(cfg, build(ROLES[cfg.kind].Params, cfg.workload))

    def on_term(signum, frame):
        ctx.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    ctx.stopping = bool(term)
    install_foreign_open_close(cfg.db_path, lambda **f: ctx.history.record("event", **f))
    events.add_listener(ctx.history.event)
    print(f"{cfg.process} pid {os.getpid()} kind {cfg.kind} start", flush=True)
    try:
        (fn or ROLES[cfg.kind].run)(ctx)
    except Exception:
        traceback.print_exc()
        ctx.history.record("event", event="role_crashed", error=traceback.format_exc()[-2000:])
        raise SystemExit(70)
    finally:
        print(f"{cfg.process} done", flush=True)
        # Done: only the interpreter's exit is left, which resets a Python handler to the
        # default action (a late SIGTERM from the runner would then kill it: -15, read as a
        # crash on a loaded machine). An ignored signal is not reset.
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
