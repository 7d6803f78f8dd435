"""``doctor --bundle FILE``: one file describing a store for a bug report (SPEC §9.4; issue 25).

The bundle is JSON, indented, opening with an ``about`` header that says what it holds and that it
holds no message text. It is collected read-only: the store's files are read through plain
descriptors (never symlinks, never FIFOs), ``/proc`` is read for the processes and their locks, and
the store's contents are read from an in-memory image (``state.db`` with the committed WAL frames
applied: :func:`hermes_state.files.sqlite_format.wal_image`), so no SQLite connection opens the
store, no lock is taken, no ``-wal``/``-shm`` is created and a store that is locked, damaged,
half-migrated or held by a retired generation is read all the same. Every section runs with a
deadline; what could not be collected is listed in ``not_collected`` with the reason.

Never included: message text, titles, tool calls, system prompts, session ids (hashed with a key
made for this bundle and not kept: equal ids hash equal within the file, and only there), state
values other than known flags, command-line words other than programs, subcommands and flags.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shutil
import sqlite3
import sys
import threading
import time
from importlib import metadata
from pathlib import Path

from ..files import sqlite_format as fmt
from ..files.atomic import open_regular, read_json, write_file
from ..processes import checkpoint_lock
from ..processes.checkpoint_lock import LOCK_SUFFIX, wal_reset_exposure
from . import bundle_processes
from .bundle_contents import (
    Hasher,
    file_info,
    iso,
    read_contents,
    read_head,
)

BUNDLE_FORMAT = 1
#: Seconds one section may take; the whole bundle is bounded by :data:`TOTAL_BUDGET_S`.
SECTION_TIMEOUT_S = 10.0
TOTAL_BUDGET_S = 30.0
CAPTURE_MANIFEST_KEYS = ("version", "trigger", "pid", "captured_at", "python", "sqlite", "wal",
                         "shm", "main", "path_generation_at_capture")

ABOUT = [
    "hermes-state diagnostic bundle: the state of one session store, for a bug report.",
    "Made by `hermes-state doctor --bundle FILE`, read-only: no SQLite connection opened the "
    "store, no lock was taken, nothing was written beside it.",
    "It contains: versions (hermes-state, Python, SQLite and its WAL-reset exposure); the store's "
    "files and sizes; the database header, the WAL header and frame counts, the wal-index header "
    "(mxFrame, nBackfill, read marks); every process holding the store with its role (from its "
    "command line), its state and the SQLite locks it holds (from /proc/locks); retired WAL "
    "generations and their holders; captures and their manifests; spool files; the live-writer "
    "gate; counts, sizes and the schema and FTS layout of the contents; what could not be "
    "collected and why.",
    "It contains NO message text: no message, title, tool call, system prompt or state value; "
    "session ids are hashed with a key made for this file and not kept; command-line words "
    "other than program names, subcommands and flags are replaced by their length.",
    "Read it before you attach it (it is plain JSON).",
]


class _Sections:
    """Runs each section with a deadline, keeping what failed or timed out and why."""

    def __init__(self, budget_s: float) -> None:
        self.deadline = time.monotonic() + budget_s
        self.not_collected: list[dict] = []
        self.timings: dict[str, float] = {}

    def run(self, name: str, fn, *args):
        box: dict = {}

        def target() -> None:
            try:
                box["value"] = fn(*args)
            except Exception as exc:  # noqa: BLE001 - a section that fails is reported, not fatal
                box["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"

        t0 = time.monotonic()
        worker = threading.Thread(target=target, name=f"bundle-{name}", daemon=True)
        worker.start()
        worker.join(max(0.05, min(SECTION_TIMEOUT_S, self.deadline - t0)))
        self.timings[name] = round(time.monotonic() - t0, 3)
        if worker.is_alive():
            self.not_collected.append({"section": name, "why": (
                f"did not finish within {self.timings[name]:g}s (a hung filesystem or a very "
                "large store); left out")})
            return None
        if "error" in box:
            self.not_collected.append({"section": name, "why": box["error"]})
            return None
        return box.get("value")

    def skip(self, name: str, why: str) -> None:
        self.not_collected.append({"section": name, "why": why})


# ---------------------------------------------------------------------------- small readers


def _version() -> str:
    """The installed hermes-state's version (package metadata), or ``"unknown"``."""
    try:
        return metadata.version("hermes-state")
    except metadata.PackageNotFoundError:
        return "unknown"

