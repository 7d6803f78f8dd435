"""``doctor``: what is wrong with one store and what to do about it (SPEC §9).

Order matters. FIRST the processes that hold a retired WAL generation (§10.4): if any, doctor
names them and stops, because even a read-only open would be one more opener of the new
generation. Otherwise it reports health and statistics read through ``mode=ro`` connections; it
never creates a store and never opens a writable connection, except ``--fix`` which may run a
PASSIVE checkpoint of a large WAL or rebuild a corrupt FTS index, and only when no other process
holds the store. It never deletes a WAL and never kills a process.

Why doctor leaves the empty sidecars a ``mode=ro`` open creates: docs/decisions/0003-doctor-and-holders.md.
"""

from __future__ import annotations

import os
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import corruption_kind
from ..files.paths import access_problem
from ..processes import checkpoint_lock, holders
from ..processes.checkpoint_lock import wal_reset_exposure
from . import capture_rescue
from ..schema.tables import FTS_TABLES, SCHEMA_VERSION

OK, WARN, ISSUE = "ok", "warn", "issue"
WAL_WARN_BYTES = 50 * 1024 * 1024

#: Evidence files beside the store (SPEC §1) and what the operator should do with each; the
#: advice follows the recovery guide's table of files found beside ``state.db``.
EVIDENCE = (
    (".retired-wal-", "evidence, not a backup to copy back: the WAL a process still held when it "
                      "refused to write. Keep it. Messages it holds that the store lacks come "
                      "back with `sessions salvage {path} --apply` (once no process holds the "
                      "store; the product never merges them on its own); if anything looks "
                      "wrong, attach this directory to a bug report. Look inside with `sessions "
                      "recover {path}/state.db --inspect-only`"),
    (".pre-update-emergency-", "snapshot taken before an update touched the store. Keep it until "
                               "the updated program has run for a while. To go back: stop every "
                               "process using the store, run `sessions recover {path} "
                               "--inspect-only` first, then `backup restore {name}`"),
    (".corrupt.", "copy of a damaged store taken before it was moved aside. Do NOT copy it back "
                  "over state.db: it has the same damage. Keep it for a bug report and delete it "
                  "once the store works normally again; rows can be salvaged with "
                  "`sessions recover {path} --output NEW.db --allow-partial`"),
    (".malformed-backup", "forensic copy of a damaged store taken before a repair. Do NOT copy it "
                          "back over state.db: it has the same damage. Keep it for a bug report "
                          "and delete it once the store works normally again"),
)

#: Files of the store itself: what they are and why they must be left alone (recovery guide).
SIDECAR_ADVICE = ("state.db-wal and state.db-shm are part of the store (committed conversations "
                  "not yet checkpointed into state.db); never delete them, never copy state.db "
                  "alone")
JOURNAL_ADVICE = ("state.db-journal is a rollback journal of an interrupted transaction (the store "
                  "ran in DELETE journal mode); leave it: the next writable open rolls it back, "
                  "and deleting it can corrupt state.db")


@dataclass
class Finding:
    """One line of the report: ``level`` in ok/warn/issue, a title and optional detail lines."""

    level: str
    title: str
    detail: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"level": self.level, "title": self.title, "detail": self.detail}


@dataclass
class DoctorReport:
    """All findings; ``exit_code`` is 1 when any finding needs action (level issue)."""

    db_path: str
    findings: list[Finding] = field(default_factory=list)
    stopped_early: bool = False
    stats: dict = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        return 1 if any(f.level == ISSUE for f in self.findings) else 0

    def add(self, level: str, title: str, *detail: str, first: bool = False) -> None:
        """Add a finding; ``first`` puts it at the top (what needs action before anything)."""
        finding = Finding(level, title, list(detail))
        if first:
            self.findings.insert(0, finding)
        else:
            self.findings.append(finding)

    def resolve(self, title_prefix: str) -> None:
        """Mark the findings starting with ``title_prefix`` as fixed by ``--fix`` (level ok)."""
        for f in self.findings:
            if f.title.startswith(title_prefix) and f.level != OK:
                f.level, f.title = OK, f"fixed by --fix: {f.title}"

    def to_dict(self) -> dict:
        return {"db": self.db_path, "exit_code": self.exit_code, "stopped_early": self.stopped_early,
                "findings": [f.to_dict() for f in self.findings], "stats": self.stats}

    def render(self) -> str:
        """Human text: one ``[level] title`` line per finding, details indented."""
        lines = [f"doctor: {self.db_path}"]
        for f in self.findings:
            lines.append(f"[{f.level}] {f.title}")
            lines.extend(f"    {d}" for d in f.detail)
        return "\n".join(lines)


