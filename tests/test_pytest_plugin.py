"""The pytest plugin (SPEC §16.7): scenario files as items (ci-tagged by default), fixtures.

Collection and runs are checked on a pytest in a subprocess over a scenario directory made here
(the plugin is loaded from the ``pytest11`` entry point, as in any project that installs
hermes-state); the fixtures are used directly.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_state import SessionDB

# Both end on an event (the gateway's N-th acknowledged append), not a time: on a loaded machine
# a role's interpreter may start seconds late (`duration` is only a hang guard).
TINY = """\
name: tiny
description: One gateway appends until its 20th acknowledged append; nothing is lost.
seed: 1
tags: [ci]
duration: 60s
roles:
  - {name: g, kind: gateway, workload: {appends_per_s: 20}}
nemesis:
  - {after: {role: g, ok: 20}, fault: terminate, role: g}
expect:
  no_lost_writes: {}
  integrity: {}
"""

CADENCE = """\
name: cadence-three
description: Expects a checkpoint every 3 writes; the store checkpoints every 50, so it fails.
seed: 9
tags: [ci, nightly]
duration: 60s
roles:
  - {name: g, kind: gateway, workload: {appends_per_s: 0}}
nemesis:
  - {after: {role: g, ok: 60}, fault: terminate, role: g}
expect:
  checkpoint_cadence: {every: 3}
"""

HOOK = """\
from pathlib import Path

def pytest_chaos_scenario_result(item, result):
    Path(item.config.rootpath, "hook-" + item.scenario.name).write_text(str(result.run_dir))
"""


def _project(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    sc = tmp_path / "scenarios"
    sc.mkdir()
    for name, text in files.items():
        (sc / name).write_text(text)
    return tmp_path


def _pytest(root: Path, *args: str, paths: tuple[str, ...] = ("scenarios",)
            ) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider",
                           "--rootdir", str(root), "-c", str(root / "pytest.ini"),
                           "--basetemp", str(root / "basetemp"), *args,
                           *paths], cwd=root, capture_output=True, text=True, timeout=300,
                          env=env)


def test_collects_ci_scenarios_by_default_and_all_with_chaos_all(tmp_path):
    root = _project(tmp_path, {
        "tiny.yaml": TINY,
        "untagged.yaml": TINY.replace("tags: [ci]\n", "").replace("name: tiny", "name: untagged"),
        "bad.yaml": TINY.replace("kind: gateway", "kind: gatewy"),
        "notes.txt": "not a scenario",
    })
    default = _pytest(root, "--collect-only", "-q")
    ids = [line for line in default.stdout.splitlines() if "::" in line]
    assert ids == ["scenarios/bad.yaml::invalid", "scenarios/tiny.yaml::tiny[seed1]"], \
        default.stdout
    every = _pytest(root, "--collect-only", "-q", "--chaos-all", "--chaos-seeds", "2")
    ids = [line for line in every.stdout.splitlines() if "::" in line]
    assert ids == ["scenarios/bad.yaml::invalid", "scenarios/tiny.yaml::tiny[seed1]",
                   "scenarios/tiny.yaml::tiny[seed2]", "scenarios/untagged.yaml::untagged[seed1]",
                   "scenarios/untagged.yaml::untagged[seed2]"], every.stdout


@pytest.mark.parametrize("strict", [["--strict-markers"], ["-W", "error"],
                                    ["--strict-markers", "-W", "error"]])
def test_scenario_files_collect_under_strict_markers_and_warnings_as_errors(tmp_path, strict):
    """Issue 27 item 9: the plugin marked its items ``slow`` without registering it, so in a
    project that does not register it itself (as CI configurations often run) no scenario file
    could be collected."""
    root = _project(tmp_path, {"tiny.yaml": TINY})
    proc = _pytest(root, "--collect-only", "-q", *strict)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "scenarios/tiny.yaml::tiny[seed1]" in proc.stdout
    markers = _pytest(root, "--markers")
    assert "@pytest.mark.slow:" in markers.stdout and "@pytest.mark.chaos:" in markers.stdout


def test_untagged_scenarios_are_named_with_how_to_include_them(tmp_path):
    untagged = TINY.replace("tags: [ci]\n", "")
    root = _project(tmp_path, {"u1.yaml": untagged.replace("name: tiny", "name: u-one"),
                               "u2.yml": untagged.replace("name: tiny", "name: u-two")})
    proc = _pytest(root, "--collect-only", "-q")
    out = proc.stdout
    assert "no tests ran" not in out, out
    assert ("chaos: 2 scenario file(s) not run because they are not tagged 'ci': u1.yaml, u2.yml"
            in out), out
    assert "`tags: [ci]`" in out and "--chaos-all" in out
    # Under xdist the workers' collection reports reach the same summary line, and the final
    # line counts them instead of a bare "no tests ran".
    proc = _pytest(root, "-n", "2")
    assert "chaos: 2 scenario file(s) not run because they are not tagged 'ci'" in proc.stdout, \
        proc.stdout
    assert "2 untagged scenarios not run" in proc.stdout.splitlines()[-1], proc.stdout
    assert proc.returncode == 5  # nothing ran: CI (.ci/run) still treats this as a failure


def test_a_scenario_file_named_on_the_command_line_is_collected_at_any_path(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    repro = tmp_path / "bug-reports" / "lockup"
    repro.mkdir(parents=True)
    untagged = TINY.replace("tags: [ci]\n", "").replace("name: tiny", "name: lockup-repro")
    (repro / "repro.yaml").write_text(untagged)
    (repro / "other.yaml").write_text(TINY.replace("name: tiny", "name: other"))
    (repro / "compose.yaml").write_text("services:\n  web: {image: nginx}\n")
    named = _pytest(tmp_path, "--collect-only", "-q", paths=("bug-reports/lockup/repro.yaml",))
    ids = [line for line in named.stdout.splitlines() if "::" in line]
    # Named explicitly: collected even untagged, outside any `scenarios` folder.
    assert ids == ["bug-reports/lockup/repro.yaml::lockup-repro[seed1]"], named.stdout
    # A directory named on the command line: its scenario files (ci-tagged), not other YAML.
    walked = _pytest(tmp_path, "--collect-only", "-q", paths=("bug-reports",))
    ids = [line for line in walked.stdout.splitlines() if "::" in line]
    assert ids == ["bug-reports/lockup/other.yaml::other[seed1]"], walked.stdout
    assert "compose.yaml" not in walked.stdout
    assert "not tagged 'ci': repro.yaml" in walked.stdout


def test_a_step_level_delay_fails_its_item_naming_file_line_and_where_it_belongs(tmp_path):
    """A scenario file outside any `scenarios` folder, named on the command line, with `delay`
    written beside `after:`: one failing item whose report reads file:line: field: problem."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    repro = tmp_path / "repro"
    repro.mkdir()
    text = TINY.replace("nemesis:\n", "nemesis:\n  - {after: {role: g, ok: 5}, delay: 1s, "
                        "fault: kill, role: g}\n")
    (repro / "delay.yaml").write_text(text)
    line = text.splitlines().index(next(t for t in text.splitlines() if "delay:" in t)) + 1
    proc = _pytest(tmp_path, "-q", paths=("repro/delay.yaml",))
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert f"delay.yaml:{line}: nemesis[0].delay: unknown key 'delay'" in out, out
    assert "write `after: {role: g, ok: 5, delay: 1s}`" in out, out
    assert "1 failed" in out.splitlines()[-1]


