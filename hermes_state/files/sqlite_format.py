"""SQLite's on-disk format, read from bytes: the one reader in the project (issue 26).

What it reads (https://www.sqlite.org/fileformat2.html, SQLite's ``wal.c`` and ``os_unix.c``):

- the 100-byte database header (§1.3): magic, page size, versions, counters, application id;
- the 32-byte WAL header (§4.1) and the 24-byte frame headers after it;
- the wal-index header at the start of ``-shm`` (``wal.c``: two copies of ``WalIndexHdr``, then
  ``WalCkptInfo``), in native byte order as SQLite writes it;
- the lock bytes SQLite takes with POSIX locks: on ``-shm`` (the WAL write lock, the checkpointer,
  recovery, the read marks, the dead-man switch) and on the main file (PENDING, RESERVED, SHARED).

What it does not do: open files. Callers pass bytes they read through a descriptor they are allowed
to use (SPEC §4: a process with a connection never opens a new descriptor on the store's files).
Every parser returns None for bytes that are too short or not of that format, never raises.
"""

from __future__ import annotations

import struct
from typing import Iterator

# -- the database header -------------------------------------------------------------------------
SQLITE_HEADER = b"SQLite format 3\x00"
DB_HEADER_SIZE = 100
#: Journal mode as the header's write/read version bytes say it (1 legacy/rollback, 2 WAL).
HEADER_JOURNAL_MODES = {1: "delete", 2: "wal"}


def is_sqlite(data: bytes) -> bool:
    """Whether ``data`` starts with SQLite's 16-byte magic."""
    return data[:16] == SQLITE_HEADER


def db_header(data: bytes) -> dict | None:
    """The fields of the 100-byte database header (big-endian), or None.

    Returns:
        ``{"page_size", "write_version", "read_version", "journal_mode", "change_counter",
        "page_count", "freelist_pages", "schema_cookie", "schema_format", "text_encoding",
        "user_version", "application_id", "version_valid_for", "sqlite_version"}``; ``page_size``
        65536 where the header stores 1; ``journal_mode`` ``"wal"``/``"delete"`` or None.
    """
    if len(data) < DB_HEADER_SIZE or not is_sqlite(data):
        return None
    (page_size,) = struct.unpack_from(">H", data, 16)
    change_counter, page_count, _trunk, freelist = struct.unpack_from(">4I", data, 24)
    schema_cookie, schema_format = struct.unpack_from(">2I", data, 40)
    (text_encoding, user_version) = struct.unpack_from(">2I", data, 56)
    (application_id,) = struct.unpack_from(">i", data, 68)
    version_valid_for, sqlite_version = struct.unpack_from(">2I", data, 92)
    return {"page_size": 65536 if page_size == 1 else page_size,
            "write_version": data[18], "read_version": data[19],
            "journal_mode": HEADER_JOURNAL_MODES.get(data[18]),
            "change_counter": change_counter, "page_count": page_count,
            "freelist_pages": freelist, "schema_cookie": schema_cookie,
            "schema_format": schema_format, "text_encoding": text_encoding,
            "user_version": user_version, "application_id": application_id,
            "version_valid_for": version_valid_for, "sqlite_version": sqlite_version}


def application_id(data: bytes) -> int | None:
    """The header's ``application_id`` (offset 68, signed), None for a short or foreign header."""
    if len(data) < 72 or not is_sqlite(data):
        return None
    return struct.unpack_from(">i", data, 68)[0]


# -- the WAL file --------------------------------------------------------------------------------
WAL_MAGIC = (0x377F0682, 0x377F0683)
WAL_MAGIC_BYTES = tuple(m.to_bytes(4, "big") for m in WAL_MAGIC)
WAL_HEADER_SIZE = 32
WAL_FRAME_HEADER_SIZE = 24


def wal_header(data: bytes) -> dict | None:
    """The fields of a WAL file's 32-byte header (file format §4.1), read big-endian.

    Returns:
        ``{"magic", "format", "page_size", "checkpoint_seq", "salt1", "salt2"}``, or None when
        ``data`` is shorter than the header or is not a WAL.
    """
    if len(data) < WAL_HEADER_SIZE:
        return None
    magic, fmt, page_size, seq, salt1, salt2 = struct.unpack_from(">6I", data, 0)
    if magic not in WAL_MAGIC:
        return None
    return {"magic": magic, "format": fmt, "page_size": page_size, "checkpoint_seq": seq,
            "salt1": salt1, "salt2": salt2}


