"""Workloads of the I/O error sweep (tests/test_io_error_sweep.py; issue 22, "make the suite
find the next one").

Each workload is the real product (the API or the CLI, in this process) working on a store that
lives on the faulty FUSE filesystem. :func:`run_case` prepares a fresh copy of the workload's
template store, arms ``io_error {op: any, nth: N}`` for that run's directory (the Nth operation
that opens a file or changes the filesystem fails with ENOSPC or EIO), runs the workload, disarms,
then checks what the SQLite harness checks after each injected I/O error:

* **named**: the failure is one of the store's named errors (or SQLite's own SQLITE_FULL /
  SQLITE_IOERR), a CLI exit 1 whose stderr names the cause, never a traceback;
* **no acknowledged write lost**: every write the workload was told succeeded is in the store,
  in a verified capture, or in the spool, and every piece of evidence is still there;
* **the store reopens** and ``PRAGMA integrity_check`` says ok;
* **a retry after the fault succeeds**.

Findings are strings naming the workload, the errno, N and what broke.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import sqlite3
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hermes_state import SessionDB
from hermes_state.api.spool import SpoolWriteError, divert_to_spool, replay_spool
from hermes_state.cli import main as cli_main
from hermes_state.errors import DeletedWalGenerationError, HermesStateError, StateDbReplacedError

#: The cause as the user reads it, per errno (strerror, or SQLite's words for it).
CAUSE_WORDS = {"ENOSPC": ("No space left on device", "database or disk is full"),
               "EIO": ("Input/output error", "disk I/O error")}
SQLITE_NAMED = ("SQLITE_FULL", "SQLITE_IOERR")


@dataclass
class Outcome:
    """What one run did: the exception (None on success), the CLI's exit code and stderr."""

    exc: BaseException | None = None
    tb: str = ""
    code: int | None = None
    stderr: str = ""
    acked: list = field(default_factory=list)
    extra: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- helpers
