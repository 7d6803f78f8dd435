"""Store fixtures: the store a chaos run starts from (SPEC §16.4 ``store:``, §16.6, §12).

``store:`` in a scenario picks one of :data:`FIXTURES` and, optionally, a tmpfs to put the home
on (needed by ``fill_disk``/``free_disk``, SPEC §16.2):

=================  ================================================================================
fixture            what ``<run>/home/state.db`` is when the first role starts
=================  ================================================================================
``empty``          a fresh current-schema store (created with :class:`hermes_state.SessionDB`)
``generated``      a current store with ``sessions`` sessions and ``messages`` messages spread
                   over them (deterministic from the seed; no ``platform_message_id``, so no
                   checker mistakes them for the run's own appends), written in one transaction
``schema_vN``      a store at historical schema version N (1..22) built by
                   :func:`hermes_state.testing.build_fixture` (deterministic data, the
                   gateway's ``sessions/sessions.json`` too); its manifest is written to
                   ``<run>/fixture-manifest.json`` so checkers can verify every row survived
``zeroed``         ``bytes`` zero bytes (default 16384): a damaged store (SPEC §12 quarantine)
``empty_file``     a 0-byte ``state.db``
``not_sqlite``     a text file that is not a SQLite database
``duplicate_fts``  a current store (5 sessions, 100 messages, as ``generated``) with a second copy of its FTS insert
                   trigger under another name, as a client that ran an older migration twice
                   leaves it: every later insert would be indexed twice until the open replaces
                   the trigger set whole (SPEC §8)
``newer_not_null`` a store a newer release wrote: schema version 32, and ``messages`` has a
                   NOT NULL column without a default that this code does not know (one session,
                   no message): every append must be refused by name (issue 10 item 2)
=================  ================================================================================

``tmpfs: 16M`` mounts a tmpfs of that size on ``<run>/home`` before the fixture is written (root
only; ``mount -t tmpfs``). When it cannot be mounted the run is not started:
:class:`TmpfsUnavailable` carries the reason and the runner records every checker as SKIPPED
with it (SPEC §16.3: never a false PASS).

Every fixture also leaves a verified online backup of itself in ``<run>/sources/backup.db`` when
the scenario's nemesis asks for ``replace_db`` with ``source: backup`` (see
:mod:`chaos.nemesis.files`).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from . import store
from .fs import tmpfs_guard

#: Fixture names (``schema_v1`` .. ``schema_v22`` are matched by :data:`SCHEMA_FIXTURE_RE`).
FIXTURES = ("empty", "generated", "zeroed", "empty_file", "not_sqlite", "duplicate_fts",
            "newer_not_null")
#: The ``newer_not_null`` fixture's schema version and its column this code does not write.
NEWER_VERSION, NEWER_COLUMN = 32, "reasoning_kind"
SCHEMA_FIXTURE_RE = re.compile(r"^schema_v([1-9]|1[0-9]|2[0-2])$")
SCHEMA_FIXTURES = tuple(f"schema_v{n}" for n in range(1, 23))
#: The parameters of a fixture and their defaults (a parameter belongs to its fixture only).
FIXTURE_DEFAULTS = {"generated": {"sessions": 20, "messages": 1000}, "zeroed": {"bytes": 16384}}
#: Sessions and messages of the ``duplicate_fts`` fixture (it takes no parameter).
DUPLICATE_FTS_SIZE = {"sessions": 5, "messages": 100}
#: The name of the second FTS insert trigger of the ``duplicate_fts`` fixture.
DUPLICATE_FTS_TRIGGER = "legacy_messages_fts_insert_copy"
SIZE_RE = re.compile(r"^(?P<num>[1-9][0-9]*)(?P<unit>[KMG])$")
_UNITS = {"K": 1024, "M": 1024 ** 2, "G": 1024 ** 3}
#: Smallest and largest tmpfs a scenario may ask for (bytes).
TMPFS_MIN = 1024 ** 2
TMPFS_MAX = 1024 ** 3
MANIFEST_NAME = store.FIXTURE_MANIFEST

_WORDS = ("deploy docker build session gateway agent memory search index commit checkpoint retry "
          "lock writer reader profile cron desktop token usage title lineage split compression "
          "message tool result error log fix test python sqlite wal frame page btree").split()


class TmpfsUnavailable(RuntimeError):
    """The store's tmpfs could not be mounted (not root, no ``mount``, a container without the
    capability...). ``str(exc)`` is the reason; the run is recorded as SKIPPED, never PASS."""


def parse_size(text: str) -> int:
    """``"16M"`` -> 16777216 bytes. Units K, M, G (powers of 1024).

    Raises:
        ValueError: not ``<positive integer><K|M|G>``.
    """
    m = SIZE_RE.match(str(text))
    if not m:
        raise ValueError(f"bad size {text!r}: expected a positive integer with a unit K, M or G "
                         "(e.g. '16M')")
    return int(m["num"]) * _UNITS[m["unit"]]


def schema_version_of(fixture: str) -> int | None:
    """N for ``schema_vN`` (1..22), else None."""
    m = SCHEMA_FIXTURE_RE.match(fixture)
    return int(m.group(1)) if m else None


def is_fixture_name(fixture: str) -> bool:
    """True for a name :func:`prepare_store` knows."""
    return fixture in FIXTURES or schema_version_of(fixture) is not None


def sources_dir(db_path: Path) -> Path:
    """``<run>/sources``: stores the nemesis copies over the live one (``replace_db``).

    The run layout is ``<run>/home/state.db``, so this is ``db_path.parent.parent / "sources"``:
    outside the home (and outside a tmpfs the home may be on).
    """
    return store.run_dir_of(db_path).sources


# ------------------------------------------------------------------------------- tmpfs
#: Hang guard for the tmpfs guard process to exit once the run let go of its mount (s).
GUARD_EXIT_S = 30.0


@dataclass
class Mount:
    """A tmpfs this run mounted (:func:`mount_tmpfs`); :meth:`unmount` once the run is checked.

    ``guard``: the process that unmounts it if this one dies first (its lifeline is
    ``lifeline_w``, the write end of a pipe only this process holds).
    """

    path: Path
    size: int
    guard: subprocess.Popen | None = None
    lifeline_w: int | None = None

    def unmount(self) -> None:
        """Copy the home's files out of the tmpfs, unmount it, and put the copy in its place, so
        the run directory keeps the final store, captures and spool after the mount is gone.

        Raises:
            TmpfsUnavailable: ``umount`` failed (the guard then detaches it lazily).
        """
        try:
            keep = self.path.with_name(self.path.name + ".from-tmpfs")
            shutil.copytree(self.path, keep, symlinks=True,
                            ignore=shutil.ignore_patterns(store.BALLOON_NAME))  # no evidence
            proc = subprocess.run(["umount", str(self.path)], capture_output=True, text=True)
            if proc.returncode != 0:
                raise TmpfsUnavailable(f"umount {self.path} failed: {proc.stderr.strip()}")
            self.path.rmdir()
            keep.rename(self.path)
        finally:
            self.release_guard()

    def release_guard(self) -> None:
        """Close the lifeline and reap the guard (it unmounts whatever is still mounted)."""
        if self.lifeline_w is not None:
            os.close(self.lifeline_w)
            self.lifeline_w = None
        if self.guard is not None:
            try:
                self.guard.wait(timeout=GUARD_EXIT_S)
            except subprocess.TimeoutExpired:
                self.guard.kill()
                self.guard.wait()
            self.guard = None


def sweep_stale_tmpfs() -> list[dict]:
    """Rescue and unmount every run tmpfs whose runner is dead (:func:`chaos.fs.tmpfs_guard.sweep`;
    the disk balloon is not copied)."""
    return tmpfs_guard.sweep(ignore=(store.BALLOON_NAME,))


def mount_tmpfs(path: Path, size: int) -> Mount:
    """Mount a tmpfs of ``size`` bytes on the (empty) directory ``path`` (SPEC §16.2), with a
    guard process (:mod:`chaos.fs.tmpfs_guard`) that unmounts it if this process dies first.

    Raises:
        TmpfsUnavailable: not root, ``mount`` missing, or the mount failed (its stderr).
    """
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        raise TmpfsUnavailable("mounting a tmpfs needs root (the store's disk-full faults need a "
                               "small filesystem of their own)")
    source = tmpfs_guard.source_of()
    try:
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", source,
                               str(path)], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise TmpfsUnavailable(f"cannot run mount: {exc}") from exc
    if proc.returncode != 0:
        raise TmpfsUnavailable(f"mount -t tmpfs on {path} failed: "
                               f"{proc.stderr.strip() or proc.returncode}")
    life_r, life_w = os.pipe()
    try:
        guard = subprocess.Popen(
            [sys.executable, "-m", "chaos.fs.tmpfs_guard", str(path.absolute()), source,
             str(life_r), store.BALLOON_NAME], stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, pass_fds=(life_r,), cwd="/",
            start_new_session=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
                + [str(Path(__file__).resolve().parents[1])])})
    except OSError:
        os.close(life_w)
        guard, life_w = None, None
    finally:
        os.close(life_r)
    return Mount(path, size, guard, life_w)


# ------------------------------------------------------------------------------- fixtures
def prepare_store(store: dict, db_path: Path, *, seed: int = 0,
                  need_backup: bool = False) -> dict:
    """Write the fixture ``store`` describes at ``db_path`` (SPEC §16.4).

    Args:
        store: the resolved ``store:`` mapping: ``fixture`` and its parameters (``sessions``,
            ``messages`` for ``generated``; ``bytes`` for ``zeroed``). ``tmpfs`` is not handled
            here (see :func:`mount_tmpfs`).
        db_path: ``<run>/home/state.db``; its directory exists; the file must not.
        seed: the run seed (``generated`` and ``schema_vN`` content follow it).
        need_backup: also write ``<run>/sources/backup.db`` (an online backup of the fixture).
    Returns:
        Details for the history: ``fixture``, ``bytes`` (size of state.db), and per fixture
        ``sessions``/``messages`` or ``version``; ``backup`` (path) when written.
    Raises:
        ValueError: unknown fixture name.
    """
    fixture = store.get("fixture", "empty")
    out: dict = {"fixture": fixture}
    version = schema_version_of(fixture)
    if fixture == "empty":
        _current_store(db_path, 0, 0, seed)
    elif fixture in ("generated", "duplicate_fts"):
        given = ({**FIXTURE_DEFAULTS["generated"], **store} if fixture == "generated"
                 else DUPLICATE_FTS_SIZE)
        n_s, n_m = int(given["sessions"]), int(given["messages"])
        _current_store(db_path, n_s, n_m, seed)
        out.update(sessions=n_s, messages=n_m)
        if fixture == "duplicate_fts":
            _duplicate_fts_trigger(db_path)
    elif version is not None:
        from hermes_state.testing import build_fixture

        manifest = build_fixture(db_path, version, seed=seed)
        (db_path.parent.parent / MANIFEST_NAME).write_text(
            json.dumps(manifest, default=str, ensure_ascii=False) + "\n", encoding="utf-8")
        out.update(version=version, counts=manifest["counts"])
    elif fixture == "newer_not_null":
        _current_store(db_path, 1, 0, seed)
        _newer_not_null(db_path)
        out.update(version=NEWER_VERSION)
    elif fixture == "zeroed":
        db_path.write_bytes(b"\0" * int(store.get("bytes", FIXTURE_DEFAULTS["zeroed"]["bytes"])))
    elif fixture == "empty_file":
        db_path.write_bytes(b"")
    elif fixture == "not_sqlite":
        db_path.write_text("this is not a SQLite database: a chaos fixture (SPEC §12)\n" * 40)
    else:
        raise ValueError(f"unknown store fixture {fixture!r}")
    out["bytes"] = db_path.stat().st_size
    os.chmod(db_path, 0o600)
    if need_backup:
        out["backup"] = str(backup_copy(db_path, sources_dir(db_path) / "backup.db"))
    return out


def backup_copy(db_path: Path, dest: Path) -> Path:
    """An online backup (SQLite backup API, ``mode=ro`` source) of ``db_path`` to ``dest``.

    A non-SQLite fixture is copied byte for byte (there is nothing for the backup API to read).
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        dest.unlink()
    head = db_path.read_bytes()[:16]
    if head != b"SQLite format 3\x00":
        dest.write_bytes(db_path.read_bytes())
        return dest
    src = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    dst = sqlite3.connect(str(dest))
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()
    return dest


