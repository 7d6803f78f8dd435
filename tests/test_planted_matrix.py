"""The planted-file matrix of the store and the ``hermes-state`` CLI (issue 22, generators).

ONE declared list (:data:`PLANTED`) of every path the store and the CLI read or write beside the
store, each with the commands that touch it, x every kind of planted file (:data:`KINDS`: a
symlink to a victim, a dangling symlink, a FIFO, a directory (a file where a directory
belongs), a socket, ``/dev/zero`` (linked and as a device node), unreadable (the command runs
as another uid), a hard link to a victim (the inode replaced by someone else's), removed
between check and use). Each case runs the command in a real subprocess and checks:

* no hang: it returns on its own (the timeout is only the guard that turns a hang into a FAIL);
* no write through a link: the victim (a file, or a directory and its file) is unchanged;
* no traceback;
* a failure is named: the output names the planted path (or its directory), what it is, or
  the permission.

A path the product starts to use beside the store belongs in :data:`PLANTED`; the SPEC §1 table
is cross-checked (:func:`test_the_declared_list_covers_the_spec_table`). The toolkit's own files
are another helper's matrix.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from sweep import FULL, cases, tally

from hermes_state import SessionDB

REPO = Path(__file__).resolve().parent.parent
HELPERS = Path(__file__).resolve().parent / "helpers"
HANG_GUARD_S = float(os.environ.get("HERMES_TEST_HANG_GUARD_S", 60))  # turns a hang into a FAIL
NOBODY = 65534
VICTIM_TEXT = "precious\n"

#: Placeholders in paths and commands: {capture}, {snapshot}, {bak} (names in the template).
CAPTURE = "state.db.retired-wal-20300101T000000Z-4242"
SNAPSHOT = "20300101T000000Z-manual"
BAK = "state.db.pre-update-emergency-20300101T000000Z.bak"

API_OPEN = ("from hermes_state import SessionDB\n"
            "try:\n"
            "    with SessionDB({db!r}) as db:\n"
            "        db.append_message('s1', 'user', 'after')\n"
            "    print('OK')\n"
            "except Exception as e:\n"
            "    print('REFUSED', type(e).__name__, e)\n")
API_DIVERT = ("from hermes_state.api.spool import divert_to_spool\n"
              "try:\n"
              "    print('OK', divert_to_spool({home!r}, 's1', [{{'role': 'user', 'content': 'x'}}]))\n"
              "except Exception as e:\n"
              "    print('REFUSED', type(e).__name__, e)\n")
API_DELETE = ("from hermes_state import SessionDB\n"
              "try:\n"
              "    with SessionDB({db!r}) as db:\n"
              "        print('OK', db.delete_session('s1', sessions_dir={home!r} + '/sessions'))\n"
              "except Exception as e:\n"
              "    print('REFUSED', type(e).__name__, e)\n")
API_REPAIR = ("from hermes_state.operator.schema_repair import repair_state_db_schema\n"
              "print('OK', repair_state_db_schema({db!r}))\n")
API_OLD_OPEN = ("from hermes_state import SessionDB\n"
                "for ro in (True, False):\n"
                "    try:\n"
                "        with SessionDB({old!r}, read_only=ro) as db:\n"
                "            print('OK', ro, len(db.list_sessions()))\n"
                "    except Exception as e:\n"
                "        print('REFUSED', type(e).__name__, e)\n")


@dataclass(frozen=True)
class Planted:
    """A path beside the store (relative to HERMES_HOME), what it is normally, and the
    commands that touch it (``argv`` lists for ``hermes-state --home HOME``, or ``("py",
    code)`` run in the child)."""

    path: str
    is_dir: bool
    commands: tuple
    setup: str = ""  # "garbage": state.db is not SQLite; "old": an old store at old/state.db


PLANTED: tuple[Planted, ...] = (
    Planted("state.db", False, (
        ("sessions", "list"), ("sessions", "search", "hello"), ("sessions", "export"),
        ("sessions", "prune", "--dry-run"), ("doctor",), ("backup",),
        ("sessions", "optimize", "--dry-run"), ("sessions", "replay-spool"),
        ("sessions", "salvage", "--apply"), ("sessions", "recover", "{home}/state.db",
                                             "--inspect-only"),
        ("sessions", "archive", "--older-than", "0", "--dry-run"),
        ("sessions", "import", "{home}/in/export.json"), ("backup", "restore", SNAPSHOT),
        ("py", API_OPEN))),
    Planted("state.db-wal", False, (
        ("sessions", "list"), ("doctor",), ("backup",), ("sessions", "prune", "--dry-run"),
        ("sessions", "recover", "{home}/state.db", "--inspect-only"), ("py", API_OPEN))),
    Planted("state.db-shm", False, (("sessions", "list"), ("doctor",), ("py", API_OPEN))),
    Planted("state.db-journal", False, (("sessions", "list"), ("doctor",), ("backup",),
                                        ("py", API_OPEN))),
    Planted("state.db.checkpoint.lock", False, (
        ("py", API_OPEN), ("sessions", "optimize"), ("doctor",),
        ("sessions", "prune", "--yes", "--older-than", "0"), ("backup", "restore", SNAPSHOT))),
    Planted("state.db.quarantine.lock", False, (("py", API_OPEN), ("sessions", "list"),
                                                ("doctor",)), setup="garbage"),
    Planted(CAPTURE, True, (("doctor",), ("sessions", "salvage"),
                            ("sessions", "salvage", "--apply"))),
    Planted(f"{CAPTURE}/manifest.json", False, (("doctor",), ("sessions", "salvage"),
                                                ("sessions", "salvage", "--apply"))),
    Planted(f"{CAPTURE}/state.db", False, (("sessions", "salvage", "--apply"), ("doctor",))),
    Planted(f"{CAPTURE}/state.db-wal", False, (("sessions", "salvage"), ("doctor",))),
    Planted("state-snapshots", True, (("backup",), ("backup", "list"), ("doctor",),
                                      ("backup", "restore", SNAPSHOT))),
    Planted(f"state-snapshots/{SNAPSHOT}", True, (("backup", "list"),
                                                  ("backup", "restore", SNAPSHOT), ("backup",))),
    Planted(f"state-snapshots/{SNAPSHOT}/manifest.json", False, (
        ("backup", "list"), ("backup", "restore", SNAPSHOT), ("backup",), ("doctor",))),
    Planted(f"state-snapshots/{SNAPSHOT}/state.db", False, (
        ("backup", "restore", SNAPSHOT), ("backup", "list"))),
    Planted(BAK, False, (("backup", "list"), ("backup", "restore", BAK),
                         ("backup", "--reason", "pre-update"))),
    Planted("sessions", True, (("sessions", "replay-spool"), ("doctor",), ("py", API_DIVERT),
                               ("py", API_DELETE))),
    Planted("sessions/s1.jsonl", False, (("sessions", "replay-spool"), ("doctor",),
                                         ("py", API_DIVERT))),
    Planted("sessions/s1.json", False, (("py", API_DELETE),)),
    Planted("old/sessions/sessions.json", False, (("py", API_OLD_OPEN),), setup="old"),
    Planted("out/export.json", False, (("sessions", "export", "-o", "{home}/out/export.json"),)),
    Planted("out/r.json", False, (("sessions", "recover", "{home}/state.db", "--inspect-only",
                                   "--report", "{home}/out/r.json"),)),
    Planted("out/new.db", False, (("sessions", "recover", "{home}/state.db", "--output",
                                   "{home}/out/new.db"),)),
    Planted("in/export.json", False, (("sessions", "import", "{home}/in/export.json"),)),
    Planted(".state.db.repair.partial", True, (("py", API_REPAIR),)),
)

KINDS = ("symlink", "dangling", "fifo", "dir", "socket", "devzero-link", "devzero-node",
         "unreadable", "hardlink", "removed")
#: Every run: the two kinds that hung or wrote through before (FIFO, symlink) plus the race.
SAMPLE_KINDS = ("fifo", "symlink", "removed")


def all_cases() -> list[tuple[str, str, int]]:
    out = []
    for p in PLANTED:
        for kind in KINDS:
            if kind == "hardlink" and p.is_dir:
                continue  # a directory cannot be hard-linked
            for i in range(len(p.commands)):
                out.append((p.path, kind, i))
    return out


#: Issue 22's own reproductions, always in the sample (a FIFO state.db hung prune --dry-run
#: through the gateway-owner probe).
ISSUE_CASES = [("state.db", "fifo", 3), ("state.db-wal", "hardlink", 5),
               ("state.db-shm", "hardlink", 0), ("old/sessions/sessions.json", "fifo", 0)]


def sample_cases() -> list[tuple[str, str, int]]:
    return [(p.path, kind, 0) for p in PLANTED for kind in SAMPLE_KINDS] + ISSUE_CASES


# --------------------------------------------------------------------------- the template home
@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    """A home with a store, a real retired-WAL capture, a snapshot, a pre-update copy, a spool
    file, a transcript, an import file and an old (v17) store with the gateway's sessions.json."""
    from hermes_state.operator.snapshots import create_snapshot
    from hermes_state.testing import build_fixture

    home = tmp_path_factory.mktemp("template") / "home"
    db_path = home / "state.db"
    db = SessionDB(db_path)
    db.create_session("s1", source="cli")
    db.append_message("s1", "user", "hello before")
    os.unlink(f"{db_path}-wal")
    os.unlink(f"{db_path}-shm")
    try:
        db.append_message("s1", "user", "hello captured")
    except Exception:  # noqa: BLE001 - the refusal that makes the capture
        pass
    capture = Path(db.connection.capture_dir)
    db.close()
    capture.rename(home / CAPTURE)
    with SessionDB(db_path) as db2:
        db2.create_session("s1", source="cli")
        db2.append_message("s1", "user", "hello again")
        db2.end_session("s1", "done")
        db2.divert_to_spool("s1", [{"role": "user", "content": "spooled"}])
    snap = create_snapshot(db_path)
    os.rename(snap["dir"], home / "state-snapshots" / SNAPSHOT)
    shutil.copyfile(db_path, home / BAK)
    (home / "sessions" / "s1.json").write_text("{}")
    (home / "in").mkdir()
    (home / "in" / "export.json").write_text(json.dumps([{"id": "imp", "messages": []}]))
    (home / "out").mkdir()
    (home / "out" / "export.json").write_text("old export\n")
    (home / "out" / "r.json").write_text("{}")
    build_fixture(home / "old" / "state.db", 17)
    return home


