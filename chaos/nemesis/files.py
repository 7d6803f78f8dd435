"""File faults (SPEC §16.2): real operations on the store's files (``rm``, ``mv``, ``cp``,
zeroing, truncation, garbled pages).

Every fault acts on the real files at ``env.db_path`` from the runner process, which holds no
connection to the store (so its own open/close of ``state.db`` drops nobody's POSIX locks), and
returns the details recorded in the nemesis ``done`` record: inodes before/after, bytes, page
numbers. A fault that cannot apply raises :class:`NemesisError` (recorded as ``error``; a scenario
that lists the fault in ``must_observe`` is then INCONCLUSIVE, never green).

Pages with a frame in the current WAL generation are never garbled and the WAL is never touched
(why: ``docs/decisions/0012-chaos-faults-and-checks.md``). ``replace_db`` sources:

* ``other`` (default): a small store of its own, built at fire time in ``<run>/sources/other.db``
  (another generation token, SPEC §10.1) — what ``cp other.db state.db`` / ``mv`` does;
* ``empty``: a fresh empty current-schema store (its own token too);
* ``backup``: ``<run>/sources/backup.db``, an online backup of the fixture taken before the run
  (the same generation token as the live store). Only with ``how: mv`` (the scenario loader
  refuses ``cp``: see the decision record);
* ``file``: the store at ``path`` (relative to the home, inside the run directory), e.g. the
  output of a ``recover`` run earlier in the schedule: the operator's swap after a salvage.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import signal
import sqlite3
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from hermes_state.testing import db_header, utc_stamp, wal_frames, wal_header

from .. import fixtures, store
from ..params import param
from .base import Fault, NemesisEnv, NemesisError, NoParams, RoleTarget, signal_instance, targets

REPLACE_SOURCES = ("other", "empty", "backup", "file")
Sidecar = Literal["wal", "shm"]


def _sidecar_list(default: list[str], description: str):
    return param(default, description, minItems=1, uniqueItems=True, items={"title": "sidecar"})


def _seed():
    return param(0, "Seed of the garbage bytes.", minimum=0)


@dataclass(frozen=True, kw_only=True)
class DeleteParams:
    """Unlink the store's sidecars."""

    files: list[Sidecar] = _sidecar_list(["wal", "shm"], "Which sidecars to delete.")


@dataclass(frozen=True, kw_only=True)
class RenameParams:
    """Rename sidecars aside (same directory, same inode)."""

    files: list[Sidecar] = _sidecar_list(["wal"], "Which sidecars to rename.")
    suffix: str = param(".aside", "Appended to the sidecar's name (same directory).",
                        pattern="^[A-Za-z0-9._-]+$")


@dataclass(frozen=True, kw_only=True)
class ReplaceParams:
    """Replace state.db under the live writers."""

    how: Literal["mv", "cp"] = param("mv", "mv: rename a copy over state.db (new inode); cp: "
                                     "rewrite state.db in place (same inode).")
    source: Literal["other", "empty", "backup", "file"] = param(
        "other", "other: a small store with its own generation token; empty: a fresh empty "
        "store; backup: a copy of the fixture taken before the run (same token; mv only); file: "
        "the store at `path`.")
    path: str | None = param(None, "source file: a store path relative to the home, inside the "
                             "run directory (e.g. '../recovered.db', written by a `run` "
                             "recover step).", pattern="\\S")
    sidecars: Literal["keep", "aside"] = param(
        "keep", "keep: leave state.db-wal/-shm at the path (a bare mv/cp); aside: rename them "
        "out of the way (the careful operator's swap).")


@dataclass(frozen=True, kw_only=True)
class TruncateParams:
    """Truncate state.db."""

    bytes: int = param(0, "The size to truncate state.db to.", minimum=0)


@dataclass(frozen=True, kw_only=True)
class PageParams:
    """Garble one b-tree page of state.db."""

    page: int | None = param(None, "Garble this page number (default: a page of `table`).",
                             minimum=2)
    table: str = param("messages", "Garble a page of this table's b-tree (found with dbstat; "
                       "never a page with a frame in the current WAL).")
    pick: Literal["leaf", "interior"] = param("leaf", "Which kind of b-tree page of `table`.")
    seed: int = _seed()


