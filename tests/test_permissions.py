"""Permission problems are named as such, never as damage (issue 11.8, SPEC §4).

A read-only home, a read-only ``-wal`` and a store owned by another user: every command names
the path and the missing permission; doctor never calls it damage and never suggests
``recover``. Root ignores file modes, so every command runs as uid 65534 through
``tests/helpers/drop_uid.py`` (a real second user). Skipped when not root.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from hermes_state import SessionDB

NOBODY = 65534
HELPERS = Path(__file__).resolve().parent / "helpers"
REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 120

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to run a second user")

READ_COMMANDS = (("sessions", "list"), ("sessions", "show", "s"), ("sessions", "search", "hi"),
                 ("sessions", "export"), ("backup", "list"))
WRITE_COMMANDS = (("sessions", "replay-spool"), ("sessions", "optimize", "--force"),
                  ("sessions", "prune", "--yes", "--force"), ("backup",))


def as_nobody(mode: str, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, str(HELPERS / "drop_uid.py"), str(NOBODY), mode,
                           *map(str, args)], capture_output=True, text=True,
                          timeout=HANG_GUARD_S, env=env, cwd="/")


def chown_tree(root: Path, uid: int) -> None:
    for dirpath, _dirs, files in os.walk(root):
        os.chown(dirpath, uid, uid)
        for name in files:
            os.chown(os.path.join(dirpath, name), uid, uid)


@pytest.fixture
def base():
    """A directory the second user can traverse (pytest's tmp_path is 0700 root)."""
    directory = tempfile.mkdtemp(prefix="hermes-perm-")
    os.chmod(directory, 0o755)
    yield Path(directory)
    for dirpath, dirs, _files in os.walk(directory):
        for d in dirs:
            os.chmod(os.path.join(dirpath, d), 0o755)
    shutil.rmtree(directory, ignore_errors=True)


def make_store(home: Path, owner: int) -> Path:
    home.mkdir(mode=0o700)
    with SessionDB(home / "state.db") as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "hi there")
    chown_tree(home, owner)
    return home / "state.db"


def assert_named(out: subprocess.CompletedProcess, path: str, args) -> None:
    text = out.stdout + out.stderr
    assert out.returncode == 1, (args, text)
    assert "Traceback" not in text, (args, text)
    assert path in text and "permission" in text.lower(), (args, text)
    assert "recover" not in text and "damaged" not in text and "malformed" not in text, (args, text)
    assert "delete the -wal" not in text.replace("never delete the -wal", ""), (args, text)


def test_read_only_home(base):
    db = make_store(base / "home", NOBODY)
    os.chmod(db.parent, 0o500)  # the user's own home, made read-only
    for args in READ_COMMANDS[:4] + WRITE_COMMANDS:
        assert_named(as_nobody("cli", "--home", db.parent, *args), str(db.parent), args)
    doc = as_nobody("cli", "--home", db.parent, "doctor", "--json")
    report = json.loads(doc.stdout)
    titles = " ".join(f["title"] for f in report["findings"])
    assert doc.returncode == 1 and "permission problem, not damage" in titles, titles
    assert str(db.parent) in titles
    assert "recover" not in json.dumps(report["findings"]) and "damaged" not in titles, report
    api = as_nobody("py", "from hermes_state import SessionDB, StorePermissionError\n"
                    f"for ro in (True, False):\n    try:\n        SessionDB({str(db)!r}, "
                    "read_only=ro)\n    except StorePermissionError as e:\n"
                    "        print('NAMED', ro, e.user_message)\n")
    assert api.stdout.count("NAMED") == 2 and str(db.parent) in api.stdout, api


def test_read_only_wal_of_a_live_store(base, spawn):
    db = make_store(base / "home", NOBODY)
    # The owner's writer keeps the store open with its -wal, then the -wal is made read-only.
    holder = spawn("drop_uid.py", NOBODY, "hold", db)
    assert holder.readline() == "HOLDING", holder.stderr()
    with SessionDB(db) as root_db:  # give the store a -wal/-shm (owned by nobody afterwards)
        root_db.append_message("s", "user", "more")
        os.chown(f"{db}-wal", NOBODY, NOBODY)
        os.chown(f"{db}-shm", NOBODY, NOBODY)
        os.chmod(f"{db}-wal", 0o400)
        for args in WRITE_COMMANDS[:3]:
            assert_named(as_nobody("cli", "--home", db.parent, *args), f"{db}-wal", args)
        api = as_nobody("py", "from hermes_state import SessionDB, StorePermissionError\n"
                        f"try:\n    SessionDB({str(db)!r})\nexcept StorePermissionError as e:\n"
                        "    print('NAMED', e.user_message)\n")
        assert "NAMED" in api.stdout and f"{db}-wal" in api.stdout and "write" in api.stdout, api
        doc = as_nobody("cli", "--home", db.parent, "doctor", "--json")
        report = json.loads(doc.stdout)
        titles = " ".join(f["title"] for f in report["findings"])
        assert "writes will be refused (a permission problem, not damage)" in titles, titles
        assert f"{db}-wal" in titles and "recover" not in json.dumps(report["findings"]), titles
        assert "quick_check found damage" not in titles


def test_store_owned_by_another_user(base):
    db = make_store(base / "home", 0)  # root's store, mode 0600 in a 0700 directory
    for args in READ_COMMANDS + WRITE_COMMANDS:
        out = as_nobody("cli", "--home", db.parent, *args)
        assert_named(out, str(db.parent), args)
        assert "uid 0" in out.stderr + out.stdout, (args, out)
    doc = as_nobody("cli", "--home", db.parent, "doctor")
    assert doc.returncode == 1 and "permission" in doc.stdout and "recover" not in doc.stdout, doc
    assert "no session store" not in doc.stdout, doc.stdout
    os.chmod(db.parent, 0o755)  # the directory is readable now; the files are still root's
    for args in READ_COMMANDS[:4]:
        out = as_nobody("cli", "--home", db.parent, *args)
        assert_named(out, str(db), args)
    rec = as_nobody("cli", "sessions", "recover", db, "--inspect-only")
    assert_named(rec, str(db), "recover")
    doc = as_nobody("cli", "--home", db.parent, "doctor", "--json")
    report = json.loads(doc.stdout)
    assert any("permission problem, not damage" in f["title"] and str(db) in f["title"]
               for f in report["findings"]), report
    assert "recover" not in json.dumps(report["findings"])
