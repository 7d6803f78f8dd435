"""Read-only commands and API paths work on every store version a writable open would migrate
(SPEC §4; issue 22 item 6). A generator: every fixture version 2..31 (``build_fixture`` for
2..23, the upstream 25/31 shapes, the four stores written by real upstream code) x every
read-only method of ``SessionDB`` (enumerated from the class: a method the read-only handle
refuses is a writer and is left out) and every read-only CLI command.

What a read-only open shows of an old store must be exactly what it shows after a writable
open migrated that store, and the store must not change (main file bytes, schema version).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import sqlite3
from pathlib import Path

import pytest
from sweep import cases, tally

from hermes_state import SessionDB
from hermes_state.cli import main
from hermes_state.testing import FIXTURE_ROOT, build_fixture, copy_store
from hermes_state.testing import upstream_shapes

VERSIONS = [f"fixture-v{v}" for v in range(2, 24)]
SHAPES = [f"shape-{s}" for s in upstream_shapes.SHAPES]
UPSTREAM = [f"upstream-{v}" for v in ("v2", "v11", "v22", "v31")]
ALL = VERSIONS + SHAPES + UPSTREAM
SAMPLE = ["fixture-v2", "fixture-v11", "fixture-v17", "fixture-v22", "fixture-v23",
          "shape-v31-fresh", "upstream-v2", "upstream-v11", "upstream-v22", "upstream-v31"]

#: Not reads of the store, or not callable without a session of their own.
NOT_READS = {"close", "checkpoint", "divert_to_spool", "sanitize_title"}
#: Required parameters the generator knows how to fill (anything else: the method is skipped,
#: and counted, so a new method with an unknown parameter shows up in the tally).
KNOWN = {"session_id", "id_or_prefix", "query", "title", "key", "around_message_id",
         "since_message_id", "target_message_id", "platform_message_id", "job_id", "chat_id",
         "thread_id", "user_id", "platform", "source", "session_key"}


def build(name: str, dest: Path) -> Path:
    """The store ``name`` as ``dest/state.db`` (a copy for the bundled ones)."""
    kind, _, which = name.partition("-")
    if kind == "fixture":
        path = dest / "state.db"
        build_fixture(path, int(which[1:]))
        return path
    if kind == "shape":
        return upstream_shapes.build(dest, which)
    return copy_store(FIXTURE_ROOT / which / "state.db", dest)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def raw_version(path: Path):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return conn.execute("SELECT version FROM schema_version").fetchall()
    finally:
        conn.close()


def raw_token(path: Path):
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        row = conn.execute("SELECT value FROM state_meta WHERE key = 'db_file_generation'"
                           ).fetchone()
    except sqlite3.OperationalError:
        row = None
    finally:
        conn.close()
    return None if row is None else row[0]


def context(path: Path) -> dict:
    """A session with messages, one of its message ids, a title and a word to search for."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        sid, mid, content = conn.execute(
            "SELECT session_id, id, content FROM messages WHERE role = 'user' AND "
            "typeof(content) = 'text' ORDER BY id LIMIT 1").fetchone()
        cols = {r[1] for r in conn.execute("PRAGMA table_info(sessions)")}
        title = None
        if "title" in cols:
            row = conn.execute("SELECT title FROM sessions WHERE title IS NOT NULL "
                               "ORDER BY id LIMIT 1").fetchone()
            title = row[0] if row else None
    finally:
        conn.close()
    words = [w for w in content.split() if w.isalpha() and len(w) > 3] or content.split()
    return {"session_id": sid, "id_or_prefix": sid[:3], "query": words[0],
            "title": title or "no such title", "key": "db_file_generation",
            "around_message_id": mid, "since_message_id": mid, "target_message_id": mid,
            "platform_message_id": "p-1", "job_id": "job", "chat_id": "1", "thread_id": "1",
            "user_id": "1", "platform": "telegram", "source": "telegram", "session_key": "k"}


def read_methods() -> list[str]:
    return sorted(n for n, f in inspect.getmembers(SessionDB, inspect.isfunction)
                  if not n.startswith("_") and n not in NOT_READS)


def call_all(db: SessionDB, ctx: dict) -> tuple[dict, list[str], list[str]]:
    """``({method: result or error}, writers, skipped)`` of every public method."""
    results, writers, skipped = {}, [], []
    for name in read_methods():
        sig = inspect.signature(getattr(SessionDB, name))
        kwargs = {}
        unknown = False
        for pname, param in list(sig.parameters.items())[1:]:
            if param.kind in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                continue
            if param.default is param.empty:
                if pname not in KNOWN:
                    unknown = True
                    break
                kwargs[pname] = ctx[pname]
        if unknown:
            skipped.append(name)
            continue
        try:
            value = getattr(db, name)(**kwargs)
            if inspect.isgenerator(value):
                value = list(value)
            results[name] = json.loads(json.dumps(value, default=repr))
        except Exception as exc:  # noqa: BLE001 - compared, and asserted below
            if "handle is read-only (mode=ro)" in str(exc):
                writers.append(name)
                continue
            results[name] = f"{type(exc).__name__}: {exc}"
    return results, writers, skipped


