"""Store fixtures (SPEC §16.4 ``store:``, §16.6, §12): real stores written to tmp paths."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from chaos import fixtures
from chaos.scenario import ScenarioError, load_scenario_text
from hermes_state import SessionDB

ROOT = Path(__file__).resolve().parents[1]


def run_home(tmp_path: Path) -> Path:
    home = tmp_path / "run" / "home"
    home.mkdir(parents=True)
    return home / "state.db"


def rows(db: Path, sql: str) -> list:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_generated_fixture_has_the_asked_rows_and_no_payload_ids(tmp_path):
    db = run_home(tmp_path)
    out = fixtures.prepare_store({"fixture": "generated", "sessions": 7, "messages": 101}, db,
                                 seed=3)
    assert out["sessions"] == 7 and out["messages"] == 101 and out["bytes"] == db.stat().st_size
    assert rows(db, "SELECT count(*) FROM sessions") == [(7,)]
    assert rows(db, "SELECT count(*) FROM messages") == [(101,)]
    # no checker may mistake fixture rows for the run's own appends
    assert rows(db, "SELECT count(*) FROM messages WHERE platform_message_id IS NOT NULL") == [(0,)]
    assert rows(db, "SELECT sum(message_count) FROM sessions") == [(101,)]
    # the index covers them: search finds fixture content
    with SessionDB(db) as s:
        assert s.search_messages("fixture")


def test_generated_fixture_is_deterministic_per_seed(tmp_path):
    texts = []
    for seed in (5, 5, 6):
        db = run_home(tmp_path / f"s{seed}-{len(texts)}")
        fixtures.prepare_store({"fixture": "generated", "sessions": 2, "messages": 10}, db,
                               seed=seed)
        texts.append(rows(db, "SELECT content FROM messages ORDER BY id"))
    assert texts[0] == texts[1] != texts[2]


def test_schema_fixture_is_at_its_version_and_writes_its_manifest(tmp_path):
    db = run_home(tmp_path)
    out = fixtures.prepare_store({"fixture": "schema_v10"}, db, seed=1)
    assert out["version"] == 10
    assert rows(db, "SELECT version FROM schema_version") == [(10,)]
    manifest = json.loads((tmp_path / "run" / fixtures.MANIFEST_NAME).read_text())
    assert manifest["version"] == 10
    assert manifest["counts"]["messages"] == rows(db, "SELECT count(*) FROM messages")[0][0] > 0


@pytest.mark.parametrize("fixture,check", [
    ("zeroed", lambda b: len(b) == 16384 and set(b) == {0}),
    ("empty_file", lambda b: b == b""),
    ("not_sqlite", lambda b: b and not b.startswith(b"SQLite format 3")),
])
def test_damaged_fixtures_are_quarantined_by_the_first_opener(tmp_path, fixture, check):
    db = run_home(tmp_path)
    fixtures.prepare_store({"fixture": fixture}, db)
    original = db.read_bytes()
    assert check(original)
    with SessionDB(db) as s:
        assert s.quarantined_to is not None
        assert s.quarantined_to.read_bytes() == original
        s.create_session("a", source="cli")


def test_backup_source_is_written_when_asked(tmp_path):
    db = run_home(tmp_path)
    out = fixtures.prepare_store({"fixture": "generated", "sessions": 2, "messages": 4}, db,
                                 need_backup=True)
    backup = Path(out["backup"])
    assert backup == tmp_path / "run" / "sources" / "backup.db"
    assert rows(backup, "SELECT count(*) FROM messages") == [(4,)]
    assert rows(backup, "PRAGMA application_id") == rows(db, "PRAGMA application_id")


def test_parse_size():
    assert fixtures.parse_size("16M") == 16 * 1024 * 1024
    assert fixtures.parse_size("512K") == 512 * 1024
    for bad in ("16", "0M", "16MB", "-1M", ""):
        with pytest.raises(ValueError, match="bad size"):
            fixtures.parse_size(bad)


BASE = """name: t
description: x
duration: 5s
{store}
roles:
  - {{name: g, kind: gateway}}