def _size(path: Path) -> int | None:
    try:
        return path.stat().st_size
    except OSError:
        return None


def _ro_connect(db_path: Path) -> sqlite3.Connection:
    from ..files.store_files import connect_ro

    return connect_ro(db_path, timeout=1.0, row_factory=sqlite3.Row)


def _holder_dict(h: holders.Holder) -> dict:
    """``{"pid", "command", "files", "retired"}`` of one holder for ``--json``."""
    return {"pid": h.pid, "command": h.command, "files": list(h.files),
            "retired": list(h.retired)}


def run_doctor(db_path: str | os.PathLike, *, fix: bool = False) -> DoctorReport:
    """Check one store (SPEC §9).

    Args:
        db_path: ``state.db`` path (need not exist: doctor never creates it).
        fix: also do the safe repairs of §9.3 when no other process holds the store.
    Returns:
        A :class:`DoctorReport`; ``exit_code`` 1 when something needs action.
    """
    db = Path(db_path).absolute()
    report = DoctorReport(str(db))
    scan = holders.scan_settled(db)
    retired = scan.retired_holders
    report.stats["scan_complete"] = scan.complete
    report.stats["holders"] = [_holder_dict(h) for h in scan.holders]
    if retired:
        report.stats["retired_holders"] = [_holder_dict(h) for h in retired]
        report.stopped_early = True
        report.add(ISSUE, f"{len(retired)} process(es) still hold a retired WAL generation",
                   *[f"PID {h.pid} ({h.command})" for h in retired],
                   "fix: once each one's log is captured (below), stop every one of them "
                   "(gateway stop, quit the desktop app, pause cron); do NOT delete the WAL "
                   "yourself; then run doctor again.",
                   "doctor stops here: even a read-only open would be one more opener of the new "
                   "generation.")
        capture_rescue.rescue(db, retired, report)  # issue 22.1: the only copy, saved first
        capture_rescue.markers(db, report)
        return report
    try:
        os.lstat(db)
    except FileNotFoundError:
        report.add(WARN, f"no session store at {db} yet (it is created on first use)")
        _exposure(report, db)
        return report
    except PermissionError:
        _permission(db, report, access_problem(db, write=False))
        return report
    if _special_files(db, report):
        return report
    db_size, wal_size = _size(db), _size(Path(f"{db}-wal"))
    report.stats.update(db_bytes=db_size, wal_bytes=wal_size)
    report.add(OK, f"files: state.db {db_size} bytes, state.db-wal "
                   f"{'absent' if wal_size is None else f'{wal_size} bytes'}", SIDECAR_ADVICE)
    if wal_size is not None and wal_size > WAL_WARN_BYTES:
        report.add(WARN, f"the WAL is {wal_size // (1024 * 1024)} MB (normal while a gateway runs; "
                         "it shrinks after checkpoints once long readers finish)",
                   "fix (optional): `doctor --fix` runs a PASSIVE checkpoint when nothing else "
                   "holds the store")
    _writable(db, report)
    try:
        conn = _ro_connect(db)
    except sqlite3.Error as exc:
        problem = access_problem(db, write=False)
        if problem is not None:
            _permission(db, report, problem)
            return report
        report.add(ISSUE, f"cannot open the store read-only: {exc}",
                   f"fix: `sessions recover {db} --inspect-only` shows what is "
                   "readable")
        return report
    try:
        _health(conn, report)
        _spool(db, conn, report)
    finally:
        conn.close()
    if scan.holders:
        report.add(OK, f"{len(scan.holders)} process(es) hold the store",
                   *[h.line() for h in scan.holders])
    elif scan.listed:
        report.add(OK, "no other process holds the store")
    owner = holders.write_lock_owner(db)
    report.stats["write_lock_owner"] = (None if owner is None
                                        else {"pid": owner[0], "command": owner[1]})
    if owner is not None:
        report.add(OK, f"state.db write lock held by PID {owner[0]} ({owner[1]}) at this moment",
                   "normal for a moment per write; if writes keep giving up, that process is "
                   "the one to look at")
    if not scan.listed:
        report.add(WARN, "cannot prove the store is quiet: " + scan.platform_note)
    elif not scan.complete:
        report.add(WARN, "cannot prove the store is quiet: some processes of this user could not "
                         "be inspected", *[f"PID {p}" for p in scan.unreadable])
    _checkpoint_lock_holders(db, report)
    capture_rescue.markers(db, report)
    _evidence(db, report)
    _exposure(report, db)
    if fix:
        _fix(db, report, scan)
    return report