def cli(*argv: str) -> tuple[int, str, str]:
    """The ``hermes-state`` command in this process: ``(exit code, stdout, stderr)``.

    An exception escaping ``main`` is what a user would see as a traceback: re-raised.
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli_main([str(a) for a in argv])
    return code, out.getvalue(), err.getvalue()


def messages(db_path: Path) -> list[str]:
    """Contents of every message of a store (read-only, a private URI)."""
    conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
    try:
        return [r[0] for r in conn.execute("SELECT content FROM messages ORDER BY id")]
    finally:
        conn.close()


def integrity(db_path: Path) -> list[str]:
    conn = sqlite3.connect(str(db_path))
    try:
        return [r[0] for r in conn.execute("PRAGMA integrity_check")]
    finally:
        conn.close()


def capture_messages(capture: Path, scratch: Path) -> list[str]:
    """Messages a capture holds (its state.db + state.db-wal opened as a copy, SPEC §10.3)."""
    work = scratch / f"cap-{uuid.uuid4().hex}"
    work.mkdir()
    for name in ("state.db", "state.db-wal"):
        if (capture / name).exists():
            shutil.copyfile(capture / name, work / name)
    return messages(work / "state.db")


def verified_captures(home: Path) -> list[Path]:
    out = []
    for p in sorted(home.glob("state.db.retired-wal-*")):
        if p.name.endswith(".partial") or not (p / "manifest.json").exists():
            continue
        try:
            if json.loads((p / "manifest.json").read_text()).get("verified"):
                out.append(p)
        except ValueError:
            continue
    return out


def make_store(path: Path, n: int = 5, sid: str = "s") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with SessionDB(path) as db:
        db.create_session(sid, source="cli")
        for i in range(n):
            db.append_message(sid, "user", f"{sid}-before-{i}")


# --------------------------------------------------------------------------- workloads
def _before(home: Path, out: Outcome) -> None:
    """Setup (unarmed): what the store holds before the work, for the checks."""
    out.extra["before"] = messages(home / "state.db")


@dataclass
class Workload:
    """``prepare(template_home)`` builds the template once; ``run(home, outcome)`` is the work
    (raises on failure); ``check(home, outcome, scratch)`` returns findings after the fault;
    ``retry(home, outcome)`` runs again with the fault gone (raises on failure)."""

    name: str
    prepare: Callable[[Path], None]
    run: Callable[[Path, Outcome], None]
    check: Callable[[Path, Outcome, Path], list[str]]
    retry: Callable[[Path, Outcome], None]
    cli: bool = False  # the failure is judged by exit code and stderr
    setup: Callable[[Path, Outcome], None] | None = None  # runs before the fault is armed


def _store_has(home: Path, wanted: list[str]) -> list[str]:
    have = set(messages(home / "state.db"))
    lost = [m for m in wanted if m not in have]
    return [f"acknowledged write(s) lost: {lost[:3]}"] if lost else []


# append -------------------------------------------------------------------
def _append_run(home: Path, out: Outcome) -> None:
    with SessionDB(home / "state.db") as db:
        for i in range(5):
            content = f"acked-{i}"
            db.append_message("s", "user", content)
            out.acked.append(content)


def _append_check(home: Path, out: Outcome, scratch: Path) -> list[str]:
    return _store_has(home, ["s-before-0", *out.acked])


def _append_retry(home: Path, out: Outcome) -> None:
    with SessionDB(home / "state.db") as db:
        db.append_message("s", "user", "retry")
        out.acked.append("retry")


# capture after a sidecar deletion ------------------------------------------
def _capture_setup(home: Path, out: Outcome) -> None:
    """Before the fault is armed (the append workload sweeps these operations)."""
    db = SessionDB(home / "state.db")
    out.extra["db"] = db
    for i in range(3):
        db.append_message("s", "user", f"acked-{i}")
        out.acked.append(f"acked-{i}")
    for side in ("-wal", "-shm"):
        os.unlink(home / f"state.db{side}")


def _capture_run(home: Path, out: Outcome) -> None:
    db = out.extra["db"]
    try:
        db.append_message("s", "user", "refused")
    except DeletedWalGenerationError as exc:
        out.extra["refusal"] = exc
    else:
        raise AssertionError("a write after the WAL was deleted was not refused")


def _capture_check(home: Path, out: Outcome, scratch: Path) -> list[str]:
    findings = []
    refusal = out.extra.get("refusal")
    db = out.extra.get("db")
    if refusal is not None and db is not None:
        says_safe = "Nothing is lost" in refusal.user_message
        if says_safe and not db.connection.capture_dir:
            findings.append("the refusal says 'Nothing is lost' without a verified capture")
        if not says_safe and "NOT saved yet" not in refusal.user_message:
            findings.append(f"a pending capture is not named: {refusal.user_message[:200]}")
    return findings


def _capture_retry(home: Path, out: Outcome) -> None:
    db = out.extra.get("db")
    if db is None:
        db = SessionDB(home / "state.db")
        out.extra["db"] = db
    try:
        db.append_message("s", "user", "after")  # refused again: the capture is retried
    except DeletedWalGenerationError:
        pass
    capture = db.connection.capture_dir
    db.close()
    if out.acked and not capture:
        raise AssertionError("no verified capture after the fault was gone")
    if out.acked:
        have = capture_messages(Path(capture), out.extra["scratch"])
        lost = [m for m in out.acked if m not in have]
        if lost:
            raise AssertionError(f"the capture lacks acknowledged writes {lost}")


# capture after the store file is replaced -----------------------------------
def _replaced_prepare(home: Path) -> None:
    """The store, and beside the home another store's file that will replace it."""
    make_store(home / "state.db")
    make_store(home.parent / "other.db", n=2, sid="o")


def _replaced_setup(home: Path, out: Outcome) -> None:
    """Before the fault is armed: a writer with 3 acknowledged appends, then its state.db is
    replaced by another store's file (os.replace, as a user restoring a copy would)."""
    db = SessionDB(home / "state.db")
    out.extra["db"] = db
    for i in range(3):
        db.append_message("s", "user", f"acked-{i}")
        out.acked.append(f"acked-{i}")
    os.replace(home.parent / "other.db", home / "state.db")


def _replaced_run(home: Path, out: Outcome) -> None:
    try:
        out.extra["db"].append_message("s", "user", "refused")
    except StateDbReplacedError as exc:
        out.extra["refusal"] = exc
    else:
        raise AssertionError("a write after state.db was replaced was not refused")


def _replaced_check(home: Path, out: Outcome, scratch: Path) -> list[str]:
    refusal = out.extra.get("refusal")
    db = out.extra.get("db")
    if refusal is not None and db is not None and "Nothing" in refusal.user_message \
            and "lost" in refusal.user_message and not db.connection.capture_dir:
        return ["the refusal says nothing is lost without a verified capture"]
    return []


