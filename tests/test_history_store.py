"""The history and the run directory have one owner each (issue 13): an unmerged history is
read the same way by the runner and by ``report``, and run-directory writes are atomic."""

from __future__ import annotations

import json

from chaos import history as hist
from chaos import store
from chaos.history import HistoryWriter


def test_an_interrupted_runs_history_reads_as_the_runner_reads_it(tmp_path):
    run = store.RunDir(tmp_path)
    role = HistoryWriter(run.process_history("gateway-0"), "gateway-0")
    role.record("invoke", op="append", op_id="gateway-0:1", payload_id="p1", t=1.0)
    role.close()
    runner = HistoryWriter(run.process_history(store.RUNNER_PROCESS), store.RUNNER_PROCESS)
    runner.record("process", phase="exit", role="gateway", index=0, exitcode=-9,
                  child="gateway-0", child_pid=4242, process_of="gateway-0", t=2.0)
    runner.close()
    # no history.jsonl: the run was interrupted before the merge
    records, results, scenario = store.load_run(tmp_path)
    assert (results, scenario) == ({}, {})
    assert records == hist.load_run_history(run.history_dir)
    (info,) = [r for r in records if r["type"] == "info"]
    assert info["synthesized"] and info["t"] == 2.0 and info["payload_id"] == "p1"
    (exit_,) = [r for r in records if r["type"] == "process"]
    assert (exit_["process"], exit_["pid"]) == ("gateway-0", 4242)


def test_atomic_writes_leave_no_partial_and_keep_the_previous_results(tmp_path):
    run = store.RunDir(tmp_path)
    store.write_results(run.results, {"b": 1, "a": 2})
    assert list(json.loads(run.results.read_text())) == ["a", "b"]  # sorted keys
    store.replace_results(run, {"c": 3})
    assert json.loads((tmp_path / store.PREVIOUS_RESULTS_FILE).read_text()) == {"a": 2, "b": 1}
    assert not list(tmp_path.glob("*.partial"))
    assert store.fresh_dir(tmp_path, "x") != store.fresh_dir(tmp_path, "x")
    store.mark_interrupted(tmp_path, 1.5)
    assert store.interrupted_mark(tmp_path)["elapsed_s"] == 1.5


def test_inside_resolves_symlinks(tmp_path):
    (tmp_path / "run" / "home").mkdir(parents=True)
    (tmp_path / "run" / "home" / "out").symlink_to(tmp_path)
    assert store.inside(tmp_path / "run" / "home" / "x", tmp_path / "run")
    assert not store.inside(tmp_path / "run" / "home" / "out" / "x", tmp_path / "run")
    assert not store.inside(tmp_path / "run" / ".." / "x", tmp_path / "run")
