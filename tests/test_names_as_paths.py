"""Names that become paths, for the store (issue 22, generators: the names-as-paths matrix).

Every site where a caller's name becomes a path (:mod:`hermes_state.files.names` lists them:
profile names, snapshot ids, session ids in spool and transcript paths, snapshot reasons,
salvage's capture argument) x hostile names (``..``, ``.``, ``/``, NUL, a 300-byte name, lone
surrogates, a leading dash, control characters, separators): a named refusal or a confined
result, never a traceback, and nothing created or removed outside the directory the site owns.
"""

from __future__ import annotations

import io
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
from sweep import cases, tally

from hermes_state import SessionDB
from hermes_state.api.spool import divert_to_spool, replay_spool
from hermes_state.cli import main
from hermes_state.files.names import UnsafeNameError, name_problem
from hermes_state.files.paths import hermes_home

HOSTILE = ["..", ".", "/", "a/b", "../../outside/victim.txt", "a\x00b", "x" * 300, "é" * 130,
           "\udcff", "\ud800", "-rf", "--help", "", " ", "a\nb", "a\x1b[2Jb", "..\\..",
           "victim.txt", "*", "?"]
SAMPLE = ["..", "/", "a\x00b", "x" * 300, "\udcff", "-rf"]


def tree(root: Path) -> set[str]:
    """Every path under ``root`` (links not followed), relative."""
    out = set()
    for dirpath, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            out.add(os.path.relpath(os.path.join(dirpath, name), root))
    return out


@pytest.fixture
def world(tmp_path) -> dict:
    home = tmp_path / "home"
    with SessionDB(home / "state.db") as db:
        db.create_session("s1", source="cli")
        db.append_message("s1", "user", "hello")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.txt").write_text("precious\n")
    (home / "sessions").mkdir(exist_ok=True)
    return {"root": tmp_path, "home": home, "outside": outside}


def cli(*argv) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main([str(a) for a in argv])
        except SystemExit as exc:  # argparse usage errors
            code = exc.code
    return code, out.getvalue() + err.getvalue()


def usage_error(name, code, text) -> bool:
    """argparse reads a leading-dash value as an option: a usage error (exit 2) is a named
    refusal too."""
    return (code in (0, 2) and isinstance(name, str) and name.startswith("-")
            and "usage:" in text)  # 0: --help printed the help and did nothing else


def ident(name) -> str:
    return ascii(name)[:30]


@pytest.mark.parametrize("name", cases(HOSTILE, SAMPLE, ids=ident))
def test_every_name_site_refuses_or_confines(world, name, request):
    root, home, outside = world["root"], world["home"], world["outside"]
    before_outside = tree(outside)
    found = []

    # 1. profile names: refused by name (API and CLI), nothing created anywhere.
    problem = name_problem(name)
    before = tree(root)
    if problem is not None:
        with pytest.raises(UnsafeNameError, match="profile name"):
            hermes_home(home, name)
    code, text = cli("--home", home, "-p", name, "sessions", "list")
    if "Traceback" in text or code not in (1, 2) or (code == 1 and problem and
                                                     "profile name" not in text):
        found.append(f"profile {ascii(name)}: {code} {text[:120]}")
    if tree(root) != before:
        found.append(f"profile {ascii(name)} created {sorted(tree(root) - before)}")

    # 2. snapshot ids: refused, nothing restored, the store unchanged.
    db_bytes = (home / "state.db").read_bytes()
    code, text = cli("--home", home, "backup", "restore", name)
    if not usage_error(name, code, text) and (
            code != 1 or "Traceback" in text or "snapshot" not in text):
        found.append(f"restore {ascii(name)}: {code} {text[:120]}")
    if (home / "state.db").read_bytes() != db_bytes:
        found.append(f"restore {ascii(name)} changed the store")

    # 3. session ids in spool paths: the file stays in <home>/sessions, the id round-trips.
    if isinstance(name, str) and name:
        path = divert_to_spool(home, name, [{"role": "user", "content": f"spooled {name!r}"}])
        if path.parent != home / "sessions" or name_problem(path.name) is not None:
            found.append(f"spool {ascii(name)} -> {path}")
        with SessionDB(home / "state.db") as db:
            res = replay_spool(db)
            got = db.get_messages(name.replace("\ud800", "\ufffd").replace("\udcff", "\ufffd"))
        if res["failed"] or not got:
            found.append(f"spool {ascii(name)}: replay {res}")

    # 4. session ids in transcript paths: nothing outside sessions_dir is removed.
    with SessionDB(home / "state.db") as db:
        db.create_session(name.replace("\x00", "") or "empty", source="cli")
        try:
            db.delete_session(name, sessions_dir=str(home / "sessions"))
        except (UnsafeNameError, ValueError) as exc:  # a named refusal is fine too
            assert "Traceback" not in str(exc)

    # 5. snapshot reasons: mapped to [a-z0-9-] inside state-snapshots/, or refused by name.
    code, text = cli("--home", home, "backup", "--reason", name)
    if "Traceback" in text or (code not in (0, 1) and not usage_error(name, code, text)):
        found.append(f"backup --reason {ascii(name)}: {code} {text[:120]}")
    snaps = home / "state-snapshots"
    if snaps.exists() and any(name_problem(p.name) for p in snaps.iterdir()):
        found.append(f"backup --reason {ascii(name)} made {sorted(p.name for p in snaps.iterdir())}")

    # 6. salvage's capture argument: a path a user gives; a named refusal.
    code, text = cli("--home", home, "sessions", "salvage", name)
    if (code != 1 and not usage_error(name, code, text)) or "Traceback" in text:
        found.append(f"salvage {ascii(name)}: {code} {text[:120]}")

    if tree(outside) != before_outside or (outside / "victim.txt").read_text() != "precious\n":
        found.append(f"{ascii(name)} touched {outside}")
    tally(request, "names-as-paths (store)", 6, found)
    assert found == []


def test_the_one_checker_names_each_rule():
    for name, words in [("..", "'..'"), ("a/b", "separator"), ("a\x00b", "NUL"),
                        ("x" * 300, "300 bytes"), ("\ud800", "surrogate"), ("-x", "'-'"),
                        ("a\nb", "control"), (b"x", "not text")]:
        assert words in name_problem(name), (name, name_problem(name))
    assert name_problem("-x", allow_dash=True) is None
    assert name_problem("work") is None
    assert "with .jsonl" in name_problem("x" * 250, suffix=".jsonl")
