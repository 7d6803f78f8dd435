"""Text and JSON field encoding shared by every table (SPEC §2.2).

Lone UTF-16 surrogates cannot be bound by sqlite3; every text field replaces them with U+FFFD
before binding: ``"a\\ud835b"`` is stored as ``"a\\ufffdb"``.
"""

from __future__ import annotations

import json
import re
import sqlite3
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
#: SQLite's INTEGER range (a Python int outside it cannot be bound: OverflowError).
INT64_MIN, INT64_MAX = -(2 ** 63), 2 ** 63 - 1


class UnstorableValueError(ValueError):
    """A value the store cannot write as given: an integer outside SQLite's 64-bit range, or an
    object of a type SQLite cannot bind (a list, a dict, ...). Nothing was written. SPEC §2.2."""


class UnstorableJSONError(UnstorableValueError, TypeError):
    """A JSON field (``tool_calls``, ``reasoning_details``, ``codex_*``, ``display_metadata``,
    ``model_config``) holding what ``json.dumps`` cannot encode (bytes, a set, an object, a
    circular reference). A ``TypeError`` as upstream's ``json.dumps`` raised, naming the field.
    Nothing was written. SPEC §2.2."""


def storable_problem(value: Any) -> str | None:
    """Why SQLite cannot store ``value`` as it is (None when it can).

    Text (cleaned), bytes, None, bool and finite or infinite floats are stored as given; an int
    must be within [-2**63, 2**63 - 1]; NaN would silently become NULL, so it is refused too.
    """
    if value is None or isinstance(value, (str, bytes, bytearray, memoryview, bool)):
        return None
    if isinstance(value, int):
        if INT64_MIN <= value <= INT64_MAX:
            return None
        text = str(value) if value.bit_length() < 200 else f"a {value.bit_length()}-bit integer"
        return f"{text} is outside SQLite's integer range (-2**63 .. 2**63-1)"
    if isinstance(value, float):
        return None if value == value else "NaN is not a number SQLite can store"
    return f"a {type(value).__name__} cannot be stored (text, a number, bytes or null)"


def int_arg(value: Any, name: str, default: int = 0) -> int:
    """An integer argument of the API (a limit, an offset, a window, a token count): ``int()``
    of it, None giving ``default``.

    Raises:
        ValueError: naming ``name``, for NaN, an infinity or anything ``int()`` refuses (never
            an OverflowError; issue 22 item 7). An int beyond SQLite's range is refused when
            it is bound (:class:`UnstorableValueError`).
    """
    if value is None:
        return default
    try:
        return int(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"{name} must be an integer, not {ascii(value)[:40]}") from None


def _bind_error(params: Any, exc: BaseException) -> UnstorableValueError:
    values = params.values() if isinstance(params, dict) else (
        params if isinstance(params, (tuple, list)) else ())
    problems = [p for p in map(storable_problem, values) if p]
    return UnstorableValueError(
        f"cannot store {problems[0] if problems else 'a value'}; nothing was written "
        f"({type(exc).__name__}: {exc})")


def clean_text(value: Any) -> Any:
    """Return ``value`` with lone surrogates replaced by U+FFFD; non-strings pass through.

    ASCII text (``str.isascii`` reads a flag CPython keeps on every str: O(1)) cannot hold a
    surrogate and is returned without a scan (issue 24 item 4).
    """
    if isinstance(value, str) and not value.isascii() and _SURROGATE.search(value):
        return _SURROGATE.sub("\ufffd", value)
    return value


class Cleaned(tuple):
    """SQL parameters every text value of which already went through :func:`clean_text`:
    :func:`clean_params` passes them through without a second scan (issue 24 item 4). Build
    one only from cleaned values (:func:`cleaned`)."""

    __slots__ = ()


def cleaned(values: Any) -> Cleaned:
    """``Cleaned`` of ``values`` with every text value cleaned (a no-op scan for ASCII text)."""
    return Cleaned(clean_text(v) for v in values)


def clean_params(params: Any) -> Any:
    """SQL parameters with every text value cleaned (:func:`clean_text`); SPEC §2.2.

    A sequence gives a tuple, a mapping (named parameters) a dict; values that are not text
    pass through (a value SQLite cannot bind surfaces as :class:`UnstorableValueError` from
    :class:`CleaningConnection`, never as an OverflowError or a binding error). The common case (no lone surrogate anywhere) returns ``params`` itself.
    """
    if type(params) is Cleaned:
        return params
    if isinstance(params, dict):
        if any(isinstance(v, str) and not v.isascii() and _SURROGATE.search(v)
               for v in params.values()):
            return {k: clean_text(v) for k, v in params.items()}
        return params
    if isinstance(params, (tuple, list)):
        if any(isinstance(v, str) and not v.isascii() and _SURROGATE.search(v) for v in params):
            return tuple(clean_text(v) for v in params)
        return params
    return params


