"""Reading the final store, retired-WAL captures and spools without touching them (SPEC §16.3).

Checkers never open a run's files in place: ``state.db`` and ``state.db-wal`` are copied to a
temporary directory first (opening a WAL database can write the ``-shm`` and checkpoint on close;
SPEC §14 does the same for ``recover``). The ``-shm`` is not copied
(``docs/decisions/0012-chaos-faults-and-checks.md``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import shutil
import sqlite3
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

CAPTURE_GLOB = "*.retired-wal-*"


@contextlib.contextmanager
def copied_store(db_path: str | Path, name: str = "state.db") -> Iterator[Path]:
    """Copy ``db_path`` and its ``-wal`` (if any) into a temporary directory; yield the copy.

    Raises:
        FileNotFoundError: ``db_path`` does not exist.
    """
    src = Path(db_path)
    if not src.is_file():
        raise FileNotFoundError(f"no store at {src}")
    with tempfile.TemporaryDirectory(prefix="chaos-check-") as tmp:
        dest = Path(tmp) / name
        shutil.copyfile(src, dest)
        wal = Path(f"{src}-wal")
        if wal.is_file():
            shutil.copyfile(wal, Path(f"{dest}-wal"))
        yield dest


def connect_copy(path: Path) -> sqlite3.Connection:
    """A plain connection to a copied store (never to a run's own file)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    return conn


def payload_ids_in_db(db_path: str | Path) -> Counter:
    """``Counter`` of non-NULL ``messages.platform_message_id`` in a store (read from a copy)."""
    with copied_store(db_path) as copy:
        conn = connect_copy(copy)
        try:
            return Counter(str(r[0]) for r in conn.execute(
                "SELECT platform_message_id FROM messages WHERE platform_message_id IS NOT NULL"))
        finally:
            conn.close()


def pre_restore_payload_ids(home: Path) -> Counter:
    """Payload ids in every pre-restore snapshot ``<home>/state-snapshots/*-pre-restore*/``
    (the copy ``backup restore`` keeps of the store it overwrites, SPEC §13); read from copies."""
    found: Counter = Counter()
    for image in sorted((Path(home) / "state-snapshots").glob("*-pre-restore*/state.db")):
        try:
            found.update(payload_ids_in_db(image))
        except (OSError, sqlite3.Error):
            continue  # a failed or half-written snapshot proves nothing
    return found


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of a file's bytes (read in chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass
class Capture:
    """One ``state.db.retired-wal-<UTCSTAMP>-<pid>/`` directory (SPEC §10.3)."""

    path: Path
    manifest: dict | None = None
    problems: list = field(default_factory=list)

    @property
    def pid(self):
        return None if self.manifest is None else self.manifest.get("pid")

    @property
    def valid(self) -> bool:
        return self.manifest is not None and not self.problems


def find_captures(*dirs: Path) -> list[Capture]:
    """Every finished capture directory directly under ``dirs`` (``.partial`` ones excluded),
    each with its manifest validated: JSON, ``version`` 1, ``pid``, ``wal.bytes`` > 0 equal to
    the size of ``state.db-wal`` and ``wal.sha256`` equal to its digest."""
    seen: set[Path] = set()
    out: list[Capture] = []
    for d in dirs:
        if d is None or not Path(d).is_dir():
            continue
        for p in sorted(Path(d).glob(CAPTURE_GLOB)):
            real = p.resolve()
            if real in seen or not p.is_dir() or p.name.endswith(".partial"):
                continue
            seen.add(real)
            out.append(_load_capture(p))
    return out


def _load_capture(path: Path) -> Capture:
    cap = Capture(path)
    mpath = path / "manifest.json"
    try:
        manifest = json.loads(mpath.read_text(encoding="utf-8"))
    except FileNotFoundError:
        cap.problems.append("manifest.json missing")
        return cap
    except (OSError, ValueError) as exc:
        cap.problems.append(f"manifest.json is not valid JSON: {exc}")
        return cap
    if not isinstance(manifest, dict):
        cap.problems.append("manifest.json is not an object")
        return cap
    cap.manifest = manifest
    if manifest.get("version") != 1:
        cap.problems.append(f"manifest version {manifest.get('version')!r} != 1")
    if not isinstance(manifest.get("pid"), int):
        cap.problems.append(f"manifest pid {manifest.get('pid')!r} is not an integer")
    wal = manifest.get("wal")
    wal_file = path / "state.db-wal"
    if not isinstance(wal, dict):
        cap.problems.append("manifest has no wal object")
    elif not wal_file.is_file():
        cap.problems.append("state.db-wal missing from the capture")
    else:
        size = wal_file.stat().st_size
        if not isinstance(wal.get("bytes"), int) or wal["bytes"] <= 0:
            cap.problems.append(f"wal.bytes {wal.get('bytes')!r} is not > 0")
        elif wal["bytes"] != size:
            cap.problems.append(f"wal.bytes {wal['bytes']} != file size {size}")
        digest = sha256_file(wal_file)
        if wal.get("sha256") != digest:
            cap.problems.append(f"wal.sha256 {wal.get('sha256')!r} != file sha256 {digest}")
    return cap


def payload_ids_in_capture(cap: Capture) -> Counter:
    """Payload ids readable from a capture: its ``state.db`` + ``state.db-wal`` opened as a copy.

    Raises:
        FileNotFoundError / sqlite3.Error: the capture cannot be opened (e.g. header-only main).
    """
    return payload_ids_in_db(cap.path / "state.db")


def spool_payload_ids(home: Path) -> tuple[Counter, list[str]]:
    """Payload ids in ``<home>/sessions/*.jsonl`` spool files (SPEC §10.1).

    Each line is ``{"spool_id", "session_id", "message": {..., "platform_message_id": pid}}``;
    torn or foreign lines are skipped and reported.

    Returns:
        ``(Counter of payload ids, problems)``.
    """
    found: Counter = Counter()
    problems: list[str] = []
    sdir = Path(home) / "sessions"
    if not sdir.is_dir():
        return found, problems
    for path in sorted(sdir.glob("*.jsonl")):
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            problems.append(f"{path.name}: {exc}")
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except ValueError:
                problems.append(f"{path.name}:{n}: not JSON (torn line?)")
                continue
            msg = rec.get("message") if isinstance(rec, dict) else None
            pid = msg.get("platform_message_id") if isinstance(msg, dict) else None
            if pid is None:
                problems.append(f"{path.name}:{n}: no message.platform_message_id")
                continue
            found[str(pid)] += 1
    return found, problems