def _mount_of(path: Path) -> dict:
    """Filesystem type and mount point of ``path`` from ``/proc/mounts`` (longest prefix)."""
    try:
        lines = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return {}
    real = os.path.realpath(path)
    best: dict = {}
    for line in lines:
        parts = line.split()
        if len(parts) < 3:
            continue
        point = parts[1].replace("\\040", " ")
        if (real == point or real.startswith(point.rstrip("/") + "/")) and len(point) >= len(
                best.get("mount_point", "")):
            best = {"mount_point": point, "fs_type": parts[2]}
    return best


# ---------------------------------------------------------------------------- sections

def _versions(db: Path) -> dict:
    text = wal_reset_exposure()
    lock = db.with_name(db.name + LOCK_SUFFIX)
    return {"hermes_state": _version(), "python": platform.python_version(),
            "python_implementation": platform.python_implementation(),
            "sqlite": sqlite3.sqlite_version, "platform": platform.platform(terse=True),
            "wal_reset": {"exposed": text is not None, "text": text,
                          "checkpoint_lock_file": file_info(lock),
                          "checkpoint_lock_disabled_by_env": checkpoint_lock.disabled_by_env()}}


def _store_files(db: Path) -> dict:
    files = {name: file_info(db.with_name(name)) for name in (
        db.name, f"{db.name}-wal", f"{db.name}-shm", f"{db.name}-journal",
        f"{db.name}{LOCK_SUFFIX}")}
    out: dict = {"path": str(db), "exists": files[db.name] is not None, "files": files}
    try:
        du = shutil.disk_usage(db.parent)
        out["disk"] = {"total_bytes": du.total, "free_bytes": du.free, **_mount_of(db.parent)}
        vfs = os.statvfs(db.parent)
        out["disk"]["free_inodes"] = vfs.f_favail
    except OSError as exc:
        out["disk"] = {"error": exc.strerror}
    out["directory_writable"] = os.access(db.parent, os.W_OK | os.X_OK)
    return out


def _sqlite_headers(db: Path) -> dict:
    """The database header, the WAL header and the wal-index header (two reads when a writer
    changed the wal-index in between)."""
    out: dict = {}
    head = read_head(db, fmt.DB_HEADER_SIZE)
    out["db_header"] = None if head is None else (fmt.db_header(head) or {
        "not_sqlite": True, "first_bytes_all_zero": not any(head), "bytes_read": len(head)})
    wal_head = read_head(Path(f"{db}-wal"), fmt.WAL_HEADER_SIZE)
    wal = None if wal_head is None else fmt.wal_header(wal_head)
    wal_size = (file_info(Path(f"{db}-wal")) or {}).get("bytes")
    out["wal_header"] = None
    if wal is not None:
        out["wal_header"] = {**wal, "magic": hex(wal["magic"]), "salt1": hex(wal["salt1"]),
                             "salt2": hex(wal["salt2"]),
                             "big_endian_checksums": bool(wal["magic"] & 1),
                             "frames_in_file": fmt.wal_frame_count(wal_size or 0,
                                                                   wal["page_size"])}
    elif wal_head:
        out["wal_header"] = {"not_a_wal": True, "bytes_read": len(wal_head)}
    idx = None
    for _ in range(3):
        raw = read_head(Path(f"{db}-shm"), fmt.WAL_INDEX_HEADER_SIZE)
        idx = None if raw is None else fmt.wal_index_header(raw)
        if idx is None or idx["copies_agree"]:
            break
    if idx is not None:
        same = wal is not None and (idx["salt1"], idx["salt2"]) == (wal["salt1"], wal["salt2"])
        idx = {**idx, "salt1": hex(idx["salt1"]), "salt2": hex(idx["salt2"]),
               "frames_not_checkpointed": max(0, idx["mx_frame"] - idx["n_backfill"]),
               "salts_match_wal": same,
               "read_marks_note": "4294967295 = mark not in use; read mark 0 = reading "
                                  "state.db only"}
    out["wal_index"] = idx
    return out


