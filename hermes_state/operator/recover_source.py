"""Copying a store to recover from, and proving it did not change meanwhile (SPEC §14).

:func:`copy_source` copies ``state.db`` with its ``-wal``/``-shm`` (and a hot ``-journal``)
into a private directory, hashing the bytes it copies of every file whose ``stat`` cannot
prove it unchanged later; :func:`source_unchanged` checks size, mtime, ctime and inode of every
file afterwards (hashing again only what could have been written since). The errors of
``sessions recover`` live here too.
"""

from __future__ import annotations

import hashlib
import os
import time
from pathlib import Path
from typing import Callable

from ..errors import HermesStateError
from ..files import atomic

#: Sidecars copied with the source (the main file's name + suffix).
SIDECARS = ("-wal", "-shm", "-journal")
SOURCE_CHANGED = "the source changed while it was copied; stop every process using it"


class RecoverError(HermesStateError):
    """Base of the errors :func:`recover` raises. ``report`` is the report so far (or None)."""

    def __init__(self, user_message: str, operator_detail: str = "", *,
                 report: dict | None = None) -> None:
        self.report = report
        super().__init__(user_message, operator_detail)


class RecoverRefused(RecoverError):
    """The request was refused before anything was read or written (bad paths or arguments)."""


class SourceChangedError(RecoverError):
    """A source file changed while it was copied or inspected (SPEC §14). Nothing was written."""


# =========================================================================== copying the source

def _stat_key(path: Path) -> tuple | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _hash_file(path: Path) -> str | None:
    digest = hashlib.sha256()
    try:
        with atomic.open_regular(path, follow=True) as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
    except FileNotFoundError:
        return None
    return digest.hexdigest()


