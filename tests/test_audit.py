"""``python -m chaos audit`` (issue 14): a tiny catalogue in tmp run through the real command
(one mutant killed, one survivor, one stale pattern), the probe that proves a run ran the mutant
copy, and the shipped catalogue's freshness (every pattern matches exactly once today)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from rich.console import Console

import hermes_state
from chaos.audit import catalogue as mutants
from chaos.audit import driver as audit
from chaos.audit import probe as audit_probe
from chaos.audit import verdicts
from chaos.scenario import load_scenario

REPO = Path(__file__).resolve().parent.parent
PACKAGE = Path(hermes_state.__file__).resolve().parent

TINY_SCENARIO = """\
name: audit-tiny
description: one gateway appends as fast as it can; a PASSIVE checkpoint every 50 writes (audit self-test)
seed: 1
duration: 2.5s
store: {fixture: empty}
roles:
  - {name: gateway, kind: gateway, count: 1, workload: {appends_per_s: 0, sessions: 1}}
expect:
  checkpoint_cadence: {every: 50}
  integrity: {}
"""

KILLED = """\
rule: the periodic checkpoint runs PASSIVE
spec: "§4"
rewrite:
  name: cadence checkpoint in FULL mode
  literal: self.checkpoint("PASSIVE", trigger="cadence")
  replacement: self.checkpoint("FULL", trigger="cadence")
scenarios: [tiny]
"""

SURVIVOR = """\
rule: a failed checkpoint is logged (a wording change no scenario can see)
spec: "§4"
rewrite:
  name: other log text
  regex: 'log\\.info\\("%s checkpoint failed \\(ignored\\): %s"'
  replacement: 'log.info("%s checkpoint failed (ignored, mutant): %s"'
"""

STALE = """\
rule: a rule whose code is gone
spec: "§4"
rewrite:
  literal: this text appears nowhere in hermes_state
  replacement: nothing
