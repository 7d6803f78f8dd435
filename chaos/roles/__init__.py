"""Role kinds (SPEC §16.1): each a function ``run(ctx: RoleContext)`` in its own module."""

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