def _permission(db: Path, report: DoctorReport, problem) -> None:
    """This user cannot read the store: say which path and permission, never "damage"."""
    if problem is None:
        report.add(ISSUE, f"cannot read {db}: permission denied",
                   "fix: run doctor as the user that owns the store")
        return
    report.stats["permission"] = problem.user_message
    report.add(ISSUE, f"permission problem, not damage: {problem.user_message}",
               problem.operator_detail)


def _writable(db: Path, report: DoctorReport) -> None:
    """Can this user WRITE the store? An issue for the owner's own store (the agent would refuse
    every write); a warning when reading another user's store (that may be on purpose)."""
    problem = access_problem(db, write=True)
    report.stats["writable"] = problem is None
    if problem is None:
        return
    try:
        mine = os.stat(db).st_uid == os.geteuid()
    except OSError:
        mine = False
    report.add(ISSUE if mine else WARN,
               f"writes will be refused (a permission problem, not damage): "
               f"{problem.user_message}", problem.operator_detail)


def _special_files(db: Path, report: DoctorReport) -> bool:
    """A link, FIFO, device or directory at a store path: named, never opened (issue 11.4)."""
    import stat

    from ..files.atomic import describe_mode

    bad = []
    for suffix in ("", "-wal", "-shm"):
        try:
            st = os.lstat(f"{db}{suffix}")
        except OSError:
            continue
        if not stat.S_ISREG(st.st_mode):
            bad.append(f"{db}{suffix} is {describe_mode(st.st_mode)}, not a regular file")
    if bad:
        report.add(ISSUE, "the store's files are not plain files: doctor did not open them", *bad,
                   "fix: the three files state.db, state.db-wal and state.db-shm must be plain "
                   "files in one directory; move the odd one away (never delete a real -wal)")
    return bool(bad)