def _replaced_retry(home: Path, out: Outcome) -> None:
    """Another call and the close retry what failed; then the new file opens as itself (the
    replaced file's log never replayed onto it) and the capture holds every acked write."""
    db = out.extra["db"]
    try:
        db.append_message("s", "user", "after")
    except StateDbReplacedError:
        pass
    capture = db.connection.capture_dir
    db.close()
    if not capture:
        raise AssertionError("no verified capture after the fault was gone")
    lost = [m for m in out.acked if m not in capture_messages(Path(capture), out.extra["scratch"])]
    if lost:
        raise AssertionError(f"the capture lacks acknowledged writes {lost}")
    with SessionDB(home / "state.db") as new:
        if new.get_messages("s") or len(new.get_messages("o")) != 2:
            raise AssertionError("the new state.db shows the replaced file's log replayed "
                                 "onto it")


# spool divert and replay -------------------------------------------------------
def _spool_run(home: Path, out: Outcome) -> None:
    msgs = [{"role": "user", "content": f"spooled-{i}"} for i in range(3)]
    try:
        divert_to_spool(home, "s", msgs)
    except SpoolWriteError as exc:
        out.extra["spool_error"] = exc
        raise
    out.acked += [m["content"] for m in msgs]
    with SessionDB(home / "state.db") as db:
        out.extra["replay"] = replay_spool(db)  # a record it could not read is reported


def _spool_check(home: Path, out: Outcome, scratch: Path) -> list[str]:
    spooled = set()
    for f in (home / "sessions").glob("*.jsonl"):
        for line in f.read_text(errors="replace").splitlines():
            with contextlib.suppress(ValueError, KeyError, TypeError):
                spooled.add(json.loads(line)["message"]["content"])
    stored = set(messages(home / "state.db"))
    lost = [m for m in out.acked if m not in spooled and m not in stored]
    return [f"acknowledged spool write(s) lost: {lost}"] if lost else []


def _spool_retry(home: Path, out: Outcome) -> None:
    err = out.extra.get("spool_error")
    if err is not None:
        err.retry()
        out.acked += [f"spooled-{i}" for i in range(3)]
    with SessionDB(home / "state.db") as db:
        res = replay_spool(db)
    if res["failed"]:
        raise AssertionError(f"replay failed: {res['errors']}")
    missing = [m for m in out.acked if m not in set(messages(home / "state.db"))]
    if missing:
        raise AssertionError(f"spooled messages not replayed: {missing}")
    dup = [m for m in set(out.acked) if messages(home / "state.db").count(m) != 1]
    if dup:
        raise AssertionError(f"spooled messages replayed more than once: {dup}")


# backup, restore ------------------------------------------------------------------
def _backup_run(home: Path, out: Outcome) -> None:
    code, stdout, stderr = cli("--home", home, "backup", "--json")
    out.code, out.stderr = code, stderr
    if code == 0:
        out.acked.append(json.loads(stdout)["id"])


def _snapshot_ok(home: Path, sid: str, scratch: Path) -> list[str]:
    image = home / "state-snapshots" / sid / "state.db"
    if not image.exists():
        return [f"snapshot {sid} reported verified but its image is gone"]
    if integrity(image) != ["ok"]:
        return [f"snapshot {sid} reported verified but fails integrity_check"]
    return []


def _backup_check(home: Path, out: Outcome, scratch: Path) -> list[str]:
    findings = _store_has(home, out.extra.get("before", []))
    for sid in out.acked:
        findings += _snapshot_ok(home, sid, scratch)
    return findings


def _backup_retry(home: Path, out: Outcome) -> None:
    code, stdout, stderr = cli("--home", home, "backup", "--json")
    if code != 0:
        raise AssertionError(f"backup after the fault: exit {code}: {stderr}")


def _restore_prepare(home: Path) -> None:
    make_store(home / "state.db")
    code, _, err = cli("--home", home, "backup", "--reason", "base")
    assert code == 0, err
    with SessionDB(home / "state.db") as db:
        db.append_message("s", "user", "after-snapshot")


def _snapshot_id(home: Path) -> str:
    return next(p.name for p in sorted((home / "state-snapshots").iterdir())
                if p.name.endswith("-base"))


def _restore_setup(home: Path, out: Outcome) -> None:
    _before(home, out)
    out.extra["snapshot"] = _snapshot_id(home)


def _restore_run(home: Path, out: Outcome) -> None:
    code, _stdout, stderr = cli("--home", home, "backup", "restore", out.extra["snapshot"])
    out.code, out.stderr = code, stderr


