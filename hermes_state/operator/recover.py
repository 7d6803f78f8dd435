"""``sessions recover``: inspect a damaged store and salvage its rows into a NEW store (SPEC §14).

Nothing here opens the source with SQLite where it lies. :func:`recover` copies the source file
and its ``-wal``/``-shm`` (and a hot ``-journal``) into a private temporary directory, checks
that size/mtime/inode of every file are the same after the copy as before (else
:class:`SourceChangedError`: "the source changed while it was copied; stop every process using
it"), and works on the copy: opening the copy replays its WAL, which is how a retired-WAL
capture directory (SPEC §10.3, ``--source DIR/state.db``) shows the generation it captured.

Inspection reads every row of every canonical table (:data:`CANONICAL_TABLES`) through the
table's own b-tree, by rowid ranges: ``SELECT rowid, * ... WHERE rowid BETWEEN a AND b`` in
chunks of :data:`CHUNK_ROWIDS` rowids. ``COUNT(*)`` is never trusted (SQLite may answer it from
a healthy index while the table's pages are damaged). A range that raises is bisected down to
single rowids (``WHERE rowid = ?``, a pure seek), so every row on an undamaged page is read and
the unreadable rowid ranges are exact up to the key range of the damaged pages. The rowids an
index still records (a covering scan of an index of the table) give the number of rows those
ranges held.

The choices the SPEC leaves open (report or raise, the rowid space, how the output is built and
published, which ``state_meta`` keys are not copied) are recorded in docs/decisions/0008-recover.md.
Copying the source is :mod:`hermes_state.operator.recover_source`, reading its rows
:mod:`hermes_state.operator.recover_scan`.
"""

from __future__ import annotations

import contextlib
import os
import re
import sqlite3
import stat
import tempfile
import time
from pathlib import Path
from typing import Callable

from .. import failpoints
from ..db import SessionDB
from ..files import atomic
from ..files.paths import owning_store
from ..processes import holders
from ..schema.tables import SCHEMA_VERSION
from .recover_scan import (
    CANONICAL_TABLES,
    TableScan,
    inspect_tables,
    iter_rows,
    open_copy,
    quote_ident,
)
from .recover_source import (
    SOURCE_CHANGED,
    RecoverError,
    RecoverRefused,
    SourceChangedError,
    copy_source,
    source_files,
    source_unchanged,
)

__all__ = [
    "CANONICAL_TABLES",
    "RecoverError",
    "RecoverRefused",
    "SourceChangedError",
    "recover",
]

#: Rows per write transaction in the output store.
INSERT_CHUNK = 500
#: state_meta keys that describe the source file, not data (see the module docstring).
SKIPPED_META_KEYS = ("db_file_generation",)
SKIPPED_META_PREFIXES = ("fts_",)
#: The private working directory (in the temporary directory) and its leftovers' names.
WORK_DIR_STEM = "hermes-recover"
WORK_DIR_RE = re.compile(r"hermes-recover(-\d+)?\.partial")
RECOVERED_SOURCE = "recovered"


# =========================================================================== building the output

class _OutputFailed(Exception):
    """Internal: the output could not be built or verified; the message becomes ``failure``."""


def _meta_skipped(key: object) -> bool:
    return isinstance(key, str) and (key in SKIPPED_META_KEYS
                                     or key.startswith(SKIPPED_META_PREFIXES))


def _insert_chunk(c: sqlite3.Connection, table: str, sql: str, rows: list[tuple],
                  cols: list[str]) -> list[tuple[int, str]]:
    """Insert ``rows`` (each ``(rowid, *values)``); returns ``[(rowid, error)]`` of rejects."""
    c.execute("SAVEPOINT recover_chunk")
    try:
        c.executemany(sql, [r[1:] for r in rows])
        c.execute("RELEASE recover_chunk")
        return []
    except sqlite3.IntegrityError:
        c.execute("ROLLBACK TO recover_chunk")
        c.execute("RELEASE recover_chunk")
    rejected = []
    for row in rows:
        c.execute("SAVEPOINT recover_row")
        try:
            try:
                c.execute(sql, row[1:])
            except sqlite3.IntegrityError as exc:
                if table == "sessions" and "sessions.title" in str(exc):
                    _resolve_title_conflict(c, sql, row, cols)
                else:
                    raise
            c.execute("RELEASE recover_row")
        except sqlite3.IntegrityError as exc:
            c.execute("ROLLBACK TO recover_row")
            c.execute("RELEASE recover_row")
            rejected.append((row[0], str(exc)))
    return rejected