"""


def _tiny(tmp_path: Path, **files: str) -> tuple[Path, Path]:
    cat = tmp_path / "mutants"
    cat.mkdir()
    for name, text in files.items():
        (cat / f"{name}.yaml").write_text(text)
    scen = tmp_path / "scen"
    scen.mkdir()
    (scen / "tiny.yaml").write_text(TINY_SCENARIO)
    return cat, scen


def _audit(tmp_path: Path, cat: Path, scen: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "chaos", "audit", "--mutants", str(cat), "--scenarios",
         str(scen / "*.yaml"), "--jobs", "2", "--out", str(tmp_path / "out"), "--json",
         "--no-matrix", *extra],
        capture_output=True, text=True, cwd=REPO, timeout=600)


@pytest.mark.slow
def test_tiny_catalogue_killed_survivor_stale(tmp_path):
    cat, scen = _tiny(tmp_path, killed=KILLED, survivor=SURVIVOR, stale=STALE)
    junit = tmp_path / "audit.xml"
    proc = _audit(tmp_path, cat, scen, "--junit", str(junit))
    assert proc.returncode == 1, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    rows = {m["name"]: m for m in out["mutants"]}
    assert rows["killed"]["status"] == "KILLED"
    assert rows["killed"]["killed_by"] == "tiny"
    assert rows["killed"]["checker"].startswith("checkpoint_cadence FAIL")
    assert rows["killed"]["file"] == "hermes_state/store/connection.py"
    assert rows["survivor"]["status"] == "SURVIVED"
    assert [r["scenario"] for r in rows["survivor"]["runs"]] == ["tiny.yaml"]
    assert rows["stale"]["status"] == "ERROR"
    assert "stale mutant stale" in rows["stale"]["error"]
    assert "matched 0 time(s)" in rows["stale"]["error"]
    assert rows["stale"]["runs"] == []
    assert (out["killed"], out["survived"], out["error"]) == (1, 1, 1)
    assert out["controls"]["tiny.yaml"]["status"] == "PASS"
    assert out["invalid"] == []
    # every process of the killing run imported the mutated copy, and the copy is mutated
    copy = tmp_path / "out" / "killed" / "hermes_state"
    recs = audit_probe.records(tmp_path / "out" / "killed" / "probe-tiny.jsonl")
    imports = [r for r in recs if "origin" in r]
    assert len(imports) >= 2  # the chaos run driver and the gateway role at least
    assert {r["origin"] for r in imports} == {str(copy / "__init__.py")}
    # the killing run reached the mutated statement (the cadence checkpoint), in a role
    reached = audit_probe.reached(tmp_path / "out" / "killed" / "probe-tiny.jsonl")
    assert reached and reached[0].startswith("hermes_state/store/connection.py:")
    assert rows["killed"]["kills"] == "3 of 3"  # the kill and its two confirmation runs
    assert [r.get("confirmation") for r in rows["killed"]["runs"]] == [None, 1, 2]
    # the survivor's rewrite (a log line of a failed checkpoint) never ran: nothing reached
    assert rows["survivor"]["runs"][0]["reached"] == []
    assert rows["survivor"]["sites"] == 1
    assert 'self.checkpoint("FULL", trigger="cadence")' in (copy / "store" / "connection.py").read_text()
    assert 'self.checkpoint("FULL"' not in (PACKAGE / "store" / "connection.py").read_text()
    assert "kill table" in proc.stderr
    suite = ET.parse(junit).getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("3", "1", "1")


@pytest.mark.slow
def test_every_mutant_killed_exits_zero(tmp_path):
    cat, scen = _tiny(tmp_path, killed=KILLED)
    md = tmp_path / "table.md"
    proc = _audit(tmp_path, cat, scen, "--markdown", str(md))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "| `killed` | §4 |" in md.read_text()
    assert "1 of 1 mutants killed, 0 survived, 0 flaky" in md.read_text()
    assert "every kill confirmed by 2 more run(s) of the mutant" in md.read_text()
    assert "Machine load: " in md.read_text() and "load factors: median" in md.read_text()


def test_bad_mutant_file_is_a_usage_error_naming_file_and_field(tmp_path):
    cat, scen = _tiny(tmp_path, bad=KILLED + "colour: red\n")
    proc = _audit(tmp_path, cat, scen)
    assert proc.returncode == 2
    assert "bad.yaml" in proc.stderr and "colour" in proc.stderr


def test_pattern_matching_twice_is_stale_not_killed(tmp_path):
    twice = mutants.Mutant("twice", "x", "r", "§4", "n", "import", "import", False)
    with pytest.raises(mutants.StaleMutant) as err:
        twice.apply(PACKAGE, tmp_path)
    assert "matched" in str(err.value) and sum(err.value.matches.values()) > 1
    assert not (tmp_path / "hermes_state").exists()


def test_copy_leaves_byte_code_behind_and_mutates_only_the_copy(tmp_path):
    m = mutants.load(_tiny(tmp_path, killed=KILLED)[0] / "killed.yaml")
    target = m.apply(PACKAGE, tmp_path / "w")
    assert target == tmp_path / "w" / "hermes_state" / "store" / "connection.py"
    assert not list((tmp_path / "w").rglob("__pycache__"))
    assert not list((tmp_path / "w").rglob("*.pyc"))


def test_a_run_that_imports_other_code_makes_the_audit_invalid(tmp_path):
    """The worst bug: a run that imports another hermes_state than the copy it should judge.
    Here the run's PYTHONPATH carries a pristine copy while the workspace claims another
    package: the probe sees where the import really came from, and the audit refuses."""
    (tmp_path / "scen").mkdir()
    (tmp_path / "scen" / "tiny.yaml").write_text(TINY_SCENARIO)
    sc = load_scenario(tmp_path / "scen" / "tiny.yaml")
    a = audit.Audit(tmp_path / "out", [sc], 1, Console(file=open(os.devnull, "w")))
    ws = a.workspace("pristine", None)
    claimed = mutants.copy_package(PACKAGE, tmp_path / "elsewhere")
    wrong = audit.Workspace(ws.root, claimed, None)
    with pytest.raises(audit.AuditInvalid) as err:
        a.run_scenario(wrong, Path(sc.source))
    assert "not from the copy" in str(err.value)
    assert str(ws.root / "hermes_state" / "__init__.py") in str(err.value)


def test_probe_verify_fails_closed(tmp_path):
    log = tmp_path / "probe.jsonl"
    pkg = tmp_path / "copy" / "hermes_state"
    pkg.mkdir(parents=True)
    assert audit_probe.verify(log, pkg, [])[0].startswith("no process recorded")
    log.write_text(json.dumps({"pid": 7, "origin": str(pkg / "__init__.py"), "argv": []}) + "\n"
                   + '{"pid": 8, "orig')  # a torn last line of a killed process
    assert audit_probe.verify(log, pkg, [7]) == []
    problems = audit_probe.verify(log, pkg, [7, 9])
    assert problems == ["role process pid 9 recorded no import of hermes_state from the copy"]
    with open(log, "a") as fh:
        fh.write("\n" + json.dumps({"pid": 10, "origin": str(PACKAGE / "__init__.py"),
                                    "argv": ["x"]}) + "\n")
    assert any("pid 10 (x) imported hermes_state from" in p
               for p in audit_probe.verify(log, pkg, [7]))


# ------------------------------------------------------------------ the shipped catalogue

CATALOGUE = mutants.load_dir()


@pytest.mark.parametrize("mutant", CATALOGUE, ids=[m.name for m in CATALOGUE])
def test_shipped_mutant_matches_exactly_once_and_compiles(mutant, tmp_path):
    """A pattern that no longer matches (code moved or rewritten) is caught here, at once."""
    planted = mutant.plant(PACKAGE, tmp_path)
    assert planted.files
    for target in planted.files:
        assert target.read_text() != (PACKAGE / target.relative_to(tmp_path / "hermes_state")
                                      ).read_text()
    known = {p.stem for p in (REPO / "scenarios").glob("*.yaml")} | {audit.MATRIX.name}
    assert mutant.scenarios, "name the scenarios most likely to kill it"
    assert set(mutant.scenarios) <= known, set(mutant.scenarios) - known
    assert mutant.spec.startswith("§") and mutant.rule


def test_catalogue_covers_every_safety_rule_family():
    sections = {m.spec.split()[0].rstrip(",") for m in CATALOGUE}
    assert len(CATALOGUE) >= 15
    assert {"§4", "§10.1", "§10.4", "§10.5", "§11"} <= sections


def _stubbed(tmp_path: Path, outcomes: list, *, confirm: int = 0, control=None,
             scenarios: tuple[str, ...] = ("tiny",)) -> audit.MutantResult:
    """audit_one on a mutant whose runs end as ``outcomes``, in order: a status, or a
    RunOutcome (its scenario name is filled in). ``control``: the control runs' statuses per
    scenario (None: no control)."""
    tmp_path.mkdir()
    _, scen = _tiny(tmp_path)
    for extra in scenarios[1:]:
        (scen / f"{extra}.yaml").write_text(TINY_SCENARIO.replace("audit-tiny", extra))
    scs = [load_scenario(scen / f"{n}.yaml") for n in scenarios]
    a = audit.Audit(tmp_path / "out", scs, 1, Console(file=open(os.devnull, "w")),
                    control=control is not None, confirm=confirm)
    a.workspace = lambda name, mutant: audit.Workspace(tmp_path, tmp_path, None)
    left = list(outcomes)
    ctl = {k: list(v) for k, v in (control or {}).items()}

    def run(ws, scenario):
        if ws is not None and a.control is not None and ws is a.control.ws:
            return audit.RunOutcome(scenario.name, ctl[scenario.stem].pop(0))
        out = left.pop(0)
        if isinstance(out, str):
            return audit.RunOutcome(scenario.name, out)
        out.scenario = scenario.name
        return out

    a.run_scenario = run
    if a.control is not None:
        a.control.ws = object()
    m = mutants.Mutant("m", "m.yaml", "a rule", "§4", "a rewrite", "x", "y", False,
                       scenarios=list(scenarios))
    res = a.audit_one(m)
    assert left == []  # no run more than the rule asks for
    assert all(v == [] for v in ctl.values()), ctl
    return res


def test_an_inconclusive_kill_needs_a_second_run_of_the_mutant(tmp_path):
    assert _stubbed(tmp_path / "a", ["FAIL"]).status == audit.KILLED  # confirm 0: at once
    assert _stubbed(tmp_path / "b", ["INCONCLUSIVE", "INCONCLUSIVE"]).status == audit.KILLED
    res = _stubbed(tmp_path / "c", ["INCONCLUSIVE", "PASS"])  # the load, not the mutant
    assert res.status == audit.FLAKY and res.kills == "1 of 2"
    assert "killed in 1 of 2 runs" in res.runs[-1]["note"]
    assert res.runs[0]["kill"] is False


def _timing_fail(reached: list[str] | None = None) -> audit.RunOutcome:
    """issue 27's example: no_lockup FAILed at 6.01 s against a 6 s bound, at load ~29."""
    return audit.RunOutcome("lock_stall.yaml", "FAIL",
                            ["no_lockup FAIL: a write waited 6.01 s (bound 6 s)"],
                            failed_checkers=["no_lockup"], reached=reached, load_factor=2.9)


