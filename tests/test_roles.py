"""Role kinds on real processes (SPEC §16.1): each runs briefly against a tmp store and its
history shows the operations; the nemesis ``run`` fault runs a real CLI subprocess (§16.2).

Each role is a spawned OS process running :func:`chaos.roles.role_main`, exactly as the runner
starts it; the store is a real SQLite file. Deadlines below bound how long a role runs (it stops
by itself); the join timeouts are hang guards, never speed assertions.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import sqlite3
import time
from pathlib import Path

import pytest

from chaos import scenario as sc
from chaos.history import read_file
from chaos.nemesis import FAULTS, NemesisEnv, NemesisError
from chaos.nemesis import commands
from chaos.params import as_dict, resolve
from chaos.roles import KINDS, ROLES, role_main
from hermes_state import SessionDB

MP = multiprocessing.get_context("spawn")
HANG_GUARD_S = 90.0


def prepare(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    SessionDB(home / "state.db").close()
    return home / "state.db"


def start_role(db: Path, kind: str, workload: dict, *, seconds: float, name: str | None = None,
               index: int = 0, seed: int = 1) -> tuple[multiprocessing.Process, Path]:
    """Spawn one role instance like the runner does; returns the process and its history file."""
    name = name or kind
    run_dir = db.parent.parent
    hist, logs = run_dir / "history", run_dir / "logs"
    hist.mkdir(exist_ok=True)
    logs.mkdir(exist_ok=True)
    process = f"{name}-{index}"
    filled = resolve(ROLES[kind].Params, workload)  # the defaults, as a scenario resolves them
    now = time.monotonic()
    cfg = {"role": name, "kind": kind, "index": index, "process": process,
           "db_path": str(db), "home": str(db.parent), "history_dir": str(hist),
           "log_path": str(logs / f"{process}.log"), "seed": seed, "t0": now,
           "deadline": now + seconds, "workload": filled, "failpoints": ""}
    proc = MP.Process(target=role_main, args=(cfg,), name=process)
    proc.start()
    return proc, hist / f"{process}.jsonl"


def finish(proc: multiprocessing.Process) -> int:
    proc.join(HANG_GUARD_S)
    if proc.exitcode is None:
        proc.kill()
        proc.join(5)
        raise AssertionError(f"role {proc.name} did not stop")
    return proc.exitcode


def run_role(tmp_path: Path, kind: str, workload: dict, seconds: float, **kw):
    db = kw.pop("db", None) or prepare(tmp_path)
    proc, hist = start_role(db, kind, workload, seconds=seconds, **kw)
    assert finish(proc) == 0, [p.read_text() for p in (db.parent.parent / "logs").glob("*.log")]
    return db, read_file(hist)


def completions(history: list[dict], op: str, kind: str = "ok") -> list[dict]:
    return [r for r in history if r.get("op") == op and r["type"] == kind]


def store_rows(db: Path, sql: str, args: tuple = ()) -> list[tuple]:
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, args).fetchall()
    finally:
        conn.close()


def test_every_scenario_role_kind_has_an_implementation():
    assert set(KINDS) == set(sc.ROLE_KINDS) == set(ROLES)
    assert set(commands.GATED_COMMANDS) <= set(commands.COMMANDS)
    assert list(commands.COMMANDS) == sc.SCHEMA["$defs"]["maintenance_workload"]["properties"][
        "command"]["enum"]
    assert set(FAULTS) == set(sc.FAULTS)


def wait_for(hist: Path, predicate, what: str) -> list[dict]:
    """Poll a role's history file until ``predicate(records)`` holds (hang guard only)."""
    deadline = time.monotonic() + HANG_GUARD_S
    while time.monotonic() < deadline:
        records = read_file(hist) if hist.exists() else []
        if predicate(records):
            return records
        time.sleep(0.05)
    raise AssertionError(f"never saw {what} in {hist.name}")


def stop(proc: multiprocessing.Process) -> None:
    os.kill(proc.pid, signal.SIGTERM)
    assert finish(proc) == 0