def _resolve_title_conflict(c: sqlite3.Connection, sql: str, row: tuple, cols: list[str]) -> None:
    """Duplicate title: the newest session keeps it, the other gets NULL (SPEC §3)."""
    values = list(row[1:])
    title = values[cols.index("title")]
    started = values[cols.index("started_at")] if "started_at" in cols else None
    other = c.execute("SELECT rowid, started_at FROM sessions WHERE title = ?", (title,)).fetchone()
    if other is not None and started is not None and (other[1] or 0) <= started:
        c.execute("UPDATE sessions SET title = NULL WHERE rowid = ?", (other[0],))
    else:
        values[cols.index("title")] = None
    c.execute(sql, values)


def _build_output(work: sqlite3.Connection, scans: dict[str, TableScan], partial: Path,
                  allow_partial: bool, report: dict) -> dict:
    """Create the new store at ``partial`` and copy every readable row into it; verify it."""
    out: dict = {"inserted": {}, "placeholder_sessions": [], "skipped_state_meta": [],
                 "dropped_columns": {}, "rejected": {}}
    db = SessionDB(partial)
    try:
        conn = db.connection.conn
        baseline = {t: conn.execute(f"SELECT count(*) FROM {quote_ident(t)}").fetchone()[0]
                    for t in CANONICAL_TABLES}
        own_meta = {r[0] for r in conn.execute("SELECT key FROM state_meta")}
        conn.execute("PRAGMA foreign_keys=OFF")
        inserted = {t: 0 for t in CANONICAL_TABLES}
        for table in CANONICAL_TABLES:
            scan = scans[table]
            if not scan.available:
                continue
            target = [r[1] for r in conn.execute(f"PRAGMA table_info({quote_ident(table)})")]
            cols = [c for c in scan.columns if c in target]
            dropped = [c for c in scan.columns if c not in target]
            if dropped:
                out["dropped_columns"][table] = dropped
                report["warnings"].append(f"{table}: source column(s) {', '.join(dropped)} do "
                                          f"not exist in schema {SCHEMA_VERSION} and were not "
                                          f"copied")
            sql = (f"INSERT INTO {quote_ident(table)} ({', '.join(quote_ident(c) for c in cols)}) "
                   f"VALUES ({', '.join('?' * len(cols))})")
            key_at = cols.index("key") + 1 if table == "state_meta" and "key" in cols else None
            copy_scan = TableScan(table, available=True, columns=scan.columns, lo=scan.lo,
                                   hi=scan.hi, open_tail=scan.open_tail, index=scan.index,
                                   index_rowids=scan.index_rowids)
            rejected: list[tuple[int, str]] = []
            chunk: list[tuple] = []

            def flush(rows: list[tuple]) -> None:
                rejected.extend(db.connection.execute_write(
                    lambda c: _insert_chunk(c, table, sql, rows, cols), op="recover"))
                inserted[table] += len(rows)

            for row in iter_rows(work, copy_scan, cols):
                if key_at is not None and (_meta_skipped(row[key_at]) or row[key_at] in own_meta):
                    out["skipped_state_meta"].append(row[key_at])
                    continue
                chunk.append(row)
                if len(chunk) >= INSERT_CHUNK:
                    flush(chunk)
                    chunk = []
            if chunk:
                flush(chunk)
            inserted[table] -= len(rejected)
            if copy_scan.rows != scan.rows or copy_scan.unreadable != scan.unreadable:
                raise _OutputFailed(f"{table}: the second read of the copy differs from the "
                                    f"inspection ({copy_scan.rows} vs {scan.rows} rows)")
            if rejected:
                out["rejected"][table] = [{"rowid": r, "error": e} for r, e in rejected[:100]]
                report["warnings"].append(f"{table}: {len(rejected)} row(s) violate the current "
                                          f"schema's constraints and were not copied "
                                          f"(first: rowid {rejected[0][0]}: {rejected[0][1]})")
                if not allow_partial:
                    raise _OutputFailed(f"{len(rejected)} row(s) of {table} cannot be inserted "
                                        f"into the new store; re-run with --allow-partial to "
                                        f"keep every other row")
        out["inserted"] = dict(inserted)
        out["placeholder_sessions"] = _placeholders(db, conn)
        if out["placeholder_sessions"]:
            n = len(out["placeholder_sessions"])
            report["warnings"].append(
                f"{n} session(s) referenced by other rows have no readable session row; they "
                f"were recreated as placeholders with source='{RECOVERED_SOURCE}'")
        out["recounted_sessions"] = _recount(db, conn)
        if out["recounted_sessions"]:
            report["warnings"].append(
                f"{len(out['recounted_sessions'])} session(s) lost unreadable messages; their "
                "message_count was set to the messages actually recovered")
        _carry_sequence(db, work)
        conn.execute("PRAGMA foreign_keys=ON")
        out.update(_verify_output(conn, baseline, inserted, len(out["placeholder_sessions"])))
    finally:
        db.close()
    for suffix in ("-wal", "-journal"):
        side = Path(f"{partial}{suffix}")
        if side.exists() and side.stat().st_size > 0:
            raise _OutputFailed(f"the new store still has a non-empty {side.name} after close")
    return out