def _retired(processes: list[dict], db: Path) -> list[dict]:
    """Retired generations (a deleted or replaced sidecar, or a main file, still held): which
    processes hold which, and the WAL header and size of a retired ``-wal``."""
    out = []
    for p in processes:
        if not p.get("retired"):
            continue
        item = {"pid": p["pid"], "role": p.get("role"), "state": p.get("state"),
                "files": p["retired"], "wal": None}
        try:
            for fd in os.listdir(f"/proc/{p['pid']}/fd"):
                link = os.readlink(f"/proc/{p['pid']}/fd/{fd}")
                if f"{db.name}-wal" not in link or not any(r.split(" ")[0] in link
                                                           for r in p["retired"]):
                    continue
                st = os.stat(f"/proc/{p['pid']}/fd/{fd}")
                frames = None
                with open_regular(f"/proc/{p['pid']}/fd/{fd}", follow=True) as fh:  # no FIFO
                    head = fmt.wal_header(fh.read(fmt.WAL_HEADER_SIZE))
                if head is not None:
                    frames = fmt.wal_frame_count(st.st_size, head["page_size"])
                item["wal"] = {"bytes": st.st_size, "inode": st.st_ino, "frames": frames,
                               "salt1": hex(head["salt1"]) if head else None,
                               "checkpoint_seq": head["checkpoint_seq"] if head else None}
                break
        except OSError as exc:
            item["wal_error"] = exc.strerror
        out.append(item)
    return out


def _captures(db: Path) -> dict:
    """Retired-WAL captures with their manifests, and the other evidence files beside the store."""
    from .doctor import EVIDENCE

    captures, evidence = [], []
    for entry in sorted(db.parent.iterdir()):
        if not entry.name.startswith(db.name + "."):
            continue
        if ".retired-wal-" in entry.name:
            item: dict = {"name": entry.name, "is_dir": entry.is_dir() and not entry.is_symlink()}
            if item["is_dir"]:
                item["files"] = {p.name: file_info(p) for p in sorted(entry.iterdir())}
                try:
                    manifest = read_json(entry / "manifest.json", limit=1 << 20)
                    item["manifest"] = ({k: manifest.get(k) for k in CAPTURE_MANIFEST_KEYS}
                                        if isinstance(manifest, dict) else "not an object")
                except (OSError, ValueError) as exc:
                    item["manifest"] = f"unreadable: {type(exc).__name__}"
            captures.append(item)
        elif any(marker in entry.name for marker, _ in EVIDENCE):
            evidence.append({"name": entry.name, **(file_info(entry) or {})})
    snaps = db.parent / "state-snapshots"
    snapshots = None
    if snaps.is_dir() and not snaps.is_symlink():
        snapshots = sorted(p.name.split("-")[0] for p in snaps.iterdir() if p.is_dir())
    return {"captures": captures, "evidence_files": evidence, "snapshot_stamps": snapshots}


