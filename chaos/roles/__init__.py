"""Role kinds (SPEC §16.1): each a function ``run(ctx: RoleContext)`` in its own module."""

from __future__ import annotations

from typing import Callable

from .base import RoleConfig, RoleContext, role_main
from .cli import run as run_cli
from .gateway import run as run_gateway
from .lock_holder import run as run_lock_holder

KINDS: dict[str, Callable[[RoleContext], None]] = {
    "gateway": run_gateway,
    "cli": run_cli,
    "lock_holder": run_lock_holder,
}

__all__ = ["KINDS", "RoleConfig", "RoleContext", "role_main"]