def other_store(path: Path, seed: int = 0) -> Path:
    """A small current-schema store of its own (its own generation token, SPEC §10.1) at
    ``path``: 2 sessions, 6 messages without payload ids. Returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    for p in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
        if p.exists():
            p.unlink()
    _current_store(path, 2, 6, seed + 1)
    return path


def _duplicate_fts_trigger(db_path: Path) -> None:
    """Add :data:`DUPLICATE_FTS_TRIGGER`: the store's own FTS insert trigger under another name
    (raw sqlite3: no code of the store would write it)."""
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    try:
        row = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'trigger' AND name = "
                           "'messages_fts_insert'").fetchone()
        if row is None:
            raise ValueError("the current store has no messages_fts_insert trigger to duplicate")
        conn.execute(row[0].replace("messages_fts_insert", DUPLICATE_FTS_TRIGGER, 1))
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _newer_not_null(db_path: Path) -> None:
    """Make a current store look written by a newer release (raw sqlite3): ``messages`` gets
    :data:`NEWER_COLUMN` ``TEXT NOT NULL`` without a default (added with one, which the
    table's SQL then loses, as a release that created the table so would have it), and
    ``schema_version`` says :data:`NEWER_VERSION`."""
    conn = sqlite3.connect(str(db_path), isolation_level=None)
    try:
        conn.execute(f"ALTER TABLE messages ADD COLUMN {NEWER_COLUMN} TEXT NOT NULL DEFAULT ''")
        sql = conn.execute("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = "
                           "'messages'").fetchone()[0]
        conn.execute("BEGIN")
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute("UPDATE sqlite_master SET sql = ? WHERE type = 'table' AND name = 'messages'",
                     (sql.replace(f"{NEWER_COLUMN} TEXT NOT NULL DEFAULT ''",
                                  f"{NEWER_COLUMN} TEXT NOT NULL"),))
        version = conn.execute("PRAGMA schema_version").fetchone()[0]
        conn.execute(f"PRAGMA schema_version={version + 1}")
        conn.execute("PRAGMA writable_schema=OFF")
        conn.execute("UPDATE schema_version SET version = ?", (NEWER_VERSION,))
        conn.execute("COMMIT")
        if conn.execute("PRAGMA integrity_check").fetchone()[0] != "ok":
            raise ValueError("the newer_not_null fixture is not intact")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def _current_store(db_path: Path, n_sessions: int, n_messages: int, seed: int) -> None:
    """Create a current-schema store; fill it in one write transaction; checkpoint; close."""
    from hermes_state import SessionDB
    from hermes_state.testing import append_messages

    db = SessionDB(db_path)
    try:
        if n_sessions:
            rng = random.Random(f"fixture:{seed}")
            sids = [f"fx-s{i:04d}" for i in range(n_sessions)]
            for sid in sids:
                db.create_session(sid, source="fixture")
            rows = []
            for k in range(n_messages):
                sid = sids[k % n_sessions]
                words = " ".join(rng.choice(_WORDS) for _ in range(rng.randint(8, 40)))
                rows.append((sid, ("user", "assistant")[k % 2], f"fixture message {k} {words}"))
            append_messages(db, rows)
    finally:
        db.close()
