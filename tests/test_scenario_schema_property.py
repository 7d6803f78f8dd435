"""Issue 22 item 9 and its generator: every scenario the schema admits, validate accepts or
refuses by name, and what it accepts ``list`` prints and the run constructs (SPEC §16.4).

Documents are generated from the published JSON Schema with ``hypothesis-jsonschema``: the
top-level fields, each role kind (its workload schema), each fault (its step schema) and the
``expect`` block, each from its own part of :data:`chaos.scenario.SCHEMA`. A repair loop then
removes what the cross-field rules refuse (a time past ``duration``, a reference to no role, an
unused ``must_observe``): each remaining value is still one the schema drew. Each document is
written as YAML in the ways a user may write the same values -- integers as ``2.0``, characters
beyond the BMP as JSON-style surrogate-pair escapes (``"\\ud83d\\ude00"``) -- and then:

* ``validate`` never raises; it accepts the rewritten forms exactly when it accepts the plain
  one, and they resolve to the same scenario;
* an accepted document: ``chaos validate`` and ``chaos list`` print it (exit 0, no traceback,
  every byte valid UTF-8); the run's first line prints; :func:`chaos.runner.preflight` derives
  every role's workload, every process's files, every command line, every fault and trigger;
  every checker judges an empty history without crashing; the resolved scenario is written and
  read back (``chaos replay`` reads it) as the same scenario.

CI runs a sample (40 documents); ``CHAOS_GENERATORS=full`` runs the slower sweep (400). The
counts of documents and of accepted ones are added to the session's closing summary.
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import re
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

hjs = pytest.importorskip("hypothesis_jsonschema", reason="pip install -e '.[test]'")

from chaos import store  # noqa: E402
from chaos.__main__ import main as chaos_main  # noqa: E402
from chaos.checkers import CheckContext, run_checkers  # noqa: E402
from chaos.nemesis import FAULTS  # noqa: E402
from chaos.roles import ROLES  # noqa: E402
from chaos.runner import header, preflight  # noqa: E402
from chaos.scenario import SCHEMA, load_scenario_text, validate_text  # noqa: E402
from chaos.scenario.schema import _step_branch  # noqa: E402
from rich.console import Console  # noqa: E402

GENERATOR_CASES = "generator_cases"  # summed by tests/conftest.py

DEFS = SCHEMA["$defs"]
FULL = os.environ.get("CHAOS_GENERATORS", "") == "full"
EXAMPLES = 400 if FULL else 40
REPAIR_ROUNDS = 10


# ------------------------------------------------------------------ strategies from the schema
def _part(schema: dict):
    return hjs.from_schema({**copy.deepcopy(schema), "$defs": DEFS})


def _role(kind: str):
    s = copy.deepcopy(DEFS["role"])
    s.pop("allOf")
    s["properties"]["kind"] = {"const": kind}
    s["properties"]["workload"] = {"$ref": f"#/$defs/{kind}_workload"}
    return _part(s)


def _step(fault: str):
    s = copy.deepcopy(DEFS["step"])
    s.pop("allOf")
    then = _step_branch(FAULTS[fault])["then"]
    s["properties"] = {**then["properties"], "at": s["properties"]["at"],
                       "after": s["properties"]["after"], "fault": {"const": fault}}
    s["additionalProperties"] = False
    s["required"] = ["fault", *then.get("required", [])]
    return _part(s)


_P = SCHEMA["properties"]
_TOP = {k: _part(_P[k]) for k in ("name", "description", "duration", "seed", "store", "fs",
                                  "phases", "tags", "must_observe")}
_ROLES = st.one_of([_role(k) for k in ROLES])
_STEPS = st.one_of([_step(f) for f in FAULTS])
_EXPECT = _part(_P["expect"])


@st.composite
def documents(draw) -> dict:
    """A scenario document the schema admits (top level, roles, steps, expect)."""
    doc = {k: draw(s) for k, s in _TOP.items()
           if k in ("name", "description", "duration") or draw(st.booleans())}
    doc["roles"] = draw(st.lists(_ROLES, min_size=1, max_size=3))
    doc["nemesis"] = draw(st.lists(_STEPS, max_size=3))
    doc["expect"] = draw(_EXPECT)
    return doc


# ------------------------------------------------------------------ repair (cross-field rules)
_FIELD = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


def _path(field: str) -> list:
    if field.startswith("("):
        return []
    return [int(i) if i else k for k, i in _FIELD.findall(field)]


def _delete(doc, path: list) -> bool:
    parent = doc
    for p in path[:-1]:
        try:
            parent = parent[p]
        except (KeyError, IndexError, TypeError):
            return False
    try:
        del parent[path[-1]]
        return True
    except (KeyError, IndexError, TypeError):
        return False


def repair(doc: dict) -> dict:
    """Remove (or, for a required field, replace) what the rules refuse, a few rounds; values
    left are the schema's draws."""
    doc = copy.deepcopy(doc)
    for _ in range(REPAIR_ROUNDS):
        problems = validate_text(yaml.safe_dump(doc))
        if not problems:
            break
        fixes = []
        for p in problems:
            path = _path(p.field)
            if not path:
                continue
            if path == ["duration"]:
                doc["duration"] = 5
            elif path[0] == "roles" and path[-1] == "name" and len(path) == 3:
                doc["roles"][path[1]]["name"] = f"r{path[1]}"
            elif path[0] == "nemesis" and len(path) == 2 and "at" in p.message:
                step = doc["nemesis"][path[1]]
                step.pop("after", None)
                step["at"] = 0
            else:
                fixes.append(path)
        # deepest and last first, so list indexes stay right
        for path in sorted(fixes, key=lambda q: [str(x).zfill(6) for x in q], reverse=True):
            _delete(doc, path)
        if not doc.get("expect"):
            doc["expect"] = {"integrity": {}}
        if not doc.get("roles"):
            doc["roles"] = [{"name": "gw", "kind": "gateway"}]
    return doc


