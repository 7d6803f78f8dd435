"""Listing, lineage walks, export, prune, clear and delete of sessions (SPEC §5)."""

from __future__ import annotations


class LifecycleMixin:
    """Session listing/export/removal API; needs ``self._write`` and ``self._read``."""
