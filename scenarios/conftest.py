"""Extra assertions on the shipped scenarios' runs (SPEC §16.7).

The pytest plugin (:mod:`chaos.pytest_plugin`) collects each ``*.yaml`` here as test items and
fails an item unless every checker passed. After each run it calls the hook below, which checks
what a scenario is meant to show beyond its verdicts (so each scenario runs once per seed, not
once for the plugin and again for a test).
"""

from __future__ import annotations

import json
from pathlib import Path


def _history(result) -> list[dict]:
    lines = (result.run_dir / "history.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _stale_wal(result) -> None:
    verdicts = {v.checker: v.status for v in result.verdicts}
    assert verdicts == {"no_lost_writes": "PASS", "stale_wal_refusal": "PASS",
                        "sticky_refusal": "PASS", "integrity": "PASS", "recovery": "PASS",
                        "checkpoint_cadence": "PASS", "single_wal_generation": "PASS",
                        "error_taxonomy": "PASS", "no_lockup": "PASS",
                        "must_observe": "PASS", "liveness": "PASS"}, verdicts
    history = _history(result)
    # The gateway was refused with the stale-WAL error and left evidence beside the store.
    assert any(r.get("type") == "fail" and r.get("error") == "DeletedWalGenerationError"
               and r["process"] == "gateway-0" for r in history)
    assert any((result.run_dir / "home").glob("state.db.retired-wal-*/manifest.json"))
    # Both CLIs started while the gateway lived refused to open; the late one wrote.
    opens = {r["process"]: r["type"] for r in history
             if r.get("op") == "open" and r.get("type") in ("ok", "fail")}
    assert opens["cli-0"] == "fail" and opens["cli-1"] == "fail", opens
    assert opens["cli-after-0"] == "ok", opens
    assert (result.run_dir / "logs" / "gateway-0.log").exists()
    assert "stale_wal_refusal" in result.console_text and "PASS" in result.console_text


def _contention(result) -> None:
    assert all(v.status == "PASS" for v in result.verdicts), result.verdicts
    writers = [p for p in result.results["processes"] if p["process"].startswith("writer-")]
    assert len(writers) == 4 and all(p["exitcode"] == 0 for p in writers), writers


def _lock_stall(result) -> None:
    jitter = next(v for v in result.verdicts if v.checker == "retry_jitter")
    assert jitter.status == "PASS", jitter
    assert jitter.figures["retries"] >= 12, jitter.figures


def _salvage(result) -> None:
    """The final salvage brought back rows that were only in the capture (so no_lost_writes
    passing without an allowance for captures is the salvage's doing), and the one under the new
    gateway was refused and changed nothing."""
    import re
    import sqlite3

    runs = [r for r in _history(result) if r.get("type") == "nemesis"
            and r.get("fault") == "run" and r.get("phase") == "done"]
    assert [r["exit_code"] for r in runs] == [1, 0], runs
    assert "Refusing `sessions salvage`" in runs[0]["stderr"]
    appended = int(re.search(r"appended (\d+) message", runs[1]["stdout"]).group(1))
    assert appended > 0, runs[1]["stdout"]
    conn = sqlite3.connect(result.run_dir / "final" / "state.db")
    try:
        records = conn.execute("SELECT value FROM state_meta WHERE key LIKE 'salvage:%'").fetchall()
    finally:
        conn.close()
    assert len(records) == 1 and json.loads(records[0][0])["messages_added"], records


def _quarantine_copies(result) -> None:
    """Each quarantine stepped over the planted copies of its second (two whole copies, a lone
    -wal, a lone -shm) to -5.bak; the first took the killed gateway's -wal and -shm along."""
    home = result.run_dir / "home"
    backups = [r["backup"] for r in _history(result) if r.get("event") == "quarantine"]
    assert backups and all(b.endswith("-5.bak") for b in backups), backups
    assert all((home / (Path(backups[0]).name + s)).is_file() for s in ("-wal", "-shm"))


EXTRA = {"stale-wal": _stale_wal, "contention": _contention, "lock-stall": _lock_stall,
         "salvage-after-wal-deleted": _salvage,
         "quarantine-beside-earlier-copies": _quarantine_copies,
         "quarantine-twice": _quarantine_copies}


def pytest_chaos_scenario_result(item, result):
    check = EXTRA.get(item.scenario.name)
    if check is not None:
        check(result)