def test_gateway_workload_splits_titles_usage_searches_and_cjk(tmp_path):
    wl = {"appends_per_s": 0, "sessions": 2, "split_every": 6, "titles": True,
          "token_usage": True, "search_every": 0.2, "cjk_share": 1.0, "tool_call_share": 1.0,
          "burst_size": 5, "burst_every": 0.1, "read_every": 0.2}
    db = prepare(tmp_path)
    proc, path = start_role(db, "gateway", wl, seconds=HANG_GUARD_S)
    wait_for(path, lambda h: completions(h, "search") and completions(h, "update_token_counts")
             and any(r.get("lineage_from") for r in completions(h, "set_title"))
             and any(r["value"] > 0 for r in completions(h, "read_history")),
             "a search, a token-usage update, a title moved down a lineage, a history pass")
    stop(proc)
    hist = read_file(path)
    appends = completions(hist, "append")
    assert appends and all(r["payload_id"].startswith("gateway-0-") for r in appends)
    # every op is an invoke followed by its completion, with the same op_id
    invoked = {r["op_id"] for r in hist if r["type"] == "invoke"}
    done = {r["op_id"] for r in hist if r["type"] in ("ok", "fail", "info")}
    assert invoked == done
    assert not [r for r in hist if r["type"] in ("fail", "info")]
    # a history pass reads every message acknowledged before it began (and no more than exist)
    passes = [(r, next(i for i in hist if i["type"] == "invoke" and i.get("op_id") == r["op_id"]))
              for r in completions(hist, "read_history")]
    total = store_rows(db, "SELECT count(*) FROM messages")[0][0]
    for done, began in passes:
        acked = sum(1 for a in appends if a["t"] <= began["t"])
        assert acked <= done["value"] <= total
    moved = [r for r in completions(hist, "set_title") if r.get("lineage_from")]
    # In the store: the child of a split has the parent, the title sits on the lineage's tip.
    last = moved[-1]
    rows = dict(store_rows(db, "SELECT id, parent_session_id FROM sessions"))
    assert rows[last["session_id"]] == last["lineage_from"]
    assert store_rows(db, "SELECT end_reason FROM sessions WHERE id = ?",
                      (last["lineage_from"],)) == [("compression",)]
    assert store_rows(db, "SELECT title FROM sessions WHERE id = ?",
                      (last["lineage_from"],)) == [(None,)]
    # CJK text and tool calls were written and can be found by search.
    with SessionDB(db, read_only=True) as ro:
        msg = ro.get_messages(appends[0]["session_id"])[0]
        assert any("\u3040" <= ch <= "\u9fff" or "\uac00" <= ch <= "\ud7af"
                   for ch in msg["content"])
        assert ro.search_messages("记忆断裂") or ro.search_messages("東京")
    assert store_rows(db, "SELECT count(*) FROM messages WHERE tool_calls IS NOT NULL")[0][0] > 0
    assert store_rows(db, "SELECT sum(input_tokens) FROM sessions")[0][0] > 0


def test_same_seed_same_workload_other_process_other_workload(tmp_path):
    def contents(sub: str, index: int) -> list[str]:
        (tmp_path / sub).mkdir()
        db, _ = run_role(tmp_path / sub, "cli", {"burst": 8, "cjk_share": 0.5,
                                                 "tool_call_share": 0.5}, 30, index=index)
        return [r[0] for r in store_rows(db, "SELECT content FROM messages ORDER BY id")]

    first, again, other = contents("a", 0), contents("b", 0), contents("c", 1)
    assert len(first) == 8 and first == again
    assert [c.split(" ", 1)[1] for c in other] != [c.split(" ", 1)[1] for c in first]


def test_cli_repeat_is_a_cron_like_writer(tmp_path):
    db, hist = run_role(tmp_path, "cli", {"repeat": 3, "every": 0.05, "burst": 2,
                                          "search": True}, 30)
    assert len(completions(hist, "open")) == 3 and len(completions(hist, "close")) == 3
    assert len(completions(hist, "search")) == 3
    assert store_rows(db, "SELECT id, end_reason, title FROM sessions ORDER BY id") == [
        ("cli-0-s0", "cli_exit", "cli cli-0"), ("cli-0-s1", "cli_exit", "cli cli-0 run 1"),
        ("cli-0-s2", "cli_exit", "cli cli-0 run 2")]


def test_cli_burst_zero_creates_an_empty_ended_session(tmp_path):
    db, hist = run_role(tmp_path, "cli", {"burst": 0, "title": False}, 30)
    assert not completions(hist, "append")
    assert store_rows(db, "SELECT id, message_count, end_reason FROM sessions") == [
        ("cli-0-s0", 0, "cli_exit")]


def test_worktree_children_usage_and_lineage_titles(tmp_path):
    db, hist = run_role(tmp_path, "worktree", {"children": 3, "messages_per_child": 4,
                                               "appends_per_s": 0, "usage_every": 2}, 30)
    assert len(completions(hist, "append")) == 12
    rows = store_rows(db, "SELECT id, parent_session_id, title, end_reason FROM sessions "
                          "ORDER BY id")
    assert rows == [
        ("worktree-0-child0", "worktree-0-parent", "worktree worktree-0", "subagent_done"),
        ("worktree-0-child1", "worktree-0-parent", "worktree worktree-0 #2", "subagent_done"),
        ("worktree-0-child2", "worktree-0-parent", "worktree worktree-0 #3", "subagent_done"),
        ("worktree-0-parent", None, None, "worktree_done")]
    usage = store_rows(db, "SELECT session_id, task, api_call_count FROM session_model_usage "
                           "ORDER BY session_id")
    assert usage == [(f"worktree-0-child{i}", "subagent", 2) for i in range(3)]


