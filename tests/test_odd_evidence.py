"""Evidence files and metadata rows of unexpected shape never crash a command (issue 11.10).

Hypothesis writes arbitrary JSON (and arbitrary bytes) as snapshot and capture manifests and as
spool lines, and arbitrary SQLite values (NULL, integers of any size, reals, text, blobs) into
the ``state_meta`` rows and the ``schema_version`` row the store reads. doctor, backup, backup
list, restore, replay-spool, the gateway's calls (open, replay, ownership, pending requests) and
read-only opens must finish or refuse by name (a ``HermesStateError``), never raise anything
else. A 0-byte or non-SQLite ``state.db`` is never a "verified" snapshot and never counts
toward retention; retention never evicts the last good snapshot.
"""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hermes_state import SessionDB
from hermes_state.api.spool import replay_spool
from hermes_state.errors import HermesStateError
from hermes_state.operator.doctor import run_doctor
from hermes_state.operator.snapshots import (
    SnapshotFailed,
    create_snapshot,
    list_snapshots,
    restore_snapshot,
)
from hermes_state.processes import writer_gate as maintenance

SETTINGS = settings(max_examples=int(os.environ.get("HERMES_TEST_EXAMPLES", 15)), deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner,
                                                                 max_size=5),
    max_leaves=12)

# Objects shaped like our manifests / records, with every field of any type.
MANIFEST_KEYS = ("version", "kind", "verified", "created_at", "reason", "sha256", "bytes",
                 "sessions", "messages", "wal", "main", "pid", "captured_at", "trigger", "id",
                 "dir", "path", "quick_check", "error")
manifest_like = st.dictionaries(st.sampled_from(MANIFEST_KEYS), json_values, max_size=8)
SPOOL_KEYS = ("spool_id", "session_id", "spooled_at", "message")
MESSAGE_KEYS = ("role", "content", "timestamp", "tool_calls", "token_count", "tool_name",
                "active", "observed", "display_metadata", "reasoning_details", "x")
spool_like = st.fixed_dictionaries(
    {}, optional={"spool_id": json_values | st.text(min_size=1, max_size=10),
                  "session_id": json_values | st.text(min_size=1, max_size=10),
                  "message": st.dictionaries(st.sampled_from(MESSAGE_KEYS), json_values,
                                             max_size=5) | json_values})
evidence = (manifest_like.map(json.dumps) | json_values.map(json.dumps)
            | st.binary(max_size=64).map(lambda b: b.decode("latin-1")))

sqlite_values = (st.none() | st.integers(min_value=-(2 ** 63), max_value=2 ** 63 - 1)
                 | st.floats(allow_nan=False) | st.text(max_size=20) | st.binary(max_size=12)
                 | json_values.map(json.dumps))
META_KEYS = ("db_file_generation", "fts_rebuild_high_water", "fts_rebuild_progress",
             "fts_stale", "fts_backfill", "gateway_owner", "maintenance_request:r1",
             "spool_imported:abc", "auto_title:s")


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("template") / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="cli")
        db.append_message("s", "user", "hello odd world")
    return path


def fresh(template: Path, tmp_path: Path, name: str) -> Path:
    home = tmp_path / name
    if home.exists():
        shutil.rmtree(home)
    home.mkdir()
    shutil.copyfile(template, home / "state.db")
    return home / "state.db"


def named_or_done(fn, *args, **kw):
    """Run ``fn``; a HermesStateError (a named refusal) is fine, anything else fails the test."""
    try:
        return fn(*args, **kw)
    except HermesStateError:
        return None


def gateway_calls(db_path: Path) -> None:
    """What the gateway role does with a store: open, replay, claim, run requests, write."""
    db = named_or_done(SessionDB, db_path)
    if db is None:
        return
    with db:
        named_or_done(replay_spool, db)
        named_or_done(maintenance.run_pending_requests, db)
        maintenance.gateway_owner_pid(db_path)
        named_or_done(db.append_message, "s", "user", "gateway turn")
        named_or_done(db.search_messages, "hello")


def every_command(db_path: Path) -> None:
    run_doctor(db_path)
    list_snapshots(db_path)
    named_or_done(create_snapshot, db_path)
    for snap in list_snapshots(db_path):
        if snap.get("kind") == "snapshot":
            named_or_done(restore_snapshot, db_path, snap["id"])
    gateway_calls(db_path)
    ro = named_or_done(SessionDB, db_path, read_only=True)
    if ro is not None:
        with ro:
            named_or_done(ro.list_sessions)
            named_or_done(ro.search_messages, "hello")


