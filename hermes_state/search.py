"""Full-text search (SPEC §6). Filled in by the search work; see SearchMixin."""

from __future__ import annotations


class SearchMixin:
    """``search_messages`` (SPEC §6); needs ``self._read(fn)``."""
