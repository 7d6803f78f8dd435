"""Directories a command created, and the only way the toolkit removes a tree (issue 22 item 4).

A command that wants to remove a directory tree later creates it with :meth:`Owned.make`, which
creates it exclusively (never reuses one that exists: :class:`NotOwned` names it) and remembers
its identity (``st_dev``, ``st_ino``). :meth:`Owned.remove` removes a tree only when the path is
still that very directory (not a symbolic link, not another directory moved into its place, not
a parent reached through ``..``); anything else is refused by name, and nothing is removed.

So a name that slipped through (a mutant file ``...yaml`` whose stem is ``..``) can at worst be
refused: it can never make the command delete the parent of its output directory, a directory a
user made, or what a planted link points at.
"""

from __future__ import annotations

import os
import shutil
import stat
import threading
from pathlib import Path


class NotOwned(OSError):
    """A directory the command did not create (or that is no longer the one it created): it is
    neither reused nor removed; ``str()`` names it."""


class Owned:
    """The directories one command created (thread-safe)."""

    def __init__(self) -> None:
        self._ids: dict[tuple[int, int], str] = {}
        self._lock = threading.Lock()

    def make(self, path: str | os.PathLike, *, mode: int = 0o755) -> Path:
        """Create the directory ``path`` (its parent must exist) and own it.

        Raises:
            NotOwned: something already exists at ``path`` (it is left alone).
            OSError: the parent is missing or not writable.
        """
        path = Path(os.path.abspath(path))
        try:
            os.mkdir(path, mode)
        except FileExistsError:
            raise NotOwned(f"{path} already exists and was not created by this command: it is "
                           "neither reused nor removed (choose another output directory, or "
                           "remove it yourself)") from None
        st = os.lstat(path)
        with self._lock:
            self._ids[(st.st_dev, st.st_ino)] = str(path)
        return path

    def owns(self, path: str | os.PathLike) -> bool:
        """True when ``path`` (not followed if a link) is a directory this command created."""
        try:
            st = os.lstat(path)
        except OSError:
            return False
        with self._lock:
            return (stat.S_ISDIR(st.st_mode)
                    and self._ids.get((st.st_dev, st.st_ino)) == os.path.abspath(path))

    def remove(self, path: str | os.PathLike) -> None:
        """Remove the tree at ``path``, which must be a directory this command created (same
        name, same identity, not a link). Links inside it are removed, never followed.

        Raises:
            NotOwned: ``path`` is anything else; nothing was removed.
        """
        if not self.owns(path):
            raise NotOwned(f"{path} was not created by this command (or was replaced since): "
                           "not removed")
        st = os.lstat(path)
        shutil.rmtree(path)  # the fd-based rmtree: a link inside is unlinked, not followed
        with self._lock:
            self._ids.pop((st.st_dev, st.st_ino), None)
