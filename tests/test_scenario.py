"""Scenario files: loading, defaults, and every kind of validation problem (SPEC §16.4)."""

from __future__ import annotations

import copy
import json
import textwrap
from pathlib import Path

import jsonschema
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chaos import scenario as sc
from chaos.checkers import CHECKERS as CHECKER_REGISTRY
from chaos.nemesis import FAULTS as FAULT_REGISTRY
from chaos.params import as_dict, build
from chaos.roles import ROLES
from chaos.runner import preflight
from chaos.scenario import (
    CHECKERS,
    FAULTS,
    ROLE_KINDS,
    SCHEMA,
    SCHEMA_PATH,
    NemesisStep,
    Problem,
    RoleSpec,
    Scenario,
    ScenarioError,
    load_scenario,
    load_scenario_text,
    parse_duration,
)

VALID = textwrap.dedent(
    """\
    # a full scenario: every section present
    name: stale-wal
    description: Deleting state.db-wal under a live gateway stops its writes.
    seed: 42
    duration: 10s
    store: {fixture: empty}
    roles:
      - {name: gateway, kind: gateway, count: 1, workload: {appends_per_s: 50}}
      - {name: cli, kind: cli, count: 2, start_at: 3s, stop_at: 9500ms}
      - name: locker
        kind: lock_holder
        failpoints: "write.before_commit=crash@3"
        workload: {hold: 250ms}
    nemesis:
      - {at: 2s, fault: delete_sidecars}
      - {at: 6s, fault: terminate, role: gateway}
      - {after: {role: gateway, ok: 100}, fault: kill, role: cli, index: 1}
    expect:
      no_lost_writes: {allow_in: [capture, spool]}
      stale_wal_refusal: {holder: gateway}
      integrity: {}
      retry_jitter: {min_retries: 1}
      checkpoint_cadence: {}
      recovery: {}
    must_observe: [delete_sidecars, retry]
    """
)

MINIMAL = textwrap.dedent(
    """\
    name: minimal
    description: the smallest valid scenario
    duration: 5
    roles:
      - name: gateway
        kind: gateway
    expect:
      integrity: {}
    """
)


def line_of(text: str, needle: str) -> int:
    """1-based line of the only line of ``text`` containing ``needle``."""
    hits = [i for i, ln in enumerate(text.splitlines(), 1) if needle in ln]
    assert len(hits) == 1, (needle, hits)
    return hits[0]


def problems_of(tmp_path, text: str, name: str = "s.yaml") -> list[Problem]:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    with pytest.raises(ScenarioError) as ei:
        load_scenario(path)
    probs = ei.value.problems
    assert probs, "a ScenarioError must carry problems"
    assert all(p.file == str(path) for p in probs)
    assert str(ei.value) == "\n".join(str(p) for p in probs)
    return probs


def only(probs: list[Problem], field: str) -> Problem:
    hits = [p for p in probs if p.field == field]
    assert len(hits) == 1, (field, [str(p) for p in probs])
    return hits[0]


# ---------------------------------------------------------------------------------------------
# Valid scenarios
# ---------------------------------------------------------------------------------------------


def test_full_scenario_loads_with_defaults_filled(tmp_path):
    path = tmp_path / "stale.yaml"
    path.write_text(VALID, encoding="utf-8")
    s = load_scenario(path)

    assert isinstance(s, Scenario)
    assert (s.name, s.seed, s.duration, s.source) == ("stale-wal", 42, 10.0, str(path))
    assert s.store == {"fixture": "empty"}
    assert [r.name for r in s.roles] == ["gateway", "cli", "locker"]

    gw = s.role("gateway")
    assert gw == RoleSpec(
        name="gateway",
        kind="gateway",
        count=1,
        start_at=0.0,
        stop_at=None,
        workload=build(ROLES["gateway"].Params, {
            "appends_per_s": 50,
            "sessions": 3,
            "message_bytes": 200,
            "cjk_share": 0.0,
            "tool_call_share": 0.2,
            "burst_size": 0,
            "burst_every": 0.0,
            "split_every": 0,
            "turn_s": 1.0,
            "titles": False,
            "token_usage": False,
            "search_every": 0.0,
            "read_every": 0.0,
            "replay_spool_at_start": False,
        }),
        failpoints="",
        line=line_of(VALID, "{name: gateway"),
    )
    cli = s.role("cli")
    assert (cli.count, cli.start_at, cli.stop_at) == (2, 3.0, 9.5)
    assert as_dict(cli.workload) == {"burst": 20, "message_bytes": 120, "cjk_share": 0.0,
                            "tool_call_share": 0.0, "search": False, "repeat": 1, "every": 1.0,
                            "appends_per_s": 0, "title": True}
    locker = s.role("locker")
    assert as_dict(locker.workload) == {"hold": 0.25, "every": 2.0, "first_at": 1.0}
    assert all(isinstance(v, float) for v in as_dict(locker.workload).values())
    assert locker.failpoints == "write.before_commit=crash@3"
    assert locker.line == line_of(VALID, "name: locker")

    def step(fault, params):
        return build(FAULT_REGISTRY[fault].Params, params)

    assert s.nemesis == [
        NemesisStep(0, "delete_sidecars", 2.0, None, step("delete_sidecars", {}),
                    line_of(VALID, "fault: delete_sidecars")),
        NemesisStep(1, "terminate", 6.0, None, step("terminate", {"role": "gateway"}),
                    line_of(VALID, "fault: terminate")),
        NemesisStep(2, "kill", None, {"role": "gateway", "ok": 100, "op": "append"},
                    step("kill", {"role": "cli", "index": 1}), line_of(VALID, "fault: kill")),
    ]
    assert as_dict(s.nemesis[0].params) == {"files": ["wal", "shm"]}
    assert {name: as_dict(p) for name, p in s.expect.items()} == {
        "no_lost_writes": {"allow_in": ["capture", "spool"], "expect_loss": False},
        "stale_wal_refusal": {"holder": "gateway", "fault": "delete_sidecars"},
        "integrity": {},
        "retry_jitter": {"min_retries": 1, "max_attempts": 15, "lo": 0.020, "hi": 0.150,
                         "budget_s": 15.0, "max_attempt_wait_s": 0.0},
        "checkpoint_cadence": {"every": 50},
        "recovery": {"doctor": False},
    }
    assert s.expect["retry_jitter"] == build(CHECKER_REGISTRY["retry_jitter"].Params,
                                             {"min_retries": 1})
    assert s.must_observe == ["delete_sidecars", "retry"]
    assert s.raw["roles"][0]["workload"] == {"appends_per_s": 50}  # raw keeps the file's data