@pytest.mark.slow
def test_items_run_under_xdist_pass_fail_and_call_the_result_hook(tmp_path):
    root = _project(tmp_path, {"tiny.yaml": TINY, "cadence.yaml": CADENCE,
                               "bad.yaml": TINY.replace("kind: gateway", "kind: gatewy"),
                               "conftest.py": HOOK})
    proc = _pytest(root, "-n", "2", "-rA")
    out = proc.stdout
    assert proc.returncode == 1, out + proc.stderr
    assert "2 failed, 1 passed" in out.splitlines()[-1], out[-3000:]
    assert "PASSED scenarios/tiny.yaml::tiny[seed1]" in out
    assert "FAILED scenarios/cadence.yaml::cadence-three[seed9]" in out
    assert "FAILED scenarios/bad.yaml::invalid" in out
    # The failure report names the checker, its verdict and the run directory.
    assert "FAIL         checkpoint_cadence: " in out and "run directory: " in out
    assert "bad.yaml:7: roles[0].kind" in out
    assert "[gw0]" in out or "gw1" in out  # ran on xdist workers
    # The hook saw the passing run only (a failed run is reported before any extra check).
    assert Path((root / "hook-tiny").read_text(), "results.json").exists()
    assert not (root / "hook-cadence-three").exists()


def test_hermes_home_is_an_empty_temporary_home(hermes_home, tmp_path):
    assert hermes_home.is_dir() and list(hermes_home.iterdir()) == []
    assert os.environ["HERMES_HOME"] == str(hermes_home)
    assert tmp_path in hermes_home.parents


def test_session_db_is_a_store_in_hermes_home(session_db, hermes_home):
    session_db.create_session("s1", source="cli")
    session_db.append_message("s1", "user", "hello plugin")
    assert (hermes_home / "state.db").exists()
    with SessionDB(hermes_home / "state.db") as other:
        assert [m["content"] for m in other.get_messages("s1")] == ["hello plugin"]


@pytest.mark.slow
def test_run_scenario_runs_text_with_a_seed_in_a_temporary_directory(run_scenario, tmp_path):
    result = run_scenario(TINY, seed=77)
    assert result.exit_code == 0, result.console_text
    assert result.results["seed"] == 77
    assert tmp_path in result.run_dir.parents
    assert {v.checker for v in result.verdicts} == {"no_lost_writes", "integrity", "liveness"}
    assert "tiny (seed 77)" in result.console_text