def _all_snapshot_messages(home: Path) -> set[str]:
    found: set[str] = set()
    for image in (home / "state-snapshots").glob("*/state.db"):
        with contextlib.suppress(sqlite3.Error):
            if json.loads((image.parent / "manifest.json").read_text()).get("verified"):
                found |= set(messages(image))
    return found


def _restore_check(home: Path, out: Outcome, scratch: Path) -> list[str]:
    kept = set(messages(home / "state.db")) | _all_snapshot_messages(home)
    lost = [m for m in out.extra.get("before", []) if m not in kept]
    return [f"restore lost acknowledged write(s) (neither in the store nor in a verified "
            f"snapshot): {lost}"] if lost else []


def _restore_retry(home: Path, out: Outcome) -> None:
    code, _, stderr = cli("--home", home, "backup", "restore", _snapshot_id(home))
    if code != 0:
        raise AssertionError(f"restore after the fault: exit {code}: {stderr}")
    if "after-snapshot" not in _all_snapshot_messages(home):
        raise AssertionError("the pre-restore snapshot lacks the write made after the snapshot")


# quarantine ---------------------------------------------------------------------------
def _quarantine_prepare(home: Path) -> None:
    """A zero-filled state.db beside a write-ahead log with frames (both are evidence)."""
    home.mkdir(parents=True, exist_ok=True)
    src = home.parent / "quarantine-src" / "state.db"
    make_store(src)
    with SessionDB(src) as db:
        db.append_message("s", "user", "in-the-log")
        wal = Path(f"{src}-wal").read_bytes()
    (home / "state.db").write_bytes(b"\0" * 8192)
    (home / "state.db-wal").write_bytes(wal)
    (home.parent / "quarantine.wal").write_bytes(wal)


def _quarantine_run(home: Path, out: Outcome) -> None:
    with SessionDB(home / "state.db") as db:
        db.create_session("q", source="cli")
        db.append_message("q", "user", "fresh")
        out.acked.append("fresh")


def _quarantine_check(home: Path, out: Outcome, scratch: Path) -> list[str]:
    zeroed = [p for p in [home / "state.db", *home.glob("state.db.corrupt.*.bak")]
              if p.exists() and p.read_bytes() == b"\0" * 8192]
    findings = [] if zeroed else ["the damaged file is gone (not kept as evidence)"]
    findings += _quarantined_log_kept(home, out)
    if out.acked:
        findings += _store_has(home, out.acked)
    return findings


def _quarantined_log_kept(home: Path, out: Outcome) -> list[str]:
    wal = (out.extra["backing"].parent / "quarantine.wal").read_bytes()
    logs = [p for p in [home / "state.db-wal", *home.glob("state.db.corrupt.*.bak-wal")]
            if p.exists() and p.read_bytes() == wal]
    return [] if logs else ["the damaged file's write-ahead log is gone (not kept as evidence)"]


def _quarantine_retry(home: Path, out: Outcome) -> None:
    with SessionDB(home / "state.db") as db:
        if db.get_session("q") is None:
            db.create_session("q", source="cli")
        db.append_message("q", "user", "retry")
    lost = _quarantined_log_kept(home, out)  # the open after the fault keeps it too
    if lost:
        raise AssertionError(lost[0])


# salvage ---------------------------------------------------------------------------
def _salvage_prepare(home: Path) -> None:
    """A store and a capture of a retired generation holding two messages it lacks."""
    make_store(home / "state.db")
    db = SessionDB(home / "state.db")
    db.append_message("s", "user", "only-in-capture-0")
    db.append_message("s", "user", "only-in-capture-1")
    os.unlink(home / "state.db-wal")
    os.unlink(home / "state.db-shm")
    with contextlib.suppress(DeletedWalGenerationError):
        db.append_message("s", "user", "refused")
    assert db.connection.capture_dir
    db.close()


def _salvage_setup(home: Path, out: Outcome) -> None:
    _before(home, out)
    (capture,) = verified_captures(home)
    out.extra["capture"] = capture
    out.extra["capture_files"] = {p.name: p.read_bytes() for p in capture.iterdir()}


def _salvage_run(home: Path, out: Outcome) -> None:
    capture = out.extra["capture"]
    code, _, stderr = cli("--home", home, "sessions", "salvage", capture, "--apply")
    out.code, out.stderr = code, stderr