def _placeholders(db, conn: sqlite3.Connection) -> list[str]:
    """Create a ``source='recovered'`` session for every referenced but missing session id."""
    missing = [r[0] for r in conn.execute(
        """SELECT session_id FROM messages WHERE session_id NOT IN (SELECT id FROM sessions)
           UNION SELECT session_id FROM session_model_usage
                 WHERE session_id NOT IN (SELECT id FROM sessions)
           UNION SELECT parent_session_id FROM sessions WHERE parent_session_id IS NOT NULL
                 AND parent_session_id NOT IN (SELECT id FROM sessions)""")
        if r[0] is not None]
    if not missing:
        return []
    now = time.time()

    def insert(c: sqlite3.Connection, part: list[str]) -> None:
        for sid in part:
            first, count = c.execute("SELECT min(timestamp), count(*) FROM messages "
                                     "WHERE session_id = ?", (sid,)).fetchone()
            c.execute("INSERT INTO sessions (id, source, started_at, message_count) "
                      "VALUES (?, ?, ?, ?)",
                      (sid, RECOVERED_SOURCE, first if first is not None else now, count))

    for i in range(0, len(missing), INSERT_CHUNK):
        part = missing[i:i + INSERT_CHUNK]
        db.connection.execute_write(lambda c, part=part: insert(c, part), op="recover")
    return sorted(missing)


def _recount(db, conn: sqlite3.Connection) -> list[str]:
    """Set ``sessions.message_count`` to the recovered rows where they differ (SPEC §14, §16.3).

    With ``--allow-partial`` a session whose messages sat on unreadable pages keeps its copied
    counter while fewer rows arrive; the new store must be consistent (its counter equals its
    rows). Returns the ids of the sessions changed, sorted.
    """
    stale = [r[0] for r in conn.execute(
        "SELECT s.id FROM sessions s LEFT JOIN messages m ON m.session_id = s.id GROUP BY s.id "
        "HAVING COALESCE(s.message_count, 0) != COUNT(m.id)")]
    if stale:
        def fn(c: sqlite3.Connection) -> None:
            for i in range(0, len(stale), INSERT_CHUNK):
                part = stale[i:i + INSERT_CHUNK]
                marks = ",".join("?" * len(part))
                c.execute("UPDATE sessions SET message_count = (SELECT COUNT(*) FROM messages m "
                          f"WHERE m.session_id = sessions.id) WHERE id IN ({marks})", part)

        db.connection.execute_write(fn, op="recover")
    return sorted(stale)