def test_minimal_scenario_gets_top_level_defaults():
    s = load_scenario_text(MINIMAL)
    assert s.source == "<string>"
    assert (s.seed, s.duration, s.store, s.nemesis, s.must_observe) == (
        0, 5.0, {"fixture": "empty"}, [], []
    )
    assert s.roles[0].count == 1 and s.roles[0].start_at == 0.0
    assert set(as_dict(s.roles[0].workload)) == set(
        SCHEMA["$defs"]["gateway_workload"]["properties"])
    assert list(s.expect) == ["integrity"] and as_dict(s.expect["integrity"]) == {}


def test_role_lookup_with_seed_and_to_dict_round_trip():
    s = load_scenario_text(VALID, "v.yaml")
    with pytest.raises(KeyError):
        s.role("nobody")

    s7 = s.with_seed(7)
    assert (s7.seed, s7.raw["seed"], s.seed, s.raw["seed"]) == (7, 7, 42, 42)
    s7.roles[0].failpoints = "x"
    assert s.roles[0].failpoints == ""  # a deep copy
    with pytest.raises(ValueError):
        s.with_seed(-1)

    d = s.to_dict()
    text = json.dumps(d)  # JSON-serialisable
    assert d["duration"] == 10.0 and d["roles"][1]["start_at"] == 3.0
    jsonschema.Draft202012Validator(SCHEMA).validate(d)  # itself a valid scenario document
    again = load_scenario_text(text, "resolved.json")
    assert again.to_dict() == d
    assert [r.workload for r in again.roles] == [r.workload for r in s.roles]
    assert again.expect == s.expect
    assert [(n.fault, n.at, n.after, n.params) for n in again.nemesis] == [
        (n.fault, n.at, n.after, n.params) for n in s.nemesis
    ]


@pytest.mark.parametrize(
    "value, seconds",
    [("10s", 10.0), ("500ms", 0.5), ("2m", 120.0), ("1.5s", 1.5), ("0s", 0.0),
     (3, 3.0), (2.5, 2.5), (0, 0.0)],
)
def test_parse_duration_accepts(value, seconds):
    assert parse_duration(value) == seconds
    assert isinstance(parse_duration(value), float)


@pytest.mark.parametrize(
    "value",
    [-1, -0.5, "-1s", "abc", "10", "10 s", "10h", "", "s", True, False, None, [1], {"s": 1},
     float("inf"), float("nan"), "1e3s"],
)
def test_parse_duration_rejects(value):
    with pytest.raises(ValueError):
        parse_duration(value)


def test_problem_and_error_formatting():
    p = Problem("a.yaml", 3, "roles[1].kind", "unknown role kind 'x'")
    assert str(p) == "a.yaml:3: roles[1].kind: unknown role kind 'x'"
    assert str(Problem("a.yaml", None, "(file)", "cannot read")) == "a.yaml: (file): cannot read"
    e = ScenarioError([p, p._replace(line=4)])
    assert str(e).splitlines() == [str(p), str(p._replace(line=4))]
    assert e.problems[1].line == 4


# ---------------------------------------------------------------------------------------------
# Each kind of problem: right line, right field, a specific message
# ---------------------------------------------------------------------------------------------


