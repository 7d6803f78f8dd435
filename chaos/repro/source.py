"""A user's bundle as the repro reads it: bounded, read without following links, every field
citable by its path and its line in the file (issue 25)."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

import yaml

from ..scenario.loading import line_of

#: A bundle larger than this is not one ``doctor --bundle`` wrote.
BUNDLE_LIMIT = 64 << 20
#: The bundle formats this toolkit reads.
FORMATS = (1,)


class BundleError(Exception):
    """The file is not a readable bundle (missing, a link or FIFO, too large, not JSON, not a
    ``doctor --bundle`` file, or of a format this toolkit does not know)."""


def _read(path: Path) -> str:
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise BundleError(f"{path}: no such file") from None
    except OSError as exc:
        raise BundleError(f"{path}: cannot open it ({exc.strerror}; a symbolic link is not "
                          "followed)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BundleError(f"{path}: not a regular file")
        if st.st_size > BUNDLE_LIMIT:
            raise BundleError(f"{path}: {st.st_size} bytes, more than a bundle can be "
                              f"({BUNDLE_LIMIT})")
        with os.fdopen(os.dup(fd), "rb") as fh:
            data = fh.read(BUNDLE_LIMIT + 1)
    finally:
        os.close(fd)
    return data.decode("utf-8", "replace")


class Bundle:
    """A parsed bundle: :meth:`get` a field by path, :meth:`ref` cite it (``field (line N)``).

    Raises:
        BundleError: see the class.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.text = _read(self.path)
        try:
            self.data = json.loads(self.text)
        except ValueError as exc:
            raise BundleError(f"{self.path}: not JSON ({exc}); give the file `hermes-state "
                              "doctor --bundle FILE` wrote") from None
        head = self.data.get("bundle") if isinstance(self.data, dict) else None
        if not isinstance(head, dict) or "format" not in head:
            raise BundleError(f"{self.path}: not a hermes-state bundle (no `bundle.format`); "
                              "make one with `hermes-state doctor --bundle FILE`")
        if head.get("format") not in FORMATS:
            raise BundleError(f"{self.path}: bundle format {head.get('format')!r}; this "
                              f"toolkit reads format(s) {', '.join(map(str, FORMATS))}")
        try:
            self._root = yaml.compose(self.text, Loader=yaml.SafeLoader)
        except yaml.YAMLError:
            self._root = None  # fields are still cited by path, without lines

    def get(self, *path: Any, default: Any = None) -> Any:
        """The value at ``path`` (keys and list indexes), ``default`` when any step is missing."""
        node: Any = self.data
        for p in path:
            if isinstance(node, dict) and isinstance(p, str) and p in node:
                node = node[p]
            elif isinstance(node, list) and isinstance(p, int) and -len(node) <= p < len(node):
                node = node[p]
            else:
                return default
        return node

    def ref(self, *path: Any) -> str:
        """``processes.processes[1].state (line 87)``: a field of the bundle, for a comment."""
        text = ""
        for p in path:
            text += f"[{p}]" if isinstance(p, int) else (f".{p}" if text else str(p))
        if self._root is None:
            return text
        return f"{text} (line {line_of(self._root, path)})"

    @property
    def processes(self) -> list[dict]:
        """``processes.processes`` (``[]`` when not collected)."""
        found = self.get("processes", "processes", default=[])
        return [p for p in found if isinstance(p, dict)] if isinstance(found, list) else []