def _spool(db: Path, imported: set[str] | None, hasher: Hasher) -> dict:
    """Spool files (``<home>/sessions/*.jsonl``): per file the hashed session, records, bytes,
    and how many are not imported yet (``imported``: the spool ids the store marked imported,
    None when the contents could not be read)."""
    from ..api.spool import scan_spool

    spool_dir = db.parent / "sessions"
    if spool_dir.is_symlink():
        return {"directory": "a symbolic link (not read)", "files": []}
    if not spool_dir.is_dir():
        return {"directory": "absent", "files": []}
    files = []
    pending_total = 0
    for f in sorted(spool_dir.glob("*.jsonl")):
        item = {"session": hasher(f.stem), **(file_info(f) or {})}
        try:
            records, bad = scan_spool(f)
            item["records"] = len(records)
            item["unreadable_lines"] = len(bad)
            if imported is not None:
                ids = [r.get("spool_id") for _, r in records]
                item["pending"] = sum(1 for i in ids if not isinstance(i, str) or i not in imported)
                pending_total += item["pending"]
        except (OSError, ValueError) as exc:
            item["error"] = type(exc).__name__
        files.append(item)
    return {"directory": "present", "files": files,
            "pending": pending_total if imported is not None else None}


def _events(contents: dict | None, captures: dict | None, spool: dict | None) -> dict:
    """The store keeps no event log of its own: the timestamped records it does keep."""
    items = []
    meta = (contents or {}).get("state_meta") or {}
    for rec in meta.get("maintenance_results") or []:
        items.append({"at": rec.get("at"), "what": f"maintenance {rec.get('command')} ran "
                                                  f"(pruned {rec.get('pruned')})"})
    for rec in meta.get("maintenance_requests") or []:
        items.append({"at": rec.get("requested_at"), "what": f"maintenance {rec.get('command')} "
                                                             "requested, not run yet"})
    owner = meta.get("gateway_owner") or {}
    if owner.get("since"):
        items.append({"at": owner["since"], "what": f"gateway PID {owner.get('pid')} claimed "
                                                    "the store"})
    flags = meta.get("flags") or {}
    if re.fullmatch(r"\d+(\.\d+)?", str(flags.get("last_auto_prune", ""))):
        items.append({"at": iso(float(flags["last_auto_prune"])), "what": "automatic prune"})
    for cap in (captures or {}).get("captures") or []:
        manifest = cap.get("manifest") if isinstance(cap.get("manifest"), dict) else {}
        items.append({"at": manifest.get("captured_at"), "what": (
            f"retired WAL captured by PID {manifest.get('pid')} ({manifest.get('trigger')})")})
    for f in (spool or {}).get("files") or []:
        items.append({"at": f.get("mtime"), "what": f"spool file {f['session']} last written"})
    items = [i for i in items if i["at"]]
    items.sort(key=lambda i: str(i["at"]))
    return {"note": "the store keeps no event log of its own; these are the timestamped "
                    "records it keeps (maintenance requests and results, the gateway's claim, "
                    "the automatic prune, captures, spool files)",
            "recent": items[-30:]}


def _gate(contents: dict | None, processes: dict | None, versions: dict | None) -> dict:
    procs = (processes or {}).get("processes") or []
    meta = (contents or {}).get("state_meta") or {}
    lock_file = ((versions or {}).get("wal_reset") or {}).get("checkpoint_lock_file")
    holders_ = [{"pid": p["pid"], "role": p["role"], "mode": lk["mode"], "waiting": lk["waiting"],
                 "state": p["state"]}
                for p in procs for lk in p.get("locks", []) if lk["file"].endswith(LOCK_SUFFIX)]
    return {"gateway_owner": meta.get("gateway_owner"),
            "pending_requests": len(meta.get("maintenance_requests") or []),
            "checkpoint_lock": {"file": lock_file, "holders": holders_},
            "maintenance_running": [{"pid": p["pid"], **(p.get("maintenance") or {})}
                                    for p in procs if p.get("role") == "maintenance"],
            "would_refuse_now": bool(procs) or not ((processes or {}).get("scan") or {}).get(
                "complete", True),
            "note": "a gated command (optimize, optimize-storage, prune, salvage, backup "
                    "restore) refuses while any process holds the store; `would_refuse_now` "
                    "is that decision for this moment"}


# ---------------------------------------------------------------------------- the bundle