def _salvage_check(home: Path, out: Outcome, scratch: Path) -> list[str]:
    findings = _store_has(home, out.extra.get("before", []))
    caps = verified_captures(home)
    if len(caps) != 1 or {p.name: p.read_bytes() for p in caps[0].iterdir()} != \
            out.extra.get("capture_files"):
        findings.append("the capture changed or disappeared (evidence lost)")
    have = messages(home / "state.db")
    salvaged = [m for m in ("only-in-capture-0", "only-in-capture-1") if m in have]
    if out.code == 0 and len(salvaged) != 2:
        findings.append(f"salvage reported success but only {salvaged} are in the store")
    if len(salvaged) == 1:
        findings.append("salvage applied half of the capture")
    return findings


def _salvage_retry(home: Path, out: Outcome) -> None:
    (capture,) = verified_captures(home)
    code, _, stderr = cli("--home", home, "sessions", "salvage", capture, "--apply")
    if code != 0:
        raise AssertionError(f"salvage after the fault: exit {code}: {stderr}")
    have = messages(home / "state.db")
    if [have.count(m) for m in ("only-in-capture-0", "only-in-capture-1")] != [1, 1]:
        raise AssertionError("salvage after the fault did not leave each message exactly once")


# optimize ---------------------------------------------------------------------------
def _optimize_run(home: Path, out: Outcome) -> None:
    out.code, _, out.stderr = cli("--home", home, "sessions", "optimize")


def _before_kept(home: Path, out: Outcome, scratch: Path) -> list[str]:
    return _store_has(home, out.extra.get("before", []))


def _optimize_retry(home: Path, out: Outcome) -> None:
    code, _, stderr = cli("--home", home, "sessions", "optimize")
    if code != 0:
        raise AssertionError(f"optimize after the fault: exit {code}: {stderr}")


# import ---------------------------------------------------------------------------
def _import_prepare(home: Path) -> None:
    make_store(home / "state.db")
    other = home.parent / "import-source" / "state.db"
    make_store(other, n=4, sid="imported")
    code, _, err = cli("--home", other.parent, "sessions", "export", "--format", "jsonl", "-o",
                       home / "import.jsonl")
    assert code == 0, err
    shutil.rmtree(other.parent)


def _import_run(home: Path, out: Outcome) -> None:
    out.code, _, out.stderr = cli("--home", home, "sessions", "import", home / "import.jsonl")
    if out.code == 0:
        out.acked += [f"imported-before-{i}" for i in range(4)]


def _import_check(home: Path, out: Outcome, scratch: Path) -> list[str]:
    findings = _store_has(home, out.extra.get("before", []) + out.acked)
    have = messages(home / "state.db")
    n = sum(m.startswith("imported-") for m in have)
    if n not in (0, 4):
        findings.append(f"import left {n} of 4 messages (not one transaction)")
    return findings


def _import_retry(home: Path, out: Outcome) -> None:
    code, _, stderr = cli("--home", home, "sessions", "import", home / "import.jsonl")
    if code != 0:
        raise AssertionError(f"import after the fault: exit {code}: {stderr}")
    have = messages(home / "state.db")
    if sum(m.startswith("imported-") for m in have) != 4:
        raise AssertionError("import after the fault did not leave 4 imported messages")


# export ---------------------------------------------------------------------------
def _export_run(home: Path, out: Outcome) -> None:
    out.code, _, out.stderr = cli("--home", home, "sessions", "export", "--format", "json",
                                  "-o", home / "out.json")


def _export_check(home: Path, out: Outcome, scratch: Path) -> list[str]:
    findings = _before_kept(home, out, scratch)
    target = home / "out.json"
    if target.exists():
        try:
            data = json.loads(target.read_text())
        except ValueError:
            return findings + ["a torn export was left at the target"]
        if out.code == 0 and sum(len(s.get("messages", [])) for s in data) != 5:
            findings.append("the export reported success but is incomplete")
    elif out.code == 0:
        findings.append("the export reported success but wrote nothing")
    return findings


def _export_retry(home: Path, out: Outcome) -> None:
    code, _, stderr = cli("--home", home, "sessions", "export", "--format", "json", "-o",
                          home / "out.json")
    if code != 0:
        raise AssertionError(f"export after the fault: exit {code}: {stderr}")
    json.loads((home / "out.json").read_text())


def _plain(home: Path) -> None:
    make_store(home / "state.db")