@dataclass(frozen=True, kw_only=True)
class FtsParams:
    """Garble FTS5 index data."""

    table: Literal["messages_fts_data", "messages_fts_trigram_data"] = param(
        "messages_fts_data", "The FTS5 shadow table whose index data is garbled.")
    pages: int = param(0, "Leaf pages to garble; 0 = every page outside the WAL.", minimum=0)
    seed: int = _seed()


@dataclass(frozen=True, kw_only=True)
class PlantParams:
    """Plant earlier quarantine copies in the names a quarantine would take."""

    seconds: int = param(60, "Plant the names of the second before the fault and of this many "
                         "seconds after it: a quarantine in that window finds earlier copies in "
                         "its way.", minimum=1, maximum=600)
    copies: int = param(2, "Whole copies per second (state.db.corrupt.<stamp>.bak, -2.bak, ..., "
                        "each with its -wal and -shm); the next two numbers get a lone -wal and "
                        "a lone -shm.", minimum=1, maximum=20)
    seed: int = _seed()


FOREIGN_SIGNAL = signal.SIGUSR2


def _ident(path: Path) -> list | None:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return [st.st_dev, st.st_ino]


def _sidecar(env: NemesisEnv, which: str) -> Path:
    return Path(f"{env.db_path}-{which}")


# ------------------------------------------------------------------------------ sidecars
def delete_sidecars(env: NemesisEnv, params: DeleteParams) -> dict:
    """``unlink`` the store's ``-wal`` and/or ``-shm`` (the user's ``rm state.db-wal``)."""
    deleted, missing = [], []
    for which in params.files:
        path = _sidecar(env, which)
        try:
            os.unlink(path)
            deleted.append(path.name)
        except FileNotFoundError:
            missing.append(path.name)
    if not deleted:
        raise NemesisError(f"nothing to delete: {', '.join(missing)} did not exist")
    return {"files": deleted, "missing": missing}


def rename_sidecars(env: NemesisEnv, params: RenameParams) -> dict:
    """``mv state.db-wal state.db-wal.aside`` (and/or ``-shm``): the file keeps its inode and
    bytes under another name in the same directory (SPEC §16.2).

    Params: ``files`` (``["wal"]`` default), ``suffix`` (``".aside"``).
    Returns: ``{"renamed": {old: new}, "inodes": {old: [dev, ino]}, "bytes": {old: n},
    "missing": [...]}``.
    """
    suffix = params.suffix
    renamed, inodes, sizes, missing = {}, {}, {}, []
    for which in params.files:
        path = _sidecar(env, which)
        dest = path.with_name(path.name + suffix)
        try:
            st = os.stat(path)
            os.rename(path, dest)
        except FileNotFoundError:
            missing.append(path.name)
            continue
        renamed[path.name] = dest.name
        inodes[path.name] = [st.st_dev, st.st_ino]
        sizes[path.name] = st.st_size
    if not renamed:
        raise NemesisError(f"nothing to rename: {', '.join(missing)} did not exist")
    return {"renamed": renamed, "inodes": inodes, "bytes": sizes, "missing": missing}


# ------------------------------------------------------------------------------ main file
def _replace_source(env: NemesisEnv, source: str, path: str | None = None) -> Path:
    if source == "file":
        src = Path(env.db_path).parent / (path or "")
        run_dir = store.run_dir_of(env.db_path).path
        if path and not store.inside(src, run_dir):
            raise NemesisError(f"replace_db source file {path!r} resolves outside the run "
                               f"directory {run_dir}: refused")
        if not path or not src.is_file():
            raise NemesisError(f"replace_db source file: no store at {src}")
        return src

    where = fixtures.sources_dir(env.db_path)
    if source == "backup":
        path = where / "backup.db"
        if not path.is_file():
            raise NemesisError(f"no backup of the fixture at {path} (the runner takes it before "
                               "the run when a replace_db step uses source: backup)")
        return path
    if source == "other":
        return fixtures.other_store(where / "other.db")
    if source == "empty":
        return _empty_store(where)
    raise NemesisError(f"unknown replace_db source {source!r} (one of {REPLACE_SOURCES})")


def _empty_store(where: Path) -> Path:
    from hermes_state import SessionDB

    path = where / "empty.db"
    where.mkdir(parents=True, exist_ok=True)
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if p.exists():
            p.unlink()
    SessionDB(path).close()
    return path