def victim_state(victim: Path) -> tuple:
    if victim.is_dir():
        return tuple(sorted((p.name, p.read_bytes()) for p in victim.iterdir()))
    return (victim.read_bytes(), os.lstat(victim).st_mtime_ns)


def plant(path: Path, kind: str, is_dir: bool, victim: Path) -> None:
    """Replace whatever is at ``path`` with a file of ``kind`` (links point at ``victim``)."""
    if os.path.lexists(path):
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "symlink":
        os.symlink(victim, path)
    elif kind == "dangling":
        os.symlink(victim.parent / "nowhere", path)
    elif kind == "fifo":
        os.mkfifo(path, 0o600)
    elif kind == "dir":  # the other type: a directory where a file belongs, and vice versa
        if is_dir:
            path.write_text("a file where a directory belongs\n")
        else:
            os.mkdir(path)
    elif kind == "socket":  # bound at a short path (AF_UNIX: 108 bytes), then moved into place
        short = Path(tempfile.mkdtemp(prefix="sock-", dir="/tmp"))
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.bind(str(short / "s"))
            os.rename(short / "s", path)
        finally:
            sock.close()
            shutil.rmtree(short, ignore_errors=True)
    elif kind == "devzero-link":
        os.symlink("/dev/zero", path)
    elif kind == "devzero-node":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))
    elif kind == "hardlink":
        os.link(victim, path)
    else:
        raise AssertionError(kind)