def test_unknown_top_level_key(tmp_path):
    text = VALID + "workloads: {}\n"
    p = only(problems_of(tmp_path, text), "workloads")
    assert p.line == line_of(text, "workloads:")
    assert p.message.startswith("unknown key 'workloads' (allowed: name, description, seed,")


def test_unknown_role_key(tmp_path):
    text = VALID.replace("workload: {hold: 250ms}", "workloads: {hold: 250ms}")
    p = only(problems_of(tmp_path, text), "roles[2].workloads")
    assert p.line == line_of(text, "workloads:")
    assert p.message.startswith(
        "unknown key 'workloads' (allowed: name, kind, count, start_at, stop_at, workload, "
        "failpoints, undumpable, upstream, ptrace_cap)"
    )
    assert "did you mean 'workload'" in p.message


@pytest.mark.parametrize("step, told", [
    # The step's own trigger, with the delay moved in, as the user writes it.
    ("{after: {role: gateway, ok: 100}, delay: 1s, fault: kill,",
     "`delay` belongs inside `after:` (it waits that long after the trigger): write "
     "`after: {role: gateway, ok: 100, delay: 1s}`"),
    ("{at: 2s, delay: 1s, fault: kill,", "with `at: 2s` add the delay to the time instead"),
])
def test_a_step_level_delay_is_told_where_it_belongs(tmp_path, step, told):
    text = VALID.replace("{after: {role: gateway, ok: 100}, fault: kill,", step)
    p = only(problems_of(tmp_path, text), "nemesis[2].delay")
    assert p.line == line_of(text, "delay: 1s")
    assert told in p.message, p.message
    # As printed (CLI, the pytest plugin): file:line: field: problem.
    assert str(p).startswith(f"{p.file}:{p.line}: nemesis[2].delay: unknown key 'delay'"), str(p)


def test_a_delay_inside_after_is_valid(tmp_path):
    ok = VALID.replace("{after: {role: gateway, ok: 100}", "{after: {role: gateway, ok: 100, "
                       "delay: 1s}")
    path = tmp_path / "ok.yaml"
    path.write_text(ok)
    assert load_scenario(path).nemesis[2].after["delay"] == 1.0


def test_unknown_workload_key_depends_on_kind(tmp_path):
    text = VALID.replace("workload: {appends_per_s: 50}", "workload: {burst: 5}")
    p = only(problems_of(tmp_path, text), "roles[0].workload.burst")
    assert p.line == line_of(text, "burst: 5")
    assert "gateway workload" in p.message and "sessions" in p.message


def test_wrong_type(tmp_path):
    text = VALID.replace("count: 2", "count: two")
    p = only(problems_of(tmp_path, text), "roles[1].count")
    assert p.line == line_of(text, "count: two")
    assert p.message == "expected an integer, got string 'two'"


def test_null_checker_params_are_a_wrong_type(tmp_path):
    text = VALID.replace("integrity: {}", "integrity:")
    p = only(problems_of(tmp_path, text), "expect.integrity")
    assert p.line == line_of(text, "integrity:")
    assert "expected a mapping" in p.message and "{}" in p.message


def test_unknown_role_kind(tmp_path):
    text = VALID.replace("kind: cli", "kind: gatway")
    p = only(problems_of(tmp_path, text), "roles[1].kind")
    assert p.line == line_of(text, "kind: gatway")
    assert p.message.startswith(f"unknown role kind 'gatway' (allowed: {', '.join(ROLE_KINDS)})")


def test_workload_keys_of_another_kind_are_rejected(tmp_path):
    # The locker's `hold` belongs to lock_holder/long_reader, not to a worktree.
    text = VALID.replace("kind: lock_holder", "kind: worktree")
    p = only(problems_of(tmp_path, text), "roles[2].workload.hold")
    assert "'hold'" in p.message and "messages_per_child" in p.message


def test_unknown_fault(tmp_path):
    text = VALID.replace("fault: delete_sidecars", "fault: melt_disk")
    p = only(problems_of(tmp_path, text), "nemesis[0].fault")
    assert p.line == line_of(text, "melt_disk")
    assert p.message.startswith(f"unknown fault 'melt_disk' (allowed: {', '.join(FAULTS)})")


def test_nemesis_time_past_duration(tmp_path):
    text = VALID.replace("{at: 6s, fault: terminate", "{at: 12s, fault: terminate")
    p = only(problems_of(tmp_path, text), "nemesis[1].at")
    assert p.line == line_of(text, "at: 12s")
    assert p.message.startswith("at 12s is past duration 10s")


def test_start_at_past_duration(tmp_path):
    text = VALID.replace("start_at: 3s", "start_at: 10s")
    p = only(problems_of(tmp_path, text), "roles[1].start_at")
    assert p.line == line_of(text, "start_at: 10s")
    assert p.message.startswith("start_at 10s is not before duration 10s")


