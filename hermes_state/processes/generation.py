"""Generation identity of a store and the capture of a retired WAL (SPEC §10.1, §10.3).

A *generation* is the triple of files a writer opened: ``(st_dev, st_ino)`` of ``state.db``,
``state.db-wal`` and ``state.db-shm``, plus the per-file token ``state_meta['db_file_generation']``
mirrored in the header's ``application_id``. The write path compares the recorded triple with the
paths (three ``stat`` calls: no directory scan on the hot path).

The capture reads the retired files through THIS process's own descriptors (found in
``/proc/self/fd``) with ``os.pread``: it never opens and closes a store file, which would drop
every POSIX lock this process holds on that inode (SPEC §4).
"""

from __future__ import annotations

import hashlib
import os
import platform
import sqlite3
import sys
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from .. import failpoints
from ..files import atomic
from ..files.paths import retired_wal_dir, utc_stamp
from ..files.sqlite_format import DB_HEADER_SIZE, db_header, wal_frame_count, wal_header

Identity = tuple  # (st_dev, st_ino)

#: Main files above this size are captured as their 100-byte header only (SPEC §10.3).
CAPTURE_MAIN_LIMIT = 512 * 1024 * 1024


def identity(path: str | os.PathLike) -> Identity | None:
    """``(st_dev, st_ino)`` of ``path`` (not following a final symlink), or None if missing."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino)


def application_id_for(token: object) -> int:
    """The signed 32-bit ``PRAGMA application_id`` that mirrors a generation token (SPEC §10.1).

    A token that is not text (a damaged ``state_meta`` row: NULL, a number, a blob) is mirrored
    through its ``repr``: deterministic, so every opener agrees, never a crash (issue 11.10).
    """
    text = token if isinstance(token, str) else repr(token)
    value = zlib.crc32(text.encode("utf-8", "surrogatepass")) & 0xFFFFFFFF
    value = value or 1  # 0 means "unset"
    return value - (1 << 32) if value >= (1 << 31) else value


@dataclass
class Generation:
    """The identities a writer recorded at open (SPEC §10.1)."""

    db: Identity | None
    wal: Identity | None
    shm: Identity | None
    application_id: int
    token: str

    @classmethod
    def read(cls, db_path: str | os.PathLike, application_id: int, token: str) -> "Generation":
        base = os.fspath(db_path)
        return cls(identity(base), identity(base + "-wal"), identity(base + "-shm"),
                   application_id, token)

    def as_dict(self) -> dict:
        return {"db": list(self.db or ()), "wal": list(self.wal or ()), "shm": list(self.shm or ()),
                "application_id": self.application_id, "token": self.token}


def diff(recorded: Generation, db_path: str | os.PathLike,
         live_application_id: int | None = None) -> tuple[str, str] | None:
    """Compare ``recorded`` with the files at the path now.

    Args:
        recorded: identities taken at open.
        db_path: the store path.
        live_application_id: ``PRAGMA application_id`` read through the connection, or None to skip.
    Returns:
        None when unchanged; else ``(kind, detail)`` where kind is ``"replaced_db"`` (main file has
        another inode or application_id) or ``"retired_wal"`` (``-wal``/``-shm`` missing or another
        inode), detail a one-line operator description.
    """
    base = os.fspath(db_path)
    now_db = identity(base)
    if now_db != recorded.db:
        return "replaced_db", f"state.db identity {_fmt(recorded.db)} -> {_fmt(now_db)}"
    if live_application_id is not None and live_application_id != recorded.application_id:
        return ("replaced_db",
                f"state.db application_id {recorded.application_id} -> {live_application_id} "
                "(same inode, other content: copied over)")
    parts = []
    for name, rec in (("state.db-wal", recorded.wal), ("state.db-shm", recorded.shm)):
        now = identity(f"{base}{name[len('state.db'):]}")
        if rec is not None and now != rec:
            parts.append(f"{name} identity {_fmt(rec)} -> {_fmt(now)}")
    if parts:
        return "retired_wal", "; ".join(parts)
    return None


#: A directory stamp is trusted only when the directory last changed at least this long before
#: the full check that recorded it: an entry change after that check then gets a later stamp,
#: whatever the filesystem's timestamp granularity (coarse clock ticks, 1-2 s on some).
DIR_SETTLE_NS = 2_000_000_000


class DirStamp:
    """The store directory's ``(st_dev, st_ino, st_mtime_ns, st_ctime_ns)``: one ``stat`` that
    stands for the three ``lstat`` of :func:`diff` while it is unchanged (issue 24 item 4).

    Creating, unlinking, renaming or linking an entry updates the directory's mtime and ctime
    (POSIX), and a directory moved or replaced has another identity, so while the stamp equals
    the one taken before a clean full check, the three names still name the inodes that check
    saw. Only a stamp already :data:`DIR_SETTLE_NS` old at that check is kept (a change in the
    same clock tick as the last one could otherwise repeat the stamp).
    docs/decisions/0023-hot-path.md gives the argument and its limits.
    """

    __slots__ = ("dir", "kept")

    def __init__(self, db_path: str | os.PathLike) -> None:
        self.dir = os.path.dirname(os.fspath(db_path)) or "."
        self.kept: tuple | None = None

    def take(self) -> tuple[tuple | None, int]:
        """``(stamp or None, wall-clock ns just before it was taken)``."""
        now = time.time_ns()
        try:
            st = os.stat(self.dir)
        except OSError:
            return None, now
        return (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_ctime_ns), now

    def keep(self, stamp: tuple | None, taken_ns: int) -> None:
        """Keep ``stamp`` (taken before a full check that found no change) if it is settled."""
        self.kept = stamp if stamp is not None and \
            taken_ns - max(stamp[2], stamp[3]) >= DIR_SETTLE_NS else None


def _fmt(ident: Identity | None) -> str:
    return "missing" if ident is None else f"dev={ident[0]} ino={ident[1]}"


def own_descriptors(ident: Identity | None) -> list[int]:
    """File descriptors of THIS process whose inode is ``ident`` (Linux; else [])."""
    if ident is None or not os.path.isdir("/proc/self/fd"):
        return []
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            st = os.stat(f"/proc/self/fd/{name}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == tuple(ident):
            out.append(int(name))
    return out


def _read_fd(fd: int, chunk: int = 1 << 20):
    """Yield the bytes of an open descriptor from offset 0 with ``pread`` (no seek, no close)."""
    offset = 0
    while True:
        data = os.pread(fd, chunk, offset)
        if not data:
            return
        offset += len(data)
        yield data


def _copy_from_identity(ident: Identity | None, fallback_path: str, out,
                        limit: int | None = None) -> dict | None:
    """Copy the file of inode ``ident`` into the binary file object ``out`` (our own descriptor).

    Falls back to the path when no descriptor of ours has that inode and the path still has it
    (a regular file only, opened without following a link and without blocking).
    Returns ``{"identity", "bytes", "sha256", "mode"}`` or None when the file is unreachable.
    """
    fds = own_descriptors(ident)
    digest = hashlib.sha256()
    size = 0
    mode = "copied"
    if fds:
        st = os.fstat(fds[0])
        header_only = limit is not None and st.st_size > limit
        for data in _read_fd(fds[0]):
            if header_only:
                data = data[:100]
                mode = "header_only"
            out.write(data)
            digest.update(data)
            size += len(data)
            if header_only:
                break
    elif ident is not None and identity(fallback_path) == tuple(ident):
        # Non-Linux or no descriptor: the file is still at its path. Copying through a NEW
        # descriptor is only done when this process holds none of that inode (nothing to drop).
        with atomic.open_regular(fallback_path) as src:
            for data in iter(lambda: src.read(1 << 20), b""):
                out.write(data)
                digest.update(data)
                size += len(data)
    else:
        return None
    return {"identity": list(ident or ()), "bytes": size, "sha256": digest.hexdigest(),
            "mode": mode}


def parse_wal_header(path: Path) -> dict:
    """Frames, salts and page size of a WAL file copy (SQLite file format §4.1)."""
    data = path.read_bytes()
    head = wal_header(data)
    if head is None or head["page_size"] == 0:
        return {"frames": 0, "salt1": None, "salt2": None, "page_size": None}
    return {"frames": wal_frame_count(len(data), head["page_size"]), "salt1": head["salt1"],
            "salt2": head["salt2"], "page_size": head["page_size"]}


def _header_fields(path: Path) -> dict:
    head = db_header(path.read_bytes()[:DB_HEADER_SIZE])
    if head is None:
        return {"valid": False}
    keep = ("page_size", "write_version", "read_version", "change_counter", "page_count",
            "schema_cookie", "application_id")
    return {"valid": True, **{k: head[k] for k in keep}}


def capture_retired(db_path: str | os.PathLike, recorded: Generation, trigger: str) -> Path | None:
    """Write ``state.db.retired-wal-<UTCSTAMP>-<pid>/`` for the generation this process holds.

    Built in a ``.partial`` directory then renamed into place (SPEC §10.3). Contains the retired
    ``state.db-wal`` (exact bytes through our own descriptor), ``state.db-shm`` if still held,
    ``state.db`` (or its 100-byte header when over 512 MiB) and ``manifest.json``.

    Args:
        db_path: the store path.
        recorded: the generation recorded at open.
        trigger: ``"halt"`` (a write was refused) or ``"close"``.
    Returns:
        The capture directory, or None if this process holds no WAL of that generation.
    Raises:
        OSError: the directory cannot be written (the caller reports it; the refusal stands).
    """
    base = Path(db_path)
    stamp = utc_stamp()
    final = retired_wal_dir(base, os.getpid(), stamp)
    # A failure part-way keeps the .partial directory: it may hold the only copy of the WAL
    # (doctor reports it). A name already taken gets the next free one: never given up.
    with atomic.PartialDir(base.parent, final.name, keep_on_error=True) as part:
        with part.create("state.db-wal") as out:
            wal = _copy_from_identity(recorded.wal, f"{base}-wal", out)
        if wal is None:
            return None  # nothing of that generation is held: the partial is removed
        failpoints.hit("capture.mid_copy")
        with part.create("state.db-shm") as out:
            shm = _copy_from_identity(recorded.shm, f"{base}-shm", out)
        if shm is None:
            os.unlink(part.path / "state.db-shm")
        with part.create("state.db") as out:
            main = _copy_from_identity(recorded.db, str(base), out, CAPTURE_MAIN_LIMIT)
        if main is None:
            os.unlink(part.path / "state.db")
        wal.update(parse_wal_header(part.path / "state.db-wal"))
        if main is not None:
            main["header"] = _header_fields(part.path / "state.db")
        manifest = {
            "version": 1,
            "database": str(base),
            "trigger": trigger,
            "pid": os.getpid(),
            "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "python": platform.python_version(),
            "python_executable": sys.executable,
            "sqlite": sqlite3.sqlite_version,
            "generation": recorded.as_dict(),
            "wal": wal,
            "shm": shm,
            "path_generation_at_capture": {
                "db": list(identity(base) or ()), "wal": list(identity(f"{base}-wal") or ()),
                "shm": list(identity(f"{base}-shm") or ())},
            "main": main,
            "note": ("This is the write-ahead log a process still held after its state.db-wal "
                     "was deleted or replaced. Copy state.db and state.db-wal from this directory "
                     "to an empty directory and open them to read that generation. Merging its "
                     "frames into the live store is an operator decision; the product never "
                     "does it on its own: `hermes-state sessions salvage DIR` lists the messages "
                     "it holds that the store lacks, and `--apply` appends them."),
        }
        part.write_json("manifest.json", manifest)
        return part.publish(atomic.numbered(final))
