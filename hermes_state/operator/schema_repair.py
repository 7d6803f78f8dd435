"""``repair_state_db_schema``: repair a store whose schema or search index is malformed
(UPSTREAM_API §2.1; SPEC §12).

SPEC §12 rules, which win over upstream's in-place repair: the repair never runs on the live
file. It refuses while any process (this one included) holds the store, works on a copy of
``state.db`` and its WAL in a private directory beside it, verifies the copy, then keeps a
forensic copy of the damaged files (``state.db.<UTCSTAMP>.malformed-backup``, ``-wal``/``-shm``
appended, SPEC §1) and moves the repaired file into place, the damaged sidecars aside (a leftover WAL would
replay the damage onto the repaired file).

Strategies, tried in this order on the copy:

- ``already_healthy``: schema readable, ``quick_check`` ok, every FTS index passes
  ``integrity-check``; nothing is changed;
- ``rebuild_fts``: only the FTS index is damaged: FTS5 ``'rebuild'`` of each FTS table;
- ``dedup_schema``: ``sqlite_master`` names an object twice ("malformed database schema ...
  already exists"): keep the lowest rowid of each name, then ``VACUUM``;
- ``drop_fts_rebuild``: delete every ``messages_fts*`` object from the schema, ``VACUUM``, and
  create the current FTS layout again from ``messages``.
"""

from __future__ import annotations

import os
import re
import shutil
import sqlite3
from pathlib import Path

from ..files.atomic import (
    PartialDir,
    clean_partials,
    copy_regular,
    fsync_dir,
    move_aside,
    numbered,
)
from ..files.store_files import refuse_special_store_files
from ..files.paths import utc_stamp
from ..processes import holders
from ..schema.tables import create_fts

_FTS_LIKE = "messages\\_fts%"


def repair_partial_re(path: Path) -> re.Pattern:
    """Names of the private directories a repair of ``path`` works in (``.partial``)."""
    return re.compile(rf"\.{re.escape(path.name)}\.repair(-\d+)?\.partial")


def _fts_tables(c: sqlite3.Connection) -> list[str]:
    return [r[0] for r in c.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND sql LIKE 'CREATE VIRTUAL%' "
        "AND name LIKE ? ESCAPE '\\'", (_FTS_LIKE,))]


def _health(path: Path) -> str:
    """``"ok"``, ``"schema"`` (schema unreadable), ``"fts"`` (only FTS damaged) or ``"file"``."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        try:
            conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        except sqlite3.DatabaseError as exc:
            return "schema" if "malformed database schema" in str(exc) else "file"
        try:
            check = [r[0] for r in conn.execute("PRAGMA quick_check")]
        except sqlite3.DatabaseError:
            return "file"
        fts_bad = False
        for table in _fts_tables(conn):
            try:
                conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 1)")
            except sqlite3.DatabaseError:
                fts_bad = True
        if check != ["ok"]:
            return "fts" if all("messages_fts" in line for line in check) else "file"
        return "fts" if fts_bad else "ok"
    finally:
        conn.close()


def _rebuild_fts(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for table in _fts_tables(conn):
            conn.execute(f"INSERT INTO {table}({table}) VALUES ('rebuild')")
    finally:
        conn.close()


def _edit_schema(path: Path, statements: list[tuple[str, tuple]]) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA writable_schema=ON")
        conn.execute("BEGIN")
        for sql, args in statements:
            conn.execute(sql, args)
        conn.execute("COMMIT")
        conn.execute("PRAGMA writable_schema=OFF")
    finally:
        conn.close()
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("VACUUM")  # drops the pages of the removed objects
    finally:
        conn.close()


def _dedup_schema(path: Path) -> None:
    _edit_schema(path, [(
        "DELETE FROM sqlite_master WHERE rowid NOT IN "
        "(SELECT MIN(rowid) FROM sqlite_master GROUP BY name)", ())])


def _drop_fts_rebuild(path: Path) -> None:
    _edit_schema(path, [("DELETE FROM sqlite_master WHERE name LIKE ? ESCAPE '\\'",
                         (_FTS_LIKE,))])
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        create_fts(conn)
        conn.execute("COMMIT")
    finally:
        conn.close()


_STRATEGIES = {"fts": ("rebuild_fts", "drop_fts_rebuild"),
               "schema": ("dedup_schema", "drop_fts_rebuild")}
_ACTIONS = {"rebuild_fts": _rebuild_fts, "dedup_schema": _dedup_schema,
            "drop_fts_rebuild": _drop_fts_rebuild}


def _copy_store(src: Path, dst: Path) -> None:
    """The live ``state.db`` and its WAL into the private directory (regular files only)."""
    copy_regular(src, dst)
    wal = Path(f"{src}-wal")
    if os.path.lexists(wal):
        copy_regular(wal, Path(f"{dst}-wal"))


def _fold_wal(path: Path) -> None:
    """Apply a copied WAL into the copy's main file (so the copy is one file)."""
    if not Path(f"{path}-wal").exists():
        return
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA writable_schema=ON")  # a malformed schema must not stop this
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


