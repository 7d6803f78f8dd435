"""A name that becomes a path: the one place the toolkit decides which names may (issue 22 item 4).

A mutant's name (its file's stem), a scenario's or a role's name, a process name, a run
directory's name, a store's name under ``--stores``: each ends up as ONE component of a path the
toolkit creates, writes or removes (``<out>/<mutant>/``, ``history/<process>.jsonl``,
``<out>/<name>-<UTCSTAMP>-seed<N>/``). :func:`check` accepts only a plain component: ASCII
letters, digits, ``_``, ``-`` and ``.``, starting with a letter, a digit or ``_`` (so never
``.``, ``..``, a hidden file or something a command reads as an option), at most
:data:`MAX_BYTES` bytes; everything else (``/``, NUL, a surrogate, a newline, a 300-byte name)
is a :class:`BadName` that says what the name is and why it cannot be one.

:func:`derive` turns ANY text (a store's label, a scenario file's stem) into a valid component
for files the toolkit names after it (logs, probes), deterministically and without collisions
between different texts (a hash suffix when anything was changed).

Nothing here touches the filesystem.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

#: Longest name a user chooses (UTF-8 bytes; all ASCII here): room is left for the suffixes
#: the toolkit adds (``-<UTCSTAMP>-seed<N>-<k>``, ``-<index>.jsonl``).
MAX_BYTES = 100
#: Longest component the toolkit builds from such a name (a run directory, a process's history
#: file before its ``.jsonl``/``.partial``): within the 255 bytes of a file name.
MAX_COMPONENT_BYTES = 200
_NAME_RE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]*\Z")
_KEEP_RE = re.compile(r"[^A-Za-z0-9_.-]")


class BadName(ValueError):
    """A name that cannot become a path component; ``str()`` names it and says why."""

    def __init__(self, what: str, name: object, why: str) -> None:
        super().__init__(f"{what} {shown(name)} cannot be used as a file name: {why}")
        self.what, self.name, self.why = what, name, why


def shown(name: object, limit: int = 60) -> str:
    """``repr`` of ``name`` cut to ``limit`` characters: printable whatever it holds (a
    surrogate, NUL, a newline or a terminal escape come out escaped)."""
    text = ascii(name) if isinstance(name, str) else repr(name)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def why_not(name: object, max_bytes: int = MAX_BYTES) -> str | None:
    """Why ``name`` cannot be a path component, or None when it can (see the module doc)."""
    if not isinstance(name, str):
        return f"a name is text, not {type(name).__name__}"
    if not name:
        return "it is empty"
    if name in (".", ".."):
        return f"{name!r} names a directory itself (the current one or its parent)"
    if "/" in name or os.sep in name:
        return "it contains '/' (a name is one path component)"
    if "\0" in name:
        return "it contains a NUL character"
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        return "it contains a lone surrogate (not valid Unicode)"
    if size > max_bytes:
        return f"it is {size} bytes long (at most {max_bytes})"
    if name[0] == "-":
        return "it starts with '-' (a command would read it as an option)"
    if name[0] == ".":
        return "it starts with '.' (a hidden file, or '.'/'..' once a suffix is cut)"
    if not _NAME_RE.match(name):
        bad = sorted({c for c in name if _KEEP_RE.match(c)})
        return ("it contains " + ", ".join(ascii(c) for c in bad[:5])
                + " (allowed: ASCII letters, digits, '_', '-', '.')")
    return None


def check(name: object, what: str = "name", max_bytes: int = MAX_BYTES) -> str:
    """``name`` itself when it can be a path component, else :class:`BadName`.

    Args:
        name: the candidate; ``what``: what it is, for the message (``"mutant"``, ``"role"``).
    Raises:
        BadName: ``..``, ``.``, ``/``, NUL, a surrogate, over :data:`MAX_BYTES` bytes, a leading
            ``-`` or ``.``, or any character outside ASCII letters, digits, ``_-.``.
    """
    why = why_not(name, max_bytes)
    if why is not None:
        raise BadName(what, name, why)
    return name  # type: ignore[return-value]


def child(parent: str | os.PathLike, name: object, what: str = "name") -> Path:
    """``parent / name`` after :func:`check` (so the result is always directly inside
    ``parent``). Raises :class:`BadName`."""
    return Path(parent) / check(name, what)


def derive(text: object, max_bytes: int = MAX_BYTES) -> str:
    """A valid component made from any ``text``: characters outside the allowed set become
    ``_``, a leading ``.``/``-`` is prefixed with ``_``, and when anything changed (or the name
    was cut to ``max_bytes``) an 8-hex hash of the original is appended, so two different texts
    never derive the same name. ``derive(x) == x`` for a name :func:`check` accepts."""
    raw = text if isinstance(text, str) else repr(text)
    if why_not(raw, max_bytes) is None:
        return raw
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    safe = _KEEP_RE.sub("_", raw) or "_"
    if safe[0] in ".-":
        safe = "_" + safe
    return safe[: max(1, max_bytes - 9)] + "-" + digest