def wal_frame_count(size: int, page_size: int) -> int:
    """Whole frames in a WAL of ``size`` bytes with pages of ``page_size`` (0 when empty)."""
    if page_size <= 0 or size <= WAL_HEADER_SIZE:
        return 0
    return (size - WAL_HEADER_SIZE) // (page_size + WAL_FRAME_HEADER_SIZE)


def wal_frames(data: bytes) -> Iterator[dict]:
    """The frame headers of a WAL image, in order: ``{"index", "offset", "page", "commit_size",
    "salt1", "salt2", "salt_ok"}`` (``commit_size`` > 0 on a commit frame; ``salt_ok`` False for
    a frame left over from an earlier generation of the WAL)."""
    head = wal_header(data)
    if head is None or head["page_size"] <= 0:
        return
    step = head["page_size"] + WAL_FRAME_HEADER_SIZE
    for i in range(wal_frame_count(len(data), head["page_size"])):
        off = WAL_HEADER_SIZE + i * step
        page, commit, s1, s2 = struct.unpack_from(">4I", data, off)
        yield {"index": i, "offset": off, "page": page, "commit_size": commit, "salt1": s1,
               "salt2": s2, "salt_ok": (s1, s2) == (head["salt1"], head["salt2"])}


# -- the wal-index (-shm) ------------------------------------------------------------------------
#: ``WalIndexHdr`` (48 bytes, twice) + ``WalCkptInfo`` (40 bytes) = the first 136 bytes of -shm.
WAL_INDEX_HEADER_SIZE = 136
READ_MARKS = 5  # SQLITE_SHM_NLOCK - 3


def wal_index_header(raw: bytes) -> dict | None:
    """The wal-index header at the start of ``-shm`` (``wal.c``), native byte order except the
    salts, which SQLite copies byte for byte from the WAL header (so they read as
    :func:`wal_header`'s).

    Returns:
        ``{"version", "change", "is_init", "big_end_cksum", "page_size", "mx_frame", "n_page",
        "salt1", "salt2", "copies_agree", "n_backfill", "read_marks", "n_backfill_attempted"}``
        or None when ``raw`` is short. ``mx_frame`` = frames readers may use; ``n_backfill`` =
        frames a checkpoint copied back into the database; ``copies_agree`` = the two header
        copies are equal (a writer was not caught mid-update).
    """
    if len(raw) < WAL_INDEX_HEADER_SIZE:
        return None
    version, _unused, change = struct.unpack_from("=3I", raw, 0)
    is_init, big_end, page_size = struct.unpack_from("=BBH", raw, 12)
    mx_frame, n_page = struct.unpack_from("=2I", raw, 16)
    salt1, salt2 = struct.unpack_from(">2I", raw, 32)  # copied raw from the WAL header
    (n_backfill,) = struct.unpack_from("=I", raw, 96)
    marks = list(struct.unpack_from(f"={READ_MARKS}I", raw, 100))
    (attempted,) = struct.unpack_from("=I", raw, 128)
    return {"version": version, "change": change, "is_init": bool(is_init),
            "big_end_cksum": bool(big_end),
            "page_size": 65536 if page_size == 1 else page_size,
            "mx_frame": mx_frame, "n_page": n_page, "salt1": salt1, "salt2": salt2,
            "copies_agree": raw[0:48] == raw[48:96], "n_backfill": n_backfill,
            "read_marks": marks, "n_backfill_attempted": attempted}


_FRAMES = struct.Struct("=3IBBH2I")  # iVersion, unused, iChange, isInit, ..., mxFrame, nPage
_NBACKFILL = struct.Struct("=I")
WALINDEX_VERSION = 3007000