@pytest.mark.parametrize(
    "old, new, field, needle",
    [
        ("terminate, role: gateway", "terminate, role: gatewy", "nemesis[1].role", "gatewy"),
        ("{role: gateway, ok: 100}", "{role: ghost, ok: 100}", "nemesis[2].after.role", "ghost"),
        ("{holder: gateway}", "{holder: nobody}", "expect.stale_wal_refusal.holder", "nobody"),
    ],
)
def test_role_referenced_but_missing(tmp_path, old, new, field, needle):
    text = VALID.replace(old, new)
    p = only(problems_of(tmp_path, text), field)
    assert p.line == line_of(text, needle)
    assert f"{needle!r} is not a role (roles: gateway, cli, locker)" in p.message


def test_duplicate_role_name(tmp_path):
    text = VALID.replace("name: locker", "name: gateway")
    p = only(problems_of(tmp_path, text), "roles[2].name")
    assert p.line == line_of(text, "  - name: gateway")
    assert p.message == "duplicate role name 'gateway' (already used by roles[0])"


@pytest.mark.parametrize("bad", ["10 seconds", "10h", "-3s", "abc"])
def test_bad_duration_string(tmp_path, bad):
    text = VALID.replace("duration: 10s", f"duration: {bad}")
    p = only(problems_of(tmp_path, text), "duration")
    assert p.line == line_of(text, "duration:")
    assert p.message.startswith(f"bad duration {bad!r}: expected a number of seconds >= 0")


def test_zero_duration_is_rejected(tmp_path):
    text = VALID.replace("duration: 10s", "duration: 0s")
    probs = problems_of(tmp_path, text)
    assert only(probs, "duration").message == "duration must be > 0, got 0s"


def test_bad_failpoint_spec(tmp_path):
    text = VALID.replace("write.before_commit=crash@3", "write.before_comit=crash@3")
    p = only(problems_of(tmp_path, text), "roles[2].failpoints")
    assert p.line == line_of(text, "failpoints:")
    assert p.message.startswith("bad failpoint spec: unknown failpoint 'write.before_comit'")


def test_bad_failpoint_action(tmp_path):
    text = VALID.replace("crash@3", "explode")
    p = only(problems_of(tmp_path, text), "roles[2].failpoints")
    assert "bad action 'explode'" in p.message


def test_yaml_syntax_error_has_its_line(tmp_path):
    text = VALID.replace("description: Deleting", "description: Deleting: x:")
    (p,) = problems_of(tmp_path, text)
    assert (p.line, p.field) == (line_of(text, "Deleting: x:"), "(yaml)")
    assert p.message.startswith("YAML syntax error: mapping values are not allowed here")


def test_yaml_syntax_error_unclosed_flow_names_where_it_started(tmp_path):
    text = VALID.replace("  - {at: 2s, fault: delete_sidecars}", "  - {at: 2s, fault: [wal")
    (p,) = problems_of(tmp_path, text)
    assert (p.line, p.field) == (line_of(text, "[wal") + 1, "(yaml)")
    assert f"from line {line_of(text, '[wal')}" in p.message


def test_yaml_syntax_error_bad_indentation(tmp_path):
    text = "name: x\ndescription: y\n  duration: 3s\n"
    (p,) = problems_of(tmp_path, text)
    assert (p.field, p.line) == ("(yaml)", 3)


def test_unreadable_and_non_utf8_files(tmp_path):
    with pytest.raises(ScenarioError) as ei:
        load_scenario(tmp_path / "missing.yaml")
    (p,) = ei.value.problems
    assert (p.line, p.field) == (None, "(file)") and "cannot read" in p.message
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(b"name: x\ndescription: caf\xe9\n")
    with pytest.raises(ScenarioError) as ei:
        load_scenario(bad)
    (p,) = ei.value.problems
    assert (p.line, p.field) == (2, "(file)") and "UTF-8" in p.message


def test_dates_and_multiple_documents(tmp_path):
    p = only(problems_of(tmp_path, VALID.replace("seed: 42", "seed: 2020-13-45")), "seed")
    assert p.message == "expected an integer, got string '2020-13-45'"
    (p,) = problems_of(tmp_path, VALID + "---\nname: two\n")
    assert (p.line, p.field) == (VALID.count("\n") + 1, "(yaml)")
    assert "single document" in p.message


def test_empty_and_non_mapping_documents(tmp_path):
    (p,) = problems_of(tmp_path, "# nothing here\n")
    assert (p.line, p.field) == (1, "(root)") and "empty" in p.message
    (p,) = problems_of(tmp_path, "- just\n- a list\n")
    assert (p.line, p.field) == (1, "(root)") and p.message == "expected a mapping, got a list"


def test_missing_required_fields_point_at_the_parent_mapping(tmp_path):
    text = VALID.replace("duration: 10s\n", "").replace("    kind: lock_holder\n", "")
    probs = problems_of(tmp_path, text)
    p = only(probs, "duration")
    assert p.line == line_of(text, "name: stale-wal")  # the top-level mapping starts here
    assert p.message == "missing required key 'duration'"
    p = only(probs, "roles[2].kind")
    assert p.line == line_of(text, "name: locker")
    assert p.message == "missing required key 'kind'"