def test_a_timing_bound_kill_is_believed_only_when_a_rerun_fails_too(tmp_path):
    """A FAIL only of a wall-clock bound is rerun like the gate reruns it, even with
    ``--confirm 0``: passing the rerun, it is a flaky killer, never a kill."""
    res = _stubbed(tmp_path / "a", [_timing_fail(["f.py:1"]), "PASS"])
    assert res.status == audit.FLAKY
    assert res.flaky == [{"scenario": "tiny", "checker": res.checker, "kills": 1, "runs": 2}]
    res = _stubbed(tmp_path / "b", [_timing_fail(["f.py:1"]), _timing_fail(["f.py:1"])])
    assert res.status == audit.KILLED and res.kills == "2 of 2"


def test_a_failure_in_a_run_that_never_reached_the_mutant_is_no_kill(tmp_path):
    """The load-29 case: the FAIL came from a run in which no process executed the mutated
    statement; it is not the mutant's, whatever the checker."""
    res = _stubbed(tmp_path / "a", [_timing_fail([])])
    assert res.status == audit.SURVIVED
    assert "no process of the run reached the mutated code" in res.runs[0]["note"]
    lost = audit.RunOutcome("x.yaml", "FAIL", ["no_lost_writes FAIL: 3 lost"],
                            failed_checkers=["no_lost_writes"], reached=[])
    assert _stubbed(tmp_path / "b", [lost]).status == audit.SURVIVED
    # reached in the confirmation run too, or the kill is flaky
    res = _stubbed(tmp_path / "c", [_timing_fail(["f.py:1"]), _timing_fail([])], confirm=1)
    assert res.status == audit.FLAKY