class CleaningConnection:
    """A ``sqlite3.Connection`` whose ``execute``/``executemany`` clean every text parameter.

    Every API call reaches SQLite through one of these (:meth:`SessionDB._write` /
    :meth:`SessionDB._read`), so no text field of any call (role, ids, titles, keys, filters)
    can reach SQLite with a lone surrogate, whichever module binds it (SPEC §2.2). Everything
    else is the wrapped connection's.
    """

    __slots__ = ("_conn",)

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Any = ()) -> Any:
        return self.execute_cleaned(sql, clean_params(params))

    def execute_cleaned(self, sql: str, cleaned: Any) -> Any:
        """:meth:`execute` of parameters every text value of which already went through
        :func:`clean_text` (not scanned again, issue 24 item 4); a value SQLite cannot bind is
        still an :class:`UnstorableValueError`."""
        try:
            return self._conn.execute(sql, cleaned)
        except (OverflowError, sqlite3.InterfaceError) as exc:
            raise _bind_error(cleaned, exc) from exc
        except sqlite3.ProgrammingError as exc:
            if "binding parameter" not in str(exc) and "supported" not in str(exc):
                raise
            raise _bind_error(cleaned, exc) from exc

    def executemany(self, sql: str, seq: Any) -> Any:
        try:
            return self._conn.executemany(sql, (clean_params(p) for p in seq))
        except (OverflowError, sqlite3.InterfaceError) as exc:
            raise _bind_error((), exc) from exc
        except sqlite3.ProgrammingError as exc:
            if "binding parameter" not in str(exc) and "supported" not in str(exc):
                raise
            raise _bind_error((), exc) from exc

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


# ---------------------------------------------------------------------------- message content
#: Prefix of a list/dict ``content`` stored as JSON text (upstream D6): the NUL keeps it apart
#: from any plain string a user could type.
CONTENT_JSON_PREFIX = "\x00json:"
MULTIMODAL_PLACEHOLDER = "[multimodal content]"


def encode_content(value: Any) -> Any:
    """Encode message ``content`` for binding (UPSTREAM_API D6).

    A list or dict becomes ``"\\x00json:" + json.dumps(value)`` (ASCII-escaped); a value
    ``json.dumps`` refuses becomes its ``str()``; a str has lone surrogates replaced; None, bytes,
    int and float are stored as given (a bytearray or memoryview as bytes); any other object as
    its (cleaned) ``str()``.

    Raises:
        UnstorableValueError: neither ``json.dumps`` nor ``str()`` can encode it (nesting too
            deep, an int too long for ``str()``).
    """
    if value is None or isinstance(value, (bytes, int, float)):
        return value
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, (bytearray, memoryview)):
        return bytes(value)  # a BLOB, as bytes (sqlite3 binds these as a BLOB too)
    if isinstance(value, (list, dict)):
        try:
            return CONTENT_JSON_PREFIX + json.dumps(value)
        except (TypeError, ValueError, RecursionError):
            pass
    try:
        return clean_text(str(value))
    except (ValueError, RecursionError) as exc:  # too deep, or an int too long for str()
        raise UnstorableValueError(
            f"content: cannot be stored, neither as JSON nor as text ({exc}); nothing was "
            "written") from None


def decode_content(value: Any) -> Any:
    """Reverse :func:`encode_content`: the original list/dict; invalid JSON stays the raw text."""
    if isinstance(value, str) and value.startswith(CONTENT_JSON_PREFIX):
        try:
            return json.loads(value[len(CONTENT_JSON_PREFIX):])
        except ValueError:
            return value
    return value


def content_text(value: Any) -> str:
    """Readable text of decoded ``content`` for previews and search context.

    A str as is; a list/dict (multimodal parts) → its text parts joined by a space, or
    ``"[multimodal content]"`` when it has none; None → ``""``; anything else its ``str()``.
    """
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (list, dict)):
        parts = value if isinstance(value, list) else [value]
        texts = []
        for part in parts:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
        joined = " ".join(t for t in texts if t)
        return joined or MULTIMODAL_PLACEHOLDER
    return str(value)


def display_text(value: Any) -> str:
    """Text of a stored value of ANY type for a preview or a listing (issue 22 item 7): None →
    ``""``; text as is; bytes (a foreign client's BLOB) decoded as UTF-8 with U+FFFD for bad
    bytes; anything else its ``str()``. Never raises."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value).decode("utf-8", "replace")
    try:
        return str(value)
    except Exception:  # noqa: BLE001 - an object whose __str__ fails is still shown
        return f"<{type(value).__name__}>"


def encode_json_field(value: Any, field: str = "value") -> str | None:
    """A JSON message/session field as upstream stores it: ``json.dumps`` when truthy, else NULL
    (``[]`` and ``{}`` become NULL; a str becomes a quoted JSON string).

    Raises:
        UnstorableJSONError: ``json.dumps`` refused the value (``field`` named).
    """
    if not value:
        return None
    return dump_json(value, field)


def dump_json(value: Any, field: str = "value") -> str:
    """``json.dumps(value)`` (ASCII-escaped, as upstream stores JSON text), of any value.

    Raises:
        UnstorableJSONError: ``json.dumps`` refused the value (``field`` named), never a bare
            ``TypeError``/``ValueError``/``RecursionError`` of the encoder.
    """
    try:
        return clean_text(json.dumps(value))
    except (TypeError, ValueError, RecursionError) as exc:
        raise UnstorableJSONError(
            f"{field}: cannot be stored as JSON ({exc}); nothing was written. Pass str, int, "
            "float, bool, None, lists and dicts of them (encode bytes first, e.g. as base64 "
            "text; a set as a list)") from None


def decode_tool_calls(text: Any) -> Any:
    """Stored ``tool_calls`` JSON → Python; NULL stays None, invalid JSON → ``[]``."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except (ValueError, TypeError):
        return []