def _health(conn: sqlite3.Connection, report: DoctorReport) -> None:
    try:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        free = conn.execute("PRAGMA freelist_count").fetchone()[0]
        report.stats.update(journal_mode=mode, page_count=pages, freelist_count=free)
        report.add(OK if mode == "wal" else WARN, f"journal_mode={mode}, {pages} pages, "
                                                  f"{free} free")
        rows = conn.execute("SELECT version FROM schema_version").fetchall()
        version = rows[0][0] if rows else None
        if version is not None and (not isinstance(version, int) or version < 1):
            report.stats["schema_version"] = None
            report.add(WARN, f"schema_version holds {version!r}, not a version number",
                       "the next writable open infers the version from the tables and "
                       "rewrites the row; nothing else is affected")
            version = "unknown"
        else:
            report.stats["schema_version"] = version
        if version == "unknown":
            pass
        elif version == SCHEMA_VERSION:
            report.add(OK, f"schema version {version} (this code: {SCHEMA_VERSION})")
        elif version is not None and version > SCHEMA_VERSION:
            report.add(WARN, f"schema version {version} is newer than this code ({SCHEMA_VERSION})",
                       "an older program is reading a newer store; it adds no downgrade")
        else:
            report.add(WARN, f"schema version {version} (this code: {SCHEMA_VERSION}); it is "
                             "migrated on the next writable open",
                       "until then read-only commands (list, show, search, export, ...) read a "
                       "migrated private copy in the temporary directory; the store itself is "
                       "not changed by them")
        sessions = conn.execute("SELECT count(*) FROM sessions").fetchone()[0]
        messages = conn.execute("SELECT count(*) FROM messages").fetchone()[0]
        report.stats.update(sessions=sessions, messages=messages)
        report.add(OK, f"{sessions} sessions, {messages} messages")
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        fts = [t for t in FTS_TABLES if t in names]
        report.stats["fts_tables"] = fts
        report.add(OK if "messages_fts" in fts else ISSUE, f"FTS tables: {', '.join(fts) or 'none'}")
        _layout(conn, report)
        meta = dict(conn.execute("SELECT key, value FROM state_meta WHERE key IN "
                                 "('fts_rebuild_high_water', 'fts_rebuild_progress', 'fts_stale')")
                    .fetchall()) if "state_meta" in names else {}
        if "fts_rebuild_high_water" in meta:
            report.add(WARN, f"FTS rebuild pending: indexed up to id "
                             f"{meta.get('fts_rebuild_progress', 0)} of {meta['fts_rebuild_high_water']}",
                       "search still finds every message (the rest is scanned); "
                       "`sessions optimize-storage` resumes it")
        report.stats["fts_stale"] = bool(meta.get("fts_stale"))
        if meta.get("fts_stale"):
            report.add(ISSUE, "the search index was found corrupt and is switched off",
                       "fix: `doctor --fix` (or `sessions optimize-storage`) rebuilds it when "
                       "nothing else holds the store; messages are intact")
        check = [r[0] for r in conn.execute("PRAGMA quick_check").fetchall()]
        if check == ["ok"]:
            report.add(OK, "quick_check ok")
        else:
            report.add(ISSUE, "quick_check found damage", *check[:20],
                       "fix: stop every process using it, then run `sessions recover "
                       f"{report.db_path} --inspect-only` (it changes no file) and follow the "
                       "command it prints, or restore the newest snapshot (`backup list`, then "
                       "`backup restore ID`)")
    except sqlite3.DatabaseError as exc:
        if _needs_rollback(exc, report.db_path):
            report.stats["hot_journal"] = True
            report.add(ISSUE, "the store has an interrupted transaction in state.db-journal that "
                              "only a writable open can roll back",
                       "fix: when no process holds the store, `doctor --fix` rolls it back "
                       "(so does starting one Hermes process); never delete state.db-journal")
            return
        problem = access_problem(report.db_path, write=False)
        if problem is not None:  # a permission problem is never called damage (issue 11.8)
            _permission(Path(report.db_path), report, problem)
            return
        if corruption_kind(exc) == "structural":
            report.add(ISSUE, f"the store is damaged: {exc}",
                       "fix: stop every process using it, then run `sessions recover "
                       f"{report.db_path} --inspect-only` (it changes no file) and follow the "
                       "command it prints, or restore the newest snapshot (`backup list`, then "
                       "`backup restore ID`)")
            return
        report.add(ISSUE, f"reading the store failed: {exc}",
                   f"fix: `sessions recover {report.db_path} --inspect-only` shows what "
                   "is readable")


_PLAN_TEXT = {
    "ok": "as this code keeps it",
    "legacy": "a legacy layout kept until `sessions optimize-storage` converts it",
    "create": "the next writable open creates the missing FTS tables",
    "replace": "the next writable open replaces the whole FTS layout (every trigger that writes "
               "into an FTS table, whatever its name) and re-indexes",
    "keep": "written by a newer release: left as it is",
}


def _layout(conn: sqlite3.Connection, report: DoctorReport) -> None:
    """FTS layout, foreign triggers/indexes and what an upgrade would do (issue 10 item 8)."""
    from ..schema.shape import describe

    try:
        shape = describe(conn)
    except sqlite3.Error as exc:
        report.add(WARN, f"could not read the store's FTS layout: {exc}")
        return
    report.stats["store"] = shape
    report.stats.update(fts_layout=shape["fts_layout"],
                        foreign_triggers=shape["foreign_triggers"],
                        foreign_indexes=sorted(shape["duplicate_indexes"]),
                        upgrade=shape["pending"])
    report.add(OK if shape["fts_plan"] in ("ok", "legacy", "keep") else WARN,
               f"FTS layout {shape['fts_layout']}: {_PLAN_TEXT[shape['fts_plan']]}")
    if shape["foreign_triggers"] or shape["fts_problems"]:
        report.add(WARN, "FTS triggers a release did not create as one set: "
                         f"{', '.join(shape['foreign_triggers']) or 'see below'}",
                   *shape["fts_problems"][:10])
    if shape["duplicate_indexes"]:
        report.add(WARN, "indexes duplicated under another name: " + ", ".join(
            f"{a} = {b}" for a, b in shape["duplicate_indexes"].items()),
                   "harmless but each costs space and write time; this code creates no third one")
    if shape["pending"]:
        report.add(OK, "the next writable open will: " + "; ".join(shape["pending"]))
    else:
        report.add(OK, "settled: the next open writes nothing")