def repair_state_db_schema(db_path: str | os.PathLike, *, backup: bool = True) -> dict:
    """Repair a malformed schema or search index (module docstring).

    Args:
        db_path: ``state.db``.
        backup: keep the damaged files as ``<name>.<UTCSTAMP>.malformed-backup``; with False
            they are deleted once the repaired file is in place.
    Returns:
        ``{"repaired": bool, "strategy": str | None, "backup_path": str | None,
        "error": str | None}``; ``error`` is ``"<path> does not exist"`` for a missing file,
        names the holders when another process (or this one) has the store open, or says why
        no strategy produced a sound copy. Never raises for a damaged store.
    """
    path = Path(db_path).absolute()
    out: dict = {"repaired": False, "strategy": None, "backup_path": None, "error": None}
    if not os.path.lexists(path):
        out["error"] = f"{path} does not exist"
        return out
    try:  # a link, FIFO or device at a store path: named, never copied (issue 22 item 9)
        refuse_special_store_files(path, what="repair the session store")
    except OSError as exc:
        out["error"] = getattr(exc, "user_message", str(exc))
        return out
    scan = holders.scan(path, include_self=True)
    if scan.holders or not scan.complete:
        names = ", ".join(h.line() for h in scan.holders) or "processes that cannot be inspected"
        out["error"] = (f"refusing to repair {path} while it is in use ({names}); stop them "
                        "first. Nothing was changed.")
        return out
    # The copies are built in a flock-ed ``.state.db.repair[-N].partial/`` beside the store: a
    # killed repair's copies are removed by the next repair (or named by doctor), issue 11.12.
    clean_partials(path.parent, repair_partial_re(path))
    with PartialDir(path.parent, f".{path.name}.repair") as part:
        tmp = part.path
        work = Path(tmp) / path.name
        _copy_store(path, work)
        _fold_wal(work)
        health = _health(work)
        if health == "ok":
            out["strategy"] = "already_healthy"
            return out
        if health == "file":
            out["error"] = (f"{path} is damaged beyond its schema and search index: run "
                            f"`hermes-state sessions recover {path} --output NEW.db "
                            "--allow-partial`")
            return out
        for strategy in _STRATEGIES[health]:
            attempt = Path(tmp) / f"attempt-{strategy}.db"
            shutil.copyfile(work, attempt)
            try:
                _ACTIONS[strategy](attempt)
                if _health(attempt) == "ok":
                    out["strategy"] = strategy
                    break
            except sqlite3.DatabaseError as exc:
                out["error"] = f"{strategy} failed: {exc}"
        else:
            out["error"] = out["error"] or "no repair strategy produced a sound copy"
            return out
        out["error"] = None
        stamp = utc_stamp()
        for suffix in ("", "-wal", "-shm"):
            live = Path(f"{path}{suffix}")
            if not live.exists():
                continue
            if backup:
                kept = move_aside(live, numbered(Path(f"{path}.{stamp}.malformed-backup{suffix}")))
                if suffix == "":
                    out["backup_path"] = str(kept)
            elif suffix:
                live.unlink()
        os.replace(attempt, path)
        fsync_dir(path.parent)
        out["repaired"] = True
    return out
