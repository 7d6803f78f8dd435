"""Issue 22 item 4 and its generator: every toolkit name that becomes a path, crossed with the
names that must never become one (``..``, ``.``, ``/``, NUL, a 300-byte name, a lone surrogate,
a leading dash, a newline, an empty name...).

For each consumer the outcome is a named refusal (:class:`chaos.files.names.BadName`, a
``MutantError``, a ``ScenarioError`` with its field) or, for names the toolkit derives a file
name from (a store's label, a scenario file's stem), a derived name that is one plain component;
never a traceback, and never a file created or removed outside the directory it belongs in.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from chaos import store
from chaos.audit import catalogue as mutants
from chaos.audit import driver as audit
from chaos.files import names
from chaos.files.owned import NotOwned, Owned
from chaos.scenario import ScenarioError, load_scenario_text

GENERATOR_CASES = "generator_cases"  # summed by tests/conftest.py

REPO = Path(__file__).resolve().parent.parent
HANG_GUARD_S = 120.0  # hang guard only

#: The hostile names of the matrix (issue 22 "Names-as-paths matrix").
HOSTILE = {
    "dotdot": "..",
    "dot": ".",
    "slash": "a/b",
    "root": "/",
    "nul": "a\0b",
    "long300": "n" * 300,
    "surrogate": "a\ud800b",
    "dash": "-rf",
    "dotfile": ".hidden",
    "newline": "run\n",
    "empty": "",
    "space": "a b",
    "escape": "a\x1b[31mb",
    "traversal": "../../etc",
}
#: Names that must pass everywhere (a plain component).
PLAIN = ("gateway", "kill_before_commit", "v2.1", "x" * names.MAX_BYTES)

MUTANT = textwrap.dedent("""\
    rule: the periodic checkpoint runs PASSIVE
    spec: "§4"
    rewrite:
      literal: self.checkpoint("PASSIVE", trigger="cadence")
      replacement: self.checkpoint("FULL", trigger="cadence")
    """)

SCENARIO = textwrap.dedent("""\
    name: NAME
    description: names become paths
    duration: 1s
    roles:
      - {name: ROLE, kind: gateway}
    expect: {integrity: {}}
    """)


def _canary(tmp_path: Path) -> Path:
    c = tmp_path / "canary.txt"
    c.write_text("still here\n")
    return c


@pytest.mark.parametrize("label", sorted(HOSTILE))
def test_check_refuses_every_hostile_name_by_name(label):
    name = HOSTILE[label]
    with pytest.raises(names.BadName) as exc:
        names.check(name, "mutant")
    text = str(exc.value)
    assert text.startswith("mutant ") and "cannot be used as a file name" in text
    text.encode("utf-8")  # printable whatever the name held (a surrogate is escaped)
    assert "\n" not in text and "\x1b" not in text and "\0" not in text
    derived = names.derive(name)
    assert names.why_not(derived) is None and derived != name


@pytest.mark.parametrize("name", PLAIN)
def test_plain_names_pass_and_derive_to_themselves(name):
    assert names.check(name) == name and names.derive(name) == name


def test_derive_never_merges_two_texts():
    texts = list(HOSTILE.values()) + ["a_b", "a b", "a/b", "a\\b"]
    derived = [names.derive(t) for t in texts]
    assert len(set(derived)) == len(set(texts))


# ------------------------------------------------------------------ the matrix over consumers
def _consumers(tmp_path: Path):
    """``(consumer, call(name))``: every place of the toolkit where a name becomes a path."""
    out = tmp_path / "out"
    out.mkdir()
    run = store.RunDir(out / "run")
    a = audit.Audit(out / "audit", [], 1, Console(file=open(os.devnull, "w")))
    (out / "audit").mkdir()
    return [
        ("mutant file stem", lambda n: mutants.load(Path(out, "m", f"{n}.yaml"))
         if "/" not in n else mutants.load(Path(out, "m", n + ".yaml"))),
        ("audit workspace", lambda n: a.workspace(n, None)),
        ("run directory", lambda n: store.fresh_dir(out / "runs", n)),
        ("scenario run directory", lambda n: store.make_run_dir(out / "runs", n, 0)),
        ("process history file", lambda n: run.process_history(n)),
        ("process log file", lambda n: run.log(n)),
        ("process arm file", lambda n: run.arm_file(n)),
        ("history file name", lambda n: store.history_file(n)),
        ("owned child", lambda n: names.child(out, n)),
    ]


def test_names_as_paths_matrix(tmp_path, record_property):
    """Generator (b): every consumer x every hostile name refuses by name and touches nothing
    outside; every consumer x every plain name works."""
    canary = _canary(tmp_path)
    consumers = _consumers(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    cases, failures = 0, []
    for consumer, call in consumers:
        for label, name in HOSTILE.items():
            cases += 1
            try:
                call(name)
            except (names.BadName, mutants.MutantError) as exc:
                msg = str(exc)
                try:
                    msg.encode("utf-8")
                except UnicodeEncodeError:
                    failures.append(f"{consumer} x {label}: unprintable message")
                continue
            except Exception as exc:  # noqa: BLE001 - the finding
                failures.append(f"{consumer} x {label}: {type(exc).__name__}: {exc!r}"[:300])
                continue
            failures.append(f"{consumer} x {label}: accepted {name!r}")
    assert not failures, "\n".join(failures)
    assert canary.read_text() == "still here\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    leaked = [p for p in (tmp_path / "out").rglob("*") if not str(p).startswith(
        str(tmp_path / "out"))]
    assert not leaked
    for consumer, call in consumers:
        if consumer.startswith("mutant"):
            continue  # a plain mutant name still needs its file: covered below
        for name in PLAIN:
            cases += 1
            call(name)
    record_property(GENERATOR_CASES, ("names-as-paths", cases))


@pytest.mark.parametrize("label", sorted(HOSTILE))
def test_scenario_and_role_names_are_refused_with_their_field(label):
    """The scenario's name and a role's name become run directory and history file names."""
    quoted = json.dumps(HOSTILE[label])  # a YAML double-quoted scalar, escapes included
    for field, text in (("name", SCENARIO.replace("NAME", quoted).replace("ROLE", "gw")),
                        ("roles[0].name", SCENARIO.replace("NAME", "ok").replace("ROLE",
                                                                                 quoted))):
        with pytest.raises(ScenarioError) as exc:
            load_scenario_text(text, "n.yaml")
        assert field in {p.field for p in exc.value.problems}, str(exc.value)
        str(exc.value).encode("utf-8", "backslashreplace")


def test_a_name_ending_in_a_newline_is_refused_by_validate():
    """Found by the matrix: the schema's ``^...$`` pattern lets ``"run\\n"`` through (``$``
    matches before a final newline), and the run then made a directory with a newline in its
    name (and ``chaos.files.names`` refused the history file: a traceback)."""
    with pytest.raises(ScenarioError) as exc:
        load_scenario_text(SCENARIO.replace("NAME", '"run\\n"').replace("ROLE", '"gw\\n"'))
    fields = {p.field for p in exc.value.problems}
    assert {"name", "roles[0].name"} <= fields, str(exc.value)


# ------------------------------------------------------------------ item 4: the audit
def test_mutant_named_dot_dot_never_removes_the_audit_parent(tmp_path):
    """Issue 22 item 4: ``...yaml`` (stem ``..``) made the audit ``rmtree(out/..)``: the parent
    of ``--out`` (the checkout's ``runs/``) was deleted. Now: refused by name, exit 2, and
    nothing outside ``--out`` is touched."""
    mdir = tmp_path / "mutants"
    mdir.mkdir()
    (mdir / "...yaml").write_text(MUTANT)
    scen = tmp_path / "scenarios"
    scen.mkdir()
    (scen / "tiny.yaml").write_text(SCENARIO.replace("NAME", "tiny").replace("ROLE", "gw"))
    parent = tmp_path / "runs"
    parent.mkdir()
    canary = parent / "earlier-run.txt"
    canary.write_text("an earlier run\n")
    proc = subprocess.run(
        [sys.executable, "-m", "chaos", "audit", "--mutants", str(mdir), "--scenarios",
         str(scen / "*.yaml"), "--out", str(parent / "audit"), "--no-control", "--jobs", "1"],
        capture_output=True, text=True, timeout=HANG_GUARD_S, cwd=tmp_path)
    assert canary.read_text() == "an earlier run\n", "the parent of --out was removed"
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "mutant '..'" in proc.stderr and "cannot be used as a file name" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_audit_workspace_never_reuses_or_removes_a_directory_it_did_not_create(tmp_path):
    out = tmp_path / "audit"
    out.mkdir()
    theirs = out / "some_mutant"
    theirs.mkdir()
    (theirs / "keep.txt").write_text("theirs\n")
    a = audit.Audit(out, [], 1, Console(file=open(os.devnull, "w")))
    with pytest.raises(mutants.MutantError, match="already exists and was not created"):
        a.workspace("some_mutant", None)
    assert (theirs / "keep.txt").read_text() == "theirs\n"


def test_owned_remove_refuses_what_it_did_not_create_or_what_was_replaced(tmp_path):
    owned = Owned()
    mine = owned.make(tmp_path / "mine")
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(NotOwned):
        owned.remove(other)
    with pytest.raises(NotOwned):
        owned.remove(tmp_path)
    os.rename(mine, tmp_path / "moved")
    os.symlink(other, mine)  # a link planted where the owned directory was
    with pytest.raises(NotOwned):
        owned.remove(mine)
    assert other.is_dir()
    os.unlink(mine)
    os.rename(tmp_path / "moved", mine)
    (mine / "link").symlink_to(other)
    owned.remove(mine)
    assert not mine.exists() and other.is_dir()