def test_signal_fault_requires_a_role(tmp_path):
    text = VALID.replace("{at: 6s, fault: terminate, role: gateway}", "{at: 6s, fault: stop}")
    p = only(problems_of(tmp_path, text), "nemesis[1].role")
    assert p.line == line_of(text, "fault: stop")
    assert p.message == "missing required key 'role'"


def test_exactly_one_of_at_or_after(tmp_path):
    text = VALID.replace("{at: 6s, fault: terminate", "{fault: terminate").replace(
        "{after: {role: gateway, ok: 100}", "{at: 1s, after: {role: gateway, ok: 100}"
    )
    probs = problems_of(tmp_path, text)
    assert "missing 'at' or 'after'" in only(probs, "nemesis[1]").message
    both = only(probs, "nemesis[2].after")
    assert both.line == line_of(text, "at: 1s")
    assert "exactly one of 'at' or 'after'" in both.message


def test_index_beyond_role_count(tmp_path):
    text = VALID.replace("role: cli, index: 1", "role: cli, index: 2")
    p = only(problems_of(tmp_path, text), "nemesis[2].index")
    assert p.message == "index 2 is out of range: role 'cli' has count 2 (index 0..1)"


def test_stop_at_rules(tmp_path):
    probs = problems_of(tmp_path, VALID.replace("stop_at: 9500ms", "stop_at: 2s"))
    assert only(probs, "roles[1].stop_at").message == "stop_at 2s must be after start_at 3s"
    probs = problems_of(tmp_path, VALID.replace("stop_at: 9500ms", "stop_at: 11s"))
    assert only(probs, "roles[1].stop_at").message == "stop_at 11s is past duration 10s"


def test_delete_sidecars_files_are_wal_and_shm_only(tmp_path):
    text = VALID.replace("{at: 2s, fault: delete_sidecars}",
                         "{at: 2s, fault: delete_sidecars, files: [db, wal]}")
    p = only(problems_of(tmp_path, text), "nemesis[0].files[0]")
    assert p.message == "unknown sidecar 'db' (allowed: wal, shm)"
    text = VALID.replace("{at: 2s, fault: delete_sidecars}",
                         "{at: 2s, fault: delete_sidecars, files: []}")
    assert "at least 1 item" in only(problems_of(tmp_path, text), "nemesis[0].files").message


def test_expect_rules(tmp_path):
    probs = problems_of(tmp_path, VALID.replace("recovery: {}", "recovry: {}"))
    p = only(probs, "expect.recovry")
    assert p.message.startswith(f"unknown checker 'recovry' (allowed: {', '.join(CHECKERS)})")
    start = VALID.index("expect:")
    end = VALID.index("must_observe")
    probs = problems_of(tmp_path, VALID[:start] + "expect: {}\n" + VALID[end:])
    assert "at least one checker" in only(probs, "expect").message
    probs = problems_of(tmp_path, VALID.replace("{min_retries: 1}", "{lo: 0.3, hi: 0.1}"))
    assert only(probs, "expect.retry_jitter.hi").message == "lo (0.3) must be <= hi (0.1)"


def test_must_observe_names_a_used_fault_or_an_event(tmp_path):
    text = VALID.replace("[delete_sidecars, retry]", "[stop, retry, nothing]")
    probs = problems_of(tmp_path, text)
    assert "not in this scenario's nemesis" in only(probs, "must_observe[0]").message
    assert only(probs, "must_observe[2]").message.startswith("unknown observable 'nothing'")


def test_duplicate_and_non_string_yaml_keys(tmp_path):
    text = VALID + "seed: 43\nyes: 1\n"
    probs = problems_of(tmp_path, text)
    p = only(probs, "seed")
    assert p.line == line_of(text, "seed: 43")
    assert p.message == f"duplicate key 'seed' (first on line {line_of(text, 'seed: 42')}; " \
        "YAML keys must be unique)"
    p = only(probs, "(root)")
    assert p.line == line_of(text, "yes: 1") and "not a string" in p.message


def test_several_problems_are_all_reported_sorted_by_line(tmp_path):
    text = (
        VALID.replace("name: stale-wal", "name: Stale WAL")
        .replace("kind: cli", "kind: clli")
        .replace("count: 2", "count: 0")
        .replace("{at: 6s, fault: terminate", "{at: 60s, fault: terminate")
        .replace("{holder: gateway}", "{holder: gateway, extra: 1}")
        + "bogus: true\n"
    )
    probs = problems_of(tmp_path, text)
    got = [(p.line, p.field) for p in probs]
    assert got == [
        (line_of(text, "Stale WAL"), "name"),
        (line_of(text, "kind: clli"), "roles[1].count"),
        (line_of(text, "kind: clli"), "roles[1].kind"),
        (line_of(text, "at: 60s"), "nemesis[1].at"),
        (line_of(text, "extra: 1"), "expect.stale_wal_refusal.extra"),
        (line_of(text, "bogus:"), "bogus"),
    ]
    assert [p.line for p in probs] == sorted(p.line for p in probs)
    assert only(probs, "roles[1].count").message == "must be >= 1, got 0"