@SETTINGS
@given(key=st.sampled_from(META_KEYS), value=sqlite_values)
def test_state_meta_rows_of_any_shape(template, tmp_path, key, value):
    db_path = fresh(template, tmp_path, "meta")
    conn = sqlite3.connect(db_path)
    conn.execute("INSERT OR REPLACE INTO state_meta(key, value) VALUES (?, ?)", (key, value))
    conn.commit()
    conn.close()
    every_command(db_path)


@SETTINGS
@given(value=sqlite_values.filter(lambda v: v is not None),  # the column is NOT NULL
       rows=st.integers(min_value=0, max_value=2))
def test_schema_version_rows_of_any_shape(template, tmp_path, value, rows):
    db_path = fresh(template, tmp_path, "version")
    conn = sqlite3.connect(db_path)
    conn.execute("DELETE FROM schema_version")
    for _ in range(rows):
        conn.execute("INSERT INTO schema_version(version) VALUES (?)", (value,))
    conn.commit()
    conn.close()
    every_command(db_path)


@SETTINGS
@given(snapshot=evidence, capture=evidence)
def test_manifests_of_any_shape(template, tmp_path, snapshot, capture):
    db_path = fresh(template, tmp_path, "manifests")
    snap_dir = db_path.parent / "state-snapshots" / "20300101T000000Z-manual"
    snap_dir.mkdir(parents=True)
    shutil.copyfile(template, snap_dir / "state.db")
    (snap_dir / "manifest.json").write_text(snapshot)
    cap = db_path.parent / "state.db.retired-wal-20300101T000000Z-42"
    cap.mkdir()
    shutil.copyfile(template, cap / "state.db")
    (cap / "manifest.json").write_text(capture)
    every_command(db_path)
    from hermes_state.operator.recover import recover

    named_or_done(recover, cap / "state.db", inspect_only=True)


@SETTINGS
@given(lines=st.lists(spool_like.map(json.dumps) | evidence, min_size=1, max_size=5))
def test_spool_lines_of_any_shape(template, tmp_path, lines):
    db_path = fresh(template, tmp_path, "spool")
    spool = db_path.parent / "sessions"
    spool.mkdir(mode=0o700)
    (spool / "s.jsonl").write_text("\n".join(line.replace("\n", " ") for line in lines) + "\n")
    with SessionDB(db_path) as db:
        result = replay_spool(db)
        again = replay_spool(db)
    assert result["imported"] + result["failed"] + result["skipped"] <= result["records"]
    assert again["imported"] == 0  # exactly once, whatever the lines were
    run_doctor(db_path)
    gateway_calls(db_path)


# --------------------------------------------------------------------------- verified snapshots

@pytest.mark.parametrize("content", [b"", b"\0" * 4096, b"not a database" * 100,
                                     None])  # None: a valid SQLite file that is no store
def test_an_empty_or_foreign_store_is_never_a_verified_snapshot(tmp_path, content):
    db = tmp_path / "state.db"
    if content is None:
        sqlite3.connect(db).execute("CREATE TABLE t(x)").connection.close()
    else:
        db.write_bytes(content)
    with pytest.raises(SnapshotFailed) as info:
        create_snapshot(db)
    assert info.value.result["verified"] is False
    assert [s["verified"] for s in list_snapshots(db)] == [False]


def test_retention_never_evicts_the_last_good_snapshot(tmp_path, template):
    """Twenty later snapshots of an emptied store, and planted 'verified' manifests whose
    images are gone or garbage, never push the one good snapshot out (keep=1 included)."""
    db = tmp_path / "state.db"
    shutil.copyfile(template, db)
    good = create_snapshot(db, keep=1)["id"]
    root = tmp_path / "state-snapshots"
    for n in range(3):  # forged: "verified" manifests without a real image
        fake = root / f"2099010{n + 1}T000000Z-manual"
        fake.mkdir()
        (fake / "state.db").write_bytes(b"garbage" if n else b"")
        (fake / "manifest.json").write_text(json.dumps({
            "verified": True, "created_at": f"2099-01-0{n + 1}T00:00:00Z", "bytes": 7}))
    db.write_bytes(b"")
    for _ in range(3):
        with pytest.raises(SnapshotFailed):
            create_snapshot(db, keep=1)
    assert (root / good / "state.db").exists()
    assert good in [s["id"] for s in list_snapshots(db) if s["verified"]]
    os.unlink(db)
    shutil.copyfile(template, db)
    newest = create_snapshot(db, keep=1)
    assert newest["pruned"] == [good]  # a real, newer good snapshot may replace it
    assert all((root / f"2099010{n + 1}T000000Z-manual").exists() for n in range(3))