SQLITE_READONLY_ROLLBACK = 776  # a mode=ro open met a hot journal it may not roll back


def _needs_rollback(exc: BaseException, db_path: str) -> bool:
    """True when a read failed only because a hot rollback journal needs a writable open."""
    code = getattr(exc, "sqlite_errorcode", None)
    return code == SQLITE_READONLY_ROLLBACK or (
        code is not None and code & 0xFF == 8 and Path(f"{db_path}-journal").exists())


def _capture_summary(directory: Path) -> str:
    """``captured <at> by PID <pid> (<trigger>): WAL <frames> frames, <bytes> bytes`` from the
    capture's ``manifest.json`` (SPEC §10.3); a directory without one is an interrupted capture.
    A manifest of any other shape (not an object, odd field types, a FIFO, too large) is named
    as such, never a crash (issue 11.10)."""
    from ..files.atomic import read_json

    try:
        manifest = read_json(directory / "manifest.json", limit=1 << 20)
    except (OSError, ValueError):
        return "no readable manifest.json (an interrupted or damaged capture)"
    if not isinstance(manifest, dict):
        return "manifest.json is not a JSON object (a damaged capture)"
    wal = manifest.get("wal")
    wal = wal if isinstance(wal, dict) else {}
    return (f"captured {manifest.get('captured_at')} by PID {manifest.get('pid')} "
            f"({manifest.get('trigger')}): WAL {wal.get('frames')} frames, "
            f"{wal.get('bytes')} bytes")


#: Above this size of a capture's ``state.db`` doctor does not copy it to compare (salvage does).
SALVAGE_PLAN_LIMIT = 64 * 1024 * 1024


def _salvage_note(db: Path, capture: Path, report: DoctorReport) -> str:
    """Whether ``capture`` holds messages the store lacks, and the command that brings them
    back (issue 16: doctor points to ``sessions salvage``). Reads a private copy."""
    from .salvage import SalvageError, plan_capture

    try:
        if (capture / "state.db").stat().st_size > SALVAGE_PLAN_LIMIT:
            return (f"`sessions salvage {capture}` lists the messages it holds that the store "
                    "lacks (not compared here: the capture is large)")
        plan = plan_capture(db, capture)
    except (SalvageError, OSError, sqlite3.Error) as exc:
        return f"cannot compare it with the store: {str(exc).splitlines()[0]}"
    if not plan.lacks_anything:
        return "the store has every message of this capture (nothing to salvage)"
    report.stats.setdefault("salvageable", []).append(
        {"capture": capture.name, "messages": plan.missing_messages,
         "sessions": len(plan.missing), "new_sessions": len(plan.new_sessions)})
    # Conversations that exist only in a capture need action, before anything else (issue 26).
    report.add(ISSUE, f"{plan.missing_messages} message(s) in {len(plan.missing)} session(s) "
               f"exist only in the capture {capture.name}, not in the store",
               "fix: with every process using the store stopped, preview them with "
               f"`sessions salvage {capture}`, then bring them back with `--apply`; start the "
               "gateway only after that (salvage refuses while a process holds the store)",
               first=True)
    return (f"holds {plan.missing_messages} message(s) in {len(plan.missing)} session(s) that "
            f"the store lacks: bring them back with `sessions salvage {capture} --apply` after "
            "stopping every process using the store")


def _evidence(db: Path, report: DoctorReport) -> None:
    """Evidence files beside the store, the journal and the spool, each with what to do."""
    found = []
    for entry in sorted(db.parent.iterdir()):
        if not entry.name.startswith(db.name + ".") or entry.name.endswith(".lock"):
            continue
        for marker, advice in EVIDENCE:
            if marker in entry.name:
                found.append((entry, advice))
                break
    report.stats["evidence"] = [entry.name for entry, _ in found]
    for entry, advice in found:
        detail = [advice.format(path=entry, name=entry.name)]
        if ".retired-wal-" in entry.name and entry.is_dir():
            detail.insert(0, _capture_summary(entry))
            detail.insert(1, _salvage_note(db, entry, report))
        report.add(WARN, f"evidence file {entry.name}", *detail)
    if Path(f"{db}-journal").exists():
        report.add(WARN, f"rollback journal state.db-journal ({_size(Path(f'{db}-journal'))} "
                         "bytes) beside the store", JOURNAL_ADVICE)
    snapshots = db.parent / "state-snapshots"
    if snapshots.is_symlink():
        report.add(ISSUE, f"{snapshots} is a symbolic link: backups refuse to write through it",
                   "fix: replace it with a plain directory (move the snapshots into it)")
    elif snapshots.is_dir():
        n = sum(1 for p in snapshots.iterdir() if p.is_dir() and not p.name.endswith(".partial"))
        report.add(OK, f"{n} snapshot(s) in {snapshots}",
                   "restore one only after stopping every process using the store: "
                   "`backup list`, then `backup restore ID`")
    _leftovers(db, report)