def make_bundle(db_path: str | os.PathLike, *, budget_s: float = TOTAL_BUDGET_S) -> dict:
    """Collect the bundle of one store (SPEC §9.4). Never creates, opens with SQLite or locks
    the store; never raises for a store that is absent, locked, damaged or half-migrated.

    Args:
        db_path: ``state.db`` (need not exist).
        budget_s: seconds for the whole collection (each section also at most
            :data:`SECTION_TIMEOUT_S`); what did not finish is in ``not_collected``.
    Returns:
        The bundle as a JSON-ready dict (``about`` first).
    """
    db = Path(db_path).absolute()
    started = time.monotonic()
    hasher = Hasher()
    s = _Sections(budget_s)
    b: dict = {"about": ABOUT, "bundle": {"format": BUNDLE_FORMAT, "made_by": (
        f"hermes-state {_version()} doctor --bundle"), "created_at": iso(time.time()),
        "pid": os.getpid(), "ids": "session ids and other names are hmac-sha256 with a "
                                   "key made for this file and not kept: h:<12 hex>"}}
    b["versions"] = s.run("versions", _versions, db)
    b["store"] = s.run("store", _store_files, db)
    b["sqlite_files"] = s.run("sqlite_files", _sqlite_headers, db) or {}
    if not sys.platform.startswith("linux"):
        s.skip("processes", "partly: no /proc on this platform; holders come from psutil "
                            "(deleted files are invisible there), locks and process states are "
                            "not read")
    procs = s.run("processes", bundle_processes.collect, db,
                  b["sqlite_files"].get("wal_index"))
    b["processes"] = procs
    plist = (procs or {}).get("processes") or []
    b["retired_generations"] = s.run("retired_generations", _retired, plist, db)
    contents = None
    if (b.get("store") or {}).get("exists"):
        contents = s.run("contents", read_contents, db, b["sqlite_files"], hasher,
                         min(s.deadline, time.monotonic() + SECTION_TIMEOUT_S))
    else:
        s.skip("contents", f"no store at {db}: nothing to read (the bundle creates nothing)")
    b["contents"] = contents
    b["writer_gate"] = s.run("writer_gate", _gate, contents, procs, b.get("versions"))
    caps = s.run("captures", _captures, db) if db.parent.is_dir() else None
    b["captures"] = caps
    imported = ((contents or {}).get("state_meta") or {}).pop("_imported", None)
    b["spool"] = s.run("spool", _spool, db, imported, hasher) if db.parent.is_dir() else None
    b["events"] = s.run("events", _events, contents, caps, b.get("spool"))
    b["not_collected"] = s.not_collected
    b["timings_s"] = {**s.timings, "total": round(time.monotonic() - started, 3)}
    return b


def render(bundle: dict) -> str:
    """The bundle as the file holds it: indented JSON, keys in collection order, a final newline."""
    return json.dumps(bundle, indent=2, ensure_ascii=False, default=str) + "\n"


def write_bundle(bundle: dict, out: str | os.PathLike) -> Path | None:
    """Write ``bundle`` to ``out`` (atomically, replacing a regular file; never through a
    symlink), or to stdout when ``out`` is ``-`` (returns None then)."""
    text = render(bundle)
    if os.fspath(out) == "-":
        sys.stdout.write(text)
        return None
    return write_file(Path(out), text, replace=True)


def summary_lines(bundle: dict, path: Path | None) -> list[str]:
    """What ``doctor --bundle`` prints on stderr after writing: where, what, what is missing."""
    procs = (bundle.get("processes") or {}).get("processes") or []
    lines = [f"bundle: {path if path is not None else 'stdout'}",
             f"  {len(procs)} process(es) hold the store"
             + (": " + ", ".join(f"PID {p['pid']} {p['role']} {p['state']}" for p in procs[:6])
                if procs else "")]
    for item in bundle.get("not_collected") or []:
        lines.append(f"  not collected: {item['section']}: {item['why']}")
    lines.append("  it holds no message text; read it, then attach it to the issue "
                 "(docs/RECOVERY.md, 'Reporting a problem')")
    return lines
