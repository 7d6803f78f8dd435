"""Text and JSON field encoding shared by every table (SPEC §2.2).

Lone UTF-16 surrogates cannot be bound by sqlite3; every text field replaces them with U+FFFD
before binding: ``"a\\ud835b"`` is stored as ``"a\\ufffdb"``.
"""

from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(value: Any) -> Any:
    """Return ``value`` with lone surrogates replaced by U+FFFD; non-strings pass through."""
    if isinstance(value, str) and _SURROGATE.search(value):
        return _SURROGATE.sub("\ufffd", value)
    return value


def encode_json(value: Any, *, empty_list_is_null: bool = False) -> str | None:
    """Encode a JSON field: None stays NULL, a string is stored as given (already JSON text).

    Args:
        value: a list/dict/scalar, a JSON string, or None.
        empty_list_is_null: store ``[]`` as NULL (``tool_calls``, SPEC §5).
    Returns:
        JSON text with lone surrogates replaced, or None.
    """
    if value is None:
        return None
    if isinstance(value, str):
        return clean_text(value)
    if empty_list_is_null and isinstance(value, (list, tuple)) and not value:
        return None
    return clean_text(json.dumps(value, ensure_ascii=False))


def decode_json(text: str | None) -> Any:
    """Decode a stored JSON field; text that is not JSON is returned unchanged."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, TypeError):
        return text
