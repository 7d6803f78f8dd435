"""``python -m chaos audit`` (issue 14): a tiny catalogue in tmp run through the real command
(one mutant killed, one survivor, one stale pattern), the probe that proves a run ran the mutant
copy, and the shipped catalogue's freshness (every pattern matches exactly once today)."""

from __future__ import annotations

import json
import os
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
         str(scen / "*.yaml"), "--jobs", "2", "--out", str(tmp_path / "out"), "--json", *extra],
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
    assert len(recs) >= 2  # the chaos run driver and the gateway role at least
    assert {r["origin"] for r in recs} == {str(copy / "__init__.py")}
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
    assert "1 of 1 mutants killed; wall time" in md.read_text()


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
    target = mutant.apply(PACKAGE, tmp_path)
    assert target.read_text() != (PACKAGE / target.relative_to(tmp_path / "hermes_state")
                                  ).read_text()
    known = {p.stem for p in (REPO / "scenarios").glob("*.yaml")}
    assert mutant.scenarios, "name the scenarios most likely to kill it"
    assert set(mutant.scenarios) <= known, set(mutant.scenarios) - known
    assert mutant.spec.startswith("§") and mutant.rule


def test_catalogue_covers_every_safety_rule_family():
    sections = {m.spec.split()[0].rstrip(",") for m in CATALOGUE}
    assert len(CATALOGUE) >= 15
    assert {"§4", "§10.1", "§10.4", "§10.5", "§11"} <= sections


def _stubbed(tmp_path: Path, outcomes: list[str]) -> audit.MutantResult:
    """audit_one on a mutant whose runs of the tiny scenario end as ``outcomes``, in order."""
    tmp_path.mkdir()
    _, scen = _tiny(tmp_path)
    sc = load_scenario(scen / "tiny.yaml")
    a = audit.Audit(tmp_path / "out", [sc], 1, Console(file=open(os.devnull, "w")),
                    control=False)
    a.workspace = lambda name, mutant: audit.Workspace(tmp_path, tmp_path, None)
    left = list(outcomes)
    a.run_scenario = lambda ws, scenario: audit.RunOutcome(scenario.name, left.pop(0))
    m = mutants.Mutant("m", "m.yaml", "a rule", "§4", "a rewrite", "x", "y", False,
                       scenarios=["tiny"])
    res = a.audit_one(m)
    assert left == []  # no run more than the rule asks for
    return res


def test_an_inconclusive_kill_needs_a_second_run_of_the_mutant(tmp_path):
    assert _stubbed(tmp_path / "a", ["FAIL"]).status == audit.KILLED  # a checker FAIL: at once
    assert _stubbed(tmp_path / "b", ["INCONCLUSIVE", "INCONCLUSIVE"]).status == audit.KILLED
    res = _stubbed(tmp_path / "c", ["INCONCLUSIVE", "PASS"])  # the load, not the mutant
    assert res.status == audit.SURVIVED
    assert "then PASS on a second run of the mutant" in res.runs[0]["note"]
    assert res.runs[0]["kill"] is False


def test_a_role_killed_before_it_ran_has_no_import_to_prove(tmp_path):
    hist = tmp_path / "history"
    hist.mkdir()
    (hist / "gateway-0.jsonl").write_text('{"t": 1}\n')
    (hist / "gateway-1.jsonl").write_text("")
    assert audit._ran(str(tmp_path), "gateway-0")
    assert not audit._ran(str(tmp_path), "gateway-1")   # killed before its first record
    assert not audit._ran(str(tmp_path), "gateway-2")   # no history at all
    assert audit._ran(None, "gateway-1")                # nothing to go by: stay strict
