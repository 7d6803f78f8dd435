"""Snapshots of the store: ``backup``, ``backup list``, ``backup restore ID`` (SPEC §13, §1).

A snapshot is one consistent image of the store taken with the SQLite online backup API from a
``mode=ro`` connection: ``state.db``, ``state.db-wal`` and ``state.db-shm`` are one image
(SPEC §1), so a file copy of ``state.db`` alone would miss every commit still in the WAL, and a
copy of the three files would tear under a live writer. The backup reads the store inside one
read transaction (a single ``backup`` step), which is a point in time even while other processes
keep writing; it never blocks them.

Layout (SPEC §1)::

    <store dir>/state-snapshots/<UTCSTAMP>-<reason>/state.db        the image (rollback journal
    <store dir>/state-snapshots/<UTCSTAMP>-<reason>/manifest.json   mode: one self-contained file)
    <store dir>/state.db.pre-update-emergency-<UTCSTAMP>.bak        reason "pre-update" only

A snapshot is built in ``<name>.partial/`` and renamed into place when complete, so a crash never
leaves a directory that looks finished. ``<UTCSTAMP>`` gets ``-N`` on collision.

Why a failed snapshot raises, what retention may delete, when a pre-update image is named
``.bak``, why images are rollback-journal files and when restore refuses: docs/decisions/0009-snapshots.md.
Image checks and the backup copy itself are :mod:`hermes_state.operator.snapshot_images`.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import sqlite3
import stat
import time
from pathlib import Path
from typing import Callable

from .. import failpoints
from ..errors import HermesStateError, is_lock_error
from ..files import atomic
from ..files.names import name_problem, shown_name
from ..files.paths import utc_stamp
from ..files.sqlite_format import is_sqlite
from ..files.store_files import connect_ro, refuse_special_store_files
from ..processes import checkpoint_lock, holders
from .snapshot_images import (
    BUSY_TIMEOUT_S,
    STAMP_RE,
    backup_bounded,
    backup_image,
    bak_key,
    file_sha256,
    file_size,
    fsync_file,
    image_facts,
    inspect_image,
    iso_epoch,
    iso_now,
    sanitize_reason,
    stamp_iso,
    store_sizes,
    verify_image,
)

__all__ = [
    "SNAPSHOT_DIR",
    "DEFAULT_KEEP",
    "PRE_UPDATE_KEEP",
    "SnapshotError",
    "SnapshotFailed",
    "SnapshotNotFound",
    "RestoreRefused",
    "RestoreFailed",
    "sanitize_reason",
    "create_snapshot",
    "list_snapshots",
    "restore_snapshot",
]

SNAPSHOT_DIR = "state-snapshots"
DEFAULT_KEEP = 20  # SPEC §13
PRE_UPDATE_KEEP = 2  # SPEC §13
PRE_UPDATE_REASON = "pre-update"
PRE_RESTORE_REASON = "pre-restore"
MANIFEST = "manifest.json"
IMAGE = "state.db"
MANIFEST_VERSION = 1
_DIR_RE = re.compile(rf"^({STAMP_RE})-[a-z0-9-]+$")
PARTIAL_RE = re.compile(rf"^{STAMP_RE}-[a-z0-9-]+{re.escape(atomic.PARTIAL_SUFFIX)}$")


class SnapshotError(HermesStateError):
    """A snapshot operation could not be done; the message says what to do next (SPEC §13)."""


class SnapshotFailed(SnapshotError):
    """The snapshot was written but failed verification, or could not be written at all.

    Attributes:
        result: the dict :func:`create_snapshot` would have returned (``verified`` is False,
            ``path``/``dir`` name the kept, failed snapshot).
    """

    def __init__(self, user_message: str, operator_detail: str = "", *, result: dict) -> None:
        self.result = result
        super().__init__(user_message, operator_detail)


class SnapshotNotFound(SnapshotError, LookupError):
    """No snapshot with that id exists beside the store."""


class RestoreRefused(SnapshotError):
    """``backup restore`` refused before touching anything: the live files are byte-identical.

    Raised while another process (or this one) holds the store, or when the holder scan could
    not prove the store is quiet (SPEC §13, §10.2), or when the snapshot is not a verified,
    unchanged image. The message contains "not restored" and one ``PID N (command): files`` line
    per holder.

    Attributes:
        holders: ``[(pid, command, files), ...]`` seen holding the store.
        unreadable: pids whose descriptors could not be read (the scan was incomplete).
    """

    def __init__(self, user_message: str, operator_detail: str = "", *,
                 holders: list | None = None, unreadable: list | None = None) -> None:
        self.holders = list(holders or [])
        self.unreadable = list(unreadable or [])
        super().__init__(user_message, operator_detail)


class RestoreFailed(SnapshotError):
    """The restore wrote the pages but the result did not verify; ``result`` says what happened.

    The pre-restore snapshot named in ``result["pre_restore"]`` holds the store as it was.
    """

    def __init__(self, user_message: str, operator_detail: str = "", *, result: dict) -> None:
        self.result = result
        super().__init__(user_message, operator_detail)


# --------------------------------------------------------------------------- create

def create_snapshot(db_path: str | os.PathLike, reason: str = "manual", *,
                    keep: int = DEFAULT_KEEP, _protect: frozenset = frozenset(),
                    progress: Callable[[str, int | None, int | None], None] | None = None
                    ) -> dict:
    """Take a consistent, verified snapshot of the store (SPEC §13 ``backup [--reason R]``).

    Writes ``state-snapshots/<UTCSTAMP>-<reason>/state.db`` beside the store with the online
    backup API from a ``mode=ro`` connection, runs ``PRAGMA quick_check`` on the image and writes
    ``manifest.json``. Then, if verified, deletes the oldest VERIFIED snapshots beyond ``keep``.
    With ``reason="pre-update"`` the verified image goes to
    ``state.db.pre-update-emergency-<UTCSTAMP>.bak`` beside the store instead and the newest 2
    such files are kept.

    Args:
        db_path: the store's ``state.db``; it must exist.
        reason: free text, sanitized to ``[a-z0-9-]`` (:func:`sanitize_reason`).
        keep: how many verified snapshots to keep (>= 1); ignored for ``pre-update`` (always 2).
        _protect: snapshot ids retention must not delete (used by :func:`restore_snapshot`).
        progress: ``progress(phase, None, None)`` at each phase (a progress display).
    Returns:
        The manifest plus location: ``{"id", "kind" ("snapshot"|"pre-update"), "path" (the
        image), "dir" (snapshot directory or None), "reason", "created_at", "source",
        "source_sizes", "bytes", "sha256", "schema_version", "sessions", "messages",
        "counts": {"sessions", "messages"}, "quick_check", "verified": True, "sqlite",
        "page_size", "page_count", "pruned": [ids deleted by retention]}``.
    Raises:
        SnapshotError: no store at ``db_path``.
        SnapshotFailed: the image failed ``quick_check`` or could not be written; it is kept,
            marked failed, and nothing was pruned. ``.result`` has the dict above.
        ValueError: ``reason`` has no usable characters, or ``keep < 1``.
        OSError: the snapshot directory cannot be written.
    """
    db = Path(db_path).absolute()
    reason = sanitize_reason(reason)
    if keep < 1:
        raise ValueError(f"keep must be at least 1, not {keep}")
    try:
        st = os.lstat(db)
    except FileNotFoundError:
        raise SnapshotError(f"no session store at {db}: nothing to back up.",
                            "check --home/--profile (or HERMES_HOME)") from None
    if not stat.S_ISREG(st.st_mode):
        raise SnapshotError(f"{db} is {atomic.describe_mode(st.st_mode)}, not a regular file: "
                            "nothing was backed up.", "check --home/--profile (or HERMES_HOME)")
    stamp = utc_stamp()
    root = db.parent / SNAPSHOT_DIR
    try:
        atomic.ensure_dir(root, what="the snapshot directory")
        atomic.clean_partials(root, PARTIAL_RE)  # leftovers of a killed backup (issue 11.12)
        return _take_snapshot(db, root, stamp, reason, keep, _protect, progress)
    except HermesStateError:  # a planted link, a permission problem: already named
        raise
    except OSError as exc:  # the snapshot could not be written: named, the store untouched
        raise SnapshotError(
            f"the snapshot could not be written in {root} ({exc.strerror or exc}: "
            f"{exc.filename or root}); nothing was removed and the store is unchanged.",
            "fix the cause (free space, permissions), then run `backup` again") from exc


def _take_snapshot(db: Path, root: Path, stamp: str, reason: str, keep: int,
                   _protect: frozenset, progress) -> dict:
    """The body of :func:`create_snapshot` once the snapshot directory exists."""
    with atomic.PartialDir(root, f"{stamp}-{reason}") as part:
        image = part.path / IMAGE
        os.close(atomic.create_file(image))  # 0600 from the start; SQLite fills it
        sizes = store_sizes(db)
        backup_error = None
        locked = False
        if progress is not None:
            progress("copying the store (online backup)", None, None)
        try:
            backup_image(db, image)
        except sqlite3.Error as exc:
            backup_error = f"the online backup failed: {exc}"
            locked = is_lock_error(exc)
        if progress is not None:
            progress("verifying the snapshot (quick_check, sha256)", None, None)
        facts, digest = verify_image(image) if backup_error is None else ({
            "quick_check": [], "verified": False, "schema_version": None, "sessions": None,
            "messages": None, "page_size": None, "page_count": None, "error": backup_error},
            file_sha256(image) if image.exists() else None)
        manifest = {
            "version": MANIFEST_VERSION,
            "kind": "snapshot",
            "reason": reason,
            "created_at": iso_now(),
            "source": str(db),
            "source_sizes": sizes,
            "file": IMAGE,
            "bytes": file_size(image),
            "sha256": digest,
            "schema_version": facts["schema_version"],
            "sessions": facts["sessions"],
            "messages": facts["messages"],
            "counts": {"sessions": facts["sessions"], "messages": facts["messages"]},
            "quick_check": facts["quick_check"],
            "verified": bool(facts["verified"]),
            "complete": backup_error is None,  # the online backup ran to its end
            "error": facts["error"],
            "sqlite": sqlite3.sqlite_version,
            "page_size": facts["page_size"],
            "page_count": facts["page_count"],
        }
        if reason == PRE_UPDATE_REASON and manifest["verified"]:
            return _finish_pre_update(db, stamp, image, manifest)
        part.write_json(MANIFEST, manifest)
        failpoints.hit("cmd.backup.before_publish")
        final = part.publish(atomic.numbered(root / f"{stamp}-{reason}"))
    result = dict(manifest, id=final.name, path=str(final / IMAGE), dir=str(final), pruned=[])
    if not manifest["verified"]:
        lines = "; ".join(manifest["quick_check"][:5]) or manifest["error"] or "unknown"
        if locked or backup_error is not None:
            # The copy was never finished (the store locked, the disk full, an I/O error):
            # nothing says the store is damaged (issue 22: the sweep's ENOSPC runs).
            raise SnapshotFailed(
                f"the snapshot {final} could not be taken: {manifest['error']} It was kept and "
                "marked failed, and no older snapshot was removed.",
                f"image {final / IMAGE}, sha256 {manifest['sha256']}", result=result)
        raise SnapshotFailed(
            f"the snapshot {final} failed verification (quick_check: {lines}); it was kept and "
            f"marked failed, and no older snapshot was removed. The store itself may be damaged: "
            f"run `sessions recover {db} --inspect-only`.",
            f"image {final / IMAGE}, sha256 {manifest['sha256']}", result=result)
    result["pruned"] = _prune_snapshots(root, keep, set(_protect) | {final.name})
    return result


def _finish_pre_update(db: Path, stamp: str, image: Path, manifest: dict) -> dict:
    """Move a verified pre-update image to ``state.db.pre-update-emergency-<UTCSTAMP>.bak``."""
    fsync_file(image)
    bak = atomic.move_aside(image, atomic.numbered(
        db.with_name(f"{db.name}.pre-update-emergency-{stamp}.bak"), before=".bak"))
    result = dict(manifest, kind="pre-update", id=bak.name, path=str(bak), dir=None, pruned=[])
    result["pruned"] = _prune_pre_update(db, keep=PRE_UPDATE_KEEP, protect={bak.name})
    return result


def _intact(snap: dict) -> bool:
    """A verified snapshot whose image is still there as its manifest describes it: a regular
    file of the recorded size with the SQLite header. Only these count toward retention, so a
    damaged, emptied or planted "verified" manifest can never push a good snapshot out."""
    try:
        st = os.lstat(snap["path"])
        if not stat.S_ISREG(st.st_mode) or st.st_size != snap.get("bytes"):
            return False
        with atomic.open_regular(snap["path"]) as fh:
            return is_sqlite(fh.read(16))
    except (OSError, TypeError):
        return False


def _prune_snapshots(root: Path, keep: int, protect: set) -> list[str]:
    """Delete intact verified snapshot directories beyond the newest ``keep`` (SPEC §13).

    Never deletes the newest intact verified snapshot, a failed one, or one in ``protect``.
    """
    good = [s for s in _list_snapshot_dirs(root) if s.get("verified") is True and _intact(s)]
    deleted = []
    for snap in good[max(keep, 1):]:
        if snap["id"] in protect:
            continue
        shutil.rmtree(snap["dir"], ignore_errors=True)
        deleted.append(snap["id"])
    return deleted


def _prune_pre_update(db: Path, keep: int, protect: set) -> list[str]:
    """Keep the newest ``keep`` ``*.pre-update-emergency-*.bak`` files (SPEC §13: 2)."""
    baks = sorted(((k, p) for p in db.parent.iterdir()
                   if p.name.startswith(f"{db.name}.") and (k := bak_key(p.name)) is not None
                   and _is_regular(p)), reverse=True)
    deleted = []
    for _key, path in baks[keep:]:
        if path.name in protect:
            continue
        path.unlink()
        deleted.append(path.name)
    return deleted


# --------------------------------------------------------------------------- list

def _is_regular(path: Path) -> bool:
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except OSError:
        return False


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


#: A manifest is a few kilobytes; anything larger is not ours (never read into memory).
MANIFEST_LIMIT = 1 << 20


def _read_manifest(directory: Path) -> dict | None:
    """The manifest as a dict, or None when missing, not a regular file, too large or not a JSON
    object (issue 11.10: evidence of unexpected shape never crashes a command)."""
    try:
        data = atomic.read_json(directory / MANIFEST, limit=MANIFEST_LIMIT)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


#: A manifest's ``created_at`` is trusted for ordering only this long after its name's stamp
#: (a backup of a huge store under load can cross many seconds; a day is no backup's length).
_CREATED_AT_TOLERANCE_S = 86400.0


def _order_key(item: dict) -> tuple:
    """Sort key, newest last: the manifest's ``created_at`` when it is consistent with the UTC
    stamp in the directory name, else that stamp (a manifest of unexpected shape or a
    far-future date never decides the order)."""
    stamp = iso_epoch(stamp_iso(item["id"][:16])) if _DIR_RE.match(item["id"]) else 0.0
    created = iso_epoch(item.get("created_at"))
    if stamp and not 0 <= created - stamp < _CREATED_AT_TOLERANCE_S:
        created = stamp
    return (created, item["id"])


def _list_snapshot_dirs(root: Path) -> list[dict]:
    """Snapshot directories under ``root``, newest first; ``.partial`` ones and links skipped."""
    out = []
    if not _is_dir(root):
        return out
    for entry in root.iterdir():
        if (not _is_dir(entry) or entry.name.endswith(atomic.PARTIAL_SUFFIX)
                or not _DIR_RE.match(entry.name)):
            continue
        manifest = _read_manifest(entry)
        if manifest is None:
            item = {"id": entry.name, "kind": "snapshot", "verified": False,
                    "error": "manifest.json is missing, unreadable or not a JSON object",
                    "created_at": stamp_iso(entry.name[:16])}
        else:
            item = dict(manifest)
            if not isinstance(item.get("kind"), str):
                item["kind"] = "snapshot"
        item.update(id=entry.name, dir=str(entry), path=str(entry / IMAGE))
        out.append(item)
    out.sort(key=_order_key, reverse=True)
    return out


def list_snapshots(db_path: str | os.PathLike) -> list[dict]:
    """Every snapshot of the store, newest first (SPEC §13 ``backup list``).

    Args:
        db_path: the store's ``state.db`` (need not exist).
    Returns:
        One dict per snapshot: the manifest fields (``verified``, ``sessions``, ``messages``,
        ``created_at``, ``reason``, ``sha256``, ...) plus ``id`` (the directory name), ``dir`` and
        ``path`` (the image). Pre-update images beside the store are listed too with
        ``kind="pre-update"``, ``id`` = the file name, ``verified=True`` (they only get that
        name after verification) and ``sessions``/``messages`` None (not re-read). A directory
        whose manifest is missing is listed with ``verified=False`` and an ``error``.
    """
    db = Path(db_path).absolute()
    items = _list_snapshot_dirs(db.parent / SNAPSHOT_DIR)
    if db.parent.is_dir():
        for entry in db.parent.iterdir():
            key = bak_key(entry.name) if entry.name.startswith(f"{db.name}.") else None
            if key is None or not _is_regular(entry):
                continue
            created = stamp_iso(key[0])
            try:  # the name has whole seconds; the mtime orders images of the same second
                # (clamped into it: an image named in second S may be finished in S+1 on a
                # loaded machine, and must still sort after the earlier images of S)
                stamp = iso_epoch(created)
                mtime = min(max(entry.stat().st_mtime, stamp), stamp + 0.999999)
                if 0 <= mtime - stamp < 1:
                    created = (time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(mtime))
                               + f".{int((mtime % 1) * 1e6):06d}Z")
            except OSError:
                pass
            items.append({"id": entry.name, "kind": "pre-update", "reason": PRE_UPDATE_REASON,
                          "created_at": created, "path": str(entry), "dir": None,
                          "bytes": file_size(entry), "verified": True, "sessions": None,
                          "messages": None})
    items.sort(key=lambda s: _order_key(s) if s.get("dir") else (
        iso_epoch(s.get("created_at")), s["id"]), reverse=True)
    return items


# --------------------------------------------------------------------------- restore

def _locate(db: Path, snapshot_id: str) -> tuple[Path, dict | None]:
    """``(image path, manifest or None)`` of ``snapshot_id``; raises SnapshotNotFound."""
    sid = snapshot_id if isinstance(snapshot_id, str) else str(snapshot_id)
    problem = name_problem(sid)
    if problem is not None or sid.endswith(".partial"):
        raise SnapshotNotFound(f"{shown_name(sid)} is not a snapshot id (it "
                               f"{problem or 'names an unfinished snapshot'}); not restored.",
                               "list them with `backup list`")
    directory = db.parent / SNAPSHOT_DIR / sid
    if _is_dir(directory) and _is_regular(directory / IMAGE):
        return directory / IMAGE, _read_manifest(directory)
    bak = db.parent / sid
    if bak_key(sid) is not None and sid.startswith(f"{db.name}.") and _is_regular(bak):
        return bak, None
    known = ", ".join(s["id"] for s in list_snapshots(db)[:5]) or "none"
    raise SnapshotNotFound(f"no snapshot {sid!r} beside {db}; not restored.",
                           f"newest snapshots: {known} (see `backup list`)")


def _refuse_if_held(db: Path, snapshot_id: str) -> None:
    """SPEC §13: refuse while any process holds the store or the scan is incomplete."""
    scan = holders.scan(db, include_self=True)
    if not scan.holders and scan.complete:
        return
    lines = [f"  {h.line()}" for h in scan.holders]
    if scan.holders:
        head = (f"Refusing `backup restore {snapshot_id}`: another process is using {db}; "
                f"not restored.")
    else:
        head = (f"Refusing `backup restore {snapshot_id}`: cannot prove {db} is quiet; "
                f"not restored.")
    if scan.unreadable:
        lines.append(f"  cannot read the open files of PID(s) "
                     f"{', '.join(map(str, scan.unreadable))} (cannot prove the store is quiet)")
    if any(h.pid == os.getpid() for h in scan.holders):
        lines.append("  (that is this process: close every SessionDB it has open first)")
    tail = ("Stop them first (gateway stop, quit the desktop app, pause cron), then re-run. "
            "The live files were not touched.")
    raise RestoreRefused("\n".join([head, *lines, tail]),
                         f"holder scan complete={scan.complete}; {scan.platform_note}".rstrip("; "),
                         holders=[h.as_tuple() for h in scan.holders], unreadable=scan.unreadable)


def restore_snapshot(db_path: str | os.PathLike, snapshot_id: str, *,
                     keep: int = DEFAULT_KEEP) -> dict:
    """Write a snapshot's pages into the live store (SPEC §13 ``backup restore ID``).

    Order: check the snapshot (verified manifest, unchanged sha256, ``quick_check`` ok) →
    take the store's write lock (:mod:`hermes_state.processes.checkpoint_lock`; held to the end, so a
    writer that starts after the holder check waits instead of committing in between, issue
    11) → refuse if any process holds the store (also checked before the lock) → snapshot the current store (reason
    ``pre-restore``; retention never deletes the snapshot being restored) → scan again →
    copy the image INTO ``state.db`` with the backup API through a normal connection to it
    (SQLite replays or discards any ``-wal`` beside it as part of the same write, so no stale
    frames can survive beside the restored image) → ``PRAGMA wal_checkpoint(TRUNCATE)`` →
    ``quick_check`` → close (the last connection removes ``-wal``/``-shm``).

    Args:
        db_path: the live ``state.db`` (it may be missing: then it is created from the image).
        snapshot_id: a directory name under ``state-snapshots/`` or a
            ``state.db.pre-update-emergency-*.bak`` file name (see :func:`list_snapshots`).
        keep: retention for the pre-restore snapshot (see :func:`create_snapshot`).
    Returns:
        ``{"restored": True, "id", "image", "db_path", "pre_restore": {"id", "path",
        "verified"} or None, "quick_check", "verified": True, "schema_version", "sessions",
        "messages", "sidecars": {"state.db-wal": bool, "state.db-shm": bool}, "warnings"}``.
    Raises:
        SnapshotNotFound: no such snapshot.
        RestoreRefused: a process holds the store (its ``PID N (command): files`` lines are in
            the message), the scan was incomplete, the store's write lock is unusable or stayed
            busy, the snapshot is marked failed, changed since
            it was taken, or fails ``quick_check``, or no copy of the current store could be
            kept. Nothing was written to the live files.
        RestoreFailed: the restored store failed ``quick_check`` (the pre-restore snapshot holds
            the previous state).
        sqlite3.Error: the backup itself failed (the live store is unchanged: the backup writes
            in one transaction).
    """
    db = Path(db_path).absolute()
    image, manifest = _locate(db, snapshot_id)
    if manifest is not None:
        if manifest.get("verified") is not True:
            raise RestoreRefused(
                f"snapshot {snapshot_id} failed verification when it was taken; not restored.",
                f"inspect it with `sessions recover {image} --inspect-only`")
        if manifest.get("sha256") and file_sha256(image) != manifest["sha256"]:
            raise RestoreRefused(
                f"snapshot {snapshot_id} changed since it was taken (sha256 differs from its "
                f"manifest); not restored.",
                f"inspect it with `sessions recover {image} --inspect-only`")
    facts = inspect_image(image)
    if not facts["verified"]:
        lines = "; ".join(facts["quick_check"][:5]) or facts["error"] or "unknown"
        raise RestoreRefused(f"snapshot {snapshot_id} does not pass quick_check ({lines}); "
                             f"not restored.",
                             f"inspect it with `sessions recover {image} --inspect-only`")
    _refuse_if_held(db, snapshot_id)  # at once under a visible holder, without waiting
    with _write_lock(db, snapshot_id):
        pre, warnings, after, check = _restore_locked(db, snapshot_id, image, keep)
    try:
        os.chmod(db, 0o600)
    except OSError:
        pass
    result = {
        "restored": True,
        "id": str(snapshot_id),
        "image": str(image),
        "db_path": str(db),
        "pre_restore": None if pre is None else {
            "id": pre["id"], "path": pre["path"], "verified": pre["verified"]},
        "quick_check": after,
        "verified": after == ["ok"],
        "schema_version": check["schema_version"],
        "sessions": check["sessions"],
        "messages": check["messages"],
        "sidecars": {"state.db-wal": Path(f"{db}-wal").exists(),
                     "state.db-shm": Path(f"{db}-shm").exists()},
        "warnings": warnings,
    }
    if not result["verified"]:
        raise RestoreFailed(
            f"restored {snapshot_id} into {db} but the result fails quick_check "
            f"({'; '.join(after[:5])}).",
            f"the store as it was is in the pre-restore snapshot "
            f"{(result['pre_restore'] or {}).get('id')}", result=result)
    return result


@contextlib.contextmanager
def _write_lock(db: Path, snapshot_id: str):
    """Hold the store's write lock from the holder check through the restore (issue 11): a
    writer that opens after the check (a cron job) waits for the restore instead of committing
    between the pre-restore snapshot and the restore, where its write would be in neither."""
    try:
        with checkpoint_lock.exclusive(db, purpose="backup restore"):
            yield
    except checkpoint_lock.LockUnavailable as exc:
        raise RestoreRefused(
            f"Refusing `backup restore {snapshot_id}`: cannot take the store's write lock "
            f"({exc.problem}), so a writer could commit in the middle of the restore; not "
            "restored.", "fix the lock file (or its directory) and re-run") from None
    except checkpoint_lock.LockBusy as exc:
        raise RestoreRefused(
            f"Refusing `backup restore {snapshot_id}`: {exc}; not restored.",
            "retry in a moment; `doctor` names who holds the store") from None


def _restore_locked(db: Path, snapshot_id: str, image: Path, keep: int
                    ) -> tuple[dict | None, list[str], list[str], dict]:
    """The restore proper, the store's write lock held: ``(pre, warnings, quick_check, facts)``."""
    _refuse_if_held(db, snapshot_id)
    warnings: list[str] = []
    pre = None
    if db.exists():
        try:
            pre = create_snapshot(db, PRE_RESTORE_REASON, keep=keep,
                                  _protect=frozenset({str(snapshot_id)}))
        except SnapshotFailed as exc:
            pre = exc.result
            # Only a COMPLETE copy that fails quick_check (the store itself is damaged) lets the
            # restore go on; a copy cut short (a full disk, an I/O error) keeps nothing: the
            # restore would lose every write since the snapshot (issue 22, the I/O sweep).
            damaged = (pre.get("complete", True) and bool(pre.get("bytes"))
                       and pre.get("error") is None
                       and pre.get("quick_check") not in ([], ["ok"], None))
            if not damaged and file_size(db) != 0:  # an empty store has nothing to keep
                raise RestoreRefused(
                    f"could not keep a verified copy of the current store {db} before "
                    f"restoring ({pre.get('error') or 'the copy did not verify'}); not "
                    "restored, the store is unchanged.",
                    "fix the cause (free space, the disk), then run `backup restore` again"
                ) from exc
            warnings.append(f"the current store failed quick_check; its copy was kept as the "
                            f"failed snapshot {pre['id']}")
        _refuse_if_held(db, snapshot_id)

    refuse_special_store_files(db, what="restore into the session store")
    dst = sqlite3.connect(os.fspath(db), timeout=BUSY_TIMEOUT_S, isolation_level=None)
    try:
        src = connect_ro(image, timeout=BUSY_TIMEOUT_S)
        try:
            backup_bounded(src, dst)
        finally:
            src.close()
        mode = dst.execute("PRAGMA journal_mode").fetchone()[0]
        if mode.lower() == "wal":
            dst.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()
        after = [r[0] for r in dst.execute("PRAGMA quick_check")]
        check = image_facts(dst)
    finally:
        dst.close()  # the last connection: SQLite checkpoints and removes -wal/-shm
    return pre, warnings, after, check