@dataclass
class Outcome:
    argv: list
    code: int | None
    out: str
    err: str
    problems: list = field(default_factory=list)


def run_case(template: Path, base: Path, rel: str, kind: str, index: int) -> Outcome:
    entry = next(p for p in PLANTED if p.path == rel)
    work = base / "w"
    home = work / "home"
    shutil.copytree(template, home, symlinks=True)
    outside = work / "outside"
    outside.mkdir()
    victim_file = outside / "victim.txt"
    victim_file.write_text(VICTIM_TEXT)
    victim = outside if entry.is_dir else victim_file
    if entry.setup == "garbage":
        for suffix in ("-wal", "-shm"):
            if os.path.lexists(f"{home}/state.db{suffix}"):
                os.unlink(f"{home}/state.db{suffix}")
        (home / "state.db").write_bytes(b"not a database" * 300)
    target = home / rel
    removed = kind == "removed"
    unreadable = kind == "unreadable"
    if unreadable:
        os.chmod(work, 0o755)
        for p in [work, *work.rglob("*")]:
            os.lchown(p, NOBODY, NOBODY)
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("{}") if not entry.is_dir else target.mkdir()
        for p in [target, *(target.rglob("*") if target.is_dir() else [])]:
            os.lchown(p, 0, 0)
        os.chmod(target, 0o000)
    elif not removed:
        plant(target, kind, entry.is_dir, victim)
    elif not os.path.lexists(target):  # something real to remove
        target.parent.mkdir(parents=True, exist_ok=True)
        target.mkdir() if entry.is_dir else target.write_text("{}")
    before = victim_state(victim)
    command = entry.commands[index]
    if command[0] == "py":
        code_text = command[1].format(db=str(home / "state.db"), home=str(home),
                                      old=str(home / "old" / "state.db"))
        child_args = ["py", code_text]
    else:
        child_args = ["cli", "--home", str(home),
                      *[a.format(home=str(home)) for a in command]]
    env = dict(os.environ, PYTHONPATH=str(REPO), TMPDIR=str(work))
    env.pop("HERMES_STATE_FAILPOINTS", None)
    if unreadable:
        cmd = [sys.executable, str(HELPERS / "drop_uid.py"), str(NOBODY), *child_args]
    else:
        cmd = [sys.executable, str(HELPERS / "planted_child.py"),
               *(["--remove-on-check", str(target)] if removed else []), *child_args]
    outcome = Outcome(list(command), None, "", "")
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=HANG_GUARD_S,
                              env=env, cwd=str(work), stdin=subprocess.DEVNULL)
        outcome.code, outcome.out, outcome.err = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as exc:
        outcome.problems.append(f"HANG (no exit within {HANG_GUARD_S:g} s)")
        outcome.out = (exc.stdout or b"").decode("utf-8", "replace") if isinstance(
            exc.stdout, bytes) else (exc.stdout or "")
    text = outcome.out + outcome.err
    if "Traceback" in outcome.err:
        outcome.problems.append("traceback: " + outcome.err.strip().splitlines()[-1][:200])
    if victim_state(victim) != before:
        outcome.problems.append(f"WROTE THROUGH to the victim {victim}")
    failed = outcome.code not in (0, None) or "REFUSED" in outcome.out
    names = {target.name, target.parent.name, "permission", "FIFO", "symbolic link",
             "directory", "socket", "device", "not a regular file", "hard link", "no such",
             "does not exist", "not found", "No such file"}
    if outcome.code is not None and outcome.code not in (0, 1, 2):
        outcome.problems.append(f"exit code {outcome.code}")
    if failed and not outcome.problems and not any(n in text for n in names):
        outcome.problems.append("failure without naming the path: "
                                + (outcome.err or outcome.out).strip()[:200])
    return outcome