nemesis:
{steps}
expect: {{integrity: {{}}}}
"""


def problems(store: str, steps: str = "  []") -> list[str]:
    text = BASE.format(store=store, steps=steps)
    if steps == "  []":
        text = text.replace("nemesis:\n  []\n", "")
    try:
        load_scenario_text(text, "t.yaml")
    except ScenarioError as exc:
        return [f"{p.field}: {p.message}" for p in exc.problems]
    return []


def test_scenario_store_fields_are_validated():
    assert problems("store: {fixture: generated, sessions: 3, messages: 9}") == []
    assert problems("store: {fixture: schema_v22}") == []
    assert any("schema_v23" in p or "store.fixture" in p
               for p in problems("store: {fixture: schema_v23}"))
    assert problems("store: {fixture: empty, sessions: 3}") == [
        "store.sessions: 'sessions' applies to fixture 'generated' only, not 'empty'"]
    assert problems("store: {fixture: empty, tmpfs: 2G}") == [
        "store.tmpfs: tmpfs 2G is outside 1M..1G"]
    assert problems("store: {fixture: empty}", "  - {at: 1s, fault: fill_disk}")[0].startswith(
        "nemesis[0].fault: fill_disk needs the store on its own tmpfs")
    assert problems("store: {fixture: empty, tmpfs: 16M}", "  - {at: 1s, fault: fill_disk}") == []
    assert problems("store: {fixture: empty}",
                    "  - {at: 1s, fault: replace_db, how: cp, source: backup}")[0].startswith(
        "nemesis[0].source: cp of the fixture's own backup")


def test_resolved_store_fills_only_its_fixtures_defaults():
    sc = load_scenario_text(BASE.format(store="store: {fixture: generated}", steps="  []")
                            .replace("nemesis:\n  []\n", ""), "t.yaml")
    assert sc.store == {"fixture": "generated", "sessions": 20, "messages": 1000}
    sc = load_scenario_text(BASE.format(store="store: {fixture: empty}", steps="  []")
                            .replace("nemesis:\n  []\n", ""), "t.yaml")
    assert sc.store == {"fixture": "empty"}


def _can_mount(tmp_path: Path) -> bool:
    try:
        fixtures.mount_tmpfs(tmp_path / "probe", 1024 * 1024).unmount()
        return True
    except fixtures.TmpfsUnavailable:
        return False


def test_tmpfs_mount_keeps_the_files_after_unmount(tmp_path):
    if not _can_mount(tmp_path):
        pytest.skip("cannot mount a tmpfs here (needs root)")
    home = tmp_path / "run" / "home"
    mount = fixtures.mount_tmpfs(home, 4 * 1024 * 1024)
    assert os.path.ismount(home)
    fixtures.prepare_store({"fixture": "generated", "sessions": 1, "messages": 3},
                           home / "state.db")
    (home / ".chaos-balloon").write_bytes(b"\0" * 4096)  # a fill_disk never freed
    mount.unmount()
    assert not (home / ".chaos-balloon").exists()
    assert not os.path.ismount(home)
    assert rows(home / "state.db", "SELECT count(*) FROM messages") == [(3,)]


def test_a_run_whose_tmpfs_cannot_be_mounted_is_skipped_not_passed(tmp_path):
    scenario = tmp_path / "s.yaml"
    scenario.write_text(BASE.format(store="store: {fixture: empty, tmpfs: 4M}",
                                    steps="  - {at: 1s, fault: fill_disk}"))
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()  # no `mount` on PATH: the mount cannot happen
    env = {**os.environ, "PATH": str(empty_bin)}
    proc = subprocess.run([sys.executable, "-m", "chaos", "run", str(scenario), "--out",
                           str(tmp_path / "runs"), "--json"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr  # SKIPPED: distinct from a pass
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    assert [v["status"] for v in results["verdicts"]] == ["SKIPPED"]
    assert results["verdict"] == "SKIPPED" and results["exit_code"] == 4
    assert "tmpfs is unavailable" in results["verdicts"][0]["summary"]
    assert results["processes"] == []
    assert (Path(results["run_dir"]) / "report.html").exists()  # a skipped run has its page too


def test_fixture_preserved_checker_passes_a_migrated_fixture_and_fails_a_lost_row(tmp_path):
    from chaos.checkers import CHECKERS, CheckContext

    db = run_home(tmp_path)
    fixtures.prepare_store({"fixture": "schema_v16"}, db, seed=2)
    with SessionDB(db) as s:  # the current code migrates it to version 23
        s.create_session("added-by-a-role", source="cli")
    ctx = CheckContext(history=[], store_path=db, home=db.parent, run_dir=tmp_path / "run",
                       scenario={})
    verdict = CHECKERS["fixture_preserved"](ctx, {})
    assert verdict.status == "PASS", verdict.summary
    raw = sqlite3.connect(db)
    raw.execute("DELETE FROM messages WHERE id = (SELECT max(id) FROM messages "
                "WHERE session_id != 'added-by-a-role')")
    raw.commit()
    raw.close()
    verdict = CHECKERS["fixture_preserved"](ctx, {})
    assert verdict.status == "FAIL" and verdict.figures["problems"] >= 1


def test_fixture_preserved_is_inconclusive_without_a_schema_fixture(tmp_path):
    from chaos.checkers import CHECKERS, CheckContext

    db = run_home(tmp_path)
    fixtures.prepare_store({"fixture": "empty"}, db)
    ctx = CheckContext(history=[], store_path=db, home=db.parent, run_dir=tmp_path / "run",
                       scenario={})
    assert CHECKERS["fixture_preserved"](ctx, {}).status == "INCONCLUSIVE"


def test_replace_db_source_file_needs_a_path():
    assert problems("store: {fixture: empty}",
                    "  - {at: 1s, fault: replace_db, source: file}")[0].startswith(
        "nemesis[0].source: source: file needs `path`")
    assert problems("store: {fixture: empty}", "  - {at: 1s, fault: replace_db, source: file, "
                    "path: ../r.db, sidecars: aside}") == []