WORKLOADS = {w.name: w for w in (
    Workload("append", _plain, _append_run, _append_check, _append_retry),
    Workload("capture", _plain, _capture_run, _capture_check, _capture_retry,
             setup=_capture_setup),
    Workload("replaced", _replaced_prepare, _replaced_run, _replaced_check, _replaced_retry,
             setup=_replaced_setup),
    Workload("spool", _plain, _spool_run, _spool_check, _spool_retry),
    Workload("backup", _plain, _backup_run, _backup_check, _backup_retry, cli=True,
             setup=_before),
    Workload("restore", _restore_prepare, _restore_run, _restore_check, _restore_retry,
             cli=True, setup=_restore_setup),
    Workload("quarantine", _quarantine_prepare, _quarantine_run, _quarantine_check,
             _quarantine_retry),
    Workload("salvage", _salvage_prepare, _salvage_run, _salvage_check, _salvage_retry,
             cli=True, setup=_salvage_setup),
    Workload("optimize", _plain, _optimize_run, _before_kept, _optimize_retry, cli=True,
             setup=_before),
    Workload("import", _import_prepare, _import_run, _import_check, _import_retry, cli=True,
             setup=_before),
    Workload("export", _plain, _export_run, _export_check, _export_retry, cli=True,
             setup=_before),
)}


# --------------------------------------------------------------------------- one run
def named_failure(w: Workload, out: Outcome, errno_name: str) -> list[str]:
    """The failure must be named: never a traceback, and the cause must be readable."""
    if out.tb:
        return [f"traceback: {out.tb.strip().splitlines()[-1][:200]}"]
    if w.cli:
        if out.code in (0, None):
            return []
        if "Traceback" in out.stderr:
            return ["traceback on stderr"]
        if not out.stderr.strip():
            return [f"exit {out.code} with nothing on stderr"]
        return []
    exc = out.exc
    if exc is None or isinstance(exc, (HermesStateError, AssertionError)):
        return []
    if isinstance(exc, sqlite3.Error) and str(getattr(exc, "sqlite_errorname", "")).startswith(
            SQLITE_NAMED):
        return []
    return [f"unnamed {type(exc).__name__}: {str(exc)[:200]}"]


def run_case(fs, w: Workload, template: Path, run_dir: Path, backing_dir: Path,
             errno_name: str, nth: int | None) -> tuple[Outcome, list[str], int, int]:
    """One run: copy the template, fail the ``nth`` operation (None: count only), check.

    Returns:
        ``(outcome, findings, operations matched, faults fired)``.
    """
    shutil.copytree(template, backing_dir)
    home = run_dir / "home"
    scratch = backing_dir.parent / f"{backing_dir.name}-scratch"
    scratch.mkdir()
    out = Outcome(extra={"backing": backing_dir / "home", "scratch": scratch})
    if w.setup is not None:
        w.setup(home, out)
    spec = {"kind": "io_error", "op": "any", "path": f"^{run_dir.name}/",
            "errno": errno_name, "nth": nth or 10 ** 9}
    fault = fs.arm(**spec)
    try:
        try:
            w.run(home, out)
        except (HermesStateError, sqlite3.Error, OSError, AssertionError) as exc:
            out.exc = exc
            if not isinstance(exc, (HermesStateError, sqlite3.Error, AssertionError)):
                out.tb = traceback.format_exc()
        except Exception as exc:  # noqa: BLE001 - any other escape is a finding
            out.exc, out.tb = exc, traceback.format_exc()
    finally:
        (gone,) = fs.disarm(fault["id"])
    findings = named_failure(w, out, errno_name)
    if isinstance(out.exc, AssertionError):
        findings.append(f"workload: {out.exc}")
    try:
        findings += w.check(home, out, scratch)
    except Exception as exc:  # noqa: BLE001
        findings.append(f"check failed: {type(exc).__name__}: {exc}")
    try:
        w.retry(home, out)
    except Exception as exc:  # noqa: BLE001
        findings.append(f"retry after the fault failed: {type(exc).__name__}: {exc}")
    db = out.extra.get("db")
    if db is not None:
        with contextlib.suppress(Exception):
            db.close()
    try:
        if (home / "state.db").exists() and integrity(home / "state.db") != ["ok"]:
            findings.append("the store fails integrity_check after the fault")
    except sqlite3.Error as exc:
        findings.append(f"the store does not reopen: {exc}")
    return out, findings, gone["matched"], gone["fired"]
