"""``python -m chaos gate``: scenarios × seeds plus the matrix, a verdict table, JUnit XML.

Each test points ``--scenarios`` at its own small directory and limits the matrix (the whole
gate is minutes; it is run by hand before a schema bump).
"""

from __future__ import annotations

import subprocess
import sys
import threading
import xml.etree.ElementTree as ET
from pathlib import Path

from chaos.gate import GateRow, _Slots, write_junit

REPO = Path(__file__).resolve().parent.parent

PASSING = """\
name: tiny
description: One gateway appends for a few seconds; nothing is lost.
seed: 1
duration: 3s
roles:
  - {name: g, kind: gateway, workload: {appends_per_s: 20}}
expect:
  no_lost_writes: {}
  integrity: {}
"""

FAILING = """\
name: cadence-three
description: Expects a checkpoint every 3 writes; the store checkpoints every 50, so it fails.
seed: 9
duration: 3s
roles:
  - {name: g, kind: gateway, workload: {appends_per_s: 0}}
expect:
  checkpoint_cadence: {every: 3}
  integrity: {}
"""


def gate(*args, cwd=REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chaos", "gate", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def test_failing_scenario_fails_the_gate_with_one_testcase_per_seed_and_matrix_row(tmp_path):
    sc = tmp_path / "scenarios"
    sc.mkdir()
    (sc / "tiny.yaml").write_text(PASSING)
    (sc / "cadence.yaml").write_text(FAILING)
    junit = tmp_path / "gate.xml"
    proc = gate("--scenarios", sc, "--seeds", 2, "--versions", 22, "--no-real",
                "--modes", "plain,crash", "--junit", junit, "--out", tmp_path / "out", "--jobs", 2)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "total" in proc.stdout.splitlines()[-1] and "(FAIL)" in proc.stdout.splitlines()[-1]
    root = ET.parse(junit).getroot()
    cases = {(c.get("classname"), c.get("name")): c for c in root.iter("testcase")}
    assert set(cases) == {
        ("chaos.scenarios.tiny.yaml", "seed1"), ("chaos.scenarios.tiny.yaml", "seed2"),
        ("chaos.scenarios.cadence.yaml", "seed9"), ("chaos.scenarios.cadence.yaml", "seed10"),
        ("chaos.matrix.v22", "plain"), ("chaos.matrix.v22", "crash@v23")}
    assert root.get("tests") == "6" and root.get("failures") == "2" and root.get("errors") == "0"
    for seed in ("seed9", "seed10"):
        failure = cases[("chaos.scenarios.cadence.yaml", seed)].find("failure")
        assert failure is not None and failure.get("type") == "FAIL"
        assert failure.get("message").startswith("checkpoint_cadence FAIL")
        assert "run directory:" in failure.text
    for key in [k for k in cases if "cadence" not in k[0]]:
        assert cases[key].find("failure") is None and cases[key].find("error") is None
    # Each scenario run has its own run directory under --out.
    runs = sorted(p.name.rsplit("-seed", 1)[1] for p in (tmp_path / "out" / "runs").iterdir())
    assert runs == ["1", "10", "2", "9"]


def test_all_passing_exits_0(tmp_path):
    sc = tmp_path / "scenarios"
    sc.mkdir()
    (sc / "tiny.yaml").write_text(PASSING)
    proc = gate("--scenarios", sc, "--no-matrix", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "tiny.yaml seed1" in proc.stdout and "1 rows passed, 0 skipped, 0 not passed" in proc.stdout


def test_an_invalid_scenario_stops_the_gate_before_anything_runs(tmp_path):
    sc = tmp_path / "scenarios"
    sc.mkdir()
    (sc / "tiny.yaml").write_text(PASSING)
    (sc / "bad.yaml").write_text(PASSING.replace("kind: gateway", "kind: gatewy"))
    proc = gate("--scenarios", sc, "--out", tmp_path / "out")
    assert proc.returncode == 2
    assert f"{sc / 'bad.yaml'}:" in proc.stderr and "roles[0].kind" in proc.stderr
    assert not (tmp_path / "out").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = gate("--scenarios", empty, "--no-matrix")
    assert proc.returncode == 2 and "no scenario files" in proc.stderr


def test_junit_marks_inconclusive_as_failure_and_toolkit_trouble_as_error(tmp_path):
    rows = [GateRow("scenario", "a.yaml", "seed1", "PASS", "ok", seconds=1.0),
            GateRow("scenario", "a.yaml", "seed2", "INCONCLUSIVE", "must_observe INCONCLUSIVE: "
                    "never observed: kill", "details"),
            GateRow("matrix", "matrix.v3", "crash@v4", "ERROR", "no verdict", "log tail")]
    path = tmp_path / "j.xml"
    write_junit(path, rows, 3.5)
    root = ET.parse(path).getroot()
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "1")
    cases = list(root.iter("testcase"))
    assert cases[1].find("failure").get("type") == "INCONCLUSIVE"
    assert cases[1].find("failure").text == "details"
    assert cases[2].find("error").get("message") == "no verdict"


def test_an_exclusive_job_never_runs_beside_another():
    slots = _Slots(2)
    inside: list[str] = []
    overlaps: list[tuple] = []
    lock = threading.Lock()
    release = {name: threading.Event() for name in ("a", "b", "x")}

    def job(name, exclusive):
        slots.acquire(exclusive)
        with lock:
            if inside and (exclusive or "x" in inside):
                overlaps.append((name, tuple(inside)))
            inside.append(name)
        release[name].wait(30)
        with lock:
            inside.remove(name)
        slots.release(exclusive)

    threads = [threading.Thread(target=job, args=("a", False)),
               threading.Thread(target=job, args=("b", False))]
    for t in threads:
        t.start()
    while len(inside) < 2:  # both ordinary jobs hold a slot
        threading.Event().wait(0.01)
    x = threading.Thread(target=job, args=("x", True))
    x.start()
    release["a"].set()
    threads[0].join(30)
    assert "x" not in inside  # one slot is free, but x needs every slot
    release["b"].set()
    threads[1].join(30)
    release["x"].set()
    x.join(30)
    assert overlaps == [] and inside == []
