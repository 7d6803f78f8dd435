"""``hermes-state`` / ``python -m hermes_state``: parsing and printing only (SPEC §15)."""

from .commands import build_parser, main

__all__ = ["build_parser", "main"]