class _Hasher:
    """sha256 of the blocks fed to it, computed in a thread while the caller writes them
    (``hashlib`` releases the GIL on large blocks: the copy costs the longer of writing and
    hashing, not their sum)."""

    def __init__(self) -> None:
        import queue
        import threading

        self._digest = hashlib.sha256()
        self._queue: queue.Queue = queue.Queue(maxsize=16)
        self._thread = threading.Thread(target=self._run, name="recover-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (block := self._queue.get()) is not None:
            self._digest.update(block)

    def feed(self, block: bytes) -> None:
        self._queue.put(block)

    def hexdigest(self) -> str:
        """Wait for every block fed so far; the hex digest (the hasher is then finished)."""
        self._queue.put(None)
        self._thread.join()
        return self._digest.hexdigest()


def source_files(source: Path) -> dict[str, Path]:
    """``{"state.db": source, "state.db-wal": source-wal, ...}``: copy-side name → source path."""
    files = {"state.db": source}
    for suffix in SIDECARS:
        files[f"state.db{suffix}"] = Path(f"{source}{suffix}")
    return files


#: A source file whose ctime is this close to the moment it was first examined may have been
#: changed again within the same timestamp tick; only such a file is re-hashed at the end.
CTIME_SLACK_NS = 1_000_000_000


def needs_hash(key: tuple | None, t_ns: int) -> bool:
    """Can only a hash prove later that the file with first ``stat`` key ``key`` (taken at wall
    clock ``t_ns``) is unchanged? True when its ctime is within :data:`CTIME_SLACK_NS` of
    ``t_ns`` (a write in the same timestamp tick would leave ``stat`` equal); False for an older
    ctime (any write since moves ctime) or a missing file."""
    return key is not None and key[4] >= t_ns - CTIME_SLACK_NS


def copy_source(source: Path, dest_dir: Path,
                 after_copy_hook: Callable[[], None] | None = None,
                 stats: dict | None = None, progress: Callable | None = None, *,
                 hash_all: bool = True) -> dict:
    """Copy ``source`` and its sidecars into ``dest_dir`` as ``state.db[-wal|-shm|-journal]``.

    Every file is ``stat``-ed before and after the whole copy (device, inode, size, mtime,
    ctime); any difference, or a file appearing or vanishing, refuses (SPEC §14). The bytes of
    a file are hashed while copied when ``hash_all`` or when :func:`needs_hash` (its ctime is
    recent), so :func:`source_unchanged` can prove later that the source is still what was
    copied; with ``hash_all=False`` an older file is not hashed (its ``stat`` is the proof; the
    sha256 of a 1 GB store was a fifth of ``recover --inspect-only``'s CPU).
    Only reads the source; never opens it with SQLite.

    Args:
        source: the main file.
        dest_dir: an existing private directory.
        after_copy_hook: called after the bytes are copied and before the second ``stat``
            (a test seam: a real writer can change the source exactly there).
        stats: filled with ``{name: stat key}`` taken before the copy and ``"_t_ns"`` (wall
            clock of that ``stat``), for :func:`source_unchanged`.
        progress: ``progress("copying the source", bytes_done, bytes_total)`` per MiB.
        hash_all: hash every file (salvage compares the WAL's sha256 with its manifest); else
            only the files :func:`needs_hash` names.
    Returns:
        ``{copy_name: {"path", "bytes", "sha256"} or None}`` (None = no such source file;
        ``sha256`` None = not hashed).
    Raises:
        SourceChangedError: a file changed while it was copied.
        OSError: a source file cannot be read.
    """
    files = source_files(source)
    t_ns = time.time_ns()
    before = {name: _stat_key(path) for name, path in files.items()}
    if stats is not None:
        stats.update(before, _t_ns=t_ns)
    total = sum(k[2] for k in before.values() if k is not None)
    done = 0
    copied: dict[str, dict | None] = {}
    for name, path in files.items():
        if before[name] is None:
            copied[name] = None
            continue
        size = 0
        hasher = _Hasher() if hash_all or needs_hash(before[name], t_ns) else None
        try:
            with atomic.open_regular(path, follow=True) as src, \
                    os.fdopen(atomic.create_file(dest_dir / name), "wb") as dst:
                for block in iter(lambda: src.read(1 << 20), b""):
                    if hasher is not None:
                        hasher.feed(block)
                    dst.write(block)
                    size += len(block)
                    done += len(block)
                    if progress is not None:
                        progress("copying the source", done, total)
        except FileNotFoundError:
            raise SourceChangedError(SOURCE_CHANGED, f"{path} vanished during the copy") from None
        finally:
            digest = None if hasher is None else hasher.hexdigest()
        copied[name] = {"path": str(path), "bytes": size, "sha256": digest}
    if after_copy_hook is not None:
        after_copy_hook()
    changed = [str(files[name]) for name in files if _stat_key(files[name]) != before[name]]
    changed += [str(files[name]) for name, info in copied.items()
                if info is not None and before[name] is not None
                and info["bytes"] != before[name][2] and str(files[name]) not in changed]
    if changed:
        raise SourceChangedError(SOURCE_CHANGED, f"changed during the copy: {', '.join(changed)}")
    return copied


def source_unchanged(source: Path, copied: dict,
                      before: dict | None = None) -> tuple[bool, list[str]]:
    """Is the source still what was copied? Returns ``(same, changed)``.

    With ``before`` (``{name: stat key}`` and ``"_t_ns"``, the wall clock of the first ``stat``,
    filled by :func:`copy_source`): a file whose ``stat`` (device, inode, size, mtime, ctime)
    differs has changed; one whose ctime was already older than ``_t_ns`` by more than
    :data:`CTIME_SLACK_NS` and is the same now cannot have been written since (any write moves
    ctime to at least that moment), so it is not read again; only a file changed just before
    the copy is re-hashed and compared (issue 18: reading a 1 GB store a third time was a third
    of ``--inspect-only``). Without ``before`` every file is re-hashed. A file that must be
    re-hashed but whose copy was not hashed (``sha256`` None) counts as changed: nothing proves
    it is not.
    """
    changed = []
    t_ns = before.get("_t_ns") if before else None
    for name, path in source_files(source).items():
        info = copied.get(name)
        if before is not None and name in before and t_ns is not None:
            now_key = _stat_key(path)
            if now_key != before[name]:
                changed.append(str(path))
                continue
            if not needs_hash(now_key, t_ns):
                continue
        now = _hash_file(path)
        if (info is None) != (now is None) or (info is not None and info["sha256"] != now):
            changed.append(str(path))
    return not changed, changed
