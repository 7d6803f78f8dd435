"""Role kinds (SPEC §16.1): each a function ``run(ctx: RoleContext) -> None`` in its own module.

``run`` executes the role's workload in its own spawned process until the deadline in
``ctx.cfg`` or SIGTERM; every operation is recorded through ``ctx`` as ``invoke`` then ``ok`` |
``fail`` | ``info`` with its payload id. It returns nothing: the process exit code tells the
runner how it ended. Workload keys are documented in each role's module docstring.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from typing import Callable

from hermes_state import events, failpoints

from ..nemesis.files import install_foreign_open_close
from .base import RoleConfig, RoleContext
from .cli import run as run_cli
from .gateway import run as run_gateway
from .lock_holder import run as run_lock_holder
from .long_reader import run as run_long_reader
from .maintenance import run as run_maintenance
from .worktree import run as run_worktree

KINDS: dict[str, Callable[[RoleContext], None]] = {
    "gateway": run_gateway,
    "cli": run_cli,
    "lock_holder": run_lock_holder,
    "worktree": run_worktree,
    "maintenance": run_maintenance,
    "long_reader": run_long_reader,
}

#: Kinds that are adversaries, not clients of the store: a bare ``sqlite3`` connection holding a
#: write lock or a read transaction (their long ops are by design, not stalls or lock errors).
ADVERSARY_KINDS = frozenset({"lock_holder", "long_reader"})
#: Kinds that never write through the store (``liveness_after_heal`` does not wait for them).
NOT_WRITER_KINDS = ADVERSARY_KINDS | {"maintenance"}

__all__ = ["ADVERSARY_KINDS", "KINDS", "NOT_WRITER_KINDS", "RoleConfig", "RoleContext",
           "role_main"]


def role_main(cfg_dict: dict) -> None:
    """Entry point of every role process (target of the spawned ``multiprocessing.Process``)."""
    cfg = RoleConfig(**cfg_dict)
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
    ctx = RoleContext(cfg)

    def on_term(signum, frame):  # SIGTERM = clean shutdown: finish the op, close, exit 0
        ctx.stopping = True

    signal.signal(signal.SIGTERM, on_term)
    install_foreign_open_close(cfg.db_path, lambda **f: ctx.history.record("event", **f))
    events.add_listener(ctx.history.event)
    print(f"{cfg.process} pid {os.getpid()} kind {cfg.kind} start", flush=True)
    try:
        KINDS[cfg.kind](ctx)
    except Exception:
        traceback.print_exc()
        ctx.history.record("event", event="role_crashed", error=traceback.format_exc()[-2000:])
        raise SystemExit(70)
    finally:
        print(f"{cfg.process} done", flush=True)