def _carry_sequence(db, work: sqlite3.Connection) -> None:
    """Keep the source's AUTOINCREMENT high-water mark so lost message ids are never reused."""
    try:
        row = work.execute("SELECT seq FROM sqlite_sequence WHERE name='messages'").fetchone()
    except sqlite3.Error:
        return
    if row is None or row[0] is None:
        return
    seq = int(row[0])

    def fn(c: sqlite3.Connection) -> None:
        cur = c.execute("UPDATE sqlite_sequence SET seq = max(seq, ?) WHERE name = 'messages'",
                        (seq,))
        if cur.rowcount == 0:
            c.execute("INSERT INTO sqlite_sequence (name, seq) VALUES ('messages', ?)", (seq,))

    db.connection.execute_write(fn, op="recover")


def _verify_output(conn: sqlite3.Connection, baseline: dict, inserted: dict,
                   placeholders: int) -> dict:
    """integrity_check ok, foreign_key_check empty, counts match, FTS consistent (SPEC §14)."""
    integrity = [r[0] for r in conn.execute("PRAGMA integrity_check")]
    fk = [list(r) for r in conn.execute("PRAGMA foreign_key_check")]
    counts = {t: conn.execute(f"SELECT count(*) FROM {quote_ident(t)}").fetchone()[0]
              for t in CANONICAL_TABLES}
    expected = {t: baseline[t] + inserted[t] + (placeholders if t == "sessions" else 0)
                for t in CANONICAL_TABLES}
    fts = {}
    for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table' AND sql LIKE "
                                "'CREATE VIRTUAL TABLE%fts5%' AND name LIKE 'messages_fts%'"):
        try:
            conn.execute(f"INSERT INTO {quote_ident(name)}({quote_ident(name)}) VALUES ('integrity-check')")
            fts[name] = "ok"
        except sqlite3.DatabaseError as exc:
            fts[name] = str(exc)
    result = {"integrity_check": integrity, "foreign_key_check": fk, "counts": counts,
              "expected_counts": expected, "fts_check": fts}
    problems = []
    if integrity != ["ok"]:
        problems.append(f"integrity_check: {'; '.join(integrity[:5])}")
    if fk:
        problems.append(f"foreign_key_check lists {len(fk)} row(s)")
    bad = [t for t in CANONICAL_TABLES if counts[t] != expected[t]]
    if bad:
        problems.append("counts differ for " + ", ".join(
            f"{t} ({counts[t]} != {expected[t]})" for t in bad))
    bad_fts = [n for n, v in fts.items() if v != "ok"]
    if bad_fts:
        problems.append(f"FTS integrity-check failed for {', '.join(bad_fts)}")
    if problems:
        raise _OutputFailed("the new store does not verify: " + "; ".join(problems))
    return result


def _remove_store(path: Path) -> None:
    """Remove a private store this command built (and its lock file: nobody else knows it)."""
    for suffix in ("", "-wal", "-shm", "-journal", ".checkpoint.lock"):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass


# =========================================================================== the entry point

def _write_report(path: Path, report: dict) -> None:
    """Write the report atomically (0600, replacing a regular file, never through a link)."""
    atomic.clean_partials(path.parent, rf"{re.escape(path.name)}(-\d+)?\.partial")
    atomic.write_json(path, report, replace=True)


def _same_file(a: Path, b: Path) -> bool:
    return os.path.realpath(a) == os.path.realpath(b)


def _next_step(report: dict, source: Path) -> str:
    if not report["recoverable"]:
        return ("the sessions/messages tables cannot be read: restore the newest snapshot "
                "(`backup list`, then `backup restore ID` with every process stopped) or a "
                "state.db.pre-update-emergency-*.bak")
    damaged = any(t["unreadable_ranges"] or t["error"] for t in report["tables"].values())
    if report.get("output") and report["output"].get("written"):
        return (f"check the new store, then stop every process and move it into place yourself "
                f"(with no -wal/-shm beside it); keep {source} until you are sure")
    if damaged:
        return (f"`sessions recover {source} --output NEW.db --allow-partial` keeps "
                f"every readable row")
    return f"`sessions recover {source} --output NEW.db` copies every row"


