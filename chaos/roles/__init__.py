"""Role kinds (SPEC §16.1): each a function ``run(ctx: RoleContext) -> None`` in its own module.

``run`` executes the role's workload in its own spawned process until the deadline in
``ctx.cfg`` or SIGTERM; every operation is recorded through ``ctx`` as ``invoke`` then ``ok`` |
``fail`` | ``info`` with its payload id. It returns nothing: the process exit code tells the
runner how it ended. Workload keys are documented in each role's module docstring.
"""

from __future__ import annotations

from typing import Callable

from .base import RoleConfig, RoleContext, role_main
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

__all__ = ["KINDS", "RoleConfig", "RoleContext", "role_main"]