@pytest.fixture
def live_gateway(tmp_path):
    """A gateway role process holding the store (appending) for the test's duration."""
    db = prepare(tmp_path)
    proc, hist = start_role(db, "gateway", {"appends_per_s": 20}, seconds=HANG_GUARD_S)
    for _ in range(int(HANG_GUARD_S / 0.05)):  # until it has claimed ownership
        if hist.exists() and completions(read_file(hist), "claim_owner"):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the gateway never claimed the store")
    yield db, proc
    os.kill(proc.pid, signal.SIGTERM)
    finish(proc)


def test_maintenance_role_records_refusal_then_forced_run(tmp_path, live_gateway):
    db, gw = live_gateway
    before = db.read_bytes()
    _, refused = run_role(tmp_path, "maintenance", {"command": "optimize"}, 60, db=db,
                          name="plain")
    _, forced = run_role(tmp_path, "maintenance", {"command": "optimize", "force": True}, 60,
                         db=db, name="forced")
    _, preview = run_role(tmp_path, "maintenance", {"command": "optimize-storage",
                                                    "dry_run": True}, 60, db=db, name="preview")
    [fail] = completions(refused, "run", "fail")
    assert fail["exit_code"] == 1 and fail["error"] == "exit 1"
    assert gw.pid in fail["named_pids"] and fail["message"].startswith("Refusing `sessions")
    assert f"PID {gw.pid}" in fail["stderr"]
    assert fail["argv"][-2:] == ["sessions", "optimize"]
    [ok] = completions(forced, "run")
    assert ok["exit_code"] == 0 and ok["argv"][-1] == "--force" and "optimized" in ok["stdout"]
    [dry] = completions(preview, "run")
    assert dry["exit_code"] == 0 and dry["argv"][-1] == "--dry-run"
    assert before  # the store existed; the forced run rewrote it while the gateway lives
    assert gw.is_alive()


def test_maintenance_role_repeats_and_prune_is_handed_to_the_owning_gateway(tmp_path,
                                                                           live_gateway):
    db, gw = live_gateway
    _, hist = run_role(tmp_path, "maintenance", {"command": "prune", "args": ["--older-than",
                                                                              "0"]}, 60, db=db)
    [ok] = completions(hist, "run")
    assert f"the gateway (PID {gw.pid}) owns the store" in ok["stdout"]
    _, hist = run_role(tmp_path, "maintenance", {"command": "doctor", "every": 0.05,
                                                 "times": 2}, 60, db=db, name="doc")
    runs = [r for r in hist if r.get("op") == "run" and r["type"] != "invoke"]
    assert len(runs) == 2 and all(f"PID {gw.pid}" in r["stdout"] for r in runs)


def test_long_reader_pins_the_wal_while_a_writer_checkpoints(tmp_path):
    db = prepare(tmp_path)
    writer, whist = start_role(db, "gateway", {"appends_per_s": 0, "message_bytes": 500},
                               seconds=HANG_GUARD_S)

    def cadence(h: list[dict]) -> list[dict]:
        return [e for e in h if e.get("event") == "checkpoint" and e.get("trigger") == "cadence"
                and isinstance(e.get("log"), int) and e["log"] > 0]

    wait_for(whist, cadence, "a cadence checkpoint of the writer")
    reader, rhist = start_role(db, "long_reader", {"first_at": 0, "hold": 1.5, "holds": 1,
                                                   "sample_every": 0.1}, seconds=HANG_GUARD_S)
    rh = wait_for(rhist, lambda h: completions(h, "read_txn") and completions(h, "wal_size"),
                  "the read transaction and a WAL size sample after it")
    [held] = completions(rh, "read_txn")
    wait_for(whist, lambda h: [e for e in cadence(h) if e["t"] > held["t"]],
             "a checkpoint after the read transaction")
    stop(reader)
    stop(writer)
    wh = read_file(whist)
    assert held["result"]["held_s"] >= 1.5 and held["result"]["rows"] > 0
    [inv] = [r for r in read_file(rhist) if r.get("op") == "read_txn" and r["type"] == "invoke"]
    pinned = [e for e in cadence(wh) if inv["t"] < e["t"] < held["t"]]
    assert pinned and any(e["checkpointed"] < e["log"] for e in pinned), \
        "no checkpoint was held back by the open read transaction"
    after = [e for e in cadence(wh) if e["t"] > held["t"]]
    assert after[-1]["checkpointed"] == after[-1]["log"]