# ---------------------------------------------------------------------------------------------
# The published schema
# ---------------------------------------------------------------------------------------------


def test_published_schema_file_equals_schema():
    on_disk = SCHEMA_PATH.read_text(encoding="utf-8")
    assert json.loads(on_disk) == SCHEMA, "run: python -m chaos.scenario --write-schema"
    assert on_disk == sc.schema_json()


def test_schema_is_valid_draft_2020_12_and_documents_every_field():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    for name, prop in SCHEMA["properties"].items():
        assert "description" in prop, name
    for name, prop in SCHEMA["$defs"]["role"]["properties"].items():
        assert "description" in prop, name
    for kind in ROLE_KINDS:
        for name, prop in SCHEMA["$defs"][f"{kind}_workload"]["properties"].items():
            assert "description" in prop and "default" in prop, (kind, name)
    assert set(SCHEMA["properties"]["expect"]["properties"]) == set(CHECKERS)


# ---------------------------------------------------------------------------------------------
# Properties: nothing but ScenarioError escapes, whatever the input
# ---------------------------------------------------------------------------------------------

_FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@_FUZZ
@given(st.text())
def test_arbitrary_text_raises_only_scenario_error(text):
    try:
        load_scenario_text(text, "fuzz.yaml")
    except ScenarioError as e:
        assert e.problems and all(isinstance(p, Problem) for p in e.problems)
        assert all(p.line is None or p.line >= 1 for p in e.problems)


_YAMLISH = st.lists(
    st.sampled_from(list("abcxyz019:-[]{},&*!|>'\"#% \n\t.") + ["  ", "- ", ": ", "\n  "]),
    max_size=40,
).map("".join)


@_FUZZ
@given(st.one_of(_YAMLISH, st.builds(lambda a, b: VALID[:a] + b + VALID[a:],
                                     st.integers(0, len(VALID)), _YAMLISH)))
def test_yaml_like_text_raises_only_scenario_error(text):
    try:
        load_scenario_text(text)
    except ScenarioError as e:
        assert e.problems


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 200) | st.floats(allow_nan=True)
    | st.sampled_from(["", "2s", "0s", "gateway", "cli", "wal", "kill", "x", "500ms"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["role", "ok", "at", "name", "kind", "hold", "zz"]),
                      inner, max_size=3),
    max_leaves=8,
)


def _paths(obj, prefix=()):
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from _paths(v, prefix + (i,))


_VALID_DATA = yaml.safe_load(VALID)
_VALID_PATHS = [p for p in _paths(_VALID_DATA) if p]


@_FUZZ
@given(st.sampled_from(_VALID_PATHS), _JSON, st.booleans())
def test_mutated_valid_scenario_raises_only_scenario_error(path, value, delete):
    data = copy.deepcopy(_VALID_DATA)
    parent = data
    for p in path[:-1]:
        parent = parent[p]
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    try:
        s = load_scenario_text(yaml.safe_dump(data))
    except ScenarioError as e:
        assert e.problems
    else:
        json.dumps(s.to_dict())


# --------------------------------------------------------------------------- found by breaking it

def test_alias_bomb_is_refused_quickly_without_expanding(tmp_path):
    lines = ["name: bomb", "description: x", "duration: 10s",
             "x0: &f0 [wal, wal, wal, wal, wal, wal, wal, wal, wal, wal]"]
    for i in range(1, 10):
        lines.append(f"x{i}: &f{i} [" + ", ".join([f"*f{i - 1}"] * 10) + "]")
    lines += ["roles: [{name: g, kind: gateway}]", "expect: {integrity: {}}"]
    with pytest.raises(ScenarioError) as exc:
        load_scenario_text("\n".join(lines) + "\n", "bomb.yaml")
    assert "alias" in str(exc.value)


def test_duration_too_large_to_use_is_a_problem_not_a_crash():
    text = ("name: big\ndescription: x\nduration: 1" + "0" * 300 + "s\n"
            "roles: [{name: g, kind: gateway}]\nexpect: {integrity: {}}\n")
    with pytest.raises(ScenarioError) as exc:
        load_scenario_text(text, "big.yaml")
    assert exc.value.problems[0].field == "duration" and exc.value.problems[0].line == 3


def test_seed_beyond_64_bits_is_refused():
    text = ("name: s\ndescription: x\nseed: 1" + "0" * 100 + "\nduration: 1s\n"
            "roles: [{name: g, kind: gateway}]\nexpect: {integrity: {}}\n")
    with pytest.raises(ScenarioError) as exc:
        load_scenario_text(text, "seed.yaml")
    assert exc.value.problems[0].field == "seed"


# ---------------------------------------------------------------------------------------------
# Process faults, after triggers, phases and sweep (SPEC §16.2, §16.3)
# ---------------------------------------------------------------------------------------------

