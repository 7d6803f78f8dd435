"""report.html, `chaos report` and `chaos replay` on real small runs (SPEC §16.5).

Each test runs its own short scenario (real role processes, a real store, real SIGKILL/SIGSTOP)
under tmp_path, then reads the page back with :mod:`html.parser`.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The steps that end the run once the writer and the locker have done their part (events, not
#: times: on a loaded machine the role interpreters may start seconds late).
ENDING = """\
  - {after: {role: writer, ok: 20}, fault: terminate, role: writer}
  - {after: {role: locker, ok: 1, op: hold_lock}, fault: terminate, role: locker}
"""
SCENARIO = """\
name: tiny
description: two writers, a lock holder, one writer SIGKILLed and the other frozen for a moment
seed: 5
duration: 60s
roles:
  - {name: writer, kind: gateway, count: 1, workload: {appends_per_s: 40}}
  - {name: victim, kind: gateway, count: 1, workload: {appends_per_s: 40}}
  - {name: locker, kind: lock_holder, count: 1, workload: {first_at: 0.3s, hold: 0.3s, every: 1s}}
nemesis:
  - {after: {role: victim, ok: 5}, fault: kill, role: victim}
  - {after: {role: writer, ok: 10}, fault: stop, role: writer}
  - {after: {step: 1, delay: 0.5s}, fault: cont, role: writer}
""" + ENDING + """\
expect:
  no_lost_writes: {}
  integrity: {}
"""


def run_chaos(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "220"}  # rich tables: one line per row
    return subprocess.run([sys.executable, "-m", "chaos", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=180, env=env)


class Page(HTMLParser):
    """Collects every start tag with its attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def with_attr(self, name: str) -> list[dict]:
        return [a for _, a in self.tags if name in a]


def parse(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(encoding="utf-8"))
    page.close()
    return page


