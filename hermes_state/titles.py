"""Titles and lineage numbering (SPEC §7)."""

from __future__ import annotations


class TitlesMixin:
    """Title API (SPEC §5, §7); needs ``self._write(fn, op)`` and ``self._read(fn)``."""