SCHED = textwrap.dedent(
    """\
    name: sched
    description: scheduling rules
    duration: 10s
    roles:
      - {name: gw, kind: gateway}
      - {name: cli, kind: cli}
    nemesis:
      - {at: 1s, fault: kill, role: gw, failpoint: write.before_commit, hit: 2}
      - {after: {event: failpoint, role: gw, delay: 500ms}, fault: restart, role: gw}
      - {after: {step: 1}, fault: arm_failpoint, role: cli, failpoint: checkpoint.before,
         action: "sleep(100)"}
      - {after: {role: cli, fail: 3, op: open}, fault: restart, role: cli, index: 0, stop: none}
    expect: {integrity: {}}
    """
)


def test_process_fault_steps_and_after_triggers_resolve():
    s = load_scenario_text(SCHED)
    assert [(n.fault, n.at, n.after, as_dict(n.params)) for n in s.nemesis] == [
        ("kill", 1.0, None, {"role": "gw", "failpoint": "write.before_commit", "hit": 2}),
        ("restart", None, {"event": "failpoint", "role": "gw", "delay": 0.5, "count": 1},
         {"role": "gw", "stop": "kill"}),
        ("arm_failpoint", None, {"step": 1}, {"role": "cli", "failpoint": "checkpoint.before",
                                              "action": "sleep(100)"}),
        ("restart", None, {"role": "cli", "fail": 3, "op": "open"},
         {"role": "cli", "index": 0, "stop": "none"}),
    ]
    again = load_scenario_text(json.dumps(s.to_dict()))
    assert again.to_dict() == s.to_dict()


@pytest.mark.parametrize("old, new, field, needle", [
    ("{event: failpoint, role: gw, delay: 500ms}", "{event: failpoint, step: 0}",
     "nemesis[1].after", "exactly one trigger, not event and step"),
    ("{event: failpoint, role: gw, delay: 500ms}", "{delay: 1s}",
     "nemesis[1].after", "give exactly one trigger of ok, fail, info, event, step"),
    ("{role: cli, fail: 3, op: open}", "{fail: 3}", "nemesis[3].after", "add 'role'"),
    ("{event: failpoint, role: gw, delay: 500ms}", "{event: failpoint, op: append}",
     "nemesis[1].after.op", "'op' goes with ok/fail/info"),
    ("{role: cli, fail: 3, op: open}", "{role: cli, ok: 3, count: 2}",
     "nemesis[3].after.count", "'count' goes with 'event'"),
    ("{event: failpoint, role: gw, delay: 500ms}", "{event: failpoints}",
     "nemesis[1].after.event", "unknown store event 'failpoints'"),
    ("after: {step: 1}", "after: {step: 7}", "nemesis[2].after.step", "step 7 does not exist"),
    ("after: {step: 1}", "after: {step: 2}", "nemesis[2].after.step", "cannot wait for itself"),
    ("after: {step: 1}", "after: {step: 0, delay: 9.5s}", "nemesis[2].after",
     "fires at 10.5s (step 0 at 1s plus the delays), not before duration 10s"),
    ("failpoint: write.before_commit, hit: 2", "hit: 2", "nemesis[0].hit",
     "'hit' goes with 'failpoint'"),
    ("failpoint: write.before_commit, hit: 2", "failpoint: write.before_comit",
     "nemesis[0].failpoint", "unknown failpoint 'write.before_comit'"),
    ('action: "sleep(100)"', "action: explode", "nemesis[2].action", "bad action 'explode'"),
    ("stop: none", "stop: pause", "nemesis[3].stop", "unknown restart stop 'pause'"),
    ("fault: restart, role: gw}", "fault: restart, role: gateway}", "nemesis[1].role",
     "'gateway' is not a role"),
])
def test_schedule_problems_name_the_field(tmp_path, old, new, field, needle):
    text = SCHED.replace(old, new)
    assert text != SCHED
    p = only(problems_of(tmp_path, text), field)
    assert needle in p.message, p.message
    assert p.line is not None


def test_steps_waiting_for_each_other_in_a_cycle(tmp_path):
    text = SCHED.replace("after: {step: 1}", "after: {step: 3}").replace(
        "{after: {role: cli, fail: 3, op: open}", "{after: {step: 2}")
    probs = problems_of(tmp_path, text)
    for field in ("nemesis[2].after.step", "nemesis[3].after.step"):
        assert "in a cycle (2 -> 3)" in only(probs, field).message