def test_run_fault_records_exit_output_and_named_holders(tmp_path, live_gateway):
    db, gw = live_gateway
    env = NemesisEnv(db, lambda: [])
    refused = FAULTS["run"](env, {"command": "optimize-storage"})
    assert refused["exit_code"] == 1 and gw.pid in refused["named_pids"]
    assert "Refusing `sessions optimize-storage`" in refused["stderr"]
    json.dumps(refused)  # a history record field
    done = FAULTS["run"](env, {"command": "backup", "args": ["--reason", "chaos"]})
    assert done["exit_code"] == 0 and "verified=True" in done["stdout"]
    assert any((db.parent / "state-snapshots").glob("*-chaos/manifest.json"))
    with pytest.raises(NemesisError, match="--force only applies"):
        FAULTS["run"](env, {"command": "doctor", "force": True})


def test_command_argv_defaults():
    argv = commands.command_argv("prune", "/h", "/h/state.db", force=True)
    assert argv[1:] == ["-m", "hermes_state", "--home", "/h", "sessions", "prune", "--yes",
                        "--older-than", "90", "--force"]
    argv = commands.command_argv("prune", "/h", "/h/state.db", args=["--older-than", "0"])
    assert argv[-3:] == ["--yes", "--older-than", "0"]
    assert commands.command_argv("recover", "/h", "/h/state.db")[-3:] == [
        "--from", "/h/state.db", "--inspect-only"]
    with pytest.raises(ValueError, match="unknown maintenance command"):
        commands.command_argv("vacuum", "/h", "/h/state.db")
    with pytest.raises(ValueError, match="--dry-run only applies"):
        commands.command_argv("backup", "/h", "/h/state.db", dry_run=True)


@pytest.mark.parametrize("snippet, field, message", [
    ("{name: m, kind: maintenance, workload: {command: doctor, force: true}}",
     "roles[1].workload.force", "force applies only to the gated commands"),
    ("{name: m, kind: maintenance, workload: {command: backup, dry_run: true}}",
     "roles[1].workload.dry_run", "dry_run applies only to"),
    ("{name: m, kind: maintenance, workload: {command: vacuum}}",
     "roles[1].workload.command", "vacuum"),
    ("{name: r, kind: long_reader, workload: {hold: 0s}}",
     "roles[1].workload.hold", "hold must be > 0"),
    ("{name: m, kind: maintenance, workload: {timeout: 0s}}",
     "roles[1].workload.timeout", "timeout must be > 0"),
])
def test_scenario_rejects_bad_role_workloads(snippet, field, message):
    text = ("name: x\ndescription: x\nduration: 5s\nroles:\n  - {name: g, kind: gateway}\n"
            f"  - {snippet}\nexpect: {{integrity: {{}}}}\n")
    problems = sc.validate_text(text, "x.yaml")
    hits = [p for p in problems if p.field == field]
    assert hits and message in hits[0].message, [str(p) for p in problems]
    assert hits[0].line == 6


def test_scenario_run_step_needs_a_command_and_resolves_defaults():
    base = ("name: x\ndescription: x\nduration: 5s\nroles:\n  - {name: g, kind: gateway}\n"
            "nemesis:\n  - {at: 1s, fault: run%s}\nexpect: {integrity: {}}\n")
    problems = sc.validate_text(base % "", "x.yaml")
    assert [(p.field, p.message) for p in problems] == [
        ("nemesis[0].command", "missing required key 'command'")]
    problems = sc.validate_text(base % ", command: backup, force: true", "x.yaml")
    assert [p.field for p in problems] == ["nemesis[0].force"]
    s = sc.load_scenario_text(base % ", command: optimize, force: true, timeout: 30s")
    assert as_dict(s.nemesis[0].params) == {"command": "optimize", "force": True,
                                            "dry_run": False, "args": [], "timeout": 30.0,
                                            "failpoints": ""}


def test_command_records_keep_the_writer_pid(tmp_path, live_gateway):
    db, gw = live_gateway
    _, hist = run_role(tmp_path, "maintenance", {"command": "doctor"}, 60, db=db, name="doc")
    [inv] = [r for r in hist if r.get("op") == "run" and r["type"] == "invoke"]
    [res] = [r for r in hist if r.get("op") == "run" and r["type"] != "invoke"]
    assert res["pid"] == inv["pid"] != res["child_pid"]