def case_id(case) -> str:
    rel, kind, index = case
    return f"{rel}-{kind}-{index}"


@pytest.mark.parametrize("case", cases(all_cases(), sample_cases(), ids=case_id))
def test_planted_file(template, tmp_path, case, request):
    rel, kind, index = case
    outcome = run_case(template, tmp_path, rel, kind, index)
    tally(request, "planted-file matrix (store + CLI)", 1,
          [f"{rel} as {kind}: {' '.join(map(str, outcome.argv))[:80]}: {p}"
           for p in outcome.problems])
    assert outcome.problems == [], (outcome.argv, outcome.code, outcome.out[-800:],
                                    outcome.err[-1500:])


def test_the_declared_list_covers_the_spec_table():
    """Every file name SPEC §1 lists beside the store has an entry (by its marker)."""
    spec = (REPO / "docs" / "SPEC.md").read_text(encoding="utf-8")
    table = spec.split("## 1. Files and location", 1)[1].split("## 2.", 1)[0]
    markers = {"retired-wal": CAPTURE, "pre-update-emergency": BAK,
               "state-snapshots": "state-snapshots", "state.db-wal": "state.db-wal",
               "state.db-shm": "state.db-shm"}
    declared = {p.path for p in PLANTED}
    for marker, path in markers.items():
        assert marker in table and path in declared, marker
    assert len(all_cases()) > 300 and (FULL or len(sample_cases()) >= 60)