def replace_db(env: NemesisEnv, params: ReplaceParams) -> dict:
    """Replace ``state.db`` under the live writers (SPEC §16.2, §10.1).

    Params: ``how``: ``mv`` (default; the source is copied to ``state.db.chaos-new`` in the same
    directory then renamed over ``state.db``: a new inode) or ``cp`` (``state.db`` is truncated
    and rewritten in place: the same inode, other content); ``source``: ``other`` | ``empty`` |
    ``backup`` | ``file`` (with ``path``; module docstring); ``sidecars``: ``keep`` (default: left
    at the path, as a user's bare ``mv``/``cp`` would) or ``aside`` (renamed
    ``state.db-wal.replaced-<UTCSTAMP>``: the careful operator's swap, so no frame of the old
    store is replayed onto the new one).

    Returns: ``{"how", "source", "source_path", "inode_before", "inode_after", "bytes_before",
    "bytes_after", "same_inode"}``.
    """
    how = params.how
    src = _replace_source(env, params.source, params.path)
    db = Path(env.db_path)
    before = _ident(db)
    if before is None:
        raise NemesisError(f"{db} does not exist: nothing to replace")
    size_before = db.stat().st_size
    if how == "mv":
        tmp = db.with_name(db.name + ".chaos-new")
        shutil.copyfile(src, tmp)
        os.chmod(tmp, 0o600)
        os.rename(tmp, db)
    elif how == "cp":
        shutil.copyfile(src, db)  # O_TRUNC on the existing inode, like cp(1)
    else:
        raise NemesisError(f"replace_db how must be 'mv' or 'cp', not {how!r}")
    moved = {}
    if params.sidecars == "aside":
        for which in ("wal", "shm"):
            side = _sidecar(env, which)
            if side.exists():
                dest = side.with_name(f"{side.name}.replaced-{utc_stamp()}")
                os.rename(side, dest)
                moved[side.name] = dest.name
    after = _ident(db)
    return {"how": how, "sidecars_moved": moved, "source": params.source,
            "source_path": str(src),
            "inode_before": before, "inode_after": after, "same_inode": before == after,
            "bytes_before": size_before, "bytes_after": db.stat().st_size}


def zero_db(env: NemesisEnv, params: NoParams) -> dict:
    """Overwrite every byte of ``state.db`` with zeros in place (same inode, same size).

    Returns: ``{"inode", "bytes"}``.
    """
    db = Path(env.db_path)
    try:
        fd = os.open(db, os.O_WRONLY)
    except FileNotFoundError:
        raise NemesisError(f"{db} does not exist: nothing to zero") from None
    try:
        size = os.fstat(fd).st_size
        block = b"\0" * 65536
        for off in range(0, size, len(block)):
            os.pwrite(fd, block[: size - off], off)
        os.fsync(fd)
    finally:
        os.close(fd)
    return {"inode": _ident(db), "bytes": size}


def plant_quarantine_copies(env: NemesisEnv, params: PlantParams) -> dict:
    """Plant earlier quarantine copies where the next quarantine would put its own (SPEC §12).

    For the UTC stamp of every second from the one before now to ``seconds`` after it, the
    names ``state.db.corrupt.<stamp>.bak`` numbered as the store numbers them (``.bak``,
    ``-2.bak``, ...): ``copies`` whole copies (main file, ``-wal``, ``-shm``), then a lone
    ``-wal`` and a lone ``-shm`` (an inspected copy whose other files were taken away). What a
    clock stepped back or a copy restored from elsewhere leaves: a quarantine in the window must
    take a name beside none of them. Each file holds ``seed``-derived random bytes, is created
    with ``O_EXCL|O_NOFOLLOW`` in the store's directory (a name already taken is skipped, never
    replaced) and is recorded with its sha256, for ``quarantine_evidence``.

    Returns: ``{"first_stamp", "last_stamp", "planted": {name: sha256}, "skipped": [names],
    "bytes"}`` (names relative to the store's directory).
    """
    db = Path(env.db_path)
    now = int(time.time())
    stamps = [utc_stamp(t) for t in range(now - 1, now + params.seconds + 1)]
    layout = [(n, ("", "-wal", "-shm")) for n in range(1, params.copies + 1)]
    layout += [(params.copies + 1, ("-wal",)), (params.copies + 2, ("-shm",))]
    planted, skipped, total = {}, [], 0
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for stamp in stamps:
        for n, suffixes in layout:
            stem = f"{db.name}.corrupt.{stamp}" + ("" if n == 1 else f"-{n}")
            for suffix in suffixes:
                name = f"{stem}.bak{suffix}"
                rng = random.Random(f"plant_quarantine_copies:{params.seed}:{name}")
                data = rng.randbytes(4096 if not suffix else 1024)
                try:
                    fd = os.open(db.parent / name, flags, 0o600)
                except FileExistsError:
                    skipped.append(name)
                    continue
                try:
                    with os.fdopen(fd, "wb", closefd=False) as fh:
                        fh.write(data)
                finally:
                    os.close(fd)
                planted[name] = hashlib.sha256(data).hexdigest()
                total += len(data)
    return {"first_stamp": stamps[0], "last_stamp": stamps[-1], "planted": planted,
            "skipped": skipped, "bytes": total}


