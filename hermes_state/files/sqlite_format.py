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
