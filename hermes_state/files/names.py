"""Names that become paths: checked once, here (issue 22 items 4 and 9, the store's part).

Every name a caller gives that the store turns into ONE path component goes through
:func:`name_problem`; each site chooses what to do with a name that fails:

==========================  ====================================================================
name                        what a bad one does
==========================  ====================================================================
profile (``-p NAME``)       refused: :class:`UnsafeNameError` (``<root>/profiles/<name>``)
snapshot id (``restore``)   refused: not a snapshot id (``state-snapshots/<id>``, ``<id>.bak``)
session id, spool file      mapped: ``sessions/sid-<sha256 prefix>.jsonl`` (the id is inside
                            every record, so replay never depends on the file name)
session id, transcripts     no file is touched (``<sessions_dir>/<id>.json``, ``.jsonl``,
                            ``request_dump_<id>_*.json`` are only ever removed)
snapshot reason             mapped to ``[a-z0-9-]`` (``operator.snapshot_images.sanitize_reason``)
capture names               made by the store (``<UTCSTAMP>-<pid>``), never taken from a caller
==========================  ====================================================================

A name is refused when it is not text, is empty, ``.`` or ``..``, holds a path separator, NUL
or another control character, holds a lone surrogate (no file system can store it as given),
is longer than the file system's 255 bytes (with the suffix the site adds), or, unless the site
allows it, starts with ``-`` (it would read as an option in every command line a user types
to deal with the file).
"""

from __future__ import annotations

import os
import re

from ..errors import HermesStateError

__all__ = ["NAME_MAX_BYTES", "UnsafeNameError", "name_problem", "check_name", "is_portable",
           "shown_name"]

#: The longest file name (bytes) the file systems the store runs on accept (NAME_MAX).
NAME_MAX_BYTES = 255
_CONTROL = re.compile("[\x00-\x1f\x7f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
#: Names that are the same on every file system and in every shell (spool files).
_PORTABLE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@+=-]*")


class UnsafeNameError(HermesStateError, ValueError):
    """A name that would become a path is refused (what it is, why, what a good one is)."""


def name_problem(name, *, suffix: str = "", allow_dash: bool = False,
                 max_bytes: int = NAME_MAX_BYTES) -> str | None:
    """Why ``name`` (with ``suffix`` appended) cannot be one path component; None when it can.

    Args:
        suffix: what the site appends (``".jsonl"``), counted in the length.
        allow_dash: accept a leading ``-`` (names another program chose, only ever removed).
        max_bytes: the longest component allowed, in UTF-8 bytes.
    """
    if not isinstance(name, str):
        return f"is a {type(name).__name__}, not text"
    if name in ("", ".", ".."):
        return "is empty, '.' or '..'" if name else "is empty"
    if "/" in name or "\\" in name or (os.altsep and os.altsep in name):
        return "contains a path separator"
    if "\x00" in name:
        return "contains a NUL character"
    if _CONTROL.search(name):
        return "contains a control character"
    if _SURROGATE.search(name):
        return "contains a lone surrogate (not valid UTF-8)"
    size = len((name + suffix).encode("utf-8"))
    if size > max_bytes:
        return f"is {size} bytes long{' with ' + suffix if suffix else ''} (at most {max_bytes})"
    if name.startswith("-") and not allow_dash:
        return "starts with '-' (it would read as an option)"
    return None


def check_name(kind: str, name, *, example: str = "work", **kw) -> str:
    """``name`` if :func:`name_problem` finds nothing, else :class:`UnsafeNameError` naming
    ``kind`` (``"profile name"``), the name (escaped, cut) and the rule."""
    problem = name_problem(name, **kw)
    if problem is None:
        return name
    raise UnsafeNameError(f"invalid {kind} {shown_name(name)}: it {problem}.",
                          f"use a plain name like {example!r}")


def shown_name(name) -> str:
    """``repr`` of a name, cut to 60 characters (printable whatever it holds)."""
    text = repr(name)
    return text if len(text) <= 60 else text[:57] + "..."


def is_portable(name, *, suffix: str = "", max_bytes: int = NAME_MAX_BYTES) -> bool:
    """A plain name that is also portable: ASCII letters, digits and ``. _ @ + = -``, starting
    with a letter or digit (the spool's file names)."""
    return (name_problem(name, suffix=suffix, max_bytes=max_bytes) is None
            and _PORTABLE.fullmatch(name) is not None)
