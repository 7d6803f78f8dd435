"""One normalisation of a parsed scenario document, before anything judges it (issue 22 item 9).

YAML gives values JSON Schema accepts but Python code may not use the same way: ``count: 2.0``
is an integer to the schema (draft 2020-12: a number with a zero fractional part) and a float to
``range()``; ``"\\ud83d\\ude00"`` is two lone surrogates to PyYAML (it does not join a UTF-16
escape pair the way JSON does) and cannot be printed nor written as UTF-8; ``!!binary`` and
``!!set`` build values that are not JSON at all. :func:`normalise` rewrites the document in place
into plain JSON data, once, right after parsing, so that the schema, the rules, the typed model
(:mod:`.model`), ``chaos list`` and ``chaos run`` all read the same values:

* a float with an integral value becomes an ``int`` (``2.0`` -> ``2``, ``1e3`` -> ``1000``);
* an integer outside ``[-(2**63 - 1), 2**63 - 1]`` is a problem (SQLite, JSON readers and the OS
  take no more; no scenario field needs more);
* a string's UTF-16 surrogate pairs are joined into their character; a lone surrogate or a NUL
  character is a problem (it cannot be printed, stored as UTF-8 or passed to a process);
* a tuple (``!!pairs``, ``!!omap``) becomes a list; any other non-JSON value (bytes, a set, a
  date) is a problem naming its type.

Non-finite floats and non-string keys were already reported by
:func:`chaos.scenario.loading.sanitize`.
"""

from __future__ import annotations

import math
from typing import Any

#: Largest magnitude of an integer in a scenario (SQLite's INTEGER, JSON readers' int64).
MAX_INT = 2**63 - 1
_JSON_SCALARS = (str, int, float, bool, type(None))


def text_problem(text: str) -> tuple[str, str | None]:
    """``(normalised text, problem or None)``: surrogate pairs joined; a lone surrogate or a
    NUL named (with its character index)."""
    if "\0" in text:
        return text, f"contains a NUL character (at character {text.index(chr(0))})"
    try:
        text.encode("utf-8")
        return text, None
    except UnicodeEncodeError:
        pass
    out, i = [], 0
    while i < len(text):
        c = ord(text[i])
        nxt = ord(text[i + 1]) if i + 1 < len(text) else 0
        if 0xD800 <= c <= 0xDBFF and 0xDC00 <= nxt <= 0xDFFF:  # a UTF-16 pair: one character
            out.append(chr(0x10000 + ((c - 0xD800) << 10) + (nxt - 0xDC00)))
            i += 2
        elif 0xD800 <= c <= 0xDFFF:
            return text, (f"contains a lone surrogate \\u{c:04x} at character {i} (not valid "
                          "Unicode: write the character itself, or a \\U escape)")
        else:
            out.append(text[i])
            i += 1
    return "".join(out), None


def _scalar(value: Any) -> tuple[Any, str | None]:
    """A normalised scalar and its problem (or None)."""
    if isinstance(value, bool) or value is None:
        return value, None
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            value = int(value)
        else:
            return value, None
    if isinstance(value, int):
        if abs(value) > MAX_INT:
            return value, f"{value:.3g} is out of range (at most 2**63-1 in magnitude)"
        return value, None
    if isinstance(value, str):
        return text_problem(value)
    return value, None


def normalise(data: Any, emit_path) -> Any:
    """Rewrite ``data`` (the constructed YAML document) in place as described in the module
    doc; ``emit_path(path, message)`` reports each problem. Returns the normalised document
    (a new object only when ``data`` itself is a scalar or a tuple). Safe on recursive
    documents (YAML aliases) and deep ones (no recursion)."""
    top, problem = _top(data)
    if problem:
        emit_path([], problem)
    seen: set[int] = set()
    stack: list[tuple[Any, list]] = [(top, [])]
    while stack:
        obj, path = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, dict):
            for key in list(obj):
                if isinstance(key, str):
                    fixed, why = text_problem(key)
                    if why:
                        emit_path(path, f"key {key!r} {why}")
                    elif fixed != key:
                        obj[fixed] = obj.pop(key)
                        key = fixed
                obj[key] = _child(obj[key], path + [key], emit_path, stack)
        elif isinstance(obj, list):
            for i, value in enumerate(obj):
                obj[i] = _child(value, path + [i], emit_path, stack)
    return top


def _top(value: Any) -> tuple[Any, str | None]:
    if isinstance(value, (dict, list)):
        return value, None
    if isinstance(value, tuple):
        return list(value), None
    return _scalar(value) if isinstance(value, _JSON_SCALARS) else (value, None)


def _child(value: Any, path: list, emit_path, stack: list) -> Any:
    if isinstance(value, tuple):
        value = [list(v) if isinstance(v, tuple) else v for v in value]
    if isinstance(value, (dict, list)):
        stack.append((value, path))
        return value
    if not isinstance(value, _JSON_SCALARS):
        emit_path(path, f"a YAML {type(value).__name__} is not a scenario value (use a string, "
                  "a number, a boolean, a list or a mapping)")
        return value
    fixed, why = _scalar(value)
    if why:
        emit_path(path, why)
    return fixed