def recover(source: str | os.PathLike, *, output: str | os.PathLike | None = None,
            inspect_only: bool = False, allow_partial: bool = False,
            report: str | os.PathLike | None = None, tmp_dir: str | os.PathLike | None = None,
            protect: tuple[str | os.PathLike, ...] = (),
            progress: Callable[[str, int | None, int | None], None] | None = None,
            _after_copy_hook: Callable[[], None] | None = None) -> dict:
    """Inspect a (possibly damaged) store and optionally salvage it into a new one (SPEC §14).

    Args:
        source: the store file (``state.db``, a ``*.bak``, a ``*.corrupt.*.bak``, ...), or a
            retired-WAL capture directory / its ``state.db`` (SPEC §10.3). Its ``-wal``/``-shm``
            beside it are part of the image. Never modified, never opened with SQLite in place.
        output: path of a NEW store to build from every readable row; must not exist. Without
            it (or with ``inspect_only``) nothing but the optional report is written.
        inspect_only: only inspect (the default when ``output`` is None); may not be combined
            with ``output``.
        allow_partial: with ``output``: skip unreadable row ranges (and rows the current schema
            rejects) instead of failing; keep messages of unreadable sessions under placeholder
            sessions with ``source='recovered'``.
        report: also write the JSON report to this file (replaced if it exists; refused if it
            names a source or output file).
        tmp_dir: where the private copy is made (default: the system temporary directory).
        protect: more stores (the profile's) whose files ``output`` and ``report`` must not
            name; the source's own store files are always protected (issue 22 item 3).
        progress: ``progress(phase, done, total)`` as the copy and the inspection advance
            (``done``/``total`` None when unknown), for a progress display.
        _after_copy_hook: test seam passed to :func:`copy_source`.
    Returns:
        The report: ``operation`` ("inspect"|"recover"), ``source``, ``source_files`` ({name:
        {path, bytes, sha256} or None}; ``sha256`` only for a file whose ctime was under 1 s
        old when the copy began, else None), ``journal_mode``, ``schema_version``, ``tables``
        ({name: {available, columns, rows, error, unreadable_ranges, unreadable_rows,
        unreadable_rowids, index_rows, rows_basis}}), ``integrity`` (quick_check lines),
        ``errors``, ``warnings``, ``holders`` (lines of processes holding the source),
        ``recoverable`` (sessions and messages readable), ``source_unchanged``, ``output``
        (None, or {path, written, counts, expected_counts, integrity_check, foreign_key_check,
        fts_check, placeholder_sessions, skipped_state_meta, dropped_columns, rejected}),
        ``failed`` / ``failure`` (output requested but not written, and why), ``next_step``,
        ``sqlite``, ``created_at``.
    Raises:
        RecoverRefused: ``source`` missing, ``output`` (or its sidecars) exists or is the source,
            ``output`` combined with ``inspect_only``, ``report`` names a store file.
        SourceChangedError: the source changed while copied or inspected (message: "the source
            changed while it was copied; stop every process using it"); nothing was written
            except the report file. ``.report`` holds the report so far.
        OSError: the source cannot be read or the temporary copy cannot be written.
    """
    src = Path(source).expanduser().absolute()
    if src.is_dir():
        src = src / "state.db"
    if output is not None and inspect_only:
        raise RecoverRefused("--inspect-only and --output exclude each other: inspect first, "
                             "then build the new store with --output.")
    if not src.exists():
        raise RecoverRefused(f"no file at {src}: nothing to recover.",
                             "give --source the state.db (or a capture directory's state.db)")
    for path in source_files(src).values():  # never block on a FIFO or read a device
        try:
            st = os.stat(path)
        except FileNotFoundError:
            continue
        if not stat.S_ISREG(st.st_mode):
            raise RecoverRefused(f"{path} is {atomic.describe_mode(st.st_mode)}, not a regular "
                                 "file: nothing to recover from it.",
                                 "give --source the state.db file of a store")
    out_path = Path(output).expanduser().absolute() if output is not None else None
    for target, option in ((out_path, "--output"), (report, "--report")):
        owned = None if target is None else owning_store(target, src, *protect)
        if owned:
            raise RecoverRefused(f"{option} {target} is {owned[1]} (store {owned[0]}); "
                                 "recover never writes a path a store owns.",
                                 "choose a path outside the store's files")
    if out_path is not None:
        for suffix in ("", "-wal", "-shm", "-journal"):
            if os.path.lexists(f"{out_path}{suffix}"):
                raise RecoverRefused(
                    f"{out_path}{suffix} already exists; recover never overwrites a file.",
                    "choose a new --output path")
        if any(_same_file(out_path, p) for p in source_files(src).values()):
            raise RecoverRefused("--output must not be the source.", "choose a new --output path")
    report_path = Path(report).expanduser().absolute() if report is not None else None
    if report_path is not None:
        taken = list(source_files(src).values())
        if out_path is not None:
            taken += list(source_files(out_path).values())
        if any(_same_file(report_path, p) for p in taken) or report_path.is_dir():
            raise RecoverRefused(f"--report {report_path} names a store file or a directory.",
                                 "choose a separate file for the report")
        if os.path.lexists(report_path) and not stat.S_ISREG(os.lstat(report_path).st_mode):
            raise RecoverRefused(
                f"--report {report_path} is {atomic.describe_mode(os.lstat(report_path).st_mode)}"
                "; a report is only written as (or over) a regular file.",
                "choose a separate file for the report")

    rep: dict = {
        "operation": "recover" if out_path is not None else "inspect",
        "source": str(src),
        "source_files": {},
        "journal_mode": None,
        "schema_version": None,
        "tables": {},
        "integrity": [],
        "errors": [],
        "warnings": [],
        "holders": [],
        "recoverable": False,
        "source_unchanged": None,
        "output": None,
        "failed": False,
        "failure": None,
        "next_step": "",
        "sqlite": sqlite3.sqlite_version,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    _capture_note(src, rep)
    scan_result = holders.scan(src)
    rep["holders"] = [h.line() for h in scan_result.holders]
    if scan_result.holders:
        rep["warnings"].append("other processes have the source open; stop them so it cannot "
                               "change: " + "; ".join(rep["holders"]))

    def finish(exc: BaseException | None = None) -> dict:
        if report_path is not None:
            _write_report(report_path, rep)
        if exc is not None:
            raise exc
        return rep

    # The private copy: a flock-ed ``hermes-recover[-N].partial`` directory, so the copies a
    # killed recover left behind are removed by the next one (issue 11.12).
    tmp_parent = Path(tmp_dir or tempfile.gettempdir()).resolve()
    atomic.clean_partials(tmp_parent, WORK_DIR_RE)
    with contextlib.ExitStack() as stack:
        work_dir = stack.enter_context(atomic.PartialDir(tmp_parent, WORK_DIR_STEM)).path
        out_partial = None
        if out_path is not None:
            # The new store is built in ``.<name>.recover[-N].partial/`` beside the output
            # (flock-ed, 0700; a killed run's leftover is removed by the next recover there).
            out_path.parent.mkdir(parents=True, exist_ok=True, mode=atomic.DIR_MODE)
            atomic.clean_partials(out_path.parent, _output_partial_re(out_path))
            out_partial = stack.enter_context(atomic.PartialDir(
                out_path.parent, f".{out_path.name}.recover")).path / "state.db"
        before: dict = {}
        try:
            copied = copy_source(src, work_dir, _after_copy_hook, stats=before,
                                  progress=progress, hash_all=False)
            failpoints.hit("cmd.recover.after_copy")
        except SourceChangedError as exc:
            rep["errors"].append(f"{SOURCE_CHANGED} ({exc.operator_detail})")
            rep["source_unchanged"] = False
            rep["failed"] = True
            rep["failure"] = SOURCE_CHANGED
            exc.report = rep
            return finish(exc)
        rep["source_files"] = copied
        copy = work_dir / "state.db"
        conn = None
        try:
            conn = open_copy(copy)
        except sqlite3.Error as exc:
            rep["errors"].append(f"the copy cannot be opened: {exc}")
        try:
            scans = inspect_tables(conn, copy, rep, progress=progress)
            rep["tables"] = {name: s.report() for name, s in scans.items()}
            rep["recoverable"] = scans["sessions"].readable() and scans["messages"].readable()
            if not rep["recoverable"]:
                rep["errors"].append("not recoverable: the sessions and messages tables must be "
                                     "readable")
            if out_path is not None:
                _recover_into(conn, scans, out_path, out_partial, allow_partial, rep)
        finally:
            if conn is not None:
                conn.close()
        same, changed = source_unchanged(src, copied, before)
        rep["source_unchanged"] = same
        if not same:
            rep["errors"].append(f"{SOURCE_CHANGED} (now different: {', '.join(changed)})")
            if rep["output"] and rep["output"].get("partial"):
                _remove_store(Path(rep["output"]["partial"]))
                rep["output"]["written"] = False
            rep["failed"] = True
            rep["failure"] = SOURCE_CHANGED
            if rep["output"]:
                rep["output"].pop("partial", None)
            return finish(SourceChangedError(SOURCE_CHANGED, ", ".join(changed), report=rep))
        if rep["output"] and rep["output"].get("partial"):
            _publish(Path(rep["output"].pop("partial")), out_path, rep)
        rep["next_step"] = _next_step(rep, src)
        return finish()


def _capture_note(src: Path, rep: dict) -> None:
    """Warn when the source is a retired-WAL capture that holds only the main file's header."""
    manifest = src.parent / "manifest.json"
    if src.name != "state.db":
        return
    try:
        data = atomic.read_json(manifest, limit=1 << 20)
    except (OSError, ValueError):
        return
    if isinstance(data, dict) and isinstance(data.get("main"), dict):  # any other shape: skip
        rep["capture"] = {"trigger": data.get("trigger"), "pid": data.get("pid"),
                          "captured_at": data.get("captured_at"),
                          "main_mode": data["main"].get("mode")}
        if data["main"].get("mode") == "header_only":
            rep["warnings"].append(
                "this capture holds only the 100-byte header of state.db (the file was over "
                "512 MiB); copy its state.db-wal beside a copy of the original state.db and "
                "recover from that")


def _output_partial_re(out_path: Path) -> re.Pattern:
    return re.compile(rf"\.{re.escape(out_path.name)}\.recover(-\d+)?\.partial")


def _recover_into(conn: sqlite3.Connection | None, scans: dict[str, TableScan], out_path: Path,
                  partial: Path, allow_partial: bool, rep: dict) -> None:
    """Build the output in a ``.partial`` file; record the outcome in ``rep`` (never raises)."""
    rep["output"] = {"path": str(out_path), "written": False}
    if conn is None or not rep["recoverable"]:
        rep["failed"] = True
        rep["failure"] = "not recoverable: the sessions and messages tables cannot be read"
        return
    damaged = {t: s for t, s in scans.items() if s.unreadable or (s.available and s.error)}
    if damaged and not allow_partial:
        parts = []
        for t, s in damaged.items():
            lost = s.unreadable_rows()
            parts.append(f"{t}: {'an unknown number of' if lost is None else lost} row(s) "
                         f"unreadable")
        rep["failed"] = True
        rep["failure"] = (f"the source is damaged ({'; '.join(parts)}); nothing was written. "
                          f"Re-run with --allow-partial to keep every readable row.")
        return
    try:
        result = _build_output(conn, scans, partial, allow_partial, rep)
    except _OutputFailed as exc:
        _remove_store(partial)
        rep["failed"] = True
        rep["failure"] = str(exc)
        return
    except BaseException:
        _remove_store(partial)
        raise
    rep["output"].update(result)
    rep["output"]["partial"] = str(partial)


def _publish(partial: Path, out_path: Path, rep: dict) -> None:
    """Rename the verified new store to ``output`` without replacing anything (its ``.partial``
    directory, with any empty ``-shm`` left in it, is removed by the caller)."""
    try:
        atomic.rename_noreplace(partial, out_path)
    except FileExistsError:
        _remove_store(partial)
        rep["failed"] = True
        rep["failure"] = f"{out_path} appeared while the new store was built; nothing replaced"
        return
    atomic.fsync_dir(out_path.parent)
    rep["output"]["written"] = True