RAW_ERRORS = ("no such table", "no such column", "Traceback", "OperationalError",
              "has no column")


@pytest.mark.parametrize("name", cases(ALL, SAMPLE))
def test_read_only_api_on_an_unmigrated_store_equals_the_migrated_one(tmp_path, name, request):
    path = build(name, tmp_path / "store")
    before, version = digest(path), raw_version(path)
    ctx = context(path)
    with SessionDB(path, read_only=True) as db:
        ro, writers, skipped = call_all(db, ctx)
    assert digest(path) == before and raw_version(path) == version  # the store never changes

    migrated = copy_store(path, tmp_path / "migrated")
    SessionDB(migrated).close()  # a writable open migrates it
    with SessionDB(migrated, read_only=True) as db:
        after, _, _ = call_all(db, ctx)

    errors = {m: r for m, r in ro.items() if isinstance(r, str) and
              any(e in r for e in RAW_ERRORS)}
    # get_meta asks for the identity token: the store's own (or none), never one minted for
    # the private copy; the migrated comparison store has its own token by design.
    assert ro.pop("get_meta") == raw_token(path)
    after.pop("get_meta", None)
    differ = sorted(m for m in ro if ro[m] != after.get(m))
    tally(request, "read-only x versions (API)", len(ro),
          [f"{name}: {m}: {r}" for m, r in errors.items()] +
          [f"{name}: {m} differs from the migrated store" for m in differ])
    assert not errors, errors
    assert differ == [], {m: (ro[m], after.get(m)) for m in differ}
    assert len(ro) >= 40 and "search_messages" in ro and "export_session" in ro, (ro, skipped)
    assert "create_session" in writers and "clear_messages" in writers, writers


READ_COMMANDS = [
    ("sessions", "list"), ("sessions", "list", "--json"), ("sessions", "show", "{sid}"),
    ("sessions", "show", "{sid}", "--json"), ("sessions", "search", "{query}"),
    ("sessions", "search", "{query}", "--json", "--role", "user"),
    ("sessions", "search", "--id", "{prefix}"), ("sessions", "export"),
    ("sessions", "export", "{sid}", "--format", "md"), ("sessions", "export", "--format", "jsonl"),
    ("doctor",), ("doctor", "--json"), ("backup", "list"),
    ("sessions", "prune", "--dry-run", "--older-than", "0"),
    ("sessions", "archive", "--older-than", "0", "--dry-run"),
    ("sessions", "optimize", "--dry-run"), ("sessions", "optimize-storage", "--dry-run"),
    ("sessions", "replay-spool", "--dry-run"),
]


@pytest.mark.parametrize("name", cases(ALL, SAMPLE))
def test_read_only_commands_work_on_every_version_and_change_nothing(tmp_path, name, capsys,
                                                                     request):
    path = build(name, tmp_path / "store")
    before, version = digest(path), raw_version(path)
    ctx = context(path)
    found = []
    for argv in READ_COMMANDS:
        argv = [a.format(sid=ctx["session_id"], query=ctx["query"], prefix=ctx["id_or_prefix"])
                for a in argv]
        code = main(["--home", str(path.parent), *argv])
        out = capsys.readouterr()
        bad = [e for e in RAW_ERRORS if e in out.err or e in out.out]
        if bad or code not in (0, 1) or (code == 1 and argv[0] != "doctor"):
            found.append(f"{name}: {' '.join(argv)} -> {code}: {out.err.strip()[:200]}")
    tally(request, "read-only x versions (CLI)", len(READ_COMMANDS), found)
    assert found == []
    assert digest(path) == before and raw_version(path) == version


def test_a_copy_that_cannot_be_made_is_named_not_a_raw_error(tmp_path, monkeypatch, capsys):
    """No room in TMPDIR for the migrated copy: a named error with the version and the way
    out, and the store unchanged."""
    from hermes_state.store import migrated_copy

    path = build("upstream-v11", tmp_path / "store")
    before = digest(path)
    monkeypatch.setattr(migrated_copy, "COPY_SLACK_BYTES", 1 << 62)
    with pytest.raises(migrated_copy.UnmigratedStoreError, match="schema 11") as info:
        SessionDB(path, read_only=True)
    assert "TMPDIR" in info.value.operator_detail
    assert main(["--home", str(path.parent), "sessions", "search", "kubernetes"]) == 1
    err = capsys.readouterr().err
    assert "schema 11" in err and "Traceback" not in err and "no such" not in err
    assert digest(path) == before


def test_the_private_copy_is_removed_at_close(tmp_path):
    path = build("upstream-v2", tmp_path / "store")
    db = SessionDB(path, read_only=True)
    copy_dir = Path(db.connection.migrated_copy["directory"])
    assert copy_dir.is_dir() and db.search_messages("kubernetes")
    db.close()
    assert not copy_dir.exists()
