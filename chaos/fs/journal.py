"""Namespace operations not yet made durable by a directory fsync, and their undo.

Creates, unlinks, renames, links and mkdir/rmdir are applied to the backing directory at once
(every process sees them) and appended to this journal. ``fsync`` of a directory commits the
journal up to the last entry that touched that directory (a journaling filesystem commits in
order, so everything before it goes too). A power cut undoes the uncommitted suffix in reverse
order, which restores exactly the namespace of the last commit: a file created and fsynced but
whose directory was never fsynced disappears with its data; an unlinked file comes back; a
rename is reversed. An entry that replaced or removed a name keeps the old inode alive by a hard
link in the stash directory (beside the backing directory, never under the mount) until it is
committed or undone.
Not done here: file data (see :mod:`chaos.fs.unsynced`), permissions and times (not modelled:
chmod/chown/utimens are durable at once).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Entry:
    """One uncommitted namespace operation. Paths are relative to the backing root."""
    op: str                     # create | mkdir | symlink | link | unlink | rmdir | rename
    path: str                   # the name created/removed, or the rename's source
    dest: str = ""              # the rename's destination
    stash: str = ""             # stash file holding the inode the op removed or replaced
    mode: int = 0               # rmdir: the directory's mode, to recreate it
    dirs: tuple[str, ...] = field(default_factory=tuple)  # parent directories touched


def parent(rel: str) -> str:
    """The parent directory of a relative path ("" for the root)."""
    return os.path.dirname(rel.rstrip("/"))


class Journal:
    """The uncommitted namespace operations over ``backing`` (a directory), with undo."""

    def __init__(self, backing: Path, stash: Path):
        self.backing = Path(backing)
        self.stash = Path(stash)
        self.stash.mkdir(mode=0o700, exist_ok=True)
        self.entries: list[Entry] = []
        self._seq = 0

    def _abs(self, rel: str) -> str:
        return os.path.join(self.backing, rel)

    def _stash_inode(self, rel: str) -> str:
        """Hard-link the inode at ``rel`` into the stash; returns the stash name ("" for a dir)."""
        path = self._abs(rel)
        if os.path.isdir(path) and not os.path.islink(path):
            return ""
        self._seq += 1
        name = f"{self._seq}"
        os.link(path, self.stash / name, follow_symlinks=False)
        return name

    # -- recording (called after the operation succeeded on the backing, except where a stash
    #    must be taken first: see before_remove)
    def before_remove(self, rel: str) -> str:
        """Stash the inode ``rel`` names before it is unlinked or replaced; "" if none."""
        if not os.path.lexists(self._abs(rel)):
            return ""
        return self._stash_inode(rel)

    def record(self, entry: Entry) -> None:
        """Append an applied operation."""
        if not entry.dirs:
            dirs = {parent(entry.path)}
            if entry.dest:
                dirs.add(parent(entry.dest))
            entry.dirs = tuple(sorted(dirs))
        self.entries.append(entry)

    # -- durability
    def commit_dir(self, rel_dir: str) -> int:
        """fsync of directory ``rel_dir``: commit up to its last entry. Returns entries committed."""
        rel_dir = rel_dir.strip("/")
        last = -1
        for i, entry in enumerate(self.entries):
            if rel_dir in entry.dirs:
                last = i
        return self._commit(last + 1)

    def commit_all(self) -> int:
        """Commit every entry (clean shutdown, torn write). Returns entries committed."""
        return self._commit(len(self.entries))

    def _commit(self, count: int) -> int:
        done, self.entries = self.entries[:count], self.entries[count:]
        for entry in done:
            self._drop_stash(entry)
        return len(done)

    def _drop_stash(self, entry: Entry) -> None:
        if entry.stash:
            try:
                os.unlink(self.stash / entry.stash)
            except FileNotFoundError:
                pass

    def undo_all(self) -> list[dict]:
        """Power cut: undo every uncommitted entry, newest first. Returns what was undone."""
        undone = []
        for entry in reversed(self.entries):
            try:
                self._undo(entry)
                undone.append({"op": entry.op, "path": entry.path, "dest": entry.dest})
            except OSError as exc:  # the namespace moved on in a way the undo cannot follow
                undone.append({"op": entry.op, "path": entry.path, "dest": entry.dest,
                               "error": f"{type(exc).__name__}: {exc}"})
            self._drop_stash(entry)
        self.entries = []
        return undone

    def _restore(self, stash: str, rel: str) -> None:
        if stash:
            os.link(self.stash / stash, self._abs(rel), follow_symlinks=False)

    def _undo(self, e: Entry) -> None:
        path = self._abs(e.path)
        if e.op in ("create", "symlink", "link"):
            os.unlink(path)
        elif e.op == "mkdir":
            shutil.rmtree(path)
        elif e.op == "unlink":
            self._restore(e.stash, e.path)
        elif e.op == "rmdir":
            os.mkdir(path, e.mode)
        elif e.op == "rename":
            os.rename(self._abs(e.dest), path)
            self._restore(e.stash, e.dest)
        else:  # pragma: no cover - record() callers only use the ops above
            raise ValueError(f"unknown journal op {e.op!r}")

    def close(self) -> None:
        """Remove the stash directory (after commit_all or undo_all)."""
        shutil.rmtree(self.stash, ignore_errors=True)