def wal_index_frames(raw: bytes) -> tuple[int, int, int] | None:
    """``(mx_frame, n_backfill, change)`` of a settled wal-index header (the write path's
    per-transaction read, issue 24: :func:`wal_index_header` without building the dict), or
    None when ``raw`` is short, the two header copies differ, it is not initialised or of
    another version."""
    if len(raw) < WAL_INDEX_HEADER_SIZE or raw[0:48] != raw[48:96]:
        return None
    version, _unused, change, is_init, _big, _psz, mx_frame, _n_page = _FRAMES.unpack_from(raw)
    if not is_init or version != WALINDEX_VERSION:
        return None
    return mx_frame, _NBACKFILL.unpack_from(raw, 96)[0], change


# -- lock bytes ----------------------------------------------------------------------------------
#: POSIX lock bytes on -shm (wal.c WALINDEX_LOCK_OFFSET = 120; os_unix.c UNIX_SHM_DMS = 128).
SHM_WRITE_LOCK = 120
SHM_CHECKPOINTER_LOCK = 121
SHM_RECOVER_LOCK = 122
SHM_READ_MARK_FIRST = 123
SHM_DMS_LOCK = 128
SHM_LOCK_NAMES = {SHM_WRITE_LOCK: "WAL write lock", SHM_CHECKPOINTER_LOCK: "checkpoint lock",
                  SHM_RECOVER_LOCK: "recover lock", SHM_DMS_LOCK: "dead-man switch"}
SHM_LOCK_NAMES.update({b: f"read mark {b - SHM_READ_MARK_FIRST}"
                       for b in range(SHM_READ_MARK_FIRST, SHM_READ_MARK_FIRST + READ_MARKS)})
#: Main-file locks of the rollback journal (os.h): PENDING, RESERVED, then 510 SHARED bytes.
PENDING_BYTE = 0x40000000
RESERVED_BYTE = PENDING_BYTE + 1
SHARED_FIRST = PENDING_BYTE + 2
SHARED_SIZE = 510
#: A lock byte range read from ``/proc/locks`` ends at end-of-file when its end is None.
_LOCK_BYTES_SHM = range(SHM_WRITE_LOCK, SHM_DMS_LOCK + 1)


def _covers(start: int, end: int | None, byte: int) -> bool:
    return start <= byte and (end is None or byte <= end)


def shm_lock_names(start: int, end: int | None) -> list[str]:
    """SQLite's names of the ``-shm`` lock bytes a POSIX lock on ``[start, end]`` covers.

    Args:
        start: first byte (``/proc/locks`` column 7); ``end``: last byte, None for EOF.
    Returns:
        e.g. ``["WAL write lock"]``, ``["read mark 1", "read mark 2", ...]``; ``[]`` when the
        range covers none of bytes 120..128 (not a lock SQLite takes).
    """
    return [SHM_LOCK_NAMES[b] for b in _LOCK_BYTES_SHM if _covers(start, end, b)]


def db_lock_names(start: int, end: int | None, write: bool) -> list[str]:
    """SQLite's names of the main-file locks a POSIX lock on ``[start, end]`` stands for
    (``os_unix.c``): ``PENDING``, ``RESERVED``, and over the shared range ``SHARED`` (a read
    lock) or ``EXCLUSIVE`` (a write lock: the last connection closing a WAL store, or
    ``locking_mode=EXCLUSIVE``). ``[]`` for a range SQLite does not use."""
    names = []
    if _covers(start, end, PENDING_BYTE):
        names.append("PENDING")
    if _covers(start, end, RESERVED_BYTE):
        names.append("RESERVED")
    last = SHARED_FIRST + SHARED_SIZE - 1
    if start <= last and (end is None or end >= SHARED_FIRST):
        names.append("EXCLUSIVE" if write else "SHARED")
    return names


def read_mark_index(name: str) -> int | None:
    """``3`` for ``"read mark 3"`` (:data:`SHM_LOCK_NAMES`), None for any other lock name."""
    prefix = "read mark "
    if name.startswith(prefix) and name[len(prefix):].isdigit():
        return int(name[len(prefix):])
    return None


# -- WAL checksums and the committed image -------------------------------------------------------
def wal_checksum(data: bytes, big_endian: bool, s1: int = 0, s2: int = 0) -> tuple[int, int]:
    """SQLite's WAL checksum (``walChecksumBytes``) of ``data`` (a multiple of 8 bytes), going
    on from ``(s1, s2)``; 32-bit words read big-endian when the WAL magic's low bit is set."""
    n = len(data) // 4
    words = struct.unpack_from(f"{'>' if big_endian else '<'}{n}I", data)
    mask = 0xFFFFFFFF
    for a, b in zip(words[0::2], words[1::2]):
        s1 = (s1 + a + s2) & mask
        s2 = (s2 + b + s1) & mask
    return s1, s2