def test_phases_heal_at_rules(tmp_path):
    s = load_scenario_text(SCHED.replace("duration: 10s", "duration: 10s\nphases: {heal_at: 8s}"))
    assert s.heal_at == 8.0 and s.to_dict()["phases"] == {"heal_at": 8.0}
    assert load_scenario_text(SCHED).heal_at is None
    late = SCHED.replace("duration: 10s", "duration: 10s\nphases: {heal_at: 11s}")
    assert "past duration 10s" in only(problems_of(tmp_path, late), "phases.heal_at").message
    early = SCHED.replace("duration: 10s", "duration: 10s\nphases: {heal_at: 1s}")
    p = only(problems_of(tmp_path, early), "nemesis[0].at")
    assert p.message.startswith("at 1s is not before phases.heal_at 1s")
    assert p.line == line_of(early, "{at: 1s, fault: kill")
    typo = SCHED.replace("duration: 10s", "duration: 10s\nphases: {heal: 1s}")
    assert "unknown key 'heal'" in only(problems_of(tmp_path, typo), "phases.heal").message


def test_sweep_block_rules(tmp_path):
    base = SCHED.replace("expect:", "sweep: {failpoint: write.before_commit, role: cli}\nexpect:")
    s = load_scenario_text(base)
    assert s.sweep == {"failpoint": "write.before_commit", "role": "cli", "max": 50}
    assert load_scenario_text(json.dumps(s.to_dict())).sweep == s.sweep
    bad_role = base.replace("role: cli}\nexpect", "role: clii}\nexpect")
    p = only(problems_of(tmp_path, bad_role), "sweep.role")
    assert "'clii' is not a role" in p.message and "did you mean 'cli'" in p.message
    bad_fp = base.replace("{failpoint: write.before_commit, role: cli}",
                          "{failpoint: nowhere, role: cli}")
    assert "unknown failpoint 'nowhere'" in only(problems_of(tmp_path, bad_fp),
                                                 "sweep.failpoint").message
    clash = base.replace("{name: cli, kind: cli}",
                         '{name: cli, kind: cli, failpoints: "write.before_commit=off"}')
    assert "already arms write.before_commit" in only(problems_of(tmp_path, clash),
                                                      "sweep.failpoint").message
    zero = base.replace("role: cli}\nexpect", "role: cli, max: 0}\nexpect")
    assert "must be >= 1" in only(problems_of(tmp_path, zero), "sweep.max").message


# ---------------------------------------------------------------------------------------------
# Issue 11 item 9: what validate accepts, the run can execute
# ---------------------------------------------------------------------------------------------

SHIPPED = Path(__file__).resolve().parent.parent / "scenarios"
_DOCS = [yaml.safe_load(p.read_text()) for p in sorted(SHIPPED.glob("*.yaml"))]

_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 70) | st.floats(allow_nan=False, width=32)
    | st.sampled_from(["", "0s", "1s", "500ms", "gateway", "cli", "wal", "kill", "run", "prune",
                       "../x.db", "/abs", "--home", "--force", "doctor", "backup", "file", "cp",
                       "write.before_commit", "crash@2", "schema_v3", "16M", "ok", "event"]),
    lambda inner: st.lists(inner, max_size=3)
    | st.dictionaries(st.sampled_from(["role", "ok", "at", "name", "kind", "hold", "fault",
                                       "command", "args", "force", "dry_run", "step", "event",
                                       "path", "source", "failpoint", "index", "count"]),
                      inner, max_size=3),
    max_leaves=6,
)


@st.composite
def _mutated(draw):
    doc = copy.deepcopy(draw(st.sampled_from(_DOCS)))
    for _ in range(draw(st.integers(1, 3))):
        paths = [p for p in _paths(doc) if p]
        path = draw(st.sampled_from(paths))
        parent = doc
        for p in path[:-1]:
            parent = parent[p]
        if draw(st.booleans()) and isinstance(parent, dict):
            del parent[path[-1]]
        elif draw(st.booleans()) and isinstance(parent, dict):
            parent[draw(st.sampled_from(["args", "path", "index", "after", "failpoint", "hit",
                                         "force", "source"]))] = draw(_VALUES)
        else:
            parent[path[-1]] = draw(_VALUES)
    return doc


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(_mutated())
def test_what_validate_accepts_the_run_can_execute(tmp_path_factory, doc):
    """Mutate the shipped scenarios: either validate refuses (ScenarioError, every problem with
    file and field) or the run's preflight derives every input without an exception, and the
    resolved scenario replays (its JSON validates to the same scenario)."""
    try:
        sc = load_scenario_text(yaml.safe_dump(doc), "m.yaml")
    except ScenarioError as exc:
        assert exc.problems and all(p.file == "m.yaml" and p.field for p in exc.problems)
        return
    preflight(sc, tmp_path_factory.getbasetemp() / "run")
    again = load_scenario_text(json.dumps(sc.to_dict()), "resolved.json")
    assert again.to_dict() == sc.to_dict()


def test_the_scenario_reference_is_generated_from_the_declarations():
    from chaos.scenario.reference import REFERENCE, reference_document

    assert REFERENCE.read_text(encoding="utf-8") == reference_document(), \
        "run: python -m chaos.scenario --write-schema"
    for name, fault in FAULT_REGISTRY.items():  # every fault and checker documents each param
        assert all(d for _, _, d in __import__("chaos.params").params.reference_rows(
            fault.Params)), name