def truncate_db(env: NemesisEnv, params: TruncateParams) -> dict:
    """``truncate -s N state.db`` (same inode). Params: ``bytes`` (default 0).

    Returns: ``{"inode", "bytes_before", "bytes_after"}``.
    """
    db = Path(env.db_path)
    try:
        before = db.stat().st_size
    except FileNotFoundError:
        raise NemesisError(f"{db} does not exist: nothing to truncate") from None
    n = params.bytes
    os.truncate(db, n)
    return {"inode": _ident(db), "bytes_before": before, "bytes_after": db.stat().st_size}


# ------------------------------------------------------------------------------ pages
def wal_pages(wal_path: Path) -> set[int]:
    """Page numbers that have a frame of the current WAL generation in ``wal_path``.

    A frame belongs to the generation when its salts equal the WAL header's (checksums are not
    verified: the set may include frames past the last commit, which only makes callers more
    careful). Empty set when the WAL is missing, empty or not a WAL.
    """
    try:
        data = wal_path.read_bytes()
    except FileNotFoundError:
        return set()
    head = wal_header(data)
    if head is None or head["page_size"] < 512:
        return set()
    out = set()
    for frame in wal_frames(data):
        if not frame["salt_ok"]:
            break
        out.add(frame["page"])
    return out


def _pages_of(db: Path, table: str) -> tuple[int, list[tuple[int, str]]]:
    """``(page_size, [(pageno, pagetype)])`` of ``table``'s b-tree via ``dbstat`` on a ``mode=ro``
    connection (it reads through the WAL, so the layout is the committed one)."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5)
    try:
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        if not conn.execute("SELECT 1 FROM sqlite_master WHERE name = ?", (table,)).fetchone():
            raise NemesisError(f"no table {table!r} in {db}")
        try:
            rows = conn.execute("SELECT pageno, pagetype FROM dbstat WHERE name = ? "
                                "ORDER BY pageno", (table,)).fetchall()
        except sqlite3.OperationalError:  # no dbstat: the root page is all we can locate
            root = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = ?",
                                (table,)).fetchone()[0]
            rows = [(root, "root")]
        return page_size, [(int(p), str(t)) for p, t in rows]
    finally:
        conn.close()


def _choose(pages: list[tuple[int, str]], in_wal: set[int], kinds: tuple[str, ...],
            what: str) -> tuple[int, str]:
    of_kind = [(p, t) for p, t in pages if t in kinds and p != 1]
    if not of_kind:
        raise NemesisError(f"{what} has no {'/'.join(kinds)} page (pages: "
                           f"{sorted({t for _, t in pages})}); try pick: leaf or a larger store")
    fit = [(p, t) for p, t in of_kind if p not in in_wal]
    if not fit:
        raise NemesisError(f"every {'/'.join(kinds)} page of {what} has a frame in the current "
                           "WAL (the damage would be masked): let a checkpoint run first or use "
                           "a larger fixture")
    return fit[len(fit) // 2]


def _garble(db: Path, offset: int, data: bytes) -> None:
    fd = os.open(db, os.O_WRONLY)
    try:
        os.pwrite(fd, data, offset)
        os.fsync(fd)
    finally:
        os.close(fd)


def corrupt_page(env: NemesisEnv, params: PageParams) -> dict:
    """Overwrite one database page of ``state.db`` with pseudo-random bytes (SPEC §16.2).

    Params: ``page`` (a page number > 1) or ``table`` (default ``messages``) with ``pick``:
    ``leaf`` (default: a leaf of the table's b-tree, located with ``dbstat``) or ``interior``;
    ``seed`` (default 0) for the bytes. Pages with a frame in the current WAL are never chosen
    by ``table`` (module docstring); an explicit ``page`` is garbled regardless and the details
    say whether it was in the WAL.

    Returns: ``{"page", "page_size", "offset", "bytes", "table", "pagetype", "in_wal",
    "inode"}``.
    """
    db = Path(env.db_path)
    in_wal = wal_pages(_sidecar(env, "wal"))
    table, pagetype = params.table, None
    if params.page is not None:
        page = params.page
        page_size = _page_size(db)
        table = None
    else:
        page_size, pages = _pages_of(db, table)
        kinds = ("leaf",) if params.pick == "leaf" else ("internal",)
        page, pagetype = _choose(pages, in_wal, kinds, table)
    if page < 2:
        raise NemesisError("page 1 holds the file header: use zero_db/truncate_db for that")
    rng = random.Random(f"corrupt_page:{params.seed}:{page}")
    data = bytes(rng.getrandbits(8) for _ in range(page_size))
    offset = (page - 1) * page_size
    _garble(db, offset, data)
    return {"page": page, "page_size": page_size, "offset": offset, "bytes": len(data),
            "table": table, "pagetype": pagetype, "in_wal": page in in_wal, "inode": _ident(db)}


def _page_size(db: Path) -> int:
    with open(db, "rb") as fh:
        head = db_header(fh.read(100))
    if head is None:
        raise NemesisError(f"{db} has no SQLite header: no page size to go by")
    return head["page_size"]


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """SQLite varint at ``buf[i]`` -> ``(value, next index)``."""
    v = 0
    for k in range(8):
        b = buf[i + k]
        v = (v << 7) | (b & 0x7F)
        if not b & 0x80:
            return v, i + k + 1
    return (v << 8) | buf[i + 8], i + 9


def _blob_spans(page: bytes, page_size: int) -> list[tuple[int, int, int]]:
    """``(rowid, start, end)`` of the local bytes of the last column of every cell of a table
    b-tree leaf page (type 0x0D); the record headers and b-tree structure stay outside."""
    if page[0] != 0x0D:
        return []
    ncells = struct.unpack(">H", page[3:5])[0]
    usable = page_size
    max_local = usable - 35
    spans = []
    for c in range(ncells):
        ptr = struct.unpack(">H", page[8 + 2 * c: 10 + 2 * c])[0]
        size, i = _varint(page, ptr)
        rowid, i = _varint(page, i)
        local = size if size <= max_local else None
        if local is None:  # overflow: SQLite's minLocal/maxLocal rule
            min_local = (usable - 12) * 32 // 255 - 23
            local = min_local + (size - min_local) % (usable - 4)
            if local > max_local:
                local = min_local
        end = i + local
        hdr_len, j = _varint(page, i)
        types = []
        while j < i + hdr_len:
            t, j = _varint(page, j)
            types.append(t)
        body = i + hdr_len
        for t in types[:-1]:
            body += _serial_len(t)
        if body < end and end <= page_size:
            spans.append((rowid, body, end))
    return spans


def _serial_len(t: int) -> int:
    return {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 6, 6: 8, 7: 8, 8: 0, 9: 0}.get(
        t, (t - 12) // 2 if t >= 12 else 0)


def corrupt_fts(env: NemesisEnv, params: FtsParams) -> dict:
    """Garble FTS5 index data on leaf pages of an FTS shadow table (SPEC §16.2, §12).

    Params: ``table`` (default ``messages_fts_data``), ``pages`` (how many leaf pages; default
    0 = every eligible one), ``seed`` (default 0). Eligible: a leaf of that table's b-tree with no
    frame in the current WAL. Inside a page, the bytes of each cell's ``block`` value are
    overwritten, except the averages (rowid 1) and structure (rowid 10) records; record headers
    and the b-tree structure are kept, so SQLite's b-tree stays sound and FTS5 itself reports the
    damage when a query or a merge reads a garbled segment: corruption confined to the FTS
    shadow tables.

    Returns: ``{"table", "pages": [page numbers], "page_size", "cells", "bytes", "in_wal": False,
    "inode"}``.
    """
    db = Path(env.db_path)
    table = params.table
    want = params.pages
    in_wal = wal_pages(_sidecar(env, "wal"))
    page_size, pages = _pages_of(db, table)
    candidates = [p for p, t in pages if t == "leaf" and p not in in_wal]
    rng = random.Random(f"corrupt_fts:{params.seed}")
    rng.shuffle(candidates)
    done, cells, garbled = [], 0, 0
    fd = os.open(db, os.O_RDWR)
    try:
        for page in candidates:
            if want and len(done) >= want:
                break
            offset = (page - 1) * page_size
            raw = bytearray(os.pread(fd, page_size, offset))
            spans = [s for s in _blob_spans(bytes(raw), page_size) if s[0] not in (1, 10)]
            if not spans:
                continue
            for _rowid, start, end in spans:
                for k in range(start, end):
                    raw[k] = rng.getrandbits(8)
                garbled += end - start
            cells += len(spans)
            os.pwrite(fd, bytes(raw), offset)
            done.append(page)
        os.fsync(fd)
    finally:
        os.close(fd)
    if not done:
        raise NemesisError(f"no leaf page of {table} outside the current WAL holds index data "
                           f"({len(candidates)} candidate page(s)): use a larger fixture or let "
                           "a checkpoint run first")
    return {"table": table, "pages": sorted(done), "page_size": page_size, "cells": cells,
            "bytes": garbled, "in_wal": False, "inode": _ident(db)}


# ------------------------------------------------------------------------------ foreign close
def foreign_open_close(env: NemesisEnv, params: RoleTarget) -> dict:
    """Make a role process that holds a connection ``open()``, read and ``close()`` ``state.db``
    with plain file calls (SPEC §16.2; the hazard of SPEC §1/§4: closing ANY descriptor of an
    inode drops every POSIX lock the process holds on it, so SQLite's locks vanish silently).

    The runner sends :data:`FOREIGN_SIGNAL` (SIGUSR2) to the role's instances (``role``,
    ``index``); every role process installs :func:`install_foreign_open_close` at start, whose
    handler does the open/read/close in the role's own process and records an ``event``
    ``foreign_open_close`` (inode, bytes read) in the role's history.

    Returns: ``{"signal", "pids", "processes"}``.
    """
    sent = []
    for inst in targets(env, params):
        if signal_instance(inst, FOREIGN_SIGNAL):
            sent.append(inst)
    if not sent:
        raise NemesisError(f"every instance of {params.role!r} exited before the signal")
    return {"signal": FOREIGN_SIGNAL.name, "pids": [i.pid for i in sent],
            "processes": [i.process for i in sent]}


def install_foreign_open_close(db_path: str, record) -> None:
    """In a role process: on SIGUSR2, ``open(db_path, 'rb')``, read 4096 bytes, ``close()``.

    Args:
        db_path: the store path.
        record: ``record(**fields)`` writing an ``event`` to the role's history.
    """
    def handler(signum, frame) -> None:
        t0 = time.monotonic()
        try:
            with open(db_path, "rb") as fh:  # a plain descriptor, closed: the hazard itself
                st = os.fstat(fh.fileno())
                data = fh.read(4096)
            record(event="foreign_open_close", inode=[st.st_dev, st.st_ino], bytes=len(data),
                   seconds=round(time.monotonic() - t0, 6))
        except OSError as exc:
            record(event="foreign_open_close", error=str(exc))

    signal.signal(FOREIGN_SIGNAL, handler)


DELETE_SIDECARS = Fault("delete_sidecars", DeleteParams, delete_sidecars,
                        "unlink state.db-wal/-shm")
FILE_FAULTS = (
    Fault("rename_sidecars", RenameParams, rename_sidecars, "mv a sidecar aside"),
    Fault("replace_db", ReplaceParams, replace_db, "mv/cp another store over state.db",
          corrupting=True),
    Fault("zero_db", NoParams, zero_db, "zero every byte", corrupting=True),
    Fault("plant_quarantine_copies", PlantParams, plant_quarantine_copies,
          "earlier quarantine copies in the names the next quarantine would take"),
    Fault("truncate_db", TruncateParams, truncate_db, "truncate to `bytes`", corrupting=True),
    Fault("corrupt_page", PageParams, corrupt_page, "garble a b-tree page", corrupting=True),
    Fault("corrupt_fts", FtsParams, corrupt_fts, "garble FTS5 index data", corrupting=True),
)
FOREIGN_OPEN_CLOSE = Fault("foreign_open_close", RoleTarget, foreign_open_close,
                           "a role process opens, reads and closes state.db with plain file "
                           "calls")