def wal_committed_frames(data: bytes, *, verify_checksums: bool = True) -> dict | None:
    """How many frames of a WAL image a new reader would use, as SQLite's WAL recovery decides
    (``walIndexRecover``): frames in order while their salts match the header (and, with
    ``verify_checksums``, while the header's and each frame's cumulative checksum are right);
    the last commit frame among them ends the usable part.

    Returns:
        ``{"frames" (whole frames in the file), "valid" (frames passing the checks before the
        first that fails), "committed" (1-based index of the last commit frame, 0 = none),
        "db_pages" (database size in pages after that commit), "checksums_verified",
        "header_checksum_ok"}``, or None when ``data`` is not a WAL.
    """
    head = wal_header(data)
    if head is None or head["page_size"] <= 0:
        return None
    big = bool(head["magic"] & 1)
    total = wal_frame_count(len(data), head["page_size"])
    header_ok = None
    s1 = s2 = 0
    if verify_checksums:
        s1, s2 = wal_checksum(data[:24], big)
        header_ok = (s1, s2) == struct.unpack_from(">2I", data, 24)
    valid = committed = db_pages = 0
    step = head["page_size"] + WAL_FRAME_HEADER_SIZE
    if header_ok is not False:
        for frame in wal_frames(data):
            if not frame["salt_ok"]:
                break
            if verify_checksums:
                off = frame["offset"]
                s1, s2 = wal_checksum(data[off:off + 8], big, s1, s2)
                s1, s2 = wal_checksum(data[off + WAL_FRAME_HEADER_SIZE:off + step], big, s1, s2)
                if (s1, s2) != struct.unpack_from(">2I", data, off + 16):
                    break
            valid += 1
            if frame["commit_size"]:
                committed, db_pages = valid, frame["commit_size"]
    return {"frames": total, "valid": valid, "committed": committed, "db_pages": db_pages,
            "checksums_verified": verify_checksums, "header_checksum_ok": header_ok}


def wal_image(db: bytes, wal: bytes, frames: int) -> bytes | None:
    """The database as a reader sees it: ``db`` with the first ``frames`` frames of ``wal``
    written over its pages (later frames win), cut or extended to the size the last of them
    commits; then marked as a rollback-journal database (header bytes 18-19 set to 1) so that
    it can be loaded into memory (``sqlite3.Connection.deserialize``) without a ``-shm``.

    Args:
        db: the bytes of ``state.db`` (may be empty: a store whose pages are all in the WAL).
        wal: the bytes of ``state.db-wal``; ``frames``: how many to apply (see
            :func:`wal_committed_frames` or the wal-index's ``mx_frame``); 0 applies none.
    Returns:
        The image, or None when ``wal`` is needed (``frames`` > 0) but is not a WAL, the last
        applied frame is not a commit frame, or its page size differs from ``db``'s.
    """
    image = bytearray(db)
    if frames > 0:
        head = wal_header(wal)
        if head is None:
            return None
        size = head["page_size"]
        own = db_header(bytes(image[:DB_HEADER_SIZE]))
        if own is not None and own["page_size"] != size:
            return None
        last = None
        newest: dict[int, int] = {}  # page -> offset of its last frame (the one that counts)
        for frame in wal_frames(wal):
            if frame["index"] >= frames:
                break
            newest[frame["page"]] = frame["offset"] + WAL_FRAME_HEADER_SIZE
            last = frame
        if last is None or last["index"] != frames - 1 or not last["commit_size"]:
            return None
        pages = last["commit_size"]
        if len(image) < pages * size:
            image.extend(b"\x00" * (pages * size - len(image)))
        del image[pages * size:]
        for page, body in newest.items():
            if page <= pages:
                image[(page - 1) * size:page * size] = wal[body:body + size]
    if len(image) >= DB_HEADER_SIZE and is_sqlite(bytes(image[:16])):
        image[18] = image[19] = 1
    return bytes(image)