def test_a_killer_that_passes_a_confirmation_run_is_flaky_and_the_search_goes_on(tmp_path):
    res = _stubbed(tmp_path / "a", ["FAIL", "FAIL", "PASS", "FAIL", "FAIL", "FAIL"], confirm=2,
                   scenarios=("tiny", "other"))
    assert res.status == audit.KILLED and res.killed_by == "other" and res.kills == "3 of 3"
    assert res.flaky == [{"scenario": "tiny", "checker": "FAIL", "kills": 2, "runs": 3}]
    res = _stubbed(tmp_path / "b", ["FAIL", "PASS", "PASS"], confirm=2,
                   scenarios=("tiny", "other"))
    assert res.status == audit.FLAKY and res.killed_by == "tiny" and res.kills == "1 of 2"


def test_a_failed_control_is_run_once_more_before_its_scenario_is_set_aside(tmp_path):
    # failed once under load, passed when run again: the scenario still judges mutants
    res = _stubbed(tmp_path / "a", ["FAIL"], control={"tiny": ["INCONCLUSIVE", "PASS"]})
    assert res.status == audit.KILLED
    # failed twice: the mutant's failure proves nothing
    res = _stubbed(tmp_path / "b", ["FAIL"], control={"tiny": ["FAIL", "FAIL"]})
    assert res.status == audit.SURVIVED
    assert "fails on the unmutated copy too" in res.runs[0]["note"]
    # a control that passes is run once, for every mutant
    res = _stubbed(tmp_path / "c", ["FAIL"], control={"tiny": ["PASS"]})
    assert res.status == audit.KILLED