def _leftovers(db: Path, report: DoctorReport) -> None:
    """``.partial`` work of killed commands that nobody is building any more (issue 11.12)."""
    import tempfile

    from ..files.atomic import iter_partials
    from .recover import WORK_DIR_RE
    from .schema_repair import repair_partial_re
    from .snapshots import PARTIAL_RE

    snaps = sorted(iter_partials(db.parent / "state-snapshots", PARTIAL_RE))
    temps = sorted(iter_partials(tempfile.gettempdir(), WORK_DIR_RE))
    repairs = sorted(iter_partials(db.parent, repair_partial_re(db)))
    report.stats["leftovers"] = {"snapshots": snaps, "recover_copies": temps,
                                 "repair_copies": repairs}
    if repairs:
        report.add(WARN, f"{len(repairs)} temporary cop(y/ies) of the store left by a killed "
                         f"schema repair in {db.parent}", *repairs,
                   "they are copies, not the store; the next repair removes them (or delete "
                   "them yourself)")
    if snaps:
        report.add(WARN, f"{len(snaps)} unfinished snapshot(s) of a killed `backup` in "
                         f"{db.parent / 'state-snapshots'}", *snaps,
                   "they are not snapshots; the next `backup` removes them")
    if temps:
        report.add(WARN, f"{len(temps)} temporary cop(y/ies) of a store left by a killed "
                         f"`sessions recover` in {tempfile.gettempdir()}", *temps,
                   "they may hold whole conversations; the next `sessions recover` removes "
                   "them (or delete them yourself)")


def _spool(db: Path, conn: sqlite3.Connection | None, report: DoctorReport) -> None:
    """Messages diverted to ``<home>/sessions/*.jsonl`` and not imported yet (SPEC §10.1)."""
    from ..api.spool import IMPORTED_PREFIX, read_spool

    spool_dir = db.parent / "sessions"
    if spool_dir.is_symlink():
        report.add(ISSUE, f"{spool_dir} is a symbolic link: refused writes are not spooled "
                          "through it and replay-spool does not read it",
                   "fix: replace it with a plain directory (move the *.jsonl files into it)")
        return
    if not spool_dir.is_dir():
        return
    files = sorted(spool_dir.glob("*.jsonl"))
    if not files:
        return
    ids = []
    unreadable = []
    for f in files:
        try:
            ids += [rec["spool_id"] for rec in read_spool(f)
                    if isinstance(rec.get("spool_id"), str) and rec["spool_id"]]
        except OSError as exc:  # a FIFO, device or link among the spool files: named, not read
            unreadable.append(f"{f.name}: {getattr(exc, 'user_message', exc)}")
    if unreadable:
        report.add(ISSUE, f"{len(unreadable)} file(s) in {spool_dir} cannot be read as spool "
                          "files", *unreadable, "fix: move them out of the spool directory")
    imported: set[str] = set()
    if conn is not None:
        try:
            imported = {r[0][len(IMPORTED_PREFIX):] for r in conn.execute(
                "SELECT key FROM state_meta WHERE key LIKE 'spool\\_imported:%' ESCAPE '\\'")}
        except sqlite3.Error:
            pass
    pending = [i for i in ids if i not in imported]
    report.stats["spool"] = {"files": len(files), "records": len(ids), "pending": len(pending)}
    if pending:
        report.add(ISSUE, f"{len(pending)} spooled message(s) in {spool_dir} are not in the "
                          f"store yet ({len(files)} file(s))",
                   "they were diverted while the store refused writes; nothing is lost",
                   "fix: once no process holds a retired WAL, run `sessions replay-spool` "
                   "(it imports each message exactly once; re-running is safe)")
    else:
        report.add(OK, f"{len(ids)} spooled message(s) in {spool_dir}, all imported "
                       "(the files are kept; they can be archived)")


