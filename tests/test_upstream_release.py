"""Real upstream releases beside ours (issue 23 item 4): the cache, isolation, the role kind.

Tests that need a release SKIP with the fetch command when it is not cached (CI has no network
at test time unless the cache was filled: ``python -m chaos upstream fetch 0.19.0 0.22.2``).
"""

from __future__ import annotations

import sqlite3
import textwrap

import pytest

from chaos.runner import upstream_missing
from chaos.scenario import load_scenario_text
from hermes_state import SessionDB
from hermes_state.testing import upstream_release as ur


def needs(version: str):
    return pytest.mark.skipif(ur.cached(version) is None,
                              reason=f"upstream {version} is not cached: {ur.fetch_command(version)}")


SCENARIO = textwrap.dedent("""
    name: mixed-tiny
    description: one upstream writer beside one of ours
    duration: 3s
    roles:
      - {name: ours, kind: cli, workload: {burst: 5}}
      - {name: old, kind: upstream, upstream: {version: "VERSION"}, workload: {mode: cli, burst: 5}}
    expect:
      no_lost_writes: {}
      integrity: {}
      fts_exact: {}
      older_release_opens: {version: "VERSION"}
""")


def test_an_uncached_release_skips_the_run_with_the_fetch_command(tmp_path, monkeypatch):
    monkeypatch.setenv("HERMES_STATE_CACHE", str(tmp_path / "empty-cache"))
    sc = load_scenario_text(SCENARIO.replace("VERSION", "0.19.0"), "mixed-tiny.yaml")
    reason = upstream_missing(sc)
    assert reason is not None and "python -m chaos upstream fetch 0.19.0" in reason
    with pytest.raises(ur.NotCached) as err:
        ur.UpstreamProcess("0.19.0", tmp_path)
    assert err.value.command == "python -m chaos upstream fetch 0.19.0"


def test_an_upstream_role_needs_its_release_and_only_it_takes_one():
    from chaos.scenario import ScenarioError

    bad = SCENARIO.replace('upstream: {version: "VERSION"}, ', "")
    with pytest.raises(ScenarioError, match="names its release"):
        load_scenario_text(bad.replace("VERSION", "0.19.0"), "x.yaml")
    bad = SCENARIO.replace("kind: cli, workload", 'kind: cli, upstream: {version: "0.19.0"}, workload')
    with pytest.raises(ScenarioError, match="only to kind upstream"):
        load_scenario_text(bad.replace("VERSION", "0.19.0"), "x.yaml")


@needs(ur.BASELINE)
def test_the_release_runs_in_isolation_and_shares_the_store_with_ours(tmp_path):
    path = tmp_path / "state.db"
    with ur.UpstreamProcess(ur.BASELINE, tmp_path) as up:
        assert up.upstream_file.startswith(str(ur.release_dir(ur.BASELINE)))
        opened = up.open(path)
        assert opened["schema_version"] == 22
        up.call("create_session", "u1", "cli")
        up.call("append_message", "u1", "user", "written by upstream zanzibar")
    with SessionDB(path) as db:  # ours migrates 22 -> 23 and finds upstream's row
        assert [h["session_id"] for h in db.search_messages("zanzibar")] == ["u1"]
        db.append_message("u1", "assistant", "answered by ours quokka")
    with ur.UpstreamProcess(ur.BASELINE, tmp_path) as up:
        up.open(path)
        assert up.call("message_count") == 2
        assert len(up.call("search_messages", "quokka")) == 1


@needs(ur.BASELINE)
def test_a_crash_armed_on_a_statement_kills_the_release_mid_open(tmp_path):
    path = tmp_path / "state.db"
    up = ur.UpstreamProcess(ur.BASELINE, tmp_path, crash_at=ur.CrashAt("CREATE VIRTUAL TABLE"))
    with pytest.raises(ur.UpstreamDied) as err:
        up.open(path)
    assert err.value.returncode == -9
    with SessionDB(path) as db:  # ours completes what the killed open left
        db.create_session("s", source="cli")
        assert db.connection.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@needs(ur.BASELINE)
def test_a_mixed_scenario_passes_every_check(tmp_path):
    from rich.console import Console

    from chaos.sweep import run as run_scenario

    sc = load_scenario_text(SCENARIO.replace("VERSION", ur.BASELINE), "mixed-tiny.yaml")
    result = run_scenario(sc, out_dir=tmp_path, console=Console(quiet=True))
    verdicts = {v.checker: v.status for v in result.verdicts}
    assert verdicts == {"no_lost_writes": "PASS", "integrity": "PASS", "fts_exact": "PASS",
                        "older_release_opens": "PASS", "liveness": "PASS"}, \
        result.results["verdicts"]
    conn = sqlite3.connect(str(result.run_dir / "home" / "state.db"))
    assert conn.execute("SELECT COUNT(*) FROM messages WHERE platform_message_id LIKE 'old-%'"
                        ).fetchone()[0] == 5
