"""The capture of a retired WAL generation, verified, from whichever process holds it
(SPEC §10.3; issue 22 item 1).

``state.db.retired-wal-<UTCSTAMP>-<pid>/`` is built in a ``.partial`` directory: the retired
``state.db-wal`` (exact bytes), ``state.db-shm`` if still held, ``state.db`` (or its header over
512 MiB) and ``manifest.json``. The WAL copy is **verified** before the directory is published:
the copy is read back and its sha256 compared with the held descriptor read again; only then
does the manifest say ``"verified": true``. A capture that is not verified is no capture.

Who reads the retired files:

* the holder itself, through its OWN descriptors (``/proc/self/fd``, ``os.pread``): it never opens
  and closes a store file, which would drop its POSIX locks on that inode (SPEC §4);
* ``doctor`` in another process, through ``/proc/<pid>/fd/<n>`` of the holder (the same user, or
  root): opening that link gives a new description of the deleted inode. Doctor has no
  connection to the store, so closing its descriptor drops nothing.

The obligation marker ``state.db.capture-pending-<pid>.json`` says that a process holds a retired
WAL it could not capture yet (written when a capture fails, removed when one succeeds): ``doctor``
reads it, also after that process is gone (then those writes are lost, and doctor says so).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import platform
import re
import sqlite3
import sys
import time
from pathlib import Path

from .. import failpoints
from ..errors import EvidenceWriteError
from ..files import atomic
from ..files.paths import retired_wal_dir, utc_stamp
from ..files.sqlite_format import DB_HEADER_SIZE, db_header, wal_frame_count, wal_header
from .generation import Generation, Identity, identity, own_descriptors

#: Main files above this size are captured as their 100-byte header only (SPEC §10.3).
CAPTURE_MAIN_LIMIT = 512 * 1024 * 1024
MANIFEST_LIMIT = 1 << 20
_CHUNK = 1 << 20
_DELETED = " (deleted)"


# --------------------------------------------------------------------------- reading the source
def _open_source(ident: Identity | None, fallback_path: str, proc_fd: str | None
                 ) -> tuple[int | None, bool]:
    """A descriptor to read the file of inode ``ident`` from: ``(fd, close_it)``.

    ``proc_fd`` (``/proc/PID/fd/N`` of another process) is opened and checked to be that inode;
    else one of THIS process's descriptors (never closed here); else the path, when it still
    names that inode and this process holds none (non-Linux). ``(None, False)`` when unreachable.
    """
    if proc_fd is not None:
        try:
            fd = os.open(proc_fd, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        except OSError:
            return None, False
        st = os.fstat(fd)
        if ident is not None and (st.st_dev, st.st_ino) != tuple(ident):
            os.close(fd)
            return None, False
        return fd, True
    fds = own_descriptors(ident, fallback_path or None)
    if fds:
        return fds[0], False
    if ident is not None and identity(fallback_path) == tuple(ident):
        with atomic.open_regular(fallback_path) as src:
            return os.dup(src.fileno()), True
    return None, False


def _size(fd: int) -> int:
    try:
        return os.fstat(fd).st_size
    except OSError:
        return hash_fd(fd)[0]


def _read_fd(fd: int):
    """Yield the bytes of an open descriptor from offset 0 with ``pread`` (no seek, no close)."""
    offset = 0
    while True:
        data = os.pread(fd, _CHUNK, offset)
        if not data:
            return
        offset += len(data)
        yield data


def hash_fd(fd: int) -> tuple[int, str]:
    """``(bytes, sha256 hex)`` of everything readable on ``fd`` from offset 0."""
    digest, size = hashlib.sha256(), 0
    for data in _read_fd(fd):
        digest.update(data)
        size += len(data)
    return size, digest.hexdigest()


def hash_file(path: str | os.PathLike) -> tuple[int, str]:
    """``(bytes, sha256 hex)`` of a regular file (never through a link or a FIFO)."""
    with atomic.open_regular(path) as fh:
        return hash_fd(fh.fileno())


def _copy(ident: Identity | None, fallback_path: str, out, *, proc_fd: str | None = None,
          limit: int | None = None) -> dict | None:
    """Copy the file of inode ``ident`` into ``out``; ``{"identity", "bytes", "sha256",
    "mode"}`` or None when the file is unreachable."""
    fd, close = _open_source(ident, fallback_path, proc_fd)
    if fd is None:
        return None
    try:
        digest, size, mode = hashlib.sha256(), 0, "copied"
        header_only = limit is not None and _size(fd) > limit
        for data in _read_fd(fd):
            if header_only:
                data, mode = data[:DB_HEADER_SIZE], "header_only"
            out.write(data)
            digest.update(data)
            size += len(data)
            if header_only:
                break
    finally:
        if close:
            os.close(fd)
    return {"identity": list(ident or ()), "bytes": size, "sha256": digest.hexdigest(),
            "mode": mode}


def source_digest(ident: Identity | None, fallback_path: str, *,
                  proc_fd: str | None = None) -> tuple[int, str] | None:
    """``(bytes, sha256)`` of the held file of inode ``ident`` read again now, or None."""
    fd, close = _open_source(ident, fallback_path, proc_fd)
    if fd is None:
        return None
    try:
        return hash_fd(fd)
    finally:
        if close:
            os.close(fd)


def wal_summary(ident: Identity | None, fallback_path: str, *, proc_fd: str | None = None
                ) -> dict | None:
    """``{"bytes", "frames"}`` of a held WAL (its size and the frame count its header implies),
    read without copying; None when it is not reachable."""
    fd, close = _open_source(ident, fallback_path, proc_fd)
    if fd is None:
        return None
    try:
        try:
            size = os.fstat(fd).st_size
        except OSError:  # ESTALE on a FUSE/network filesystem: count the bytes instead
            size = hash_fd(fd)[0]
        head = wal_header(os.pread(fd, 32, 0))
    finally:
        if close:
            os.close(fd)
    frames = wal_frame_count(size, head["page_size"]) if head and head["page_size"] else 0
    return {"bytes": size, "frames": frames}


def parse_wal_header(path: Path) -> dict:
    """Frames, salts and page size of a WAL file copy (SQLite file format §4.1)."""
    with atomic.open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        head = wal_header(fh.read(32))
    if head is None or head["page_size"] == 0:
        return {"frames": 0, "salt1": None, "salt2": None, "page_size": None}
    return {"frames": wal_frame_count(size, head["page_size"]), "salt1": head["salt1"],
            "salt2": head["salt2"], "page_size": head["page_size"]}


def _header_fields(path: Path) -> dict:
    with atomic.open_regular(path) as fh:
        head = db_header(fh.read(DB_HEADER_SIZE))
    if head is None:
        return {"valid": False}
    keep = ("page_size", "write_version", "read_version", "change_counter", "page_count",
            "schema_cookie", "application_id")
    return {"valid": True, **{k: head[k] for k in keep}}


# --------------------------------------------------------------------------- the capture
def capture_retired(db_path: str | os.PathLike, recorded: Generation, trigger: str, *,
                    pid: int | None = None, proc_fds: dict[str, str] | None = None,
                    keep_partial: bool = False) -> Path | None:
    """Write and verify ``state.db.retired-wal-<UTCSTAMP>-<pid>/`` (SPEC §10.3).

    Args:
        db_path: the store path.
        recorded: the identities of the retired generation (the WAL's decides what is copied).
        trigger: ``"halt"`` (a write was refused), ``"close"``, ``"retry"``, ``"exit"`` or
            ``"doctor"``.
        pid: the process holding the generation (default: this one); names the directory.
        proc_fds: ``{"wal": "/proc/PID/fd/N", "shm": ...}`` to read another process's
            descriptors (doctor); default: this process's own.
        keep_partial: keep the ``.partial`` directory when the capture fails (the last attempt
            before this process exits: it may be the only copy left). Otherwise it is removed,
            because the held descriptor still has every byte and the next attempt starts over.
    Returns:
        The published, verified capture directory, or None when no WAL of that generation is
        held (nothing to capture).
    Raises:
        EvidenceWriteError: it could not be written or verified: names the path and the cause.
    """
    base = Path(db_path)
    holder = os.getpid() if pid is None else pid
    proc_fds = proc_fds or {}
    final = retired_wal_dir(base, holder, utc_stamp())
    where = base.parent
    try:
        with atomic.PartialDir(base.parent, final.name, keep_on_error=keep_partial) as part:
            where = part.path
            with part.create("state.db-wal") as out:
                wal = _copy(recorded.wal, f"{base}-wal", out, proc_fd=proc_fds.get("wal"))
            if wal is None:
                if recorded.wal is None:
                    return None  # no WAL in that generation: nothing to capture
                raise OSError(errno.ENOENT, "no readable descriptor of the retired WAL "
                              f"(inode {recorded.wal[1]}) in PID {holder}",
                              proc_fds.get("wal") or f"{base}-wal")
            failpoints.hit("capture.mid_copy")
            with part.create("state.db-shm") as out:
                shm = _copy(recorded.shm, f"{base}-shm", out, proc_fd=proc_fds.get("shm"))
            if shm is None:
                os.unlink(part.path / "state.db-shm")
            with part.create("state.db") as out:
                main = _copy(recorded.db, str(base), out, limit=CAPTURE_MAIN_LIMIT)
            if main is None:
                os.unlink(part.path / "state.db")
            _verify(part.path / "state.db-wal", wal, recorded.wal, f"{base}-wal",
                    proc_fds.get("wal"))
            wal.update(parse_wal_header(part.path / "state.db-wal"))
            if main is not None:
                main["header"] = _header_fields(part.path / "state.db")
            part.write_json("manifest.json", _manifest(base, recorded, trigger, holder, wal,
                                                       shm, main))
            failpoints.hit("capture.before_publish")
            return part.publish(atomic.numbered(final))
    except EvidenceWriteError:
        raise
    except (OSError, sqlite3.Error) as exc:
        errno_name = getattr(exc, "strerror", None) or str(exc)
        raise EvidenceWriteError(
            f"the capture of the retired WAL could not be written in {base.parent} "
            f"({errno_name}: {getattr(exc, 'filename', None) or where})",
            f"capture {final.name} ({trigger})",
            path=str(getattr(exc, "filename", None) or where)) from exc


def _verify(copy: Path, wal: dict, ident: Identity | None, fallback: str,
            proc_fd: str | None) -> None:
    """The copy read back equals the held WAL read again (bytes and sha256)."""
    back = hash_file(copy)
    again = source_digest(ident, fallback, proc_fd=proc_fd)
    if back != (wal["bytes"], wal["sha256"]) or again != back:
        raise EvidenceWriteError(
            f"the capture of the retired WAL did not verify: the copy {copy} has "
            f"{back[0]} bytes (sha256 {back[1][:12]}) but the held log has "
            f"{again[0] if again else '?'} bytes (sha256 {again[1][:12] if again else '?'})",
            "the copy is discarded; the next attempt starts over", path=str(copy))
    wal["verified"] = True


def _manifest(base: Path, recorded: Generation, trigger: str, holder: int, wal: dict,
              shm: dict | None, main: dict | None) -> dict:
    out = {
        "version": 1,
        "database": str(base),
        "trigger": trigger,
        "pid": holder,
        "captured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "sqlite": sqlite3.sqlite_version,
        "generation": recorded.as_dict(),
        "wal": wal,
        "shm": shm,
        "verified": True,
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
    if holder != os.getpid():
        out["captured_by"] = {"pid": os.getpid(), "argv": sys.argv[:4]}
    return out


def find_verified_capture(db_path: str | os.PathLike, wal_ident: Identity | None, *,
                          pid: int | None = None, wal_bytes: int | None = None,
                          wal_sha256: str | None = None, check_copy: bool = False
                          ) -> Path | None:
    """A published, verified capture beside the store of the WAL ``wal_ident``, or None.

    Matched on the manifest (``verified``, the WAL's identity, and when given the holder's pid,
    the WAL's size and sha256); ``check_copy`` also re-hashes the capture's ``state.db-wal``.
    """
    base = Path(db_path)
    if wal_ident is None:
        return None
    rx = re.compile(rf"{re.escape(base.name)}\.retired-wal-.*")
    try:
        entries = sorted(os.scandir(base.parent), key=lambda e: e.name, reverse=True)
    except OSError:
        return None
    for entry in entries:
        if not rx.fullmatch(entry.name) or entry.name.endswith(atomic.PARTIAL_SUFFIX):
            continue
        try:
            manifest = atomic.read_json(Path(entry.path) / "manifest.json", limit=MANIFEST_LIMIT)
        except (OSError, ValueError):
            continue
        wal = manifest.get("wal") if isinstance(manifest, dict) else None
        if not isinstance(wal, dict) or not (manifest.get("verified") or wal.get("verified")):
            continue
        if list(wal.get("identity") or ()) != list(wal_ident):
            continue
        if pid is not None and manifest.get("pid") != pid:
            continue
        if wal_bytes is not None and wal.get("bytes") != wal_bytes:
            continue
        if wal_sha256 is not None and wal.get("sha256") != wal_sha256:
            continue
        if check_copy:
            try:
                if hash_file(Path(entry.path) / "state.db-wal") != (wal.get("bytes"),
                                                                    wal.get("sha256")):
                    continue
            except OSError:
                continue
        return Path(entry.path)
    return None


# --------------------------------------------------------------------------- other holders
def retired_log_at_path(db_path: str | os.PathLike) -> tuple[Path, list[Path]] | None:
    """The sidecars of a REPLACED ``state.db``'s generation still at the path, when the
    holder could not move them aside (a full disk): ``(capture, [sidecar paths])``, else None.

    Matched on a verified capture beside the store: its WAL is the very file at
    ``state.db-wal`` (same ``(st_dev, st_ino)`` when captured and now, the same salts in its
    header) while ``state.db`` is another file than the captured generation's. SQLite would
    replay those frames onto the new file (issue 22 item 1).
    """
    base = Path(db_path)
    wal_path = Path(f"{base}-wal")
    ident = identity(wal_path)
    capture = find_verified_capture(base, ident) if ident is not None else None
    if capture is None:
        return None
    try:
        manifest = atomic.read_json(capture / "manifest.json", limit=MANIFEST_LIMIT)
        now = parse_wal_header(wal_path)
    except (OSError, ValueError):
        return None
    gen = manifest.get("generation") or {}
    at = manifest.get("path_generation_at_capture") or {}
    wal = manifest.get("wal") or {}
    if list(at.get("wal") or ()) != list(ident) or list(gen.get("wal") or ()) != list(ident):
        return None  # the WAL was deleted, not left at the path: an inode number reused
    if (now.get("salt1"), now.get("salt2")) != (wal.get("salt1"), wal.get("salt2")):
        return None
    if list(identity(base) or ()) == list(gen.get("db") or ()):
        return None  # state.db is still that generation's own file
    shm = Path(f"{base}-shm")
    side = [wal_path] + ([shm] if list(identity(shm) or ()) == list(gen.get("shm") or ())
                         and gen.get("shm") else [])
    return capture, side


def held_retired_files(pid: int, db_path: str | os.PathLike) -> dict[str, tuple[str, Identity]]:
    """The retired ``-wal``/``-shm`` process ``pid`` holds: ``{"wal": ("/proc/PID/fd/N",
    identity), "shm": ...}`` (Linux). Identity decides: a descriptor of a file that is not the
    one at the path now (deleted, replaced or renamed aside)."""
    real = os.path.realpath(os.fspath(db_path))
    out: dict[str, tuple[str, Identity]] = {}
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return out
    for name in fds:
        link = f"/proc/{pid}/fd/{name}"
        try:
            target = os.readlink(link)
            st = os.stat(link)
        except OSError:
            continue
        target = target[: -len(_DELETED)] if target.endswith(_DELETED) else target
        for kind in ("wal", "shm"):
            side = f"{real}-{kind}"
            if kind in out or not target.startswith(side):
                continue
            if os.path.dirname(target) != os.path.dirname(real):
                continue
            ident = (st.st_dev, st.st_ino)
            if ident != identity(side):
                out[kind] = (link, ident)
    return out


def capture_for_holder(db_path: str | os.PathLike, pid: int) -> tuple[Path | None, bool]:
    """Make sure a verified capture exists of the retired WAL process ``pid`` holds (doctor).

    Returns:
        ``(capture directory or None when pid holds no retired WAL, made_now)``.
    Raises:
        EvidenceWriteError: it could not be written or verified (named).
    """
    held = held_retired_files(pid, db_path)
    if "wal" not in held:
        return None, False
    # A file this process has open itself is read through its own descriptor, never a new
    # one: closing that would drop this process's POSIX locks on the inode (SPEC §4).
    held = {k: (None if own_descriptors(ident) else link, ident)  # type: ignore[misc]
            for k, (link, ident) in held.items()}
    wal_link, wal_ident = held["wal"]
    digest = source_digest(wal_ident, f"{db_path}-wal", proc_fd=wal_link)
    if digest is not None:
        found = find_verified_capture(db_path, wal_ident, wal_bytes=digest[0],
                                      wal_sha256=digest[1], check_copy=True)
        if found is not None:
            return found, False
    shm = held.get("shm")
    recorded = Generation(identity(db_path), wal_ident, shm[1] if shm else None, 0, "?")
    proc_fds = {k: v for k, v in (("wal", wal_link), ("shm", shm[0] if shm else None)) if v}
    return capture_retired(db_path, recorded, "doctor", pid=pid, proc_fds=proc_fds), True


# --------------------------------------------------------------------------- obligation markers
def marker_path(db_path: str | os.PathLike, pid: int) -> Path:
    """``state.db.capture-pending-<pid>.json`` beside the store (SPEC §1 table)."""
    db = Path(db_path)
    return db.with_name(f"{db.name}.capture-pending-{pid}.json")


def process_start(pid: int) -> int | None:
    """The start time of ``pid`` in clock ticks since boot (``/proc/PID/stat`` field 22): with
    the pid it names one process, whatever pid reuse happens later. None when unknown."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            data = fh.read()
        return int(data[data.rfind(b")") + 2:].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def write_marker(db_path: str | os.PathLike, record: dict) -> Path | None:
    """Write (replace) this process's obligation marker atomically; None when it cannot be
    written (a full disk: the obligation is then only in this process and its logs)."""
    path = marker_path(db_path, os.getpid())
    try:
        return atomic.write_json(path, {"version": 1, "pid": os.getpid(),
                                        "start": process_start(os.getpid()),
                                        "argv": sys.argv[:4], **record}, replace=True)
    except OSError:
        return None


def remove_marker(db_path: str | os.PathLike) -> None:
    """Remove this process's obligation marker (its capture exists now); best effort."""
    try:
        os.unlink(marker_path(db_path, os.getpid()))
    except OSError:
        pass


def read_markers(db_path: str | os.PathLike) -> list[tuple[Path, dict | None]]:
    """Every obligation marker beside the store: ``(path, record or None when unreadable)``."""
    db = Path(db_path)
    rx = re.compile(rf"{re.escape(db.name)}\.capture-pending-\d+\.json")
    out: list[tuple[Path, dict | None]] = []
    try:
        names = sorted(os.listdir(db.parent))
    except OSError:
        return out
    for name in names:
        if not rx.fullmatch(name):
            continue
        try:
            rec = json.loads(atomic.read_regular(db.parent / name, limit=MANIFEST_LIMIT))
        except (OSError, ValueError):
            rec = None
        out.append((db.parent / name, rec if isinstance(rec, dict) else None))
    return out


def marker_alive(rec: dict) -> bool:
    """True when the process a marker names still runs (same pid AND start time)."""
    pid = rec.get("pid")
    if not isinstance(pid, int) or isinstance(pid, bool):
        return False
    start = process_start(pid)
    return start is not None and (rec.get("start") is None or rec.get("start") == start)


def uncaptured(db_path: str | os.PathLike, pid: int) -> dict | None:
    """What process ``pid`` holds of a retired WAL that no verified capture beside the store
    holds (cheap: the manifests' identity, holder pid and size; doctor re-hashes):
    ``{"bytes", "frames"}`` or None (nothing held, or captured)."""
    held = held_retired_files(pid, db_path)
    if "wal" not in held:
        return None
    link, ident = held["wal"]
    summary = wal_summary(ident, f"{db_path}-wal",
                          proc_fd=None if pid == os.getpid() else link)
    if summary is None:
        return None
    if find_verified_capture(db_path, ident, wal_bytes=summary["bytes"]) is not None:
        return None
    return summary


def others_at_risk(db_path: str | os.PathLike, found: list) -> str | None:
    """The "what is at risk" sentence for a refusal naming OTHER holders of a retired WAL
    (issue 22 item 1), or None when each one's log has a verified capture."""
    parts = []
    for h in found:
        if h.pid == os.getpid():
            continue
        held = uncaptured(db_path, h.pid)
        if held is not None:
            parts.append(f"PID {h.pid} ({h.command}): {held['frames']} WAL frames, "
                         f"{held['bytes']} bytes")
    if not parts:
        return None
    return ("No verified capture of that log exists yet, so the writes acknowledged since the "
            "last checkpoint exist only in the deleted log that process holds open ("
            + "; ".join(parts) + "): keep it running until `doctor` has saved the log; if it "
            "exits first, those writes are lost.")