def _exposure(report: DoctorReport, db: Path) -> None:
    """The WAL-reset line (SPEC §4; issue 12): "exposed, mitigated by the checkpoint lock" or
    "exposed, NOT mitigated (reason)", or the fix present."""
    text = wal_reset_exposure()
    line, reason = checkpoint_lock.exposure_line(db, text)
    report.stats["sqlite"] = sqlite3.sqlite_version
    report.stats["wal_reset"] = {"exposed": text is not None,
                                 "mitigated": text is not None and reason is None,
                                 "line": line, "reason": reason}
    if not text:
        report.add(OK, f"SQLite {sqlite3.sqlite_version} has the WAL-reset fix")
        return
    detail = [text]
    if reason is None:
        detail.append("every checkpoint of the store holds the checkpoint lock "
                      f"{checkpoint_lock.lock_path(db).name} exclusively and every write "
                      "transaction holds it shared, so the two never overlap")
    else:
        detail.append(f"fix: {reason}; until then the store runs without that protection")
    report.add(WARN, f"SQLite {sqlite3.sqlite_version}: {line}", *detail)


def _checkpoint_lock_holders(db: Path, report: DoctorReport) -> None:
    """Who holds the checkpoint lock now (issue 12); a frozen (SIGSTOPped) holder is named."""
    found = checkpoint_lock.lock_holders(db)
    report.stats["checkpoint_lock_holders"] = [h.as_dict() for h in found]
    split = checkpoint_lock.split_problem(db)
    report.stats["checkpoint_lock_split"] = split
    if split:  # issue 22 item 3: the lock file was removed or replaced under a live process
        report.add(ISSUE, f"the checkpoint lock {checkpoint_lock.lock_path(db).name} is split",
                   split, "fix: stop the process(es) named (gateway stop, quit the desktop app, "
                   "pause cron) and start them again; never remove or replace the lock file")
    for h in found:
        frozen = h.status in ("stopped", "tracing-stop")
        what = ("a maintenance command, or a write that may restart the WAL: every write "
                "and checkpoint of the store waits for it" if h.mode == "exclusive" else
                "a checkpoint or a write transaction in progress: maintenance, and a write "
                "that may restart the WAL, wait for it")
        if frozen:
            report.add(WARN, f"checkpoint lock held by {h.line()}", what,
                       f"that process is stopped: resume it (kill -CONT {h.pid}) or stop it; "
                       "writes of other processes wait meanwhile" + (
                           "" if h.mode == "exclusive" else
                           " once the WAL is fully checkpointed"))
        else:
            report.add(OK, f"checkpoint lock held by {h.line()} at this moment", what)


def _fix(db: Path, report: DoctorReport, scan: holders.HolderScan) -> None:
    """``--fix`` (SPEC §9.3), deciding again with the store's write lock held through the
    repair (issue 11): a writer that starts after the check waits for it."""
    try:
        with checkpoint_lock.exclusive_unless_unusable(db, purpose="doctor --fix"):
            _fix_locked(db, report, holders.scan(db))
    except checkpoint_lock.LockBusy as exc:
        report.add(WARN, f"--fix skipped: {exc}")


def _fix_locked(db: Path, report: DoctorReport, scan: holders.HolderScan) -> None:
    if scan.holders or not scan.complete:
        report.add(WARN, "--fix skipped: another process holds the store (or the scan was "
                         "incomplete); stop them first")
        return
    wal = _size(Path(f"{db}-wal")) or 0
    stale = bool(report.stats.get("fts_stale"))
    hot = bool(report.stats.get("hot_journal"))
    if wal <= WAL_WARN_BYTES and not stale and not hot:
        report.add(OK, "--fix: nothing to do")
        return
    from ..db import SessionDB

    with SessionDB(db) as handle:
        if hot:
            left = Path(f"{db}-journal").exists()
            report.add(OK, "--fix: the interrupted transaction was rolled back "
                           f"(state.db-journal {'still there' if left else 'gone'})")
            if not left:
                report.resolve("the store has an interrupted transaction")
                report.resolve("rollback journal state.db-journal")
        if wal > WAL_WARN_BYTES:
            row = handle.checkpoint("PASSIVE")
            report.add(OK, f"--fix: PASSIVE checkpoint {row}")
        if stale and hasattr(handle, "rebuild_fts"):
            handle.rebuild_fts()
            report.add(OK, "--fix: FTS index rebuilt")
            report.resolve("the search index was found corrupt")