# ------------------------------------------------------------------ ways of writing it
def _pair(offset: int) -> str:
    return chr(0xD800 + (offset >> 10)) + chr(0xDC00 + (offset & 0x3FF))


def _rewrite(value, *, floats: bool, pairs: bool):
    if isinstance(value, dict):
        return {_rewrite(k, floats=False, pairs=pairs): _rewrite(v, floats=floats, pairs=pairs)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_rewrite(v, floats=floats, pairs=pairs) for v in value]
    if floats and isinstance(value, int) and not isinstance(value, bool) \
            and abs(value) < 2**53:
        return float(value)
    if pairs and isinstance(value, str):  # astral characters as two UTF-16 escapes
        return "".join(c if ord(c) < 0x10000 else _pair(ord(c) - 0x10000) for c in value)
    return value


def written(doc: dict, *, floats: bool = False, pairs: bool = False) -> str:
    return yaml.safe_dump(_rewrite(doc, floats=floats, pairs=pairs), sort_keys=False)


# ------------------------------------------------------------------ the property
def _strict_stdio():
    """A stdout and a stderr that encode strictly as UTF-8 (a real terminal's)."""
    return (io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict"),
            io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict"))


def _cli(*argv: str) -> tuple[int, str, str]:
    out, err = _strict_stdio()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = chaos_main(list(argv))
    texts = []
    for stream in (out, err):
        stream.flush()
        texts.append(stream.buffer.getvalue().decode("utf-8"))  # strict: valid UTF-8
    return code, texts[0], texts[1]


def check_accepted(text: str, tmp: Path) -> None:
    """Everything an accepted scenario must survive short of starting a process."""
    sc = load_scenario_text(text, "gen.yaml")
    folder = tmp / "scenarios"
    folder.mkdir()
    (folder / "gen.yaml").write_text(text, encoding="utf-8")
    code, out, err = _cli("validate", str(folder / "gen.yaml"))
    assert code == 0 and "Traceback" not in err, err
    code, out, err = _cli("list", str(folder))
    assert code == 0 and "Traceback" not in err and "gen.yaml" in out, (out, err)
    assert "invalid" not in out, out
    out, _ = _strict_stdio()
    Console(file=out, width=100).print(header(sc))
    run = store.RunDir(tmp / "run")
    preflight(sc, run.path)
    resolved = sc.to_dict()
    run.path.mkdir()
    store.write_json(run.scenario, resolved)
    again = load_scenario_text(run.scenario.read_text(encoding="utf-8"), str(run.scenario))
    assert again.to_dict() == resolved
    ctx = CheckContext(history=[], store_path=run.final / store.DB_NAME, home=run.home,
                       run_dir=run.path, scenario=resolved)
    for verdict in run_checkers(ctx, sc.expect):
        assert not verdict.summary.startswith("checker crashed"), \
            (verdict.checker, verdict.summary, verdict.figures.get("error", "")[-1500:])


@settings(max_examples=EXAMPLES, deadline=None, phases=[Phase.explicit, Phase.generate,
                                                        Phase.shrink],
          suppress_health_check=list(HealthCheck))
@given(documents(), st.booleans(), st.booleans())
def test_every_scenario_the_schema_admits_validates_or_runs(tmp_path_factory, record_property,
                                                            doc, floats, pairs):
    record_property(GENERATOR_CASES, ("scenario-schema documents", 1))
    raw = validate_text(written(doc))  # never raises, whatever the schema drew
    assert isinstance(raw, list)
    doc = repair(doc)
    plain = written(doc)
    problems = validate_text(plain)
    variant = written(doc, floats=floats, pairs=pairs)
    v_problems = validate_text(variant)
    assert [str(p) for p in v_problems] == [str(p) for p in problems] or bool(problems), \
        (f"the same values written another way (floats={floats}, pairs={pairs}) validate "
         f"differently:\n{v_problems}\nvs\n{problems}")
    if problems:
        return
    record_property(GENERATOR_CASES, ("scenario-schema accepted", 1))
    assert not v_problems, v_problems
    assert load_scenario_text(variant).to_dict() == load_scenario_text(plain).to_dict()
    check_accepted(variant, tmp_path_factory.mktemp("gen"))


# ------------------------------------------------------------------ the reported members
BASE = """\
name: members
description: DESC
duration: 2s
roles:
  - name: gw
    kind: gateway
    count: COUNT
expect:
  no_lost_writes: {}
"""


def test_count_written_as_a_float_runs_as_that_integer(tmp_path):
    """Issue 22 item 9: ``count: 2.0`` validated, then ``range(2.0)`` crashed the run."""
    text = BASE.replace("DESC", "float count").replace("COUNT", "2.0")
    sc = load_scenario_text(text)
    assert sc.roles[0].count == 2 and type(sc.roles[0].count) is int
    check_accepted(text, tmp_path)


@pytest.mark.parametrize("desc", [
    '"a lone surrogate \\ud800 here"',
    '"an emoji written as a pair \\ud83d\\ude00"',
    '"markup [/] and [bold]tags[/bold] and \\x1b[31m an escape"',
    '"NUL \\0 inside"',
    '"bidi \\u202e override"',
])
def test_scenario_text_of_any_content_is_refused_by_name_or_printed_and_stored(tmp_path, desc):
    """Issue 22 item 9: a lone surrogate in ``description`` crashed ``list`` and ``run``
    (UnicodeEncodeError), ``[/]`` in it crashed the run's first line (MarkupError). Now text is
    either refused by validate with its field, or printed and stored whatever it holds."""
    text = BASE.replace("DESC", desc).replace("COUNT", "1")
    problems = validate_text(text)
    if "ud800" in desc or "\\0" in desc:
        assert [p.field for p in problems] == ["description"], problems
        (tmp_path / "s").mkdir()
        (tmp_path / "s" / "bad.yaml").write_text(text)
        code, out, err = _cli("list", str(tmp_path / "s"))
        assert code == 0 and "invalid" in out
        code, out, err = _cli("run", str(tmp_path / "s" / "bad.yaml"), "--out",
                              str(tmp_path / "runs"))
        assert code == 2 and "description" in err and "Traceback" not in err
        return
    assert not problems, problems
    check_accepted(text, tmp_path)
    if "ude00" in desc:
        assert "\U0001F600" in load_scenario_text(text).description


def test_resolved_json_with_exponent_floats_reads_back():
    """Found by the property: ``json.dumps`` writes ``1e-05``, which YAML 1.1 reads as a
    string: ``scenario.resolved.json`` of a run with a 10-microsecond time did not replay."""
    text = BASE.replace("DESC", "tiny").replace("COUNT", "1").replace(
        "    count: 1", "    count: 1\n    start_at: 0.00001")
    sc = load_scenario_text(text)
    again = load_scenario_text(json.dumps(sc.to_dict()))
    assert again.to_dict() == sc.to_dict() and again.roles[0].start_at == 1e-05


def test_every_checker_judges_a_run_without_a_final_store(tmp_path):
    """Found by the property: ``prune_respects_turns`` crashed (FileNotFoundError) on a run
    whose final store is missing, and after the rebase so did the new ``fts_exact``: a missing
    store is now one FAIL that says so, for every checker that reads it (``NoStore``)."""
    from chaos.checkers import CHECKERS
    from chaos.params import build

    ctx = CheckContext(history=[], store_path=tmp_path / "final" / "state.db",
                       home=tmp_path / "home", run_dir=tmp_path, scenario={})
    expect = {"stale_wal_refusal": {"holder": "gw"},
              **{n: {} for n in CHECKERS if n != "stale_wal_refusal"}}
    for name, params in expect.items():
        build(CHECKERS[name].Params, params)
    for verdict in run_checkers(ctx, expect):
        assert not verdict.summary.startswith("checker crashed"), (verdict.checker,
                                                                    verdict.summary)


def test_a_verdict_summary_of_any_content_prints():
    """Found beside the property: the verdict table parsed each summary as rich markup, so an
    error message quoted in it (``[/]``, a terminal escape) crashed the end of the run."""
    from chaos.checkers.base import Verdict
    from chaos.report import print_verdicts

    out, _ = _strict_stdio()
    verdicts = [Verdict("error_taxonomy", "FAIL", "unexpected error 'x [/] y' \x1b[31m \ud800",
                        {}, [])]
    print_verdicts(Console(file=out, width=100), verdicts, "t")
    out.flush()
    text = out.buffer.getvalue().decode("utf-8")
    assert "[/]" in text and "\\x1b" in text and "\x1b[31m" not in text


def test_a_duration_string_too_large_to_read_back_is_refused_by_name():
    """Found by the property above: ``'200000000000000000m'`` was accepted, and its resolved
    number of seconds (1.2e19) was then refused when the run's resolved scenario was read."""
    text = BASE.replace("COUNT", "1").replace("DESC", "d") + \
        "  latency: {max_bound: '200000000000000000m'}\n"
    problems = [str(p) for p in validate_text(text)]
    assert any("expect.latency.max_bound" in p and "7-day limit" in p for p in problems), problems
