"""Token usage and per-model usage rows (SPEC §2.3, §5 ``update_token_counts``)."""

from __future__ import annotations


class UsageMixin:
    """``update_token_counts``; needs ``self._write(fn, op)``."""