def tiny_run(tmp_path: Path) -> tuple[Path, subprocess.CompletedProcess]:
    sc = tmp_path / "tiny.yaml"
    sc.write_text(SCENARIO)
    out = tmp_path / "runs"
    proc = run_chaos("run", str(sc), "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    return run_dir, proc


def test_run_writes_a_self_contained_report_with_lanes_and_faults(tmp_path, monkeypatch):
    run_dir, proc = tiny_run(tmp_path)
    report = run_dir / "report.html"
    assert f"report {report}" in proc.stdout
    page = parse(report)
    history = [json.loads(x) for x in (run_dir / "history.jsonl").read_text().splitlines()]
    # One lane per role process, carrying the process's real PID.
    lanes = {a["data-process"]: a.get("data-pid") for a in page.with_attr("data-process")
             if "lane" in a.get("class", "")}
    spawned = {r["child"]: str(r["child_pid"]) for r in history
               if r["type"] == "process" and r["phase"] == "spawn"}
    assert spawned.keys() == {"writer-0", "victim-0", "locker-0"}
    assert lanes == spawned
    # One band per fault that fired, named after it, on the timeline and on every plot.
    fired = sorted(r["fault"] for r in history if r["type"] == "nemesis" and r["phase"] == "done")
    bands = [a for a in page.with_attr("data-fault") if "fault-band" in a.get("class", "")]
    plots = 1 + len([a for a in page.with_attr("data-kind") if "lat-panel" in a.get("class", "")])
    plots += 1 + 1  # throughput, WAL
    assert fired == ["cont", "kill", "stop", "terminate", "terminate"]
    assert sorted(a["data-fault"] for a in bands) == sorted(fired * plots)
    # The fault schedule: planned, fired, healed (stop lasts until cont).
    rows = [a for a in page.with_attr("data-fault") if "fault-row" in a.get("class", "")]
    assert sorted(r["data-fault"] for r in rows) == fired and all(
        r["data-status"] == "done" for r in rows)
    assert "by cont (step 2)" in report.read_text()
    # Operations are bars from invoke to completion; the victim's SIGKILL shows as a killed
    # lane end.
    ops = [a for a in page.with_attr("data-op")]
    assert all(float(a["data-to-s"]) >= float(a["data-from-s"]) for a in ops)
    assert {"append", "hold_lock"} <= {a["data-op"] for a in ops}
    assert any("op-ok" in a["class"] for a in ops)
    assert "killed by signal 9" in report.read_text()
    # The verdict table is there, one row per checker of results.json.
    results = json.loads((run_dir / "results.json").read_text())
    rows = {a["data-checker"]: a["data-status"] for a in page.with_attr("data-checker")
            if "verdict" in a.get("class", "")}
    assert rows == {v["checker"]: v["status"] for v in results["verdicts"]}
    banner = next(a for a in page.with_attr("id") if a["id"] == "verdict-banner")
    assert banner["data-verdict"] == "PASS"
    # Nothing is fetched from the network.
    for _, attrs in page.tags:
        for key in ("src", "href"):
            value = attrs.get(key) or ""
            assert not value.startswith(("http://", "https://", "//")), (key, value)
    assert "<link" not in report.read_text()

    # Evidence of a checker that did not pass is marked on the timeline at its time.
    from chaos.report.html import render
    from chaos.store import load_run

    records, results, scenario = load_run(run_dir)
    ack = next(r for r in records if r["type"] == "ok" and r["op"] == "append")
    failed = dict(results, verdicts=[{"checker": "no_lost_writes", "status": "FAIL",
                                      "summary": "1 lost", "figures": {"lost": 1},
                                      "evidence": [ack]}])
    page2 = Page()
    page2.feed(render(records, failed, scenario))
    (mark,) = page2.with_attr("data-evidence-of")
    assert mark["data-evidence-of"] == "no_lost_writes" and mark["data-number"] == "1"
    from chaos.history import run_start

    assert float(mark["data-at-s"]) == pytest.approx(ack["t"] - run_start(records), abs=1e-3)
    # Passing checkers' evidence is marked too, grey and unnumbered.
    assert all(a["data-number"] == "0" for a in page.with_attr("data-evidence-of"))
    # A lane with many ops merges its marks per pixel column and outcome (the page stays small).
    import chaos.report.lanes as lanes

    monkeypatch.setattr(lanes, "MAX_MARKS_PER_LANE", 5)
    page3 = Page()
    page3.feed(render(records, results, scenario))
    merged = [a for _, a in page3.tags if "merged" in a.get("class", "")]
    one_per_op = len(ops)  # the first page drew one mark per op
    assert merged and len(page3.with_attr("data-op")) < one_per_op

    # `chaos report` rebuilds the page from the saved files and prints the verdict table.
    report.unlink()
    again = run_chaos("report", str(run_dir))
    assert again.returncode == 0, again.stdout + again.stderr
    assert report.exists()
    assert "no_lost_writes" in again.stdout and "PASS" in again.stdout
    assert {a["data-fault"] for a in parse(report).with_attr("data-fault")} == set(fired)
    # One time base: the page never shows the raw monotonic clock of the history.
    text = report.read_text()
    assert f"{records[1]['t']:.3f}" not in text


def test_repeat_runs_successive_seeds_and_ends_with_a_table_of_runs(tmp_path):
    sc = tmp_path / "tiny.yaml"
    sc.write_text(SCENARIO)
    out = tmp_path / "runs"
    proc = run_chaos("run", str(sc), "--out", str(out), "--repeat", "2", "--seed", "40")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    dirs = sorted(d.name for d in out.iterdir())
    assert [d.rsplit("-", 1)[1] for d in dirs] == ["seed40", "seed41"]
    table, total = re.split(r"\n\s*runs\s*\n", proc.stdout)[-1].split("\ntotal: ")
    assert all(name in table for name in dirs) and table.count("PASS") == 2
    assert total.startswith("2 runs, PASS (exit 0) in ") and total.rstrip().endswith(": 2 PASS")
    assert run_chaos("run", str(sc), "--repeat", "0", "--out", str(out)).returncode == 2


def test_recheck_rejudges_the_saved_run_and_keeps_the_old_verdicts(tmp_path):
    run_dir, _ = tiny_run(tmp_path)
    before = json.loads((run_dir / "results.json").read_text())
    proc = run_chaos("report", str(run_dir), "--recheck", "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    after = json.loads(proc.stdout.strip().splitlines()[-1])
    assert "rechecked_at" in after
    assert [(v["checker"], v["status"]) for v in after["verdicts"]] == \
        [(v["checker"], v["status"]) for v in before["verdicts"]]
    assert json.loads((run_dir / "results.previous.json").read_text()) == before
    # Same figures from the same saved history and store (elapsed time aside).
    strip = lambda vs: [{k: v for k, v in x["figures"].items() if k != "elapsed_s"} for x in vs]  # noqa: E731
    assert strip(after["verdicts"]) == strip(before["verdicts"])


def test_results_and_report_json_carry_the_runs_one_verdict(tmp_path):
    """Issue 27 item 12: results.json and `report --json` had no top-level verdict (the exit
    code was the only total); a run directory from before the field gets it computed."""
    run_dir, _ = tiny_run(tmp_path)
    results = json.loads((run_dir / "results.json").read_text())
    assert results["verdict"] == "PASS" and results["exit_code"] == 0
    assert results["load"]["factor"] >= 1.0 and len(results["load"]["measurements"]) == 2
    proc = run_chaos("report", str(run_dir), "--json")
    assert json.loads(proc.stdout.strip().splitlines()[-1])["verdict"] == "PASS"
    old = {k: v for k, v in results.items() if k != "verdict"}
    old["verdicts"][0]["status"] = "FAIL"
    (run_dir / "results.json").write_text(json.dumps(old))
    proc = run_chaos("report", str(run_dir), "--json")
    assert proc.returncode == 1
    assert json.loads(proc.stdout.strip().splitlines()[-1])["verdict"] == "FAIL"


def test_replay_runs_the_same_scenario_and_seed_into_a_new_directory(tmp_path):
    run_dir, _ = tiny_run(tmp_path)
    proc = run_chaos("replay", str(run_dir), "--json")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    new = json.loads(proc.stdout.strip().splitlines()[-1])
    new_dir = Path(new["run_dir"])
    assert new_dir != run_dir and new_dir.parent == run_dir.parent
    assert new["seed"] == 5 and new_dir.name.startswith("tiny-") and new_dir.name.endswith("seed5")
    assert json.loads((new_dir / "scenario.resolved.json").read_text()) == \
        json.loads((run_dir / "scenario.resolved.json").read_text())
    assert (new_dir / "report.html").exists()
    # Both verdicts side by side (stderr carries the console under --json).
    assert "original" in proc.stderr and "replay" in proc.stderr
    # The same fault schedule ran again: kill, stop, cont fired in both runs.
    row = next(line for line in proc.stderr.splitlines() if "faults fired" in line)
    assert row.count("kill@") == 2 and row.count("stop@") == 2


def test_report_and_replay_refuse_a_directory_that_is_not_a_run(tmp_path):
    proc = run_chaos("report", str(tmp_path))
    assert proc.returncode == 2
    assert "not a chaos run directory" in proc.stderr
    proc = run_chaos("replay", str(tmp_path))
    assert proc.returncode == 2
    assert "scenario.resolved.json" in proc.stderr


def test_an_interrupted_run_can_be_reported_and_rechecked(tmp_path):
    sc = tmp_path / "tiny.yaml"
    sc.write_text(SCENARIO.replace(ENDING, ""))  # runs until interrupted (60 s hang guard)
    out = tmp_path / "runs"
    runner = subprocess.Popen([sys.executable, "-m", "chaos", "run", str(sc), "--out", str(out)],
                              cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 120  # hang guard only
        while time.monotonic() < deadline:
            writer = list(out.glob("*/history/writer-0.jsonl"))
            if writer and writer[0].read_text().count('"type": "ok", "op": "append"') >= 5:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("the writer never acknowledged 5 appends")
    finally:
        runner.send_signal(signal.SIGTERM)
        assert runner.wait(timeout=60) == 3  # interrupted: the toolkit did not finish
    (run_dir,) = list(out.iterdir())
    assert not (run_dir / "results.json").exists() and not (run_dir / "final").exists()
    assert (run_dir / "INTERRUPTED.json").exists()
    proc = run_chaos("report", str(run_dir), "--recheck", "--json")
    # the checkers judge what was recorded, but a partial run never reads as green
    assert proc.returncode == 1, proc.stdout + proc.stderr
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert results["rechecked_store"].startswith("home")
    verdicts = {v["checker"]: v["status"] for v in results["verdicts"]}
    # (liveness: INCONCLUSIVE when the lock holder's first hold was not due yet, issue 27)
    assert verdicts.pop("liveness") in ("PASS", "INCONCLUSIVE")
    assert verdicts == {"no_lost_writes": "PASS", "integrity": "PASS",
                        "interrupted": "INCONCLUSIVE"}
    assert (run_dir / "report.html").exists()


def test_a_history_line_that_is_not_an_object_is_skipped(tmp_path):
    from chaos import history as hist

    path = tmp_path / "h.jsonl"
    path.write_text('{"t": 1, "type": "ok"}\n[1, 2]\n"str"\n{"torn": \n{"t": 2, "type": "ok"}\n')
    assert [r["t"] for r in hist.read_file(path)] == [1, 2]
    tail = hist.JsonlTail(tmp_path)
    assert [r["t"] for r in tail.new_records()] == [1, 2]
    assert list(tail.new_records()) == []


def test_a_stall_is_plotted_where_it_began_and_the_page_says_how_long_the_run_ran():
    """The banner names the first evidence (time, checker, violation, process); the latency
    dot of a slow op sits at its invoke (under the evidence mark, as Jepsen draws it); the facts
    line gives the time the run took beside the planned duration; the heal
    note says in words that nothing needed healing; the fault schedule shows what a step did; a
    sample time in evidence is relative."""
    from chaos.history import relative_times
    from chaos.report.html import render
    from chaos.report.svg import LABEL_W
    from chaos.report.timeline import Timeline

    records = [{"t": 100.0, "type": "phase", "phase": "warm-up", "process": "runner"},
               {"t": 101.0, "type": "invoke", "op": "append", "op_id": "g:1", "process": "g-0",
                "pid": 9, "payload_id": "p1"},
               {"t": 103.5, "type": "ok", "op": "append", "op_id": "g:1", "process": "g-0",
                "pid": 9, "payload_id": "p1", "latency_s": 2.5},
               {"t": 102.0, "type": "nemesis", "fault": "delete_sidecars", "phase": "done",
                "step": 0, "process": "runner", "files": ["state.db-wal", "state.db-shm"],
                "missing": []},
               {"t": 103.6, "type": "phase", "phase": "heal", "process": "runner",
                "heal": {"sigcont": {"resumed": []}, "free_disk": {"freed_bytes": None}}},
               {"t": 104.0, "type": "phase", "phase": "recover", "process": "runner"}]
    stall = {"checker": "no_lockup", "status": "FAIL", "summary": "1 op(s) waited", "figures": {},
             "evidence": [{"violation": "stall", "process": "g-0", "invoked_t": 101.0,
                           "at_s": 1.0}]}
    page = render(records, {"duration_s": 60.0, "verdicts": [stall]},
                  {"nemesis": [{"at": 2.0, "fault": "delete_sidecars", "files": ["wal", "shm"]}]})
    tl = Timeline(records)
    dot = re.search(r'<circle class="lat-dot" data-outcome="ok" data-at-s="([\d.]+)" '
                    r'cx="([\d.]+)"', page)
    assert dot and float(dot.group(1)) == 1.0, page[page.find("lat-dot") - 200:][:600]
    assert float(dot.group(2)) == pytest.approx(LABEL_W + tl.x(101.0), abs=0.1)
    assert "invoked at 1.00s, completed at 3.50s (g-0)" in page
    assert "ran <b>4.0 s (duration 60 s)</b>" in page
    # The banner: the time of the first evidence and what it is.
    assert re.search(r'first evidence at <a class="first-failure-link" href="#mark-no_lockup-0">'
                     r'1\.000s</a> \(no_lockup: stall, g-0\)', page), page[:3000]
    assert "heal phase at 3.600s: nothing to heal" in page and "freed_bytes" not in page
    # The fault schedule says what the step did (the files it deleted), never a bare {}.
    row = page[page.index('<tr class="fault-row'):]
    row = row[:row.index("</tr>")]
    assert "state.db-wal" in row and "missing" not in row and "<code>{}</code>" not in row
    moment = relative_times({"at_that_moment": {"sample_t": 102.25, "seq": 3}}, 100.0)
    assert moment == {"at_that_moment": {"sample_t": 2.25, "seq": 3}}


def test_evidence_badges_never_overlap_when_a_group_widens_after_the_next_began():
    """Found under load (test_report_browser): marks at 0, 1, 23.1 and 24 px made badges "1–2"
    and "3–4", each 24 px wide, 23.1 px apart: the second group widened after it was judged
    apart from the first. Badges that would touch merge, however they grew."""
    from types import SimpleNamespace

    from chaos.report import lanes

    class Axis:  # one second is one pixel
        def x(self, t):
            return t

    for times in ([0, 1, 23.1, 24], [0, 30, 31, 53.5, 54, 54.5], [0, 17, 34, 51]):
        marks = [SimpleNamespace(t=t, number=i + 1) for i, t in enumerate(times)]
        badges = lanes._badge_groups(Axis(), marks)
        spans = sorted((m.t - lanes._badge_width(text) / 2, m.t + lanes._badge_width(text) / 2)
                       for m in marks if (text := badges.get(id(m))) is not None)
        assert all(a[1] + lanes.BADGE_GAP_PX <= b[0] for a, b in zip(spans, spans[1:])), spans
        numbered = sorted(n for m in marks if (t := badges.get(id(m))) for n in
                          map(int, t.split("–")))
        assert numbered[0] == 1 and numbered[-1] == len(times)  # every mark is in a badge
