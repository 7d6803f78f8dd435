"""``python -m chaos repro`` (issue 25): what it refuses, what it cannot reproduce, which class a
bundle's fields decide, and the store fixture it picks. The bundles start from a real one
(``doctor --bundle`` of a real quiet store) and have single fields changed, so each rule is seen
deciding on the field it cites. The runs of the scenarios are in tests/test_repro_classes.py.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from chaos.repro import EXIT_NOT_REPRODUCIBLE, make_repro
from chaos.repro.cases import BIG_WAL_FRAMES, NotReproducible, classify
from chaos.repro.source import Bundle
from chaos.scenario import load_scenario_text
from hermes_state import SessionDB
from hermes_state.operator.bundle import make_bundle, render

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def quiet(tmp_path_factory) -> dict:
    """The bundle of a real store nobody holds."""
    home = tmp_path_factory.mktemp("quiet")
    with SessionDB(home / "state.db") as db:
        db.create_session("s", source="cli")
        for i in range(10):
            db.append_message("s", "user", f"m{i}")
    return json.loads(render(make_bundle(home / "state.db")))


def write(tmp_path: Path, data: dict, name: str = "b.json") -> Path:
    path = tmp_path / name
    path.write_text(render(data))
    return path


def chaos(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "chaos", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=120, env={**os.environ, "PYTHONPATH": str(REPO)})


def proc(pid: int, role: str, *, state: str = "running", holds=(), locks=(), retired=(),
         command: str = "python x.py <store>", maintenance: dict | None = None) -> dict:
    p = {"pid": pid, "files": ["state.db", "state.db-shm", "state.db-wal"],
         "retired": list(retired), "locks": list(locks), "role": role,
         "role_from": "test", "command": command, "state": state, "holds": list(holds)}
    if maintenance:
        p["maintenance"] = maintenance
    return p


def read_mark(mark: int, value: int, mx: int) -> dict:
    return {"file": "state.db-shm", "kind": "POSIX", "bytes": [123 + mark, 123 + mark],
            "mode": "read", "waiting": False, "names": [f"read mark {mark}"],
            "read_mark": {"index": mark, "value": value, "frames_behind": mx - value}}


def with_procs(base: dict, *procs: dict, mx: int | None = None) -> dict:
    b = copy.deepcopy(base)
    b["processes"]["processes"] = list(procs)
    if mx is not None:
        b["sqlite_files"]["wal_index"] = {"mx_frame": mx, "n_backfill": 0,
                                          "read_marks": [0, 0, 0, 0, 0]}
    return b


# ------------------------------------------------------------------ refused and not reproducible

def test_files_that_are_not_bundles_are_refused_with_exit_2(tmp_path):
    (tmp_path / "x.json").write_text("{not json")
    (tmp_path / "y.json").write_text(json.dumps({"hello": 1}))
    (tmp_path / "z.json").write_text(json.dumps({"bundle": {"format": 99}}))
    os.symlink(tmp_path / "y.json", tmp_path / "link.json")
    os.mkfifo(tmp_path / "fifo.json")
    for name, words in (("missing.json", "no such file"), ("x.json", "not JSON"),
                        ("y.json", "not a hermes-state bundle"), ("z.json", "format 99"),
                        ("link.json", "not followed"), ("fifo.json", "not a regular file")):
        out = chaos("repro", str(tmp_path / name))
        assert out.returncode == 2, (name, out.stderr)
        assert words in out.stderr, (name, out.stderr)
        assert out.stdout == ""


def test_a_quiet_store_is_not_reproducible_and_says_why(tmp_path, quiet):
    out = chaos("repro", str(write(tmp_path, quiet)))
    assert out.returncode == EXIT_NOT_REPRODUCIBLE == 5
    assert "cannot reproduce yet" in out.stderr and "0 process(es) hold the store" in out.stderr
    assert "under 1000: not grown" in out.stderr or "no WAL frame count" in out.stderr
    assert out.stdout == ""


def test_the_scenario_is_written_validated_and_cites_the_bundle(tmp_path, quiet):
    b = with_procs(quiet, proc(41, "gateway", state="stopped",
                               holds=["WAL write lock", "SHARED"]),
                   proc(42, "cron"))
    path = write(tmp_path, b)
    out = chaos("repro", str(path), "-o", str(tmp_path / "s.yaml"))
    assert out.returncode == 0, out.stderr
    assert "expected: no_lockup FAIL" in out.stderr and "chaos shrink RUN_DIR" in out.stderr
    text = (tmp_path / "s.yaml").read_text()
    assert chaos("validate", str(tmp_path / "s.yaml")).returncode == 0
    # every cited line holds the field it names
    lines = path.read_text().splitlines()
    import re

    cited = re.findall(r"([a-z_]+(?:\.[a-z_]+|\[\d+\])+) \(line (\d+)\)", text)
    assert cited
    for field, line in cited:
        last = re.findall(r"[a-z_]+", field)[-1]
        assert f'"{last}"' in lines[int(line) - 1], (field, line, lines[int(line) - 1])
    sc = load_scenario_text(text)
    assert list(sc.expect)[0] == "no_lockup"  # the symptom first: shrink preserves it
    assert {r.name: (r.kind, r.count) for r in sc.roles} == {"holder": ("gateway", 1),
                                                             "cron": ("cli", 1)}


@pytest.mark.parametrize("name", ["state.db", "state.db.checkpoint.lock", "state.db-wal"])
def test_repro_never_writes_a_path_a_store_owns(tmp_path, quiet, name):
    """``chaos repro -o`` wrote into state.db (truncated in place: the store destroyed) or a
    lock file of a store beside it (issue 22 item 3: no command writes a path a store owns)."""
    b = with_procs(quiet, proc(41, "gateway", state="stopped",
                               holds=["WAL write lock", "SHARED"]))
    home = tmp_path / "home"
    home.mkdir()
    with SessionDB(home / "state.db") as db:
        db.create_session("s", source="cli")
    target = home / name
    target.touch()
    before = {p.name: (p.stat().st_ino, p.read_bytes()) for p in home.iterdir()}
    out = chaos("repro", str(write(tmp_path, b)), "-o", str(target))
    assert out.returncode == 2 and "store" in out.stderr and "Traceback" not in out.stderr, \
        out.stderr
    assert {p.name: (p.stat().st_ino, p.read_bytes()) for p in home.iterdir()} == before


def test_the_repro_driver_is_imported_only_when_it_runs():
    code = ("import sys; from chaos.__main__ import build_parser; build_parser(); "
            "print('chaos.repro' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert out.stdout.strip() == "False", out.stderr


# ------------------------------------------------------------------ which class

def classify_dict(tmp_path, data) -> str:
    try:
        return classify(Bundle(write(tmp_path, data))).kind
    except NotReproducible:
        return "not reproducible"


def test_each_rule_decides_on_its_field_and_causes_come_first(tmp_path, quiet):
    stopped = proc(1, "gateway", state="stopped", holds=["WAL write lock"])
    retired = proc(2, "gateway", retired=["state.db-wal (deleted)"])
    maint = proc(3, "maintenance", holds=["checkpoint lock exclusive (...)"],
                 command="python -m hermes_state --home <home> sessions optimize --force",
                 maintenance={"command": "optimize", "force": True})
    gw = proc(4, "gateway")
    assert classify_dict(tmp_path, with_procs(quiet, stopped, gw)) == "stopped_owner"
    assert classify_dict(tmp_path, with_procs(quiet, stopped, retired)) == "sidecar"
    assert classify_dict(tmp_path, with_procs(quiet, maint, gw)) == "maintenance"
    assert classify_dict(tmp_path, with_procs(quiet, maint)) == "not reproducible"  # no writer
    full = with_procs(quiet, maint, gw)
    full["store"]["disk"]["free_bytes"] = 4096
    assert classify_dict(tmp_path, full) == "full_disk"  # the disk explains a slow command
    # a stopped process that holds only read locks is no lock owner
    idle = proc(5, "desktop", state="stopped", holds=["SHARED", "dead-man switch"])
    assert classify_dict(tmp_path, with_procs(quiet, idle, gw)) == "not reproducible"


def test_a_grown_wal_is_a_long_reader_or_starvation_by_the_readers_snapshots(tmp_path, quiet):
    mx = 5 * BIG_WAL_FRAMES
    dash = "python dashboard.py <store>"
    old = proc(1, "desktop", locks=[read_mark(1, 100, mx)], holds=["read mark 1"],
               command=dash)
    recent = proc(2, "desktop", locks=[read_mark(2, mx - 300, mx)], holds=["read mark 2"],
                  command=dash)
    twin = proc(3, "desktop", command=dash)  # the same program between two transactions
    gw = proc(4, "gateway", locks=[read_mark(3, mx, mx)], holds=["read mark 3"],
              command="hermes gateway run")
    assert classify_dict(tmp_path, with_procs(quiet, old, gw, mx=mx)) == "long_reader"
    case = classify(Bundle(write(tmp_path, with_procs(quiet, recent, twin, gw, mx=mx))))
    assert case.kind == "starved" and case.key == [0, 1]  # both dashboards are readers
    # small WAL: nothing grew
    with pytest.raises(NotReproducible):
        classify(Bundle(write(tmp_path, with_procs(quiet, old, gw, mx=BIG_WAL_FRAMES - 1))))


# ------------------------------------------------------------------ the store fixture

@pytest.mark.parametrize("version, layout, messages, store, note", [
    (23, "external-v23", 0, {"fixture": "empty"}, None),
    (23, "external-v23", 50_000, {"fixture": "generated", "sessions": 1, "messages": 2000},
     "generated with 2000 of its 50000"),
    (10, "external-v1-trigram", 100, {"fixture": "schema_v10"}, "fixed contents"),
    (23, "inline", 100, {"fixture": "schema_v22"}, "legacy layout inline"),
    (31, "external-v31", 100, {"fixture": "empty"}, "newer than this toolkit"),
    (None, None, None, {"fixture": "empty"}, "contents unreadable"),
])
def test_the_store_has_the_bundles_version_layout_and_size(tmp_path, quiet, version, layout,
                                                          messages, store, note):
    b = with_procs(quiet, proc(1, "gateway", state="stopped", holds=["WAL write lock"]),
                   proc(2, "cli"))
    if version is None:
        b["contents"] = None
    else:
        b["contents"]["schema_version"] = version
        b["contents"]["fts"]["fts_layout"] = layout
        b["contents"]["messages"]["count"] = messages
    repro = make_repro(write(tmp_path, b))
    sc = load_scenario_text(repro.text)
    assert {k: v for k, v in sc.store.items() if k in store or k != "tmpfs"} == store
    if note:
        assert note in " ".join(repro.text.split())