def test_a_role_killed_before_it_ran_has_no_import_to_prove(tmp_path):
    hist = tmp_path / "history"
    hist.mkdir()
    (hist / "gateway-0.jsonl").write_text('{"t": 1}\n')
    (hist / "gateway-1.jsonl").write_text("")
    assert audit._ran(str(tmp_path), "gateway-0")
    assert not audit._ran(str(tmp_path), "gateway-1")   # killed before its first record
    assert not audit._ran(str(tmp_path), "gateway-2")   # no history at all
    assert audit._ran(None, "gateway-1")                # nothing to go by: stay strict


def test_the_matrix_is_one_more_killer_judged_by_its_rows(tmp_path):
    """The quick schema-migration matrix is tried last (first when a mutant names it); its rows
    that did not pass are the kill's evidence."""
    rows = [{"name": "v1/plain", "status": "PASS", "problems": []},
            {"name": "real-3/crash@v18", "status": "FAIL", "problems": ["routing lost"]},
            {"name": "v2/writer", "status": "SKIPPED", "problems": ["no fuse"]}]
    out = verdicts.matrix_outcome("matrix", 1, "progress\n" + "\n".join(
        json.dumps(r) for r in rows), 50.0, tmp_path / "log")
    assert out.status == "FAIL" and out.failed_checkers == ["matrix"]
    assert out.checkers == ["matrix real-3/crash@v18 FAIL: routing lost"]
    assert verdicts.matrix_outcome("matrix", 0, json.dumps(rows[0]), 1, tmp_path).status == "PASS"
    assert verdicts.matrix_outcome("matrix", 1, "no rows", 1, tmp_path).status == "ERROR"
    assert verdicts.matrix_outcome("matrix", None, "", 1, tmp_path).status == "HANG"
    (tmp_path / "s").mkdir()
    _, scen = _tiny(tmp_path / "s")
    sc = load_scenario(scen / "tiny.yaml")
    a = audit.Audit(tmp_path / "out", [sc], 1, Console(file=open(os.devnull, "w")), matrix=True)
    m = mutants.Mutant("m", "m.yaml", "r", "§4", "n", "x", "y", False, scenarios=[])
    assert [p.name for p in a.order(m)] == ["tiny.yaml", "matrix"]
    m = mutants.Mutant("m", "m.yaml", "r", "§4", "n", "x", "y", False, scenarios=["matrix"])
    assert [p.name for p in a.order(m)] == ["matrix", "tiny.yaml"]
    a.matrix = False
    assert [p.name for p in a.order(m)] == ["tiny.yaml"]


def test_the_matrix_children_import_the_store_the_matrix_runs(tmp_path):
    """Run on a mutant copy (PYTHONPATH first), the matrix's children (old-schema writer, open
    probes, crash children) get that copy first on their path and run in it, never the
    checkout's store (else the audit is INVALID: found by the first matrix kill attempt)."""
    copy = tmp_path / "copy"
    shutil.copytree(Path(hermes_state.__file__).resolve().parent, copy / "hermes_state",
                    ignore=shutil.ignore_patterns("__pycache__"))
    code = ("import json, chaos.matrix.open_probe as o, chaos.matrix.real_stores as r; "
            "print(json.dumps([str(o.STORE_ROOT), str(r.STORE_ROOT), "
            "o.probe_env()['PYTHONPATH']]))")
    env = {**os.environ, "PYTHONPATH": str(copy)}
    out = subprocess.run([sys.executable, "-c", code], cwd=copy, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    o_root, r_root, path = json.loads(out.stdout)
    assert o_root == r_root == str(copy)
    assert path.split(os.pathsep)[0] == str(copy)
