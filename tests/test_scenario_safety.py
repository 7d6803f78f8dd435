"""Issue 11 items 2, 4 and 9 on the toolkit side: a scenario's paths stay inside its run,
validate never blocks on a special file nor reads a huge one, and what validate accepts the
run can execute (SPEC §16.4)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from chaos.nemesis import FAULTS, NemesisEnv, NemesisError
from chaos.nemesis.commands import command_argv
from chaos.scenario import ScenarioError, load_scenario, load_scenario_text
from chaos.scenario.loading import MAX_FILE_BYTES

BASE = textwrap.dedent("""\
    name: paths
    description: a scenario naming paths
    duration: 5s
    roles:
      - {name: gw, kind: gateway}
      - name: maint
        kind: maintenance
        workload: {command: prune, args: ARGS}
    nemesis:
      - {at: 1s, fault: run, command: recover, args: [--source, state.db, --output, ../out.db]}
      - {at: 2s, fault: replace_db, source: file, path: ../out.db}
    expect: {integrity: {}}
    """)


def _problems(text: str):
    with pytest.raises(ScenarioError) as exc:
        load_scenario_text(text, "p.yaml")
    return exc.value.problems


# ------------------------------------------------------------------------------ item 2
def test_paths_inside_the_run_are_accepted():
    sc = load_scenario_text(BASE.replace("ARGS", '["--older-than", "0", "--source", "cli"]'))
    assert sc.nemesis[1].params.path == "../out.db"


@pytest.mark.parametrize("args, field, needle", [
    ('["--home", "/root/.hermes"]', "roles[1].workload.args[1]", "absolute path"),
    ('["--home=/root/.hermes"]', "roles[1].workload.args[0]", "absolute path"),
    ('["--older-than", "0", "--home", "../../real"]', "roles[1].workload.args[3]",
     "leaves the run directory"),
    ('["--output", "~/x.db"]', "roles[1].workload.args[1]", "absolute path"),
    ('["-p", "../../../etc"]', "roles[1].workload.args[1]", "leaves the run directory"),
    ('["--report", "../../r.json"]', "roles[1].workload.args[1]", "leaves the run directory"),
])
def test_maintenance_paths_outside_the_run_are_refused(args, field, needle):
    text = BASE.replace("ARGS", args)
    (p,) = [p for p in _problems(text) if p.field == field]
    assert needle in p.message and p.line == 8, str(p)
    assert str(p).startswith("p.yaml:8: " + field + ": ")


@pytest.mark.parametrize("old, new, field", [
    ("--output, ../out.db]", "--output, /tmp/out.db]", "nemesis[0].args[3]"),
    ("--source, state.db,", "--source, ../../../var/lib/state.db,", "nemesis[0].args[1]"),
    ("path: ../out.db}", "path: /etc/passwd}", "nemesis[1].path"),
    ("path: ../out.db}", "path: ../../elsewhere.db}", "nemesis[1].path"),
])
def test_nemesis_paths_outside_the_run_are_refused(old, new, field):
    text = BASE.replace("ARGS", "[]").replace(old, new)
    (p,) = [p for p in _problems(text) if p.field == field]
    assert p.line in (10, 11), str(p)


def test_validate_cli_names_file_line_field(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text(BASE.replace("ARGS", '["--home", "/"]'))
    proc = subprocess.run([sys.executable, "-m", "chaos", "validate", str(f)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert f"{f}:8: roles[1].workload.args[1]: --home: '/' is an absolute path" in proc.stderr


def test_run_refuses_a_path_escaping_the_run_even_through_a_symlink(tmp_path):
    run = tmp_path / "run"
    (run / "home").mkdir(parents=True)
    (run / "home" / "link").symlink_to(tmp_path)  # inside by name, outside in fact
    with pytest.raises(ValueError, match="outside the run directory"):
        command_argv("prune", run / "home", run / "home" / "state.db",
                     args=["--home", "link/elsewhere"])
    argv = command_argv("recover", run / "home", run / "home" / "state.db",
                        args=["--source", "state.db", "--output", "../out.db"])
    assert "../out.db" in argv
    env = NemesisEnv(run / "home" / "state.db", lambda: [])
    (tmp_path / "other.db").write_bytes(b"x")
    with pytest.raises(NemesisError, match="outside the run directory"):
        FAULTS["replace_db"](env, {"source": "file", "path": "link/other.db"})


# ------------------------------------------------------------------------------ item 4
def _validate(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chaos", "validate", str(path)],
                          capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_validate_refuses_a_fifo_without_blocking(tmp_path):
    fifo = tmp_path / "s.yaml"
    os.mkfifo(fifo)
    proc = _validate(fifo)
    assert proc.returncode == 2
    assert f"{fifo}: (file): not a regular file (a FIFO)" in proc.stderr
    for cmd in (["run", str(fifo)], ["list", str(tmp_path)]):
        out = subprocess.run([sys.executable, "-m", "chaos", *cmd], capture_output=True,
                             text=True, timeout=120, cwd=tmp_path)
        assert out.returncode in (0, 2), out.stderr
    assert "invalid" in out.stdout  # list names the FIFO as invalid, and returns


def test_validate_refuses_dev_zero_and_a_directory(tmp_path):
    proc = _validate(Path("/dev/zero"))
    assert proc.returncode == 2 and "not a regular file (a character device)" in proc.stderr
    proc = _validate(tmp_path)
    assert proc.returncode == 2 and "not a regular file (a directory)" in proc.stderr


def test_validate_refuses_a_huge_file_without_reading_it(tmp_path):
    big = tmp_path / "big.yaml"
    with open(big, "wb") as fh:
        fh.truncate(50 * 1024 ** 3)  # sparse: 50 GiB on paper
    with pytest.raises(ScenarioError) as exc:
        load_scenario(big)
    assert "too large" in str(exc.value) and str(MAX_FILE_BYTES) in str(exc.value)


# ------------------------------------------------------------------------------ item 9
def test_a_name_too_long_for_a_run_directory_is_refused_by_validate(tmp_path):
    """Found by breaking it: a 250-character name validated, then the run could not create its
    run directory (ENAMETOOLONG, exit 3)."""
    long = "x" * 250
    text = BASE.replace("ARGS", "[]").replace("name: paths", f"name: {long}")
    (p,) = _problems(text)
    assert (p.field, p.line) == ("name", 1) and "at most 100 characters, got 250" in p.message
    role = BASE.replace("ARGS", "[]").replace("{name: gw, kind: gateway}",
                                              f"{{name: {long}, kind: gateway}}")
    assert any(p.field == "roles[0].name" for p in _problems(role))


def test_flags_of_a_defaulted_maintenance_command_are_judged_as_its_default():
    """Found by the item-9 mutation test: ``workload: {dry_run: true}`` (command left to its
    default, doctor) validated, then every run of the role failed: doctor has no --dry-run."""
    text = BASE.replace("{command: prune, args: ARGS}", "{dry_run: true}")
    (p,) = [p for p in _problems(text) if p.field == "roles[1].workload.dry_run"]
    assert "not 'doctor'" in p.message and p.line == 8
    text = BASE.replace("{command: prune, args: ARGS}", "{force: true}")
    assert [p.field for p in _problems(text)] == ["roles[1].workload.force"]
